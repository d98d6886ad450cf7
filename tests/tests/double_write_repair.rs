//! Double-write repair end to end: real redis-servers and the gateway binary. A secondary that refuses writes, or
//! is frozen (SIGSTOP) past the command timeout, misses them; once it answers again the gateway copies every key
//! it missed from the primary by itself, and live writes made meanwhile are never overwritten by older values.
//! Both servers are compared key by key (DUMP and PTTL).

use std::collections::BTreeSet;
use std::time::Duration;

use redis::Commands;
use serde_json::json;
use switchyard_tests::{Gateway, RedisServer, StateDir, wait_for};

const PASSWORD: &str = "pa";

/// A double-write route from `primary` to `secondary` for tenant `a` (namespace `a:`), background copies.
fn routes(primary: &RedisServer, secondary: &RedisServer) -> serde_json::Value {
    json!({"tenants": [{"name": "a", "passwords": [PASSWORD], "namespace": "a:", "route": {
        "type": "double_write", "ack": "primary",
        "primary": {"type": "single", "target": primary.url()},
        "secondary": {"type": "single", "target": secondary.url()}}}]})
}

fn client(gateway: &Gateway) -> redis::Connection {
    redis::Client::open(gateway.url(Some(PASSWORD)))
        .and_then(|c| c.get_connection())
        .expect("connect to the gateway")
}

/// The keys of one server (all of them: the test's neighbours' too).
fn keys(server: &RedisServer) -> BTreeSet<Vec<u8>> {
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.client())
        .unwrap();
    keys.into_iter().collect()
}

/// A set's, a hash's or a sorted set's content in an order of its own: their payloads can differ for one value
/// (a hash table is dumped in its own order).
fn content(con: &mut redis::Connection, key: &[u8]) -> Option<Vec<Vec<u8>>> {
    let kind: String = redis::cmd("TYPE").arg(key).query(con).unwrap();
    let mut items: Vec<Vec<u8>> = match kind.as_str() {
        "set" => redis::cmd("SMEMBERS").arg(key).query(con).unwrap(),
        "hash" => {
            let mut pairs: Vec<(Vec<u8>, Vec<u8>)> =
                redis::cmd("HGETALL").arg(key).query(con).unwrap();
            pairs.sort();
            return Some(pairs.into_iter().flat_map(|(f, v)| [f, v]).collect());
        }
        "zset" => {
            let query = redis::cmd("ZRANGE")
                .arg(key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query(con);
            return Some(query.unwrap());
        }
        _ => return None,
    };
    items.sort();
    Some(items)
}

/// The keys whose copies differ: by `DUMP` (value and type; by content for a set, a hash or a sorted set dumped
/// differently), or by `PTTL` beyond a second.
fn differing(primary: &RedisServer, secondary: &RedisServer) -> Vec<String> {
    let (mut p, mut s) = (primary.client(), secondary.client());
    let all: BTreeSet<Vec<u8>> = keys(primary).union(&keys(secondary)).cloned().collect();
    let state = |con: &mut redis::Connection, key: &[u8]| -> (Option<Vec<u8>>, i64) {
        let (dump, ttl): (Option<Vec<u8>>, i64) = redis::pipe()
            .cmd("DUMP")
            .arg(key)
            .cmd("PTTL")
            .arg(key)
            .query(con)
            .unwrap();
        (dump, ttl)
    };
    all.into_iter()
        .filter(|key| {
            let ((pd, pt), (sd, st)) = (state(&mut p, key), state(&mut s, key));
            let ttl_apart = match (pt, st) {
                (a, b) if a < 0 || b < 0 => a != b,
                (a, b) => (a - b).abs() > 1000,
            };
            let apart = match (&pd, &sd) {
                (a, b) if a == b => false,
                (Some(_), Some(_)) => {
                    let ours = content(&mut p, key);
                    ours.is_none() || ours != content(&mut s, key)
                }
                _ => true,
            };
            apart || ttl_apart
        })
        .map(|key| String::from_utf8_lossy(&key).into_owned())
        .collect()
}

/// Makes `server` refuse every write (`NOREPLICAS`) when `n` is 1, and take them again when 0.
fn refuse_writes(server: &RedisServer, n: u32) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("min-replicas-to-write")
        .arg(n)
        .query(&mut server.client())
        .unwrap();
}

/// The sum of every sample of the family `name` (all its label sets).
fn metric_sum(gateway: &Gateway, name: &str) -> i64 {
    let (_, text) = gateway.admin_get("/metrics");
    text.lines()
        .filter(|line| line.starts_with(&format!("{name}{{")))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<i64>().ok())
        .sum()
}

/// Every write family the test makes while the secondary misses them: strings, hashes, lists, sets, sorted sets,
/// counters, deletes, expiries (set and removed), and many plain keys.
fn writes(con: &mut redis::Connection, round: u32) {
    let _: () = redis::pipe()
        .cmd("SET")
        .arg("s")
        .arg(format!("v{round}"))
        .ignore()
        .cmd("HSET")
        .arg("h")
        .arg(format!("f{round}"))
        .arg("v")
        .ignore()
        .cmd("DEL")
        .arg("gone")
        .ignore()
        .cmd("EXPIRE")
        .arg("expiring")
        .arg(600)
        .ignore()
        .cmd("PERSIST")
        .arg("kept")
        .ignore()
        .cmd("INCR")
        .arg("counter")
        .ignore()
        .cmd("INCRBY")
        .arg("counter")
        .arg(5)
        .ignore()
        .cmd("RPUSH")
        .arg("list")
        .arg(round)
        .ignore()
        .cmd("SADD")
        .arg("set")
        .arg(format!("m{round}"))
        .ignore()
        .cmd("ZADD")
        .arg("zset")
        .arg(round)
        .arg(format!("m{round}"))
        .ignore()
        .cmd("SET")
        .arg(format!("new{round}"))
        .arg("v")
        .arg("PX")
        .arg(300_000)
        .ignore()
        .query(con)
        .unwrap();
    let mut many = redis::pipe();
    for i in 0..200 {
        many.cmd("SET")
            .arg(format!("k{i}"))
            .arg(format!("{round}-{i}"))
            .ignore();
    }
    let _: () = many.query(con).unwrap();
}

/// What both sides hold before the secondary misses anything.
fn seed(con: &mut redis::Connection) {
    let _: () = redis::pipe()
        .cmd("SET")
        .arg("gone")
        .arg("x")
        .ignore()
        .cmd("SET")
        .arg("expiring")
        .arg("x")
        .ignore()
        .cmd("SET")
        .arg("kept")
        .arg("x")
        .arg("EX")
        .arg(900)
        .ignore()
        .cmd("SET")
        .arg("counter")
        .arg(10)
        .ignore()
        .query(con)
        .unwrap();
}

/// Waits until the keys that differ are exactly `expected`; past 15 s, fails naming them and the gateway's log.
fn equal_but(gateway: &Gateway, primary: &RedisServer, secondary: &RedisServer, expected: &[&str]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let apart = differing(primary, secondary);
        if apart == expected {
            return;
        }
        if std::time::Instant::now() > deadline {
            let log = gateway.log();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            panic!("the copies still differ: {apart:?}\n{}", tail.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn converged(gateway: &Gateway, primary: &RedisServer, secondary: &RedisServer) {
    equal_but(gateway, primary, secondary, &[]);
    wait_for("nothing left to repair", Duration::from_secs(10), || {
        metric_sum(gateway, "switchyard_repair_pending_keys") == 0
    });
}

#[test]
fn a_secondary_that_refused_writes_catches_up_by_itself() {
    let (primary, secondary) = (RedisServer::start(), RedisServer::start());
    // A neighbour's key on the secondary only: nothing of the repair may touch it.
    let _: () = redis::cmd("SET")
        .arg("b:neighbour")
        .arg("theirs")
        .query(&mut secondary.client())
        .unwrap();
    let gateway = Gateway::start(&routes(&primary, &secondary));
    let mut con = client(&gateway);
    seed(&mut con);
    wait_for("the seed on both sides", Duration::from_secs(5), || {
        differing(&primary, &secondary) == ["b:neighbour"]
    });

    // The secondary refuses every write (NOREPLICAS) while the writes go on.
    let refuse = |n: u32| refuse_writes(&secondary, n);
    refuse(1);
    for round in 0..3 {
        writes(&mut con, round);
    }
    wait_for("the failures counted", Duration::from_secs(5), || {
        metric_sum(&gateway, "switchyard_double_write_failures_total") >= 3 * 211
    });
    let apart = differing(&primary, &secondary);
    assert!(apart.len() > 200, "the copies should differ now: {apart:?}");
    assert!(metric_sum(&gateway, "switchyard_repair_pending_keys") > 200);

    refuse(0);
    equal_but(&gateway, &primary, &secondary, &["b:neighbour"]);
    wait_for("nothing left to repair", Duration::from_secs(10), || {
        metric_sum(&gateway, "switchyard_repair_pending_keys") == 0
    });
    assert!(metric_sum(&gateway, "switchyard_repair_repaired_total") > 200);
    assert!(!gateway.log().contains("gave up"), "no key given up");
    assert_eq!(metric_sum(&gateway, "switchyard_repair_divergent_keys"), 0);
    let neighbour: Option<String> = secondary.client().get("b:neighbour").unwrap();
    assert_eq!(neighbour.as_deref(), Some("theirs"));
}

#[test]
fn a_frozen_secondary_catches_up_once_thawed() {
    let (primary, secondary) = (RedisServer::start(), RedisServer::start());
    let gateway = Gateway::builder()
        .arg("--command-timeout-ms")
        .arg("300")
        .start(&routes(&primary, &secondary));
    let mut con = client(&gateway);
    seed(&mut con);
    wait_for("the seed on both sides", Duration::from_secs(5), || {
        differing(&primary, &secondary).is_empty()
    });
    secondary.freeze();
    for round in 0..3 {
        writes(&mut con, round);
        std::thread::sleep(Duration::from_millis(400));
    }
    wait_for("the timeouts counted", Duration::from_secs(10), || {
        metric_sum(&gateway, "switchyard_repair_pending_keys") > 200
    });
    secondary.thaw();
    converged(&gateway, &primary, &secondary);
}

/// Live writes to the very keys being repaired, from several clients, while the repair runs: the secondary ends
/// equal to the primary every time, never left with an older value.
#[test]
fn live_writes_during_a_repair_are_not_overwritten() {
    let (primary, secondary) = (RedisServer::start(), RedisServer::start());
    let gateway = Gateway::start(&routes(&primary, &secondary));
    let refuse = |n: u32| refuse_writes(&secondary, n);
    for attempt in 0..5 {
        refuse(1);
        let mut con = client(&gateway);
        for i in 0..300 {
            let _: () = redis::pipe()
                .cmd("INCR")
                .arg(format!("race{}", i % 60))
                .ignore()
                .cmd("SET")
                .arg(format!("last{}", i % 60))
                .arg(format!("{attempt}-{i}"))
                .ignore()
                .query(&mut con)
                .unwrap();
        }
        refuse(0);
        // Writers hit the same keys while the repair copies them.
        let writers: Vec<_> = (0..4)
            .map(|w| {
                let mut con = client(&gateway);
                std::thread::spawn(move || {
                    for i in 0..400 {
                        let _: () = redis::pipe()
                            .cmd("INCR")
                            .arg(format!("race{}", (i + w * 7) % 60))
                            .ignore()
                            .cmd("SET")
                            .arg(format!("last{}", (i + w * 7) % 60))
                            .arg(format!("{attempt}-live-{w}-{i}"))
                            .ignore()
                            .query(&mut con)
                            .unwrap();
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        converged(&gateway, &primary, &secondary);
    }
}

/// The record of missed keys outlives a gateway killed (SIGKILL) while the secondary refuses writes: the gateway
/// started again on the same `--state-dir` repairs them, though it never saw a write fail.
#[test]
fn missed_keys_outlive_a_killed_gateway() {
    let (primary, secondary) = (RedisServer::start(), RedisServer::start());
    let state = StateDir::new(&primary.port().to_string());
    let start = || {
        Gateway::builder()
            .state_dir(&state)
            .start(&routes(&primary, &secondary))
    };
    let mut gateway = start();
    let mut con = client(&gateway);
    refuse_writes(&secondary, 1);
    for round in 0..2 {
        writes(&mut con, round);
    }
    wait_for("the keys recorded", Duration::from_secs(5), || {
        metric_sum(&gateway, "switchyard_repair_pending_keys") > 200
    });
    gateway.signal("KILL");
    assert!(gateway.wait_exit(Duration::from_secs(5)).is_some());
    drop(gateway);

    refuse_writes(&secondary, 0);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        differing(&primary, &secondary).len() > 200,
        "nothing repairs while no gateway runs"
    );
    let gateway = start();
    converged(&gateway, &primary, &secondary);
    assert!(metric_sum(&gateway, "switchyard_repair_repaired_total") > 200);
}

/// A secondary killed and started again empty (no persistence) while the writes go on: it lost keys no write
/// failed for, which its new `run_id` tells; every key of the tenant is compared and copied, and a neighbour's
/// keys (outside the tenant's namespace) are neither copied nor deleted.
#[test]
fn a_secondary_that_comes_back_empty_gets_every_key() {
    let primary = RedisServer::start();
    let secondary = RedisServer::start();
    let port = secondary.port();
    let _: () = primary.client().set("b:primary-only", "theirs").unwrap();
    let gateway = Gateway::start(&routes(&primary, &secondary));
    let mut con = client(&gateway);
    seed(&mut con);
    writes(&mut con, 0);
    wait_for("the writes on both sides", Duration::from_secs(5), || {
        differing(&primary, &secondary) == ["b:primary-only"]
    });
    // The gateway reads the secondary's identity each second: let it see the first one.
    std::thread::sleep(Duration::from_millis(1500));

    drop(secondary);
    writes(&mut con, 1);
    let secondary = RedisServer::builder().start_on(port);
    let _: () = secondary
        .client()
        .set("b:secondary-only", "theirs")
        .unwrap();
    writes(&mut con, 2);
    equal_but(
        &gateway,
        &primary,
        &secondary,
        &["b:primary-only", "b:secondary-only"],
    );
    wait_for("the catch-up done", Duration::from_secs(10), || {
        metric_sum(&gateway, "switchyard_repair_catching_up") == 0
    });
    assert!(metric_sum(&gateway, "switchyard_repair_catch_ups_total") >= 1);
    assert!(metric_sum(&gateway, "switchyard_repair_scanned_keys_total") > 200);
    assert!(gateway.log().contains("came back as another server"));
}

/// With ack `all` or `all_check_error` the client waits for the secondary (and with `all_check_error` sees its
/// refusal), but the primary applied the write all the same: the keys are recorded and repaired as with ack
/// `primary`.
#[test]
fn writes_the_client_waited_for_are_repaired_too() {
    for ack in ["all", "all_check_error"] {
        let (primary, secondary) = (RedisServer::start(), RedisServer::start());
        let mut routes = routes(&primary, &secondary);
        routes["tenants"][0]["route"]["ack"] = json!(ack);
        let gateway = Gateway::start(&routes);
        let mut con = client(&gateway);
        seed(&mut con);
        wait_for("the seed on both sides", Duration::from_secs(5), || {
            differing(&primary, &secondary).is_empty()
        });
        refuse_writes(&secondary, 1);
        for i in 0..50 {
            let set: redis::RedisResult<()> = redis::cmd("SET")
                .arg(format!("k{i}"))
                .arg("v")
                .query(&mut con);
            let incr: redis::RedisResult<i64> = redis::cmd("INCR").arg("counter").query(&mut con);
            let refused = ack == "all_check_error";
            assert_eq!(set.is_err(), refused, "{ack}: {set:?}");
            assert_eq!(incr.is_err(), refused, "{ack}: {incr:?}");
        }
        assert_eq!(differing(&primary, &secondary).len(), 51, "{ack}");
        wait_for("the keys recorded", Duration::from_secs(5), || {
            metric_sum(&gateway, "switchyard_repair_pending_keys") == 51
        });
        refuse_writes(&secondary, 0);
        converged(&gateway, &primary, &secondary);
    }
}
