//! Why a client's cache stays exact: the near cache's hits are tracked, a transaction's reads from `EXEC`, and
//! a cache kept from the pushes while a writer changes its keys never stays stale.

use std::time::Duration;

use serde_json::json;
use switchyard_tests::{Gateway, RawClient, RedisServer, command_calls, wait_for};

use crate::harness::*;

#[test]
fn a_read_the_near_cache_answers_is_tracked_too() {
    let backend = RedisServer::start();
    let routes = json!({"tenants": [{"name": "demo", "passwords": [PASSWORD],
        "near_cache": {"max_bytes": 1 << 20, "keys": "all"},
        "route": {"type": "single", "target": backend.url()}}]});
    let gateway = Gateway::builder().arg("--workers").arg("1").start(&routes);
    let mut redis = backend.client();
    set(&mut redis, "k", "v1");
    let mut client = authed(&gateway, PASSWORD, 3);
    assert_eq!(track(&mut client, &[]), b"+OK\r\n");
    // Until the near cache answers it: Redis sees no GET.
    wait_for("k in the near cache", Duration::from_secs(10), || {
        let before = command_calls(&mut redis, "get");
        let reply = client.request(&[b"GET", b"k"]);
        if reply != b"$2\r\nv1\r\n" {
            assert_eq!(reply, invalidate(&["k"]), "only k is told");
            return false;
        }
        command_calls(&mut redis, "get") == before
    });
    set(&mut redis, "k", "v2");
    assert_eq!(client.read_reply(), invalidate(&["k"]));
    nothing_pending(&mut client);
}

#[test]
fn a_read_in_a_transaction_is_tracked_from_exec() {
    let (_backend, gateway, mut redis, mut client) = tracking(&[]);
    let mut other = authed(&gateway, PASSWORD, 3);
    assert_eq!(track(&mut other, &[]), b"+OK\r\n");
    assert_eq!(other.request(&[b"GET", b"k"]), b"_\r\n");
    assert_eq!(client.request(&[b"MULTI"]), b"+OK\r\n");
    assert_eq!(client.request(&[b"GET", b"k"]), b"+QUEUED\r\n");
    // A change before EXEC: `other` is told, so the gateway has dispatched it; the transaction's client is
    // not (its read has not run yet), and its read, at EXEC, is tracked from then on.
    set(&mut redis, "ns:k", "v1");
    assert_eq!(other.read_reply(), invalidate(&["k"]));
    assert_eq!(client.request(&[b"EXEC"]), b"*1\r\n$2\r\nv1\r\n");
    set(&mut redis, "ns:k", "v2");
    assert_eq!(client.read_reply(), invalidate(&["k"]));
    nothing_pending(&mut client);
}

/// A client-side cache kept by a RESP3 tracking client (a value cached from each `GET`'s reply, dropped on
/// each invalidation, everything on a null), while a writer on Redis itself changes the same keys: once the writer
/// stops, every cached value is Redis' within the invalidation delay. A push written before the reply of a read
/// that holds the old value would leave that value cached for good.
#[test]
fn a_cache_kept_from_the_pushes_never_stays_stale() {
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let (backend, _gateway, _redis, mut client) = tracking(&[]);
    let keys: Vec<String> = (0..8).map(|i| format!("c:{i}")).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, keys, mut redis) = (Arc::clone(&stop), keys.clone(), backend.client());
        std::thread::spawn(move || {
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("ns:{}", keys[i % keys.len()]);
                let _: i64 = redis::cmd("INCR").arg(&key).query(&mut redis).unwrap();
                i += 1;
            }
        })
    };
    let mut cache: HashMap<String, Vec<u8>> = HashMap::new();
    // Reads one frame; pushes are applied to the cache, and the next frame is read until a reply comes.
    let reply = |client: &mut RawClient, cache: &mut HashMap<String, Vec<u8>>| loop {
        let frame = client.read_reply();
        if frame == FLUSHED {
            cache.clear();
        } else if let Some(rest) = frame.strip_prefix(&b">2\r\n$10\r\ninvalidate\r\n"[..]) {
            for key in &keys {
                if rest
                    .windows(key.len() + 4)
                    .any(|w| w == format!("\r\n{key}\r\n").as_bytes())
                {
                    cache.remove(key);
                }
            }
        } else {
            return frame;
        }
    };
    let started = std::time::Instant::now();
    let mut i = 0usize;
    while started.elapsed() < Duration::from_secs(2) {
        let key = &keys[i % keys.len()];
        i += 1;
        if !cache.contains_key(key) {
            client.send_command(&[b"GET", key.as_bytes()]);
            let value = reply(&mut client, &mut cache);
            cache.insert(key.clone(), value);
        }
        if i.is_multiple_of(16) {
            client.send_command(&[b"PING"]);
            assert_eq!(reply(&mut client, &mut cache), b"+PONG\r\n");
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let mut redis = backend.client();
    wait_for("the cache caught up", Duration::from_secs(2), || {
        client.send_command(&[b"PING"]);
        assert_eq!(reply(&mut client, &mut cache), b"+PONG\r\n");
        cache.iter().all(|(key, cached)| {
            let value: String = redis::cmd("GET")
                .arg(format!("ns:{key}"))
                .query(&mut redis)
                .unwrap();
            cached == &format!("${}\r\n{value}\r\n", value.len()).into_bytes()
        })
    });
}
