//! Small helpers the end-to-end tests share.

use serde_json::{Value, json};

/// A routes file with one tenant `t`, reachable without a password, served by `route` (a route table).
pub fn open_tenant(route: Value) -> Value {
    json!({"tenants": [{"name": "t", "passwords": [], "route": route}]})
}

/// A routes file with one tenant `t`, reachable without a password, whose single target is `target`.
pub fn open_single_tenant(target: Value) -> Value {
    open_tenant(json!({"type": "single", "target": target}))
}

/// How many connections the server behind `con` has accepted since it started (`con`'s own included).
pub fn connections_received(con: &mut redis::Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("stats").query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// How many times `command` ran on the server behind `con`, from `INFO commandstats`.
pub fn command_calls(con: &mut redis::Connection, command: &str) -> u64 {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(con)
        .expect("INFO commandstats");
    stats
        .lines()
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(0)
}

/// The id of a client of the server behind `con` whose `CLIENT LIST` flags hold `flag` (`t`: it tracks, `B`:
/// in broadcasting mode), if there is one.
pub fn client_with_flag(con: &mut redis::Connection, flag: char) -> Option<String> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(con)
        .expect("CLIENT LIST");
    list.lines()
        .find(|line| {
            line.split(' ').any(|field| {
                field
                    .strip_prefix("flags=")
                    .is_some_and(|f| f.contains(flag))
            })
        })
        .and_then(|line| line.split(' ').find_map(|f| f.strip_prefix("id=")))
        .map(str::to_string)
}

/// Waits until the gateway on `port` knows its cluster's slot map (loaded a moment after the first client
/// arrives): until then, commands that need a dedicated connection to a slot's master get `-TRYAGAIN`.
pub fn wait_for_slot_map(port: u16) {
    wait_for_slot_map_as(port, None);
}

/// `wait_for_slot_map` for a tenant that needs `AUTH password`.
pub fn wait_for_slot_map_as(port: u16, password: Option<&str>) {
    let mut client = crate::RawClient::connect(port);
    if let Some(password) = password {
        assert_eq!(client.request(&[b"AUTH", password.as_bytes()]), b"+OK\r\n");
    }
    crate::wait_for(
        "the gateway's cluster slot map",
        std::time::Duration::from_secs(20),
        || {
            let reply = client.request(&[b"SUBSCRIBE", b"switchyard-test-warmup"]);
            if reply.starts_with(b"-TRYAGAIN") {
                return false;
            }
            client.request(&[b"RESET"]);
            true
        },
    );
}

/// Creates the users an operator provisions where the gateway may not create its own (a managed service): `gw`
/// (password `gwpw`), which may not run scripts nor manage users, and the script user `scr` (password `scrpw`)
/// with the rules of docs/operations.md#tenant-isolation; `admin` is a connection that may create users.
pub fn provision_script_users(admin: &mut redis::Connection) {
    for rules in [
        "gw on >gwpw ~* &* +@all -eval -evalsha -eval_ro -evalsha_ro -fcall -fcall_ro -acl",
        "scr on >scrpw ~* &* +@all -@admin -select -move -swapdb -copy -migrate -flushall -flushdb \
         -publish -spublish -pubsub -info",
    ] {
        let () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(rules.split_whitespace().collect::<Vec<_>>())
            .query(admin)
            .unwrap();
    }
}
