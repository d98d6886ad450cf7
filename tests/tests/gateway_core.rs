//! The gateway core against real redis-server processes: protocol, ordering, limits, failures, reloads.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_tests::{Gateway, RawClient, RedisServer, wait_for};

const PASSWORD: &str = "s3cret";

fn routes(backend: &RedisServer) -> Value {
    json!({"tenants": [{"name": "demo", "passwords": [PASSWORD], "route": {"type": "single", "target": backend.url()}}]})
}

fn open_routes(backend: &RedisServer) -> Value {
    json!({"tenants": [{"name": "demo", "passwords": [], "route": {"type": "single", "target": backend.url()}}]})
}

fn authed(gateway: &Gateway) -> RawClient {
    let mut client = RawClient::connect(gateway.port());
    client.roundtrip(format!("AUTH {PASSWORD}\r\n").as_bytes(), b"+OK\r\n");
    client
}

#[test]
fn auth_flows() {
    let backend = RedisServer::start();
    let gateway = Gateway::start(&routes(&backend));
    let mut client = RawClient::connect(gateway.port());
    client.roundtrip(b"GET k\r\n", b"-NOAUTH Authentication required.\r\n");
    client.roundtrip(b"PING\r\n", b"-NOAUTH Authentication required.\r\n");
    client.roundtrip(
        b"AUTH wrong\r\n",
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n",
    );
    client.roundtrip(
        b"AUTH other s3cret\r\n",
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n",
    );
    client.roundtrip(b"AUTH demo s3cret\r\n", b"+OK\r\n");
    client.roundtrip(b"SET k v\r\n", b"+OK\r\n");
    client.roundtrip(b"GET k\r\n", b"$1\r\nv\r\n");
    // A failed AUTH leaves the connection authenticated as it was, as in Redis.
    client.roundtrip(
        b"AUTH wrong\r\n",
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n",
    );
    client.roundtrip(b"GET k\r\n", b"$1\r\nv\r\n");

    let mut other = RawClient::connect(gateway.port());
    other.roundtrip(b"AUTH default s3cret\r\n", b"+OK\r\n");
    other.roundtrip(
        b"HELLO 3\r\n",
        b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$5\r\nproto\r\n:3\r\n",
    );
    let mut hello = RawClient::connect(gateway.port());
    hello.roundtrip(
        b"HELLO 2 AUTH demo s3cret SETNAME app\r\n",
        b"*14\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$5\r\nproto\r\n:2\r\n",
    );
}

#[test]
fn a_tenant_without_passwords_needs_no_auth() {
    let backend = RedisServer::start();
    let gateway = Gateway::start(&open_routes(&backend));
    let mut client = RawClient::connect(gateway.port());
    client.roundtrip(b"PING\r\n", b"+PONG\r\n");
    client.roundtrip(b"ECHO hi\r\n", b"$2\r\nhi\r\n");
    client.roundtrip(
        b"AUTH x\r\n",
        b"-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?\r\n",
    );
    // A tenant owns the database its resource names, and no other (docs/operations.md#tenant-isolation).
    client.roundtrip(b"SELECT 3\r\n", b"-ERR DB index is out of range\r\n");
    client.roundtrip(b"SELECT 0\r\n", b"+OK\r\n");
    client.roundtrip(b"SET in0 v\r\n", b"+OK\r\n");
    client.roundtrip(
        b"SELECT x\r\n",
        b"-ERR value is not an integer or out of range\r\n",
    );
    client.roundtrip(b"QUIT\r\n", b"+OK\r\n");
    client.expect_closed();
    let mut direct = backend.client();
    let in0: Option<String> = redis::cmd("GET").arg("in0").query(&mut direct).unwrap();
    assert_eq!(in0.as_deref(), Some("v"));
}

/// A tenant's `max_connections` holds for the tenant without passwords too, and for clients that authenticate
/// all at once on several workers: the limit is checked and taken in one atomic step.
#[test]
fn max_connections_hold_for_open_tenants_and_concurrent_auth() {
    let backend = RedisServer::start();
    let open = json!({"tenants": [{"name": "demo", "passwords": [], "limits": {"max_connections": 2},
        "route": {"type": "single", "target": backend.url()}}]});
    let gateway = Gateway::start(&open);
    let mut first = RawClient::connect(gateway.port());
    first.roundtrip(b"PING\r\n", b"+PONG\r\n");
    let mut second = RawClient::connect(gateway.port());
    second.roundtrip(b"PING\r\n", b"+PONG\r\n");
    let mut third = RawClient::connect(gateway.port());
    third.expect(b"-ERR max number of clients reached\r\n");
    third.expect_closed();
    drop(first);
    wait_for(
        "the closed client's place given back",
        Duration::from_secs(10),
        || {
            let mut again = RawClient::connect(gateway.port());
            again.request(&[b"PING"]) == b"+PONG\r\n"
        },
    );

    let limited = json!({"tenants": [{"name": "demo", "passwords": [PASSWORD], "limits": {"max_connections": 3},
        "route": {"type": "single", "target": backend.url()}}]});
    let gateway = Gateway::builder().arg("--workers").arg("2").start(&limited);
    let clients: Vec<RawClient> = (0..40)
        .map(|_| RawClient::connect(gateway.port()))
        .collect();
    // Every client stays connected until all have their answer, so no place is given back meanwhile.
    let answers: Vec<(bool, RawClient)> = std::thread::scope(|scope| {
        let auths: Vec<_> = clients
            .into_iter()
            .map(|mut client| {
                scope.spawn(move || {
                    let reply = client.request(&[b"AUTH", PASSWORD.as_bytes()]);
                    (reply == b"+OK\r\n", client)
                })
            })
            .collect();
        auths.into_iter().map(|auth| auth.join().unwrap()).collect()
    });
    let accepted = answers.iter().filter(|(ok, _)| *ok).count();
    assert_eq!(accepted, 3, "40 clients authenticating at once");
}

#[test]
fn unknown_commands_and_wrong_arity_keep_the_connection() {
    let backend = RedisServer::start();
    let gateway = Gateway::start(&open_routes(&backend));
    let mut client = RawClient::connect(gateway.port());
    client.roundtrip(
        b"FOO a b\r\n",
        b"-ERR unknown command 'FOO', with args beginning with: 'a' 'b' \r\n",
    );
    client.roundtrip(
        b"GET\r\n",
        b"-ERR wrong number of arguments for 'get' command\r\n",
    );
    client.roundtrip(
        b"FLUSHALL\r\n",
        b"-ERR FLUSHALL is an admin command; this tenant may not run it (allow_admin)\r\n",
    );
    client.roundtrip(b"PING\r\n", b"+PONG\r\n");
}

#[test]
fn malformed_input_gets_redis_errors_and_other_clients_keep_working() {
    let backend = RedisServer::start();
    let gateway = Gateway::start(&open_routes(&backend));
    let mut bystander = RawClient::connect(gateway.port());
    let big_inline = vec![b'a'; 70 * 1024];
    let cases: Vec<(Vec<u8>, &[u8])> = vec![
        (
            b"*x\r\n".to_vec(),
            b"-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            b"*2000000\r\n".to_vec(),
            b"-ERR Protocol error: invalid multibulk length\r\n",
        ),
        (
            b"*1\r\n$-5\r\n".to_vec(),
            b"-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*1\r\n$600000000\r\n".to_vec(),
            b"-ERR Protocol error: invalid bulk length\r\n",
        ),
        (
            b"*1\r\n:1\r\n".to_vec(),
            b"-ERR Protocol error: expected '$', got ':'\r\n",
        ),
        (
            big_inline,
            b"-ERR Protocol error: too big inline request\r\n",
        ),
        (
            b"SET \"a b\r\n".to_vec(),
            b"-ERR Protocol error: unbalanced quotes in request\r\n",
        ),
    ];
    for (input, reply) in cases {
        let mut client = RawClient::connect(gateway.port());
        // Requests before the bad one are answered first, in order.
        client.send(b"PING\r\n");
        client.send(&input);
        client.expect(b"+PONG\r\n");
        client.expect(reply);
        client.expect_closed();
        bystander.roundtrip(b"PING\r\n", b"+PONG\r\n");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_of_10000_mixed_commands_returns_in_order() {
    let backend = RedisServer::start();
    let gateway = Gateway::start(&routes(&backend));
    let mut con = gateway.client(Some(PASSWORD)).await;
    let mut pipe = redis::pipe();
    for i in 0..2500 {
        pipe.cmd("SET")
            .arg(format!("k{i}"))
            .arg(i)
            .cmd("GET")
            .arg(format!("k{i}"))
            .cmd("PING")
            .cmd("INCR")
            .arg("counter");
    }
    let replies: Vec<redis::Value> = pipe.query_async(&mut con).await.unwrap();
    assert_eq!(replies.len(), 10_000);
    for i in 0..2500 {
        let r = &replies[i * 4..i * 4 + 4];
        assert_eq!(r[0], redis::Value::Okay);
        assert_eq!(r[1], redis::Value::BulkString(i.to_string().into_bytes()));
        assert_eq!(r[2], redis::Value::SimpleString("PONG".into()));
        assert_eq!(r[3], redis::Value::Int(i as i64 + 1));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_64_mb_value_round_trips() {
    let backend = RedisServer::start();
    let gateway = Gateway::start(&routes(&backend));
    let mut con = gateway.client(Some(PASSWORD)).await;
    let value: Vec<u8> = (0..64 * 1024 * 1024)
        .map(|i: usize| (i % 251) as u8)
        .collect();
    let () = redis::cmd("SET")
        .arg("big")
        .arg(&value)
        .query_async(&mut con)
        .await
        .unwrap();
    let back: Vec<u8> = redis::cmd("GET")
        .arg("big")
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(back == value, "64 MB value came back different");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_clients_incr_to_the_exact_total() {
    let backend = RedisServer::start();
    let gateway = Gateway::start(&routes(&backend));
    let url = gateway.url(Some(PASSWORD));
    let mut tasks = Vec::new();
    for _ in 0..200 {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let mut con = switchyard_tests::connect(&url).await;
            for _ in 0..1000 {
                let _: i64 = redis::cmd("INCR")
                    .arg("total")
                    .query_async(&mut con)
                    .await
                    .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let total: i64 = redis::cmd("GET")
        .arg("total")
        .query(&mut backend.client())
        .unwrap();
    assert_eq!(total, 200_000);
}

#[test]
fn backend_killed_mid_pipeline_fails_pending_requests_then_recovers() {
    let backend = RedisServer::start();
    let port = backend.port();
    let gateway = Gateway::start(&routes(&backend));
    let mut client = authed(&gateway);
    client.roundtrip(b"SET k v\r\n", b"+OK\r\n");
    // Paused for writes, the backend holds the pipeline's first SET and the 99 behind it; then it dies.
    let mut direct = RawClient::connect(port);
    direct.roundtrip(b"CLIENT PAUSE 10000 WRITE\r\n", b"+OK\r\n");
    let set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nw\r\n";
    client.send(&set.repeat(100));
    wait_for(
        "the backend holding the whole pipeline",
        Duration::from_secs(10),
        || held(&backend, "set") == Some(99 * set.len()),
    );
    drop(backend);
    let lost = format!("-ERR backend 127.0.0.1:{port} connection lost: ");
    for _ in 0..100 {
        let line = String::from_utf8(client.read_line()).unwrap();
        assert!(line.starts_with(&lost), "{line}");
    }
    // While it is down: a fast, clear error.
    client.send(b"GET k\r\n");
    let line = String::from_utf8(client.read_line()).unwrap();
    assert!(
        line.starts_with(&format!("-ERR backend 127.0.0.1:{port} unavailable: ")),
        "{line}"
    );
    // Counted by what they tell a client: the 100 were written to the node, so they may have run; the GET never
    // left the gateway.
    let failed = |safe| {
        gateway.metric(&format!(
            "switchyard_failed_requests_total{{side=\"backend\",retry_safe=\"{safe}\"}}"
        ))
    };
    assert_eq!((failed(false), failed(true)), (100, 1));

    let _revived = RedisServer::builder().start_on(port);
    wait_for(
        "writes to the revived backend",
        Duration::from_secs(10),
        || {
            client.send(b"SET k again\r\n");
            client.read_line() == b"+OK\r\n"
        },
    );
    client.roundtrip(b"GET k\r\n", b"$5\r\nagain\r\n");
}

/// The bound on a client's outstanding requests (docs/operations.md) holds when consecutive requests go to
/// different backends, here reads to one Redis and writes to another: the requests of one read do not all leave.
#[test]
fn outstanding_requests_stay_bounded_when_requests_alternate_between_backends() {
    let reader = RedisServer::start();
    let writer = RedisServer::start();
    let route = json!({"type": "single", "target": {
        "read": {"resources": [reader.url()]}, "write": {"resources": [writer.url()]}}});
    let routes = json!({"tenants": [{"name": "demo", "passwords": [PASSWORD], "route": route}]});
    let gateway = Gateway::start(&routes);
    let mut client = authed(&gateway);
    client.roundtrip(b"SET k v\r\n", b"+OK\r\n");
    client.roundtrip(b"GET k\r\n", b"$-1\r\n"); // the reader has no `k`
    // Paused for writes, the writer holds the first SET and every one behind it; each read is answered, but
    // its reply waits behind the writes before it.
    let mut direct = RawClient::connect(writer.port());
    direct.roundtrip(b"CLIENT PAUSE 10000 WRITE\r\n", b"+OK\r\n");
    let get = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n".as_slice();
    let set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nw\r\n".as_slice();
    const PAIRS: usize = 1000;
    client.send(&[get, set].concat().repeat(PAIRS));
    // Every SET the gateway lets go reaches the writer's input at once; a bound of 128 outstanding requests lets
    // go 64 of them.
    wait_for("the first SET held", Duration::from_secs(10), || {
        held(&writer, "set").is_some()
    });
    std::thread::sleep(Duration::from_millis(300));
    let sets = 1 + held(&writer, "set").unwrap_or(0) / set.len();
    assert!(
        sets <= 64,
        "{sets} of {PAIRS} SETs left the gateway with earlier replies unwritten"
    );
    direct.roundtrip(b"CLIENT UNPAUSE\r\n", b"+OK\r\n");
    client.expect(&b"$-1\r\n+OK\r\n".repeat(PAIRS));
}

/// Pipelined requests for one backend travel as one piece and their replies come back as one; when the
/// connection dies with only some of those replies in, the client gets those replies and an error for each of
/// the rest, in order.
#[test]
fn a_backend_lost_halfway_through_a_pipeline_answers_what_it_answered() {
    let backend = RedisServer::start();
    let port = backend.port();
    let gateway = Gateway::start(&routes(&backend));
    let mut client = authed(&gateway);
    client.roundtrip(b"SET k v\r\n", b"+OK\r\n");
    client.roundtrip(b"GET k\r\n", b"$1\r\nv\r\n");
    // Paused for writes, Redis answers the GET and holds the SET (and what follows it) until it dies.
    let mut direct = RawClient::connect(port);
    direct.roundtrip(b"CLIENT PAUSE 10000 WRITE\r\n", b"+OK\r\n");
    let last_get = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
    client.send(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nw\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
    wait_for(
        "the backend holding the SET with the last GET behind it",
        Duration::from_secs(10),
        || held(&backend, "set") == Some(last_get.len()),
    );
    drop(backend);
    assert_eq!(client.read_line(), b"$1\r\n");
    assert_eq!(client.read_line(), b"v\r\n");
    let lost = format!("-ERR backend 127.0.0.1:{port} connection lost: ");
    for _ in 0..2 {
        let line = String::from_utf8(client.read_line()).unwrap();
        assert!(line.starts_with(&lost), "{line}");
    }
}

#[test]
fn a_backend_that_never_answers_times_out() {
    let backend = RedisServer::start();
    let gateway = Gateway::builder()
        .arg("--command-timeout-ms")
        .arg("300")
        .start(&routes(&backend));
    let mut client = authed(&gateway);
    client.roundtrip(b"SET k v\r\n", b"+OK\r\n");
    backend.freeze();
    let started = Instant::now();
    client.roundtrip(
        b"GET k\r\n",
        format!(
            "-ERR backend 127.0.0.1:{} timed out after 300 ms\r\n",
            backend.port()
        )
        .as_bytes(),
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    // Other commands of the gateway still work meanwhile.
    client.roundtrip(b"PING\r\n", b"+PONG\r\n");
    backend.thaw();
}

/// A backend that cannot speak RESP3 (as Redis before 6, which has no `HELLO`): RESP3 clients get a clear error
/// naming the backend and the reason, and RESP2 clients are served as before.
#[test]
fn a_backend_without_resp3_gives_resp3_clients_a_clear_error() {
    let backend = RedisServer::builder()
        .arg("--rename-command")
        .arg("HELLO")
        .arg("")
        .start();
    let gateway = Gateway::start(&routes(&backend));
    let mut resp3 = authed(&gateway);
    assert!(resp3.request(&[b"HELLO", b"3"]).starts_with(b"%7\r\n"));
    let error = String::from_utf8(resp3.request(&[b"SET", b"k", b"v"])).unwrap();
    let expected = format!("-ERR backend 127.0.0.1:{} unavailable: ", backend.port());
    assert!(
        error.starts_with(&expected) && error.contains("the node does not speak RESP3"),
        "{error}"
    );
    let mut resp2 = authed(&gateway);
    resp2.roundtrip(b"SET k v\r\n", b"+OK\r\n");
    assert!(resp3.request(&[b"HELLO", b"2"]).starts_with(b"*14\r\n"));
    resp3.roundtrip(b"GET k\r\n", b"$1\r\nv\r\n");
}

/// The connection's timer is armed for the oldest request and, when it fires after that one was answered, moves
/// on to the oldest still waiting: a request that is slow but within its own timeout is not failed because an
/// earlier one's deadline passed.
#[test]
fn a_slow_reply_within_its_own_timeout_is_not_cut_by_an_earlier_deadline() {
    let backend = RedisServer::start();
    let gateway = Gateway::builder()
        .arg("--command-timeout-ms")
        .arg("1000")
        .start(&routes(&backend));
    let mut client = authed(&gateway);
    // The timer shows nowhere outside the gateway, so the steps are placed by the deadlines the test can bound:
    // the SET's is 1 s after the gateway wrote it, between `sent` and `answered`.
    let sleep_until =
        |at: Instant| std::thread::sleep(at.saturating_duration_since(Instant::now()));
    let sent = Instant::now();
    client.roundtrip(b"SET k v\r\n", b"+OK\r\n");
    let answered = Instant::now();
    sleep_until(sent + Duration::from_millis(600));
    backend.freeze();
    client.send(b"GET k\r\n"); // its deadline: at least 1 s from now, after the SET's
    // Thawed just after the SET's deadline, when the timer has fired with the GET waiting, and long before the
    // GET's own.
    sleep_until(answered + Duration::from_millis(1050));
    backend.thaw();
    assert_eq!(client.read_line(), b"$1\r\n");
    assert_eq!(client.read_line(), b"v\r\n");
}

#[test]
fn sighup_reloads_a_valid_file_and_keeps_serving_on_an_invalid_one() {
    let first = RedisServer::start();
    let second = RedisServer::start();
    let gateway = Gateway::start(&routes(&first));
    let mut client = authed(&gateway);
    client.roundtrip(b"SET where first\r\n", b"+OK\r\n");

    gateway.reload(&routes(&second));
    wait_for(
        "writes reaching the reloaded route",
        Duration::from_secs(10),
        || {
            client.send(b"SET where second\r\n");
            client.read_line() == b"+OK\r\n"
                && redis::cmd("GET")
                    .arg("where")
                    .query::<Option<String>>(&mut second.client())
                    .unwrap()
                    .is_some()
        },
    );

    let invalid = json!({"tenants": [{"name": "demo", "passwords": [PASSWORD], "route": {"type": "single", "target": "redis://127.0.0.1:notaport"}}]});
    gateway.reload(&invalid);
    wait_for(
        "the rejected reload in the log",
        Duration::from_secs(10),
        || gateway.log().contains("routes not reloaded"),
    );
    assert!(
        gateway.log().contains("/tenants/0/route/target"),
        "the error names the bad field:\n{}",
        gateway.log()
    );
    client.roundtrip(b"GET where\r\n", b"$6\r\nsecond\r\n");
}

/// After a route change away from a resource, the gateway's connections to it close (once what was in flight is
/// answered) and it does not reconnect, even when that Redis goes away.
#[test]
fn connections_to_a_resource_no_route_uses_close_and_are_not_reopened() {
    let old = RedisServer::start();
    let new = RedisServer::start();
    let gateway = Gateway::start(&routes(&old));
    let mut client = authed(&gateway);
    client.roundtrip(b"SET k v\r\n", b"+OK\r\n");
    // Connections of the gateway's own ACL user (see docs/operations.md#tenant-isolation).
    let gateway_connections = |backend: &RedisServer| {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut backend.client())
            .unwrap();
        list.lines()
            .filter(|l| l.contains("user=switchyard-gateway"))
            .count()
    };
    assert!(gateway_connections(&old) > 0);
    gateway.reload(&routes(&new));
    wait_for(
        "writes reaching the new resource",
        Duration::from_secs(10),
        || {
            client.send(b"SET k v\r\n");
            // On the new resource itself: the gateway may connect to it before its route serves.
            let landed: Option<String> =
                redis::cmd("GET").arg("k").query(&mut new.client()).unwrap();
            client.read_line() == b"+OK\r\n" && landed.is_some()
        },
    );
    wait_for(
        "the connections to the old resource closed",
        Duration::from_secs(10),
        || gateway_connections(&old) == 0,
    );
    let failures = || {
        let (_, metrics) = gateway.admin_get("/metrics");
        metrics
            .lines()
            .filter(|l| l.starts_with("switchyard_backend_failures_total"))
            .map(|l| l.to_string())
            .collect::<Vec<_>>()
    };
    let before = failures();
    drop(old);
    // A negative check: nothing may try the old address for a while after it went away (reconnects back off to
    // 1 s at most).
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        failures(),
        before,
        "the gateway reconnected to a resource no route uses"
    );
    client.roundtrip(b"GET k\r\n", b"$1\r\nv\r\n");

    // A resource that is down when the routes move away from it: its reconnect attempts stop.
    let down = RedisServer::start();
    gateway.reload(&routes(&down));
    wait_for(
        "writes reaching the resource that goes down",
        Duration::from_secs(10),
        || {
            client.send(b"SET k v\r\n");
            client.read_line() == b"+OK\r\n" && gateway_connections(&down) > 0
        },
    );
    drop(down);
    wait_for(
        "a failure counted for the resource that went down",
        Duration::from_secs(10),
        || failures() != before,
    );
    gateway.reload(&routes(&new));
    wait_for(
        "reads reaching the new resource again",
        Duration::from_secs(10),
        || {
            client.send(b"GET k\r\n");
            client.read_line() == b"$1\r\n"
        },
    );
    client.read_line();
    let settled = failures();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        failures(),
        settled,
        "the gateway kept reconnecting to a resource no route uses"
    );
}

#[test]
fn an_invalid_routes_file_stops_startup_with_the_bad_field_named() {
    let output = std::process::Command::new(switchyard_tests::binary("switchyard-gateway", "SWITCHYARD_GATEWAY_BIN"))
        .args(["--listen", "127.0.0.1:0", "--routes", "/dev/stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            let bad = json!({"tenants": [{"name": "a", "passwords": ["x"], "route": {"type": "sharded", "shards": []}}]});
            child.stdin.take().unwrap().write_all(bad.to_string().as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("/tenants/0/route/shards: at least one shard is required"),
        "{stderr}"
    );
}

/// The gateway's worker threads (`switchyard-worker-N`, which the kernel's 15-byte thread names cut short), once
/// there are `expected` of them or a few seconds have passed: a thread takes its name once it runs, which may be
/// after the gateway first answers.
fn worker_threads(gateway: &Gateway, expected: usize) -> usize {
    let count = || {
        std::fs::read_dir(format!("/proc/{}/task", gateway.pid()))
            .expect("the gateway's threads")
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .filter(|name| name.starts_with("switchyard-work"))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let found = count();
        if found == expected || Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn workers_default_to_the_cpus_the_process_may_use_and_one_on_small_hosts() {
    let backend = RedisServer::start();
    // The gateway inherits this process' affinity and cgroup, so it may use the same CPUs: one worker each, or
    // one in all on 2 CPUs or fewer.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let expected = if cpus <= 2 { 1 } else { cpus };
    let gateway = Gateway::start(&routes(&backend));
    assert_eq!(worker_threads(&gateway, expected), expected);
    let gateway = Gateway::builder()
        .arg("--workers")
        .arg("3")
        .start(&routes(&backend));
    assert_eq!(worker_threads(&gateway, 3), 3);
    let gateway = Gateway::builder()
        .env("SWITCHYARD_WORKERS", "2")
        .start(&routes(&backend));
    assert_eq!(worker_threads(&gateway, 2), 2);
}

#[test]
fn zero_workers_is_refused_at_startup() {
    for (args, env) in [
        (&["--workers", "0"][..], None),
        (&[][..], Some(("SWITCHYARD_WORKERS", "0"))),
    ] {
        let mut command = std::process::Command::new(switchyard_tests::binary(
            "switchyard-gateway",
            "SWITCHYARD_GATEWAY_BIN",
        ));
        command
            .args(["--listen", "127.0.0.1:0", "--routes", "/dev/null"])
            .args(args)
            .envs(env);
        let output = command.output().unwrap();
        assert!(!output.status.success(), "{args:?} {env:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(
                "invalid value '0' for '--workers <WORKERS>': the gateway needs at least one worker"
            ),
            "{stderr}"
        );
    }
}

#[test]
fn admin_endpoints_and_graceful_shutdown() {
    let backend = RedisServer::start();
    // One worker, so that the shutdown below reaches both clients' sessions at once, and the gateway keeps one
    // connection to the backend.
    let mut gateway = Gateway::builder()
        .arg("--workers")
        .arg("1")
        .start(&routes(&backend));
    assert_eq!(gateway.admin_get("/healthz").0, 200);
    assert_eq!(gateway.admin_get("/readyz").0, 200);
    let mut client = authed(&gateway);
    client.roundtrip(b"SET k v\r\n", b"+OK\r\n");
    // A pipeline counts each of its commands, whatever their order.
    client.roundtrip(
        b"GET k\r\nGET k\r\nSET k w\r\nGET k\r\nPING\r\nGET k\r\n",
        b"$1\r\nv\r\n$1\r\nv\r\n+OK\r\n$1\r\nw\r\n+PONG\r\n$1\r\nw\r\n",
    );
    let (status, metrics) = gateway.admin_get("/metrics");
    assert_eq!(status, 200);
    for (command, count) in [("set", 2), ("get", 4), ("ping", 1)] {
        assert!(
            metrics.contains(&format!(
                "switchyard_commands_total{{tenant=\"demo\",command=\"{command}\"}} {count}\n"
            )),
            "{command}: {metrics}"
        );
    }
    assert!(
        metrics.contains(&format!(
            "switchyard_backend_connections_up{{backend=\"127.0.0.1:{}\"}} 1",
            backend.port()
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains("switchyard_client_connections 1"),
        "{metrics}"
    );

    // A command in flight when SIGTERM arrives still gets its reply: the backend holds it (paused for writes)
    // until the shutdown has reached the sessions, which closes an idle client's connection (the one worker
    // serves both clients).
    let mut idle = authed(&gateway);
    let mut direct = RawClient::connect(backend.port());
    direct.roundtrip(b"CLIENT PAUSE 10000 WRITE\r\n", b"+OK\r\n");
    client.send(b"SET k x\r\n");
    wait_for(
        "the backend holding the SET",
        Duration::from_secs(10),
        || held(&backend, "set").is_some(),
    );
    gateway.signal("TERM");
    idle.expect_closed();
    // The gateway waits for the command as long as it takes (within its grace period). That it does not give up
    // on it is a negative check, so a bounded one: the backend answers a little later still.
    std::thread::sleep(Duration::from_millis(200));
    direct.roundtrip(b"CLIENT UNPAUSE\r\n", b"+OK\r\n");
    client.expect(b"+OK\r\n");
    let status = gateway
        .wait_exit(Duration::from_secs(10))
        .expect("gateway exits after SIGTERM");
    assert!(status.success());
}

/// How many bytes of further requests wait behind the `command` that `CLIENT PAUSE` holds on `backend`: the held
/// connection is flagged `b` in `CLIENT LIST`, its `cmd` is the held command and its `qbuf` what follows it.
/// `None` while no connection is held at `command`.
fn held(backend: &RedisServer, command: &str) -> Option<usize> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut backend.client())
        .expect("CLIENT LIST");
    list.lines()
        .map(|line| line.split(' ').collect::<Vec<&str>>())
        .find(|fields| fields.contains(&"flags=b") && fields.contains(&&*format!("cmd={command}")))
        .and_then(|fields| {
            fields
                .iter()
                .find_map(|f| f.strip_prefix("qbuf="))
                .and_then(|n| n.parse().ok())
        })
}

#[test]
fn clients_without_auth_get_redis_unauthenticated_limits() {
    let backend = RedisServer::start();
    let gateway = Gateway::start(&routes(&backend));
    let mut client = RawClient::connect(gateway.port());
    client.send(b"*11\r\n");
    client.expect(b"-ERR Protocol error: unauthenticated multibulk length\r\n");
    client.expect_closed();
    let mut client = RawClient::connect(gateway.port());
    client.send(b"*2\r\n$3\r\nGET\r\n$20000\r\n");
    client.expect(b"-ERR Protocol error: unauthenticated bulk length\r\n");
    client.expect_closed();
    // Once authenticated, the normal limits apply, even within one pipeline.
    let mut client = RawClient::connect(gateway.port());
    let mut pipeline =
        format!("AUTH {PASSWORD}\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$20000\r\n").into_bytes();
    pipeline.extend(std::iter::repeat_n(b'v', 20000));
    pipeline.extend_from_slice(b"\r\nSTRLEN k\r\n");
    client.send(&pipeline);
    client.expect(b"+OK\r\n+OK\r\n:20000\r\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_shows_the_tenants_own_keyspace_only() {
    let backend = RedisServer::start();
    let () = redis::cmd("SET")
        .arg("someone-else")
        .arg(1)
        .query(&mut backend.client())
        .unwrap();
    let route = json!({"tenants": [{"name": "demo", "passwords": [], "route": {"type": "single", "target": format!("{}/3", backend.url())}}]});
    let gateway = Gateway::start(&route);
    let mut con = gateway.client(None).await;
    let () = redis::cmd("MSET")
        .arg("a")
        .arg(1)
        .arg("b")
        .arg(2)
        .query_async(&mut con)
        .await
        .unwrap();
    // The harness's readiness PING is counted until its worker has seen it close: wait for that.
    let deadline = Instant::now() + Duration::from_secs(5);
    let info = loop {
        let info: String = redis::cmd("INFO").query_async(&mut con).await.unwrap();
        if info.contains("connected_clients:1\r\n") || Instant::now() > deadline {
            break info;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for field in [
        "redis_version:7.0.15",
        "redis_mode:standalone",
        "arch_bits:64",
        "cluster_enabled:0",
        "connected_clients:1",
    ] {
        assert!(info.contains(field), "{field} missing from:\n{info}");
    }
    let keyspace = info.split("# Keyspace\r\n").nth(1).unwrap_or_default();
    assert_eq!(keyspace, "db0:keys=2,expires=0,avg_ttl=0\r\n", "{info}");
}
