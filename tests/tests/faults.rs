//! Clients that misbehave, against a real gateway and Redis: one that never reads its replies, a subscriber that
//! stops reading, one that goes silent, one that sends a huge request, and a reply slot lost to a bug. Each is
//! bounded (by bytes or by time) without costing other clients anything, and every request gets one reply.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_tests::{Gateway, RawClient, RedisServer, wait_for};

const VALUE_LEN: usize = 100 * 1024;

/// Two tenants on one Redis: `noisy` (password `noisy-pw`, with `limits`) and `quiet` (password `quiet-pw`).
fn two_tenants(backend: &RedisServer, limits: Value) -> Value {
    let route = json!({"type": "single", "target": backend.url()});
    json!({"tenants": [
        {"name": "noisy", "passwords": ["noisy-pw"], "route": route, "limits": limits},
        {"name": "quiet", "passwords": ["quiet-pw"], "route": route},
    ]})
}

/// A backend holding `big`, a 100 KB value, and `small`.
fn backend_with_values() -> RedisServer {
    let backend = RedisServer::start();
    let mut direct = backend.client();
    let _: () = redis::cmd("SET")
        .arg("big")
        .arg(vec![b'v'; VALUE_LEN])
        .query(&mut direct)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("small")
        .arg("s")
        .query(&mut direct)
        .unwrap();
    backend
}

fn authenticated(gateway: &Gateway, password: &str) -> RawClient {
    let mut client = RawClient::connect(gateway.port());
    client.roundtrip(format!("AUTH {password}\r\n").as_bytes(), b"+OK\r\n");
    client
}

/// A client of tenant `noisy` that sends `count` `GET big` from a thread of its own and never reads a reply;
/// returns its socket, to keep the connection open.
fn flood_without_reading(gateway: &Gateway, count: usize) -> TcpStream {
    let stream = raw_client(gateway, "noisy-pw");
    let mut writer = stream.try_clone().unwrap();
    std::thread::spawn(move || {
        let requests = b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n".repeat(count);
        // Blocks once the gateway stops reading; fails once it closes the connection: both are the point.
        let _ = writer.write_all(&requests);
    });
    stream
}

/// A plain socket to the gateway, authenticated with `password`.
fn raw_client(gateway: &Gateway, password: &str) -> TcpStream {
    let mut stream = TcpStream::connect(("127.0.0.1", gateway.port())).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(format!("AUTH {password}\r\n").as_bytes())
        .unwrap();
    let mut ok = [0u8; 5];
    stream.read_exact(&mut ok).unwrap();
    assert_eq!(&ok, b"+OK\r\n");
    stream
}

/// Whether the gateway closed `stream`: everything it sent is read, then end of stream (or a reset).
fn closed_by_gateway(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false, // timed out: still open
        }
    }
}

/// A client that pipelines 10,000 `GET` of a 100 KB value (1 GB of replies) and reads none is slowed down, not
/// buffered: the gateway stops reading from it, its memory stays within 64 MB of where it was, and another
/// tenant's client on the same backend keeps getting its replies at once (without the bound, the flood holds the
/// shared backend connection past the command timeout and the other client gets timeout errors). Latency figures
/// belong to benchmarks: the test only bounds each reply's wait far below the command timeout.
#[test]
fn a_client_that_never_reads_is_throttled_and_costs_others_nothing() {
    let backend = backend_with_values();
    let gateway = Gateway::start(&two_tenants(&backend, json!({})));
    let mut quiet = authenticated(&gateway, "quiet-pw");
    for _ in 0..100 {
        quiet.roundtrip(b"GET small\r\n", b"$1\r\ns\r\n");
    }
    let before = gateway.rss_bytes();
    let _flood = flood_without_reading(&gateway, 10_000);
    let mut slowest = Duration::ZERO;
    let mut peak = before;
    let until = Instant::now() + Duration::from_secs(3);
    for round in 0.. {
        if Instant::now() >= until {
            break;
        }
        let started = Instant::now();
        quiet.roundtrip(b"GET small\r\n", b"$1\r\ns\r\n");
        slowest = slowest.max(started.elapsed());
        if round % 50 == 0 {
            peak = peak.max(gateway.rss_bytes());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    peak = peak.max(gateway.rss_bytes());
    let grown = peak.saturating_sub(before) >> 20;
    assert!(grown < 64, "the gateway grew by {grown} MB");
    assert!(
        slowest < Duration::from_millis(500),
        "the other tenant waited {slowest:?} for a reply"
    );
}

/// Over its tenant's hard output limit, a client that does not read is disconnected, counted and logged; the
/// gateway's other clients do not notice.
#[test]
fn over_its_tenants_hard_limit_a_client_that_does_not_read_is_disconnected() {
    let backend = backend_with_values();
    let limits =
        json!({"output_buffer_limit": {"hard_bytes": 4 << 20, "soft_bytes": 0, "soft_seconds": 0}});
    let gateway = Gateway::start(&two_tenants(&backend, limits));
    let mut flood = flood_without_reading(&gateway, 1000);
    // Read nothing before the gateway has counted the close: reading is what the client must not do.
    wait_for(
        "the flooding client closed",
        Duration::from_secs(10),
        || {
            gateway.metric(
                "switchyard_client_closed_total{tenant=\"noisy\",reason=\"output_buffer_hard\"}",
            ) == 1
        },
    );
    assert!(closed_by_gateway(&mut flood));
    assert!(
        gateway
            .log()
            .contains("closing a client connection that broke a bound"),
        "{}",
        gateway.log()
    );
    let mut quiet = authenticated(&gateway, "quiet-pw");
    quiet.roundtrip(b"GET small\r\n", b"$1\r\ns\r\n");
}

/// A subscriber that stops reading while its channel is busy is dropped at its pub/sub limit; another subscriber
/// of the same channel receives every message.
#[test]
fn a_subscriber_that_stops_reading_is_dropped_at_its_limit_and_others_keep_receiving() {
    let backend = backend_with_values();
    let limits = json!({"pubsub_output_buffer_limit": {"hard_bytes": 1 << 20, "soft_bytes": 0, "soft_seconds": 0}});
    let gateway = Gateway::start(&two_tenants(&backend, limits));
    let mut stalled = raw_client(&gateway, "noisy-pw");
    stalled.write_all(b"SUBSCRIBE busy\r\n").unwrap();
    let mut reader = authenticated(&gateway, "noisy-pw");
    reader.roundtrip(
        b"SUBSCRIBE busy\r\n",
        b"*3\r\n$9\r\nsubscribe\r\n$4\r\nbusy\r\n:1\r\n",
    );
    let message = vec![b'm'; VALUE_LEN];
    let messages = 200; // 20 MB
    let mut expected = Vec::new();
    expected.extend_from_slice(b"*3\r\n$7\r\nmessage\r\n$4\r\nbusy\r\n");
    expected.extend_from_slice(format!("${VALUE_LEN}\r\n").as_bytes());
    expected.extend_from_slice(&message);
    expected.extend_from_slice(b"\r\n");
    // The reader reads each message before the next is published: only the stalled subscriber falls behind.
    let (received, each) = std::sync::mpsc::channel();
    let reading = std::thread::spawn(move || {
        for _ in 0..messages {
            reader.expect(&expected);
            let _ = received.send(());
        }
    });
    let mut publisher = authenticated(&gateway, "noisy-pw");
    for _ in 0..messages {
        publisher.send_command(&[b"PUBLISH", b"busy", &message]);
        let receivers = publisher.read_reply();
        assert!(receivers == b":2\r\n" || receivers == b":1\r\n");
        each.recv_timeout(Duration::from_secs(10))
            .expect("the reading subscriber got the message");
    }
    reading
        .join()
        .expect("the reading subscriber got every message");
    assert_eq!(
        gateway.metric(
            "switchyard_client_closed_total{tenant=\"noisy\",reason=\"output_buffer_hard\"}"
        ),
        1
    );
    assert!(closed_by_gateway(&mut stalled));
}

/// A client that reads nothing for the write timeout is closed, even under every byte limit; one that sends
/// nothing for the idle timeout is closed, unless it is subscribed.
#[test]
fn silent_clients_and_clients_that_do_not_read_are_closed_after_their_timeouts() {
    let backend = backend_with_values();
    let gateway = Gateway::builder()
        .arg("--client-write-timeout-ms")
        .arg("1000")
        .arg("--client-idle-timeout-s")
        .arg("1")
        .start(&two_tenants(&backend, json!({})));
    let mut idle = authenticated(&gateway, "quiet-pw");
    let mut subscribed = authenticated(&gateway, "quiet-pw");
    subscribed.roundtrip(
        b"SUBSCRIBE news\r\n",
        b"*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n",
    );
    let mut flood = flood_without_reading(&gateway, 2000);
    let started = Instant::now();
    idle.expect_closed();
    assert!(started.elapsed() < Duration::from_secs(3));
    let closed = |tenant: &str, reason: &str| {
        gateway.metric(&format!(
            "switchyard_client_closed_total{{tenant=\"{tenant}\",reason=\"{reason}\"}}"
        ))
    };
    assert_eq!(closed("quiet", "idle"), 1);
    // Read nothing before the gateway has counted the close: reading is what the client must not do.
    wait_for(
        "the client that does not read closed",
        Duration::from_secs(10),
        || closed("noisy", "write_timeout") == 1,
    );
    assert!(closed_by_gateway(&mut flood));
    subscribed.roundtrip(b"PING\r\n", b"*2\r\n$4\r\npong\r\n$0\r\n\r\n");
}

/// A request larger than the query buffer limit closes its connection (as Redis' client-query-buffer-limit).
#[test]
fn a_request_over_the_query_buffer_limit_closes_the_connection() {
    let backend = backend_with_values();
    let gateway = Gateway::builder()
        .arg("--max-query-buffer")
        .arg("1mb")
        .start(&two_tenants(&backend, json!({})));
    let mut client = authenticated(&gateway, "noisy-pw");
    let value = vec![b'x'; 900 * 1024];
    client.send_command(&[b"SET", b"k", &value]);
    assert_eq!(client.read_reply(), b"+OK\r\n");
    let mut stream = raw_client(&gateway, "noisy-pw");
    let header = format!("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n${}\r\n", 2 << 20);
    stream.write_all(header.as_bytes()).unwrap();
    let _ = stream.write_all(&vec![b'x'; 2 << 20]); // fails once the gateway closes the connection
    assert!(closed_by_gateway(&mut stream));
    assert_eq!(
        gateway.metric("switchyard_client_closed_total{tenant=\"noisy\",reason=\"query_buffer\"}"),
        1
    );
}

/// A reply slot dropped unanswered (injected in a debug build) answers its request with an error, and the
/// requests around it get their own replies: the pipeline does not hang.
#[test]
fn a_lost_reply_slot_answers_an_error_instead_of_hanging() {
    let backend = backend_with_values();
    let gateway = Gateway::builder()
        .env("SWITCHYARD_TEST_FAULTS", "1")
        .start(&two_tenants(&backend, json!({})));
    let mut client = authenticated(&gateway, "quiet-pw");
    client.send(b"GET small\r\nGET switchyard:test:drop-reply\r\nPING\r\n");
    client.expect(b"$1\r\ns\r\n-ERR internal: reply lost\r\n+PONG\r\n");
    assert_eq!(gateway.metric("switchyard_replies_lost_total"), 1);
}

/// A session whose task panics (injected in a debug build) closes its connection and gives back its places; the
/// gateway and its other clients go on.
#[test]
fn a_panicking_session_closes_its_connection_and_nothing_else() {
    let backend = backend_with_values();
    let gateway = Gateway::builder()
        .env("SWITCHYARD_TEST_FAULTS", "1")
        .start(&two_tenants(&backend, json!({"max_connections": 1})));
    let mut other = authenticated(&gateway, "quiet-pw");
    let mut doomed = authenticated(&gateway, "noisy-pw");
    doomed.send(b"GET switchyard:test:panic\r\n");
    doomed.expect_closed();
    wait_for("the panic in the log", Duration::from_secs(5), || {
        gateway.log().contains("a fault injected by a test")
    });
    other.roundtrip(b"GET small\r\n", b"$1\r\ns\r\n");
    // The tenant's only place is free again once the session is gone, which on a busy machine may be a moment
    // after its client saw the close: asked for until given, each refusal kept whole for the failure message.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut refusals = Vec::new();
    let mut again = loop {
        let mut client = RawClient::connect(gateway.port());
        client.send(b"AUTH noisy-pw\r\n");
        let reply = String::from_utf8_lossy(&client.read_line()).into_owned();
        if reply == "+OK\r\n" {
            break client;
        }
        assert!(
            Instant::now() < deadline,
            "the tenant's place is still taken: {refusals:?}"
        );
        refusals.push(reply);
        std::thread::sleep(Duration::from_millis(20));
    };
    again.roundtrip(b"GET small\r\n", b"$1\r\ns\r\n");
    wait_for("two clients counted", Duration::from_secs(5), || {
        gateway.metric("switchyard_client_connections") == 2
    });
}

/// A pipeline far deeper than the requests a client may have outstanding is answered whole and in order, whether
/// the gateway answers its commands itself or a backend does.
#[test]
fn a_pipeline_deeper_than_the_outstanding_bound_is_answered_whole() {
    let backend = backend_with_values();
    let gateway = Gateway::start(&two_tenants(&backend, json!({})));
    let mut client = authenticated(&gateway, "quiet-pw");
    client.send(&b"PING\r\n".repeat(1000));
    client.expect(&b"+PONG\r\n".repeat(1000));
    client.send(&b"PING\r\nGET small\r\nECHO e\r\n".repeat(1000));
    client.expect(&b"+PONG\r\n$1\r\ns\r\n$1\r\ne\r\n".repeat(1000));
}
