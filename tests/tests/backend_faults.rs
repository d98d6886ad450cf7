//! Backend faults end to end: a node that stops reading (SIGSTOP, as a frozen host or a full socket does) while the
//! gateway writes to it. Every wait on it ends at the command timeout, even a write the node never takes; the node
//! then counts as down, so requests fail at once instead of each waiting its own timeout, until a reconnect's
//! handshake passes; and once it answers again it serves as before.

use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use serde_json::json;
use switchyard_tests::{Gateway, RawClient, RedisServer, open_single_tenant, wait_for};

/// The gateway's command timeout here.
const TIMEOUT: Duration = Duration::from_millis(1000);

/// How much later than the command timeout a waiting client may get its error.
const SLACK: Duration = Duration::from_secs(1);

/// 500 SETs of 100 KB: a 50 MB pipeline, far more than the sockets between the gateway and a stopped node hold.
const REQUESTS: usize = 500;
const VALUE_LEN: usize = 100 * 1024;

/// One worker: a node counts as down on the worker whose connection saw it fail, and these tests follow one
/// backend connection through the fault (each worker's own connection finds out on its own).
fn gateway(backend: &RedisServer) -> Gateway {
    Gateway::builder()
        .arg("--workers")
        .arg("1")
        .arg("--command-timeout-ms")
        .arg(TIMEOUT.as_millis().to_string())
        .start(&open_single_tenant(json!(backend.url())))
}

/// The errors a client of the gateway gets for `backend`.
struct Errors {
    timed_out: String,
    unavailable: String,
}

impl Errors {
    fn of(backend: &RedisServer) -> Errors {
        let node = format!("-ERR backend 127.0.0.1:{}", backend.port());
        Errors {
            timed_out: format!("{node} timed out after {} ms\r\n", TIMEOUT.as_millis()),
            unavailable: format!("{node} unavailable: "),
        }
    }
}

/// A stopped `redis-server`, resumed (SIGCONT) when this is dropped: also when a test fails half-way.
struct Frozen<'a>(&'a RedisServer);

impl<'a> Frozen<'a> {
    fn freeze(backend: &'a RedisServer) -> Frozen<'a> {
        backend.freeze();
        Frozen(backend)
    }
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        // Not `RedisServer::thaw`, which asserts: a panic while a failed test unwinds would abort the binary.
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.0.pid().to_string()])
            .status();
    }
}

/// Reads `count` reply lines on a thread of its own, each with the time it came, so that a test can wait for
/// them with a deadline.
fn read_lines(mut client: RawClient, count: usize) -> Receiver<(Instant, String)> {
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for _ in 0..count {
            let line = String::from_utf8_lossy(&client.read_line()).into_owned();
            if lines.send((Instant::now(), line)).is_err() {
                return;
            }
        }
    });
    received
}

/// The next line of `lines`, which must come by `deadline`.
fn line_by(lines: &Receiver<(Instant, String)>, deadline: Instant, what: &str) -> String {
    let wait = deadline.saturating_duration_since(Instant::now());
    match lines.recv_timeout(wait) {
        Ok((_, line)) => line,
        Err(e) => panic!("{what}: no reply in time ({e})"),
    }
}

/// While the node stays stopped, new requests fail at once with the unavailable error: over 2.5 s, which spans
/// several reconnect attempts (each one a handshake the stopped node never answers).
fn fails_fast(gateway: &Gateway, errors: &Errors) {
    let mut client = RawClient::connect(gateway.port());
    let until = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < until {
        let sent = Instant::now();
        let reply = String::from_utf8_lossy(&client.request(&[b"GET", b"k"])).into_owned();
        let took = sent.elapsed();
        assert!(
            reply.starts_with(&errors.unavailable),
            "a request while the node is stopped: {reply}"
        );
        assert!(
            took < Duration::from_millis(250),
            "a request while the node is stopped took {took:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Once the node answers again, requests succeed within a few seconds.
fn recovers(gateway: &Gateway) {
    let mut client = RawClient::connect(gateway.port());
    wait_for(
        "requests served again after SIGCONT",
        Duration::from_secs(5),
        || client.request(&[b"GET", b"k"]) == b"$1\r\nv\r\n",
    );
}

/// The node is stopped while a client writes a 50 MB pipeline to it through the gateway: the gateway's write to
/// the node stalls. That client and another that sends a GET meanwhile (on the same backend connection) both get
/// the timeout error within the command timeout + 1 s; then the node is down and requests fail at once; after
/// SIGCONT it serves again.
#[test]
fn a_node_frozen_under_a_large_pipeline_times_out_every_client_then_fails_fast_until_it_answers() {
    let backend = RedisServer::start();
    let errors = Errors::of(&backend);
    let gateway = gateway(&backend);
    let mut pipeliner = RawClient::connect(gateway.port());
    pipeliner.roundtrip(b"SET k v\r\n", b"+OK\r\n");
    let replies = read_lines(pipeliner.try_clone(), REQUESTS);
    let (started, pipeline_started) = mpsc::channel();
    std::thread::spawn(move || {
        let value = vec![b'v'; VALUE_LEN];
        for i in 0..REQUESTS {
            if i == REQUESTS / 10 {
                let _ = started.send(());
            }
            pipeliner.send_command(&[b"SET", format!("k{i}").as_bytes(), &value]);
        }
    });
    pipeline_started
        .recv_timeout(Duration::from_secs(20))
        .expect("the first 5 MB of the pipeline written");
    let frozen = Frozen::freeze(&backend);
    let frozen_at = Instant::now();
    let mut other = RawClient::connect(gateway.port());
    other.send(b"GET k\r\n");
    let other_reply = read_lines(other, 1);

    let deadline = frozen_at + TIMEOUT + SLACK;
    let mut answered = 0;
    let first_error = loop {
        let line = line_by(&replies, deadline, "the pipelining client");
        answered += 1;
        if line != "+OK\r\n" {
            break line;
        }
    };
    assert_eq!(first_error, errors.timed_out, "the pipelining client");
    assert_eq!(
        line_by(&other_reply, deadline, "the client waiting for its GET"),
        errors.timed_out
    );
    // The rest of the pipeline: each request in flight or queued at the timeout got the timeout error, and the ones
    // read after it the unavailable error, at once.
    let rest_by = Instant::now() + Duration::from_secs(20);
    while answered < REQUESTS {
        let line = line_by(&replies, rest_by, "the rest of the pipeline");
        assert!(
            line == errors.timed_out || line.starts_with(&errors.unavailable),
            "{line}"
        );
        answered += 1;
    }

    fails_fast(&gateway, &errors);
    drop(frozen);
    recovers(&gateway);
}

/// A node stopped while idle: the first request times out, and the node is then down until a reconnect's
/// handshake passes, so requests fail at once instead of waiting in a reconnect to a node that accepts TCP
/// connections but answers nothing.
#[test]
fn a_frozen_node_fails_fast_until_a_handshake_passes() {
    let backend = RedisServer::start();
    let errors = Errors::of(&backend);
    let gateway = gateway(&backend);
    let mut client = RawClient::connect(gateway.port());
    client.roundtrip(b"SET k v\r\n", b"+OK\r\n");
    let frozen = Frozen::freeze(&backend);
    let sent = Instant::now();
    client.roundtrip(b"GET k\r\n", errors.timed_out.as_bytes());
    assert!(sent.elapsed() < TIMEOUT + SLACK);
    fails_fast(&gateway, &errors);
    drop(frozen);
    recovers(&gateway);
}

/// The same on a dedicated connection: a transaction whose `EXEC` writes 50 MB (500 queued SETs of 100 KB) on
/// the connection holding a `WATCH`, to a node stopped meanwhile, gets its error within the command timeout + 1 s.
#[test]
fn a_node_frozen_while_a_transaction_is_written_times_it_out() {
    let backend = RedisServer::start();
    let gateway = gateway(&backend);
    let mut client = RawClient::connect(gateway.port());
    client.roundtrip(b"WATCH k\r\n", b"+OK\r\n");
    client.roundtrip(b"MULTI\r\n", b"+OK\r\n");
    let value = vec![b'v'; VALUE_LEN];
    for i in 0..REQUESTS {
        client.send_command(&[b"SET", format!("k{i}").as_bytes(), &value]);
    }
    for _ in 0..REQUESTS {
        client.expect(b"+QUEUED\r\n");
    }
    let _frozen = Frozen::freeze(&backend);
    let sent = Instant::now();
    client.send(b"EXEC\r\n");
    let exec = read_lines(client, 1);
    assert_eq!(
        line_by(&exec, sent + TIMEOUT + SLACK, "EXEC"),
        format!(
            "-ERR backend 127.0.0.1:{} unavailable: timed out after {} ms\r\n",
            backend.port(),
            TIMEOUT.as_millis()
        )
    );
}
