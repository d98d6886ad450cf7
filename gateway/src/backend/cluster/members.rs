//! Which nodes belong to a cluster, as the cluster itself says: the seeds, the nodes of the slot map (`CLUSTER
//! SLOTS`) and those a known node lists (`CLUSTER NODES`). A redirect may name any `host:port`; a node outside
//! these gets no connection, and so none of the credentials the gateway logs in with, until a known node has
//! listed it. `CLUSTER NODES` also tells which slots a node is migrating, and where to, which is how a script's
//! `ASK` is checked (see `redirect`).

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::{ClusterBackend, ClusterSpec};
use crate::backend::NodeRole;
use crate::backend::direct::DirectConnection;
use crate::resp::Protocol;
use switchyard_schemas::placement::SLOTS;

/// How long one node's `CLUSTER NODES` answers every check that needs it. Checks come from replies (a script can
/// return a forged `ASK` as often as it likes): each costs the cluster at most one `CLUSTER NODES` per node in
/// this time, asked once for all the checks waiting on it.
const VIEW_REUSE: Duration = Duration::from_millis(200);

/// What one node's `CLUSTER NODES` says.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct NodesView {
    /// `host:port` of every node it knows that has an address.
    pub(super) members: Vec<String>,
    /// The slots the answering node is migrating, each with the `host:port` of the node importing it.
    pub(super) migrating: Vec<(u16, String)>,
}

/// What the cluster's nodes said lately about its members, one worker's.
#[derive(Default)]
pub(super) struct Members {
    /// The members the last `CLUSTER NODES` read for a membership check listed.
    listed: RefCell<Vec<String>>,
    /// Each node's last answer, while it is recent enough to reuse, and the nodes being asked now.
    views: RefCell<Vec<(String, Instant, Rc<NodesView>)>>,
    asking: RefCell<Vec<String>>,
    answered: Notify,
}

impl ClusterBackend {
    /// Whether the cluster's own topology names `addr` (see the module's doc).
    pub(super) fn is_member(&self, addr: &str) -> bool {
        self.spec.seeds.iter().any(|seed| seed == addr)
            || self.topology.in_slot_map(addr)
            || self.members.listed.borrow().iter().any(|m| m == addr)
    }

    /// Whether `addr` is a member, asking the known nodes for `CLUSTER NODES` when the topology does not name it
    /// yet (a master just added): the check before a redirect is followed.
    pub(crate) async fn confirms_member(&self, addr: &str) -> bool {
        if self.is_member(addr) {
            return true;
        }
        self.learn_members().await;
        self.is_member(addr)
    }

    /// Asks the known nodes for `CLUSTER NODES`, in turn until one answers, and remembers the members it lists.
    pub(super) async fn learn_members(&self) {
        for addr in self.topology.candidates() {
            if let Some(view) = self.nodes_view(&addr).await {
                self.members.listed.replace(view.members.clone());
                return;
            }
        }
    }

    /// The node importing `slot` from the member at `addr`, as that node's own `CLUSTER NODES` says, if it is
    /// migrating the slot.
    pub(super) async fn importer_of(&self, addr: &str, slot: u16) -> Option<String> {
        let view = self.nodes_view(addr).await?;
        view.migrating
            .iter()
            .find(|(migrating, _)| *migrating == slot)
            .map(|(_, to)| to.clone())
    }

    /// The `CLUSTER NODES` of the member at `addr`: its recent answer, the one being asked for, or a new one.
    async fn nodes_view(&self, addr: &str) -> Option<Rc<NodesView>> {
        let answered = self.members.answered.notified();
        if let Some(view) = self.recent_view(addr) {
            return Some(view);
        }
        if self.members.asking.borrow().iter().any(|a| a == addr) {
            answered.await;
            return self.recent_view(addr);
        }
        self.members.asking.borrow_mut().push(addr.to_string());
        let view = match nodes_of(&self.spec, addr, self.pool.control_timeout()).await {
            Ok(view) => Some(Rc::new(view)),
            Err(e) => {
                tracing::debug!(node = %addr, "cannot read CLUSTER NODES: {e}");
                None
            }
        };
        self.members.asking.borrow_mut().retain(|a| a != addr);
        if let Some(view) = &view {
            let mut views = self.members.views.borrow_mut();
            views.retain(|(node, at, _)| node != addr && at.elapsed() < VIEW_REUSE);
            views.push((addr.to_string(), Instant::now(), Rc::clone(view)));
        }
        self.members.answered.notify_waiters();
        view
    }

    fn recent_view(&self, addr: &str) -> Option<Rc<NodesView>> {
        self.members
            .views
            .borrow()
            .iter()
            .find(|(node, at, _)| node == addr && at.elapsed() < VIEW_REUSE)
            .map(|(_, _, view)| Rc::clone(view))
    }
}

/// Asks the node at `addr` for `CLUSTER NODES`.
async fn nodes_of(spec: &ClusterSpec, addr: &str, timeout: Duration) -> io::Result<NodesView> {
    let node = spec.node(addr, NodeRole::Any).speaking(Protocol::Resp2);
    let answer = async {
        let mut connection = DirectConnection::open(&node, timeout).await?;
        let reply = connection.call(&[b"CLUSTER", b"NODES"]).await?;
        reply
            .text()
            .map(|text| parse_nodes(text, addr))
            .ok_or_else(|| io::Error::other("unusable CLUSTER NODES reply"))
    };
    tokio::time::timeout(timeout * 2, answer)
        .await
        .map_err(|_| io::Error::other("timed out"))?
}

/// Reads `CLUSTER NODES`: one line per node, `<id> <ip:port@cport[,hostname]> <flags> <master> <ping> <pong>
/// <epoch> <link> <slot>...`, where the answering node's own line (`myself`) lists what it migrates as
/// `[slot->-<id>]`. A node without an address yet (`noaddr`, or still in `handshake`) is no member; an empty ip on
/// the answering node's own line is the address the gateway reached it at.
fn parse_nodes(text: &str, answered_by: &str) -> NodesView {
    let host_of_answer = answered_by
        .rsplit_once(':')
        .map_or(answered_by, |(host, _)| host);
    let mut ids: Vec<(&str, String)> = Vec::new();
    let mut migrating: Vec<(u16, &str)> = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let (Some(id), Some(address), Some(flags)) = (fields.first(), fields.get(1), fields.get(2))
        else {
            continue;
        };
        let flags: Vec<&str> = flags.split(',').collect();
        if flags.iter().any(|f| matches!(*f, "noaddr" | "handshake")) {
            continue;
        }
        let address = address.split(['@', ',']).next().unwrap_or_default();
        let Some((ip, port)) = address.rsplit_once(':') else {
            continue;
        };
        if port.parse::<u16>().is_err() {
            continue;
        }
        let myself = flags.contains(&"myself");
        let host = match (ip, myself) {
            ("", true) => host_of_answer,
            ("", false) => continue,
            (ip, _) => ip,
        };
        ids.push((id, format!("{host}:{port}")));
        if myself {
            for slot in fields.iter().skip(8) {
                if let Some(entry) = migration(slot) {
                    migrating.push(entry);
                }
            }
        }
    }
    NodesView {
        migrating: migrating
            .into_iter()
            .filter_map(|(slot, to)| {
                let (_, addr) = ids.iter().find(|(id, _)| *id == to)?;
                Some((slot, addr.clone()))
            })
            .collect(),
        members: ids.into_iter().map(|(_, addr)| addr).collect(),
    }
}

/// `[slot->-<id>]`: the slot and the id of the node importing it.
fn migration(entry: &str) -> Option<(u16, &str)> {
    let inner = entry.strip_prefix('[')?.strip_suffix(']')?;
    let (slot, to) = inner.split_once("->-")?;
    let slot: u16 = slot.parse().ok()?;
    (usize::from(slot) < SLOTS).then_some((slot, to))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_members_and_migrations_from_cluster_nodes() {
        let text = "\
a1 :7000@17000 myself,master - 0 0 1 connected 0-5460 [93->-b2] [94-<-c3]\n\
b2 127.0.0.1:7001@17001,host-b master - 0 0 2 connected 5461-10922\n\
c3 127.0.0.2:7002@17002 master - 0 0 3 connected 10923-16383\n\
c4 :7004@17004 master - 0 0 3 connected\n\
d4 127.0.0.1:7003@17003 handshake - 0 0 0 disconnected\n\
e5 :0@0 master,noaddr - 0 0 0 disconnected\n\
f6 garbage\n";
        let view = parse_nodes(text, "10.0.0.9:7000");
        assert_eq!(
            view,
            NodesView {
                members: vec![
                    "10.0.0.9:7000".to_string(),
                    "127.0.0.1:7001".to_string(),
                    "127.0.0.2:7002".to_string(),
                ],
                migrating: vec![(93, "127.0.0.1:7001".to_string())],
            }
        );
        // Only the answering node's own line says what it migrates.
        let other = "b2 127.0.0.1:7001@17001 master - 0 0 2 connected [5->-a1]\n\
                     a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected\n";
        assert!(parse_nodes(other, "127.0.0.1:7000").migrating.is_empty());
        assert_eq!(migration("[16384->-x]"), None);
        assert_eq!(migration("[12->-x]"), Some((12, "x")));
    }
}
