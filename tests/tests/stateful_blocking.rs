//! Blocking commands end to end: each blocked client on its own backend connection, released by pushes,
//! timeouts honoured and never cut by the gateway's command timeout, a killed client's backend connection freed,
//! routing by key (CROSSSLOT), refusal on double-written routes, the per-tenant limit.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::json;
use switchyard_tests::compare::{Backends, Comparison, Topology};
use switchyard_tests::{
    Gateway, RawClient, RedisServer, connect, connections_received, open_single_tenant,
    open_tenant, wait_for, wait_for_slot_map,
};

/// How many clients the server behind `con` reports as blocked.
fn blocked_clients(con: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("clients").query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// The backend's `CLIENT LIST` lines whose last command was `command`.
fn clients_running(backend: &RedisServer, command: &str) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut backend.client())
        .unwrap();
    list.lines()
        .filter(|l| {
            l.ends_with(&format!("cmd={command}")) || l.contains(&format!(" cmd={command} "))
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_blocked_clients_are_all_released_by_pushes() {
    const WORKERS: usize = 2;
    let backend = RedisServer::start();
    let gateway = Gateway::builder()
        .arg("--workers")
        .arg(WORKERS.to_string())
        .start(&open_single_tenant(json!(backend.url())));
    let url = gateway.url(None);
    let mut waiters = Vec::new();
    for i in 0..1000 {
        let mut con = connect(&url).await;
        let key = format!("queue{}", i % 10);
        waiters.push(tokio::spawn(async move {
            let popped: (String, String) = redis::cmd("BLPOP")
                .arg(&key)
                .arg(0)
                .query_async(&mut con)
                .await
                .unwrap();
            popped
        }));
    }
    wait_for(
        "1000 clients blocked on the backend",
        Duration::from_secs(60),
        || blocked_clients(&mut backend.client()) == 1000,
    );
    let mut pusher = connect(&url).await;
    for i in 0..1000 {
        let _: i64 = redis::cmd("LPUSH")
            .arg(format!("queue{}", i % 10))
            .arg(format!("v{i}"))
            .query_async(&mut pusher)
            .await
            .unwrap();
    }
    let mut got = HashSet::new();
    for waiter in waiters {
        let (key, value) = tokio::time::timeout(Duration::from_secs(60), waiter)
            .await
            .expect("every blocked client is released")
            .unwrap();
        let i: usize = value[1..].parse().unwrap();
        assert_eq!(key, format!("queue{}", i % 10));
        got.insert(value);
    }
    assert_eq!(got.len(), 1000, "each pushed value popped exactly once");
    wait_for(
        "dedicated connections released",
        Duration::from_secs(30),
        || gateway.metric("switchyard_tenant_dedicated_connections{tenant=\"t\"}") == 0,
    );
    // Closed on the node too, but for the spares each worker keeps (twice `--dedicated-spares`).
    wait_for(
        "released connections closed",
        Duration::from_secs(30),
        || clients_running(&backend, "blpop") <= 2 * WORKERS,
    );
}

#[test]
fn a_client_killed_while_blocked_frees_its_backend_connection() {
    let backend = RedisServer::start();
    let gateway = Gateway::start(&open_single_tenant(json!(backend.url())));
    let mut client = RawClient::connect(gateway.port());
    client.send_command(&[b"BLPOP", b"nothing", b"0"]);
    wait_for(
        "the client blocked on the backend",
        Duration::from_secs(20),
        || clients_running(&backend, "blpop") == 1,
    );
    drop(client);
    wait_for(
        "its backend connection closed",
        Duration::from_secs(20),
        || clients_running(&backend, "blpop") == 0,
    );
    assert_eq!(blocked_clients(&mut backend.client()), 0);

    // Killed with CLIENT KILL through the gateway: the same.
    let mut client = RawClient::connect(gateway.port());
    let id = client.request(&[b"CLIENT", b"ID"]);
    let id = &id[1..id.len() - 2];
    client.send_command(&[b"BRPOP", b"nothing", b"0"]);
    wait_for(
        "the client blocked on the backend",
        Duration::from_secs(20),
        || clients_running(&backend, "brpop") == 1,
    );
    let mut admin = RawClient::connect(gateway.port());
    assert_eq!(admin.request(&[b"CLIENT", b"KILL", b"ID", id]), b":1\r\n");
    client.expect_closed();
    wait_for(
        "its backend connection closed",
        Duration::from_secs(20),
        || clients_running(&backend, "brpop") == 0,
    );
}

#[test]
fn client_timeouts_are_honoured_and_not_cut_by_the_command_timeout() {
    let backend = RedisServer::start();
    let gateway = Gateway::builder()
        .arg("--command-timeout-ms")
        .arg("300")
        // An admin tenant, which may SELECT the backend's other databases.
        .start(
            &json!({"tenants": [{"name": "t", "passwords": [], "allow_admin": true,
                                    "route": {"type": "single", "target": backend.url()}}]}),
        );
    let mut client = RawClient::connect(gateway.port());
    let started = Instant::now();
    assert_eq!(client.request(&[b"BLPOP", b"empty", b"1"]), b"*-1\r\n");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900),
        "the client's 1 s timeout, not the gateway's 300 ms: {waited:?}"
    );
    assert_eq!(
        client.request(&[b"BZPOPMIN", b"zempty", b"0.5"]),
        b"*-1\r\n"
    );

    // Timeout 0 waits for as long as it takes: blocked on the backend, it outlives the command timeout. That is a
    // negative check, so a bounded wait: twice the command timeout, which would have cut it by then.
    client.send_command(&[b"BRPOP", b"later", b"0"]);
    wait_for(
        "the BRPOP blocked on the backend",
        Duration::from_secs(20),
        || blocked_clients(&mut backend.client()) == 1,
    );
    std::thread::sleep(Duration::from_millis(600));
    let mut other = backend.client();
    let _: i64 = redis::cmd("RPUSH")
        .arg("later")
        .arg("x")
        .query(&mut other)
        .unwrap();
    assert_eq!(client.read_reply(), b"*2\r\n$5\r\nlater\r\n$1\r\nx\r\n");

    // A pipeline runs in order, as on Redis: the push before the pop is seen by it, and the command after the
    // pop waits for it.
    client.send(
        b"*3\r\n$5\r\nRPUSH\r\n$1\r\nq\r\n$1\r\na\r\n*3\r\n$5\r\nBLPOP\r\n$1\r\nq\r\n$1\r\n0\r\n\
          *3\r\n$5\r\nBLPOP\r\n$1\r\nq\r\n$3\r\n0.3\r\n*2\r\n$4\r\nLLEN\r\n$1\r\nq\r\n",
    );
    client.expect(b":1\r\n*2\r\n$1\r\nq\r\n$1\r\na\r\n*-1\r\n:0\r\n");

    // XREAD with BLOCK blocks; without it, it does not.
    let _: String = redis::cmd("XADD")
        .arg("s")
        .arg("1-1")
        .arg("f")
        .arg("v")
        .query(&mut other)
        .unwrap();
    assert_eq!(
        client.request(&[b"XREAD", b"BLOCK", b"200", b"STREAMS", b"s", b"$"]),
        b"*-1\r\n"
    );
    assert_eq!(
        client.request(&[b"XREAD", b"COUNT", b"1", b"STREAMS", b"s", b"0"]),
        b"*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
    );
    assert_eq!(client.request(&[b"WAIT", b"0", b"100"]), b":0\r\n");

    // The dedicated connection uses the client's database.
    client.send(b"SELECT 2\r\nRPUSH indb2 x\r\nBLPOP indb2 0\r\nSELECT 0\r\nBLPOP indb2 0.2\r\n");
    client.expect(b"+OK\r\n:1\r\n*2\r\n$5\r\nindb2\r\n$1\r\nx\r\n+OK\r\n*-1\r\n");
}

#[test]
fn blocking_commands_route_by_key_and_are_refused_where_they_cannot_work() {
    let backends: Vec<RedisServer> = (0..2).map(|_| RedisServer::start()).collect();
    let sharded = json!({"type": "sharded", "hash": {"algorithm": "crc16", "buckets": 16384}, "shards": [
        {"name": "a", "target": backends[0].url(), "buckets": ["0-8191"]},
        {"name": "b", "target": backends[1].url(), "buckets": ["8192-16383"]},
    ]});
    let gateway = Gateway::start(&open_tenant(sharded));
    let mut client = RawClient::connect(gateway.port());
    // "a" hashes to slot 15495 (shard b), "b" to 3300 (shard a).
    assert_eq!(
        client.request(&[b"BLPOP", b"a", b"b", b"1"]),
        b"-CROSSSLOT Keys in request don't hash to the same slot\r\n"
    );
    let mut on_b = backends[1].client();
    let _: i64 = redis::cmd("RPUSH")
        .arg("a")
        .arg("1")
        .query(&mut on_b)
        .unwrap();
    assert_eq!(
        client.request(&[b"BLPOP", b"a", b"{a}x", b"1"]),
        b"*2\r\n$1\r\na\r\n$1\r\n1\r\n"
    );

    let (primary, secondary) = (RedisServer::start(), RedisServer::start());
    let double =
        json!({"write": {"resources": [primary.url(), secondary.url()], "ack": "primary"}});
    let gateway = Gateway::start(&open_single_tenant(double));
    let mut client = RawClient::connect(gateway.port());
    let refused = client.request(&[b"BLPOP", b"q", b"1"]);
    assert!(
        refused.starts_with(b"-ERR BLPOP is refused on a double-written route"),
        "{}",
        String::from_utf8_lossy(&refused)
    );
    // A blocking read is not a write: it runs on the primary.
    assert_eq!(
        client.request(&[b"XREAD", b"BLOCK", b"100", b"STREAMS", b"s", b"$"]),
        b"*-1\r\n"
    );
}

#[test]
fn dedicated_connections_are_bounded_per_tenant() {
    let backend = RedisServer::start();
    let gateway = Gateway::builder()
        .arg("--max-dedicated-connections")
        .arg("2")
        .start(&open_single_tenant(json!(backend.url())));
    // Each on its own key, so that which one a push wakes does not depend on which reached Redis first.
    let mut blocked: Vec<RawClient> = [b"q0", b"q1"]
        .iter()
        .map(|key| {
            let mut client = RawClient::connect(gateway.port());
            client.send_command(&[b"BLPOP", &key[..], b"0"]);
            client
        })
        .collect();
    wait_for("two clients blocked", Duration::from_secs(20), || {
        blocked_clients(&mut backend.client()) == 2
    });
    let mut third = RawClient::connect(gateway.port());
    let refused = third.request(&[b"BLPOP", b"q", b"0"]);
    assert!(
        refused
            .starts_with(b"-ERR tenant 't' holds its maximum of 2 dedicated backend connections"),
        "{}",
        String::from_utf8_lossy(&refused)
    );
    // Other commands still work, and a freed connection can be taken again.
    assert_eq!(third.request(&[b"RPUSH", b"q0", b"x"]), b":1\r\n");
    let mut released = blocked.remove(0);
    assert_eq!(released.read_reply(), b"*2\r\n$2\r\nq0\r\n$1\r\nx\r\n");
    assert_eq!(third.request(&[b"BLPOP", b"q", b"0.2"]), b"*-1\r\n");
}

#[test]
fn blocking_commands_on_a_cluster_go_to_the_slot_master() {
    let comparison = Comparison::start(Topology::Cluster);
    let port = comparison.gateway().port();
    wait_for_slot_map(port);
    let mut blocked = RawClient::connect(port);
    let mut pusher = RawClient::connect(port);
    assert_eq!(
        blocked.request(&[b"BLPOP", b"a", b"b", b"0"]),
        b"-CROSSSLOT Keys in request don't hash to the same slot\r\n"
    );
    blocked.send_command(&[b"BLMOVE", b"{q}src", b"{q}dst", b"LEFT", b"RIGHT", b"0"]);
    let Backends::Cluster(cluster) = comparison.backends() else {
        unreachable!("a cluster comparison has a cluster");
    };
    wait_for(
        "the BLMOVE blocked on a master",
        Duration::from_secs(20),
        || {
            cluster
                .live_ports()
                .into_iter()
                .map(|port| blocked_clients(&mut cluster.client(port)))
                .sum::<u64>()
                == 1
        },
    );
    assert_eq!(pusher.request(&[b"RPUSH", b"{q}src", b"job"]), b":1\r\n");
    assert_eq!(blocked.read_reply(), b"$3\r\njob\r\n");
    assert_eq!(
        pusher.request(&[b"LRANGE", b"{q}dst", b"0", b"-1"]),
        b"*1\r\n$3\r\njob\r\n"
    );
    assert_eq!(blocked.request(&[b"BZPOPMAX", b"{q}z", b"0.2"]), b"*-1\r\n");
}

#[test]
fn blocking_commands_answer_as_redis_does() {
    switchyard_tests::compare::each_topology(|c| {
        wait_for_slot_map(c.gateway().port());
        c.all_same(&[
            &["RPUSH", "{b}l", "a", "b", "c"],
            &["BLPOP", "{b}l", "{b}empty", "0"],
            &["BRPOP", "{b}empty", "{b}l", "1"],
            &["BLPOP", "{b}empty", "0.1"],
            &["BRPOPLPUSH", "{b}l", "{b}l2", "0"],
            &["BLMOVE", "{b}l2", "{b}l", "RIGHT", "LEFT", "0"],
            &["BLMPOP", "0", "2", "{b}empty", "{b}l", "LEFT", "COUNT", "2"],
            &["BLMPOP", "0.1", "1", "{b}empty", "RIGHT"],
            &["ZADD", "{b}z", "1", "one", "2", "two", "3", "three"],
            &["BZPOPMIN", "{b}z", "0"],
            &["BZPOPMAX", "{b}zempty", "{b}z", "0"],
            &["BZMPOP", "0", "1", "{b}z", "MIN"],
            &["BZPOPMIN", "{b}zempty", "0.1"],
            &["XADD", "{b}s", "1-1", "f", "v"],
            &["XREAD", "BLOCK", "0", "STREAMS", "{b}s", "0"],
            &["XREAD", "BLOCK", "100", "STREAMS", "{b}s", "$"],
            &["XGROUP", "CREATE", "{b}s", "g", "0"],
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "c",
                "BLOCK",
                "0",
                "STREAMS",
                "{b}s",
                ">",
            ],
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "c",
                "BLOCK",
                "100",
                "STREAMS",
                "{b}s",
                ">",
            ],
            // Errors, from the backend as Redis gives them.
            &["SET", "{b}str", "x"],
            &["BLPOP", "{b}str", "0"],
            &["BLPOP", "{b}l", "-1"],
            &["BLPOP", "{b}l", "soon"],
            &["BZPOPMIN", "{b}str", "0"],
            &["BLMOVE", "{b}l", "{b}l2", "UP", "LEFT", "0"],
            &["XREAD", "BLOCK", "-5", "STREAMS", "{b}s", "$"],
        ]);
    });
}

/// A blocking command whose slot moved after the gateway read the slot map: the node answers `-MOVED`, and the
/// dedicated connection follows it to the new owner, where the client blocks as it would have. The client never
/// sees the redirect.
#[test]
fn a_blocking_command_follows_its_moved_slot() {
    let cluster = switchyard_tests::RedisCluster::start(3, 0, None);
    let gateway = Gateway::start(&open_single_tenant(json!(cluster.url())));
    wait_for_slot_map(gateway.port());
    let key = "{moved}queue";
    let slot: usize = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut cluster.client(cluster.live_ports()[0]))
        .unwrap();
    let from = cluster.slot_owners()[slot];
    let masters = cluster.masters();
    let to = masters.iter().find(|m| m.port != from).unwrap();
    // Hand the empty slot to another master, the new owner first (as a resharding tool does), then the old one
    // and the rest. The gateway's slot map still names the old owner: its next refresh is seconds away.
    let mut order: Vec<u16> = vec![to.port, from];
    order.extend(
        masters
            .iter()
            .map(|m| m.port)
            .filter(|p| *p != to.port && *p != from),
    );
    for port in order {
        let () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("NODE")
            .arg(&to.id)
            .query(&mut cluster.client(port))
            .unwrap();
    }
    let mut blocked = RawClient::connect(gateway.port());
    blocked.send_command(&[b"BLPOP", key.as_bytes(), b"0"]);
    // Released by a push on the new owner itself, so nothing but the blocked command uses the gateway's map.
    wait_for(
        "the client blocked on the new owner",
        Duration::from_secs(10),
        || {
            let info: String = redis::cmd("INFO")
                .arg("clients")
                .query(&mut cluster.client(to.port))
                .unwrap();
            info.contains("blocked_clients:1")
        },
    );
    let pushed: i64 = redis::cmd("RPUSH")
        .arg(key)
        .arg("job")
        .query(&mut cluster.client(to.port))
        .unwrap();
    assert_eq!(pushed, 1);
    assert_eq!(
        blocked.read_reply(),
        b"*2\r\n$12\r\n{moved}queue\r\n$3\r\njob\r\n"
    );
}

/// `XREADGROUP ... BLOCK 0` from one client; once the server says it is blocked, `FLUSHALL` from another. Redis
/// releases the reader with `-UNBLOCKED`; a gateway that counted the reader blocked before its node had the command
/// let `FLUSHALL` overtake it (`-NOGROUP`). The reply of each of `rounds` rounds on the server at `port`.
fn flush_a_blocked_stream_reader(port: u16, rounds: usize) -> Vec<Vec<u8>> {
    let mut other = RawClient::connect(port);
    (0..rounds)
        .map(|_| {
            assert_eq!(
                other.request(&[b"XGROUP", b"CREATE", b"s", b"g", b"$", b"MKSTREAM"]),
                b"+OK\r\n"
            );
            let mut reader = RawClient::connect(port);
            reader.send_command(&[
                b"XREADGROUP",
                b"GROUP",
                b"g",
                b"c",
                b"BLOCK",
                b"0",
                b"STREAMS",
                b"s",
                b">",
            ]);
            // As Redis' own test suite waits for a blocked client: polling INFO, no sleeps.
            loop {
                let info = other.request(&[b"INFO", b"clients"]);
                if String::from_utf8_lossy(&info).contains("blocked_clients:1\r\n") {
                    break;
                }
            }
            assert_eq!(other.request(&[b"FLUSHALL"]), b"+OK\r\n");
            reader.read_reply()
        })
        .collect()
}

#[test]
fn a_client_counts_as_blocked_only_once_its_node_has_the_command() {
    let redis = RedisServer::start();
    let expected = flush_a_blocked_stream_reader(redis.port(), 1);
    assert_eq!(
        expected[0],
        b"-UNBLOCKED the stream key no longer exists\r\n"
    );

    // One worker and several: each reader's session and the INFO/FLUSHALL session may be on different workers.
    for workers in ["1", "2"] {
        let backend = RedisServer::start();
        let gateway = Gateway::builder()
            .arg("--workers")
            .arg(workers)
            .start(&json!({
                "tenants": [{"name": "t", "passwords": [], "allow_admin": true,
                             "route": {"type": "single", "target": backend.url()}}]
            }));
        let got = flush_a_blocked_stream_reader(gateway.port(), 20);
        for (round, reply) in got.iter().enumerate() {
            assert_eq!(
                String::from_utf8_lossy(reply),
                String::from_utf8_lossy(&expected[0]),
                "round {round} with {workers} worker(s)"
            );
        }
    }
}

/// One `BLPOP` through `client`, released by an `LPUSH` from `pusher` once the node (`probe` is connected to it)
/// has it.
fn blpop_released(probe: &mut redis::Connection, client: &mut RawClient, pusher: &mut RawClient) {
    client.send_command(&[b"BLPOP", b"jobs", b"0"]);
    wait_for(
        "the client blocked on the backend",
        Duration::from_secs(20),
        || blocked_clients(probe) == 1,
    );
    assert_eq!(pusher.request(&[b"LPUSH", b"jobs", b"x"]), b":1\r\n");
    assert_eq!(
        client.read_reply(),
        b"*2\r\n$4\r\njobs\r\n$1\r\nx\r\n",
        "BLPOP's reply"
    );
}

#[test]
fn blocking_commands_start_on_spare_connections_instead_of_connecting() {
    // `timeout 1`: the node closes connections idle for a second, spares included.
    let backend = RedisServer::builder().arg("--timeout").arg("1").start();
    let gateway = Gateway::builder()
        .arg("--workers")
        .arg("1")
        .start(&open_single_tenant(json!(backend.url())));
    let mut client = RawClient::connect(gateway.port());
    let mut pusher = RawClient::connect(gateway.port());
    let mut probe = backend.client();
    for _ in 0..3 {
        blpop_released(&mut probe, &mut client, &mut pusher); // the node's spares are made
    }
    let before = connections_received(&mut probe);
    for _ in 0..10 {
        blpop_released(&mut probe, &mut client, &mut pusher);
    }
    let connects = connections_received(&mut probe) - before;
    assert_eq!(
        connects, 0,
        "10 blocking commands opened {connects} connections"
    );

    // Spares the node has closed meanwhile are never handed out: the next blocking command still works.
    std::thread::sleep(Duration::from_millis(2500));
    let mut probe = backend.client();
    blpop_released(&mut probe, &mut client, &mut pusher);
}
