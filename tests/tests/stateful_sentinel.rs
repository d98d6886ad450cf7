//! Dedicated connections to a sentinel-managed master: blocking commands, transactions and subscriptions reach
//! the master sentinels name, authenticated as the resource's ACL user like the shared connections, for clients
//! speaking RESP2 and RESP3.

use std::time::Duration;

use serde_json::json;
use switchyard_tests::{
    Gateway, RawClient, SentinelGroup, each_protocol, open_single_tenant, wait_for,
};

/// The master's `CLIENT LIST` lines of the gateway's user whose last command was `command`.
fn gateway_clients_running(group: &SentinelGroup, command: &str) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut group.client(group.master_port()))
        .unwrap();
    list.lines()
        .filter(|l| l.contains("user=switchyard-gateway") && l.contains(&format!(" cmd={command}")))
        .count()
}

#[test]
fn dedicated_connections_reach_the_sentinel_master() {
    each_protocol(dedicated_connections_reach_the_sentinel_master_speaking);
}

fn dedicated_connections_reach_the_sentinel_master_speaking(protocol: u8) {
    // Pub/sub frames are arrays in RESP2, pushes in RESP3.
    let frame = |bytes: &[u8]| -> Vec<u8> {
        let mut frame = bytes.to_vec();
        if protocol == 3 {
            frame[0] = b'>';
        }
        frame
    };
    let group = SentinelGroup::start(1, 1);
    let gateway = Gateway::start(&open_single_tenant(json!(group.url())));
    let mut client = RawClient::connect_speaking(gateway.port(), protocol);
    let mut other = RawClient::connect_speaking(gateway.port(), protocol);
    // The shared path waits for the sentinels' first answer; after it, the master is known.
    assert_eq!(client.request(&[b"SET", b"k", b"1"]), b"+OK\r\n");

    client.send_command(&[b"BLPOP", b"q", b"0"]);
    wait_for("the BLPOP on the master", Duration::from_secs(20), || {
        gateway_clients_running(&group, "blpop") == 1
    });
    assert_eq!(other.request(&[b"RPUSH", b"q", b"v"]), b":1\r\n");
    assert_eq!(client.read_reply(), b"*2\r\n$1\r\nq\r\n$1\r\nv\r\n");
    // A timeout's null array, in the client's protocol.
    let timeout: &[u8] = if protocol == 3 { b"_\r\n" } else { b"*-1\r\n" };
    assert_eq!(client.request(&[b"BLPOP", b"q", b"0.05"]), timeout);

    client.send(b"WATCH k\r\nMULTI\r\nINCR k\r\nEXEC\r\n");
    client.expect(b"+OK\r\n+OK\r\n+QUEUED\r\n*1\r\n:2\r\n");

    assert_eq!(
        client.request(&[b"SUBSCRIBE", b"ch"]),
        frame(b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n")
    );
    assert_eq!(other.request(&[b"PUBLISH", b"ch", b"m"]), b":1\r\n");
    assert_eq!(
        client.read_reply(),
        frame(b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nm\r\n")
    );
}
