//! Key namespaces end to end: two tenants with namespaces `a:` and `b:` on the same database of one Redis (and of
//! a Redis Cluster), each answered as if it had the Redis alone (the comparison harness's families, byte for
//! byte), seeing only its own keys (SCAN, KEYS, keyspace notifications), while the backend holds the keys
//! prefixed. See docs/tenant-policies.md#key-namespace.

use serde_json::json;
use switchyard_tests::compare::{Comparison, each_namespaced};
use switchyard_tests::{Gateway, RawClient, RedisServer, families};

/// What a namespaced tenant does beyond the families: transactions (with replies that carry key names), WATCH,
/// scripts with `KEYS[1]`, blocking pops, whole SCANs and KEYS, and the commands refused in a namespace.
fn namespace_sequence(c: &mut Comparison) {
    c.all_same(&[
        &["SET", "{n}a", "1"],
        &["SET", "{n}b", "2"],
        &["RPUSH", "{n}l", "x", "y", "z"],
        &["MULTI"],
        &["INCR", "{n}a"],
        &["LMPOP", "1", "{n}l", "LEFT"],
        &["KEYS", "{n}a"],
        &["SCAN", "0", "MATCH", "{n}b", "COUNT", "1000"],
        &["EXEC"],
        &["WATCH", "{n}a"],
        &["MULTI"],
        &["SET", "{n}a", "w"],
        &["EXEC"],
        &["GET", "{n}a"],
        &[
            "EVAL",
            "return redis.call('SET', KEYS[1], ARGV[1])",
            "1",
            "{n}e",
            "v",
        ],
        &["EVAL", "return redis.call('GET', KEYS[1])", "1", "{n}e"],
        &["GET", "{n}e"],
        &["BLPOP", "{n}l", "1"],
        &["BRPOP", "{n}none", "{n}l", "1"],
        &["BLPOP", "{n}none", "0.01"],
        &["ZADD", "{n}z", "1", "m"],
        &["BZPOPMIN", "{n}z", "1"],
        &["RENAME", "{n}a", "{n}a2"],
        &["EXISTS", "{n}a", "{n}a2"],
        &["OBJECT", "ENCODING", "{n}a2"],
        &["SORT", "{n}l"],
        &["SCAN", "0", "COUNT"],
        &["DUMP", "{n}b"],
        &["COPY", "{n}b", "{n}b3"],
        &["GET", "{n}b3"],
        &["XADD", "{n}st", "1-1", "f", "v"],
        &[
            "XREAD", "BLOCK", "10", "STREAMS", "{n}st", "{n}none", "0", "0",
        ],
        &["XREAD", "COUNT", "1", "{n}st"],
        &["RPUSH", "{n}l3", "a"],
        &["BLMPOP", "0.01", "2", "{n}none", "{n}l3", "RIGHT"],
        &["BZMPOP", "0.01", "1", "{n}none", "MIN"],
    ]);
    c.scan_same(&[]);
    c.scan_same(&["MATCH", "{n}*", "COUNT", "3"]);
    c.unordered(&["KEYS", "*"]);
    let why =
        "docs/tenant-policies.md#key-namespace: whole-database commands are refused in a namespace";
    for (name, instead) in [
        ("DBSIZE", "count the namespace's keys with SCAN"),
        ("RANDOMKEY", "pick a key from SCAN's replies"),
        (
            "FLUSHDB",
            "delete the namespace's keys with SCAN and UNLINK",
        ),
    ] {
        let refusal = format!(
            "-ERR {name} is refused for a tenant with a key namespace: it concerns every key of the database, \
             which other tenants share; {instead} instead\r\n"
        );
        c.differs(&[name], refusal.as_bytes(), why);
    }
}

#[test]
fn command_families_answer_as_if_each_tenant_had_the_redis_alone() {
    each_namespaced(|c| {
        families::strings(c);
        families::hashes_lists_sets(c);
        families::sorted_sets_and_streams(c);
        families::hyperloglogs_geo_and_bitfields(c);
        namespace_sequence(c);
    });
}

/// A gateway with tenants `a` (namespace `a:`, admin) and `b` (namespace `b:`) on one Redis's database 0.
fn two_tenants(redis: &RedisServer) -> Gateway {
    let route = json!({"type": "single", "target": redis.url()});
    Gateway::start(&json!({"tenants": [
        {"name": "a", "passwords": ["pa"], "allow_admin": true, "namespace": "a:", "route": route},
        {"name": "b", "passwords": ["pb"], "namespace": "b:", "route": route}
    ]}))
}

fn tenant(gateway: &Gateway, name: &str) -> RawClient {
    let mut client = RawClient::connect(gateway.port());
    let password = format!("p{name}");
    assert_eq!(
        client.request(&[b"AUTH", name.as_bytes(), password.as_bytes()]),
        b"+OK\r\n"
    );
    client
}

/// The keys of an array reply, sorted.
fn sorted_keys(reply: &[u8]) -> Vec<String> {
    let mut keys: Vec<String> = switchyard_tests::compare::elements(reply)
        .iter()
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .collect();
    keys.sort();
    keys
}

#[test]
fn scan_keys_and_scripts_see_only_the_tenants_own_keys() {
    let redis = RedisServer::start();
    let gateway = two_tenants(&redis);
    let (mut a, mut b) = (tenant(&gateway, "a"), tenant(&gateway, "b"));
    for (client, value) in [(&mut a, "from a"), (&mut b, "from b")] {
        for key in ["k", "shared", "{t}x"] {
            assert_eq!(
                client.request(&[b"SET", key.as_bytes(), value.as_bytes()]),
                b"+OK\r\n"
            );
        }
    }
    assert_eq!(b.request(&[b"SET", b"only-b", b"1"]), b"+OK\r\n");
    // The backend holds every key under its tenant's prefix.
    let mut backend = RawClient::connect(redis.port());
    assert_eq!(
        sorted_keys(&backend.request(&[b"KEYS", b"*"])),
        [
            "$3\r\na:k\r\n",
            "$3\r\nb:k\r\n",
            "$6\r\na:{t}x\r\n",
            "$6\r\nb:{t}x\r\n",
            "$8\r\na:shared\r\n",
            "$8\r\nb:only-b\r\n",
            "$8\r\nb:shared\r\n",
        ]
    );
    // Each tenant sees its own keys and values, without its prefix.
    let own = ["$1\r\nk\r\n", "$4\r\n{t}x\r\n", "$6\r\nshared\r\n"];
    let scan = a.request(&[b"SCAN", b"0", b"COUNT", b"1000"]);
    assert!(scan.starts_with(b"*2\r\n$1\r\n0\r\n"), "{scan:?}");
    assert_eq!(sorted_keys(&scan[b"*2\r\n$1\r\n0\r\n".len()..]), own);
    assert_eq!(sorted_keys(&a.request(&[b"KEYS", b"*"])), own);
    assert_eq!(a.request(&[b"KEYS", b"only-*"]), b"*0\r\n");
    assert_eq!(
        b.request(&[b"SCAN", b"0", b"MATCH", b"only*", b"COUNT", b"1000"]),
        b"*2\r\n$1\r\n0\r\n*1\r\n$6\r\nonly-b\r\n"
    );
    // KEYS stays an admin command.
    assert!(
        b.request(&[b"KEYS", b"*"])
            .starts_with(b"-ERR KEYS is an admin command")
    );
    // A script's KEYS[1] is the tenant's key.
    let get = b"return redis.call('GET', KEYS[1])";
    assert_eq!(
        a.request(&[b"EVAL", get, b"1", b"shared"]),
        b"$6\r\nfrom a\r\n"
    );
    assert_eq!(
        b.request(&[b"EVAL", get, b"1", b"shared"]),
        b"$6\r\nfrom b\r\n"
    );
    assert_eq!(a.request(&[b"EXISTS", b"only-b"]), b":0\r\n");
    // INFO's keyspace counts are the shared database's: a namespace shows none.
    let info = a.request(&[b"INFO", b"keyspace"]);
    assert_eq!(
        info,
        b"$12\r\n# Keyspace\r\n\r\n",
        "{}",
        String::from_utf8_lossy(&info)
    );
    assert!(
        b.request(&[b"DBSIZE"])
            .starts_with(b"-ERR DBSIZE is refused for a tenant with a key namespace")
    );
    assert!(
        a.request(&[b"FLUSHALL"])
            .starts_with(b"-ERR FLUSHALL is refused")
    );
    assert_eq!(backend.request(&[b"DBSIZE"]), b":7\r\n");
}

#[test]
fn keyspace_notifications_show_only_the_tenants_own_keys() {
    let redis = RedisServer::start();
    let gateway = two_tenants(&redis);
    let mut backend = RawClient::connect(redis.port());
    assert_eq!(
        backend.request(&[b"CONFIG", b"SET", b"notify-keyspace-events", b"KEA"]),
        b"+OK\r\n"
    );
    // Tenant b, without admin rights, and tenant a, an admin, each hear of their own keys only.
    for (listener, writer) in [("b", "a"), ("a", "b")] {
        let mut subscriber = tenant(&gateway, listener);
        let (mut own, mut other) = (tenant(&gateway, listener), tenant(&gateway, writer));
        assert_eq!(
            subscriber.request(&[b"PSUBSCRIBE", b"__keyspace@0__:*"]),
            b"*3\r\n$10\r\npsubscribe\r\n$16\r\n__keyspace@0__:*\r\n:1\r\n"
        );
        assert_eq!(
            subscriber.request(&[b"SUBSCRIBE", b"__keyevent@0__:set"]),
            b"*3\r\n$9\r\nsubscribe\r\n$18\r\n__keyevent@0__:set\r\n:2\r\n"
        );
        // The other tenant's write comes first: had its notifications leaked, they would arrive first.
        assert_eq!(other.request(&[b"SET", b"k", b"1"]), b"+OK\r\n");
        assert_eq!(own.request(&[b"SET", b"mine", b"1"]), b"+OK\r\n");
        let mut frames = [subscriber.read_reply(), subscriber.read_reply()];
        frames.sort();
        assert_eq!(
            frames,
            [
                b"*3\r\n$7\r\nmessage\r\n$18\r\n__keyevent@0__:set\r\n$4\r\nmine\r\n".to_vec(),
                b"*4\r\n$8\r\npmessage\r\n$16\r\n__keyspace@0__:*\r\n$19\r\n__keyspace@0__:mine\r\n$3\r\nset\r\n"
                    .to_vec(),
            ]
        );
    }
}

/// A request whose keys the gateway cannot find (a malformed `numkeys`, `XREAD` without `STREAMS`) is never sent
/// as it is: no key of it would carry the namespace's prefix. It is refused (docs/operations.md, "understand or
/// refuse"), or, where the gateway reads it as Redis does and finds Redis' own syntax error (`XREAD`) or no key
/// is required (`EVAL`), answered with Redis' words. Here tenant `a` names `b`'s stored keys in every such form,
/// and `b`'s keys stay as they were.
#[test]
fn requests_whose_keys_cannot_be_found_reach_no_other_tenants_key() {
    let redis = RedisServer::start();
    let gateway = two_tenants(&redis);
    let (mut a, mut b) = (tenant(&gateway, "a"), tenant(&gateway, "b"));
    assert_eq!(b.request(&[b"RPUSH", b"l", b"x"]), b":1\r\n");
    assert_eq!(b.request(&[b"ZADD", b"z", b"1", b"m"]), b":1\r\n");
    assert_eq!(
        b.request(&[b"XADD", b"st", b"1-1", b"f", b"v"]),
        b"$3\r\n1-1\r\n"
    );
    let mut direct = RawClient::connect(redis.port());
    let script = b"return redis.call('LPOP', 'b:l')";
    for (request, error) in [
        (
            &[&b"LMPOP"[..], b"0", b"b:l", b"LEFT"][..],
            &b"-ERR numkeys should be greater than 0\r\n"[..],
        ),
        (
            &[b"ZMPOP", b"0", b"b:z", b"MIN"],
            b"-ERR numkeys should be greater than 0\r\n",
        ),
        (
            &[b"BLMPOP", b"0", b"0", b"b:l", b"LEFT"],
            b"-ERR numkeys should be greater than 0\r\n",
        ),
        (
            &[b"SINTERCARD", b"0", b"b:l"],
            b"-ERR numkeys should be greater than 0\r\n",
        ),
        (
            &[b"XREAD", b"COUNT", b"1", b"b:st", b"0"],
            b"-ERR syntax error\r\n",
        ),
        (
            &[b"EVAL", script, b"-1"],
            b"-ERR Number of keys can't be negative\r\n",
        ),
        (
            &[b"EVAL", script, b"2", b"k"],
            b"-ERR Number of keys can't be greater than number of args\r\n",
        ),
    ] {
        assert_eq!(direct.request(request), error, "{request:?} to Redis");
        let reply = a.request(request);
        // Where no key can be found and one is required, the gateway's refusal; else Redis' own words.
        let refused = b"-ERR "
            .iter()
            .chain(request[0])
            .copied()
            .collect::<Vec<u8>>();
        if error.ends_with(b"should be greater than 0\r\n") {
            assert!(
                reply.starts_with(&refused)
                    && String::from_utf8_lossy(&reply).contains("no key can be found"),
                "{request:?} through the gateway: {}",
                String::from_utf8_lossy(&reply)
            );
        } else {
            assert_eq!(reply, error, "{request:?} through the gateway");
        }
    }
    assert_eq!(
        b.request(&[b"LRANGE", b"l", b"0", b"-1"]),
        b"*1\r\n$1\r\nx\r\n"
    );
    assert_eq!(b.request(&[b"ZCARD", b"z"]), b":1\r\n");
    assert_eq!(b.request(&[b"XLEN", b"st"]), b":1\r\n");
}
