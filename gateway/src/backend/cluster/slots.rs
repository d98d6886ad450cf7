//! A cluster's slot map: reading `CLUSTER SLOTS`, installing what it says, and the task that keeps it fresh.

use std::cell::Cell;
use std::io;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::{ClusterBackend, ClusterSpec, SLOTS};
use crate::backend::direct::{DirectConnection, Value};
use crate::backend::{Backend, NodeRole};
use crate::resp::Protocol;
use crate::signal::LocalSignal;

/// How often the slot map is re-read when nothing asks for it sooner.
const REFRESH_PERIOD: Duration = Duration::from_secs(5);

/// The shortest time between two refreshes: a burst of MOVED replies (a resharding) costs one refresh each time.
const MIN_REFRESH_INTERVAL: Duration = Duration::from_millis(200);

/// How long a check against the cluster's topology waits for a fresh slot map before it gives up (and the reply it
/// checks goes to the client as it is).
const FRESH_MAP_WAIT: Duration = Duration::from_secs(2);

pub(super) const NO_OWNER: u16 = u16::MAX;

pub(super) struct SlotMap {
    pub(super) owner: Box<[u16]>,
    pub(super) shards: Vec<Shard>,
}

/// A master and the nodes that serve its slots' reads.
pub(super) struct Shard {
    pub(super) addr: String,
    pub(super) master: Rc<Backend>,
    /// Replicas (and the master with `withMaster=true`) for `-slaves` resources; empty otherwise.
    pub(super) reads: Vec<Rc<Backend>>,
}

pub(super) struct RefreshSignal {
    pub(super) wake: LocalSignal,
    pub(super) closed: Cell<bool>,
    /// Refreshes started and ended so far, and the number of the last one that installed a map: a check
    /// against the cluster's topology waits for a map read after it began (see [`ClusterBackend::fresh_map`]).
    pub(super) started: Cell<u64>,
    pub(super) finished: Cell<u64>,
    pub(super) installed: Cell<u64>,
    /// Told when a refresh ends, whatever its outcome.
    pub(super) ended: Notify,
}

impl RefreshSignal {
    pub(super) fn new() -> RefreshSignal {
        RefreshSignal {
            wake: LocalSignal::default(),
            closed: Cell::new(false),
            started: Cell::new(0),
            finished: Cell::new(0),
            installed: Cell::new(0),
            ended: Notify::new(),
        }
    }
}

/// One range of `CLUSTER SLOTS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SlotRange {
    start: u16,
    end: u16,
    master: String,
    replicas: Vec<String>,
}

impl ClusterBackend {
    /// After a MOVED: `slot` now belongs to the master at `addr`.
    pub(super) fn moved(&self, slot: u16, addr: &str) {
        let mut map = self.map.borrow_mut();
        let index = match map.shards.iter().position(|s| s.addr == addr) {
            Some(index) => index,
            None => {
                let master = self.pool.get(&self.spec.node(addr, NodeRole::Any));
                map.shards.push(Shard {
                    addr: addr.to_string(),
                    master,
                    reads: Vec::new(),
                });
                map.shards.len() - 1
            }
        };
        if let (Ok(index), Some(owner)) =
            (u16::try_from(index), map.owner.get_mut(usize::from(slot)))
        {
            *owner = index;
        }
    }

    pub(super) fn schedule_refresh(&self) {
        self.refresh.wake.notify();
    }

    /// Waits for a slot map read from the cluster after this call began (at most `FRESH_MAP_WAIT`); false when
    /// none could be read. What a script's reply claims about a slot is checked against such a map, never
    /// against one read before the claim.
    pub(super) async fn fresh_map(&self) -> bool {
        let wanted = self.refresh.started.get() + 1;
        self.schedule_refresh();
        let ended = async {
            loop {
                let ended = self.refresh.ended.notified();
                if self.refresh.finished.get() >= wanted {
                    return;
                }
                ended.await;
            }
        };
        let _ = tokio::time::timeout(FRESH_MAP_WAIT, ended).await;
        self.refresh.installed.get() >= wanted
    }

    /// The address of the master the map gives `slot`.
    pub(super) fn owner_addr(&self, slot: u16) -> Option<String> {
        let map = self.map.borrow();
        let index = *map.owner.get(usize::from(slot))?;
        map.shards.get(usize::from(index)).map(|s| s.addr.clone())
    }

    /// Whether the last `CLUSTER SLOTS` named `addr`, as a master or a replica.
    pub(super) fn in_slot_map(&self, addr: &str) -> bool {
        self.map.borrow().shards.iter().any(|s| s.addr == addr)
            || self
                .ranges
                .borrow()
                .iter()
                .any(|r| r.master == addr || r.replicas.iter().any(|x| x == addr))
    }

    /// Where to ask for the slot map: the seeds, then every node the current map knows.
    pub(super) fn candidates(&self) -> Vec<String> {
        let mut addrs = self.spec.seeds.clone();
        for shard in &self.map.borrow().shards {
            if !addrs.contains(&shard.addr) {
                addrs.push(shard.addr.clone());
            }
        }
        addrs
    }

    /// Replaces the slot map with what `CLUSTER SLOTS` said.
    pub(super) fn install(&self, ranges: Vec<SlotRange>) {
        self.ranges.replace(ranges.clone());
        let mut owner = vec![NO_OWNER; SLOTS].into_boxed_slice();
        let mut shards: Vec<Shard> = Vec::new();
        let mut replicas_of: Vec<Vec<String>> = Vec::new();
        for range in ranges {
            let index = match shards.iter().position(|s| s.addr == range.master) {
                Some(index) => index,
                None => {
                    shards.push(Shard {
                        master: self.pool.get(&self.spec.node(&range.master, NodeRole::Any)),
                        addr: range.master,
                        reads: Vec::new(),
                    });
                    replicas_of.push(Vec::new());
                    shards.len() - 1
                }
            };
            let Ok(index16) = u16::try_from(index) else {
                continue;
            };
            if let Some(slots) = owner.get_mut(usize::from(range.start)..=usize::from(range.end)) {
                slots.fill(index16);
            }
            if let Some(known) = replicas_of.get_mut(index) {
                for replica in range.replicas {
                    if !known.contains(&replica) {
                        known.push(replica);
                    }
                }
            }
        }
        if let Some(mode) = self.spec.replicas {
            for (shard, replicas) in shards.iter_mut().zip(replicas_of) {
                shard.reads = replicas
                    .iter()
                    .map(|addr| {
                        self.pool
                            .get(&self.spec.node(addr, NodeRole::ClusterReplica))
                    })
                    .collect();
                if mode.with_master || shard.reads.is_empty() {
                    shard.reads.push(Rc::clone(&shard.master));
                }
            }
        }
        let mut map = self.map.borrow_mut();
        if map.owner != owner || map.shards.len() != shards.len() {
            tracing::info!(
                seeds = ?self.spec.seeds,
                masters = shards.len(),
                "cluster slot map updated"
            );
        }
        *map = SlotMap { owner, shards };
        self.mapped.notify_waiters();
    }
}

/// Keeps one cluster's slot map fresh until the cluster is dropped. Holds only a weak reference between
/// refreshes, so a cluster no route uses any more is freed.
pub(super) async fn refresh_loop(
    cluster: Weak<ClusterBackend>,
    signal: Rc<RefreshSignal>,
    timeout: Duration,
) {
    let mut last: Option<Instant> = None;
    let mut failing = false;
    loop {
        if let Some(last) = last {
            tokio::select! {
                () = signal.wake.notified() => {}
                () = tokio::time::sleep(REFRESH_PERIOD) => {}
            }
            if signal.closed.get() {
                return;
            }
            let wait = MIN_REFRESH_INTERVAL.saturating_sub(last.elapsed());
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
        }
        last = Some(Instant::now());
        let Some((candidates, spec)) = cluster.upgrade().map(|c| (c.candidates(), c.spec.clone()))
        else {
            return;
        };
        let number = signal.started.get() + 1;
        signal.started.set(number);
        let fetched = fetch_slots(&candidates, &spec, timeout).await;
        signal.finished.set(number);
        if fetched.is_ok() {
            signal.installed.set(number);
        }
        match fetched {
            Ok(ranges) => match cluster.upgrade() {
                Some(cluster) => {
                    cluster.install(ranges);
                    failing = false;
                }
                None => return,
            },
            // Failed requests ask for refreshes every 200 ms during an outage: warn once per outage.
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(seeds = ?spec.seeds, "cannot read the cluster slot map: {e}");
            }
            Err(e) => tracing::debug!(seeds = ?spec.seeds, "cannot read the cluster slot map: {e}"),
        }
        signal.ended.notify_waiters();
    }
}

/// Asks each candidate in turn for `CLUSTER SLOTS` until one gives a usable answer.
async fn fetch_slots(
    candidates: &[String],
    spec: &ClusterSpec,
    timeout: Duration,
) -> io::Result<Vec<SlotRange>> {
    let mut last_error = io::Error::other("no seed nodes");
    for addr in candidates {
        let attempt = async {
            let mut connection = DirectConnection::open(
                &spec.node(addr, NodeRole::Any).speaking(Protocol::Resp2),
                timeout,
            )
            .await?;
            let reply = connection.call(&[b"CLUSTER", b"SLOTS"]).await?;
            parse_slots(&reply, addr)
                .filter(|ranges| !ranges.is_empty())
                .ok_or_else(|| io::Error::other("unusable CLUSTER SLOTS reply"))
        };
        match attempt.await {
            Ok(ranges) => return Ok(ranges),
            Err(e) => last_error = io::Error::other(format!("{addr}: {e}")),
        }
    }
    Err(last_error)
}

/// Reads a `CLUSTER SLOTS` reply: `[[start, end, [ip, port, id, ...], replica...], ...]`. A node without an
/// address (`""` or `?`) is the one that answered.
fn parse_slots(reply: &Value, answered_by: &str) -> Option<Vec<SlotRange>> {
    let host_of_answer = answered_by
        .rsplit_once(':')
        .map_or(answered_by, |(host, _)| host);
    let node = |value: &Value| -> Option<String> {
        let fields = value.array()?;
        let ip = fields.first()?.text()?;
        let port = fields.get(1)?.int().and_then(|p| u16::try_from(p).ok())?;
        let host = match ip {
            "" | "?" => host_of_answer,
            ip => ip,
        };
        Some(format!("{host}:{port}"))
    };
    let mut ranges = Vec::new();
    for entry in reply.array()? {
        let fields = entry.array()?;
        let start = u16::try_from(fields.first()?.int()?).ok()?;
        let end = u16::try_from(fields.get(1)?.int()?).ok()?;
        if start > end || usize::from(end) >= SLOTS {
            return None;
        }
        let master = node(fields.get(2)?)?;
        let replicas = fields
            .get(3..)
            .unwrap_or_default()
            .iter()
            .filter_map(node)
            .collect();
        ranges.push(SlotRange {
            start,
            end,
            master,
            replicas,
        });
    }
    Some(ranges)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    #[test]
    fn parses_cluster_slots_and_refuses_bad_ranges() {
        let reply = Bytes::from_static(
            b"*2\r\n\
              *4\r\n:0\r\n:8191\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nid\r\n*2\r\n$0\r\n\r\n:7003\r\n\
              *3\r\n:8192\r\n:16383\r\n*2\r\n$9\r\n127.0.0.2\r\n:7001\r\n",
        );
        let ranges = parse_slots(&Value::parse(&reply).unwrap(), "10.0.0.9:7000").unwrap();
        assert_eq!(
            ranges,
            vec![
                SlotRange {
                    start: 0,
                    end: 8191,
                    master: "127.0.0.1:7000".into(),
                    replicas: vec!["10.0.0.9:7003".into()]
                },
                SlotRange {
                    start: 8192,
                    end: 16383,
                    master: "127.0.0.2:7001".into(),
                    replicas: vec![]
                },
            ]
        );
        for bad in [
            &b"*1\r\n*3\r\n:5\r\n:4\r\n*2\r\n$1\r\nh\r\n:1\r\n"[..],
            b"*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n",
            b"*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\nh\r\n:70000\r\n",
            b"*1\r\n*2\r\n:0\r\n:1\r\n",
            b"+OK\r\n",
        ] {
            let value = Value::parse(&Bytes::from_static(bad)).unwrap();
            assert_eq!(parse_slots(&value, "h:1"), None, "{bad:?}");
        }
    }
}
