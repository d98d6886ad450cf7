//! The near cache on routes that read from replicas (`-slaves` resources of the sentinel set or cluster their
//! writes go to): keys are filled from and tracked on the master, so a read the cache answers is at least as
//! fresh as one from a replica; a read it cannot answer goes to a replica as before.

use std::time::Duration;

use serde_json::{Value, json};
use switchyard_tests::{Gateway, RedisCluster, SentinelGroup, command_calls, wait_for};

use super::harness::*;

/// Reads from `slaves`, writes to `master`.
fn split(slaves: String, master: String) -> Value {
    json!({"read": {"resources": [slaves]}, "write": {"resources": [master]}})
}

/// A miss filled from the master (`nodes[0]`) and read from a replica, or, where a miss waits for its fill
/// (`waits`: off a cluster), answered by that fill; no fill on the other nodes; hits that no node sees; the
/// checker, its writes around the cache going through `around` (a gateway without it, on the same route).
fn cached_from_the_master(
    gateway: &Gateway,
    around: &Gateway,
    nodes: &mut [redis::Connection],
    waits: bool,
) {
    let mut client = authed(gateway, 2);
    // A read the cache cannot answer goes to a replica, or waits for its fill; the fill goes to the master.
    let gets = |nodes: &mut [redis::Connection]| -> (u64, u64) {
        let (master, others) = nodes.split_at_mut(1);
        let others = others.iter_mut().map(|n| command_calls(n, "get")).sum();
        (command_calls(&mut master[0], "get"), others)
    };
    // (once the gateway knows the replicas: until then, reads go to the master).
    let mut fresh = 0;
    wait_for(
        "a read from a replica, filled from the master",
        Duration::from_secs(20),
        || {
            fresh += 1;
            let key = format!("{{k}}:{fresh}"); // in k's slot, on a cluster
            let before = gets(nodes);
            assert_eq!(client.request(&[b"GET", key.as_bytes()]), b"$-1\r\n");
            std::thread::sleep(Duration::from_millis(100));
            gets(nodes) == (before.0 + 1, before.1 + u64::from(!waits))
        },
    );
    client.roundtrip(b"SET k v1\r\n", b"+OK\r\n");
    until_cached_as(&mut client, nodes, &[b"GET", b"k"], &bulk("v1"));
    assert!(
        tracking_client(&mut nodes[0]).is_some(),
        "no tracking connection on the master"
    );
    for node in nodes.iter_mut().skip(1) {
        assert!(
            tracking_client(node).is_none(),
            "a tracking connection on another node"
        );
    }
    // A write on the master is seen.
    set(&mut nodes[0], "k", "v2");
    seen_within_delay(&mut client, "k", &bulk("v2"));
    let checker = Checker {
        direct: around.url(Some(PASSWORD)),
        cached: vec![gateway.url(Some(PASSWORD))],
        keys: (0..4).map(|key| format!("{{hot}}:{key}")).collect(),
        shape: Shape::String,
        failures_allowed: false,
        replica_reads: true,
    };
    let reads = checker.run(Duration::from_secs(5), || {});
    assert_checked(gateway, reads);
}

#[test]
fn sentinel_replica_reads_are_cached_from_the_master() {
    let group = SentinelGroup::start(2, 3);
    let route = split(group.slaves_url(false), group.url());
    let start = |tenant| {
        Gateway::builder()
            .arg("--workers")
            .arg("1")
            .start(&routed(route.clone(), tenant))
    };
    let (gateway, around) = (start(every_key(1 << 20)), start(json!({})));
    let master = group.master_port();
    let mut ports = group.data_ports();
    ports.sort_by_key(|&port| port != master);
    let mut nodes: Vec<redis::Connection> = ports.into_iter().map(|p| group.client(p)).collect();
    cached_from_the_master(&gateway, &around, &mut nodes, true);
}

#[test]
fn cluster_replica_reads_are_cached_from_the_masters() {
    let cluster = RedisCluster::start(3, 1, None);
    let route = split(cluster.slaves_url(false), cluster.url());
    let start = |tenant| {
        let gateway = Gateway::builder()
            .arg("--workers")
            .arg("1")
            .start(&routed(route.clone(), tenant));
        switchyard_tests::wait_for_slot_map_as(gateway.port(), Some(PASSWORD));
        gateway
    };
    let (gateway, around) = (start(every_key(1 << 20)), start(json!({})));
    let slot = usize::from(switchyard_schemas::placement::slot_of(b"k"));
    let master = cluster.slot_owners()[slot];
    let mut ports = cluster.live_ports();
    ports.sort_by_key(|&port| port != master);
    let mut nodes: Vec<redis::Connection> = ports.into_iter().map(|p| cluster.client(p)).collect();
    cached_from_the_master(&gateway, &around, &mut nodes, false);
}
