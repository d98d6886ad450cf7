//! A cluster's slot map as the whole gateway process knows it, and the one task that keeps it fresh.
//!
//! The map is immutable once published: a change (a `CLUSTER SLOTS` that differs, a `MOVED` for a slot the map
//! gives another node) publishes a new one with the next generation. Workers hold the one they route with and
//! compare its generation with [`ClusterTopology::generation`] (one atomic load) before using it, so a change
//! learnt by any worker reaches every worker's next request.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::sync::Notify;

use super::slots::{SlotRange, fetch_slots};
use super::{ClusterSpec, SLOTS};

/// How often the slot map is re-read when nothing asks for it sooner.
const REFRESH_PERIOD: Duration = Duration::from_secs(5);

/// The shortest time between two refreshes: a burst of MOVED replies (a resharding) costs one refresh each time.
const MIN_REFRESH_INTERVAL: Duration = Duration::from_millis(200);

/// How long a check against the cluster's topology waits for a fresh slot map before it gives up (and the reply it
/// checks goes to the client as it is).
const FRESH_MAP_WAIT: Duration = Duration::from_secs(2);

pub(super) const NO_OWNER: u16 = u16::MAX;

/// One published slot map: `owner[slot]` is an index into `shards`.
#[derive(Clone)]
pub(super) struct SlotTopology {
    pub(super) generation: u64,
    pub(super) owner: [u16; SLOTS],
    /// Shared by the maps that only move slots between known masters, so that workers keep their node handles.
    pub(super) shards: Arc<[ShardNodes]>,
}

/// A master and its replicas, by address.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct ShardNodes {
    pub(super) addr: String,
    pub(super) replicas: Vec<String>,
}

/// The refresh task's wake-up and its progress, which a check against the topology waits on.
struct RefreshSignal {
    wake: Notify,
    closed: AtomicBool,
    /// Refreshes started and ended so far, and the number of the last one that read a map: a check against the
    /// cluster's topology waits for a map read after it began (see [`ClusterTopology::fresh_map`]).
    started: AtomicU64,
    finished: AtomicU64,
    installed: AtomicU64,
    /// Told when a refresh ends, whatever its outcome.
    ended: Notify,
}

/// A cluster's slot map, shared by every worker of the process.
pub(crate) struct ClusterTopology {
    /// The cluster, as the gateway's own queries reach it.
    spec: ClusterSpec,
    current: ArcSwap<SlotTopology>,
    /// Mirrors `current`'s generation: what workers check before routing.
    generation: AtomicU64,
    /// Taken by whoever publishes a map, so that a refresh and a `MOVED` never publish over each other.
    publishing: Mutex<()>,
    refresh: Arc<RefreshSignal>,
    /// Wakes whoever waits for a slot map (see `ClusterBackend::wait_for_map`) when one is installed.
    pub(super) mapped: Notify,
}

impl ClusterTopology {
    /// A topology with no map yet, and its refresh task on the current worker.
    pub(crate) fn start(spec: ClusterSpec, timeout: Duration) -> Arc<ClusterTopology> {
        let topology = Arc::new(ClusterTopology::new(spec));
        let refresh = Arc::clone(&topology.refresh);
        tokio::task::spawn_local(refresh_loop(Arc::downgrade(&topology), refresh, timeout));
        topology
    }

    /// A topology with no map yet.
    fn new(spec: ClusterSpec) -> ClusterTopology {
        let refresh = Arc::new(RefreshSignal {
            wake: Notify::new(),
            closed: AtomicBool::new(false),
            started: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            installed: AtomicU64::new(0),
            ended: Notify::new(),
        });
        ClusterTopology {
            spec,
            current: ArcSwap::from_pointee(SlotTopology {
                generation: 0,
                owner: [NO_OWNER; SLOTS],
                shards: Arc::new([]),
            }),
            generation: AtomicU64::new(0),
            publishing: Mutex::new(()),
            refresh,
            mapped: Notify::new(),
        }
    }

    /// The generation of the current map.
    #[inline]
    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The current map.
    pub(super) fn current(&self) -> Arc<SlotTopology> {
        self.current.load_full()
    }

    /// Publishes what `change` makes of the current map, if anything.
    fn publish(&self, change: impl FnOnce(&SlotTopology) -> Option<SlotTopology>) {
        let _publishing = self.publishing.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.current.load();
        if let Some(mut next) = change(&current) {
            next.generation = current.generation + 1;
            let generation = next.generation;
            self.current.store(Arc::new(next));
            self.generation.store(generation, Ordering::Release);
        }
    }

    /// After a MOVED: `slot` now belongs to the master at `addr`. Only the first worker to hear it changes the map.
    pub(super) fn moved(&self, slot: u16, addr: &str) {
        self.publish(|current| {
            let index = current.shards.iter().position(|s| s.addr == addr);
            let owner = *current.owner.get(usize::from(slot))?;
            if index.is_some_and(|i| usize::from(owner) == i) {
                return None;
            }
            let mut next = current.clone();
            let index = index.unwrap_or_else(|| {
                let mut shards: Vec<ShardNodes> = current
                    .shards
                    .iter()
                    .map(|s| ShardNodes {
                        addr: s.addr.clone(),
                        replicas: s.replicas.clone(),
                    })
                    .collect();
                shards.push(ShardNodes {
                    addr: addr.to_string(),
                    replicas: Vec::new(),
                });
                next.shards = shards.into();
                next.shards.len() - 1
            });
            *next.owner.get_mut(usize::from(slot))? = u16::try_from(index).ok()?;
            Some(next)
        });
    }

    /// Replaces the slot map with what `CLUSTER SLOTS` said (a new generation only when that differs).
    fn install(&self, ranges: Vec<SlotRange>) {
        let mut owner = [NO_OWNER; SLOTS];
        let mut shards: Vec<ShardNodes> = Vec::new();
        for range in ranges {
            let index = match shards.iter().position(|s| s.addr == range.master) {
                Some(index) => index,
                None => {
                    shards.push(ShardNodes {
                        addr: range.master,
                        replicas: Vec::new(),
                    });
                    shards.len() - 1
                }
            };
            let Ok(index16) = u16::try_from(index) else {
                continue;
            };
            if let Some(slots) = owner.get_mut(usize::from(range.start)..=usize::from(range.end)) {
                slots.fill(index16);
            }
            if let Some(shard) = shards.get_mut(index) {
                for replica in range.replicas {
                    if !shard.replicas.contains(&replica) {
                        shard.replicas.push(replica);
                    }
                }
            }
        }
        self.publish(|current| {
            if current.owner == owner && *current.shards == *shards {
                return None;
            }
            tracing::info!(seeds = ?self.spec.seeds, masters = shards.len(), "cluster slot map updated");
            Some(SlotTopology {
                generation: 0,
                owner,
                shards: shards.into(),
            })
        });
        self.mapped.notify_waiters();
    }

    /// Asks the refresh task for a refresh.
    pub(crate) fn schedule_refresh(&self) {
        self.refresh.wake.notify_one();
    }

    /// Waits for a slot map read from the cluster after this call began (at most `FRESH_MAP_WAIT`); false when
    /// none could be read. What a script's reply claims about a slot is checked against such a map, never
    /// against one read before the claim.
    pub(super) async fn fresh_map(&self) -> bool {
        let refresh = &self.refresh;
        let wanted = refresh.started.load(Ordering::Acquire) + 1;
        self.schedule_refresh();
        let ended = async {
            loop {
                let ended = refresh.ended.notified();
                if refresh.finished.load(Ordering::Acquire) >= wanted {
                    return;
                }
                ended.await;
            }
        };
        let _ = tokio::time::timeout(FRESH_MAP_WAIT, ended).await;
        refresh.installed.load(Ordering::Acquire) >= wanted
    }

    /// The address of the master the map gives `slot`.
    pub(crate) fn owner_addr(&self, slot: u16) -> Option<String> {
        let current = self.current.load();
        let index = *current.owner.get(usize::from(slot))?;
        current
            .shards
            .get(usize::from(index))
            .map(|s| s.addr.clone())
    }

    /// Whether the current map names `addr`, as a master or a replica.
    pub(super) fn in_slot_map(&self, addr: &str) -> bool {
        self.current
            .load()
            .shards
            .iter()
            .any(|s| s.addr == addr || s.replicas.iter().any(|r| r == addr))
    }

    /// The address of every master the current map gives slots to (none before the first map).
    pub(crate) fn master_addrs(&self) -> Vec<String> {
        self.current
            .load()
            .shards
            .iter()
            .map(|s| s.addr.clone())
            .collect()
    }

    /// Where to ask for the slot map: the seeds, then every master the current map knows.
    pub(super) fn candidates(&self) -> Vec<String> {
        let mut addrs = self.spec.seeds.clone();
        for shard in self.current.load().shards.iter() {
            if !addrs.contains(&shard.addr) {
                addrs.push(shard.addr.clone());
            }
        }
        addrs
    }
}

impl Drop for ClusterTopology {
    fn drop(&mut self) {
        self.refresh.closed.store(true, Ordering::Release);
        self.refresh.wake.notify_one();
    }
}

/// Keeps one cluster's slot map fresh until no worker holds it any more: at start, periodically, and whenever a
/// worker asks (after a `MOVED`, a failed node connection, a `CLUSTERDOWN`); refreshes are rate-limited and never
/// overlap. Holds only a weak reference between refreshes, so a cluster no route uses any more is freed.
async fn refresh_loop(
    topology: Weak<ClusterTopology>,
    signal: Arc<RefreshSignal>,
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
            if signal.closed.load(Ordering::Acquire) {
                return;
            }
            let wait = MIN_REFRESH_INTERVAL.saturating_sub(last.elapsed());
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
        }
        last = Some(Instant::now());
        let Some((candidates, spec)) = topology.upgrade().map(|t| (t.candidates(), t.spec.clone()))
        else {
            return;
        };
        let number = signal.started.load(Ordering::Acquire) + 1;
        signal.started.store(number, Ordering::Release);
        let fetched = fetch_slots(&candidates, &spec, timeout).await;
        match fetched {
            Ok(ranges) => match topology.upgrade() {
                Some(topology) => {
                    topology.install(ranges);
                    signal.installed.store(number, Ordering::Release);
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
        signal.finished.store(number, Ordering::Release);
        signal.ended.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resp::Protocol;

    fn range(start: u16, end: u16, master: &str, replicas: &[&str]) -> SlotRange {
        SlotRange {
            start,
            end,
            master: master.to_string(),
            replicas: replicas.iter().map(|r| r.to_string()).collect(),
        }
    }

    #[test]
    fn a_change_is_published_once_and_slot_moves_keep_the_shards() {
        let topology = ClusterTopology::new(ClusterSpec {
            seeds: vec!["h:1".into()],
            username: None,
            password: None,
            script_user: None,
            protocol: Protocol::Resp2,
            replicas: None,
            tls: None,
        });
        assert_eq!(topology.generation(), 0);
        let ranges = vec![
            range(0, 8191, "h:1", &["h:3"]),
            range(8192, 16383, "h:2", &[]),
        ];
        topology.install(ranges.clone());
        assert_eq!(topology.generation(), 1);
        // The same map again (the periodic refresh): nothing for the workers to take.
        topology.install(ranges);
        assert_eq!(topology.generation(), 1);
        let first = topology.current();
        assert_eq!(topology.owner_addr(100).as_deref(), Some("h:1"));
        assert!(topology.in_slot_map("h:3") && !topology.in_slot_map("h:4"));

        // A MOVED to a known master: one new map, the same shards; a second worker hearing it changes nothing.
        topology.moved(100, "h:2");
        topology.moved(100, "h:2");
        assert_eq!(topology.generation(), 2);
        let moved = topology.current();
        assert!(Arc::ptr_eq(&first.shards, &moved.shards));
        assert_eq!(topology.owner_addr(100).as_deref(), Some("h:2"));
        assert_eq!(topology.owner_addr(101).as_deref(), Some("h:1"));

        // A MOVED to a master the map does not know yet adds it.
        topology.moved(101, "h:5");
        assert_eq!(topology.generation(), 3);
        assert_eq!(topology.owner_addr(101).as_deref(), Some("h:5"));
        assert_eq!(topology.candidates(), vec!["h:1", "h:2", "h:5"]);
        assert_eq!(topology.current().shards.len(), 3);
    }
}
