//! Scripts of tenants that share one database through key namespaces (`a:` and `b:` on database 0 of one
//! Redis): a key a script computes itself is not rewritten by the gateway, so Redis must refuse it when it is
//! outside the tenant's namespace (the tenant's scripts run as its namespace's ACL user, `~a:*`), in scripts,
//! functions and transactions, after the Redis restarted (its users are created again), on every master of a
//! Redis Cluster and on the new master after a sentinel failover. An admin tenant's scripts are unchanged, and where the operator provisions the script user a
//! namespaced tenant's scripts are refused with a reason.
//!
//! The data is written straight to the backend under the stored names (`a:x`, `b:secret`).

use std::time::Duration;

use serde_json::json;
use switchyard_tests::{
    Gateway, RawClient, RedisCluster, RedisServer, SentinelGroup, provision_script_users, wait_for,
};

const BACKEND_PASSWORD: &str = "backend-secret";

/// A script that reads a key it names itself: the gateway cannot rewrite it.
const READ_B_SECRET: &str = "return redis.call('GET', 'b:secret')";
/// Redis' reply to a script's command on a key its user may not touch (7.0: an `ERR`; 7.2 says `NOPERM`).
const KEY_REFUSED: &str = "can't access at least one of the keys";
const LIBRARY: &str = "#!lua name=nslib\n\
    redis.register_function{function_name='peek', callback=function(keys) return redis.call('GET', keys[1]) end, \
    flags={'no-writes'}}\n\
    redis.register_function{function_name='sneak', callback=function() return redis.call('GET', 'b:secret') end, \
    flags={'no-writes'}}";

struct Platform {
    backend: RedisServer,
    gateway: Gateway,
}

impl Platform {
    fn start() -> Platform {
        let backend = RedisServer::builder().password(BACKEND_PASSWORD).start();
        let target = format!("redis://:{BACKEND_PASSWORD}@127.0.0.1:{}/0", backend.port());
        let routes = json!({"tenants": [
            {"name": "a", "passwords": ["a-password"], "namespace": "a:",
             "route": {"type": "single", "target": target}},
            {"name": "b", "passwords": ["b-password"], "namespace": "b:",
             "route": {"type": "single", "target": target}},
            {"name": "root", "passwords": ["root-password"], "allow_admin": true,
             "route": {"type": "single", "target": target}},
        ]});
        let gateway = Gateway::start(&routes);
        let platform = Platform { backend, gateway };
        platform.seed();
        platform
    }

    /// The tenants' data, under the names it is stored as.
    fn seed(&self) {
        let mut direct = self.direct();
        for (key, value) in [("a:x", "a-value"), ("b:secret", "b-only")] {
            let () = redis::cmd("SET")
                .arg(key)
                .arg(value)
                .query(&mut direct)
                .unwrap();
        }
    }

    fn direct(&self) -> redis::Connection {
        let url = format!(
            "redis://:{BACKEND_PASSWORD}@127.0.0.1:{}/0",
            self.backend.port()
        );
        redis::Client::open(url)
            .and_then(|c| c.get_connection())
            .expect("connect to the backend")
    }

    /// Kills the backend and starts an empty one on its port, without the users the gateway created.
    fn restart_backend(&mut self) {
        let port = self.backend.port();
        // The old process must be gone before the new one takes its port.
        let stand_in = RedisServer::start();
        drop(std::mem::replace(&mut self.backend, stand_in));
        self.backend = RedisServer::builder()
            .password(BACKEND_PASSWORD)
            .start_on(port);
    }

    fn client(&self, password: &str) -> RawClient {
        let mut client = RawClient::connect(self.gateway.port());
        client.roundtrip(format!("AUTH {password}\r\n").as_bytes(), b"+OK\r\n");
        client
    }

    /// The name tenant a gives its key `x`, stored as `a:x`; checks that the gateway puts a's namespace before
    /// the keys it names.
    fn own_key(&self, a: &mut RawClient) -> &'static str {
        assert_eq!(call(a, &["SET", "probe", "1"]), "+OK\r\n");
        let stored: bool = redis::cmd("EXISTS")
            .arg("a:probe")
            .query(&mut self.direct())
            .unwrap();
        assert!(stored, "tenant a's SET probe is stored as a:probe");
        "x"
    }
}

fn call(client: &mut RawClient, args: &[&str]) -> String {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    String::from_utf8_lossy(&client.request(&args)).into_owned()
}

fn refused(client: &mut RawClient, args: &[&str], why: &str) {
    let reply = call(client, args);
    assert!(
        reply.starts_with('-') && reply.contains(why),
        "{args:?}: {reply}"
    );
}

/// What tenant a's scripts may and may not reach; `b:secret` is unchanged after all of them.
fn a_stays_in_its_namespace(platform: &Platform, a: &mut RawClient) {
    refused(a, &["EVAL", READ_B_SECRET, "0"], KEY_REFUSED);
    refused(
        a,
        &[
            "EVAL",
            "return redis.call('SET', 'b:secret', 'stolen')",
            "0",
        ],
        KEY_REFUSED,
    );
    refused(
        a,
        &["EVAL", "return redis.call('GET', 'x')", "0"],
        KEY_REFUSED,
    );
    // Nor may it list the database's keys, which name no key Redis could check, nor run the commands whose keys
    // Redis' ACL reads from key specs that execution does not follow (SORT ... STORE, XREADGROUP ... STREAMS).
    for listing in [
        "return redis.call('SORT', 'a:list', 'BY', 'b:*')",
        "return redis.call('SORT', 'a:list', 'STORE', 'get', 'STORE', 'b:x')",
        "return redis.call('XREADGROUP', 'NOACK', 'GROUP', 'g', 'STREAMS', 'STREAMS', 'a:s', 'b:s', '0', '0')",
        "return redis.call('KEYS', '*')",
        "return redis.call('SCAN', '0')",
        "return redis.call('RANDOMKEY')",
        "return redis.call('DBSIZE')",
    ] {
        refused(a, &["EVAL", listing, "0"], "can't run this command");
    }
    // Its own keys, computed or given.
    assert_eq!(
        call(a, &["EVAL", "return redis.call('GET', 'a:x')", "0"]),
        "$7\r\na-value\r\n"
    );
    let own = platform.own_key(a);
    assert_eq!(
        call(a, &["EVAL", "return redis.call('GET', KEYS[1])", "1", own]),
        "$7\r\na-value\r\n"
    );
    let secret: String = redis::cmd("GET")
        .arg("b:secret")
        .query(&mut platform.direct())
        .unwrap();
    assert_eq!(secret, "b-only");
}

#[test]
fn a_namespaced_tenants_scripts_reach_only_its_namespace() {
    let platform = Platform::start();
    let mut a = platform.client("a-password");
    a_stays_in_its_namespace(&platform, &mut a);
    // Tenant b reads its own key; an admin tenant's scripts run as the resource's user, as before.
    let mut b = platform.client("b-password");
    assert_eq!(
        call(&mut b, &["EVAL", READ_B_SECRET, "0"]),
        "$6\r\nb-only\r\n"
    );
    let mut root = platform.client("root-password");
    assert_eq!(
        call(&mut root, &["EVAL", READ_B_SECRET, "0"]),
        "$6\r\nb-only\r\n"
    );
    // The namespace's user is Redis' own, with the namespace's key pattern.
    let users: Vec<String> = redis::cmd("ACL")
        .arg("LIST")
        .query(&mut platform.direct())
        .unwrap();
    let a_users: Vec<&String> = users.iter().filter(|u| u.contains("~a:* ")).collect();
    assert_eq!(a_users.len(), 1, "{users:?}");
    assert!(a_users[0].starts_with("user switchyard-ns-"), "{users:?}");
    assert!(!a_users[0].contains(" ~* "), "{users:?}");
}

#[test]
fn a_namespaced_tenants_functions_and_transactions_reach_only_its_namespace() {
    let platform = Platform::start();
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(LIBRARY)
        .query(&mut platform.direct())
        .unwrap();
    let mut a = platform.client("a-password");
    refused(&mut a, &["FCALL", "sneak", "0"], KEY_REFUSED);
    refused(&mut a, &["FCALL_RO", "sneak", "0"], KEY_REFUSED);
    let own = platform.own_key(&mut a);
    assert_eq!(
        call(&mut a, &["FCALL_RO", "peek", "1", own]),
        "$7\r\na-value\r\n"
    );
    // A transaction with a script runs on a connection of its own, as the namespace's user from MULTI on.
    assert_eq!(call(&mut a, &["MULTI"]), "+OK\r\n");
    assert_eq!(call(&mut a, &["EVAL", READ_B_SECRET, "0"]), "+QUEUED\r\n");
    assert_eq!(
        call(&mut a, &["EVAL", "return redis.call('GET', 'a:x')", "0"]),
        "+QUEUED\r\n"
    );
    let exec = call(&mut a, &["EXEC"]);
    assert!(
        exec.starts_with("*2\r\n-") && exec.contains(KEY_REFUSED),
        "{exec}"
    );
    assert!(exec.ends_with("$7\r\na-value\r\n"), "{exec}");
    let mut root = platform.client("root-password");
    assert_eq!(
        call(&mut root, &["FCALL", "sneak", "0"]),
        "$6\r\nb-only\r\n"
    );
}

/// A restarted Redis has lost the namespaces' users: the gateway's connections are new, and create them again
/// before a script runs as one.
#[test]
fn a_namespace_user_is_created_again_after_the_backend_restarts() {
    let mut platform = Platform::start();
    let mut a = platform.client("a-password");
    a_stays_in_its_namespace(&platform, &mut a);
    platform.restart_backend();
    platform.seed();
    wait_for(
        "the gateway's connection to the restarted backend",
        Duration::from_secs(10),
        || call(&mut a, &["EVAL", "return redis.call('GET', 'a:x')", "0"]) == "$7\r\na-value\r\n",
    );
    a_stays_in_its_namespace(&platform, &mut a);
}

#[test]
fn a_namespaced_tenants_scripts_are_refused_where_the_operator_provisions_the_script_user() {
    let backend = RedisServer::start();
    let mut admin = backend.client();
    provision_script_users(&mut admin);
    // In database 0, a namespaced tenant's; in database 1, that of a tenant without a namespace (which may not
    // share a database with namespaced tenants).
    for db in [0, 1] {
        let () = redis::pipe()
            .cmd("SELECT")
            .arg(db)
            .ignore()
            .cmd("SET")
            .arg("b:secret")
            .arg("b-only")
            .ignore()
            .query(&mut admin)
            .unwrap();
    }
    let target = |db| {
        format!(
            "redis://gw:gwpw@127.0.0.1:{}/{db}?scriptUserName=scr&scriptPassword=scrpw",
            backend.port()
        )
    };
    let routes = json!({"tenants": [
        {"name": "a", "passwords": ["a-password"], "namespace": "a:",
         "route": {"type": "single", "target": target(0)}},
        {"name": "plain", "passwords": ["plain-password"],
         "route": {"type": "single", "target": target(1)}},
    ]});
    let gateway = Gateway::start(&routes);
    let mut a = RawClient::connect(gateway.port());
    a.roundtrip(b"AUTH a-password\r\n", b"+OK\r\n");
    refused(
        &mut a,
        &["EVAL", READ_B_SECRET, "0"],
        "NOPERM scripts of a tenant with a key namespace or command rules cannot run on this resource",
    );
    assert_eq!(call(&mut a, &["MULTI"]), "+OK\r\n");
    assert_eq!(call(&mut a, &["EVAL", READ_B_SECRET, "0"]), "+QUEUED\r\n");
    refused(
        &mut a,
        &["EXEC"],
        "NOPERM scripts of a tenant with a key namespace",
    );
    // A tenant without a namespace runs its scripts as the provisioned user, as before.
    let mut plain = RawClient::connect(gateway.port());
    plain.roundtrip(b"AUTH plain-password\r\n", b"+OK\r\n");
    assert_eq!(
        call(&mut plain, &["EVAL", READ_B_SECRET, "0"]),
        "$6\r\nb-only\r\n"
    );
}

/// On a Redis Cluster every master gets the namespace's user on its own connections, and refuses a script's key
/// of another namespace in the same slot (hash tags put `a:{t1}` and `b:{t1}` together, so the refusal is the
/// ACL's and not the cluster's).
#[test]
fn every_cluster_node_keeps_a_namespaced_tenants_scripts_inside_its_namespace() {
    let cluster = RedisCluster::start(3, 0, None);
    let routes = json!({"tenants": [
        {"name": "a", "passwords": ["a-password"], "namespace": "a:",
         "route": {"type": "single", "target": cluster.url()}},
        {"name": "root", "passwords": ["root-password"], "allow_admin": true,
         "route": {"type": "single", "target": cluster.url()}},
    ]});
    let gateway = Gateway::start(&routes);
    switchyard_tests::wait_for_slot_map_as(gateway.port(), Some("root-password"));
    let client = |password: &str| {
        let mut client = RawClient::connect(gateway.port());
        client.roundtrip(format!("AUTH {password}\r\n").as_bytes(), b"+OK\r\n");
        client
    };
    let (mut a, mut root) = (client("a-password"), client("root-password"));
    // The admin tenant's keys are not rewritten: it writes the stored names.
    let tags: Vec<String> = (0..30).map(|i| format!("{{t{i}}}")).collect();
    for tag in &tags {
        for namespace in ["a:", "b:"] {
            let key = format!("{namespace}{tag}");
            assert_eq!(call(&mut root, &["SET", &key, &key]), "+OK\r\n");
        }
    }
    assert_eq!(call(&mut a, &["SET", "probe", "1"]), "+OK\r\n");
    let own = match call(&mut root, &["EXISTS", "a:probe"]).as_str() {
        ":1\r\n" => "",
        _ => "a:",
    };
    for tag in &tags {
        let key = format!("{own}{tag}");
        let stored = format!("a:{tag}");
        let get_own = "return redis.call('GET', KEYS[1])";
        assert_eq!(
            call(&mut a, &["EVAL", get_own, "1", &key]),
            format!("${}\r\n{stored}\r\n", stored.len())
        );
        let sneak = format!("redis.call('GET', KEYS[1]); return redis.call('GET', 'b:{tag}')");
        refused(&mut a, &["EVAL", &sneak, "1", &key], KEY_REFUSED);
    }
    for master in cluster.masters() {
        let users: Vec<String> = redis::cmd("ACL")
            .arg("LIST")
            .query(&mut cluster.client(master.port))
            .unwrap();
        assert!(
            users
                .iter()
                .any(|u| u.starts_with("user switchyard-ns-") && u.contains(" ~a:* ")),
            "{}: {users:?}",
            master.port
        );
    }
}

/// After a sentinel failover the new master never had the namespace's user (ACL users are not replicated): the
/// gateway's new connection to it creates the user before the first script.
#[test]
fn a_sentinel_failover_gets_the_namespace_user_on_the_new_master() {
    let group = SentinelGroup::start(1, 3);
    let routes = json!({"tenants": [
        {"name": "a", "passwords": ["a-password"], "namespace": "a:",
         "route": {"type": "single", "target": group.url()}},
    ]});
    let gateway = Gateway::start(&routes);
    let old_master = group.master_port();
    for (key, value) in [("a:x", "a-value"), ("b:secret", "b-only")] {
        let () = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query(&mut group.client(old_master))
            .unwrap();
    }
    group.wait_in_sync();
    let mut a = RawClient::connect(gateway.port());
    a.roundtrip(b"AUTH a-password\r\n", b"+OK\r\n");
    let get_own = "return redis.call('GET', 'a:x')";
    assert_eq!(call(&mut a, &["EVAL", get_own, "0"]), "$7\r\na-value\r\n");
    refused(&mut a, &["EVAL", READ_B_SECRET, "0"], KEY_REFUSED);

    group.failover();
    wait_for(
        "the sentinels to switch masters",
        Duration::from_secs(15),
        || group.master_port() != old_master,
    );
    let new_master = group.master_port();
    let has_user = |port: u16| {
        let users: Vec<String> = redis::cmd("ACL")
            .arg("LIST")
            .query(&mut group.client(port))
            .unwrap();
        users.iter().any(|u| u.contains(" ~a:* "))
    };
    assert!(!has_user(new_master), "ACL users are not replicated");
    // Until the gateway hears of the failover, the script still runs on the old master (a replica now, which
    // reads): it has run on the new one once that one has the user.
    wait_for(
        "a script on the new master",
        Duration::from_secs(15),
        || call(&mut a, &["EVAL", get_own, "0"]) == "$7\r\na-value\r\n" && has_user(new_master),
    );
    refused(&mut a, &["EVAL", READ_B_SECRET, "0"], KEY_REFUSED);
}
