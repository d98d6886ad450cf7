//! The near cache's fills, against a redis-server behind a relay that holds back one command (tests/src/relay.rs):
//! a fill overtaken by a change stores nothing, reads that miss while a fill (or a write of their key) is in
//! flight wait for it instead of each going to Redis, an entry answers other clients while a write of its key is
//! in flight (not its writer), and a waiting read keeps its place among the client's replies
//! (docs/near-cache.md).

use std::thread;
use std::time::{Duration, Instant};

use switchyard_tests::{Gateway, RawClient, RedisServer, Relay, command_calls};

use super::harness::*;

/// How long the relay holds back the command a test puts something behind.
const HELD: Duration = Duration::from_millis(400);

/// A backend with `k` = `v1`, a relay in front of it, and a gateway whose tenant caches every key it reads, on
/// the relay.
fn setup() -> (RedisServer, Relay, Gateway, redis::Connection) {
    let backend = RedisServer::start();
    let mut redis = backend.client();
    set(&mut redis, "k", "v1");
    let relay = Relay::start(backend.port());
    let routes = routed(relay.url().into(), every_key(1 << 20));
    let gateway = Gateway::builder().arg("--workers").arg("1").start(&routes);
    (backend, relay, gateway, redis)
}

/// A client of the gateway once the tenant's tracking connection is up (it connects at the tenant's first read,
/// which goes to Redis meanwhile): a key it does not use is cached.
fn client_once_tracking(gateway: &Gateway, redis: &mut redis::Connection) -> RawClient {
    let mut client = authed(gateway, 2);
    until_cached(&mut client, redis, "other", b"$-1\r\n");
    client
}

#[test]
fn a_fill_overtaken_by_a_change_stores_nothing() {
    let (_backend, relay, gateway, mut redis) = setup();
    let mut client = client_once_tracking(&gateway, &mut redis);
    // The fill's PTTL reaches Redis well after its GET: a change lands between the two.
    relay.hold("PTTL", HELD);
    let reader = thread::spawn(move || client.request(&[b"GET", b"k"]));
    thread::sleep(HELD / 4);
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v2")
        .query(&mut redis)
        .unwrap();
    // The read started the fill, whose GET ran while it was in progress: v1 is its answer.
    assert_eq!(reader.join().unwrap(), bulk("v1"));
    relay.release();
    // The fill read v1 and then heard of the change before it was complete: it stored nothing, so no read
    // answers v1 again (stored, it would stay: Redis tells a change once per read).
    let mut client = authed(&gateway, 2);
    for _ in 0..20 {
        assert_eq!(client.request(&[b"GET", b"k"]), bulk("v2"));
    }
    until_cached(&mut client, &mut redis, "k", &bulk("v2"));
}

#[test]
fn reads_that_miss_during_a_fill_wait_for_it_and_redis_sees_one_get() {
    let (_backend, relay, gateway, mut redis) = setup();
    let mut client = client_once_tracking(&gateway, &mut redis);
    relay.hold("PTTL", HELD);
    let before = command_calls(&mut redis, "get");
    let readers: Vec<_> = (0..10)
        .map(|i| {
            let mut client = authed(&gateway, 2);
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(20 * i));
                client.request(&[b"GET", b"k"])
            })
        })
        .collect();
    for reader in readers {
        assert_eq!(reader.join().unwrap(), bulk("v1"));
    }
    assert_eq!(
        command_calls(&mut redis, "get") - before,
        1,
        "every read but the fill's GET waited for it"
    );
    relay.release();
    until_cached(&mut client, &mut redis, "k", &bulk("v1"));
}

#[test]
fn reads_of_a_key_not_cached_during_a_write_of_it_wait_for_the_fill_after_it() {
    let (_backend, relay, gateway, mut redis) = setup();
    let mut client = client_once_tracking(&gateway, &mut redis);
    // The write through the gateway reaches Redis late.
    relay.hold("SET", HELD);
    let mut writer = authed(&gateway, 2);
    let write = thread::spawn(move || writer.request(&[b"SET", b"k", b"v2"]));
    thread::sleep(HELD / 4);
    let before = command_calls(&mut redis, "get");
    let readers: Vec<_> = (0..5)
        .map(|_| {
            let mut client = authed(&gateway, 2);
            thread::spawn(move || client.request(&[b"GET", b"k"]))
        })
        .collect();
    // The reads are answered by a fill sent once the write is: they see it.
    for reader in readers {
        assert_eq!(reader.join().unwrap(), bulk("v2"));
    }
    assert_eq!(write.join().unwrap(), b"+OK\r\n");
    assert_eq!(command_calls(&mut redis, "get") - before, 1);
    relay.release();
    until_cached(&mut client, &mut redis, "k", &bulk("v2"));
}

#[test]
fn other_clients_read_the_entry_from_before_a_write_in_flight_and_the_writer_its_write() {
    let (_backend, relay, gateway, mut redis) = setup();
    let mut client = authed(&gateway, 2);
    until_cached(&mut client, &mut redis, "k", &bulk("v1"));
    // The write through the gateway reaches Redis late; its client reads the key right after it.
    relay.hold("SET", HELD);
    let mut writer = authed(&gateway, 2);
    let started = Instant::now();
    let write = thread::spawn(move || {
        writer.send(b"SET k v2\r\nGET k\r\n");
        writer.expect(b"+OK\r\n");
        writer.expect(&bulk("v2"));
        started.elapsed()
    });
    thread::sleep(HELD / 4);
    let before = command_calls(&mut redis, "get");
    // Reads by other clients meanwhile run concurrently with the write: the entry answers them, at once.
    for _ in 0..5 {
        let mut reader = authed(&gateway, 2);
        assert_eq!(reader.request(&[b"GET", b"k"]), bulk("v1"));
    }
    assert!(
        started.elapsed() < HELD / 2,
        "the reads waited for the write: {:?}",
        started.elapsed()
    );
    assert_eq!(command_calls(&mut redis, "get"), before);
    assert!(write.join().unwrap() >= HELD);
    // Once the write is answered, nobody reads what the key held before it.
    assert_eq!(client.request(&[b"GET", b"k"]), bulk("v2"));
    relay.release();
    until_cached(&mut client, &mut redis, "k", &bulk("v2"));
}

#[test]
fn a_read_waiting_for_a_fill_keeps_its_place_among_the_client_replies() {
    let (_backend, relay, gateway, mut redis) = setup();
    let mut client = client_once_tracking(&gateway, &mut redis);
    relay.hold("PTTL", HELD);
    // One write: the GET waits for its fill, and the SET and GET after it for its reply.
    client.send(b"GET k\r\nSET k v2\r\nGET k\r\nGET other\r\n");
    client.expect(&bulk("v1"));
    client.expect(b"+OK\r\n");
    client.expect(&bulk("v2"));
    client.expect(b"$-1\r\n");
    relay.release();
    until_cached(&mut client, &mut redis, "k", &bulk("v2"));
}
