//! TLS on every hop with Redis Cluster and Sentinel: a TLS client on the gateway's TLS listener, the gateway to
//! TLS cluster nodes (`--tls-cluster yes`) and to TLS sentinels and data nodes (`sentinelSSL=true`). Keys on
//! every slot, multi-key commands, `MOVED` and `ASK` during resharding, replica reads, transactions, blocking
//! commands and pub/sub on dedicated connections, a sentinel failover with replica reads, and nodes announced by
//! an address their certificate does not name. The deployments keep plain ports for the tests' own checks; every
//! test checks that the gateway reached the nodes on their TLS ports only.

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use serde_json::{Value, json};
use switchyard_schemas::placement::{crc16, hash_tag};
use switchyard_tests::{Gateway, NodeTls, Pki, RedisCluster, SentinelGroup, wait_for};

const PASSWORD: &str = "tls-topology-secret";

fn slot(key: &str) -> usize {
    usize::from(crc16(hash_tag(key.as_bytes())) % 16384)
}

/// A gateway whose TLS listener has a certificate from `pki`, with a tenant per `(password, route)`: a resource
/// URL for a single target, or a whole target.
fn tls_gateway(pki: &Pki, tenants: &[(&str, Value)]) -> Gateway {
    let tenants: Vec<Value> = tenants
        .iter()
        .enumerate()
        .map(|(i, (password, target))| {
            json!({"name": format!("t{i}"), "passwords": [password],
                   "route": {"type": "single", "target": target}})
        })
        .collect();
    Gateway::builder()
        .tls(&pki.server("gateway", &["127.0.0.1"]), None)
        .start(&json!({ "tenants": tenants }))
}

/// A TLS cluster of 3 masters with `replicas` replicas each, whose certificate names 127.0.0.1 and localhost.
fn tls_cluster(pki: &Pki, replicas: usize) -> RedisCluster {
    let tls = NodeTls::new(pki, &["localhost", "127.0.0.1"]);
    RedisCluster::start_tls(3, replicas, Some(PASSWORD), &tls)
}

/// A client of the gateway's TLS listener, as the tenant of `password`.
fn tls_client(pki: &Pki, gateway: &Gateway, password: &str) -> redis::Client {
    pki.client(
        &format!("rediss://:{password}@127.0.0.1:{}", gateway.tls_port()),
        None,
    )
}

/// The gateway's connections to a node (they rest as its ACL user), as `CLIENT LIST` lines on `node`.
fn gateway_connections(node: &mut redis::Connection) -> Vec<String> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(node)
        .expect("CLIENT LIST");
    list.lines()
        .filter(|line| line.contains("user=switchyard-gateway"))
        .map(str::to_string)
        .collect()
}

/// The node's own port that a `CLIENT LIST` line's connection came in on.
fn local_port(line: &str) -> u16 {
    line.split(' ')
        .find_map(|field| field.strip_prefix("laddr="))
        .and_then(|addr| addr.rsplit_once(':')?.1.parse().ok())
        .unwrap_or_else(|| panic!("no laddr in {line}"))
}

/// Checks that the gateway is connected to every master of `cluster` and only on its TLS port; returns the
/// gateway's connections (`CLIENT LIST` lines) over all masters.
fn assert_tls_only(cluster: &RedisCluster) -> Vec<String> {
    let mut all = Vec::new();
    for master in cluster.masters() {
        let lines = gateway_connections(&mut cluster.client(master.port));
        assert!(
            !lines.is_empty(),
            "no gateway connection on {}",
            master.port
        );
        for line in &lines {
            assert_eq!(local_port(line), cluster.tls_port(master.port), "{line}");
        }
        all.extend(lines);
    }
    all
}

/// The error a command gets, as redis-rs shows it, checking that it came fast (a TLS failure never hangs).
fn error_of(result: redis::RedisResult<Option<String>>, started: Instant) -> String {
    assert!(started.elapsed() < Duration::from_secs(3), "answered late");
    let error = result.expect_err("an error");
    error
        .detail()
        .map_or_else(|| error.to_string(), str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_serves_every_slot_and_follows_moved_and_ask_over_tls() {
    let pki = Pki::new("cluster");
    let cluster = tls_cluster(&pki, 0);
    let gateway = tls_gateway(&pki, &[(PASSWORD, json!(cluster.url()))]);
    let mut client = tls_client(&pki, &gateway, PASSWORD)
        .get_multiplexed_async_connection()
        .await
        .unwrap();

    // Writes and reads over every slot, each key on the master that owns it.
    let keys: Vec<String> = (0..2000).map(|i| format!("key:{i}")).collect();
    let mut pipe = redis::pipe();
    for key in &keys {
        pipe.set(key, key).ignore();
    }
    let () = pipe.query_async(&mut client).await.unwrap();
    let owners = cluster.slot_owners();
    for key in keys.iter().step_by(97) {
        let stored: String = redis::cmd("GET")
            .arg(key)
            .query(&mut cluster.client(owners[slot(key)]))
            .unwrap();
        assert_eq!(&stored, key);
    }
    let size: usize = redis::cmd("DBSIZE").query_async(&mut client).await.unwrap();
    assert_eq!(size, keys.len(), "DBSIZE sums every master");

    // Multi-key commands split by slot, replies in key order.
    let values: Vec<String> = client.mget(&keys[..50]).await.unwrap();
    assert_eq!(values, keys[..50]);
    let multi: Vec<String> = (0..30).map(|i| format!("multi:{i}")).collect();
    let mut mset = redis::cmd("MSET");
    for key in &multi {
        mset.arg(key).arg(format!("v-{key}"));
    }
    let () = mset.query_async(&mut client).await.unwrap();
    let values: Vec<String> = client.mget(&multi).await.unwrap();
    let expected: Vec<String> = multi.iter().map(|k| format!("v-{k}")).collect();
    assert_eq!(values, expected);
    let exists: usize = client.exists(&multi).await.unwrap();
    assert_eq!(exists, 30);

    // One slot resharded behind the gateway's back (MOVED), another one being migrated (ASK): both followed.
    let masters = cluster.masters();
    let a = owners[slot(&keys[0])];
    let on_a: Vec<&String> = keys.iter().filter(|k| owners[slot(k)] == a).collect();
    let (moved, asked) = (
        on_a[0],
        on_a[1..]
            .iter()
            .find(|k| slot(k) != slot(on_a[0]))
            .copied()
            .unwrap(),
    );
    let id = |port: u16| masters.iter().find(|m| m.port == port).unwrap().id.clone();
    let b = masters.iter().find(|m| m.port != a).unwrap().port;
    let finish = |key: &str| {
        for master in &masters {
            cluster.set_slot(master.port, slot(key), &["NODE", &id(b)]);
        }
    };
    for key in [moved, asked] {
        cluster.set_slot(b, slot(key), &["IMPORTING", &id(a)]);
        cluster.set_slot(a, slot(key), &["MIGRATING", &id(b)]);
        cluster.migrate(a, b, &[key]);
    }
    finish(moved);
    let values: Vec<&str> = vec![moved, asked, on_a[2]];
    let got: Vec<String> = client.mget(&values).await.unwrap();
    assert_eq!(got, values, "read through a MOVED and an ASK");
    let () = client.set(asked, "written through ASK").await.unwrap();
    assert!(cluster.errorstat(a, "MOVED") > 0, "A answered MOVED");
    assert!(cluster.errorstat(a, "ASK") > 0, "A answered ASK");
    finish(asked);
    let value: String = client.get(asked).await.unwrap();
    assert_eq!(value, "written through ASK");

    // A resharding of many slots with redis-cli (keys moved by MIGRATE between the nodes, over TLS too): every
    // key still reads back, whether the gateway learns the new owners from a MOVED or from its periodic refresh.
    let moved_keys: Vec<&String> = keys
        .iter()
        .filter(|&k| owners[slot(k)] == masters[2].port)
        .collect();
    cluster.reshard(&masters[2], &masters[1], 500);
    let now = cluster.slot_owners();
    let resharded = moved_keys
        .iter()
        .filter(|k| now[slot(k)] == masters[1].port)
        .count();
    assert!(resharded > 0, "no key was resharded");
    let values: Vec<String> = client.mget(&keys).await.unwrap();
    for (key, value) in keys.iter().zip(&values).filter(|(k, _)| *k != asked) {
        assert_eq!(value, key);
    }

    // The gateway learned only TLS ports from the cluster (CLUSTER SLOTS and MOVED name those to a TLS client).
    assert_tls_only(&cluster);
}

/// Replicas are found through `CLUSTER SLOTS` too, which names their TLS ports to the gateway: reads of a
/// `rediss-cluster-slaves` resource land on the replicas, over TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_reads_from_a_tls_cluster_reach_the_replicas_over_tls() {
    let pki = Pki::new("replicas");
    let cluster = tls_cluster(&pki, 1);
    // Clients learn about a replica once CLUSTER SLOTS lists it (see RedisCluster::replicas_in_slots).
    wait_for(
        "CLUSTER SLOTS to list every replica",
        Duration::from_secs(20),
        || {
            cluster
                .live_ports()
                .iter()
                .all(|&port| cluster.replicas_in_slots(port) == 3)
        },
    );
    let route = json!({"read": {"resources": [cluster.slaves_url(false)]},
                       "write": {"resources": [cluster.url()]}});
    let gateway = tls_gateway(&pki, &[(PASSWORD, route)]);
    let mut client = tls_client(&pki, &gateway, PASSWORD)
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys: Vec<String> = (0..300).map(|i| format!("read:{i}")).collect();
    for key in &keys {
        let () = client.set(key, key).await.unwrap();
    }
    cluster.wait_in_sync();
    for key in &keys {
        let value: String = client.get(key).await.unwrap();
        assert_eq!(&value, key);
    }
    for replica in cluster.replicas() {
        let mut node = cluster.client(replica.port);
        assert!(
            switchyard_tests::command_calls(&mut node, "get") > 0,
            "no read on replica {}",
            replica.port
        );
        let connections = gateway_connections(&mut node);
        assert!(!connections.is_empty());
        for line in connections {
            assert_eq!(local_port(&line), cluster.tls_port(replica.port), "{line}");
        }
    }
    for master in cluster.masters() {
        let reads = switchyard_tests::command_calls(&mut cluster.client(master.port), "get");
        assert_eq!(reads, 0, "a read on master {}", master.port);
    }
    assert_tls_only(&cluster);
}

#[test]
fn transactions_blocking_commands_and_pub_sub_ride_tls_to_every_cluster_node() {
    let pki = Pki::new("dedicated");
    let cluster = tls_cluster(&pki, 0);
    let gateway = tls_gateway(&pki, &[(PASSWORD, json!(cluster.url()))]);
    let client = tls_client(&pki, &gateway, PASSWORD);
    let mut con = client.get_connection().unwrap();
    // A key on each master.
    let owners = cluster.slot_owners();
    let mut keys: Vec<String> = Vec::new();
    for master in cluster.masters() {
        let key = (0..)
            .map(|i| format!("{{node{i}}}"))
            .find(|k| owners[slot(k)] == master.port)
            .unwrap();
        keys.push(key);
    }
    // Until the gateway has the slot map, it cannot pick the master of a dedicated connection (-TRYAGAIN).
    wait_for("the slot map", Duration::from_secs(20), || {
        redis::pipe()
            .atomic()
            .get(&keys[0])
            .query::<(Option<String>,)>(&mut con)
            .is_ok()
    });

    for key in &keys {
        // MULTI/EXEC on one slot.
        let (n, m): (i64, i64) = redis::pipe()
            .atomic()
            .incr(format!("{key}:counter"), 1)
            .incr(format!("{key}:counter"), 2)
            .query(&mut con)
            .unwrap();
        assert_eq!((n, m), (1, 3));
        // BLPOP, woken by a push from another client.
        let mut blocked = client.get_connection().unwrap();
        let queue = format!("{key}:queue");
        let waiter = {
            let queue = queue.clone();
            std::thread::spawn(move || {
                redis::cmd("BLPOP")
                    .arg(&queue)
                    .arg(5)
                    .query::<Option<(String, String)>>(&mut blocked)
            })
        };
        wait_for("BLPOP to block", Duration::from_secs(5), || {
            cluster
                .masters()
                .iter()
                .flat_map(|m| gateway_connections(&mut cluster.client(m.port)))
                .any(|line| line.contains("cmd=blpop") && line.contains("flags=b"))
        });
        let () = redis::cmd("RPUSH")
            .arg(&queue)
            .arg("job")
            .query(&mut con)
            .unwrap();
        assert_eq!(waiter.join().unwrap().unwrap(), Some((queue, "job".into())));
    }

    // SUBSCRIBE on a dedicated connection, PUBLISH through the shared one.
    let mut subscriber = client.get_connection().unwrap();
    let mut pubsub = subscriber.as_pubsub();
    pubsub.subscribe("news").unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let receivers: usize = redis::cmd("PUBLISH")
        .arg("news")
        .arg("hello")
        .query(&mut con)
        .unwrap();
    assert_eq!(receivers, 1);
    let message = pubsub.get_message().unwrap();
    assert_eq!(message.get_payload::<String>().unwrap(), "hello");

    // Every connection of the gateway is on a TLS port, the subscriber's among them, and every master ran a
    // transaction and a blocking command.
    let connections = assert_tls_only(&cluster);
    assert!(
        connections.iter().any(|line| line.contains(" sub=1 ")),
        "no subscriber: {connections:#?}"
    );
    for master in cluster.masters() {
        let mut node = cluster.client(master.port);
        for command in ["exec", "blpop"] {
            let calls = switchyard_tests::command_calls(&mut node, command);
            assert!(calls > 0, "no {command} on {}", master.port);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_sentinel_group_fails_over_and_replica_reads_use_tls() {
    let pki = Pki::new("sentinel");
    let group = SentinelGroup::start_tls(2, 3, &NodeTls::new(&pki, &["localhost", "127.0.0.1"]));
    let old_master = group.master_port();
    let route = json!({"read": {"resources": [group.slaves_url(false)]},
                       "write": {"resources": [group.url()]}});
    let gateway = tls_gateway(&pki, &[(PASSWORD, route)]);
    let mut client = tls_client(&pki, &gateway, PASSWORD)
        .get_multiplexed_async_connection()
        .await
        .unwrap();

    // Writes reach the master, reads the replicas (rediss-sentinel-slaves).
    for i in 0..50 {
        let () = client.set(format!("k{i}"), i).await.unwrap();
    }
    group.wait_in_sync();
    let replicas: Vec<u16> = group
        .data_ports()
        .into_iter()
        .filter(|&p| p != old_master)
        .collect();
    for i in 0..50 {
        let value: i64 = client.get(format!("k{i}")).await.unwrap();
        assert_eq!(value, i);
    }
    let reads: u64 = replicas
        .iter()
        .map(|&p| switchyard_tests::command_calls(&mut group.client(p), "get"))
        .sum();
    assert_eq!(reads, 50, "every read on a replica");

    // A failover: writes go on, and soon land on the new master.
    group.failover();
    let mut new_master = old_master;
    wait_for("the sentinels to switch", Duration::from_secs(15), || {
        new_master = group.master_port();
        new_master != old_master
    });
    let switched = Instant::now();
    let mut n = 0;
    loop {
        n += 1;
        let written: redis::RedisResult<()> = client.set("after", n).await;
        let stored: Option<i64> = redis::cmd("GET")
            .arg("after")
            .query(&mut group.client(new_master))
            .unwrap_or(None);
        if written.is_ok() && stored == Some(n) {
            break;
        }
        assert!(
            switched.elapsed() < Duration::from_secs(5),
            "writes did not reach the new master: {written:?}; gateway log:\n{}",
            gateway.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "writes reached the new master {:?} after the switch",
        switched.elapsed()
    );

    // Data nodes and sentinels alike were reached on their TLS ports: the ports the sentinels name.
    for port in group.data_ports() {
        for line in gateway_connections(&mut group.client(port)) {
            assert_eq!(local_port(&line), port, "{line}");
            assert_ne!(port, group.plain_port(port));
        }
    }
    let mut watchers = 0;
    for port in group.sentinel_ports() {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut group.sentinel_client(port))
            .unwrap();
        for line in list.lines().filter(|line| !line.contains(" sub=0 ")) {
            assert_ne!(
                local_port(line),
                port,
                "a subscription on the plain port: {line}"
            );
            watchers += 1;
        }
    }
    assert!(watchers > 0, "the gateway watches a sentinel");
}

/// Cluster nodes announce themselves by IP address (`CLUSTER SLOTS` names 127.0.0.1) while their certificates
/// name only a host (`localhost`). With seeds given by that host name, the seed's certificate passes full
/// verification, but every node the slot map names fails it; `tlsVerify=ca` (chain only) or `tlsServerName`
/// (the name to check on every node) serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_announced_by_an_ip_their_certificate_lacks_need_tls_verify_ca() {
    let pki = Pki::new("by-name");
    let cluster = RedisCluster::start_tls(3, 0, None, &NodeTls::new(&pki, &["localhost"]));
    let by_name = cluster.url().replace("127.0.0.1", "localhost");
    let gateway = tls_gateway(
        &pki,
        &[
            ("full-verify-1234", json!(by_name)),
            ("chain-only-12345", json!(format!("{by_name}&tlsVerify=ca"))),
            (
                "server-name-1234",
                json!(format!("{}&tlsServerName=localhost", cluster.url())),
            ),
        ],
    );

    let mut full = tls_client(&pki, &gateway, "full-verify-1234")
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let owners = cluster.slot_owners();
    let key = "some-key";
    let node = cluster.tls_port(owners[slot(key)]);
    let expected = format!(
        "backend 127.0.0.1:{node} unavailable: TLS handshake failed: hostname mismatch: the certificate is for \
         localhost, not 127.0.0.1"
    );
    // The first request may reach the seed before the slot map is read; from then on, every one fails.
    let deadline = Instant::now() + Duration::from_secs(10);
    let error = loop {
        let started = Instant::now();
        let result: redis::RedisResult<Option<String>> = full.get(key).await;
        if result.is_err() || Instant::now() > deadline {
            break error_of(result, started);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(error, expected);
    // Operators see it too: the gateway logs each node it cannot verify.
    let log = gateway.log();
    assert!(
        log.lines()
            .any(|line| line.contains("backend connection down")
                && line.contains(&format!("127.0.0.1:{node}"))
                && line.contains("hostname mismatch")),
        "{log}"
    );

    for password in ["chain-only-12345", "server-name-1234"] {
        let mut con = tls_client(&pki, &gateway, password)
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let keys: Vec<String> = (0..100).map(|i| format!("{password}:{i}")).collect();
        for key in &keys {
            let () = con.set(key, key).await.unwrap();
        }
        let values: Vec<String> = con.mget(&keys).await.unwrap();
        assert_eq!(values, keys, "{password}");
    }
    assert_tls_only(&cluster);
}
