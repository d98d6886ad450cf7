//! Shared caps have fair shares: one source address cannot take every place of a connection that has
//! not authenticated yet, behind a PROXY-protocol balancer too; one tenant's blocked clients cannot use up a shared
//! Redis' `maxclients`, and another tenant's blocking command still gets its connection.

use std::net::Ipv4Addr;
use std::time::Duration;

use serde_json::json;
use switchyard_tests::{Gateway, RawClient, RedisServer, wait_for};

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

/// 127.0.0.1 opens as many connections as the whole unauthenticated cap and never authenticates: it gets half the
/// places (beyond its share of an eighth, a source takes places only while at most half are in use), and a
/// client from another address still gets in.
#[test]
fn one_address_cannot_take_every_unauthenticated_place() {
    let redis = RedisServer::start();
    // One worker admits the connections one after the other, so that the count is exact (two workers accepting
    // at the same moment may both find more than half the places taken).
    let gateway = Gateway::builder()
        .arg("--workers")
        .arg("1")
        .arg("--max-unauthenticated-clients")
        .arg("16")
        .start(&routes(&redis));
    let hoarded: Vec<RawClient> = (0..16).map(|_| knock(&gateway, "")).collect();
    let mut hoarded = those_admitted(hoarded);
    assert_eq!(hoarded.len(), 8, "16 / 2 places for 127.0.0.1");
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
    assert!(gateway.metric("switchyard_client_connections_rejected_total") >= 9);
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
        .start(&routes(&redis));
    let header = |client: &str| format!("PROXY TCP4 {client} 10.0.0.100 40000 6379\r\n");
    let hoarded: Vec<RawClient> = (0..16)
        .map(|_| knock(&gateway, &header("203.0.113.7")))
        .collect();
    let held = those_admitted(hoarded);
    // Places are taken as connections open and counted against the header's address once it is read, so how many
    // past its share of 2 got in depends on how many had opened by then: never more than half the cap.
    assert!((2..=8).contains(&held.len()), "{} places", held.len());
    let mut other = knock(&gateway, &header("198.51.100.9"));
    assert!(admitted(&mut other));
    logs_in(&mut other);
}

/// A field of the backend's `INFO`.
fn info_field(redis: &RedisServer, field: &str) -> i64 {
    let info: String = redis::cmd("INFO").query(&mut redis.client()).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in INFO"))
}

/// The backend's clients blocked in `BLPOP` on database `db`, from its own `CLIENT LIST`.
fn blocked_on(redis: &RedisServer, db: u32) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut redis.client())
        .unwrap();
    list.lines()
        .filter(|l| {
            l.contains(&format!(" db={db} ")) && l.contains(" flags=b ") && l.contains(" cmd=blpop")
        })
        .count()
}

/// A client of `tenant` (AUTH as it), through the gateway.
fn tenant_client(gateway: &Gateway, tenant: &str) -> RawClient {
    let mut client = RawClient::connect(gateway.port());
    client.roundtrip(
        format!("AUTH {tenant} {tenant}-password\r\n").as_bytes(),
        b"+OK\r\n",
    );
    client
}

/// Two tenants on databases 0 and 1 of one Redis that serves at most 40 clients. Tenant a sends 40 `BLPOP`s: it
/// gets its share of the gateway's dedicated connections to that Redis (half of 50% of 40), the rest are refused
/// at once, and tenant b's `BLPOP` still blocks on the backend and gets its value. Without the budget, a's
/// `BLPOP`s used up the Redis' clients and b's failed at its connection's handshake.
#[test]
fn one_tenants_blocked_clients_leave_another_tenant_its_share_of_a_shared_redis() {
    let redis = RedisServer::builder().arg("--maxclients").arg("40").start();
    let tenant = |name: &str, db: u32| {
        json!({"name": name, "passwords": [format!("{name}-password")],
               "route": {"type": "single", "target": format!("{}/{db}", redis.url())}})
    };
    let gateway = Gateway::builder().start(&json!({"tenants": [tenant("a", 0), tenant("b", 1)]}));
    let backend = format!("{{backend=\"127.0.0.1:{}\"}}", redis.port());
    // Its reply comes once a connection to the Redis has passed its handshake, which read maxclients.
    let mut feeder = tenant_client(&gateway, "a");
    assert_eq!(feeder.request(&[b"GET", b"k"]), b"$-1\r\n");
    let mut hoarders: Vec<RawClient> = (0..40)
        .map(|i| {
            let mut client = tenant_client(&gateway, "a");
            client.send_command(&[b"BLPOP", format!("qa:{i}").as_bytes(), b"0"]);
            client
        })
        .collect();
    // Settled: every connection a holds is blocked on the backend, and stays so.
    let held = || gateway.metric("switchyard_tenant_dedicated_connections{tenant=\"a\"}");
    wait_for(
        "a's BLPOPs blocked or refused",
        Duration::from_secs(20),
        || {
            let blocked = blocked_on(&redis, 0);
            let settled = blocked >= 10 && held() == blocked as i64;
            std::thread::sleep(Duration::from_millis(300));
            settled && blocked_on(&redis, 0) == blocked
        },
    );
    // Tenant b's BLPOP blocks on the backend, and gets what b pushes.
    let mut waiting = tenant_client(&gateway, "b");
    waiting.send_command(&[b"BLPOP", b"qb", b"0"]);
    wait_for(
        "b's BLPOP blocked on the backend",
        Duration::from_secs(10),
        || blocked_on(&redis, 1) == 1,
    );
    let mut pusher = tenant_client(&gateway, "b");
    assert_eq!(pusher.request(&[b"RPUSH", b"qb", b"x"]), b":1\r\n");
    assert_eq!(waiting.read_reply(), b"*2\r\n$2\r\nqb\r\n$1\r\nx\r\n");
    // The Redis never ran out of clients, and a holds its share of the dedicated connections.
    assert_eq!(info_field(&redis, "rejected_connections"), 0);
    assert!(info_field(&redis, "connected_clients") < 40);
    assert_eq!(blocked_on(&redis, 0), 10);
    assert_eq!(
        gateway.metric(&format!("switchyard_backend_maxclients{backend}")),
        40
    );
    assert_eq!(
        gateway.metric(&format!(
            "switchyard_backend_dedicated_connections{backend}"
        )),
        10
    );
    assert_eq!(
        gateway.metric(&format!(
            "switchyard_backend_dedicated_refused_total{backend}"
        )),
        30
    );
    // Each of a's BLPOPs was served or refused with the reason.
    for i in 0..40 {
        feeder.request(&[b"RPUSH", format!("qa:{i}").as_bytes(), b"v"]);
    }
    let replies: Vec<String> = hoarders
        .iter_mut()
        .map(|c| String::from_utf8_lossy(&c.read_reply()).into_owned())
        .collect();
    let popped = replies.iter().filter(|r| r.starts_with("*2\r\n")).count();
    let refused = replies
        .iter()
        .filter(|r| r.starts_with("-ERR tenant 'a' holds its share of the dedicated connections"))
        .count();
    assert_eq!((popped, refused), (10, 30), "{replies:?}");
}
