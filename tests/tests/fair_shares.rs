//! Shared caps have fair shares (issue 37): one source address cannot take every place of a connection that has
//! not authenticated yet, behind a PROXY-protocol balancer too.

use std::net::Ipv4Addr;

use serde_json::json;
use switchyard_tests::{Gateway, RawClient, RedisServer};

const PASSWORD: &str = "fair-password";

const MAX_CLIENTS: &[u8] = b"-ERR max number of clients reached\r\n";

fn routes(redis: &RedisServer) -> serde_json::Value {
    json!({"tenants": [{"name": "t", "passwords": [PASSWORD],
                        "route": {"type": "single", "target": redis.url()}}]})
}

/// A connection from 127.0.0.1 that sends `PING` as it opens (in the same write as `header`, if any), so that
/// it writes nothing after the gateway may have closed it.
fn knock(gateway: &Gateway, header: &str) -> RawClient {
    let mut client = RawClient::connect(gateway.port());
    client.send(format!("{header}PING\r\n").as_bytes());
    client
}

/// Whether the gateway let in a client that knocked: an admitted connection that has not authenticated is refused
/// `PING` with `NOAUTH`, a refused one has had Redis' max-clients error and is closed.
fn admitted(client: &mut RawClient) -> bool {
    let line = client.read_line();
    match &line[..] {
        b"-NOAUTH Authentication required.\r\n" => true,
        refused if refused == MAX_CLIENTS => {
            client.expect_closed();
            false
        }
        other => panic!("unexpected reply {:?}", String::from_utf8_lossy(other)),
    }
}

/// Those of `clients` that got in (each asked in turn).
fn those_admitted(clients: Vec<RawClient>) -> Vec<RawClient> {
    clients
        .into_iter()
        .filter_map(|mut client| admitted(&mut client).then_some(client))
        .collect()
}

fn logs_in(client: &mut RawClient) {
    client.roundtrip(format!("AUTH {PASSWORD}\r\n").as_bytes(), b"+OK\r\n");
    client.roundtrip(b"PING\r\n", b"+PONG\r\n");
}

/// 127.0.0.1 opens as many connections as the whole unauthenticated cap and never authenticates: it gets its
/// share (an eighth of the cap by default), and a client from another address still gets in.
#[test]
fn one_address_cannot_take_every_unauthenticated_place() {
    let redis = RedisServer::start();
    let gateway = Gateway::builder()
        .arg("--max-unauthenticated-clients")
        .arg("16")
        .start(&routes(&redis));
    let hoarded: Vec<RawClient> = (0..16).map(|_| knock(&gateway, "")).collect();
    let mut hoarded = those_admitted(hoarded);
    assert_eq!(hoarded.len(), 2, "16 / 8 places for 127.0.0.1");
    let mut other = RawClient::connect_from(Ipv4Addr::new(127, 0, 0, 2), gateway.port());
    logs_in(&mut other);
    let info = other.request(&[b"CLIENT", b"INFO"]);
    assert!(
        String::from_utf8_lossy(&info).contains(" addr=127.0.0.2:"),
        "the gateway saw the client's own address: {}",
        String::from_utf8_lossy(&info)
    );
    // The address's own further connections are still refused while it holds its share.
    assert!(!admitted(&mut knock(&gateway, "")));
    assert!(gateway.metric("switchyard_client_connections_rejected_total") >= 15);
    // A connection that authenticates leaves its address's share: another one from there gets in.
    logs_in(&mut hoarded[0]);
    assert!(admitted(&mut knock(&gateway, "")));
}

/// Behind a load balancer that sends PROXY headers, the share is the client's address's (the header's), not the
/// balancer's: every connection here comes from 127.0.0.1, the balancer.
#[test]
fn behind_a_proxy_protocol_balancer_the_share_is_the_clients_address() {
    let redis = RedisServer::start();
    let gateway = Gateway::builder()
        .arg("--proxy-protocol")
        .arg("--max-unauthenticated-clients")
        .arg("16")
        .arg("--max-unauthenticated-per-address")
        .arg("3")
        .start(&routes(&redis));
    let header = |client: &str| format!("PROXY TCP4 {client} 10.0.0.100 40000 6379\r\n");
    let hoarded: Vec<RawClient> = (0..16)
        .map(|_| knock(&gateway, &header("203.0.113.7")))
        .collect();
    let held = those_admitted(hoarded);
    assert_eq!(held.len(), 3);
    let mut other = knock(&gateway, &header("198.51.100.9"));
    assert!(admitted(&mut other));
    logs_in(&mut other);
}
