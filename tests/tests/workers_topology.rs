//! Backend topology shared by a gateway's workers, with real processes behind a gateway with two workers and
//! clients on both. A Redis Cluster master is killed: the slot map is the gateway process's, so the worker whose
//! clients had no traffic to the failed master's slots serves them as soon as the worker that had does; every
//! error any client sees is counted with its time, against the moment the cluster itself promoted a replica (read
//! from the replica's own `CLUSTER NODES`). A sentinel set is watched once per gateway (one subscription, whatever
//! the workers), and when its master is killed both workers follow within a second of the sentinels naming the
//! new one. Every client reads back each value it writes; the one read allowed to miss it is one that Redis lost
//! itself (see [`SentinelSet`]).

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde_json::json;
use switchyard_schemas::placement::{crc16, hash_tag};
use switchyard_tests::{Gateway, RedisCluster, SentinelGroup, wait_for, wait_for_async};

const PASSWORD: &str = "cluster-secret";

/// Clients per worker.
const CLIENTS: usize = 4;

/// How long after the promotion the gateway may still fail requests on any worker.
const GRACE: Duration = Duration::from_secs(1);

fn slot(key: &str) -> usize {
    usize::from(crc16(hash_tag(key.as_bytes())) % 16384)
}

/// What one client saw: its errors and the reads that missed a write Redis lost (each with when it came, from the
/// kill), and the requests it made to the failed master's keys after the promotion.
#[derive(Default)]
struct Seen {
    errors: Vec<(Duration, String)>,
    lost: Vec<(Duration, String)>,
    moved_after: u64,
}

/// The hash tags of the keys clients use: those the failed master serves, and those it does not.
struct Keys {
    moved: Vec<String>,
    stable: Vec<String>,
}

/// What a client sends.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Traffic {
    /// Requests for the failed master's keys and the others, in turn.
    Every = 0,
    /// Requests for the other keys only.
    Stable = 1,
    /// Nothing.
    Paused = 2,
}

/// A [`Traffic`] that the test changes while clients run.
struct Mode(AtomicU8);

impl Mode {
    fn new(traffic: Traffic) -> Arc<Mode> {
        Arc::new(Mode(AtomicU8::new(traffic as u8)))
    }

    fn set(&self, traffic: Traffic) {
        self.0.store(traffic as u8, Ordering::Relaxed);
    }

    fn get(&self) -> Traffic {
        match self.0.load(Ordering::Relaxed) {
            0 => Traffic::Every,
            1 => Traffic::Stable,
            _ => Traffic::Paused,
        }
    }
}

/// When things happened, as the clients see them, and the sentinel set behind the gateway if there is one.
#[derive(Default)]
struct Moments {
    killed: OnceLock<Instant>,
    promoted: OnceLock<Instant>,
    sentinels: Option<Arc<SentinelSet>>,
}

impl Moments {
    fn since_kill(&self) -> Duration {
        // An error before the kill is late by any measure.
        self.killed.get().map_or(Duration::MAX, Instant::elapsed)
    }
}

/// A sentinel set behind the gateway, asked about a read that did not return the client's own last write.
///
/// Redis Sentinel loses acknowledged writes when it fails over a master that is still up: the old master
/// acknowledges writes until the sentinels name the promoted replica (the failover's leader names it only once the
/// replica's `INFO` shows the promotion, up to a second or more later), and the promoted replica never gets them.
/// It happens here on a loaded machine: the sentinels time the master they have just switched to from the switch
/// on, so one that does not answer their `PING` within `down-after-milliseconds` (1 s here) is failed over in
/// turn, alive. A read that comes as the gateway moves to that second master misses the write the first one
/// acknowledged a moment before. Such a read is Redis' loss, not the gateway's, when the sentinels now name a master
/// other than the one they first promoted and that master holds exactly what the read returned.
struct SentinelSet {
    /// The URL of the sentinel asked (the first: the one the gateway watches while it answers).
    sentinel: String,
    master_name: String,
    /// The URL of each data node, by the port the sentinels name it by.
    nodes: Vec<(u16, String)>,
    /// The master the sentinels named first after the kill.
    promoted: OnceLock<u16>,
}

impl SentinelSet {
    fn new(group: &SentinelGroup) -> Arc<SentinelSet> {
        Arc::new(SentinelSet {
            sentinel: group.sentinel_url(group.sentinel_ports()[0]),
            master_name: group.master_name.clone(),
            nodes: group
                .data_ports()
                .into_iter()
                .map(|port| (port, group.client_url(port)))
                .collect(),
            promoted: OnceLock::new(),
        })
    }

    /// Whether a read of `key` that returned `read`, not the client's last write, is Redis' loss (see the type).
    async fn lost(&self, key: &str, read: Option<usize>) -> bool {
        let Some(&promoted) = self.promoted.get() else {
            return false;
        };
        // The sentinel asked may name the new master a little after the one the gateway heard it from.
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match self.master().await {
                Some(master) if master != promoted => {
                    return self.value(master, key).await == Some(read);
                }
                _ if Instant::now() > deadline => return false,
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    /// The port of the master the sentinel names.
    async fn master(&self) -> Option<u16> {
        let mut sentinel = redis::Client::open(self.sentinel.as_str())
            .ok()?
            .get_multiplexed_async_connection()
            .await
            .ok()?;
        let addr: Vec<String> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.master_name)
            .query_async(&mut sentinel)
            .await
            .ok()?;
        addr.get(1)?.parse().ok()
    }

    /// What the data node at `port` holds at `key`, read directly.
    async fn value(&self, port: u16, key: &str) -> Option<Option<usize>> {
        let (_, url) = self.nodes.iter().find(|(p, _)| *p == port)?;
        let mut node = redis::Client::open(url.as_str())
            .ok()?
            .get_multiplexed_async_connection()
            .await
            .ok()?;
        redis::cmd("GET").arg(key).query_async(&mut node).await.ok()
    }
}

/// SET and GET (checked), on the keys `mode` says, until `stop`.
async fn client(
    url: String,
    rank: usize,
    keys: Arc<Keys>,
    mode: Arc<Mode>,
    stop: Arc<AtomicBool>,
    rounds: Arc<AtomicU64>,
    moments: Arc<Moments>,
) -> Seen {
    let mut connection = switchyard_tests::connect(&url).await;
    let mut seen = Seen::default();
    let mut round = 0usize;
    while !stop.load(Ordering::Relaxed) {
        round += 1;
        rounds.fetch_add(1, Ordering::Relaxed);
        let moved = match mode.get() {
            Traffic::Paused => {
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
            Traffic::Stable => false,
            Traffic::Every => round.is_multiple_of(2),
        };
        let pool = if moved { &keys.moved } else { &keys.stable };
        // The pool's keys are hash tags: each client has its own keys, in the same slots as every other's.
        let key = &format!("{{{}}}:{rank}", pool[round % pool.len()]);
        let set: redis::RedisResult<()> = redis::cmd("SET")
            .arg(key)
            .arg(round)
            .query_async(&mut connection)
            .await;
        let error = match set {
            Ok(()) => match redis::cmd("GET")
                .arg(key)
                .query_async::<Option<usize>>(&mut connection)
                .await
            {
                Ok(Some(value)) if value == round => None,
                Ok(other) => {
                    let missed = format!("GET {key}: {other:?}, wanted {round}");
                    match &moments.sentinels {
                        Some(sentinels) if sentinels.lost(key, other).await => {
                            seen.lost.push((moments.since_kill(), missed));
                            continue;
                        }
                        _ => Some(missed),
                    }
                }
                Err(e) => Some(format!("GET {key}: {e}")),
            },
            Err(e) => Some(format!("SET {key}: {e}")),
        };
        match error {
            Some(error) => {
                seen.errors.push((moments.since_kill(), error));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            None if moved && moments.promoted.get().is_some() => seen.moved_after += 1,
            None => {}
        }
    }
    seen
}

/// `2 * CLIENTS` clients of `gateway`, connected one after the other. The gateway hands connections to its workers
/// in turn, so the clients of even rank are on one worker and those of odd rank on the other; they send what `even`
/// and `odd` (respectively) say.
struct Clients {
    stop: Arc<AtomicBool>,
    moments: Arc<Moments>,
    tasks: Vec<tokio::task::JoinHandle<Seen>>,
}

impl Clients {
    /// `sentinels`: the sentinel set behind the gateway, if that is what it serves.
    async fn start(
        gateway: &Gateway,
        keys: Keys,
        even: &Arc<Mode>,
        odd: &Arc<Mode>,
        sentinels: Option<Arc<SentinelSet>>,
    ) -> Clients {
        let keys = Arc::new(keys);
        let stop = Arc::new(AtomicBool::new(false));
        let moments = Arc::new(Moments {
            sentinels,
            ..Moments::default()
        });
        let mut rounds = Vec::new();
        let mut tasks = Vec::new();
        for rank in 0..2 * CLIENTS {
            let mode = Arc::clone(if rank % 2 == 0 { even } else { odd });
            let counter = Arc::new(AtomicU64::new(0));
            rounds.push(Arc::clone(&counter));
            tasks.push(tokio::spawn(client(
                gateway.url(None),
                rank,
                Arc::clone(&keys),
                mode,
                Arc::clone(&stop),
                counter,
                Arc::clone(&moments),
            )));
            // Connected (and so accepted by the gateway) before the next client connects.
            wait_for_async("the client to connect", Duration::from_secs(10), || {
                rounds[rank].load(Ordering::Relaxed) > 0
            })
            .await;
        }
        wait_for_async("every client under way", Duration::from_secs(10), || {
            rounds.iter().all(|r| r.load(Ordering::Relaxed) > 50)
        })
        .await;
        Clients {
            stop,
            moments,
            tasks,
        }
    }

    fn killed(&self) {
        let _ = self.moments.killed.set(Instant::now());
    }

    /// Notes the promotion; returns how long after the kill it came.
    fn promoted(&self) -> Duration {
        let _ = self.moments.promoted.set(Instant::now());
        let failover = self.since_kill();
        eprintln!("the new master was named {failover:?} after the kill");
        failover
    }

    fn since_kill(&self) -> Duration {
        self.moments
            .killed
            .get()
            .map(Instant::elapsed)
            .unwrap_or_default()
    }

    /// Stops the clients and checks that none failed a request more than `GRACE` after the promotion (`failover`
    /// after the kill), and that each was served on the failed master's keys after it. A read that missed a write
    /// Redis lost is no failure (see [`SentinelSet`]); it is shown.
    async fn check(self, failover: Duration) {
        self.stop.store(true, Ordering::Relaxed);
        let limit = failover + GRACE;
        for (rank, task) in self.tasks.into_iter().enumerate() {
            let seen = task.await.unwrap();
            let late: Vec<&(Duration, String)> =
                seen.errors.iter().filter(|(at, _)| *at > limit).collect();
            eprintln!(
                "client {rank} (worker {}): {} errors, the last {:?} after the kill, {} late; {} requests to the \
                 failed master's keys after the promotion",
                rank % 2,
                seen.errors.len(),
                seen.errors.last().map(|(at, _)| *at),
                late.len(),
                seen.moved_after,
            );
            for (at, missed) in &seen.lost {
                eprintln!(
                    "client {rank}: {at:?} after the kill, {missed}: a write Redis lost (the sentinels failed over \
                     again, and the master they name holds what was read)"
                );
            }
            assert!(
                late.is_empty(),
                "client {rank} failed {} requests more than {GRACE:?} after the promotion ({failover:?} after the \
                 kill), first: {:?}",
                late.len(),
                late.first()
            );
            assert!(
                seen.moved_after > 10,
                "client {rank} was served on the failed master's keys after the promotion"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_master_failover_no_worker_fails_beyond_the_clusters_own_failover() {
    let mut cluster = RedisCluster::start(3, 1, Some(PASSWORD));
    let gateway = Gateway::builder()
        .arg("--workers")
        .arg("2")
        .start(&switchyard_tests::open_single_tenant(json!(cluster.url())));

    let owners = cluster.slot_owners();
    let victim = cluster.masters()[0].clone();
    let replica = cluster
        .replicas()
        .into_iter()
        .find(|r| r.master_id.as_ref() == Some(&victim.id))
        .expect("the victim has a replica");
    let (moved, stable): (Vec<String>, Vec<String>) = (0..400)
        .map(|i| format!("failover:{i}"))
        .partition(|key| owners[slot(key)] == victim.port);
    assert!(moved.len() > 20 && stable.len() > 20);

    // One worker's clients use the failed master's slots throughout. The other's use only other masters' slots,
    // and send nothing at all from the kill until a while after the failover (during a failover every node of the
    // cluster answers `CLUSTERDOWN`): their worker learns nothing of the failover from its own requests.
    let busy = Mode::new(Traffic::Every);
    let idle = Mode::new(Traffic::Stable);
    let clients = Clients::start(&gateway, Keys { moved, stable }, &busy, &idle, None).await;

    cluster.wait_in_sync();
    idle.set(Traffic::Paused);
    clients.killed();
    cluster.kill(victim.port);
    // Polled closely: the promotion's time is the reference of every check.
    while !cluster
        .nodes_seen_by(replica.port)
        .iter()
        .any(|n| n.port == replica.port && n.master)
    {
        assert!(
            clients.since_kill() < Duration::from_secs(20),
            "no promotion within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let failover = clients.promoted();

    tokio::time::sleep(GRACE + Duration::from_millis(100)).await;
    idle.set(Traffic::Every);
    tokio::time::sleep(Duration::from_secs(3)).await;
    clients.check(failover).await;
}

/// The clients that subscribe on the sentinel at `port` (the sentinels themselves subscribe on the data nodes).
fn subscribers(group: &SentinelGroup, port: u16) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut group.sentinel_client(port))
        .unwrap_or_default();
    list.lines()
        .filter(|line| {
            line.split(' ')
                .any(|field| field.strip_prefix("sub=").is_some_and(|n| n != "0"))
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_set_is_watched_once_per_gateway_and_both_workers_follow_a_failover() {
    let mut group = SentinelGroup::start(2, 3);
    let old_master = group.master_port();
    let gateway = Gateway::builder()
        .arg("--workers")
        .arg("2")
        .start(&switchyard_tests::open_single_tenant(json!(group.url())));
    let keys: Vec<String> = (0..50).map(|i| format!("failover:{i}")).collect();
    let every = Mode::new(Traffic::Every);
    let keys = Keys {
        moved: keys.clone(),
        stable: keys,
    };
    let set = SentinelSet::new(&group);
    let clients = Clients::start(&gateway, keys, &every, &every, Some(Arc::clone(&set))).await;

    // Both workers serve the set; one subscription watches it.
    let sentinels = group.sentinel_ports();
    wait_for(
        "the gateway's subscription",
        Duration::from_secs(10),
        || {
            sentinels
                .iter()
                .map(|&p| subscribers(&group, p))
                .sum::<usize>()
                > 0
        },
    );
    std::thread::sleep(Duration::from_millis(500));
    let watching: Vec<usize> = sentinels.iter().map(|&p| subscribers(&group, p)).collect();
    assert_eq!(
        watching.iter().sum::<usize>(),
        1,
        "subscriptions per sentinel: {watching:?}"
    );

    group.wait_in_sync();
    clients.killed();
    group.kill(old_master);
    // The sentinels name the promoted replica (polled closely: every check is against this moment).
    let promoted = loop {
        let master = group.master_port();
        if master != old_master {
            break master;
        }
        assert!(
            clients.since_kill() < Duration::from_secs(30),
            "no failover within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let _ = set.promoted.set(promoted);
    let failover = clients.promoted();
    tokio::time::sleep(Duration::from_secs(3)).await;
    clients.check(failover).await;
}
