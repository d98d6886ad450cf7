//! Connection-level commands through the gateway compared with a plain redis-server (see
//! `switchyard_tests::compare`): SELECT with a database per connection, MOVE and SWAPDB where the route allows
//! them, HELLO and RESP3, CLIENT TRACKING, and Redis 7.2's CLIENT SETINFO, which today's clients send on connect.

use serde_json::json;
use switchyard_tests::compare::{Comparison, Topology, each_topology, show, without_client_id};
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
fn hello_switches_protocols_and_tracking_answers_as_redis_does() {
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
        // Tracking, as Redis answers it (invalidations: tests/tests/client_tracking.rs).
        c.all_same(&[
            &["CLIENT", "TRACKING", "on"],
            &["GET", "nope"],
            &["CLIENT", "TRACKINGINFO"],
            &["CLIENT", "TRACKING", "off"],
            &["CLIENT", "GETREDIR"],
        ]);
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

/// What a subscriber that turned its replies off (`CLIENT REPLY OFF`, or `SKIP` for its `PSUBSCRIBE`) receives as
/// Redis 7.0 sends it: every confirmation of `(P)SUBSCRIBE` and `(P)UNSUBSCRIBE` and every `message` and
/// `pmessage`, and none of the replies to its other commands, in RESP2 and RESP3.
#[test]
fn a_subscriber_with_replies_off_still_gets_confirmations_and_messages() {
    each_topology(|c| {
        let (reference, gateway) = c.connect_both();
        let (mut publish_reference, mut publish_gateway) = c.connect_both();
        let transcripts = [
            (reference, &mut publish_reference),
            (gateway, &mut publish_gateway),
        ]
        .map(|(mut subscriber, publisher)| {
            let mut seen = Vec::new();
            let mut read = |client: &mut RawClient, count: usize| {
                for _ in 0..count {
                    seen.push(text(&client.read_reply()));
                }
            };
            for args in [
                &["CLIENT", "REPLY", "OFF"][..],
                &["UNSUBSCRIBE", "never"],
                &["SUBSCRIBE", "chan", "other"],
                &["UNSUBSCRIBE", "other"],
                &["PING"],
                &["PSUBSCRIBE", "ch*"],
            ] {
                let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
                subscriber.send_command(&args);
            }
            read(&mut subscriber, 5);
            publisher.request(&[b"PUBLISH", b"chan", b"hello"]);
            read(&mut subscriber, 2);
            // Unsubscribed, the client turns replies back on, then skips its PSUBSCRIBE's.
            subscriber.send_command(&[b"UNSUBSCRIBE"]);
            subscriber.send_command(&[b"PUNSUBSCRIBE"]);
            subscriber.send_command(&[b"ECHO", b"unseen"]);
            subscriber.send_command(&[b"CLIENT", b"REPLY", b"ON"]);
            subscriber.send_command(&[b"CLIENT", b"REPLY", b"SKIP"]);
            subscriber.send_command(&[b"PSUBSCRIBE", b"ch*"]);
            read(&mut subscriber, 4);
            publisher.request(&[b"PUBLISH", b"chan", b"again"]);
            read(&mut subscriber, 1);
            subscriber.send_command(&[b"PUNSUBSCRIBE"]);
            subscriber.send_command(&[b"PING"]);
            read(&mut subscriber, 2);
            seen
        });
        let [reference, gateway] = transcripts;
        assert_eq!(
            gateway,
            reference,
            "[{}] the gateway (left) against Redis (right)",
            c.setup()
        );
    });
}

/// On a tenant without a password (Redis without `requirepass`), `AUTH default <anything>` and `HELLO <proto> AUTH
/// default <anything>` log in as Redis' passwordless `default` user does; a password alone gets Redis' error.
#[test]
fn the_default_user_of_a_tenant_without_password_takes_any_password() {
    each_topology(|c| {
        c.all_same(&[
            &["AUTH", "default", "anything"],
            &["AUTH", "anything"],
            &["SET", "k", "v"],
            &["AUTH", "default", ""],
            &["GET", "k"],
        ]);
        let protocol = c.protocol().to_string();
        let (reference, gateway) = c.both(&["HELLO", &protocol, "AUTH", "default", "x"]);
        assert_eq!(
            show(&without_client_id(&gateway)),
            show(&without_client_id(&reference)),
            "[{}] the gateway (left) against Redis (right)",
            c.setup()
        );
        c.same(&["GET", "k"]);
    });
}

/// Before `AUTH`, on a Redis with a password and through a tenant with one, each command gets Redis 7.0's
/// `NOAUTH` text (the command table's version), `HELLO`'s included.
#[test]
fn unauthenticated_commands_get_redis_7_0s_noauth() {
    let reference = RedisServer::builder()
        .arg("--requirepass")
        .arg("secret")
        .start();
    let backend = RedisServer::start();
    let gateway = Gateway::start(&json!({"tenants": [
        {"name": "t", "passwords": ["secret"], "route": {"type": "single", "target": backend.url()}}
    ]}));
    let mut transcripts = Vec::new();
    for port in [reference.port(), gateway.port()] {
        let mut client = RawClient::connect(port);
        let mut seen = Vec::new();
        for args in [
            &["HELLO", "3"][..],
            &["HELLO"],
            &["GET", "k"],
            &["PING"],
            &["AUTH", "default", "secret"],
            &["PING"],
        ] {
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            seen.push(text(&client.request(&args)));
        }
        transcripts.push(seen);
    }
    assert_eq!(
        transcripts[1], transcripts[0],
        "the gateway (right) against Redis (left)"
    );
}
