//! Tenant policies applied by the gateway (docs/tenant-policies.md), against a real Redis: the read-only switch,
//! command rules, client address lists at AUTH and on a routes-file reload, and blocked keys added and removed
//! while a client stays connected.

use std::time::Duration;

use serde_json::{Value, json};
use switchyard_tests::{Gateway, RawClient, RedisServer, wait_for};

const READONLY: &str = "-READONLY You can't write against a read only replica.\r\n";
const RELOAD: Duration = Duration::from_secs(10);

/// A routes file with one tenant on `redis`: `name`, password `<name>-password`, and `policy` (top-level
/// fields) merged in.
fn routes(redis: &RedisServer, tenants: &[(&str, Value)]) -> Value {
    let tenants: Vec<Value> = tenants
        .iter()
        .map(|(name, policy)| {
            let mut tenant = json!({"name": name, "passwords": [format!("{name}-password")],
                                    "route": {"type": "single", "target": redis.url()}});
            if let (Some(tenant), Some(policy)) = (tenant.as_object_mut(), policy.as_object()) {
                tenant.extend(policy.clone());
            }
            tenant
        })
        .collect();
    json!({ "tenants": tenants })
}

fn call(client: &mut RawClient, args: &[&str]) -> String {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    String::from_utf8_lossy(&client.request(&args)).into_owned()
}

/// A connection authenticated as `name`'s tenant.
fn client(gateway: &Gateway, name: &str) -> RawClient {
    let mut client = RawClient::connect(gateway.port());
    let password = format!("{name}-password");
    assert_eq!(call(&mut client, &["AUTH", name, &password]), "+OK\r\n");
    client
}

#[test]
fn read_only_tenants_read_and_are_refused_writes_scripts_and_transactions_included() {
    let redis = RedisServer::start();
    redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query::<()>(&mut redis.client())
        .unwrap();
    let gateway = Gateway::start(&routes(&redis, &[("viewer", json!({"read_only": true}))]));
    let mut viewer = client(&gateway, "viewer");

    assert_eq!(call(&mut viewer, &["GET", "k"]), "$1\r\nv\r\n");
    for write in [
        &["SET", "k", "x"][..],
        // Again: a command the connection ran before is not forwarded untouched (the direct path).
        &["SET", "k", "y"],
        &["DEL", "k"],
        &["INCR", "n"],
        &["FLUSHDB"],
    ] {
        assert_eq!(call(&mut viewer, write), READONLY, "{write:?}");
    }
    // Scripts run read-only: reading works, a write inside is refused by Redis.
    assert_eq!(
        call(
            &mut viewer,
            &["EVAL", "return redis.call('GET', KEYS[1])", "1", "k"]
        ),
        "$1\r\nv\r\n"
    );
    let written = call(
        &mut viewer,
        &["EVAL", "return redis.call('SET', KEYS[1], 'x')", "1", "k"],
    );
    assert!(
        written.starts_with("-ERR Write commands are not allowed from read-only scripts"),
        "{written}"
    );
    // A transaction with a write: refused at queue time, then EXECABORT, as a read-only replica answers.
    assert_eq!(call(&mut viewer, &["MULTI"]), "+OK\r\n");
    assert_eq!(call(&mut viewer, &["GET", "k"]), "+QUEUED\r\n");
    assert_eq!(call(&mut viewer, &["SET", "k", "x"]), READONLY);
    assert_eq!(
        call(&mut viewer, &["EXEC"]),
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    assert_eq!(call(&mut viewer, &["MULTI"]), "+OK\r\n");
    assert_eq!(call(&mut viewer, &["GET", "k"]), "+QUEUED\r\n");
    assert_eq!(call(&mut viewer, &["EXEC"]), "*1\r\n$1\r\nv\r\n");
    let value: String = redis::cmd("GET")
        .arg("k")
        .query(&mut redis.client())
        .unwrap();
    assert_eq!(value, "v");
}

#[test]
fn command_rules_deny_categories_and_allow_lists() {
    let redis = RedisServer::start();
    let gateway = Gateway::start(&routes(
        &redis,
        &[
            (
                "operator",
                json!({"allow_admin": true, "commands": {"deny": ["@dangerous", "config|set"]}}),
            ),
            (
                "app",
                json!({"commands": {"allow": ["get", "set", "@connection", "client|setname"], "deny": ["client|kill"]}}),
            ),
        ],
    ));
    let noperm = |name: &str| {
        format!("-NOPERM this user has no permissions to run the '{name}' command\r\n")
    };

    let mut operator = client(&gateway, "operator");
    assert_eq!(call(&mut operator, &["SET", "k", "v"]), "+OK\r\n");
    assert_eq!(call(&mut operator, &["GET", "k"]), "$1\r\nv\r\n");
    assert_eq!(call(&mut operator, &["KEYS", "*"]), noperm("keys"));
    assert_eq!(call(&mut operator, &["FLUSHALL"]), noperm("flushall"));
    assert_eq!(
        call(&mut operator, &["CONFIG", "SET", "maxmemory", "0"]),
        noperm("config|set")
    );
    // Commands the gateway answers itself are ruled too (CLIENT LIST is @dangerous).
    assert_eq!(
        call(&mut operator, &["CLIENT", "LIST"]),
        noperm("client|list")
    );
    assert_eq!(call(&mut operator, &["INFO", "server"]), noperm("info"));
    assert_eq!(call(&mut operator, &["DBSIZE"]), ":1\r\n");
    // Inside a transaction: refused at queue time, EXECABORT at EXEC.
    assert_eq!(call(&mut operator, &["MULTI"]), "+OK\r\n");
    assert_eq!(call(&mut operator, &["SET", "k", "w"]), "+QUEUED\r\n");
    assert_eq!(call(&mut operator, &["KEYS", "*"]), noperm("keys"));
    assert_eq!(
        call(&mut operator, &["EXEC"]),
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    assert_eq!(call(&mut operator, &["GET", "k"]), "$1\r\nv\r\n");

    let mut app = client(&gateway, "app");
    assert_eq!(call(&mut app, &["SET", "a", "1"]), "+OK\r\n");
    assert_eq!(call(&mut app, &["GET", "a"]), "$1\r\n1\r\n");
    assert_eq!(call(&mut app, &["PING"]), "+PONG\r\n");
    assert_eq!(call(&mut app, &["CLIENT", "SETNAME", "x"]), "+OK\r\n");
    assert_eq!(call(&mut app, &["DEL", "a"]), noperm("del"));
    assert_eq!(call(&mut app, &["MULTI"]), noperm("multi"));
    assert_eq!(call(&mut app, &["SELECT", "0"]), "+OK\r\n"); // @connection
    assert_eq!(call(&mut app, &["TYPE", "a"]), noperm("type"));
    assert_eq!(
        call(&mut app, &["CLIENT", "KILL", "ID", "1"]),
        noperm("client|kill")
    );
    assert_eq!(call(&mut app, &["EVAL", "return 1", "0"]), noperm("eval"));
    // AUTH and HELLO always run.
    assert_eq!(call(&mut app, &["AUTH", "app", "app-password"]), "+OK\r\n");
    assert!(call(&mut app, &["HELLO", "2"]).starts_with('*'));
}

#[test]
fn address_lists_are_checked_at_auth_and_on_every_new_snapshot() {
    let redis = RedisServer::start();
    let elsewhere = json!({"ip_allow": ["10.0.0.0/8"]});
    let gateway = Gateway::start(&routes(&redis, &[("shop", elsewhere)]));
    let refused =
        "-ERR client address 127.0.0.1 may not authenticate as this tenant (ip_allow/ip_deny)\r\n";
    let mut first = RawClient::connect(gateway.port());
    assert_eq!(
        call(&mut first, &["AUTH", "shop", "shop-password"]),
        refused
    );
    assert_eq!(
        call(&mut first, &["HELLO", "3", "AUTH", "shop", "shop-password"]),
        refused
    );
    assert!(call(&mut first, &["GET", "k"]).starts_with("-NOAUTH"));
    // A right password from a refused address is no failed password: no penalty, no failure counted.
    assert_eq!(gateway.metric("switchyard_gateway_auth_failures_total"), 0);

    gateway.reload(&routes(
        &redis,
        &[("shop", json!({"ip_allow": ["127.0.0.1", "::1"]}))],
    ));
    wait_for("the allowlist admitting 127.0.0.1", RELOAD, || {
        call(&mut first, &["AUTH", "shop", "shop-password"]) == "+OK\r\n"
    });
    assert_eq!(call(&mut first, &["SET", "k", "v"]), "+OK\r\n");
    let mut idle = client(&gateway, "shop");

    // Denied by an update: connected clients are closed, at their next command or when the snapshot arrives.
    gateway.reload(&routes(
        &redis,
        &[(
            "shop",
            json!({"ip_allow": ["127.0.0.1"], "ip_deny": ["127.0.0.0/8"]}),
        )],
    ));
    wait_for("the denylist refusing a new client", RELOAD, || {
        let mut probe = RawClient::connect(gateway.port());
        call(&mut probe, &["AUTH", "shop", "shop-password"]) == refused
    });
    first.send(b"GET k\r\n");
    first.expect_closed();
    idle.expect_closed();
}

#[test]
fn blocked_keys_apply_to_connected_clients_from_the_next_snapshot() {
    let redis = RedisServer::start();
    let gateway = Gateway::start(&routes(&redis, &[("shop", json!({}))]));
    let mut shop = client(&gateway, "shop");
    assert_eq!(call(&mut shop, &["SET", "hot:1", "v"]), "+OK\r\n");

    gateway.reload(&routes(
        &redis,
        &[("shop", json!({"blocked_keys": ["hot:*", "Exact"]}))],
    ));
    let blocked =
        |key: &str| format!("-ERR key '{key}' is blocked by the operator (blocked_keys)\r\n");
    wait_for("the blocked key pattern", RELOAD, || {
        call(&mut shop, &["GET", "hot:1"]) == blocked("hot:1")
    });
    assert_eq!(call(&mut shop, &["SET", "Exact", "1"]), blocked("Exact"));
    assert_eq!(call(&mut shop, &["SET", "exact", "1"]), "+OK\r\n"); // patterns are case-sensitive
    assert_eq!(call(&mut shop, &["GET", "cold"]), "$-1\r\n");
    assert_eq!(
        call(&mut shop, &["MSET", "cold", "1", "hot:2", "2"]),
        blocked("hot:2")
    );
    assert_eq!(
        call(
            &mut shop,
            &["EVAL", "return redis.call('GET', KEYS[1])", "1", "hot:1"]
        ),
        blocked("hot:1")
    );
    assert_eq!(call(&mut shop, &["MULTI"]), "+OK\r\n");
    assert_eq!(call(&mut shop, &["SET", "cold", "2"]), "+QUEUED\r\n");
    assert_eq!(call(&mut shop, &["DEL", "hot:1"]), blocked("hot:1"));
    assert_eq!(
        call(&mut shop, &["EXEC"]),
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    assert_eq!(call(&mut shop, &["GET", "cold"]), "$-1\r\n");

    gateway.reload(&routes(&redis, &[("shop", json!({}))]));
    wait_for("the blocked key pattern removed", RELOAD, || {
        call(&mut shop, &["GET", "hot:1"]) == "$1\r\nv\r\n"
    });
    assert_eq!(
        call(&mut shop, &["MSET", "cold", "1", "hot:2", "2"]),
        "+OK\r\n"
    );
}

/// A PROXY protocol v2 header for a TCP connection from `source` (v2 LOCAL when `None`).
fn proxy_v2(source: Option<([u8; 4], u16)>) -> Vec<u8> {
    let mut header = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    match source {
        Some((address, port)) => {
            header.extend([0x21, 0x11, 0, 12]);
            header.extend(address);
            header.extend([127, 0, 0, 1]);
            header.extend(port.to_be_bytes());
            header.extend(6379u16.to_be_bytes());
        }
        None => header.extend([0x20, 0x00, 0, 0]),
    }
    header
}

#[test]
fn behind_a_proxy_protocol_balancer_the_header_gives_the_client_address() {
    let redis = RedisServer::start();
    let gateway = Gateway::builder().arg("--proxy-protocol").start(&routes(
        &redis,
        &[("shop", json!({"ip_allow": ["10.0.0.0/8"]}))],
    ));
    let auth = ["AUTH", "shop", "shop-password"];
    let refused = |address: &str| {
        format!(
            "-ERR client address {address} may not authenticate as this tenant (ip_allow/ip_deny)\r\n"
        )
    };

    let mut v1 = RawClient::connect(gateway.port());
    v1.send(b"PROXY TCP4 10.1.2.3 10.0.0.1 40000 6379\r\n");
    assert_eq!(call(&mut v1, &auth), "+OK\r\n");
    let list = call(&mut v1, &["CLIENT", "LIST"]);
    assert!(list.contains("addr=10.1.2.3:40000 "), "{list}");

    let mut v2 = RawClient::connect(gateway.port());
    v2.send(&proxy_v2(Some(([203, 0, 113, 7], 4242))));
    assert_eq!(call(&mut v2, &auth), refused("203.0.113.7"));
    let mut allowed = RawClient::connect(gateway.port());
    allowed.send(&proxy_v2(Some(([10, 9, 8, 7], 4242))));
    assert_eq!(call(&mut allowed, &auth), "+OK\r\n");

    // LOCAL (the balancer's own connection): the socket's peer, which the allowlist does not name.
    let mut local = RawClient::connect(gateway.port());
    local.send(&proxy_v2(None));
    assert_eq!(call(&mut local, &auth), refused("127.0.0.1"));

    // No header, or a malformed one: closed unanswered.
    for start in [&b"PING\r\n"[..], b"PROXY TCP4 10.1.2.3\r\n"] {
        let mut bare = RawClient::connect(gateway.port());
        bare.send(start);
        bare.expect_closed();
    }
}

/// The open tenant of a routes file (no passwords) is not given to a client its lists refuse: the connection
/// starts unauthenticated, and may AUTH as another tenant.
#[test]
fn the_open_tenant_is_not_given_to_a_refused_address() {
    let redis = RedisServer::start();
    let mut file = routes(&redis, &[("shop", json!({}))]);
    let open = json!({"name": "public", "passwords": [], "ip_deny": ["127.0.0.0/8", "::1"],
                      "route": {"type": "single", "target": redis.url()}});
    if let Some(tenants) = file["tenants"].as_array_mut() {
        tenants.push(open);
    }
    let gateway = Gateway::start(&file);
    let mut client = RawClient::connect(gateway.port());
    assert!(call(&mut client, &["GET", "k"]).starts_with("-NOAUTH"));
    assert_eq!(
        call(&mut client, &["AUTH", "shop", "shop-password"]),
        "+OK\r\n"
    );
    assert_eq!(call(&mut client, &["GET", "k"]), "$-1\r\n");

    // Admitted once the update no longer denies it: new connections get the open tenant.
    if let Some(open) = file["tenants"][1].as_object_mut() {
        open.remove("ip_deny");
    }
    gateway.reload(&file);
    wait_for("the open tenant admitting 127.0.0.1", RELOAD, || {
        let mut probe = RawClient::connect(gateway.port());
        call(&mut probe, &["GET", "k"]) == "$-1\r\n"
    });
}
