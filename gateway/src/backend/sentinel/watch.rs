//! A sentinel set's view of its master and replicas, one per gateway process, and the one task that keeps it:
//! it holds a subscription on one sentinel (the next one when it fails) and asks that sentinel for the master
//! (`SENTINEL get-master-addr-by-name`) and, once a `-slaves` resource reads from the set on some worker, the
//! replicas (`SENTINEL replicas`) on every (re)connect, on every announced change, periodically, and when a worker
//! finds the master's connections down. Every worker follows the view (see `SentinelBackend`).
//!
//! Two announcements move traffic: `+switch-master`, and `+failover-state-reconf-slaves`. The leader of a
//! failover publishes `+switch-master` only once every other replica has resynchronised from the new master
//! (seconds later, up to the failover timeout), while it answers `get-master-addr-by-name` with the promoted
//! replica from the moment the promotion is confirmed, which is when it enters the reconf-slaves state: asking
//! then follows a failover as early as any sentinel client can.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use super::SentinelSpec;
use crate::backend::NodeSpec;
use crate::backend::direct::{DirectConnection, Value};

/// How often the master (and replica list) is re-read while the master is healthy, and while it is not.
const LOOKUP_PERIOD: Duration = Duration::from_secs(5);
pub(super) const LOOKUP_PERIOD_UNHEALTHY: Duration = Duration::from_millis(500);

/// What the sentinels said of the master and its replicas.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct SentinelView {
    pub(super) master: MasterView,
    /// The healthy replicas, once a worker wants them (see [`SentinelTopology::want_replicas`]).
    pub(super) replicas: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) enum MasterView {
    /// No sentinel has answered yet.
    #[default]
    Unknown,
    Known(String),
    /// No sentinel could name the master (and none had before): why.
    Failed(String),
}

/// The watcher's wake-up, and whether the view is still held.
struct WatchSignal {
    wake: Notify,
    closed: AtomicBool,
}

/// A sentinel set's view, shared by every worker of the process.
pub(crate) struct SentinelTopology {
    master_name: String,
    view: watch::Sender<SentinelView>,
    /// Set once a `-slaves` resource of the set is used on some worker: only then are replicas looked up.
    replicas_wanted: AtomicBool,
    /// Set by a worker whose master connections are all down, until the watcher's next lookup.
    master_down: AtomicBool,
    signal: Arc<WatchSignal>,
}

impl SentinelTopology {
    /// A view with nothing known yet, and its watcher on the current worker.
    pub(crate) fn start(spec: SentinelSpec, timeout: Duration) -> Arc<SentinelTopology> {
        let signal = Arc::new(WatchSignal {
            wake: Notify::new(),
            closed: AtomicBool::new(false),
        });
        let topology = Arc::new(SentinelTopology {
            master_name: spec.master_name.clone(),
            view: watch::Sender::new(SentinelView::default()),
            replicas_wanted: AtomicBool::new(false),
            master_down: AtomicBool::new(false),
            signal: Arc::clone(&signal),
        });
        tokio::task::spawn_local(watch(Arc::downgrade(&topology), signal, spec, timeout));
        topology
    }

    /// A receiver of the view, for a worker that follows it.
    pub(super) fn subscribe(&self) -> watch::Receiver<SentinelView> {
        self.view.subscribe()
    }

    /// What is known now.
    pub(super) fn current(&self) -> SentinelView {
        self.view.borrow().clone()
    }

    /// Starts looking up replicas (for a `-slaves` resource of this set).
    pub(super) fn want_replicas(&self) {
        if !self.replicas_wanted.swap(true, Ordering::AcqRel) {
            self.signal.wake.notify_one();
        }
    }

    /// The master's address, once a sentinel has named it.
    pub(crate) fn master_addr(&self) -> Option<String> {
        match &self.view.borrow().master {
            MasterView::Known(addr) => Some(addr.clone()),
            _ => None,
        }
    }

    /// A worker found every connection to the master down: look up now, and often until the master is back.
    pub(crate) fn master_is_down(&self) {
        if !self.master_down.swap(true, Ordering::AcqRel) {
            self.signal.wake.notify_one();
        }
    }

    fn set_master(&self, addr: &str) {
        self.view.send_if_modified(|view| {
            if matches!(&view.master, MasterView::Known(current) if current == addr) {
                return false;
            }
            tracing::info!(master = %self.master_name, %addr, "sentinel: master is now {addr}");
            view.master = MasterView::Known(addr.to_string());
            true
        });
    }

    /// No sentinel answered: unless a master is known (it keeps serving), requests fail with `reason`.
    fn set_failed(&self, reason: String) {
        self.view.send_if_modified(|view| {
            if matches!(view.master, MasterView::Known(_)) {
                return false;
            }
            view.master = MasterView::Failed(reason);
            true
        });
    }

    fn set_replicas(&self, replicas: Vec<String>) {
        self.view.send_if_modified(|view| {
            let changed = view.replicas.as_ref() != Some(&replicas);
            view.replicas = Some(replicas);
            changed
        });
    }
}

impl Drop for SentinelTopology {
    fn drop(&mut self) {
        self.signal.closed.store(true, Ordering::Release);
        self.signal.wake.notify_one();
    }
}

/// Follows the master until the resource is dropped: subscribe on one sentinel, look up, then react to switches
/// and re-look-up periodically; on any failure move on to the next sentinel.
async fn watch(
    topology: Weak<SentinelTopology>,
    signal: Arc<WatchSignal>,
    spec: SentinelSpec,
    timeout: Duration,
) {
    let count = spec.sentinels.len().max(1);
    let mut failures = 0usize;
    for index in (0..count).cycle() {
        if signal.closed.load(Ordering::Acquire) {
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
            lookup(&topology, &spec, &node, timeout).await?;
            failures = 0;
            loop {
                let period = match topology.upgrade() {
                    Some(t) if !t.master_down.swap(false, Ordering::AcqRel) => LOOKUP_PERIOD,
                    Some(_) => LOOKUP_PERIOD_UNHEALTHY,
                    None => return Ok(()),
                };
                tokio::select! {
                    message = subscription.read() => match announcement(&message?, &spec.master_name) {
                        Some(Announcement::Switched(addr)) => {
                            if let Some(t) = topology.upgrade() {
                                t.set_master(&addr);
                            }
                            lookup(&topology, &spec, &node, timeout).await?;
                        }
                        Some(Announcement::Promoted) => lookup(&topology, &spec, &node, timeout).await?,
                        None => {}
                    },
                    () = tokio::time::sleep(period) => lookup(&topology, &spec, &node, timeout).await?,
                    () = signal.wake.notified() => {
                        if signal.closed.load(Ordering::Acquire) {
                            return Ok(());
                        }
                        lookup(&topology, &spec, &node, timeout).await?;
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
                    if let Some(t) = topology.upgrade() {
                        t.set_failed(format!("no sentinel answered (last: {addr}: {e})"));
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
    topology: &Weak<SentinelTopology>,
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
    let wanted = topology
        .upgrade()
        .is_some_and(|t| t.replicas_wanted.load(Ordering::Acquire));
    let replicas = match wanted {
        true => {
            let reply = connection.call(&[b"SENTINEL", b"replicas", name]).await?;
            Some(healthy_replicas(&reply))
        }
        false => None,
    };
    if let Some(topology) = topology.upgrade() {
        topology.set_master(&master);
        if let Some(replicas) = replicas {
            topology.set_replicas(replicas);
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
    use bytes::Bytes;

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
