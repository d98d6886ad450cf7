//! Pub/sub end to end: the subscribed state compared byte for byte with a plain redis-server over a single shard,
//! a ring, a Redis Cluster and a single shard over TLS; 100,000 messages in order while the tenant's other connections keep working;
//! patterns; keyspace notifications; shard channels on a cluster; double-write; a subscriber's backend
//! connection freed when it leaves.

use std::time::{Duration, Instant};

use serde_json::json;
use switchyard_tests::compare::{Comparison, SETUPS, Topology, show};
use switchyard_tests::{
    Gateway, RawClient, RedisServer, open_single_tenant, wait_for, wait_for_slot_map,
};

/// Sends `args` to both clients and asserts the same `frames` frames back.
fn same_frames(reference: &mut RawClient, gateway: &mut RawClient, args: &[&str], frames: usize) {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    reference.send_command(&args);
    gateway.send_command(&args);
    for _ in 0..frames {
        let (want, got) = (reference.read_reply(), gateway.read_reply());
        assert_eq!(
            show(&got),
            show(&want),
            "{args:?}: gateway (left) and Redis (right) differ"
        );
    }
}

/// Sends a pipeline of `commands` to both clients and asserts the same `frames` frames back.
fn same_pipeline(
    reference: &mut RawClient,
    gateway: &mut RawClient,
    commands: &[&[&str]],
    frames: usize,
) {
    for args in commands {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        reference.send_command(&args);
        gateway.send_command(&args);
    }
    for _ in 0..frames {
        assert_eq!(
            show(&gateway.read_reply()),
            show(&reference.read_reply()),
            "pipeline {commands:?}: gateway (left) and Redis (right) differ"
        );
    }
}

/// Runs `sequence` for every setup with a client of a plain redis-server and one of the gateway, both
/// speaking `protocol`.
fn each_topology(protocol: u8, mut sequence: impl FnMut(&mut RawClient, &mut RawClient)) {
    for setup in SETUPS {
        let comparison = Comparison::start_over(setup);
        wait_for_slot_map(comparison.gateway().port());
        let mut reference = comparison.connect_reference();
        let mut gateway = comparison.connect_gateway();
        for client in [&mut reference, &mut gateway] {
            let hello = client.request(&[b"HELLO", protocol.to_string().as_bytes()]);
            assert!(
                hello.starts_with(b"%7\r\n") || hello.starts_with(b"*14\r\n"),
                "[{setup}]"
            );
        }
        sequence(&mut reference, &mut gateway);
    }
}

#[test]
fn the_subscribed_state_answers_as_redis_does() {
    each_topology(2, |r, g| {
        // Not subscribed: the unsubscribe commands still confirm, with count 0.
        same_frames(r, g, &["UNSUBSCRIBE"], 1);
        same_frames(r, g, &["UNSUBSCRIBE", "a", "b"], 2);
        same_frames(r, g, &["PUNSUBSCRIBE"], 1);
        same_frames(r, g, &["SUNSUBSCRIBE", "x"], 1);
        same_frames(r, g, &["SUBSCRIBE", "a", "b", "a"], 3);
        // Only what RESP2 allows while subscribed.
        same_frames(r, g, &["GET", "x"], 1);
        same_frames(r, g, &["CONFIG", "GET", "maxmemory"], 1);
        same_frames(r, g, &["MULTI"], 1);
        same_frames(r, g, &["PING"], 1);
        same_frames(r, g, &["PING", "hi"], 1);
        same_frames(r, g, &["NOSUCHCOMMAND"], 1);
        same_frames(r, g, &["PSUBSCRIBE", "p*", "q*"], 2);
        // (Without arguments Redis lists channels in its dict's order, which differs between servers: one left.)
        same_frames(r, g, &["UNSUBSCRIBE", "b"], 1);
        same_frames(r, g, &["UNSUBSCRIBE"], 1);
        same_frames(r, g, &["UNSUBSCRIBE"], 1);
        same_frames(r, g, &["PUNSUBSCRIBE", "x", "p*"], 2);
        same_frames(r, g, &["SUNSUBSCRIBE"], 1);
        same_frames(r, g, &["PUNSUBSCRIBE"], 1);
        // Out of the subscribed state: commands work again.
        same_frames(r, g, &["SET", "k", "v"], 1);
        same_frames(r, g, &["PSUBSCRIBE", "z*"], 1);
        same_frames(r, g, &["RESET"], 1);
        same_frames(r, g, &["GET", "k"], 1);
        // A whole subscription in one pipeline.
        let pipeline: [&[&str]; 4] = [
            &["SUBSCRIBE", "c"],
            &["PING"],
            &["UNSUBSCRIBE", "c"],
            &["GET", "k"],
        ];
        same_pipeline(r, g, &pipeline, 4);
    });
}

#[test]
fn pub_sub_over_resp3_answers_as_redis_does() {
    each_topology(3, |r, g| {
        // Not subscribed: pushes with count 0 (and a RESP3 null for no channel).
        same_frames(r, g, &["UNSUBSCRIBE"], 1);
        same_frames(r, g, &["UNSUBSCRIBE", "a", "b"], 2);
        same_frames(r, g, &["PUNSUBSCRIBE"], 1);
        same_frames(r, g, &["SUBSCRIBE", "a", "b", "a"], 3);
        // Every command works while subscribed.
        same_frames(r, g, &["SET", "k", "v"], 1);
        same_frames(r, g, &["GET", "k"], 1);
        same_frames(r, g, &["GET", "missing"], 1);
        same_frames(r, g, &["HSET", "h", "f", "1"], 1);
        same_frames(r, g, &["HGETALL", "h"], 1);
        same_frames(r, g, &["PING"], 1);
        same_frames(r, g, &["PING", "hi"], 1);
        same_frames(r, g, &["MULTI"], 1);
        same_frames(r, g, &["INCR", "n"], 1);
        same_frames(r, g, &["EXEC"], 1);
        // A message the client publishes to itself comes before the reply, as from Redis.
        same_frames(r, g, &["PUBLISH", "a", "hello"], 2);
        same_frames(r, g, &["PUBLISH", "nobody", "x"], 1);
        same_frames(r, g, &["PSUBSCRIBE", "p*", "q*"], 2);
        same_frames(r, g, &["PUBLISH", "pq", "z"], 2);
        same_frames(r, g, &["PUBLISH", "a", "twice"], 2);
        // (Without arguments Redis lists channels in its dict's order, which differs between servers: one left.)
        same_frames(r, g, &["UNSUBSCRIBE", "b"], 1);
        same_frames(r, g, &["UNSUBSCRIBE"], 1);
        same_frames(r, g, &["PUNSUBSCRIBE", "x", "p*"], 2);
        same_frames(r, g, &["PUNSUBSCRIBE"], 1);
        same_frames(r, g, &["SSUBSCRIBE", "s"], 1);
        same_frames(r, g, &["SPUBLISH", "s", "m"], 2);
        same_frames(r, g, &["SUNSUBSCRIBE"], 1);
        // A whole subscription in one pipeline, then RESET back to RESP2.
        let pipeline: [&[&str]; 6] = [
            &["SUBSCRIBE", "c"],
            &["PUBLISH", "c", "one"],
            &["GET", "k"],
            &["UNSUBSCRIBE", "c"],
            &["PSUBSCRIBE", "z*"],
            &["RESET"],
        ];
        same_pipeline(r, g, &pipeline, 7);
        same_frames(r, g, &["GET", "missing"], 1);
        // The one difference: a subscribed connection keeps its protocol.
        assert!(g.request(&[b"HELLO", b"3"]).starts_with(b"%7\r\n"));
        g.request(&[b"SUBSCRIBE", b"a"]);
        assert_eq!(
            g.request(&[b"HELLO", b"2"]),
            b"-ERR the gateway does not switch the protocol of a subscribed connection; unsubscribe first\r\n"
        );
        assert_eq!(g.request(&[b"PING"]), b"+PONG\r\n");
    });
}

/// One Redis and a gateway in front of it, for one tenant that may run admin commands (CONFIG SET).
fn admin_tenant() -> (RedisServer, Gateway) {
    let backend = RedisServer::start();
    let routes = json!({"tenants": [{"name": "t", "passwords": [], "allow_admin": true,
        "route": {"type": "single", "target": backend.url()}}]});
    let gateway = Gateway::start(&routes);
    (backend, gateway)
}

#[test]
fn resp3_subscribers_get_messages_and_keyspace_notifications_between_replies() {
    let (_backend, gateway) = admin_tenant();
    let mut client = RawClient::connect(gateway.port());
    let mut other = RawClient::connect(gateway.port());
    client.request(&[b"HELLO", b"3"]);
    assert_eq!(
        other.request(&[b"CONFIG", b"SET", b"notify-keyspace-events", b"KA"]),
        b"+OK\r\n"
    );
    assert_eq!(
        client.request(&[b"PSUBSCRIBE", b"__keyspace@0__:*"]),
        b">3\r\n$10\r\npsubscribe\r\n$16\r\n__keyspace@0__:*\r\n:1\r\n"
    );
    let notification =
        b">4\r\n$8\r\npmessage\r\n$16\r\n__keyspace@0__:*\r\n$18\r\n__keyspace@0__:key\r\n$3\r\nset\r\n";
    assert_eq!(other.request(&[b"SET", b"key", b"1"]), b"+OK\r\n");
    assert_eq!(client.read_reply(), notification);
    // The client's own write: its reply and its notification come on two backend connections, in either order.
    client.send_command(&[b"SET", b"key", b"2"]);
    let mut frames = [client.read_reply(), client.read_reply()];
    frames.sort();
    assert_eq!(frames, [b"+OK\r\n".to_vec(), notification.to_vec()]);
    // Messages published elsewhere arrive while the client's commands are answered.
    for i in 0..100 {
        let message = format!("m{i}");
        assert_eq!(
            other.request(&[b"PUBLISH", b"__keyspace@0__:x", message.as_bytes()]),
            b":1\r\n"
        );
    }
    let mut messages = 0;
    let mut replies = 0;
    client.send_command(&[b"GET", b"key"]);
    while replies == 0 || messages < 100 {
        let frame = client.read_reply();
        if frame.starts_with(b">4\r\n$8\r\npmessage") {
            let expected = format!("m{messages}");
            assert!(
                frame.ends_with(format!("{expected}\r\n").as_bytes()),
                "{frame:?}"
            );
            messages += 1;
        } else {
            assert_eq!(frame, b"$1\r\n2\r\n");
            replies += 1;
        }
    }
    assert_eq!(replies, 1);
}

/// A subscriber on the gateway (sync client, buffered reads).
fn subscriber(gateway: &Gateway) -> redis::Connection {
    redis::Client::open(gateway.url(None))
        .unwrap()
        .get_connection()
        .unwrap()
}

/// `PUBSUB NUMSUB channel` on a backend. A non-admin tenant `t`'s channel `c` is `t:c` there (see
/// docs/operations.md#tenant-isolation).
fn numsub(backend: &RedisServer, channel: &str) -> i64 {
    let reply: (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(&mut backend.client())
        .unwrap();
    reply.1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_receives_100000_messages_in_order_while_other_clients_work() {
    const MESSAGES: usize = 100_000;
    let backend = RedisServer::start();
    let gateway = Gateway::start(&open_single_tenant(json!(backend.url())));
    let mut con = subscriber(&gateway);
    let reader = std::thread::spawn(move || {
        let mut pubsub = con.as_pubsub();
        pubsub.subscribe("stream").unwrap();
        pubsub
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        for i in 0..MESSAGES {
            let message = pubsub.get_message().unwrap();
            assert_eq!(message.get_channel_name(), "stream");
            let payload: String = message.get_payload().unwrap();
            assert_eq!(payload, i.to_string(), "message {i} out of order");
        }
    });
    wait_for(
        "the subscription on the backend",
        Duration::from_secs(20),
        || numsub(&backend, "t:stream") == 1,
    );
    let mut publisher = gateway.client(None).await;
    let mut other = gateway.client(None).await;
    let mut slowest = Duration::ZERO;
    for batch in 0..MESSAGES / 1000 {
        let mut pipe = redis::pipe();
        for i in batch * 1000..(batch + 1) * 1000 {
            pipe.cmd("PUBLISH").arg("stream").arg(i).ignore();
        }
        let (): () = pipe.query_async(&mut publisher).await.unwrap();
        // Another connection of the tenant is served meanwhile.
        let started = Instant::now();
        let n: i64 = redis::cmd("INCR")
            .arg("counter")
            .query_async(&mut other)
            .await
            .unwrap();
        slowest = slowest.max(started.elapsed());
        assert_eq!(n, batch as i64 + 1);
    }
    tokio::task::spawn_blocking(move || reader.join())
        .await
        .unwrap()
        .expect("every message arrives, in order");
    assert!(slowest < Duration::from_secs(5), "INCR took {slowest:?}");
}

/// A subscriber that stops reading while 120,000 messages (about 30 MB, within the default pub/sub output buffer
/// limit) are published: the gateway holds them, and when the client reads again every message arrives, in order.
#[test]
fn a_subscriber_that_stops_reading_loses_nothing_within_its_limit() {
    const MESSAGES: usize = 120_000;
    let (_backend, gateway) = admin_tenant();
    let mut subscriber = RawClient::connect(gateway.port());
    subscriber.request(&[b"SUBSCRIBE", b"flood"]);
    let mut publisher = RawClient::connect(gateway.port());
    let payload = "x".repeat(200);
    for batch in 0..MESSAGES / 1000 {
        let mut pipeline = Vec::new();
        for i in batch * 1000..(batch + 1) * 1000 {
            let message = format!("{i:06}{payload}");
            pipeline.extend_from_slice(
                format!(
                    "*3\r\n$7\r\nPUBLISH\r\n$5\r\nflood\r\n${}\r\n{message}\r\n",
                    message.len()
                )
                .as_bytes(),
            );
        }
        publisher.send(&pipeline);
        for _ in 0..1000 {
            assert_eq!(publisher.read_reply(), b":1\r\n");
        }
    }
    for i in 0..MESSAGES {
        let frame = subscriber.read_reply();
        let expected = format!("{i:06}{payload}\r\n");
        assert!(
            frame.ends_with(expected.as_bytes()),
            "message {i} out of order or lost"
        );
    }
}

#[test]
fn patterns_keyspace_notifications_and_leaving() {
    let (backend, gateway) = admin_tenant();
    let mut client = RawClient::connect(gateway.port());
    let mut other = RawClient::connect(gateway.port());
    assert_eq!(
        client.request(&[b"PSUBSCRIBE", b"news.*"]),
        b"*3\r\n$10\r\npsubscribe\r\n$6\r\nnews.*\r\n:1\r\n"
    );
    assert_eq!(other.request(&[b"PUBLISH", b"sport", b"x"]), b":0\r\n");
    assert_eq!(
        other.request(&[b"PUBLISH", b"news.today", b"hello"]),
        b":1\r\n"
    );
    assert_eq!(
        client.read_reply(),
        b"*4\r\n$8\r\npmessage\r\n$6\r\nnews.*\r\n$10\r\nnews.today\r\n$5\r\nhello\r\n"
    );
    assert_eq!(other.request(&[b"PUBSUB", b"NUMPAT"]), b":1\r\n");

    // Keyspace notifications, for a tenant that may CONFIG SET.
    assert_eq!(
        other.request(&[b"CONFIG", b"SET", b"notify-keyspace-events", b"KA"]),
        b"+OK\r\n"
    );
    assert_eq!(
        client.request(&[b"PSUBSCRIBE", b"__keyspace@0__:*"]),
        b"*3\r\n$10\r\npsubscribe\r\n$16\r\n__keyspace@0__:*\r\n:2\r\n"
    );
    assert_eq!(other.request(&[b"SET", b"watched", b"1"]), b"+OK\r\n");
    assert_eq!(
        client.read_reply(),
        b"*4\r\n$8\r\npmessage\r\n$16\r\n__keyspace@0__:*\r\n$22\r\n__keyspace@0__:watched\r\n$3\r\nset\r\n"
    );

    // Leaving the subscribed state gives the backend connection back; so does a subscriber that hangs up.
    let subscribers = || {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut backend.client())
            .unwrap();
        list.lines()
            .filter(|l| l.contains(" psub=") && !l.contains(" psub=0 "))
            .count()
    };
    assert_eq!(subscribers(), 1);
    client.send(b"PUNSUBSCRIBE\r\n");
    let (first, second) = (client.read_reply(), client.read_reply());
    assert!(first.ends_with(b":1\r\n") && second.ends_with(b":0\r\n"));
    assert_eq!(client.request(&[b"GET", b"watched"]), b"$1\r\n1\r\n");
    wait_for(
        "the subscription connection closed",
        Duration::from_secs(20),
        || subscribers() == 0,
    );
    client.request(&[b"SUBSCRIBE", b"c"]);
    wait_for("a new subscription", Duration::from_secs(20), || {
        numsub(&backend, "c") == 1
    });
    drop(client);
    wait_for(
        "the hung-up subscriber's connection closed",
        Duration::from_secs(20),
        || numsub(&backend, "c") == 0,
    );
}

#[test]
fn channels_meet_on_sharded_and_double_written_routes() {
    // A ring of three: every channel lives on the first shard, so publisher and subscriber meet.
    let comparison = Comparison::start(Topology::Sharded);
    let gateway_port = comparison.gateway().port();
    let mut subscriber = RawClient::connect(gateway_port);
    let mut publisher = RawClient::connect(gateway_port);
    subscriber.send(b"SUBSCRIBE alpha beta gamma\r\n");
    for _ in 0..3 {
        subscriber.read_reply();
    }
    for channel in ["alpha", "beta", "gamma"] {
        assert_eq!(
            publisher.request(&[b"PUBLISH", channel.as_bytes(), b"m"]),
            b":1\r\n"
        );
        let message = subscriber.read_reply();
        assert!(
            message
                .windows(channel.len())
                .any(|w| w == channel.as_bytes())
        );
    }
    assert_eq!(
        publisher.request(&[b"PUBSUB", b"NUMSUB", b"alpha"]),
        b"*2\r\n$5\r\nalpha\r\n:1\r\n"
    );

    // Double-write: PUBLISH reaches every write resource, subscriptions are on the primary.
    let (primary, secondary) = (RedisServer::start(), RedisServer::start());
    let route = json!({"type": "single", "target": {
        "write": {"resources": [primary.url(), secondary.url()], "ack": "all"}}});
    let gateway = Gateway::start(&switchyard_tests::open_tenant(route));
    let mut subscriber = RawClient::connect(gateway.port());
    subscriber.request(&[b"SUBSCRIBE", b"events"]);
    let mut on_secondary = redis::Client::open(secondary.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut direct = on_secondary.as_pubsub();
    direct.subscribe("t:events").unwrap();
    assert_eq!(numsub(&primary, "t:events"), 1);
    let mut publisher = RawClient::connect(gateway.port());
    assert_eq!(
        publisher.request(&[b"PUBLISH", b"events", b"e1"]),
        b":1\r\n"
    );
    assert_eq!(
        subscriber.read_reply(),
        b"*3\r\n$7\r\nmessage\r\n$6\r\nevents\r\n$2\r\ne1\r\n"
    );
    let message = direct.get_message().unwrap();
    assert_eq!(message.get_payload::<String>().unwrap(), "e1");
}

#[test]
fn shard_channels_on_a_cluster() {
    let comparison = Comparison::start(Topology::Cluster);
    let port = comparison.gateway().port();
    wait_for_slot_map(port);
    let mut subscriber = RawClient::connect(port);
    let mut publisher = RawClient::connect(port);
    // "a" and "b" hash to different slots.
    assert_eq!(
        subscriber.request(&[b"SSUBSCRIBE", b"a", b"b"]),
        b"-CROSSSLOT Keys in request don't hash to the same slot\r\n"
    );
    subscriber.send(b"SSUBSCRIBE {c}1 {c}2\r\n");
    assert_eq!(
        subscriber.read_reply(),
        b"*3\r\n$10\r\nssubscribe\r\n$4\r\n{c}1\r\n:1\r\n"
    );
    assert_eq!(
        subscriber.read_reply(),
        b"*3\r\n$10\r\nssubscribe\r\n$4\r\n{c}2\r\n:2\r\n"
    );
    // Slot 7365: not on slot 0's master, so the answers must come from every master.
    assert_eq!(
        publisher.request(&[b"PUBSUB", b"SHARDNUMSUB", b"{c}2", b"nope"]),
        b"*4\r\n$4\r\n{c}2\r\n:1\r\n$4\r\nnope\r\n:0\r\n"
    );
    assert_eq!(
        publisher.request(&[b"PUBSUB", b"SHARDCHANNELS", b"{c}1"]),
        b"*1\r\n$4\r\n{c}1\r\n"
    );
    assert_eq!(publisher.request(&[b"SPUBLISH", b"{c}2", b"hi"]), b":1\r\n");
    assert_eq!(
        subscriber.read_reply(),
        b"*3\r\n$8\r\nsmessage\r\n$4\r\n{c}2\r\n$2\r\nhi\r\n"
    );
    // Classic channels are broadcast over the cluster bus: they work from any node.
    let mut classic = RawClient::connect(port);
    classic.request(&[b"SUBSCRIBE", b"news"]);
    assert_eq!(publisher.request(&[b"PUBLISH", b"news", b"n"]), b":1\r\n");
    assert_eq!(
        classic.read_reply(),
        b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$1\r\nn\r\n"
    );
}

#[test]
fn idle_subscribers_and_watchers_outlive_the_command_timeout() {
    let backend = RedisServer::start();
    let gateway = Gateway::builder()
        .arg("--command-timeout-ms")
        .arg("200")
        .start(&open_single_tenant(json!(backend.url())));
    let mut subscriber = RawClient::connect(gateway.port());
    let mut watcher = RawClient::connect(gateway.port());
    let mut other = RawClient::connect(gateway.port());
    subscriber.request(&[b"SUBSCRIBE", b"quiet"]);
    assert_eq!(watcher.request(&[b"WATCH", b"w"]), b"+OK\r\n");
    // Idle for more than twice the command timeout: nothing is waiting for a reply, so nothing times out. A
    // negative check, so a bounded wait, long enough for the timeout to have struck if it applied.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        other.request(&[b"PUBLISH", b"quiet", b"still here"]),
        b":1\r\n"
    );
    assert_eq!(
        subscriber.read_reply(),
        b"*3\r\n$7\r\nmessage\r\n$5\r\nquiet\r\n$10\r\nstill here\r\n"
    );
    watcher.send(b"MULTI\r\nSET w 1\r\nEXEC\r\n");
    watcher.expect(b"+OK\r\n+QUEUED\r\n*1\r\n+OK\r\n");
}

#[test]
fn client_list_shows_subscriptions_transactions_and_blocked_clients() {
    let backend = RedisServer::start();
    let gateway = Gateway::start(&open_single_tenant(json!(backend.url())));
    let mut observer = RawClient::connect(gateway.port());
    let mut line_of = |id: &[u8]| -> String {
        let list = observer.request(&[b"CLIENT", b"LIST"]);
        let id = format!("id={} ", String::from_utf8_lossy(id));
        String::from_utf8_lossy(&list)
            .lines()
            .find(|l| l.starts_with(&id))
            .unwrap_or_default()
            .to_string()
    };
    let id_of = |client: &mut RawClient| -> Vec<u8> {
        let reply = client.request(&[b"CLIENT", b"ID"]);
        reply[1..reply.len() - 2].to_vec()
    };
    let mut subscriber = RawClient::connect(gateway.port());
    let subscriber_id = id_of(&mut subscriber);
    subscriber.send(b"SUBSCRIBE a b\r\nPSUBSCRIBE p*\r\n");
    for _ in 0..3 {
        subscriber.read_reply();
    }
    let line = line_of(&subscriber_id);
    assert!(
        line.contains(" flags=P ") && line.contains(" sub=2 psub=1 ssub=0 multi=-1 "),
        "{line}"
    );

    let mut transaction = RawClient::connect(gateway.port());
    let transaction_id = id_of(&mut transaction);
    transaction.send(b"MULTI\r\nSET k v\r\n");
    transaction.expect(b"+OK\r\n+QUEUED\r\n");
    let line = line_of(&transaction_id);
    assert!(
        line.contains(" flags=x ") && line.contains(" multi=1 "),
        "{line}"
    );
    transaction.send(b"EXEC\r\n");
    transaction.expect(b"*1\r\n+OK\r\n");
    let line = line_of(&transaction_id);
    assert!(
        line.contains(" flags=N ") && line.contains(" multi=-1 "),
        "{line}"
    );

    let mut blocked = RawClient::connect(gateway.port());
    let blocked_id = id_of(&mut blocked);
    blocked.send_command(&[b"BLPOP", b"nothing", b"0"]);
    wait_for("the client shown blocked", Duration::from_secs(20), || {
        line_of(&blocked_id).contains(" flags=b ")
    });
    let info = observer.request(&[b"INFO", b"clients"]);
    assert!(
        String::from_utf8_lossy(&info).contains("blocked_clients:1\r\n"),
        "{}",
        String::from_utf8_lossy(&info)
    );
    drop(blocked);
    wait_for("no blocked client", Duration::from_secs(20), || {
        let info = observer.request(&[b"INFO", b"clients"]);
        String::from_utf8_lossy(&info).contains("blocked_clients:0\r\n")
    });
}
