//! A sentinel-managed master (and its replicas) as one upstream.
//!
//! One watcher task per sentinel set (sentinels, master name, credentials, db) and worker holds a subscription on one sentinel (the next one when it fails) and
//! asks that sentinel for the master (`SENTINEL get-master-addr-by-name`) and, once a `-slaves` resource reads
//! from the set, the replicas (`SENTINEL replicas`) on every (re)connect, on every announced change, and
//! periodically. The `redis-sentinel://` and `redis-sentinel-slaves://` resources of one set share it: an
//! [`Upstream::Sentinel`](super::Upstream) carries the read mode, the backend the view.
//!
//! Two announcements move traffic: `+switch-master`, and `+failover-state-reconf-slaves`. The leader of a
//! failover publishes `+switch-master` only once every other replica has resynchronised from the new master
//! (seconds later, up to the failover timeout), while it answers `get-master-addr-by-name` with the promoted
//! replica from the moment the promotion is confirmed, which is when it enters the reconf-slaves state: asking
//! then follows a failover as early as any sentinel client can.
//!
//! The master's connections check `ROLE` on every (re)connect ([`NodeRole::Master`]): a node that reports
//! `slave`, such as an old master restarted and turned into a replica before the gateway heard of the switch,
//! never gets a write; its requests fail fast until the watcher moves traffic away.

use std::cell::{Cell, RefCell};
use std::io;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use switchyard_schemas::ReplicaMode;

use super::direct::{DirectConnection, Value};
use super::{Backend, BackendPool, NodeRole, NodeSpec};
use crate::reply::ReplyHandle;
use crate::resp::{self, Protocol};
use crate::signal::LocalSignal;
use crate::tls::BackendTls;

/// How often the master (and replica list) is re-read while the master is healthy, and while it is not.
const LOOKUP_PERIOD: Duration = Duration::from_secs(5);
const LOOKUP_PERIOD_UNHEALTHY: Duration = Duration::from_millis(500);

/// Requests held while the first lookup is under way (a route's first clients); beyond this they fail.
const MAX_WAITING: usize = 16 * 1024;

/// How to reach a sentinel-managed master: a sentinel set.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct SentinelSpec {
    /// `host:port` of each sentinel.
    pub sentinels: Vec<String>,
    pub master_name: String,
    pub sentinel_username: Option<String>,
    pub sentinel_password: Option<String>,
    /// Credentials and database of the data nodes.
    pub username: Option<String>,
    pub password: Option<String>,
    /// An operator-provisioned script user (see `NodeSpec::script_user`).
    pub script_user: Option<(String, String)>,
    pub protocol: Protocol,
    pub db: u32,
    /// TLS to the data nodes (`rediss-sentinel`).
    pub tls: Option<Arc<BackendTls>>,
    /// TLS to the sentinels (`sentinelSSL=true`).
    pub sentinel_tls: Option<Arc<BackendTls>>,
}

impl std::fmt::Debug for SentinelSpec {
    // Never print a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelSpec")
            .field("sentinels", &self.sentinels)
            .field("master_name", &self.master_name)
            .field("db", &self.db)
            .finish_non_exhaustive()
    }
}

impl SentinelSpec {
    fn data_node(&self, addr: &str, role: NodeRole) -> NodeSpec {
        NodeSpec {
            addr: addr.to_string(),
            username: self.username.clone(),
            password: self.password.clone(),
            db: self.db,
            role,
            script_user: self.script_user.clone(),
            protocol: self.protocol,
            tls: self.tls.clone(),
        }
    }

    fn sentinel_node(&self, addr: &str) -> NodeSpec {
        NodeSpec {
            addr: addr.to_string(),
            username: self.sentinel_username.clone(),
            password: self.sentinel_password.clone(),
            db: 0,
            role: NodeRole::Sentinel,
            script_user: None,
            protocol: Protocol::Resp2,
            tls: self.sentinel_tls.clone(),
        }
    }
}

/// One worker's view of a sentinel-managed master.
pub(crate) struct SentinelBackend {
    spec: SentinelSpec,
    pool: Rc<BackendPool>,
    master: RefCell<Master>,
    /// Healthy-looking replicas, for `-slaves` resources.
    replicas: RefCell<Vec<Rc<Backend>>>,
    /// Set once a `-slaves` resource uses this set: only then are replicas looked up and connected to.
    replicas_wanted: Cell<bool>,
    next_read: Cell<usize>,
    signal: Rc<WatchSignal>,
}

enum Master {
    /// Before the first answer: requests wait for it.
    Unknown(Vec<(Bytes, ReplyHandle, usize)>),
    Known {
        addr: String,
        backend: Rc<Backend>,
    },
    /// No sentinel could name the master: requests fail with this error until one does.
    Failed(Bytes),
}

struct WatchSignal {
    wake: LocalSignal,
    closed: Cell<bool>,
}

impl SentinelBackend {
    /// Opens the resource and starts its watcher on the current worker.
    pub(super) fn open(spec: SentinelSpec, pool: &Rc<BackendPool>) -> Rc<SentinelBackend> {
        let signal = Rc::new(WatchSignal {
            wake: LocalSignal::default(),
            closed: Cell::new(false),
        });
        let backend = Rc::new(SentinelBackend {
            spec: spec.clone(),
            pool: Rc::clone(pool),
            master: RefCell::new(Master::Unknown(Vec::new())),
            replicas: RefCell::new(Vec::new()),
            replicas_wanted: Cell::new(false),
            next_read: Cell::new(0),
            signal: Rc::clone(&signal),
        });
        tokio::task::spawn_local(watch(
            Rc::downgrade(&backend),
            signal,
            spec,
            pool.settings
                .connect_timeout
                .max(Duration::from_millis(500)),
        ));
        backend
    }

    /// Starts looking up replicas (for a `-slaves` resource of this set).
    pub(super) fn want_replicas(&self) {
        if !self.replicas_wanted.replace(true) {
            self.signal.wake.notify();
        }
    }

    /// Sends to the master, or with `reads` (a `-slaves` resource) to a replica.
    pub(crate) fn send(
        &self,
        raw: Bytes,
        reply: ReplyHandle,
        affinity: usize,
        reads: Option<ReplicaMode>,
    ) {
        if let Some(mode) = reads
            && let Some(read) = self.pick_read(mode)
        {
            return read.send(raw, reply, affinity);
        }
        let backend = match &mut *self.master.borrow_mut() {
            Master::Known { backend, .. } => Rc::clone(backend),
            Master::Unknown(waiting) if waiting.len() < MAX_WAITING => {
                return waiting.push((raw, reply, affinity));
            }
            Master::Unknown(_) => {
                return reply.deliver(resp::error_reply(&format!(
                    "ERR sentinel master {} not known yet",
                    self.spec.master_name
                )));
            }
            Master::Failed(error) => return reply.deliver(error.clone()),
        };
        backend.send(raw, reply, affinity);
    }

    /// The current master's backend, once a sentinel has named it.
    pub(crate) fn known_master(&self) -> Option<Rc<Backend>> {
        match &*self.master.borrow() {
            Master::Known { backend, .. } => Some(Rc::clone(backend)),
            _ => None,
        }
    }

    pub(crate) fn is_healthy(&self) -> bool {
        match &*self.master.borrow() {
            Master::Known { backend, .. } => backend.is_healthy(),
            _ => false,
        }
    }

    /// The current master, for the commands that will need a dedicated connection to it (blocking commands,
    /// transactions, subscriptions); `None` until a sentinel has named it.
    pub(crate) fn master(&self) -> Option<NodeSpec> {
        match &*self.master.borrow() {
            Master::Known { addr, .. } => Some(self.spec.data_node(addr, NodeRole::Master)),
            _ => None,
        }
    }

    pub(crate) fn master_name(&self) -> &str {
        &self.spec.master_name
    }

    /// Round robin over the healthy replicas (and the master with `withMaster=true`); `None` sends to the master.
    fn pick_read(&self, mode: ReplicaMode) -> Option<Rc<Backend>> {
        let replicas = self.replicas.borrow();
        let master = match &*self.master.borrow() {
            Master::Known { backend, .. } if mode.with_master => Some(Rc::clone(backend)),
            _ => None,
        };
        let count = replicas.len() + usize::from(master.is_some());
        let start = self.next_read.get();
        self.next_read.set(start.wrapping_add(1));
        (0..count)
            .filter_map(|i| replicas.get((start + i) % count).or(master.as_ref()))
            .find(|b| b.is_healthy())
            .cloned()
    }

    /// Moves traffic to the master at `addr` (and releases requests that waited for the first answer).
    fn set_master(&self, addr: &str) {
        if matches!(&*self.master.borrow(), Master::Known { addr: current, .. } if current == addr)
        {
            return;
        }
        tracing::info!(master = %self.spec.master_name, %addr, "sentinel: master is now {addr}");
        let backend = self.pool.get(&self.spec.data_node(addr, NodeRole::Master));
        let previous = std::mem::replace(
            &mut *self.master.borrow_mut(),
            Master::Known {
                addr: addr.to_string(),
                backend: Rc::clone(&backend),
            },
        );
        if let Master::Unknown(waiting) = previous {
            for (raw, reply, affinity) in waiting {
                backend.send(raw, reply, affinity);
            }
        }
    }

    /// No sentinel answered: waiting requests (and later ones, until a sentinel answers) get `reason`.
    fn set_failed(&self, reason: &str) {
        let mut master = self.master.borrow_mut();
        if matches!(&*master, Master::Known { .. }) {
            return; // keep serving the last known master
        }
        let error = resp::error_reply(&format!(
            "ERR sentinel master {} unknown: {reason}",
            self.spec.master_name
        ));
        let previous = std::mem::replace(&mut *master, Master::Failed(error.clone()));
        drop(master);
        if let Master::Unknown(waiting) = previous {
            for (_, reply, _) in waiting {
                reply.deliver(error.clone());
            }
        }
    }

    fn set_replicas(&self, replicas: &[String]) {
        *self.replicas.borrow_mut() = replicas
            .iter()
            .map(|addr| self.pool.get(&self.spec.data_node(addr, NodeRole::Any)))
            .collect();
    }
}

impl Drop for SentinelBackend {
    fn drop(&mut self) {
        self.signal.closed.set(true);
        self.signal.wake.notify();
    }
}

/// Follows the master until the resource is dropped: subscribe on one sentinel, look up, then react to switches
/// and re-look-up periodically; on any failure move on to the next sentinel.
async fn watch(
    backend: Weak<SentinelBackend>,
    signal: Rc<WatchSignal>,
    spec: SentinelSpec,
    timeout: Duration,
) {
    let count = spec.sentinels.len().max(1);
    let mut failures = 0usize;
    for index in (0..count).cycle() {
        if signal.closed.get() {
            return;
        }
        let Some(addr) = spec.sentinels.get(index) else {
            return;
        };
        let node = spec.sentinel_node(addr);
        let watched = async {
            let mut subscription = DirectConnection::open(&node, timeout).await?;
            subscription
                .call(&[
                    b"SUBSCRIBE",
                    b"+switch-master",
                    b"+failover-state-reconf-slaves",
                ])
                .await?;
            lookup(&backend, &spec, &node, timeout).await?;
            failures = 0;
            loop {
                let period = match backend.upgrade() {
                    Some(b) if b.is_healthy() => LOOKUP_PERIOD,
                    Some(_) => LOOKUP_PERIOD_UNHEALTHY,
                    None => return Ok(()),
                };
                tokio::select! {
                    message = subscription.read() => match announcement(&message?, &spec.master_name) {
                        Some(Announcement::Switched(addr)) => {
                            if let Some(b) = backend.upgrade() {
                                b.set_master(&addr);
                            }
                            lookup(&backend, &spec, &node, timeout).await?;
                        }
                        Some(Announcement::Promoted) => lookup(&backend, &spec, &node, timeout).await?,
                        None => {}
                    },
                    () = tokio::time::sleep(period) => lookup(&backend, &spec, &node, timeout).await?,
                    () = signal.wake.notified() => {
                        if signal.closed.get() {
                            return Ok(());
                        }
                        lookup(&backend, &spec, &node, timeout).await?;
                    }
                }
            }
        };
        let result: io::Result<()> = watched.await;
        match result {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(sentinel = %addr, master = %spec.master_name, "sentinel unusable: {e}");
                failures += 1;
                if failures.is_multiple_of(count) {
                    if let Some(b) = backend.upgrade() {
                        b.set_failed(&format!("no sentinel answered (last: {addr}: {e})"));
                    }
                    tokio::time::sleep(LOOKUP_PERIOD_UNHEALTHY).await;
                }
            }
        }
    }
}

/// Asks a sentinel for the master (and the replicas, when a `-slaves` resource wants them) and applies the
/// answer.
async fn lookup(
    backend: &Weak<SentinelBackend>,
    spec: &SentinelSpec,
    sentinel: &NodeSpec,
    timeout: Duration,
) -> io::Result<()> {
    let mut connection = DirectConnection::open(sentinel, timeout).await?;
    let name = spec.master_name.as_bytes();
    let reply = connection
        .call(&[b"SENTINEL", b"get-master-addr-by-name", name])
        .await?;
    let master = address(&reply).ok_or_else(|| {
        io::Error::other(format!(
            "the sentinel does not know master {}",
            spec.master_name
        ))
    })?;
    let wanted = backend.upgrade().is_some_and(|b| b.replicas_wanted.get());
    let replicas = match wanted {
        true => {
            let reply = connection.call(&[b"SENTINEL", b"replicas", name]).await?;
            Some(healthy_replicas(&reply))
        }
        false => None,
    };
    if let Some(backend) = backend.upgrade() {
        backend.set_master(&master);
        if let Some(replicas) = replicas {
            backend.set_replicas(&replicas);
        }
    }
    Ok(())
}

/// `host:port` from a `[ip, port]` reply.
fn address(reply: &Value) -> Option<String> {
    let fields = reply.array()?;
    let host = fields.first()?.text()?;
    let port = u16::try_from(fields.get(1)?.int()?).ok()?;
    Some(format!("{host}:{port}"))
}

/// The replicas of a `SENTINEL replicas` reply that are up and linked to their master.
fn healthy_replicas(reply: &Value) -> Vec<String> {
    let Some(entries) = reply.array() else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|entry| {
            let fields = entry.array()?;
            let field = |name: &str| {
                fields
                    .chunks(2)
                    .find(|pair| pair.first().and_then(Value::text) == Some(name))
                    .and_then(|pair| pair.get(1)?.text())
            };
            let flags = field("flags").unwrap_or_default();
            let down = flags
                .split(',')
                .any(|f| matches!(f, "s_down" | "o_down" | "disconnected"));
            if down || field("master-link-status") != Some("ok") {
                return None;
            }
            let port: u16 = field("port")?.parse().ok()?;
            Some(format!("{}:{port}", field("ip")?))
        })
        .collect()
}

/// A sentinel announcement about the watched master.
#[derive(Debug, PartialEq, Eq)]
enum Announcement {
    /// `+switch-master <name> <old ip> <old port> <new ip> <new port>`: the new master's address.
    Switched(String),
    /// `+failover-state-reconf-slaves master <name> <ip> <port>`: a replica was promoted; ask for it.
    Promoted,
}

/// What a pushed `["message", channel, payload]` says about `master_name`, if anything.
fn announcement(message: &Value, master_name: &str) -> Option<Announcement> {
    let fields = message.array()?;
    if fields.first()?.text()? != "message" {
        return None;
    }
    let words: Vec<&str> = fields.get(2)?.text()?.split(' ').collect();
    match (fields.get(1)?.text()?, words.as_slice()) {
        ("+switch-master", [name, _, _, ip, port]) if *name == master_name => {
            let port: u16 = port.parse().ok()?;
            Some(Announcement::Switched(format!("{ip}:{port}")))
        }
        ("+failover-state-reconf-slaves", ["master", name, ..]) if *name == master_name => {
            Some(Announcement::Promoted)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(bytes: &'static [u8]) -> Value {
        Value::parse(&Bytes::from_static(bytes)).unwrap()
    }

    #[test]
    fn reads_announcements_for_its_master_only() {
        let switch = value(
            b"*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$38\r\nmymaster 127.0.0.1 6379 127.0.0.1 6380\r\n",
        );
        assert_eq!(
            announcement(&switch, "mymaster"),
            Some(Announcement::Switched("127.0.0.1:6380".into()))
        );
        assert_eq!(announcement(&switch, "other"), None);
        let promoted = value(
            b"*3\r\n$7\r\nmessage\r\n$29\r\n+failover-state-reconf-slaves\r\n$30\r\nmaster mymaster 127.0.0.1 6379\r\n",
        );
        assert_eq!(
            announcement(&promoted, "mymaster"),
            Some(Announcement::Promoted)
        );
        assert_eq!(announcement(&promoted, "mymaste"), None);
        let confirmation = value(b"*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:2\r\n");
        assert_eq!(announcement(&confirmation, "mymaster"), None);
        assert_eq!(
            announcement(&value(b"*1\r\n$7\r\nmessage\r\n"), "mymaster"),
            None
        );
    }

    #[test]
    fn skips_replicas_that_are_down_or_unlinked() {
        let reply = value(
            b"*3\r\n\
              *8\r\n$2\r\nip\r\n$1\r\na\r\n$4\r\nport\r\n$1\r\n1\r\n$5\r\nflags\r\n$5\r\nslave\r\n$18\r\nmaster-link-status\r\n$2\r\nok\r\n\
              *8\r\n$2\r\nip\r\n$1\r\nb\r\n$4\r\nport\r\n$1\r\n2\r\n$5\r\nflags\r\n$12\r\ns_down,slave\r\n$18\r\nmaster-link-status\r\n$2\r\nok\r\n\
              *8\r\n$2\r\nip\r\n$1\r\nc\r\n$4\r\nport\r\n$1\r\n3\r\n$5\r\nflags\r\n$5\r\nslave\r\n$18\r\nmaster-link-status\r\n$3\r\nerr\r\n",
        );
        assert_eq!(healthy_replicas(&reply), vec!["a:1".to_string()]);
        assert_eq!(
            address(&value(b"*2\r\n$1\r\nh\r\n$4\r\n6379\r\n")),
            Some("h:6379".into())
        );
        assert_eq!(address(&value(b"*-1\r\n")), None);
    }
}
