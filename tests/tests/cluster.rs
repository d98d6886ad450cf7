//! Redis Cluster behind the gateway, with real processes: keys on their owning nodes, multi-key commands split by
//! slot, replica reads, a double-write from a standalone Redis onto a cluster, live resharding under load, a master
//! failover, a redirect loop cut short, and a pipeline over the masters while one of them is down. The cluster nodes require a password
//! (and the gateway reaches them as an ACL user in the first test). Replica reads, the double-write onto a cluster
//! and redirects during a slot migration are checked for clients speaking RESP2 and RESP3, and half the load
//! clients of the live resharding speak RESP3.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use switchyard_schemas::placement::{crc16, hash_tag};
use switchyard_tests::{
    Gateway, PROTOCOLS, RawClient, RedisCluster, RedisServer, assert_speaks, each_protocol_async,
    wait_for_async,
};

const PASSWORD: &str = "cluster-secret";

fn slot(key: &str) -> usize {
    usize::from(crc16(hash_tag(key.as_bytes())) % 16384)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_land_on_their_owners_multi_key_commands_split_by_slot_and_replicas_serve_reads() {
    // The gateway authenticates as an ACL user; replication and the checks below use the default user.
    let cluster =
        RedisCluster::start_with_user(3, 1, Some(PASSWORD), Some(("gateway", "gw-secret")));
    let gateway = Gateway::start(&switchyard_tests::open_single_tenant(json!(cluster.url())));
    let mut client = gateway.client(None).await;

    let mut pipe = redis::pipe();
    for i in 0..10_000 {
        pipe.set(format!("key:{i}"), i).ignore();
    }
    let () = pipe.query_async(&mut client).await.unwrap();

    // Every key is on the master that owns its slot, with its value.
    let owners = cluster.slot_owners();
    let mut seen = 0;
    for master in cluster.masters() {
        let mut node = cluster.client(master.port);
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut node).unwrap();
        for key in &keys {
            assert_eq!(owners[slot(key)], master.port, "{key} on the wrong node");
        }
        for key in keys.iter().step_by(50) {
            let value: String = redis::cmd("GET").arg(key).query(&mut node).unwrap();
            assert_eq!(Some(value.as_str()), key.strip_prefix("key:"));
        }
        seen += keys.len();
    }
    assert_eq!(seen, 10_000);
    for master in cluster.masters() {
        let clients: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut cluster.client(master.port))
            .unwrap();
        // Logged in with the URL's user, which set up the gateway's own ACL user (see backend::identity).
        assert!(clients.contains("user=switchyard-gateway"), "{clients}");
    }
    let size: i64 = redis::cmd("DBSIZE").query_async(&mut client).await.unwrap();
    assert_eq!(size, 10_000, "DBSIZE sums every master");

    // Once the slot map is known, every keyed command goes straight to its owner: no master answers MOVED.
    for master in cluster.masters() {
        let () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut cluster.client(master.port))
            .unwrap();
    }
    let mut pipe = redis::pipe();
    for i in 0..10_000 {
        pipe.get(format!("key:{i}")).ignore();
        pipe.set(format!("key:{i}"), i).ignore();
    }
    let () = pipe.query_async(&mut client).await.unwrap();
    for master in cluster.masters() {
        let errors: String = redis::cmd("INFO")
            .arg("errorstats")
            .query(&mut cluster.client(master.port))
            .unwrap();
        assert!(!errors.contains("errorstat_MOVED"), "{errors}");
        assert!(!errors.contains("errorstat_ASK"), "{errors}");
    }

    // MSET/MGET/DEL/EXISTS over 30 slots, keys sharing a hash tag travelling together.
    let keys: Vec<String> = (0..28)
        .map(|i| format!("multi:{i}"))
        .chain(["{tag}a".to_string(), "{tag}b".to_string()])
        .collect();
    let mut mset = redis::cmd("MSET");
    for key in &keys {
        mset.arg(key).arg(format!("v-{key}"));
    }
    let () = mset.query_async(&mut client).await.unwrap();
    let mut wanted: Vec<String> = keys.clone();
    wanted.insert(5, "multi:missing".to_string());
    let values: Vec<Option<String>> = redis::cmd("MGET")
        .arg(&wanted)
        .query_async(&mut client)
        .await
        .unwrap();
    let expected: Vec<Option<String>> = wanted
        .iter()
        .map(|k| (k != "multi:missing").then(|| format!("v-{k}")))
        .collect();
    assert_eq!(values, expected, "MGET answers in key order");
    for key in &keys {
        let value: Option<String> = redis::cmd("GET")
            .arg(key)
            .query(&mut cluster.client(owners[slot(key)]))
            .unwrap();
        assert_eq!(value, Some(format!("v-{key}")));
    }
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&wanted)
        .query_async(&mut client)
        .await
        .unwrap();
    assert_eq!(exists, 30);

    // Same-slot multi-key commands pass through; cross-slot ones that cannot be split are refused like Redis does.
    let mut raw = RawClient::connect(gateway.port());
    raw.roundtrip(
        b"SUNIONSTORE {tag}dst {tag}a {tag}b\r\n",
        b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
    );
    raw.roundtrip(
        b"SUNION multi:1 multi:2\r\n",
        b"-CROSSSLOT Keys in request don't hash to the same slot\r\n",
    );
    raw.roundtrip(b"RENAME {tag}a {tag}c\r\n", b"+OK\r\n");
    raw.roundtrip(b"GET {tag}c\r\n", b"$8\r\nv-{tag}a\r\n");

    let deleted: i64 = redis::cmd("DEL")
        .arg(&wanted)
        .arg("{tag}c")
        .query_async(&mut client)
        .await
        .unwrap();
    assert_eq!(deleted, 30);

    // Reads through a -slaves resource land on replicas (once replication has caught up).
    switchyard_tests::wait_for(
        "replicas to hold every key",
        Duration::from_secs(10),
        || {
            cluster
                .replicas()
                .iter()
                .map(|r| {
                    redis::cmd("DBSIZE")
                        .query::<usize>(&mut cluster.client(r.port))
                        .unwrap_or(0)
                })
                .sum::<usize>()
                == 10_000
        },
    );
    // Clients learn about replicas from CLUSTER SLOTS, which lists a replica once its offset has spread.
    switchyard_tests::wait_for(
        "CLUSTER SLOTS to list every replica",
        Duration::from_secs(10),
        || {
            cluster
                .live_ports()
                .iter()
                .all(|&port| cluster.replicas_in_slots(port) == 3)
        },
    );
    let split = json!({"read": {"resources": [cluster.slaves_url(false)]},
                       "write": {"resources": [cluster.url()]}});
    let reads = Gateway::start(&switchyard_tests::open_single_tenant(split));
    let standalone = RedisServer::start();
    let migration =
        json!({"write": {"resources": [standalone.url(), cluster.url()], "ack": "all"}});
    let both = Gateway::start(&switchyard_tests::open_single_tenant(migration));
    for protocol in PROTOCOLS {
        eprintln!("--- RESP{protocol}");
        let mut reader = reads.client_speaking(None, protocol).await;
        assert_speaks(&mut reader, protocol, &format!("speaks:{protocol}")).await;
        for port in cluster.live_ports() {
            let () = redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query(&mut cluster.client(port))
                .unwrap();
        }
        for i in (0..10_000).step_by(5) {
            let value: i64 = redis::cmd("GET")
                .arg(format!("key:{i}"))
                .query_async(&mut reader)
                .await
                .unwrap();
            assert_eq!(value, i);
        }
        let on_replicas: u64 = cluster
            .replicas()
            .iter()
            .map(|r| switchyard_tests::command_calls(&mut cluster.client(r.port), "get"))
            .sum();
        let on_masters: u64 = cluster
            .masters()
            .iter()
            .map(|m| switchyard_tests::command_calls(&mut cluster.client(m.port), "get"))
            .sum();
        assert_eq!(
            (on_replicas, on_masters),
            (2_000, 0),
            "reads on (replicas, masters); gateway log:\n{}",
            reads.log()
        );
        let () = redis::cmd("SET")
            .arg("written")
            .arg("through the write set")
            .query_async(&mut reader)
            .await
            .unwrap();

        // A double-write from a standalone Redis onto the cluster (a migration): both get every key, and a split
        // multi-key write reaches each slot's owner.
        let mut writer = both.client_speaking(None, protocol).await;
        assert_speaks(&mut writer, protocol, &format!("speaks:{protocol}")).await;
        let keys: Vec<String> = (0..20).map(|i| format!("dw{protocol}:{i}")).collect();
        let mut mset = redis::cmd("MSET");
        for key in &keys {
            mset.arg(key).arg(key);
        }
        let () = mset.query_async(&mut writer).await.unwrap();
        let owners = cluster.slot_owners();
        for key in &keys {
            let on_standalone: Option<String> = redis::cmd("GET")
                .arg(key)
                .query(&mut standalone.client())
                .unwrap();
            let on_cluster: Option<String> = redis::cmd("GET")
                .arg(key)
                .query(&mut cluster.client(owners[slot(key)]))
                .unwrap();
            assert_eq!(
                (on_standalone.as_deref(), on_cluster.as_deref()),
                (Some(key.as_str()), Some(key.as_str()))
            );
        }
    }
    let mut raw = RawClient::connect(both.port());
    raw.roundtrip(
        b"RENAME dw:1 dw:2\r\n",
        b"-CROSSSLOT Keys in request don't hash to the same slot\r\n",
    );
}

/// What one load client saw.
#[derive(Default)]
struct Load {
    /// The last acknowledged value of every key it wrote.
    acknowledged: HashMap<String, u64>,
    errors: Vec<String>,
}

/// A client speaking `protocol` (see [`Gateway::url_speaking`]) at `url`, writing and reading its own keys until
/// `stop`: SET then GET (checked), and every tenth round an MGET over several slots. `rounds` counts the rounds
/// it has done.
async fn load(
    url: String,
    protocol: u8,
    client: usize,
    keys: usize,
    rounds: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> Load {
    let mut connection = switchyard_tests::connect(&url).await;
    assert_speaks(&mut connection, protocol, &format!("load:{client}:speaks")).await;
    let mut load = Load::default();
    let mut round: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        rounds.store(round, Ordering::Relaxed);
        round += 1;
        let key = format!("load:{client}:{}", round as usize % keys);
        let set: redis::RedisResult<()> = redis::cmd("SET")
            .arg(&key)
            .arg(round)
            .query_async(&mut connection)
            .await;
        match set {
            Ok(()) => {
                load.acknowledged.insert(key.clone(), round);
            }
            Err(e) => {
                load.errors.push(format!("SET {key}: {e}"));
                continue;
            }
        }
        match redis::cmd("GET")
            .arg(&key)
            .query_async::<Option<u64>>(&mut connection)
            .await
        {
            Ok(Some(value)) if value == round => {}
            Ok(other) => load
                .errors
                .push(format!("GET {key}: {other:?}, wanted {round}")),
            Err(e) => load.errors.push(format!("GET {key}: {e}")),
        }
        if round.is_multiple_of(10) {
            let several: Vec<String> = (0..8).map(|i| format!("load:{client}:{i}")).collect();
            if let Err(e) = redis::cmd("MGET")
                .arg(&several)
                .query_async::<Vec<Option<u64>>>(&mut connection)
                .await
            {
                load.errors.push(format!("MGET: {e}"));
            }
        }
    }
    load
}

/// Waits until every load client has done `more` rounds beyond those it had done when called.
async fn rounds_by_every_client(rounds: &[Arc<AtomicU64>], more: u64) {
    let targets: Vec<u64> = rounds
        .iter()
        .map(|r| r.load(Ordering::Relaxed) + more)
        .collect();
    wait_for_async(
        &format!("every load client to do {more} more rounds"),
        Duration::from_secs(30),
        || {
            rounds
                .iter()
                .zip(&targets)
                .all(|(r, &target)| r.load(Ordering::Relaxed) >= target)
        },
    )
    .await;
}

/// Checks through the gateway that every acknowledged write is readable with its value.
async fn verify(gateway: &Gateway, loads: &[Load]) -> usize {
    let mut client = gateway.client(None).await;
    let mut checked = 0;
    for load in loads {
        for (key, value) in &load.acknowledged {
            let stored: Option<u64> = redis::cmd("GET")
                .arg(key)
                .query_async(&mut client)
                .await
                .unwrap();
            assert_eq!(stored, Some(*value), "acknowledged write of {key} lost");
            checked += 1;
        }
    }
    checked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_resharding_and_a_master_failover_lose_nothing() {
    let mut cluster = RedisCluster::start(3, 1, Some(PASSWORD));
    // Two workers, the load clients on both: they share one slot map (docs/operations.md#workers-and-topology).
    let gateway = Gateway::builder()
        .arg("--workers")
        .arg("2")
        .start(&switchyard_tests::open_single_tenant(json!(cluster.url())));

    // Resharding under load: 20 clients, half of them speaking RESP3, zero errors, nothing lost.
    let stop = Arc::new(AtomicBool::new(false));
    let rounds: Vec<Arc<AtomicU64>> = (0..20).map(|_| Arc::default()).collect();
    let clients: Vec<_> = (0..20)
        .map(|c| {
            let protocol = PROTOCOLS[c % 2];
            let url = gateway.url_speaking(None, protocol);
            let (rounds, stop) = (Arc::clone(&rounds[c]), Arc::clone(&stop));
            tokio::spawn(load(url, protocol, c, 200, rounds, stop))
        })
        .collect();
    // Every client under way (an MGET included) before the resharding starts.
    rounds_by_every_client(&rounds, 10).await;
    let masters = cluster.masters();
    let (from, to) = (masters[0].clone(), masters[1].clone());
    let started = Instant::now();
    cluster.reshard(&from, &to, 1500);
    let resharding = started.elapsed();
    // And every client served by the new slot owners for a while after it.
    rounds_by_every_client(&rounds, 20).await;
    stop.store(true, Ordering::Relaxed);
    let mut loads = Vec::new();
    for client in clients {
        loads.push(client.await.unwrap());
    }
    let errors: Vec<&String> = loads.iter().flat_map(|l| &l.errors).collect();
    assert!(
        errors.is_empty(),
        "{} client errors, first: {:?}",
        errors.len(),
        errors.first()
    );
    let owners = cluster.slot_owners();
    let moved = owners.iter().filter(|&&o| o == to.port).count();
    assert!(
        moved >= 5461 + 1500 - 1,
        "slots were resharded ({moved} on the target)"
    );
    let checked = verify(&gateway, &loads).await;
    eprintln!("resharding of 1500 slots took {resharding:?} under load; {checked} writes verified");

    // Master failover: once the replicas have every write and know the new slot owners, kill a master.
    cluster.wait_in_sync();
    let victim = cluster.slot_owners()[slot("load:0:0")];
    cluster.kill(victim);
    let killed = Instant::now();
    let mut after = gateway.client(None).await;
    let failed_slot = slot("load:0:0");
    // Serving again: a write to a slot the killed master owned succeeds. Meanwhile, note when the cluster itself
    // has a new master for that slot: the gateway's errors must end soon after.
    let mut promoted = None;
    let recovered = loop {
        if promoted.is_none() && cluster.slot_owners()[failed_slot] != victim {
            promoted = Some(killed.elapsed());
        }
        let set: redis::RedisResult<()> = redis::cmd("SET")
            .arg("load:0:0")
            .arg("after")
            .query_async(&mut after)
            .await;
        if set.is_ok() {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "no failover within 20 s: {set:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let promoted = promoted.unwrap_or(recovered);
    eprintln!(
        "cluster promoted a replica {promoted:?} after the kill; the gateway served the slot again {recovered:?} after"
    );
    assert!(
        recovered.saturating_sub(promoted) < Duration::from_secs(2),
        "the gateway kept failing {:?} after the promotion",
        recovered - promoted
    );
    // From then on, every slot is served (once every node has heard of the promotion: until then Redis itself
    // answers CLUSTERDOWN on a node that has not).
    cluster.wait_up();
    for i in 0..300 {
        let key = format!("after:{i}");
        let () = redis::cmd("SET")
            .arg(&key)
            .arg(i)
            .query_async(&mut after)
            .await
            .unwrap();
        let value: i64 = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut after)
            .await
            .unwrap();
        assert_eq!(value, i);
    }
    // Every write acknowledged before the failover survived (load:0:0 was just overwritten).
    for load in &mut loads {
        load.acknowledged.remove("load:0:0");
    }
    let checked = verify(&gateway, &loads).await;
    assert!(checked > 0);
}

/// A fake cluster node that claims every slot and answers every command with a redirect to itself (`MOVED` or
/// `ASK`), answering `ASKING` with `+OK`: a redirect loop the gateway must cut short.
fn redirect_loop_node(kind: &'static str) -> u16 {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            std::thread::spawn(move || {
                let mut writer = stream.try_clone().unwrap();
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                let mut read_line = |line: &mut String| {
                    line.clear();
                    matches!(reader.read_line(line), Ok(n) if n > 0)
                };
                // Requests are multibulk arrays: `*N`, then N times `$len` and the argument.
                while read_line(&mut line) {
                    let count: usize = line.trim_start_matches('*').trim().parse().unwrap_or(0);
                    let mut args = Vec::new();
                    for _ in 0..count * 2 {
                        if !read_line(&mut line) {
                            return;
                        }
                        args.push(line.trim().to_ascii_uppercase());
                    }
                    let name = args.get(1).cloned().unwrap_or_default();
                    let reply = match name.as_str() {
                        "CLUSTER" => format!(
                            "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:{port}\r\n"
                        ),
                        "ASKING" | "ACL" | "AUTH" => "+OK\r\n".to_string(),
                        _ => format!("-{kind} 866 127.0.0.1:{port}\r\n"),
                    };
                    if writer.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

#[test]
fn a_redirect_loop_ends_in_a_clear_error_and_raw_redirects_never_reach_the_client() {
    for kind in ["MOVED", "ASK"] {
        let port = redirect_loop_node(kind);
        let gateway = Gateway::start(&switchyard_tests::open_single_tenant(json!(format!(
            "redis-cluster://127.0.0.1:{port}"
        ))));
        let mut client = RawClient::connect(gateway.port());
        client.roundtrip(
            b"GET k\r\n",
            format!("-ERR too many cluster redirects (last: {kind} 866 127.0.0.1:{port})\r\n")
                .as_bytes(),
        );
        client.roundtrip(b"PING\r\n", b"+PONG\r\n");
    }
}

/// A split command's sub-commands for one master travel as one run, and so do pipelined commands for one master;
/// when the master refuses some of them (a slot moved behind the gateway's back, a slot being migrated), each
/// refused one follows its own redirect, and the client gets its replies as if nothing had happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_command_follows_moved_and_ask_for_each_slot_of_a_run() {
    each_protocol_async(a_split_command_follows_moved_and_ask_speaking).await;
}

async fn a_split_command_follows_moved_and_ask_speaking(protocol: u8) {
    let cluster = RedisCluster::start(3, 0, Some(PASSWORD));
    let gateway = Gateway::start(&switchyard_tests::open_single_tenant(json!(cluster.url())));
    switchyard_tests::wait_for_slot_map(gateway.port());
    let mut client = gateway.client_speaking(None, protocol).await;
    assert_speaks(&mut client, protocol, "speaks").await;
    let keys: Vec<String> = (0..40).map(|i| format!("run:{i}")).collect();
    let mut mset = redis::cmd("MSET");
    for key in &keys {
        mset.arg(key).arg(format!("v-{key}"));
    }
    let () = mset.query_async(&mut client).await.unwrap();

    // Two keys of one master A, in different slots: the first one's slot moves to master B, the second one's
    // is being migrated to B (its key already there). Every other key keeps its place.
    let owners = cluster.slot_owners();
    let a = owners[slot(&keys[0])];
    let on_a: Vec<&String> = keys.iter().filter(|k| owners[slot(k)] == a).collect();
    let (moved, asked) = (on_a[0], on_a[1]);
    assert!(on_a.len() > 2 && slot(moved) != slot(asked), "{on_a:?}");
    let masters = cluster.masters();
    let id = |port: u16| masters.iter().find(|m| m.port == port).unwrap().id.clone();
    let b = masters.iter().find(|m| m.port != a).unwrap().port;
    cluster.set_slot(b, slot(moved), &["IMPORTING", &id(a)]);
    cluster.set_slot(a, slot(moved), &["MIGRATING", &id(b)]);
    cluster.migrate(a, b, &[moved]);
    for master in &masters {
        cluster.set_slot(master.port, slot(moved), &["NODE", &id(b)]);
    }
    cluster.set_slot(b, slot(asked), &["IMPORTING", &id(a)]);
    cluster.set_slot(a, slot(asked), &["MIGRATING", &id(b)]);
    cluster.migrate(a, b, &[asked]);

    // A script follows MOVED and ASK too, between the AUTHs that make it run as the script user (with ASKING
    // after the first of them): pipelined with GETs, every reply in order.
    let script = "return redis.call('GET', KEYS[1])";
    let mut pipe = redis::pipe();
    for key in [moved, asked, on_a[2]] {
        pipe.cmd("EVAL").arg(script).arg(1).arg(key).get(key);
    }
    let values: Vec<String> = pipe.query_async(&mut client).await.unwrap();
    let expected: Vec<String> = [moved, asked, on_a[2]]
        .iter()
        .flat_map(|k| [format!("v-{k}"), format!("v-{k}")])
        .collect();
    assert_eq!(values, expected, "scripts through a MOVED and an ASK");

    // Pipelined commands for one master travel as one run too: here four, two of them refused.
    let pipelined = [on_a[2], moved, asked, on_a[2]];
    let mut pipe = redis::pipe();
    for key in pipelined {
        pipe.get(key);
    }
    let values: Vec<String> = pipe.query_async(&mut client).await.unwrap();
    let expected: Vec<String> = pipelined.iter().map(|k| format!("v-{k}")).collect();
    assert_eq!(values, expected, "a pipeline through a MOVED and an ASK");
    // A pipeline over every master: one lane per master, the redirected keys inside A's, and replies of two
    // shapes that must come back in request order.
    let mut pipe = redis::pipe();
    for key in &keys {
        pipe.get(key).strlen(key);
    }
    let replies: Vec<redis::Value> = pipe.query_async(&mut client).await.unwrap();
    let expected: Vec<redis::Value> = keys
        .iter()
        .flat_map(|key| {
            let value = format!("v-{key}");
            let len = value.len() as i64;
            [
                redis::Value::BulkString(value.into_bytes()),
                redis::Value::Int(len),
            ]
        })
        .collect();
    assert_eq!(replies, expected, "a pipeline over three masters");
    // A pipeline longer than a run: answered run after run, in order.
    let mut pipe = redis::pipe();
    for key in keys.iter().cycle().take(5000) {
        pipe.get(key);
    }
    let values: Vec<String> = pipe.query_async(&mut client).await.unwrap();
    let expected: Vec<String> = keys
        .iter()
        .cycle()
        .take(5000)
        .map(|k| format!("v-{k}"))
        .collect();
    assert_eq!(values, expected, "a long pipeline over three masters");
    let values: Vec<Option<String>> = redis::cmd("MGET")
        .arg(&keys)
        .query_async(&mut client)
        .await
        .unwrap();
    let expected: Vec<Option<String>> = keys.iter().map(|k| Some(format!("v-{k}"))).collect();
    assert_eq!(values, expected, "MGET through an ASK");
    assert!(cluster.errorstat(a, "MOVED") > 0, "A answered MOVED");
    assert!(cluster.errorstat(a, "ASK") > 0, "A answered ASK");

    // A write to the migrating slot lands on B (ASK), the others where they were; every key is then counted once
    // and deleted once.
    let elsewhere = keys.iter().find(|k| owners[slot(k)] != a).unwrap();
    let () = redis::cmd("MSET")
        .arg(asked)
        .arg("again")
        .arg(on_a[2])
        .arg("still on A")
        .arg(elsewhere)
        .arg("elsewhere")
        .query_async(&mut client)
        .await
        .unwrap();
    let mut on_b = cluster.client(b);
    let () = redis::cmd("ASKING").query(&mut on_b).unwrap();
    let value: Option<String> = redis::cmd("GET").arg(asked).query(&mut on_b).unwrap();
    assert_eq!(value.as_deref(), Some("again"));
    let values: Vec<Option<String>> = redis::cmd("MGET")
        .arg(on_a[2])
        .arg(elsewhere)
        .query_async(&mut client)
        .await
        .unwrap();
    assert_eq!(
        values,
        [Some("still on A".into()), Some("elsewhere".into())]
    );
    let count: i64 = redis::cmd("EXISTS")
        .arg(&keys)
        .query_async(&mut client)
        .await
        .unwrap();
    assert_eq!(count, 40);
    let deleted: i64 = redis::cmd("DEL")
        .arg(&keys)
        .query_async(&mut client)
        .await
        .unwrap();
    assert_eq!(deleted, 40);
}

/// A pipeline over three masters, one of them down: each command gets its own answer in request order, the value
/// from a live master and a clear error for the dead one's keys.
#[test]
fn a_pipeline_over_masters_answers_in_order_when_one_master_is_down() {
    let mut cluster = RedisCluster::start(3, 0, None);
    let gateway = Gateway::start(&switchyard_tests::open_single_tenant(json!(cluster.url())));
    switchyard_tests::wait_for_slot_map(gateway.port());
    let mut client = RawClient::connect(gateway.port());
    let keys: Vec<String> = (0..60).map(|i| format!("down:{i}")).collect();
    for key in &keys {
        assert_eq!(
            client.request(&[b"SET", key.as_bytes(), key.as_bytes()]),
            b"+OK\r\n"
        );
    }
    // The live masters keep serving their slots while one master is gone (no failover: no replicas).
    for master in cluster.masters() {
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-require-full-coverage")
            .arg("no")
            .query(&mut cluster.client(master.port))
            .unwrap();
    }
    let owners = cluster.slot_owners();
    let dead = owners[slot(&keys[0])];
    cluster.kill(dead);
    let down = format!("-ERR backend 127.0.0.1:{dead} ");
    switchyard_tests::wait_for(
        "the gateway to see the master down",
        Duration::from_secs(10),
        || {
            client
                .request(&[b"GET", keys[0].as_bytes()])
                .starts_with(down.as_bytes())
        },
    );

    // One write, so that the gateway reads the whole pipeline at once.
    let pipeline: String = keys
        .iter()
        .map(|key| format!("*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len()))
        .collect();
    client.send(pipeline.as_bytes());
    for key in &keys {
        let reply = client.read_reply();
        if owners[slot(key)] == dead {
            assert!(
                reply.starts_with(down.as_bytes()),
                "{key}: {}",
                String::from_utf8_lossy(&reply)
            );
        } else {
            assert_eq!(
                reply,
                format!("${}\r\n{key}\r\n", key.len()).as_bytes(),
                "{key}"
            );
        }
    }
}
