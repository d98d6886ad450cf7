//! Which nodes are watched: every master of a cluster, every shard, the node of a new route.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use switchyard_tests::{
    Gateway, RedisCluster, RedisServer, client_with_flag, wait_for, wait_for_slot_map_as,
};

use crate::harness::*;

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

/// A sentinel set's failover: the client is told to drop everything (what it read came from the former master),
/// and its reads on the new master are told. A route that reads from replicas gets no tracking.
#[test]
fn a_sentinel_failover_flushes_and_the_new_master_is_watched() {
    use switchyard_tests::SentinelGroup;
    let group = SentinelGroup::start(1, 3);
    let old_master = group.master_port();
    let routes = json!({"tenants": [
        {"name": "demo", "passwords": [PASSWORD], "namespace": "ns:",
         "route": {"type": "single", "target": group.url()}},
        {"name": "other", "passwords": [OTHER], "namespace": "b:",
         "route": {"type": "single", "target": {"read": {"resources": [group.slaves_url(false)]},
                                                "write": {"resources": [group.url()]}}}}]});
    let gateway = Gateway::builder().arg("--workers").arg("1").start(&routes);
    let mut replicas = authed(&gateway, OTHER, 3);
    let refused = String::from_utf8_lossy(&track(&mut replicas, &[])).into_owned();
    assert!(
        refused.starts_with("-ERR CLIENT TRACKING is not supported by the gateway on a route that reads from replicas"),
        "{refused}"
    );
    let mut client = authed(&gateway, PASSWORD, 3);
    assert_eq!(track(&mut client, &[]), b"+OK\r\n");
    assert_eq!(client.request(&[b"GET", b"k"]), b"_\r\n");
    group.wait_in_sync();
    let new_master = group.fail_over_from(old_master);
    let mut flushed = false;
    wait_for("the flush", Duration::from_secs(20), || {
        client.send_command(&[b"PING"]);
        loop {
            match client.read_reply() {
                reply if reply == FLUSHED => flushed = true,
                reply => break assert_eq!(reply, b"+PONG\r\n"),
            }
        }
        flushed
    });
    told_again(&mut client, &mut group.client(new_master), "k", "ns:k");
}
