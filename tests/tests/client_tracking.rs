//! `CLIENT TRACKING` for the gateway's own clients against a real redis-server (docs/near-cache.md "Client-side
//! caching through the gateway"): default mode (told once per read, with the client's own key names, never a
//! co-tenant's), `BCAST` with prefixes, `OPTIN`/`OPTOUT` with `CLIENT CACHING`, a RESP2 `REDIRECT` to a
//! `__redis__:invalidate` subscriber and a broken redirect, `FLUSHDB` and a killed watch (null invalidations),
//! Redis' error texts, and node-redis 6 with `clientSideCache`.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use switchyard_tests::{
    Gateway, RawClient, RedisCluster, RedisServer, client_with_flag, command_calls, wait_for,
    wait_for_slot_map_as,
};

const PASSWORD: &str = "s3cret-tracking";
const OTHER: &str = "s3cret-co-tenant";

/// Tenant `demo` on `backend`, with its co-tenant `other` (namespace `b:`) when `demo` has a namespace too
/// (without one, `demo` owns the database).
fn start(backend: &RedisServer, namespace: Option<&str>) -> Gateway {
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
    Gateway::builder().arg("--workers").arg("1").start(&routes)
}

fn authed(gateway: &Gateway, password: &str, protocol: u8) -> RawClient {
    let mut client = RawClient::connect(gateway.port());
    assert_eq!(client.request(&[b"AUTH", password.as_bytes()]), b"+OK\r\n");
    if protocol == 3 {
        assert!(client.request(&[b"HELLO", b"3"]).starts_with(b"%"));
    }
    client
}

/// A backend, a gateway with tenant `demo` (namespace `ns:`) and its co-tenant, a client of Redis itself, and
/// a RESP3 client of `demo` that tracks with `options`.
fn tracking(options: &[&[u8]]) -> (RedisServer, Gateway, redis::Connection, RawClient) {
    let backend = RedisServer::start();
    let gateway = start(&backend, Some("ns:"));
    let redis = backend.client();
    let mut client = authed(&gateway, PASSWORD, 3);
    assert_eq!(track(&mut client, options), b"+OK\r\n");
    (backend, gateway, redis, client)
}

/// `CLIENT TRACKING on` with `options`, sent by `client`: its reply.
fn track(client: &mut RawClient, options: &[&[u8]]) -> Vec<u8> {
    let mut args: Vec<&[u8]> = vec![b"CLIENT", b"TRACKING", b"on"];
    args.extend_from_slice(options);
    client.request(&args)
}

/// `client`'s id (`CLIENT ID`).
fn client_id(client: &mut RawClient) -> String {
    let id = client.request(&[b"CLIENT", b"ID"]);
    String::from_utf8_lossy(&id[1..id.len() - 2]).into_owned()
}

fn invalidate(keys: &[&str]) -> Vec<u8> {
    let mut push = format!(">2\r\n$10\r\ninvalidate\r\n*{}\r\n", keys.len()).into_bytes();
    for key in keys {
        push.extend_from_slice(format!("${}\r\n{key}\r\n", key.len()).as_bytes());
    }
    push
}

const FLUSHED: &[u8] = b">2\r\n$10\r\ninvalidate\r\n_\r\n";

fn set(redis: &mut redis::Connection, key: &str, value: &str) {
    let _: () = redis::cmd("SET").arg(key).arg(value).query(redis).unwrap();
}

/// `client` reads `key` (stored as `stored`), which is then written on Redis, and is told. A read sent before a
/// watch that is coming back (or new) is up is followed by a flush once it is, which also forgets what was read:
/// then it reads again.
fn told_again(client: &mut RawClient, redis: &mut redis::Connection, key: &str, stored: &str) {
    for attempt in 0.. {
        set(redis, stored, "before");
        assert_eq!(
            client.request(&[b"GET", key.as_bytes()]),
            b"$6\r\nbefore\r\n"
        );
        set(redis, stored, "after");
        match client.read_reply() {
            reply if reply == invalidate(&[key]) => return,
            reply => assert!(reply == FLUSHED && attempt < 3, "{reply:?}"),
        }
    }
}

/// Nothing waits on `client`'s connection: a `PING` is answered at once.
fn nothing_pending(client: &mut RawClient) {
    assert_eq!(
        String::from_utf8_lossy(&client.request(&[b"PING"])),
        "+PONG\r\n"
    );
}

#[test]
fn a_resp3_client_is_told_once_of_a_key_it_read_by_its_own_name_and_never_of_a_co_tenants() {
    let (_backend, gateway, mut redis, mut client) = tracking(&[]);
    assert_eq!(client.request(&[b"GET", b"k"]), b"_\r\n");
    // Written on Redis itself, twice: told once.
    set(&mut redis, "ns:k", "v1");
    assert_eq!(client.read_reply(), invalidate(&["k"]));
    set(&mut redis, "ns:k", "v2");
    nothing_pending(&mut client);
    // Read again, written through the gateway by another client of the tenant.
    assert_eq!(client.request(&[b"GET", b"k"]), b"$2\r\nv2\r\n");
    let mut writer = authed(&gateway, PASSWORD, 2);
    assert_eq!(writer.request(&[b"SET", b"k", b"v3"]), b"+OK\r\n");
    assert_eq!(client.read_reply(), invalidate(&["k"]));
    // The co-tenant writes its own `k` (and a key named as this tenant's, under its own namespace): nothing.
    assert_eq!(
        client.request(&[b"MGET", b"k", b"j"]),
        b"*2\r\n$2\r\nv3\r\n_\r\n"
    );
    let mut other = authed(&gateway, OTHER, 3);
    assert_eq!(other.request(&[b"SET", b"k", b"x"]), b"+OK\r\n");
    assert_eq!(other.request(&[b"SET", b"ns:k", b"x"]), b"+OK\r\n");
    nothing_pending(&mut client);
    set(&mut redis, "ns:j", "1");
    assert_eq!(client.read_reply(), invalidate(&["j"]));
    assert_eq!(
        client.request(&[b"CLIENT", b"TRACKINGINFO"]),
        b"%3\r\n$5\r\nflags\r\n~1\r\n$2\r\non\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*0\r\n"
    );
    assert_eq!(client.request(&[b"CLIENT", b"GETREDIR"]), b":0\r\n");
    // Off: told nothing more.
    assert_eq!(
        client.request(&[b"CLIENT", b"TRACKING", b"off"]),
        b"+OK\r\n"
    );
    set(&mut redis, "ns:k", "v4");
    nothing_pending(&mut client);
    assert_eq!(client.request(&[b"CLIENT", b"GETREDIR"]), b":-1\r\n");
}

#[test]
fn bcast_tells_every_change_under_the_clients_prefixes_in_its_namespace() {
    let (backend, _gateway, mut redis, mut client) = tracking(&[b"BCAST", b"PREFIX", b"user:"]);
    set(&mut redis, "ns:order:1", "x");
    set(&mut redis, "b:user:1", "x"); // the co-tenant's
    set(&mut redis, "ns:user:1", "x");
    assert_eq!(client.read_reply(), invalidate(&["user:1"]));
    nothing_pending(&mut client);
    assert_eq!(
        client.request(&[b"CLIENT", b"TRACKINGINFO"]),
        b"%3\r\n$5\r\nflags\r\n~2\r\n$2\r\non\r\n$5\r\nbcast\r\n$8\r\nredirect\r\n:0\r\n$8\r\nprefixes\r\n*1\r\n$5\r\nuser:\r\n"
    );
    // A tenant without a namespace gets no BCAST: Redis would broadcast other databases' keys.
    let plain = start(&backend, None);
    let mut client = authed(&plain, PASSWORD, 3);
    let refused = track(&mut client, &[b"BCAST"]);
    assert!(refused.starts_with(b"-ERR CLIENT TRACKING BCAST is not supported by the gateway for a tenant without a key namespace"), "{}", String::from_utf8_lossy(&refused));
}

#[test]
fn optin_and_optout_track_what_client_caching_selects() {
    let backend = RedisServer::start();
    let gateway = start(&backend, None);
    let mut redis = backend.client();
    let mut optin = authed(&gateway, PASSWORD, 3);
    assert_eq!(track(&mut optin, &[b"OPTIN"]), b"+OK\r\n");
    assert_eq!(optin.request(&[b"GET", b"a"]), b"_\r\n");
    assert_eq!(optin.request(&[b"CLIENT", b"CACHING", b"yes"]), b"+OK\r\n");
    assert_eq!(optin.request(&[b"GET", b"b"]), b"_\r\n");
    assert_eq!(optin.request(&[b"GET", b"c"]), b"_\r\n");
    let mut optout = authed(&gateway, PASSWORD, 3);
    assert_eq!(track(&mut optout, &[b"OPTOUT"]), b"+OK\r\n");
    assert_eq!(optout.request(&[b"CLIENT", b"CACHING", b"no"]), b"+OK\r\n");
    assert_eq!(optout.request(&[b"GET", b"a"]), b"_\r\n");
    assert_eq!(optout.request(&[b"GET", b"b"]), b"_\r\n");
    for key in ["a", "b", "c"] {
        set(&mut redis, key, "1");
    }
    assert_eq!(optin.read_reply(), invalidate(&["b"]));
    assert_eq!(optout.read_reply(), invalidate(&["b"]));
    nothing_pending(&mut optin);
    nothing_pending(&mut optout);
}

#[test]
fn a_resp2_client_redirects_to_a_subscriber_and_a_resp3_client_is_told_its_redirect_broke() {
    let backend = RedisServer::start();
    let gateway = start(&backend, Some("ns:"));
    let mut redis = backend.client();
    let mut subscriber = authed(&gateway, PASSWORD, 2);
    let id = client_id(&mut subscriber);
    subscriber.roundtrip(
        b"SUBSCRIBE __redis__:invalidate\r\n",
        b"*3\r\n$9\r\nsubscribe\r\n$20\r\n__redis__:invalidate\r\n:1\r\n",
    );
    let mut client = authed(&gateway, PASSWORD, 2);
    assert_eq!(
        track(&mut client, &[b"REDIRECT", id.as_bytes()]),
        b"+OK\r\n"
    );
    assert_eq!(
        client.request(&[b"CLIENT", b"GETREDIR"]),
        format!(":{id}\r\n").as_bytes()
    );
    assert_eq!(client.request(&[b"GET", b"k"]), b"$-1\r\n");
    set(&mut redis, "ns:k", "1");
    let message = b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n";
    subscriber.expect(&[&message[..], b"*1\r\n$1\r\nk\r\n"].concat());
    // A flush: the null of the tracking client's protocol, as Redis sends it.
    let _: () = redis::cmd("FLUSHDB").query(&mut redis).unwrap();
    subscriber.expect(&[&message[..], b"$-1\r\n"].concat());
    // A client of another tenant cannot be redirected to, nor can one that does not exist.
    let mut other = authed(&gateway, OTHER, 2);
    let other_id = client_id(&mut other);
    for missing in [other_id.as_bytes(), b"999999"] {
        assert_eq!(
            String::from_utf8_lossy(&track(&mut client, &[b"REDIRECT", missing])),
            "-ERR The client ID you want redirect to does not exist\r\n"
        );
    }
    // The subscriber goes: a RESP3 client redirecting to it is told so.
    let mut resp3 = authed(&gateway, PASSWORD, 3);
    assert_eq!(track(&mut resp3, &[b"REDIRECT", id.as_bytes()]), b"+OK\r\n");
    assert_eq!(resp3.request(&[b"GET", b"k"]), b"_\r\n");
    drop(subscriber);
    wait_for("the subscriber gone", Duration::from_secs(5), || {
        !String::from_utf8_lossy(&resp3.request(&[b"CLIENT", b"LIST"]))
            .contains(&format!("id={id} "))
    });
    set(&mut redis, "ns:k", "2");
    assert_eq!(
        resp3.read_reply(),
        format!(">2\r\n$21\r\ntracking-redir-broken\r\n:{id}\r\n").as_bytes()
    );
    let info = resp3.request(&[b"CLIENT", b"TRACKINGINFO"]);
    assert!(String::from_utf8_lossy(&info).contains("broken_redirect"));
}

#[test]
fn a_flush_or_a_lost_watch_tells_the_client_to_drop_everything() {
    let (_backend, _gateway, mut redis, mut client) = tracking(&[]);
    assert_eq!(client.request(&[b"GET", b"k"]), b"_\r\n");
    let _: () = redis::cmd("FLUSHDB").query(&mut redis).unwrap();
    assert_eq!(client.read_reply(), FLUSHED);
    // The watch is killed on Redis: the client drops everything, and is told again once it is back.
    let id = client_with_flag(&mut redis, 'B').expect("a broadcasting connection");
    let kill: redis::RedisResult<()> = redis::cmd("CLIENT")
        .arg(&["KILL", "ID", &id])
        .query(&mut redis);
    kill.unwrap();
    assert_eq!(client.read_reply(), FLUSHED);
    wait_for("the watch back", Duration::from_secs(10), || {
        client_with_flag(&mut redis, 'B').is_some_and(|new| new != id)
    });
    told_again(&mut client, &mut redis, "k", "ns:k");
}

#[test]
fn bad_combinations_get_redis_errors() {
    let backend = RedisServer::start();
    let gateway = start(&backend, Some("ns:"));
    let mut client = authed(&gateway, PASSWORD, 3);
    let mut direct = RawClient::connect_speaking(backend.port(), 3);
    let cases: &[&[&[u8]]] = &[
        &[b"CLIENT", b"TRACKING", b"on", b"PREFIX", b"a"],
        &[b"CLIENT", b"TRACKING", b"on", b"OPTIN", b"OPTOUT"],
        &[b"CLIENT", b"TRACKING", b"on", b"BCAST", b"OPTIN"],
        &[
            b"CLIENT",
            b"TRACKING",
            b"on",
            b"BCAST",
            b"PREFIX",
            b"a",
            b"PREFIX",
            b"ab",
        ],
        &[b"CLIENT", b"TRACKING", b"on", b"REDIRECT", b"x"],
        &[b"CLIENT", b"TRACKING", b"maybe"],
        &[b"CLIENT", b"CACHING", b"yes"],
        &[b"CLIENT", b"TRACKINGINFO"],
        &[b"CLIENT", b"GETREDIR"],
        &[b"CLIENT", b"TRACKING", b"on", b"OPTIN"],
        &[b"CLIENT", b"CACHING", b"no"],
        &[b"CLIENT", b"TRACKING", b"on", b"OPTOUT"],
        &[b"CLIENT", b"TRACKING", b"on", b"BCAST"],
        &[b"CLIENT", b"CACHING", b"yes"],
        &[b"CLIENT", b"TRACKINGINFO"],
    ];
    for case in cases {
        assert_eq!(
            String::from_utf8_lossy(&client.request(case)),
            String::from_utf8_lossy(&direct.request(case)),
            "{:?}",
            case.iter()
                .map(|a| String::from_utf8_lossy(a))
                .collect::<Vec<_>>()
        );
    }
}

/// node-redis 6 with `clientSideCache`: the second read is answered from its cache (no second `GET` reaches
/// Redis), and a write by another client invalidates it.
const NODE_SCRIPT: &str = r#"
const assert = require('assert');
const { createClient, BasicClientSideCache } = require('redis');
(async () => {
  const url = `redis://default:${process.env.PASSWORD}@127.0.0.1:${process.env.PORT}`;
  const cache = new BasicClientSideCache();
  const client = createClient({ url, RESP: 3, clientSideCache: cache });
  const writer = createClient({ url });
  await client.connect();
  await writer.connect();
  await writer.set('k', 'v1');
  for (let i = 0; i < 5; i++) assert.equal(await client.get('k'), 'v1');
  assert.equal(cache.stats().hitCount, 4);
  await writer.set('k', 'v2');
  const deadline = Date.now() + 2000;
  let value;
  while ((value = await client.get('k')) !== 'v2' && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  assert.equal(value, 'v2');
  for (let i = 0; i < 5; i++) assert.equal(await client.get('k'), 'v2');
  await client.quit();
  await writer.quit();
  console.log('ok');
})().catch((e) => { console.error(e); process.exit(1); });
"#;

#[test]
fn node_redis_client_side_cache_works_through_the_gateway() {
    let backend = RedisServer::start();
    let gateway = start(&backend, Some("ns:"));
    let mut redis = backend.client();
    let modules =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/node-clients/node_modules");
    let before = command_calls(&mut redis, "get");
    let output = Command::new("node")
        .arg("-e")
        .arg(NODE_SCRIPT)
        .env("NODE_PATH", &modules)
        .env("PORT", gateway.port().to_string())
        .env("PASSWORD", PASSWORD)
        .output()
        .expect("run node (scripts/test installs node-redis)");
    assert!(
        output.status.success() && output.stdout == b"ok\n",
        "node-redis failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    // One GET before the write, one after it: every other read was a hit.
    assert_eq!(command_calls(&mut redis, "get"), before + 2);
}

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

/// Through `route` (the tenant namespaced `ns:`), a tracking client's reads of keys on every node of `nodes`:
/// each node is watched, and each key's change is told once.
fn every_node_watched(route: Value, mut nodes: Vec<redis::Connection>, cluster: bool) {
    let routes = json!({"tenants": [{"name": "demo", "passwords": [PASSWORD], "namespace": "ns:",
        "route": route}]});
    let gateway = Gateway::builder().arg("--workers").arg("1").start(&routes);
    if cluster {
        wait_for_slot_map_as(gateway.port(), Some(PASSWORD));
    }
    let mut client = authed(&gateway, PASSWORD, 3);
    assert_eq!(track(&mut client, &[]), b"+OK\r\n");
    let keys: Vec<String> = (0..12).map(|i| format!("key:{i}")).collect();
    for key in &keys {
        assert_eq!(client.request(&[b"GET", key.as_bytes()]), b"_\r\n");
    }
    for (i, node) in nodes.iter_mut().enumerate() {
        assert!(client_with_flag(node, 'B').is_some(), "node {i} watched");
    }
    let mut writer = authed(&gateway, PASSWORD, 2);
    for key in &keys {
        assert_eq!(writer.request(&[b"SET", key.as_bytes(), b"1"]), b"+OK\r\n");
    }
    // The pushes come from each node's watch: in any order, each key once.
    let told: BTreeSet<Vec<u8>> = keys.iter().map(|_| client.read_reply()).collect();
    let expected: BTreeSet<Vec<u8>> = keys.iter().map(|key| invalidate(&[key])).collect();
    assert_eq!(told, expected);
    nothing_pending(&mut client);
}

#[test]
fn on_a_cluster_every_master_is_watched() {
    let cluster = RedisCluster::start(3, 0, None);
    let masters = cluster.masters();
    let nodes = masters.iter().map(|m| cluster.client(m.port)).collect();
    every_node_watched(
        json!({"type": "single", "target": cluster.url()}),
        nodes,
        true,
    );
}

#[test]
fn on_a_sharded_route_every_shard_is_watched() {
    let shards: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let route = json!({"type": "sharded", "shards": shards.iter().enumerate()
        .map(|(i, s)| json!({"name": format!("s{i}"), "target": s.url()})).collect::<Vec<_>>()});
    let nodes = shards.iter().map(RedisServer::client).collect();
    every_node_watched(route, nodes, false);
}

#[test]
fn a_new_route_tells_the_client_to_drop_everything_and_the_new_node_is_watched() {
    let (first, second) = (RedisServer::start(), RedisServer::start());
    let routes = |backend: &RedisServer| {
        json!({"tenants": [{"name": "demo", "passwords": [PASSWORD], "namespace": "ns:",
            "route": {"type": "single", "target": backend.url()}}]})
    };
    let gateway = Gateway::builder()
        .arg("--workers")
        .arg("1")
        .start(&routes(&first));
    let mut client = authed(&gateway, PASSWORD, 3);
    assert_eq!(track(&mut client, &[]), b"+OK\r\n");
    assert_eq!(client.request(&[b"GET", b"k"]), b"_\r\n");
    // The client is idle: the new route reaches it all the same.
    gateway.reload(&routes(&second));
    assert_eq!(client.read_reply(), FLUSHED);
    // Reads on the second node are tracked.
    told_again(&mut client, &mut second.client(), "k", "ns:k");
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
