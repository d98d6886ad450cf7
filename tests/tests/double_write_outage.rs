//! A double-write secondary's outage under load, end to end: 20 writer threads write a mix of types through the
//! gateway (ack `primary`, `--state-dir`) with a real Redis client while the secondary is killed and restarted
//! with its data, killed and restarted empty, or frozen (SIGSTOP); a Redis Cluster secondary loses one master for a
//! while. The writers stop when the secondary is back; from then on the gateway alone (no migration verify) must
//! make both copies identical — every key, type, value, and TTL within a second — within 30 s. Each case prints
//! how long that took (the figures in docs/route-tables.md, "Repair of missed writes").

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::json;
use switchyard_tests::{Gateway, RedisCluster, RedisServer, SentinelGroup, StateDir, wait_for};

const PASSWORD: &str = "pa";
const WRITERS: u64 = 20;
/// Keys the writers share (each name keeps one type: the type is part of the name).
const KEYS: u64 = 2000;
const OUTAGE: Duration = Duration::from_secs(30);
/// How long after the secondary's return the copies must be identical.
const CONVERGENCE: Duration = Duration::from_secs(30);

/// One key's copy: its `DUMP` and its `PEXPIRETIME`, and for a set, a hash or a sorted set its content in an
/// order of its own (two payloads can differ for one value: a hash table is dumped in its own order).
#[derive(Debug, PartialEq)]
struct Copy {
    dump: Option<Vec<u8>>,
    /// Absolute, as the repair compares it: a time to live would differ by however long passed between the
    /// reads of the two sides.
    expires: i64,
    content: Option<Vec<Vec<u8>>>,
}

impl Copy {
    fn same_as(&self, other: &Copy) -> bool {
        // Within a second, as docs/route-tables.md says the repair makes them.
        let expires = match (self.expires, other.expires) {
            (a, b) if a < 0 || b < 0 => a == b,
            (a, b) => (a - b).abs() <= 1000,
        };
        let value = self.dump == other.dump
            || (self.dump.is_some() && self.content.is_some() && self.content == other.content);
        expires && value
    }
}

/// Every key of one server and its copy.
fn copies(con: &mut redis::Connection) -> BTreeMap<Vec<u8>, Copy> {
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(con).unwrap();
    let mut pipe = redis::pipe();
    for key in &keys {
        pipe.cmd("DUMP")
            .arg(key)
            .cmd("PEXPIRETIME")
            .arg(key)
            .cmd("TYPE")
            .arg(key);
    }
    let states: Vec<(Option<Vec<u8>>, i64, String)> = pipe.query(con).unwrap();
    keys.into_iter()
        .zip(states)
        .map(|(key, (dump, expires, kind))| {
            let content = content(con, &key, &kind);
            (
                key,
                Copy {
                    dump,
                    expires,
                    content,
                },
            )
        })
        .collect()
}

fn content(con: &mut redis::Connection, key: &[u8], kind: &str) -> Option<Vec<Vec<u8>>> {
    let mut items: Vec<Vec<u8>> = match kind {
        "set" => redis::cmd("SMEMBERS").arg(key).query(con).unwrap(),
        "hash" => redis::cmd("HGETALL").arg(key).query(con).unwrap(),
        "zset" => redis::cmd("ZRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(con)
            .unwrap(),
        _ => return None,
    };
    if kind == "hash" {
        let mut pairs: Vec<Vec<Vec<u8>>> = items.chunks(2).map(<[_]>::to_vec).collect();
        pairs.sort();
        return Some(pairs.concat());
    }
    if kind == "set" {
        items.sort();
    }
    Some(items)
}

/// The keys whose copies differ (missing on one side, or another type, value or TTL).
fn differing(
    primary: &BTreeMap<Vec<u8>, Copy>,
    secondary: &BTreeMap<Vec<u8>, Copy>,
) -> Vec<String> {
    let keys: BTreeSet<&Vec<u8>> = primary.keys().chain(secondary.keys()).collect();
    keys.into_iter()
        .filter(|key| match (primary.get(*key), secondary.get(*key)) {
            (Some(a), Some(b)) => !a.same_as(b),
            _ => true,
        })
        .map(|key| String::from_utf8_lossy(key).into_owned())
        .collect()
}

/// A side of the double-write: one server, a sentinel set's current master, or every master of a cluster.
enum Side<'a> {
    Server(&'a RedisServer),
    Sentinel(&'a SentinelGroup),
    Cluster(&'a RedisCluster),
}

impl Side<'_> {
    fn copies(&self) -> BTreeMap<Vec<u8>, Copy> {
        match self {
            Side::Server(server) => copies(&mut server.client()),
            Side::Sentinel(group) => copies(&mut group.client(group.master_port())),
            Side::Cluster(cluster) => cluster
                .masters()
                .iter()
                .flat_map(|master| copies(&mut cluster.client(master.port)))
                .collect(),
        }
    }
}

/// The writer threads, until stopped.
struct Writers {
    stop: Arc<AtomicBool>,
    written: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
}

impl Writers {
    fn start(url: &str) -> Writers {
        let (stop, written) = (Arc::default(), Arc::new(AtomicU64::new(0)));
        let threads = (0..WRITERS)
            .map(|seed| {
                let (url, stop, written) =
                    (url.to_string(), Arc::clone(&stop), Arc::clone(&written));
                std::thread::spawn(move || write_until(&url, &stop, &written, seed))
            })
            .collect();
        Writers {
            stop,
            written,
            threads,
        }
    }

    /// Stops every writer; the writes made.
    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads {
            thread.join().expect("a writer panicked");
        }
        self.written.load(Ordering::Relaxed)
    }
}

/// Writes until `stop`, reconnecting when the gateway goes away (killed and started again).
fn write_until(url: &str, stop: &AtomicBool, written: &AtomicU64, seed: u64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    while !stop.load(Ordering::Relaxed) {
        let connected = redis::Client::open(url)
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)));
        let Ok(mut con) = connected else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let _ = con.set_read_timeout(Some(Duration::from_secs(5)));
        while !stop.load(Ordering::Relaxed) {
            if let Err(e) = write_one(&mut con, &mut rng) {
                assert!(
                    e.is_io_error() || e.is_connection_dropped() || e.is_timeout(),
                    "a write failed: {e}"
                );
                break;
            }
            written.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Keys of every type written once before the outage and never again: a secondary that comes back without them
/// gets them back only from a catch-up.
fn cold_keys(gateway: &Gateway) {
    let mut con = redis::Client::open(gateway.url(Some(PASSWORD)))
        .and_then(|c| c.get_connection())
        .expect("connect to the gateway");
    let mut pipe = redis::pipe();
    for i in 0..100 {
        pipe.cmd("SET").arg(format!("cold-s{i}")).arg(i).ignore();
        pipe.cmd("SET")
            .arg(format!("cold-t{i}"))
            .arg(i)
            .arg("EX")
            .arg(900)
            .ignore();
        for (command, kind, member) in [
            ("HSET", "h", "f"),
            ("RPUSH", "l", "1"),
            ("SADD", "e", "a"),
            ("ZADD", "z", "1"),
        ] {
            let key = format!("cold-{kind}{i}");
            pipe.cmd(command).arg(key).arg(member).arg(i).ignore();
        }
    }
    let _: () = pipe.query(&mut con).expect("the cold keys written");
}

/// One write of a random kind to a random key (the kind is in the key's name, so that it keeps its type).
fn write_one(con: &mut redis::Connection, rng: &mut fastrand::Rng) -> redis::RedisResult<()> {
    let n = rng.u64(0..KEYS);
    let r = rng.u32(0..1000);
    let mut pipe = redis::pipe();
    if r.is_multiple_of(25) {
        let kind = ["s", "t", "c", "h", "l", "e", "z"][(n % 7) as usize];
        pipe.cmd("DEL").arg(format!("{kind}{n}"));
        return pipe.query(con);
    }
    match n % 7 {
        0 => pipe.cmd("SET").arg(format!("s{n}")).arg(format!("v{r}")),
        1 => pipe
            .cmd("SET")
            .arg(format!("t{n}"))
            .arg(format!("v{r}"))
            .arg("PX")
            .arg(300_000 + u64::from(r) * 600),
        2 => pipe.cmd("INCRBY").arg(format!("c{n}")).arg(r % 7 + 1),
        3 => pipe
            .cmd("HSET")
            .arg(format!("h{n}"))
            .arg(format!("f{}", r % 8))
            .arg(r),
        4 => pipe
            .cmd("RPUSH")
            .arg(format!("l{n}"))
            .arg(r)
            .cmd("LTRIM")
            .arg(format!("l{n}"))
            .arg(-16)
            .arg(-1),
        5 if r.is_multiple_of(3) => pipe.cmd("SREM").arg(format!("e{n}")).arg(r % 16),
        5 => pipe.cmd("SADD").arg(format!("e{n}")).arg(r % 16),
        _ => pipe
            .cmd("ZINCRBY")
            .arg(format!("z{n}"))
            .arg(1)
            .arg(format!("m{}", r % 12)),
    };
    pipe.query(con)
}

/// One case: a gateway double-writing tenant `o` (namespace `o:`) from the resource at `primary` to the one at
/// `secondary` with its records in a `--state-dir`, and the writers, which write from the start.
struct Case {
    urls: (String, String),
    state: StateDir,
    gateway: Gateway,
    writers: Writers,
}

impl Case {
    fn start(label: &str, primary: String, secondary: String) -> Case {
        let state = StateDir::new(&format!("outage-{label}"));
        let urls = (primary, secondary);
        let gateway = start_gateway(&urls, &state, None);
        cold_keys(&gateway);
        let writers = Writers::start(&gateway.url(Some(PASSWORD)));
        // Both copies fill up before the outage.
        std::thread::sleep(Duration::from_secs(3));
        Case {
            urls,
            state,
            gateway,
            writers,
        }
    }

    /// Kills the gateway (SIGKILL) and starts another on its port and `--state-dir`; the writers reconnect.
    fn restart_gateway(self) -> Case {
        let Case {
            urls,
            state,
            mut gateway,
            writers,
        } = self;
        gateway.signal("KILL");
        assert!(gateway.wait_exit(Duration::from_secs(5)).is_some());
        let port = gateway.port();
        // Its directory goes first: the next one on the same port gets the same.
        drop(gateway);
        let gateway = start_gateway(&urls, &state, Some(port));
        Case {
            urls,
            state,
            gateway,
            writers,
        }
    }

    /// The secondary is back: the writers stop, and the copies must be identical within [`CONVERGENCE`] (see
    /// [`converges`]). The gateway, for what else the case checks.
    fn back(self, name: &str, primary: &Side<'_>, secondary: &Side<'_>) -> Gateway {
        let returned = Instant::now();
        let written = self.writers.stop();
        let sides = (primary, secondary);
        converges(name, &self.gateway, sides, (returned, written));
        self.gateway
    }

    /// [`Case::back`] after the secondary came back as another server (restarted, or failed over), which the
    /// gateway must see and answer with a catch-up of every key (the cold keys need one). Its watch reads the
    /// secondary's masters on rounds of its own (a cluster's as its slot map has them), which the copies may
    /// beat to identical when the repair of the missed writes was enough: the catch-up is waited for.
    fn back_caught_up(self, name: &str, primary: &Side<'_>, secondary: &Side<'_>) {
        let gateway = self.back(name, primary, secondary);
        wait_for(
            &format!("{name}: a catch-up asked"),
            Duration::from_secs(15),
            || gateway.log().contains("came back as another server"),
        );
    }
}

fn start_gateway(
    (primary, secondary): &(String, String),
    state: &StateDir,
    port: Option<u16>,
) -> Gateway {
    let routes = json!({"tenants": [{"name": "o", "passwords": [PASSWORD], "namespace": "o:", "route": {
        "type": "double_write", "ack": "primary",
        "primary": {"type": "single", "target": primary},
        "secondary": {"type": "single", "target": secondary}}}]});
    let mut builder = Gateway::builder().state_dir(state);
    if let Some(port) = port {
        builder = builder.port(port);
    }
    builder.start(&routes)
}

/// Waits (at most [`CONVERGENCE`] from the secondary's return) until both copies are identical; prints how long
/// after the return that was.
fn converges(
    case: &str,
    gateway: &Gateway,
    (primary, secondary): (&Side<'_>, &Side<'_>),
    (returned, written): (Instant, u64),
) {
    let mut first = None;
    loop {
        let ours = primary.copies();
        let apart = differing(&ours, &secondary.copies());
        let first = *first.get_or_insert(apart.len());
        if apart.is_empty() {
            println!(
                "{case}: identical {:.1} s after the secondary's return ({written} writes, {} keys, {first} \
                 differing at the first comparison)",
                returned.elapsed().as_secs_f64(),
                ours.len()
            );
            assert!(
                first > 0,
                "{case}: the copies never differed: the case tests nothing"
            );
            return;
        }
        if returned.elapsed() > CONVERGENCE {
            let log = gateway.log();
            let repair: Vec<&str> = log.lines().filter(|l| l.contains("repair")).collect();
            panic!(
                "{case}: {} keys still differ {CONVERGENCE:?} after the secondary's return (first: {:?})\n{}",
                apart.len(),
                &apart[..apart.len().min(10)],
                repair[repair.len().saturating_sub(30)..].join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// (a) The secondary (persistence on) killed for 30 s and started again with its data; meanwhile the gateway is
/// killed too and started again on its `--state-dir`, and the writers reconnect.
#[test]
fn a_secondary_killed_and_restarted_with_its_data_converges() {
    let primary = RedisServer::start();
    let mut secondary = RedisServer::builder()
        .arg("--appendonly")
        .arg("yes")
        .start();
    let case = Case::start("a", primary.url(), secondary.url());
    secondary.kill();
    std::thread::sleep(OUTAGE / 3);
    let case = case.restart_gateway();
    std::thread::sleep(OUTAGE * 2 / 3);
    secondary.restart();
    let name = "(a) killed, restarted with its data, gateway killed meanwhile";
    case.back(name, &Side::Server(&primary), &Side::Server(&secondary));
}

/// (b) The secondary (no persistence) killed for 30 s and started again empty; meanwhile the gateway is killed
/// and started again on its `--state-dir`, from which the next gateway learns what the secondary was before it
/// went away.
#[test]
fn a_secondary_killed_and_restarted_empty_converges() {
    let (primary, mut secondary) = (RedisServer::start(), RedisServer::start());
    let case = Case::start("b", primary.url(), secondary.url());
    secondary.kill();
    std::thread::sleep(OUTAGE / 3);
    let case = case.restart_gateway();
    std::thread::sleep(OUTAGE * 2 / 3);
    secondary.restart();
    let name = "(b) killed, restarted empty, gateway killed meanwhile";
    case.back_caught_up(name, &Side::Server(&primary), &Side::Server(&secondary));
}

/// (c) The secondary frozen (SIGSTOP) for 30 s, then let go on (SIGCONT).
#[test]
fn a_frozen_secondary_converges() {
    let (primary, secondary) = (RedisServer::start(), RedisServer::start());
    let case = Case::start("c", primary.url(), secondary.url());
    secondary.freeze();
    std::thread::sleep(OUTAGE);
    secondary.thaw();
    case.back(
        "(c) frozen",
        &Side::Server(&primary),
        &Side::Server(&secondary),
    );
}

/// A Redis Cluster secondary (3 masters, no replicas) one master of which is frozen for 20 s: the cluster marks
/// it failed and refuses every write (`CLUSTERDOWN`) until it is back; the keys are repaired on the master owning
/// each key's slot.
#[test]
fn a_cluster_secondary_that_lost_a_master_converges() {
    let (primary, cluster) = (RedisServer::start(), RedisCluster::start(3, 0, None));
    let case = Case::start("cluster", primary.url(), cluster.url());
    let frozen = cluster.masters()[1].port;
    cluster.freeze(frozen);
    std::thread::sleep(Duration::from_secs(20));
    cluster.thaw(frozen);
    let name = "cluster secondary: one master frozen 20 s";
    case.back(name, &Side::Server(&primary), &Side::Cluster(&cluster));
}

/// A Redis Cluster secondary (3 masters, one replica each) one master of which is killed: its replica takes its
/// slots over, which the watch on restarts sees (the cluster's masters changed): every key is compared.
#[test]
fn a_cluster_secondary_that_failed_over_converges() {
    let primary = RedisServer::start();
    let mut cluster = RedisCluster::start(3, 1, None);
    let case = Case::start("cluster-failover", primary.url(), cluster.url());
    let killed = cluster.masters()[0].port;
    cluster.kill(killed);
    wait_for("the replica promoted", Duration::from_secs(30), || {
        let masters = cluster.masters();
        masters.len() == 3 && masters.iter().all(|m| m.port != killed && !m.failed)
    });
    let name = "cluster secondary: a master killed, its replica promoted";
    case.back_caught_up(name, &Side::Server(&primary), &Side::Cluster(&cluster));
}

/// A sentinel-managed secondary whose master is killed: the sentinels promote the replica, which the repair
/// follows (its keys are repaired on the new master, and the new master asks for a catch-up of every key).
#[test]
fn a_sentinel_secondary_that_failed_over_converges() {
    let primary = RedisServer::start();
    let mut group = SentinelGroup::start(1, 3);
    let case = Case::start("sentinel", primary.url(), group.url());
    let master = group.master_port();
    group.kill(master);
    wait_for("the replica promoted", Duration::from_secs(30), || {
        group.master_port() != master
    });
    let new_master = group.master_port();
    wait_for("the new master a master", Duration::from_secs(10), || {
        let role: Vec<redis::Value> = redis::cmd("ROLE")
            .query(&mut group.client(new_master))
            .unwrap_or_default();
        matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master")
    });
    let name = "sentinel secondary: master killed, replica promoted";
    case.back_caught_up(name, &Side::Server(&primary), &Side::Sentinel(&group));
}

/// A Redis Cluster primary and a sentinel-managed primary, each over a standalone secondary killed for 15 s
/// and started again empty: the catch-up walks every master of the cluster, and the sentinel set's master.
#[test]
fn cluster_and_sentinel_primaries_fill_an_empty_secondary() {
    let (cluster, group) = (RedisCluster::start(3, 0, None), SentinelGroup::start(0, 1));
    let primaries = [
        ("cluster primary", cluster.url(), Side::Cluster(&cluster)),
        ("sentinel primary", group.url(), Side::Sentinel(&group)),
    ];
    for (name, url, primary) in primaries {
        let mut secondary = RedisServer::start();
        let case = Case::start(name, url, secondary.url());
        secondary.kill();
        std::thread::sleep(Duration::from_secs(15));
        secondary.restart();
        let name = format!("{name}: the secondary killed 15 s, restarted empty");
        case.back(&name, &primary, &Side::Server(&secondary));
    }
}
