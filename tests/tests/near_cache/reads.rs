//! The reads the near cache answers besides `GET` (`HGET`, `HMGET`, `HGETALL`, `SMEMBERS`, `STRLEN`, one-key
//! `EXISTS`): each answered byte for byte as Redis answers it in the client's protocol, every read of a key
//! dropped by any change to it, errors and replies over `max_value_bytes` never kept.

use std::time::Duration;

use serde_json::json;
use switchyard_tests::{RawClient, RedisServer, command_calls};

use super::harness::*;

/// The reads of one test, each as its arguments.
const READS: &[&[&str]] = &[
    &["HGET", "h", "f1"],
    &["HGET", "h", "nope"],
    &["HGET", "nokey", "f1"],
    &["HMGET", "h", "f1", "nope", "f2"],
    &["HGETALL", "h"],
    &["HGETALL", "nokey"],
    &["SMEMBERS", "s"],
    &["SMEMBERS", "nokey"],
    &["STRLEN", "str"],
    &["EXISTS", "str"],
    &["EXISTS", "nokey"],
    &["GET", "str"],
];

fn args<'a>(read: &[&'a str]) -> Vec<&'a [u8]> {
    read.iter().map(|a| a.as_bytes()).collect()
}

/// Redis' own reply to `read`, in `protocol`.
fn from_redis(backend: &RedisServer, protocol: u8, read: &[&str]) -> Vec<u8> {
    RawClient::connect_speaking(backend.port(), protocol).request(&args(read))
}

#[test]
fn hash_set_and_string_reads_are_answered_from_memory_in_both_protocols() {
    let backend = RedisServer::start();
    let gateway = gateway(&backend, every_key(1 << 20));
    let mut redis = backend.client();
    let () = redis::cmd("HSET")
        .arg(&["h", "f1", "a", "f2", "bb"])
        .query::<i64>(&mut redis)
        .map(drop)
        .unwrap();
    let () = redis::cmd("SADD")
        .arg(&["s", "x", "yy", "zzz", "7"])
        .query::<i64>(&mut redis)
        .map(drop)
        .unwrap();
    set(&mut redis, "str", "value");
    for protocol in [2, 3] {
        let mut client = authed(&gateway, protocol);
        let expected: Vec<Vec<u8>> = READS
            .iter()
            .map(|read| from_redis(&backend, protocol, read))
            .collect();
        for (read, expected) in READS.iter().zip(&expected) {
            until_cached_as(
                &mut client,
                std::slice::from_mut(&mut redis),
                &args(read),
                expected,
            );
        }
        // All of them at once, pipelined, twice: Redis sees none.
        let before: Vec<u64> = READS
            .iter()
            .map(|read| command_calls(&mut redis, &read[0].to_lowercase()))
            .collect();
        for _ in 0..2 {
            for read in READS {
                client.send_command(&args(read));
            }
            for expected in &expected {
                assert_eq!(
                    String::from_utf8_lossy(&client.read_reply()),
                    String::from_utf8_lossy(expected)
                );
            }
        }
        let after: Vec<u64> = READS
            .iter()
            .map(|read| command_calls(&mut redis, &read[0].to_lowercase()))
            .collect();
        assert_eq!(before, after, "reads reached Redis (RESP{protocol})");
    }
    // The RESP2 and RESP3 forms differ where Redis' do: the map and the set.
    assert!(from_redis(&backend, 3, &["HGETALL", "h"]).starts_with(b"%2\r\n"));
    assert!(from_redis(&backend, 2, &["HGETALL", "h"]).starts_with(b"*4\r\n"));
    assert!(from_redis(&backend, 3, &["SMEMBERS", "s"]).starts_with(b"~4\r\n"));
    assert!(gateway.metric("switchyard_near_cache_hits_total{tenant=\"demo\"}") >= 48);
}

#[test]
fn any_change_to_a_key_drops_every_read_of_it() {
    let backend = RedisServer::start();
    let gateway = gateway(&backend, every_key(1 << 20));
    let mut redis = backend.client();
    let mut client = authed(&gateway, 3);
    client.roundtrip(b"HSET h f1 a f2 b\r\n", b":2\r\n");
    let node = std::slice::from_mut(&mut redis);
    until_cached_as(&mut client, node, &[b"HGET", b"h", b"f1"], &bulk("a"));
    until_cached_as(&mut client, node, &[b"HGET", b"h", b"f2"], &bulk("b"));
    let all = |f1: &str, f2: &str| {
        [
            b"%2\r\n".as_slice(),
            &bulk("f1"),
            &bulk(f1),
            &bulk("f2"),
            &bulk(f2),
        ]
        .concat()
    };
    until_cached_as(&mut client, node, &[b"HGETALL", b"h"], &all("a", "b"));
    // Changed on Redis: one field, and every read of the key sees it.
    let () = redis::cmd("HSET")
        .arg(&["h", "f2", "c"])
        .query::<i64>(&mut redis)
        .map(drop)
        .unwrap();
    seen_as_within_delay(&mut client, &[b"HGETALL", b"h"], &all("a", "c"));
    seen_as_within_delay(&mut client, &[b"HGET", b"h", b"f2"], &bulk("c"));
    assert_eq!(client.request(&[b"HGET", b"h", b"f1"]), bulk("a"));
    // Changed through the gateway: read at once, pipelined or not.
    let node = std::slice::from_mut(&mut redis);
    until_cached_as(&mut client, node, &[b"HGET", b"h", b"f1"], &bulk("a"));
    until_cached_as(&mut client, node, &[b"HGETALL", b"h"], &all("a", "c"));
    client.send(b"HSET h f1 z\r\nHGET h f1\r\nHGETALL h\r\n");
    client.expect(&[b":0\r\n".as_slice(), &bulk("z"), &all("z", "c")].concat());
    // A set: a member added on Redis, one removed through the gateway; a key deleted.
    client.roundtrip(b"SADD s m\r\n", b":1\r\n");
    until_cached_as(
        &mut client,
        node,
        &[b"SMEMBERS", b"s"],
        b"~1\r\n$1\r\nm\r\n",
    );
    until_cached_as(&mut client, node, &[b"EXISTS", b"s"], b":1\r\n");
    let () = redis::cmd("SADD")
        .arg(&["s", "n"])
        .query::<i64>(&mut redis)
        .map(drop)
        .unwrap();
    let both = from_redis(&backend, 3, &["SMEMBERS", "s"]);
    assert!(both.starts_with(b"~2\r\n"), "{both:?}");
    seen_as_within_delay(&mut client, &[b"SMEMBERS", b"s"], &both);
    client.send(b"SREM s m n\r\nSMEMBERS s\r\nEXISTS s\r\n");
    client.expect(b":2\r\n~0\r\n:0\r\n");
    assert!(gateway.metric("switchyard_near_cache_invalidations_total{tenant=\"demo\"}") >= 3);
}

#[test]
fn errors_and_replies_over_max_value_bytes_are_not_cached() {
    let backend = RedisServer::start();
    let gateway = gateway(
        &backend,
        json!({"near_cache": {"max_bytes": 1 << 20, "keys": "all", "max_value_bytes": 100}}),
    );
    let mut redis = backend.client();
    let mut client = authed(&gateway, 2);
    set(&mut redis, "str", "v");
    let wrongtype = b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
    let big = "x".repeat(60);
    let () = redis::cmd("HSET")
        .arg(&["h", "small", "s", "big1", &big, "big2", &big])
        .query::<i64>(&mut redis)
        .map(drop)
        .unwrap();
    // Neither WRONGTYPE nor a reply of 100 bytes and more is kept: each read reaches Redis.
    for (read, expected) in [
        (&[&b"HGET"[..], b"str", b"f"][..], wrongtype.to_vec()),
        (&[&b"SMEMBERS"[..], b"str"][..], wrongtype.to_vec()),
        (
            &[&b"HGETALL"[..], b"h"][..],
            from_redis(&backend, 2, &["HGETALL", "h"]),
        ),
    ] {
        let command = String::from_utf8_lossy(read[0]).to_lowercase();
        for _ in 0..5 {
            let before = command_calls(&mut redis, &command);
            assert_eq!(client.request(read), expected);
            assert!(
                command_calls(&mut redis, &command) > before,
                "{command} answered from memory"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // A small reply of the same key is.
    until_cached_as(
        &mut client,
        std::slice::from_mut(&mut redis),
        &[b"HGET", b"h", b"small"],
        &bulk("s"),
    );
}

/// The stale-read checker on a hash, read with `HGET`, `HGETALL` and `HMGET` in turn.
#[test]
fn hash_readers_never_see_a_value_older_than_an_acknowledged_write() {
    check_one_redis(Shape::Hash, "hash");
}

#[test]
fn hits_in_a_pipeline_keep_their_places_among_forwarded_commands_and_writes() {
    let backend = RedisServer::start();
    let gateway = gateway(&backend, every_key(1 << 20));
    let mut redis = backend.client();
    set(&mut redis, "a", "va");
    set(&mut redis, "b", "vb");
    let mut client = authed(&gateway, 2);
    until_cached(&mut client, &mut redis, "a", &bulk("va"));
    until_cached(&mut client, &mut redis, "b", &bulk("vb"));
    let gets = command_calls(&mut redis, "get");
    // Runs of hits, broken by a forwarded command, a write and its read, and a hit again.
    client.send(
        b"GET a\r\nGET b\r\nGET a\r\nINCR n\r\nGET b\r\nGET a\r\nECHO x\r\nSET b vb2\r\nGET b\r\nGET a\r\n",
    );
    for expected in [
        bulk("va"),
        bulk("vb"),
        bulk("va"),
        b":1\r\n".to_vec(),
        bulk("vb"),
        bulk("va"),
        bulk("x"),
        b"+OK\r\n".to_vec(),
        bulk("vb2"),
        bulk("va"),
    ] {
        client.expect(&expected);
    }
    // Only the read after the write reached Redis (its fill).
    assert_eq!(command_calls(&mut redis, "get") - gets, 1);
}
