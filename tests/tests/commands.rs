//! Command families through the gateway compared with a plain redis-server, reply for reply, byte for byte, over a
//! single shard, a ring of three shards and a three-master Redis Cluster (see `switchyard_tests::compare`).
//! Multi-key commands use hash tags, as applications written for Redis Cluster do.

use switchyard_tests::compare::{Backends, Comparison, Topology, each_topology, elements, show};
use switchyard_tests::families;
use switchyard_tests::{Gateway, RawClient};

#[test]
fn strings() {
    each_topology(families::strings);
}

#[test]
fn hyperloglogs_geo_and_bitfields() {
    each_topology(families::hyperloglogs_geo_and_bitfields);
}

#[test]
fn hashes_lists_sets() {
    each_topology(families::hashes_lists_sets);
}

#[test]
fn sorted_sets_and_streams() {
    each_topology(families::sorted_sets_and_streams);
}

#[test]
fn keyspace_commands_and_errors() {
    each_topology(|c| {
        c.all_same(&[
            &["MSET", "{k}a", "1", "{k}b", "2", "{k}c", "3"],
            &["SET", "k:x", "1"],
            &["EXISTS", "{k}a", "{k}b", "{k}nope"],
            &["TYPE", "{k}a"],
            &["TYPE", "nope"],
            &["RENAME", "{k}a", "{k}a2"],
            &["RENAMENX", "{k}a2", "{k}b"],
            &["COPY", "{k}b", "{k}b2"],
            &["EXPIRE", "{k}b", "100"],
            &["TTL", "{k}b"],
            &["PEXPIRE", "{k}b", "100000", "NX"],
            &["EXPIRETIME", "{k}c"],
            &["PERSIST", "{k}b"],
            &["TTL", "{k}b"],
            &["OBJECT", "ENCODING", "{k}b"],
            &["OBJECT", "REFCOUNT", "{k}b"],
            &["DUMP", "{k}b"],
            &["TOUCH", "{k}a2", "{k}b"],
            &["UNLINK", "{k}b2"],
            &["DEL", "{k}a2", "{k}b", "{k}nope"],
            &["DBSIZE"],
            &["EXISTS", "k:x"],
            &["RENAME", "{k}nope", "{k}x"],
            &["GET"],
            &["SET", "k"],
            &["NOSUCHCOMMAND", "a"],
            &["EXPIRE", "k:x", "notanumber"],
            &["SORT", "nope"],
            &["PING"],
            &["PING", "hi"],
            &["ECHO", "hello"],
            &["CLIENT", "SETNAME", "has space"],
            &["CLIENT", "SETNAME", "app"],
            &["CLIENT", "GETNAME"],
            &["GET", "a", "b"],
            &["HSET", "h"],
            &["LPUSH", "k:x", "v"],
            &["HGET", "k:x", "f"],
            &["INCR", "k:x"],
            &["CONFIG", "NOSUCH"],
            &["OBJECT"],
            &["OBJECT", "NOSUCH", "k:x"],
            &["SCRIPT", "NOSUCH"],
            &["XADD", "k:x", "*", "f", "v"],
            &["ZADD", "k:z", "notascore", "m"],
            &["SET", "k:x", "v", "EX", "-5"],
            &["SET", "k:x", "v", "NX", "XX"],
            &["BITCOUNT", "k:x", "0"],
            &["EXPIRE", "k:x", "10", "NX", "XX"],
            &["SETRANGE", "k:x", "-1", "v"],
            &["ECHO"],
            &["PING", "a", "b"],
        ]);
        c.unordered(&["KEYS", "*"]);
    });
}

/// Sanity check of the harness itself: a mismatch is reported.
#[test]
#[should_panic(expected = "differs from Redis")]
fn the_harness_reports_a_difference() {
    let mut c = Comparison::start(Topology::Single);
    c.same(&["SET", "k", "v"]);
    // The gateway's backend is changed behind its back: GET now differs.
    let args: &[&[u8]] = &[b"SET", b"k", b"other"];
    let mut direct = RawClient::connect(match c.backends() {
        Backends::Servers(servers) => servers[0].port(),
        Backends::Cluster(_) => unreachable!(),
    });
    direct.request(args);
    c.same(&["GET", "k"]);
}

/// SCAN visits every shard and every cluster master: each key exactly once when nothing changes, with MATCH,
/// COUNT and TYPE honoured; KEYS, DBSIZE and RANDOMKEY see every node too.
#[test]
fn keyspace_wide_commands_see_every_shard_and_master() {
    each_topology(|c| {
        c.same(&["RANDOMKEY"]);
        c.same(&["SCAN", "0"]);
        // A small keyspace comes back in one call, with cursor 0, whatever the number of nodes.
        c.same(&[
            "MSET", "one", "1", "two", "2", "three", "3", "four", "4", "five", "5",
        ]);
        let (reference, gateway) = c.both(&["SCAN", "0"]);
        for reply in [&reference, &gateway] {
            assert!(
                reply.starts_with(b"*2\r\n$1\r\n0\r\n*5\r\n"),
                "[{}] {}",
                c.topology(),
                show(reply)
            );
        }
        c.same(&["DEL", "one", "two", "three", "four", "five"]);
        for i in 0..300 {
            let key = format!("item:{i}");
            match i % 3 {
                0 => c.same(&["SET", &key, "v"]),
                1 => c.same(&["HSET", &key, "f", "v"]),
                _ => c.same(&["RPUSH", &key, "v"]),
            };
        }
        c.same(&["SET", "other", "1"]);
        c.same(&["DBSIZE"]);
        c.scan_same(&[]);
        c.scan_same(&["COUNT", "7"]);
        c.scan_same(&["MATCH", "item:1*", "COUNT", "1000"]);
        c.scan_same(&["TYPE", "hash"]);
        c.scan_same(&["MATCH", "*:2?", "TYPE", "list", "COUNT", "3"]);
        c.unordered(&["KEYS", "item:2*"]);
        c.unordered(&["KEYS", "*"]);
        for _ in 0..20 {
            let (_, key) = c.both(&["RANDOMKEY"]);
            assert!(key.starts_with(b"$"), "[{}] {key:?}", c.topology());
            let name = String::from_utf8_lossy(&key[key.len().min(4)..]).into_owned();
            assert!(
                name.starts_with("item:") || name.starts_with("other"),
                "[{}] RANDOMKEY gave {name}",
                c.topology()
            );
        }
        c.all_same(&[
            &["SCAN", "notanumber"],
            &["SCAN", "0", "COUNT", "0"],
            &["SCAN", "0", "BADOPT", "x"],
            &["FLUSHALL"],
            &["DBSIZE"],
            &["RANDOMKEY"],
        ]);
    });
}

/// Split, fanned-out and keyed commands in one pipeline: every reply in request order, as from Redis.
#[test]
fn mixed_pipelines_keep_their_order() {
    each_topology(|c| {
        let keys: Vec<String> = (0..30).map(|i| format!("p:{i}")).collect();
        let mut commands: Vec<Vec<&str>> = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            commands.push(vec!["SET", key, key]);
            if i % 5 == 0 {
                commands.push(vec!["DBSIZE"]);
                commands.push(vec!["MGET", &keys[0], key, "p:missing"]);
                commands.push(vec!["EXISTS", &keys[0], key, "p:missing"]);
            }
        }
        commands.push(vec!["DEL", &keys[1], &keys[2], &keys[3]]);
        commands.push(vec![
            "SCRIPT",
            "EXISTS",
            "ffffffffffffffffffffffffffffffffffffffff",
        ]);
        commands.push(vec!["INCR", &keys[4]]);
        commands.push(vec!["DBSIZE"]);
        let borrowed: Vec<&[&str]> = commands.iter().map(Vec::as_slice).collect();
        c.pipeline_same(&borrowed);
    });
}

/// Keys added and removed while a SCAN runs do not hide the keys that stay: each of those is returned.
#[test]
fn scan_returns_every_key_present_for_the_whole_scan_while_others_churn() {
    for topology in [Topology::Sharded, Topology::Cluster] {
        let c = Comparison::start(topology);
        let mut client = RawClient::connect(c.gateway().port());
        let mut churn = RawClient::connect(c.gateway().port());
        for i in 0..500 {
            let key = format!("stable:{i}");
            assert_eq!(client.request(&[b"SET", key.as_bytes(), b"v"]), b"+OK\r\n");
        }
        let mut seen = std::collections::HashSet::new();
        let mut cursor = b"0".to_vec();
        let mut round = 0;
        loop {
            // Between two SCAN calls, 20 new keys appear and the previous 20 go.
            for i in 0..20 {
                let new = format!("churn:{round}:{i}");
                churn.request(&[b"SET", new.as_bytes(), b"v"]);
                if round > 0 {
                    let old = format!("churn:{}:{i}", round - 1);
                    churn.request(&[b"DEL", old.as_bytes()]);
                }
            }
            round += 1;
            let reply = client.request(&[b"SCAN", &cursor, b"COUNT", b"25"]);
            let [next, keys] = <[Vec<u8>; 2]>::try_from(elements(&reply)).expect("a SCAN reply");
            for key in elements(&keys) {
                let key = String::from_utf8_lossy(&key).into_owned();
                seen.insert(key.split("\r\n").nth(1).unwrap_or_default().to_string());
            }
            cursor = String::from_utf8_lossy(&next)
                .split("\r\n")
                .nth(1)
                .expect("a cursor")
                .as_bytes()
                .to_vec();
            if cursor == b"0" {
                break;
            }
            assert!(round < 10_000, "[{topology}] SCAN never finished");
        }
        let missing: Vec<usize> = (0..500)
            .filter(|i| !seen.contains(&format!("stable:{i}")))
            .collect();
        assert!(missing.is_empty(), "[{topology}] SCAN missed {missing:?}");
    }
}

/// Right after a gateway starts, each worker's first slot map may still be on its way: DBSIZE, SCAN and KEYS wait
/// for it instead of answering for the seed node alone.
#[test]
fn keyspace_wide_commands_on_a_fresh_gateway_see_every_master() {
    let mut c = Comparison::start(Topology::Cluster);
    for i in 0..100 {
        c.same(&["SET", &format!("fresh:{i}"), "v"]);
    }
    let Backends::Cluster(cluster) = c.backends() else {
        unreachable!("a cluster comparison");
    };
    let routes = serde_json::json!({"tenants": [
        {"name": "t", "passwords": [], "allow_admin": true,
         "route": {"type": "single", "target": cluster.url()}}
    ]});
    for _ in 0..3 {
        let fresh = Gateway::start(&routes);
        let mut client = RawClient::connect(fresh.port());
        assert_eq!(client.request(&[b"DBSIZE"]), b":100\r\n");
        let mut other = RawClient::connect(fresh.port());
        let keys = other.request(&[b"KEYS", b"fresh:*"]);
        assert!(keys.starts_with(b"*100\r\n"), "{}", show(&keys));
        let mut third = RawClient::connect(fresh.port());
        let scan = third.request(&[b"SCAN", b"0", b"COUNT", b"1000"]);
        assert!(
            scan.starts_with(b"*2\r\n$1\r\n0\r\n*100\r\n"),
            "{}",
            show(&scan)
        );
    }
}
