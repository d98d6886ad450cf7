//! Connection-level commands through the gateway compared with a plain redis-server (see
//! `switchyard_tests::compare`): SELECT with a database per connection, MOVE and SWAPDB where the route allows
//! them, HELLO and RESP3, CLIENT TRACKING, and Redis 7.2's CLIENT SETINFO, which today's clients send on connect.

use serde_json::json;
use switchyard_tests::compare::{Comparison, Topology, each_topology};
use switchyard_tests::{Gateway, RawClient, RedisServer};

const OUT_OF_RANGE: &[u8] = b"-ERR DB index is out of range\r\n";

#[test]
fn select_gives_each_connection_its_database() {
    each_topology(|c| {
        c.all_same(&[
            &["SET", "k", "zero"],
            &["SELECT", "0"],
            &["SELECT", "16"],
            &["SELECT", "-1"],
            &["SELECT", "x"],
            &["SELECT"],
            &["GET", "k"],
        ]);
        if c.topology() == Topology::Cluster {
            let why = "docs/commands.md#databases: a Redis Cluster has only database 0";
            c.differs(&["SELECT", "1"], OUT_OF_RANGE, why);
            c.same(&["SELECT", "0"]); // the reference did switch
            c.same(&["GET", "k"]);
            // A cluster node answers these itself, as it does for any client.
            let why = "docs/commands.md#databases: Redis Cluster's own reply";
            c.differs(
                &["MOVE", "k", "1"],
                b"-ERR MOVE is not allowed in cluster mode\r\n",
                why,
            );
            c.differs(
                &["SWAPDB", "0", "1"],
                b"-ERR SWAPDB is not allowed in cluster mode\r\n",
                why,
            );
            return;
        }
        c.all_same(&[
            &["SELECT", "1"],
            &["GET", "k"],
            &["SET", "k", "one"],
            &["MSET", "{k}a", "1", "{k}b", "2"],
            &["DBSIZE"],
            &["SELECT", "15"],
            &["DBSIZE"],
            &["SELECT", "1"],
            &["GET", "k"],
            &["SELECT", "0"],
            &["GET", "k"],
            &["DBSIZE"],
        ]);
        c.scan_same(&[]);
        let why = "docs/commands.md#databases: databases are per backend";
        let refused = |name: &str| {
            format!(
                "-ERR {name} is not supported on a route with several shards: databases are per backend\r\n"
            )
        };
        for (args, name) in [
            (&["MOVE", "k", "2"][..], "MOVE"),
            (&["SWAPDB", "0", "1"][..], "SWAPDB"),
        ] {
            if c.topology() == Topology::Sharded {
                c.differs(args, refused(name).as_bytes(), why);
            } else {
                c.same(args);
            }
        }
        if c.topology() == Topology::Single {
            c.all_same(&[
                &["GET", "k"],
                &["SELECT", "1"],
                &["GET", "k"],
                &["SELECT", "2"],
                &["GET", "k"],
                &["MOVE", "k", "2"],
                &["MOVE", "nope", "3"],
            ]);
        }
    });
}

#[test]
fn a_tenant_that_owns_one_database_selects_only_it() {
    let backend = RedisServer::start();
    let target = json!(format!("{}/5", backend.url()));
    let routes = json!({"tenants": [
        {"name": "t", "passwords": [], "allow_admin": true, "route": {"type": "single", "target": target}}
    ]});
    let gateway = Gateway::start(&routes);
    let mut client = RawClient::connect(gateway.port());
    client.roundtrip(b"SET k v\r\n", b"+OK\r\n");
    client.roundtrip(b"SELECT 0\r\n", b"+OK\r\n");
    client.roundtrip(b"SELECT 1\r\n", OUT_OF_RANGE);
    // Database 0 is the tenant's own (the backend's 5): moving a key there moves it nowhere.
    client.roundtrip(
        b"MOVE k 0\r\n",
        b"-ERR source and destination objects are the same\r\n",
    );
    client.roundtrip(b"MOVE k 1\r\n", OUT_OF_RANGE);
    client.roundtrip(b"GET k\r\n", b"$1\r\nv\r\n");
    let mut direct = RawClient::connect(backend.port());
    direct.roundtrip(b"SET neighbour v\r\n", b"+OK\r\n");
    direct.roundtrip(b"SELECT 5\r\n", b"+OK\r\n");
    direct.roundtrip(b"GET k\r\n", b"$1\r\nv\r\n");
    // FLUSHALL empties the tenant's database only, not the other tenants' of the same Redis.
    client.roundtrip(b"FLUSHALL\r\n", b"+OK\r\n");
    client.roundtrip(b"DBSIZE\r\n", b":0\r\n");
    direct.roundtrip(b"SELECT 0\r\n", b"+OK\r\n");
    direct.roundtrip(b"GET neighbour\r\n", b"$1\r\nv\r\n");
}

#[test]
fn hello_switches_protocols_and_tracking_is_refused() {
    each_topology(|c| {
        c.all_same(&[
            &["HELLO", "4"],
            &["HELLO", "1"],
            &["HELLO", "x"],
            &["HELLO", "2", "BADOPT"],
            &["PING"],
        ]);
        // Either way and back, the connection's replies follow (a map or a null only in RESP3).
        for version in [3, 2, 3, 2] {
            c.hello(version);
            c.all_same(&[
                &["HSET", "h", "f", "v"],
                &["HGETALL", "h"],
                &["GET", "nope"],
            ]);
        }
        c.differs(
            &["CLIENT", "TRACKING", "on"],
            b"-ERR CLIENT TRACKING is not supported by the gateway: the keys a client reads are read over backend connections shared with other clients, where Redis cannot track them for that client, so invalidations would be missed\r\n",
            "docs/commands.md#client",
        );
        // The connection is still open and still RESP2.
        c.same(&["GET", "nope"]);
    });
}

/// `CLIENT SETINFO LIB-NAME|LIB-VER value` as Redis 7.2 answers it (redis-py 8 and node-redis 6 send it on
/// connect); the Redis 7.0 reference does not know it, so each reply is a documented difference. The values show
/// at the end of `CLIENT INFO` and `CLIENT LIST` lines, as in Redis 7.2.
#[test]
fn client_setinfo_is_redis_7_2s() {
    let why = "docs/commands.md#client: CLIENT SETINFO is Redis 7.2's";
    each_topology(|c| {
        // Redis 7.2's fields, empty until set.
        let info = |c: &mut Comparison| text(&c.both(&["CLIENT", "INFO"]).1);
        let resp = format!("resp={}", c.protocol());
        let line = info(c);
        assert!(
            line.ends_with(&format!(" {resp} lib-name= lib-ver=\n\r\n")),
            "{line}"
        );
        c.differs(
            &["CLIENT", "SETINFO", "LIB-NAME", "redis-py"],
            b"+OK\r\n",
            why,
        );
        c.differs(&["client", "setinfo", "lib-ver", "8.0.1"], b"+OK\r\n", why);
        for (args, error) in [
            (
                &["CLIENT", "SETINFO", "badger", "hamster"][..],
                "Unrecognized option 'badger'",
            ),
            (
                &["CLIENT", "SETINFO", "lib-name", "redis py"],
                "lib-name cannot contain spaces, newlines or special characters.",
            ),
            (
                &["CLIENT", "SETINFO", "LIB-VER", "8.0\n"],
                "LIB-VER cannot contain spaces, newlines or special characters.",
            ),
            (
                &["CLIENT", "SETINFO", "lib-name"],
                "wrong number of arguments for 'client|setinfo' command",
            ),
            (
                &["CLIENT", "SETINFO", "lib-name", "a", "b"],
                "wrong number of arguments for 'client|setinfo' command",
            ),
        ] {
            c.differs(args, format!("-ERR {error}\r\n").as_bytes(), why);
        }
        // The errors left both values as they were.
        let line = info(c);
        assert!(
            line.ends_with(&format!(" {resp} lib-name=redis-py lib-ver=8.0.1\n\r\n")),
            "{line}"
        );
        let (_, list) = c.both(&["CLIENT", "LIST"]);
        assert!(
            text(&list).contains(" lib-name=redis-py lib-ver=8.0.1\n"),
            "{}",
            text(&list)
        );
        // An empty value clears one.
        c.differs(&["CLIENT", "SETINFO", "lib-name", ""], b"+OK\r\n", why);
        let line = info(c);
        assert!(line.ends_with(" lib-name= lib-ver=8.0.1\n\r\n"), "{line}");
        // No Redis 7 has CLIENT MAINT_NOTIFICATIONS (node-redis 6 may send it): Redis 7.0's error.
        c.all_same(&[
            &[
                "CLIENT",
                "MAINT_NOTIFICATIONS",
                "on",
                "moving-endpoint-type",
                "internal-ip",
            ],
            &["CLIENT", "NOSUCH"],
            &["PING"],
        ]);
        // RESET forgets the client name, not the library's (Redis 7.2 keeps them too). Last: it goes back to RESP2.
        c.same(&["RESET"]);
        let line = info(c);
        assert!(
            line.ends_with(" resp=2 lib-name= lib-ver=8.0.1\n\r\n"),
            "{line}"
        );
    });
}

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).into_owned()
}

/// `CLIENT REPLY OFF`, `SKIP` and `ON` leave out exactly the replies Redis leaves out, whether the gateway answers
/// a command itself or a backend does, and whatever the command is (`SKIP` skipping `ON`, a syntax error).
#[test]
fn client_reply_leaves_out_the_replies_redis_leaves_out() {
    each_topology(|c| {
        c.pipeline_up_to_ping_same(&[
            &["CLIENT", "REPLY", "OFF"],
            &["SET", "{r}a", "1"],
            &["GET", "{r}a"],
            &["ECHO", "unseen"],
            &["CLIENT", "REPLY", "NOPE"],
            &["CLIENT", "REPLY", "ON"],
            &["GET", "{r}a"],
            &["CLIENT", "REPLY", "SKIP"],
            &["INCR", "{r}n"],
            &["INCR", "{r}n"],
            &["CLIENT", "REPLY", "SKIP"],
            &["CLIENT", "REPLY", "ON"],
            &["MGET", "{r}a", "{r}n"],
            &["CLIENT", "REPLY", "SKIP"],
            &["CLIENT", "REPLY", "SKIP"],
            &["ECHO", "skipped"],
            &["ECHO", "seen"],
        ]);
        c.same(&["GET", "{r}n"]);
    });
}

/// 300 rounds of a command, `QUIT` and the next connection, as a client that opens a connection per unit of work
/// does: `QUIT` answers `+OK` after the command's reply and the connection is closed at once, before the next
/// connection's command runs, on Redis and through the gateway alike.
#[test]
fn quit_answers_then_closes_before_the_next_connection_runs() {
    let redis = RedisServer::start();
    let backend = RedisServer::start();
    let gateway = Gateway::start(&json!({"tenants": [
        {"name": "t", "passwords": [], "route": {"type": "single", "target": backend.url()}}
    ]}));
    for port in [redis.port(), gateway.port()] {
        for round in 0..300 {
            let value = round.to_string();
            let mut client = RawClient::connect(port);
            client.send_command(&[b"SET", b"k", value.as_bytes()]);
            client.send_command(&[b"QUIT"]);
            client.send_command(&[b"PING"]); // after QUIT: never answered
            client.expect(b"+OK\r\n+OK\r\n");
            client.expect_closed();
            let mut next = RawClient::connect(port);
            let got = next.request(&[b"GET", b"k"]);
            assert_eq!(got, format!("${}\r\n{value}\r\n", value.len()).as_bytes());
        }
    }
}
