//! What the client tracking tests share: a gateway with a namespaced tenant and its co-tenant, tracking
//! clients, and the pushes they expect.

use serde_json::{Value, json};
use switchyard_tests::{Gateway, RawClient, RedisServer};

pub(crate) const PASSWORD: &str = "s3cret-tracking";
pub(crate) const OTHER: &str = "s3cret-co-tenant";

/// Tenant `demo` on `backend`, with its co-tenant `other` (namespace `b:`) when `demo` has a namespace too
/// (without one, `demo` owns the database).
pub(crate) fn start(backend: &RedisServer, namespace: Option<&str>) -> Gateway {
    start_workers(backend, namespace, 1)
}

/// As [`start`], with `workers` worker threads: the gateway hands its connections to them in turn.
pub(crate) fn start_workers(
    backend: &RedisServer,
    namespace: Option<&str>,
    workers: u32,
) -> Gateway {
    let mut demo = json!({"name": "demo", "passwords": [PASSWORD],
        "route": {"type": "single", "target": backend.url()}});
    let mut tenants = vec![];
    if let Some(namespace) = namespace {
        demo["namespace"] = json!(namespace);
        tenants.push(
            json!({"name": "other", "passwords": [OTHER], "namespace": "b:",
            "route": {"type": "single", "target": backend.url()}}),
        );
    }
    tenants.push(demo);
    let routes: Value = json!({ "tenants": tenants });
    Gateway::builder()
        .arg("--workers")
        .arg(workers.to_string())
        .start(&routes)
}

pub(crate) fn authed(gateway: &Gateway, password: &str, protocol: u8) -> RawClient {
    let mut client = RawClient::connect(gateway.port());
    assert_eq!(client.request(&[b"AUTH", password.as_bytes()]), b"+OK\r\n");
    if protocol == 3 {
        assert!(client.request(&[b"HELLO", b"3"]).starts_with(b"%"));
    }
    client
}

/// A backend, a gateway with tenant `demo` (namespace `ns:`) and its co-tenant, a client of Redis itself, and
/// a RESP3 client of `demo` that tracks with `options`.
pub(crate) fn tracking(options: &[&[u8]]) -> (RedisServer, Gateway, redis::Connection, RawClient) {
    let backend = RedisServer::start();
    let gateway = start(&backend, Some("ns:"));
    let redis = backend.client();
    let mut client = authed(&gateway, PASSWORD, 3);
    assert_eq!(track(&mut client, options), b"+OK\r\n");
    (backend, gateway, redis, client)
}

/// `CLIENT TRACKING on` with `options`, sent by `client`: its reply.
pub(crate) fn track(client: &mut RawClient, options: &[&[u8]]) -> Vec<u8> {
    let mut args: Vec<&[u8]> = vec![b"CLIENT", b"TRACKING", b"on"];
    args.extend_from_slice(options);
    client.request(&args)
}

/// A RESP2 client of `demo` subscribed to `__redis__:invalidate`, and its id: what a tracking client redirects
/// to.
pub(crate) fn invalidations_subscriber(gateway: &Gateway) -> (RawClient, String) {
    let mut subscriber = authed(gateway, PASSWORD, 2);
    let id = client_id(&mut subscriber);
    subscriber.roundtrip(
        b"SUBSCRIBE __redis__:invalidate\r\n",
        b"*3\r\n$9\r\nsubscribe\r\n$20\r\n__redis__:invalidate\r\n:1\r\n",
    );
    (subscriber, id)
}

/// `client`'s id (`CLIENT ID`).
pub(crate) fn client_id(client: &mut RawClient) -> String {
    let id = client.request(&[b"CLIENT", b"ID"]);
    String::from_utf8_lossy(&id[1..id.len() - 2]).into_owned()
}

pub(crate) fn invalidate(keys: &[&str]) -> Vec<u8> {
    let mut push = format!(">2\r\n$10\r\ninvalidate\r\n*{}\r\n", keys.len()).into_bytes();
    for key in keys {
        push.extend_from_slice(format!("${}\r\n{key}\r\n", key.len()).as_bytes());
    }
    push
}

pub(crate) const FLUSHED: &[u8] = b">2\r\n$10\r\ninvalidate\r\n_\r\n";

pub(crate) fn set(redis: &mut redis::Connection, key: &str, value: &str) {
    let _: () = redis::cmd("SET").arg(key).arg(value).query(redis).unwrap();
}

/// `client` reads `key` (stored as `stored`), which is then written on Redis, and is told. A read sent before a
/// watch that is coming back (or new) is up is followed by a flush once it is, which also forgets what was read:
/// then it reads again.
pub(crate) fn told_again(
    client: &mut RawClient,
    redis: &mut redis::Connection,
    key: &str,
    stored: &str,
) {
    for attempt in 0.. {
        set(redis, stored, "before");
        client.send_command(&[b"GET", key.as_bytes()]);
        // Flushes still on their way come first.
        let mut reply = client.read_reply();
        while reply == FLUSHED {
            reply = client.read_reply();
        }
        assert_eq!(reply, b"$6\r\nbefore\r\n");
        set(redis, stored, "after");
        match client.read_reply() {
            reply if reply == invalidate(&[key]) => return,
            reply => assert!(reply == FLUSHED && attempt < 3, "{reply:?}"),
        }
    }
}

/// Nothing waits on `client`'s connection: a `PING` is answered at once.
pub(crate) fn nothing_pending(client: &mut RawClient) {
    assert_eq!(
        String::from_utf8_lossy(&client.request(&[b"PING"])),
        "+PONG\r\n"
    );
}
