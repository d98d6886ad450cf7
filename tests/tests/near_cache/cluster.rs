//! The near cache on a Redis Cluster route: each key filled from and tracked on its slot's master, changes made
//! on the nodes seen, no stale read across a manual failover and the resharding of the hot keys' slot (the
//! checker runs throughout, its writes around the cache going through another gateway, which follows the
//! cluster as any client would), and a slot taken over by another master read there once the slot map says so.

use std::time::Duration;

use serde_json::json;
use switchyard_schemas::placement::{crc16, hash_tag};
use switchyard_tests::{ClusterNode, Gateway, RedisCluster, wait_for};

use super::harness::*;

fn slot(key: &str) -> usize {
    usize::from(crc16(hash_tag(key.as_bytes())) % 16384)
}

/// A gateway with one worker serving the tenant on `target`, once it knows the cluster's slot map.
fn cluster_gateway(target: serde_json::Value, tenant: serde_json::Value) -> Gateway {
    let gateway = Gateway::builder()
        .arg("--workers")
        .arg("1")
        .start(&routed(target, tenant));
    switchyard_tests::wait_for_slot_map_as(gateway.port(), Some(PASSWORD));
    gateway
}

/// A connection to each live node.
fn every_node(cluster: &RedisCluster) -> Vec<redis::Connection> {
    cluster
        .live_ports()
        .into_iter()
        .map(|port| cluster.client(port))
        .collect()
}

#[test]
fn each_key_is_cached_from_its_slots_master_and_changes_there_are_seen() {
    let cluster = RedisCluster::start(3, 0, None);
    let gateway = cluster_gateway(json!(cluster.url()), every_key(1 << 20));
    let owners = cluster.slot_owners();
    // Keys on every master.
    let keys: Vec<String> = (0..12).map(|i| format!("key:{i}")).collect();
    let masters: std::collections::HashSet<u16> = keys.iter().map(|k| owners[slot(k)]).collect();
    assert_eq!(masters.len(), 3, "keys on every master");
    for protocol in [2, 3] {
        let mut client = authed(&gateway, protocol);
        let mut nodes = every_node(&cluster);
        for key in &keys {
            let value = format!("{key}-{protocol}");
            client.roundtrip(
                &[
                    b"SET ".as_slice(),
                    key.as_bytes(),
                    b" ",
                    value.as_bytes(),
                    b"\r\n",
                ]
                .concat(),
                b"+OK\r\n",
            );
            until_cached_as(
                &mut client,
                &mut nodes,
                &[b"GET", key.as_bytes()],
                &bulk(&value),
            );
        }
        // Changed on the node itself: seen.
        for key in &keys {
            set(&mut cluster.client(owners[slot(key)]), key, "direct");
            seen_within_delay(&mut client, key, &bulk("direct"));
        }
        // A hash, in the client's protocol.
        client.roundtrip(b"HSET h f v\r\n", b":1\r\n");
        let all = match protocol {
            2 => [b"*2\r\n".as_slice(), &bulk("f"), &bulk("v")].concat(),
            _ => [b"%1\r\n".as_slice(), &bulk("f"), &bulk("v")].concat(),
        };
        until_cached_as(&mut client, &mut nodes, &[b"HGETALL", b"h"], &all);
        client.roundtrip(b"DEL h\r\n", b":1\r\n");
    }
    // One tracking connection on each master.
    for port in cluster.live_ports() {
        assert!(
            tracking_client(&mut cluster.client(port)).is_some(),
            "{port}"
        );
    }
    assert!(gateway.metric("switchyard_near_cache_invalidations_total{tenant=\"demo\"}") >= 24);
}

/// The hot keys' slot, moved from master `from` to master `to` key by key while clients use it (as `redis-cli
/// --cluster reshard` does): `ASK` while it migrates, `MOVED` once every master says `to` owns it.
fn move_slot(cluster: &RedisCluster, slot: usize, from: &ClusterNode, to: &ClusterNode) {
    cluster.set_slot(to.port, slot, &["IMPORTING", &from.id]);
    cluster.set_slot(from.port, slot, &["MIGRATING", &to.id]);
    std::thread::sleep(Duration::from_millis(500));
    loop {
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(100)
            .query(&mut cluster.client(from.port))
            .unwrap();
        if keys.is_empty() {
            break;
        }
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        cluster.migrate(from.port, to.port, &keys);
    }
    std::thread::sleep(Duration::from_millis(500));
    for master in cluster.masters() {
        cluster.set_slot(master.port, slot, &["NODE", &to.id]);
    }
}

#[test]
fn no_stale_read_across_a_failover_and_a_resharding() {
    let cluster = RedisCluster::start(3, 1, None);
    let cached = cluster_gateway(json!(cluster.url()), every_key(1 << 20));
    let around = cluster_gateway(json!(cluster.url()), json!({}));
    let keys: Vec<String> = (0..4).map(|i| format!("{{hot}}:{i}")).collect();
    let hot = slot(&keys[0]);
    let checker = Checker {
        direct: around.url(Some(PASSWORD)),
        cached: vec![cached.url(Some(PASSWORD))],
        keys: keys.clone(),
        shape: Shape::String,
        failures_allowed: true,
        replica_reads: false,
    };
    let reads = checker.run(Duration::from_secs(6), || {
        std::thread::sleep(Duration::from_secs(2));
        // A manual failover of the hot slot's master: the former master stays up, as a replica.
        let owner = cluster.slot_owners()[hot];
        let nodes = cluster.nodes_seen_by(owner);
        let owner_id = nodes.iter().find(|n| n.port == owner).unwrap().id.clone();
        let replica = nodes
            .iter()
            .find(|n| n.master_id.as_deref() == Some(&owner_id))
            .expect("a replica of the hot slot's master")
            .port;
        let () = redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .query(&mut cluster.client(replica))
            .unwrap();
        wait_for("the failover", Duration::from_secs(20), || {
            cluster.slot_owners()[hot] == replica
        });
        cluster.wait_up();
        eprintln!("failed over from {owner} to {replica}");
        std::thread::sleep(Duration::from_secs(2));
        // Then the slot moves to another master.
        let masters = cluster.masters();
        let from = masters.iter().find(|m| m.port == replica).unwrap();
        let to = masters.iter().find(|m| m.port != replica).unwrap();
        move_slot(&cluster, hot, from, to);
        eprintln!("moved slot {hot} to {}", to.port);
        std::thread::sleep(Duration::from_secs(2));
    });
    assert_checked(&cached, reads);
    // The cache serves the hot keys again, from their new master.
    let mut client = authed(&cached, 2);
    let mut nodes = every_node(&cluster);
    let mut plain = authed(&around, 2);
    let current = plain.request(&[b"GET", keys[0].as_bytes()]);
    until_cached_as(
        &mut client,
        &mut nodes,
        &[b"GET", keys[0].as_bytes()],
        &current,
    );
}

/// A master that takes a slot over without its keys (an operator's `CLUSTER SETSLOT`, as when a node restored from
/// an older copy claims its slots again): its former owner drops the slot's keys, and the gateway reads the key
/// from its new master once its slot map says so, never again what the former owner had.
#[test]
fn a_slot_taken_over_is_read_from_its_new_master() {
    let cluster = RedisCluster::start(3, 0, None);
    let gateway = cluster_gateway(json!(cluster.url()), every_key(1 << 20));
    let mut client = authed(&gateway, 2);
    let mut nodes = every_node(&cluster);
    client.roundtrip(b"SET k a\r\n", b"+OK\r\n");
    until_cached_as(&mut client, &mut nodes, &[b"GET", b"k"], &bulk("a"));
    let hot = slot("k");
    let owner = cluster.slot_owners()[hot];
    let masters = cluster.masters();
    let from = masters.iter().find(|m| m.port == owner).unwrap();
    let to = masters.iter().find(|m| m.port != owner).unwrap();
    cluster.set_slot(to.port, hot, &["IMPORTING", &from.id]);
    cluster.set_slot(to.port, hot, &["NODE", &to.id]);
    cluster.wait_in_sync();
    assert_eq!(cluster.slot_owners()[hot], to.port);
    set(&mut cluster.client(to.port), "k", "b");
    wait_for("the new master's value", Duration::from_secs(10), || {
        client.request(&[b"GET", b"k"]) == bulk("b")
    });
    until_cached_as(&mut client, &mut nodes, &[b"GET", b"k"], &bulk("b"));
}
