//! Every rewrite is computed for each target it is sent to: on a double-written route whose secondary keeps the
//! tenant's data in another database than the primary, `MOVE` and `COPY ... DB` reach the tenant's databases on
//! both (never a neighbour's on the secondary), and an admin's `FLUSHALL` flushes only its own database on a
//! secondary whose own database is not 0. Real redis-servers and the gateway binary; the backends are checked.

use serde_json::json;
use switchyard_tests::{RawClient, RedisServer};

fn db(server: &RedisServer, db: u32) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{}/{db}", server.port()))
        .unwrap()
        .get_connection()
        .unwrap()
}

fn exists(server: &RedisServer, database: u32, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query(&mut db(server, database))
        .unwrap()
}

fn call(client: &mut RawClient, args: &[&str]) -> String {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    String::from_utf8_lossy(&client.request(&args)).into_owned()
}

#[test]
fn database_numbers_are_rewritten_for_each_write_resource() {
    let (primary, secondary) = (RedisServer::start(), RedisServer::start());
    // The tenant's databases 0 and 1 are the primary's 1 and 2, and the secondary's 5 and 6. Database 2 of the
    // secondary is a neighbour's; the admin's secondary is database 7 of the same Redis.
    let routes = json!({"tenants": [
        {"name": "t", "passwords": ["t-password"], "route": {"type": "single", "databases": 2, "target":
            {"write": {"resources": [format!("{}/1", primary.url()), format!("{}/5", secondary.url())],
                       "ack": "all"}}}},
        {"name": "ops", "passwords": ["ops-password"], "allow_admin": true, "route": {"type": "single", "target":
            {"write": {"resources": [format!("{}/0", primary.url()), format!("{}/7", secondary.url())],
                       "ack": "all"}}}},
    ]});
    let gateway = switchyard_tests::Gateway::start(&routes);
    let mut client = RawClient::connect(gateway.port());
    assert_eq!(call(&mut client, &["AUTH", "t-password"]), "+OK\r\n");

    assert_eq!(call(&mut client, &["SET", "moved", "v"]), "+OK\r\n");
    assert_eq!(call(&mut client, &["MOVE", "moved", "1"]), ":1\r\n");
    assert_eq!(call(&mut client, &["SET", "copied", "v"]), "+OK\r\n");
    assert_eq!(
        call(&mut client, &["COPY", "copied", "copy", "DB", "1"]),
        ":1\r\n"
    );
    for key in ["moved", "copy"] {
        assert!(
            exists(&primary, 2, key),
            "{key} in the primary's database 2"
        );
        assert!(
            exists(&secondary, 6, key),
            "{key} in the secondary's database 6"
        );
        assert!(
            !exists(&secondary, 2, key),
            "{key} written into the secondary's database 2, a neighbour's"
        );
    }

    // The same inside a transaction, which the secondary replays after EXEC.
    assert_eq!(call(&mut client, &["SET", "queued", "v"]), "+OK\r\n");
    assert_eq!(call(&mut client, &["MULTI"]), "+OK\r\n");
    assert_eq!(call(&mut client, &["MOVE", "queued", "1"]), "+QUEUED\r\n");
    assert_eq!(call(&mut client, &["EXEC"]), "*1\r\n:1\r\n");
    assert!(exists(&primary, 2, "queued"));
    switchyard_tests::wait_for(
        "the secondary's replay of the transaction",
        std::time::Duration::from_secs(5),
        || exists(&secondary, 6, "queued"),
    );
    assert!(
        !exists(&secondary, 2, "queued"),
        "the transaction's MOVE reached the secondary's database 2, a neighbour's"
    );

    // An admin whose primary is database 0 flushes all of it, and only database 7 of the secondary.
    let () = redis::cmd("SET")
        .arg("neighbour")
        .arg("v")
        .query(&mut db(&secondary, 3))
        .unwrap();
    let () = redis::cmd("SET")
        .arg("mine")
        .arg("v")
        .query(&mut db(&secondary, 7))
        .unwrap();
    let mut admin = RawClient::connect(gateway.port());
    assert_eq!(call(&mut admin, &["AUTH", "ops-password"]), "+OK\r\n");
    assert_eq!(call(&mut admin, &["FLUSHALL"]), "+OK\r\n");
    assert!(!exists(&secondary, 7, "mine"));
    assert!(
        exists(&secondary, 3, "neighbour"),
        "FLUSHALL reached the secondary's other databases"
    );
}
