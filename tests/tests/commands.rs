//! Command families through the gateway compared with a plain redis-server, reply for reply, byte for byte, over a
//! single shard, a ring of three shards and a three-master Redis Cluster (see `switchyard_tests::compare`).
//! Multi-key commands use hash tags, as applications written for Redis Cluster do.

use switchyard_tests::compare::{Backends, Comparison, Topology, each_topology, elements, show};
use switchyard_tests::{Gateway, RawClient};

#[test]
fn strings() {
    each_topology(|c| {
        c.all_same(&[
            &["SET", "s:a", "hello"],
            &["GET", "s:a"],
            &["GET", "s:missing"],
            &["APPEND", "s:a", " world"],
            &["STRLEN", "s:a"],
            &["GETRANGE", "s:a", "0", "4"],
            &["SETRANGE", "s:a", "6", "there"],
            &["SET", "s:n", "10"],
            &["INCR", "s:n"],
            &["INCRBY", "s:n", "5"],
            &["DECRBY", "s:n", "3"],
            &["INCRBYFLOAT", "s:n", "1.5"],
            &["INCR", "s:a"],
            &["SET", "s:a", "v", "NX"],
            &["SET", "s:a", "v2", "XX", "GET"],
            &["GETDEL", "s:a"],
            &["SETNX", "s:a", "1"],
            &["GETSET", "s:a", "2"],
            &["MSET", "{s}1", "a", "{s}2", "b", "{s}3", "c"],
            &["MGET", "{s}1", "{s}2", "{s}missing", "{s}3"],
            &["MSETNX", "{s}1", "x", "{s}4", "y"],
            &["SET", "s:bits", "\x0f"],
            &["GETBIT", "s:bits", "5"],
            &["SETBIT", "s:bits", "0", "1"],
            &["BITCOUNT", "s:bits"],
            &["BITPOS", "s:bits", "0"],
            &["SET", "{s}lcs1", "ohmytext"],
            &["SET", "{s}lcs2", "mynewtext"],
            &["LCS", "{s}lcs1", "{s}lcs2"],
            &["SET", "s:ttl", "v", "EX", "100"],
            &["PERSIST", "s:ttl"],
            &["TTL", "s:ttl"],
            &["GETEX", "s:ttl", "PX", "500000"],
            &["SET", "s:a", "v", "EX", "0"],
            &["SET", "s:a", "v", "BADOPTION"],
        ]);
        c.pipeline_same(&[
            &["SET", "s:p1", "1"],
            &["INCR", "s:p1"],
            &["GET", "s:p1"],
            &["DEL", "s:p1"],
            &["GET", "s:p1"],
        ]);
    });
}

#[test]
fn hyperloglogs_geo_and_bitfields() {
    each_topology(|c| {
        c.all_same(&[
            &["PFADD", "{hll}a", "x", "y", "z"],
            &["PFADD", "{hll}b", "z", "w"],
            &["PFCOUNT", "{hll}a"],
            &["PFCOUNT", "{hll}a", "{hll}b"],
            &["PFMERGE", "{hll}m", "{hll}a", "{hll}b"],
            &["PFCOUNT", "{hll}m"],
            &[
                "GEOADD",
                "{geo}p",
                "13.361389",
                "38.115556",
                "Palermo",
                "15.087269",
                "37.502669",
                "Catania",
            ],
            &["GEODIST", "{geo}p", "Palermo", "Catania", "km"],
            &["GEOPOS", "{geo}p", "Palermo", "Nowhere"],
            &["GEOHASH", "{geo}p", "Catania"],
            &[
                "GEOSEARCH",
                "{geo}p",
                "FROMLONLAT",
                "15",
                "37",
                "BYRADIUS",
                "200",
                "km",
                "ASC",
                "WITHDIST",
            ],
            &[
                "GEOSEARCHSTORE",
                "{geo}near",
                "{geo}p",
                "FROMMEMBER",
                "Palermo",
                "BYBOX",
                "400",
                "400",
                "km",
            ],
            &["ZCARD", "{geo}near"],
            &[
                "BITFIELD", "bf", "SET", "u8", "0", "200", "INCRBY", "u8", "0", "100", "GET", "u4",
                "0",
            ],
            &["BITFIELD_RO", "bf", "GET", "u8", "0"],
            &["SET", "{bit}a", "\x7f"],
            &["SET", "{bit}b", "\x0f"],
            &["BITOP", "AND", "{bit}and", "{bit}a", "{bit}b"],
            &["GET", "{bit}and"],
            &["SORT", "{s}list"],
            &["RPUSH", "{s}list", "3", "1", "2"],
            &["SORT", "{s}list", "DESC", "LIMIT", "0", "2"],
            &["SORT", "{s}list", "ALPHA", "STORE", "{s}sorted"],
            &["LRANGE", "{s}sorted", "0", "-1"],
            &["SORT_RO", "{s}list"],
            &["SORT", "{s}list", "BY", "constant", "LIMIT", "0", "1"],
            &["SORT", "{s}list", "STORE", "{s}by", "ASC"],
            &["SORT", "{s}list", "BADOPTION"],
        ]);
        // Patterns name keys that may be on any shard: refused as Redis Cluster refuses them.
        let why = "docs/commands.md#keys-and-multi-key-commands: SORT patterns on several shards";
        for (args, reply) in [
            (
                &["SORT", "{s}list", "BY", "w_*"][..],
                &b"-ERR BY option of SORT denied in Cluster mode.\r\n"[..],
            ),
            (
                &["SORT", "{s}list", "DESC", "GET", "#"][..],
                &b"-ERR GET option of SORT denied in Cluster mode.\r\n"[..],
            ),
        ] {
            if c.topology() == Topology::Single {
                c.same(args);
            } else {
                c.differs(args, reply, why);
            }
        }
    });
}

#[test]
fn hashes_lists_sets() {
    each_topology(|c| {
        c.all_same(&[
            &["HSET", "h", "f1", "v1", "f2", "v2"],
            &["HGET", "h", "f1"],
            &["HMGET", "h", "f1", "nope", "f2"],
            &["HINCRBY", "h", "n", "3"],
            &["HINCRBYFLOAT", "h", "x", "0.5"],
            &["HDEL", "h", "f2", "nope"],
            &["HLEN", "h"],
            &["HEXISTS", "h", "f1"],
            &["HSTRLEN", "h", "f1"],
            &["HSETNX", "h", "f1", "z"],
            &["HGETALL", "h"],
            &["HKEYS", "h"],
            &["HVALS", "h"],
            &["HSET", "h", "odd"],
            &["RPUSH", "l", "a", "b", "c", "d"],
            &["LPUSH", "l", "z"],
            &["LRANGE", "l", "0", "-1"],
            &["LINDEX", "l", "2"],
            &["LSET", "l", "0", "y"],
            &["LINSERT", "l", "BEFORE", "c", "bb"],
            &["LPOS", "l", "c"],
            &["LREM", "l", "1", "bb"],
            &["LTRIM", "l", "0", "3"],
            &["LPOP", "l"],
            &["RPOP", "l", "2"],
            &["LLEN", "l"],
            &["RPUSH", "{l}src", "1", "2", "3"],
            &["LMOVE", "{l}src", "{l}dst", "LEFT", "RIGHT"],
            &["RPOPLPUSH", "{l}src", "{l}dst"],
            &["LMPOP", "2", "{l}none", "{l}src", "LEFT"],
            &["LRANGE", "{l}dst", "0", "-1"],
            &["LPUSH", "h", "x"],
            &["SADD", "{s}a", "1", "2", "3", "4"],
            &["SADD", "{s}b", "3", "4", "5"],
            &["SCARD", "{s}a"],
            &["SISMEMBER", "{s}a", "2"],
            &["SMISMEMBER", "{s}a", "2", "9"],
            &["SREM", "{s}a", "1"],
            &["SMOVE", "{s}a", "{s}b", "2"],
            &["SINTERCARD", "2", "{s}a", "{s}b"],
            &["SINTERSTORE", "{s}i", "{s}a", "{s}b"],
            &["SUNIONSTORE", "{s}u", "{s}a", "{s}b"],
            &["SDIFFSTORE", "{s}d", "{s}b", "{s}a"],
            &["SCARD", "{s}u"],
        ]);
        // Set members come in hash-table order, which depends on the server's history, not on the gateway.
        c.unordered(&["SMEMBERS", "{s}b"]);
        c.unordered(&["SINTER", "{s}a", "{s}b"]);
        c.unordered(&["SUNION", "{s}a", "{s}b"]);
        c.unordered(&["SDIFF", "{s}b", "{s}a"]);
    });
}

#[test]
fn sorted_sets_and_streams() {
    each_topology(|c| {
        c.all_same(&[
            &["ZADD", "{z}a", "1", "one", "2", "two", "3", "three"],
            &["ZADD", "{z}b", "2", "two", "5", "five"],
            &["ZADD", "{z}a", "XX", "CH", "10", "one"],
            &["ZADD", "{z}a", "NX", "GT", "1", "x"],
            &["ZSCORE", "{z}a", "one"],
            &["ZMSCORE", "{z}a", "one", "nope"],
            &["ZINCRBY", "{z}a", "1.5", "two"],
            &["ZRANK", "{z}a", "two"],
            &["ZREVRANK", "{z}a", "two"],
            &["ZCARD", "{z}a"],
            &["ZCOUNT", "{z}a", "2", "+inf"],
            &["ZRANGE", "{z}a", "0", "-1", "WITHSCORES"],
            &["ZRANGE", "{z}a", "(1", "10", "BYSCORE", "LIMIT", "0", "2"],
            &["ZRANGEBYSCORE", "{z}a", "-inf", "+inf"],
            &["ZREVRANGE", "{z}a", "0", "1"],
            &["ZRANGESTORE", "{z}r", "{z}a", "0", "1"],
            &[
                "ZUNIONSTORE",
                "{z}u",
                "2",
                "{z}a",
                "{z}b",
                "WEIGHTS",
                "1",
                "2",
            ],
            &["ZINTER", "2", "{z}a", "{z}b", "WITHSCORES"],
            &["ZDIFF", "2", "{z}a", "{z}b"],
            &["ZINTERCARD", "2", "{z}a", "{z}b"],
            &["ZPOPMIN", "{z}u"],
            &["ZPOPMAX", "{z}u", "2"],
            &["ZMPOP", "2", "{z}none", "{z}a", "MIN", "COUNT", "2"],
            &["ZREM", "{z}a", "three", "nope"],
            &["ZADD", "{z}lex", "0", "a", "0", "b", "0", "c"],
            &["ZRANGEBYLEX", "{z}lex", "[b", "+"],
            &["ZLEXCOUNT", "{z}lex", "-", "+"],
            &["ZREMRANGEBYLEX", "{z}lex", "[a", "[a"],
            &["ZADD", "{z}a", "nan", "x"],
            &["XADD", "st", "1-1", "f", "v"],
            &["XADD", "st", "1-2", "f", "w", "g", "x"],
            &["XADD", "st", "1-1", "f", "v"],
            &["XLEN", "st"],
            &["XRANGE", "st", "-", "+"],
            &["XREVRANGE", "st", "+", "-", "COUNT", "1"],
            &["XREAD", "COUNT", "10", "STREAMS", "st", "0"],
            &["XGROUP", "CREATE", "st", "g1", "0"],
            &[
                "XREADGROUP",
                "GROUP",
                "g1",
                "c1",
                "COUNT",
                "1",
                "STREAMS",
                "st",
                ">",
            ],
            &["XACK", "st", "g1", "1-1"],
            &["XPENDING", "st", "g1"],
            &["XDEL", "st", "1-2"],
            &["XTRIM", "st", "MAXLEN", "0"],
            &["XLEN", "st"],
        ]);
    });
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
