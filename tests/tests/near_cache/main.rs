//! The near cache against a real redis-server: hits that Redis never sees, and no stale read once Redis told the
//! gateway of a change (docs/near-cache.md): a direct write, expiry, FLUSHDB, a killed tracking connection, a
//! restarted backend, a namespace, the memory bound, and a checker of many writers and readers; the other reads
//! it answers (`reads`); a Redis Cluster route (`cluster`); replica reads (`replicas`).

mod cluster;
mod fills;
mod harness;
mod reads;
mod replicas;

use std::time::Duration;

use serde_json::json;
use switchyard_tests::{Gateway, RedisServer, command_calls, wait_for};

use harness::*;

#[test]
fn hot_reads_are_answered_from_memory_and_redis_never_sees_them() {
    let (_backend, gateway, mut redis, mut client) = with_k_cached();
    until_cached(&mut client, &mut redis, "missing", b"$-1\r\n");
    let before = command_calls(&mut redis, "get");
    for _ in 0..100 {
        assert_eq!(client.request(&[b"GET", b"k"]), bulk("v1"));
    }
    // A RESP3 client gets RESP3's null for the cached missing key.
    let mut resp3 = authed(&gateway, 3);
    assert_eq!(resp3.request(&[b"GET", b"missing"]), b"_\r\n");
    assert_eq!(resp3.request(&[b"GET", b"k"]), bulk("v1"));
    assert_eq!(
        command_calls(&mut redis, "get"),
        before,
        "GETs reached Redis"
    );
    assert!(gateway.metric("switchyard_near_cache_hits_total{tenant=\"demo\"}") >= 102);
    assert!(gateway.metric("switchyard_near_cache_bytes{tenant=\"demo\"}") > 0);
    assert!(gateway.metric("switchyard_near_cache_misses_total{tenant=\"demo\"}") >= 2);
}

#[test]
fn a_tenant_without_the_policy_is_not_cached_and_hot_keys_wait_for_their_reads() {
    let backend = RedisServer::start();
    let mut redis = backend.client();
    set(&mut redis, "k", "v");
    let plain = gateway(&backend, json!({}));
    let mut client = authed(&plain, 2);
    let before = command_calls(&mut redis, "get");
    for _ in 0..20 {
        assert_eq!(client.request(&[b"GET", b"k"]), bulk("v"));
    }
    assert_eq!(command_calls(&mut redis, "get"), before + 20);
    drop(plain);
    // "hot": a key read once is not filled; one read again and again is.
    let hot = gateway(&backend, json!({"near_cache": {"max_bytes": 1 << 20}}));
    let mut client = authed(&hot, 2);
    let before = command_calls(&mut redis, "get");
    assert_eq!(client.request(&[b"GET", b"k"]), bulk("v"));
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(client.request(&[b"GET", b"k"]), bulk("v"));
    assert_eq!(command_calls(&mut redis, "get"), before + 2, "no fill yet");
    until_cached(&mut client, &mut redis, "k", &bulk("v"));
}

#[test]
fn changes_by_other_clients_expiry_and_flushdb_reach_the_cache() {
    let (_backend, gateway, mut redis, mut client) = with_k_cached();
    set(&mut redis, "k", "v2");
    seen_within_delay(&mut client, "k", &bulk("v2"));
    assert!(gateway.metric("switchyard_near_cache_invalidations_total{tenant=\"demo\"}") >= 1);
    // A write through the gateway is read at once by the same connection, pipelined or not.
    until_cached(&mut client, &mut redis, "k", &bulk("v2"));
    client.roundtrip(b"SET k v3\r\n", b"+OK\r\n");
    assert_eq!(client.request(&[b"GET", b"k"]), bulk("v3"));
    until_cached(&mut client, &mut redis, "k", &bulk("v3"));
    client.send(b"SET k v4\r\nGET k\r\nINCR n\r\nGET n\r\n");
    client.expect(&[b"+OK\r\n".as_slice(), &bulk("v4"), b":1\r\n", &bulk("1")].concat());
    // Expiry: the entry goes no later than the key.
    client.roundtrip(b"SET t v PX 400\r\n", b"+OK\r\n");
    until_cached(&mut client, &mut redis, "t", &bulk("v"));
    std::thread::sleep(Duration::from_millis(450));
    assert_eq!(client.request(&[b"GET", b"t"]), b"$-1\r\n");
    // FLUSHDB from another client.
    until_cached(&mut client, &mut redis, "k", &bulk("v4"));
    let _: () = redis::cmd("FLUSHDB").query(&mut redis).unwrap();
    seen_within_delay(&mut client, "k", b"$-1\r\n");
}

#[test]
fn a_lost_tracking_connection_or_backend_drops_what_it_read() {
    let (backend, _gateway, mut redis, mut client) = with_k_cached();
    let port = backend.port();
    // Killed: Redis tells it nothing more; the write below must still be read.
    let id = tracking_client(&mut redis).expect("a tracking connection");
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(&id)
        .query(&mut redis)
        .unwrap();
    set(&mut redis, "k", "v2");
    seen_within_delay(&mut client, "k", &bulk("v2"));
    // It comes back, and caches again.
    until_cached(&mut client, &mut redis, "k", &bulk("v2"));
    // The backend restarts empty: nothing read before is served.
    drop(redis);
    drop(backend);
    let backend = RedisServer::builder().start_on(port);
    let mut redis = backend.client();
    set(&mut redis, "k", "v3");
    wait_for("the backend again", Duration::from_secs(10), || {
        client.request(&[b"GET", b"k"]) == bulk("v3")
    });
    for _ in 0..20 {
        assert_eq!(client.request(&[b"GET", b"k"]), bulk("v3"));
    }
    until_cached(&mut client, &mut redis, "k", &bulk("v3"));
}

/// A node that stops answering without closing the connection (here: stopped with SIGSTOP) fails the tracking
/// connection at its next heartbeat's timeout, which drops what it read, with no client asking anything.
#[test]
fn a_silent_node_is_noticed_by_the_heartbeat() {
    let backend = RedisServer::start();
    let gateway = Gateway::builder()
        .arg("--workers")
        .arg("1")
        .arg("--command-timeout-ms")
        .arg("300")
        .start(&routes(&backend, every_key(1 << 20)));
    let mut redis = backend.client();
    let mut client = authed(&gateway, 2);
    client.roundtrip(b"SET k v1\r\n", b"+OK\r\n");
    until_cached(&mut client, &mut redis, "k", &bulk("v1"));
    let bytes = "switchyard_near_cache_bytes{tenant=\"demo\"}";
    assert!(gateway.metric(bytes) > 0);
    backend.freeze();
    wait_for("the entries dropped", Duration::from_secs(5), || {
        gateway.metric(bytes) == 0
    });
    backend.thaw();
    until_cached(&mut client, &mut redis, "k", &bulk("v1"));
}

#[test]
fn a_namespaced_tenant_caches_its_keys_as_stored() {
    let backend = RedisServer::start();
    let mut tenant = every_key(1 << 20);
    tenant["namespace"] = json!("ns:");
    let gateway = gateway(&backend, tenant);
    let mut redis = backend.client();
    set(&mut redis, "ns:k", "v1");
    set(&mut redis, "k", "other");
    let mut client = authed(&gateway, 2);
    until_cached(&mut client, &mut redis, "k", &bulk("v1"));
    set(&mut redis, "k", "other2");
    set(&mut redis, "ns:k", "v2");
    seen_within_delay(&mut client, "k", &bulk("v2"));
    client.roundtrip(b"DEL k\r\n", b":1\r\n");
    assert_eq!(client.request(&[b"GET", b"k"]), b"$-1\r\n");
}

#[test]
fn the_cache_stays_within_its_bound_least_recently_read_first() {
    let backend = RedisServer::start();
    let max_bytes = 4000;
    let gateway = gateway(
        &backend,
        json!({"near_cache": {"max_bytes": max_bytes, "keys": "all", "max_value_bytes": 200}}),
    );
    let mut redis = backend.client();
    let mut client = authed(&gateway, 2);
    let value = "x".repeat(100);
    for i in 0..100 {
        client.roundtrip(format!("SET key:{i} {value}\r\n").as_bytes(), b"+OK\r\n");
    }
    for i in 0..100 {
        until_cached(&mut client, &mut redis, &format!("key:{i}"), &bulk(&value));
        let bytes = gateway.metric("switchyard_near_cache_bytes{tenant=\"demo\"}");
        assert!(bytes > 0 && bytes <= max_bytes as i64, "{bytes} bytes");
    }
    assert!(gateway.metric("switchyard_near_cache_evictions_total{tenant=\"demo\"}") > 50);
    // The most recently read key is still there; the first ones are gone.
    let before = command_calls(&mut redis, "get");
    assert_eq!(client.request(&[b"GET", b"key:99"]), bulk(&value));
    assert_eq!(command_calls(&mut redis, "get"), before);
    assert_eq!(client.request(&[b"GET", b"key:0"]), bulk(&value));
    assert!(command_calls(&mut redis, "get") > before);
    // A value over max_value_bytes is never cached.
    let big = "y".repeat(300);
    client.roundtrip(format!("SET big {big}\r\n").as_bytes(), b"+OK\r\n");
    for _ in 0..5 {
        let before = command_calls(&mut redis, "get");
        assert_eq!(client.request(&[b"GET", b"big"]), bulk(&big));
        assert!(command_calls(&mut redis, "get") > before);
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Several writers, straight to Redis and through the gateway, and readers through the gateway, on a few hot
/// keys (see `Checker`).
#[test]
fn readers_never_see_a_value_older_than_an_acknowledged_write() {
    check_one_redis(Shape::String, "hot");
}

/// A route change gives the tenant an empty cache: after the routes file moves it to another Redis, the first
/// read answers what that Redis holds.
#[test]
fn a_route_change_drops_what_was_cached() {
    let (_first, gateway, _redis, mut client) = with_k_cached();
    let second = RedisServer::start();
    set(&mut second.client(), "k", "elsewhere");
    gateway.reload(&routes(&second, every_key(1 << 20)));
    wait_for("the reload", Duration::from_secs(10), || {
        client.request(&[b"GET", b"k"]) == bulk("elsewhere")
    });
    let mut redis = second.client();
    until_cached(&mut client, &mut redis, "k", &bulk("elsewhere"));
}

/// A sentinel-managed master: cached; after a failover, writes and reads follow the new master, nothing read
/// from the former one is served, and the cache fills from the new one.
#[test]
fn a_sentinel_failover_drops_what_the_former_master_gave() {
    use switchyard_tests::SentinelGroup;
    let group = SentinelGroup::start(1, 3);
    let old_master = group.master_port();
    let gateway = Gateway::builder().arg("--workers").arg("1").start(&json!({
        "tenants": [{"name": "demo", "passwords": [PASSWORD], "near_cache": {"max_bytes": 1 << 20, "keys": "all"},
                     "route": {"type": "single", "target": group.url()}}]
    }));
    let mut client = authed(&gateway, 2);
    client.roundtrip(b"SET k v1\r\nSET j j1\r\n", b"+OK\r\n+OK\r\n");
    until_cached(&mut client, &mut group.client(old_master), "k", &bulk("v1"));
    until_cached(&mut client, &mut group.client(old_master), "j", &bulk("j1"));
    group.wait_in_sync();
    let new_master = group.fail_over_from(old_master);
    // A write through the gateway once it follows the new master (until the former one is demoted, it may
    // still take a write, which the failover then loses), then read at once.
    let mut master = group.client(new_master);
    wait_for("the gateway to follow", Duration::from_secs(20), || {
        client.request(&[b"SET", b"k", b"v2"]) == b"+OK\r\n"
            && redis::cmd("GET")
                .arg("k")
                .query::<Option<String>>(&mut master)
                .unwrap()
                == Some("v2".to_string())
    });
    assert_eq!(client.request(&[b"GET", b"k"]), bulk("v2"));
    until_cached(&mut client, &mut master, "k", &bulk("v2"));
    set(&mut master, "k", "v3");
    seen_within_delay(&mut client, "k", &bulk("v3"));
    // Cached from the former master, changed on the new one only.
    set(&mut master, "j", "j2");
    seen_within_delay(&mut client, "j", &bulk("j2"));
}

/// A double-written route that waits for the primary only: reads come from the primary, which the cache
/// tracks; writes through the gateway reach both copies and are read at once.
#[test]
fn a_double_written_route_caches_what_the_primary_holds() {
    let primary = RedisServer::start();
    let secondary = RedisServer::start();
    let gateway = Gateway::builder().arg("--workers").arg("1").start(&json!({
        "tenants": [{"name": "demo", "passwords": [PASSWORD], "near_cache": {"max_bytes": 1 << 20, "keys": "all"},
                     "route": {"type": "single", "target": {"write": {
                         "resources": [primary.url(), secondary.url()], "ack": "primary"}}}}]
    }));
    let mut redis = primary.client();
    let mut client = authed(&gateway, 2);
    client.roundtrip(b"SET k v1\r\n", b"+OK\r\n");
    until_cached(&mut client, &mut redis, "k", &bulk("v1"));
    set(&mut redis, "k", "v2");
    seen_within_delay(&mut client, "k", &bulk("v2"));
    until_cached(&mut client, &mut redis, "k", &bulk("v2"));
    client.roundtrip(b"SET k v3\r\n", b"+OK\r\n");
    assert_eq!(client.request(&[b"GET", b"k"]), bulk("v3"));
    let mut copy = secondary.client();
    wait_for("the copy", Duration::from_secs(10), || {
        redis::cmd("GET")
            .arg("k")
            .query::<Option<String>>(&mut copy)
            .unwrap()
            == Some("v3".into())
    });
}

/// The checker with two gateways caching the same keys (each one's writes reach the other's cache only by
/// Redis' invalidations) and writers straight to Redis, through a killed tracking connection, a restarted
/// backend (which keeps its data: every write acknowledged before is still there) and a route change.
#[test]
fn two_gateways_and_direct_writers_through_faults() {
    let mut backend = RedisServer::builder()
        .arg("--appendonly")
        .arg("yes")
        .arg("--appendfsync")
        .arg("always")
        .start();
    let first = gateway(&backend, every_key(1 << 20));
    let second = gateway(&backend, every_key(1 << 20));
    let checker = Checker {
        direct: backend.url(),
        cached: vec![first.url(Some(PASSWORD)), second.url(Some(PASSWORD))],
        keys: (0..4).map(|key| format!("hot:{key}")).collect(),
        shape: Shape::String,
        failures_allowed: true,
        replica_reads: false,
    };
    let pause = || std::thread::sleep(Duration::from_millis(1500));
    let reads = checker.run(Duration::from_secs(8), || {
        pause();
        let mut redis = backend.client();
        let killed = tracking_client(&mut redis).expect("a tracking connection");
        let _: () = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(&killed)
            .query(&mut redis)
            .unwrap();
        pause();
        backend.kill();
        backend.restart();
        pause();
        // The tenant given anew (a policy changed): its cache starts empty.
        second.reload(&routes(&backend, every_key(2 << 20)));
        pause();
    });
    assert_checked(&first, reads);
    assert_checked(&second, reads);
}

/// `INFO nearcache` shows the tenant's cache on this gateway (not in `INFO`: Redis' sections only).
#[test]
fn info_shows_the_tenants_near_cache() {
    let (_backend, _gateway, _redis, mut client) = with_k_cached();
    for _ in 0..9 {
        assert_eq!(client.request(&[b"GET", b"k"]), bulk("v1"));
    }
    let info = String::from_utf8(client.request(&[b"INFO", b"nearcache"])).unwrap();
    let field = |name: &str| -> f64 {
        info.lines()
            .find_map(|line| line.strip_prefix(&format!("{name}:")))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {info}"))
    };
    assert!(info.contains("# Nearcache\r\n"), "{info}");
    assert_eq!(field("near_cache_enabled"), 1.0);
    assert_eq!(field("near_cache_max_bytes"), f64::from(1 << 20));
    assert!(field("near_cache_bytes") > 0.0);
    assert!(field("near_cache_hits") >= 10.0);
    assert!(field("near_cache_misses") >= 1.0);
    assert!(field("near_cache_hit_ratio") > 0.5);
    let default = String::from_utf8(client.request(&[b"INFO"])).unwrap();
    assert!(!default.contains("Nearcache"), "{default}");
}
