//! Tenant isolation, tried as a hostile tenant would: three tenants on databases 0, 1 and 2 of one shared Redis
//! (which has a password), one on a Redis of its own, none with `allow_admin`, and one admin tenant. Every
//! attack of the isolation issue is a case here: scripts that select, flush, move or copy across databases,
//! admin commands and secrets, function libraries, pub/sub channels and keyspace notifications, connection
//! state carried from one tenant to another. After the attacks every database is compared byte for byte with
//! what its owner wrote.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};
use switchyard_tests::{
    Gateway, GatewayBuilder, RawClient, RedisServer, provision_script_users, wait_for,
};

const BACKEND_PASSWORD: &str = "backend-secret-do-not-leak";

/// Every key of a database: name, DUMP, TTL.
type Keys = Vec<(String, Vec<u8>, i64)>;

/// The tenants: name, password, database of the shared Redis (`None`: a Redis of its own).
const TENANTS: &[(&str, &str, Option<u32>)] = &[
    ("alpha", "alpha-password", Some(0)),
    ("beta", "beta-password", Some(1)),
    ("gamma", "gamma-password", Some(2)),
    ("delta", "delta-password", None),
];
const ROOT_PASSWORD: &str = "root-password";

struct Platform {
    shared: RedisServer,
    own: RedisServer,
    gateway: Gateway,
}

impl Platform {
    fn start() -> Platform {
        Self::start_with(Gateway::builder())
    }

    fn start_with(builder: GatewayBuilder) -> Platform {
        let shared = RedisServer::builder().password(BACKEND_PASSWORD).start();
        let own = RedisServer::start();
        let shared_url = format!("redis://:{BACKEND_PASSWORD}@127.0.0.1:{}", shared.port());
        let mut tenants: Vec<Value> = TENANTS
            .iter()
            .map(|(name, password, db)| {
                let target = match db {
                    Some(db) => format!("{shared_url}/{db}"),
                    None => own.url(),
                };
                // Their scripts may run for half a second (see the runaway script's test).
                json!({"name": name, "passwords": [password], "limits": {"script_timeout_ms": 500},
                       "route": {"type": "single", "target": target}})
            })
            .collect();
        tenants.push(
            json!({"name": "root", "passwords": [ROOT_PASSWORD], "allow_admin": true,
                            "route": {"type": "single", "target": shared_url}}),
        );
        let gateway = builder.start(&json!({ "tenants": tenants }));
        Platform {
            shared,
            own,
            gateway,
        }
    }

    /// A raw connection authenticated as `password`'s tenant.
    fn client(&self, password: &str) -> RawClient {
        let mut client = RawClient::connect(self.gateway.port());
        client.roundtrip(format!("AUTH {password}\r\n").as_bytes(), b"+OK\r\n");
        client
    }

    /// A direct connection to the shared Redis, on `db`.
    fn shared_db(&self, db: u32) -> redis::Connection {
        let url = format!(
            "redis://:{BACKEND_PASSWORD}@127.0.0.1:{}/{db}",
            self.shared.port()
        );
        redis::Client::open(url)
            .and_then(|c| c.get_connection())
            .expect("connect to the shared Redis")
    }

    /// Every key of every database the tenants own, with its DUMP and expiry time: what must not change.
    fn contents(&self) -> BTreeMap<(String, u32), Keys> {
        let mut all = BTreeMap::new();
        for db in 0..16 {
            all.insert(("shared".to_string(), db), dump(&mut self.shared_db(db)));
        }
        all.insert(("own".to_string(), 0), dump(&mut self.own.client()));
        all
    }
}

fn dump(con: &mut redis::Connection) -> Keys {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).unwrap();
    keys.sort();
    keys.into_iter()
        .map(|key| {
            let value: Vec<u8> = redis::cmd("DUMP").arg(&key).query(con).unwrap();
            // When it expires, in Unix seconds: unlike TTL, it does not change while the test runs.
            let expires: i64 = redis::cmd("EXPIRETIME").arg(&key).query(con).unwrap();
            (key, value, expires)
        })
        .collect()
}

/// Sends `args` and returns the whole reply.
fn call(client: &mut RawClient, args: &[&str]) -> String {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    String::from_utf8_lossy(&client.request(&args)).into_owned()
}

/// Asserts an error reply that contains `text`.
fn refused(client: &mut RawClient, args: &[&str], text: &str) {
    let reply = call(client, args);
    assert!(
        reply.starts_with('-') && reply.contains(text),
        "{args:?} answered {reply:?}, expected an error with {text:?}"
    );
}

/// Each tenant's data, written through the gateway.
fn seed(platform: &Platform) {
    for (name, password, _) in TENANTS {
        let mut client = platform.client(password);
        let secret = format!("{name}-secret");
        assert_eq!(call(&mut client, &["SET", "secret", &secret]), "+OK\r\n");
        assert_eq!(call(&mut client, &["HSET", "h", "owner", name]), ":1\r\n");
        assert_eq!(
            call(&mut client, &["SET", "expiring", "x", "EX", "100000"]),
            "+OK\r\n"
        );
    }
}

#[test]
fn hostile_tenants_reach_nothing_of_anothers() {
    let platform = Platform::start();
    seed(&platform);
    let before = platform.contents();
    let mut alpha = platform.client("alpha-password");
    let mut beta = platform.client("beta-password");
    let denied = "can't run this command";

    // Introspection shows the tenant's own: its database (as db0) and its clients.
    let keyspace = call(&mut alpha, &["INFO", "keyspace"]);
    assert!(keyspace.contains("db0:keys=3,expires=1,"), "{keyspace}");
    assert!(
        !keyspace.contains("db1") && !keyspace.contains("db2"),
        "{keyspace}"
    );
    let keyspace = call(&mut beta, &["INFO", "keyspace"]);
    assert!(
        keyspace.contains("db0:keys=3,expires=1,") && !keyspace.contains("db1"),
        "{keyspace}"
    );
    let clients = call(&mut alpha, &["INFO", "clients"]);
    assert!(clients.contains("connected_clients:1\r\n"), "{clients}");
    let list = call(&mut alpha, &["CLIENT", "LIST"]);
    assert!(
        list.contains("user=alpha") && !list.contains("user=beta"),
        "{list}"
    );

    // Scripts cannot leave the tenant's database, flush, or run admin commands; computed names change nothing.
    for script in [
        "redis.call('SELECT', 1); return redis.call('GET', 'secret')",
        "return redis.call('FLUSHALL')",
        "return redis.call('FLUSHDB')",
        "return redis.call('MOVE', 'secret', 1)",
        "return redis.call('SWAPDB', 0, 1)",
        "return redis.call('COPY', 'secret', 'stolen', 'DB', 1)",
        "return redis.call(string.lower('SEL' .. 'ECT'), 2)",
        "return redis.call('MIGRATE', '127.0.0.1', 1, 'secret', 0, 100)",
        "return redis.call('PUBLISH', 'beta:news', 'forged')",
        "return redis.call('PUBSUB', 'CHANNELS')",
        "return redis.call('INFO', 'keyspace')",
    ] {
        refused(&mut alpha, &["EVAL", script, "0"], denied);
        refused(&mut alpha, &["EVAL_RO", script, "0"], "");
    }
    // `pcall` swallows the refusal, but the script is still on its own database.
    assert_eq!(
        call(
            &mut beta,
            &[
                "EVAL",
                "redis.pcall('SELECT', 2); return redis.call('GET', 'secret')",
                "0"
            ]
        ),
        "$11\r\nbeta-secret\r\n"
    );
    // What scripts are for keeps working.
    assert_eq!(
        call(
            &mut alpha,
            &["EVAL", "return redis.call('INCR', KEYS[1])", "1", "counter"]
        ),
        ":1\r\n"
    );
    let sha = call(
        &mut alpha,
        &["SCRIPT", "LOAD", "return redis.call('GET', KEYS[1])"],
    );
    let sha = sha.lines().nth(1).unwrap().to_string();
    assert_eq!(
        call(&mut alpha, &["EVALSHA", &sha, "1", "counter"]),
        "$1\r\n1\r\n"
    );
    assert_eq!(call(&mut alpha, &["DEL", "counter"]), ":1\r\n");

    // Direct commands: databases are the tenant's own, admin commands and secrets are the admin's.
    let out_of_range = "-ERR DB index is out of range\r\n";
    assert_eq!(call(&mut alpha, &["SELECT", "1"]), out_of_range);
    assert_eq!(call(&mut alpha, &["MOVE", "secret", "1"]), out_of_range);
    assert_eq!(
        call(&mut alpha, &["COPY", "secret", "stolen", "DB", "2"]),
        out_of_range
    );
    assert_eq!(
        call(&mut beta, &["COPY", "secret", "mine", "DB", "0"]),
        ":1\r\n"
    );
    assert_eq!(call(&mut beta, &["DEL", "mine"]), ":1\r\n");
    for (args, text) in [
        (&["FLUSHALL"][..], "admin command"),
        (&["SWAPDB", "0", "1"], "admin command"),
        (
            &["MIGRATE", "127.0.0.1", "5432", "secret", "0", "100"],
            "admin command",
        ),
        (&["CONFIG", "SET", "requirepass", "x"], "admin command"),
        (&["DEBUG", "SLEEP", "0"], "admin command"),
        (
            &[
                "FUNCTION",
                "LOAD",
                "#!lua name=evil\nredis.register_function('f', function() return 1 end)",
            ],
            "admin command",
        ),
        (&["FUNCTION", "DELETE", "lib"], "admin command"),
        (&["FUNCTION", "FLUSH"], "admin command"),
        (&["FUNCTION", "DUMP"], "admin command"),
        (
            &["FUNCTION", "RESTORE", "payload", "REPLACE"],
            "admin command",
        ),
        (
            &["FUNCTION", "LOAD", "REPLACE", "#!lua name=shared\nreturn"],
            "admin command",
        ),
        (&["FUNCTION", "LIST", "WITHCODE"], "admin command"),
        (&["SCRIPT", "FLUSH"], "admin command"),
        (&["ACL", "SETUSER", "x", "on"], "not supported"),
    ] {
        refused(&mut alpha, args, text);
    }
    // Commands about keys see the tenant's own; RESET goes back to its own database 0.
    assert_eq!(
        call(&mut beta, &["OBJECT", "ENCODING", "h"]),
        "$8\r\nlistpack\r\n"
    );
    assert_eq!(call(&mut beta, &["RESET"]), "+RESET\r\n");
    assert_eq!(
        call(&mut beta, &["GET", "secret"]),
        "$11\r\nbeta-secret\r\n"
    );
    // The same inside a transaction: refused at queue time, so EXEC aborts.
    assert_eq!(call(&mut alpha, &["MULTI"]), "+OK\r\n");
    assert_eq!(call(&mut alpha, &["MOVE", "secret", "1"]), out_of_range);
    assert_eq!(
        call(&mut alpha, &["COPY", "secret", "x", "DB", "1"]),
        out_of_range
    );
    refused(&mut alpha, &["EXEC"], "EXECABORT");
    assert_eq!(call(&mut alpha, &["MULTI"]), "+OK\r\n");
    assert_eq!(
        call(
            &mut alpha,
            &[
                "EVAL",
                "redis.call('SELECT', 1); return redis.call('FLUSHDB')",
                "0"
            ]
        ),
        "+QUEUED\r\n"
    );
    assert_eq!(call(&mut alpha, &["SET", "in-multi", "1"]), "+QUEUED\r\n");
    let exec = call(&mut alpha, &["EXEC"]);
    assert!(exec.contains(denied), "{exec}");
    assert_eq!(call(&mut alpha, &["DEL", "in-multi"]), ":1\r\n");

    // CONFIG GET shows no secret: not the backend's password, paths or replication settings.
    let config = call(&mut alpha, &["CONFIG", "GET", "*"]);
    for secret in [
        BACKEND_PASSWORD,
        "requirepass",
        "masterauth",
        "dir",
        "dbfilename",
        "logfile",
    ] {
        assert!(
            !config.contains(secret),
            "CONFIG GET * shows {secret}: {config}"
        );
    }
    assert!(config.contains("maxmemory-policy"), "{config}");
    assert_eq!(
        call(&mut alpha, &["CONFIG", "GET", "requirepass"]),
        "*0\r\n"
    );

    // A function an admin loaded is callable by every tenant, with the caller's restrictions.
    let mut root = platform.client(ROOT_PASSWORD);
    let library = "#!lua name=shared\n\
        redis.register_function('owner', function(keys) return redis.call('HGET', keys[1], 'owner') end)\n\
        redis.register_function('hop', function() redis.call('SELECT', 1); return redis.call('GET', 'secret') end)";
    assert_eq!(
        call(&mut root, &["FUNCTION", "LOAD", library]),
        "$6\r\nshared\r\n"
    );
    assert_eq!(
        call(&mut beta, &["FCALL", "owner", "1", "h"]),
        "$4\r\nbeta\r\n"
    );
    refused(&mut alpha, &["FCALL", "hop", "0"], denied);
    assert!(!call(&mut alpha, &["FUNCTION", "LIST"]).contains("register_function"));
    assert_eq!(
        call(&mut root, &["FUNCTION", "DELETE", "shared"]),
        "+OK\r\n"
    );
    // Not even an admin changes the credentials every gateway logs in with.
    refused(
        &mut root,
        &["CONFIG", "SET", "requirepass", "x"],
        "refused by the gateway",
    );
    refused(
        &mut root,
        &["CONFIG", "SET", "masterauth", "x"],
        "refused by the gateway",
    );
    // An admin keeps its reach.
    assert_eq!(
        call(
            &mut root,
            &[
                "EVAL",
                "redis.call('SELECT', 2); return redis.call('GET', 'secret')",
                "0"
            ]
        ),
        "$12\r\ngamma-secret\r\n"
    );

    drop((alpha, beta, root));
    assert_eq!(platform.contents(), before, "a tenant's data changed");
}

#[test]
fn channels_and_keyspace_notifications_are_each_tenants_own() {
    for protocol in [2, 3] {
        channels_are_each_tenants_own(protocol);
    }
}

/// As `channels_and_keyspace_notifications_are_each_tenants_own`, with subscribers speaking `protocol`: their
/// pub/sub frames are arrays in RESP2, pushes in RESP3.
fn channels_are_each_tenants_own(protocol: u8) {
    let frame = |bytes: &[u8]| -> Vec<u8> {
        let mut frame = bytes.to_vec();
        if protocol == 3 {
            frame[0] = b'>';
        }
        frame
    };
    let platform = Platform::start();
    let mut root = platform.client(ROOT_PASSWORD);
    assert_eq!(
        call(
            &mut root,
            &["CONFIG", "SET", "notify-keyspace-events", "KEA"]
        ),
        "+OK\r\n"
    );
    let mut alpha_sub = platform.client("alpha-password");
    let mut beta_sub = platform.client("beta-password");
    let mut alpha = platform.client("alpha-password");
    let mut beta = platform.client("beta-password");
    for subscriber in [&mut alpha_sub, &mut beta_sub] {
        subscriber.send_command(&[b"HELLO", protocol.to_string().as_bytes()]);
        subscriber.read_reply();
    }
    alpha_sub.send(b"SUBSCRIBE news\r\n");
    alpha_sub.expect(&frame(b"*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n"));
    beta_sub.send(b"PSUBSCRIBE __key*__:* *\r\n");
    beta_sub.expect(&frame(
        b"*3\r\n$10\r\npsubscribe\r\n$10\r\n__key*__:*\r\n:1\r\n",
    ));
    beta_sub.expect(&frame(b"*3\r\n$10\r\npsubscribe\r\n$1\r\n*\r\n:2\r\n"));
    beta_sub.send(b"SUBSCRIBE __keyspace@0__:k\r\n");
    beta_sub.expect(&frame(
        b"*3\r\n$9\r\nsubscribe\r\n$16\r\n__keyspace@0__:k\r\n:3\r\n",
    ));

    // A tenant's messages reach its own subscribers, by its own names, and no one else's: beta's `*` hears
    // beta's `news` and not alpha's.
    assert_eq!(call(&mut beta, &["PUBLISH", "news", "from-beta"]), ":1\r\n");
    beta_sub.expect(&frame(
        b"*4\r\n$8\r\npmessage\r\n$1\r\n*\r\n$4\r\nnews\r\n$9\r\nfrom-beta\r\n",
    ));
    assert_eq!(
        call(&mut alpha, &["PUBLISH", "news", "from-alpha"]),
        ":1\r\n"
    );
    alpha_sub.expect(&frame(
        b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$10\r\nfrom-alpha\r\n",
    ));
    // Introspection shows the tenant's own channels, by its names.
    assert_eq!(
        call(&mut alpha, &["PUBSUB", "CHANNELS"]),
        "*1\r\n$4\r\nnews\r\n"
    );
    assert_eq!(call(&mut beta, &["PUBSUB", "CHANNELS", "n*"]), "*0\r\n");
    assert_eq!(
        call(&mut beta, &["PUBSUB", "NUMSUB", "news"]),
        "*2\r\n$4\r\nnews\r\n:0\r\n"
    );
    assert_eq!(
        call(&mut alpha, &["PUBSUB", "NUMSUB", "news"]),
        "*2\r\n$4\r\nnews\r\n:1\r\n"
    );

    // Keyspace notifications: alpha's writes (database 0 of the shared Redis) reach beta by no pattern; beta's
    // own (database 1) reach it as its database 0.
    assert_eq!(call(&mut alpha, &["SET", "k", "alpha"]), "+OK\r\n");
    assert_eq!(call(&mut beta, &["SET", "k", "beta"]), "+OK\r\n");
    beta_sub.expect(&frame(
        b"*3\r\n$7\r\nmessage\r\n$16\r\n__keyspace@0__:k\r\n$3\r\nset\r\n",
    ));
    // Nothing else arrived for beta: a PING is answered next.
    beta_sub.send(b"PING\r\n");
    if protocol == 3 {
        beta_sub.expect(b"+PONG\r\n");
    } else {
        beta_sub.expect(b"*2\r\n$4\r\npong\r\n$0\r\n\r\n");
    }
    assert_eq!(
        call(&mut root, &["CONFIG", "SET", "notify-keyspace-events", ""]),
        "+OK\r\n"
    );
}

#[test]
fn connection_state_never_outlives_its_tenant() {
    let platform = Platform::start();
    seed(&platform);
    // An admin on database 3, then another tenant on the same connection: the tenant's own database.
    let mut client = platform.client(ROOT_PASSWORD);
    assert_eq!(call(&mut client, &["SELECT", "3"]), "+OK\r\n");
    assert_eq!(
        call(&mut client, &["CLIENT", "SETNAME", "root-tool"]),
        "+OK\r\n"
    );
    assert_eq!(call(&mut client, &["AUTH", "beta-password"]), "+OK\r\n");
    assert_eq!(
        call(&mut client, &["GET", "secret"]),
        "$11\r\nbeta-secret\r\n"
    );
    assert_eq!(call(&mut client, &["CLIENT", "GETNAME"]), "$-1\r\n");
    let hello = call(
        &mut client,
        &["HELLO", "2", "AUTH", "default", ROOT_PASSWORD],
    );
    assert!(hello.starts_with("*14"), "{hello}");
    assert_eq!(call(&mut client, &["SELECT", "2"]), "+OK\r\n");
    let hello = call(
        &mut client,
        &["HELLO", "2", "AUTH", "default", "gamma-password"],
    );
    assert!(hello.starts_with("*14"), "{hello}");
    assert_eq!(
        call(&mut client, &["GET", "secret"]),
        "$12\r\ngamma-secret\r\n"
    );
}

#[test]
fn the_gateway_sets_up_its_acl_users_and_reconnects_after_they_change() {
    let platform = Platform::start();
    let mut alpha = platform.client("alpha-password");
    assert_eq!(call(&mut alpha, &["SET", "k", "v"]), "+OK\r\n");
    let mut direct = platform.shared_db(0);
    let users: Vec<String> = redis::cmd("ACL").arg("USERS").query(&mut direct).unwrap();
    assert!(
        users.contains(&"switchyard-gateway".to_string()),
        "{users:?}"
    );
    assert!(
        users.contains(&"switchyard-script".to_string()),
        "{users:?}"
    );
    // An operator deletes the script user: scripts fail closed with a clear error, never as the gateway user.
    let () = redis::cmd("ACL")
        .arg("DELUSER")
        .arg("switchyard-script")
        .query(&mut direct)
        .unwrap();
    let reply = call(&mut alpha, &["EVAL", "return redis.call('SELECT', 1)", "0"]);
    assert!(reply.starts_with('-'), "{reply}");
    // The connection whose script could not switch users reconnects, which sets both users up again.
    wait_for("scripts to work again", Duration::from_secs(10), || {
        call(&mut alpha, &["EVAL", "return redis.call('GET', 'k')", "0"]) == "$1\r\nv\r\n"
    });
}

#[test]
fn connections_that_never_authenticate_take_no_tenants_place_and_are_closed() {
    // One worker: connections are admitted on their worker, so only one worker admits them in the order they
    // connected, and this test names the one that is refused.
    let platform = Platform::start_with(
        Gateway::builder()
            .arg("--workers")
            .arg("1")
            .arg("--max-clients")
            .arg("3")
            .arg("--max-unauthenticated-clients")
            .arg("20")
            // Every socket here comes from 127.0.0.1: the whole cap is its share (fair_shares.rs tests shares).
            .arg("--max-unauthenticated-per-address")
            .arg("20")
            .arg("--auth-timeout-ms")
            .arg("1500"),
    );
    // More idle sockets than --max-clients: tenants still get in.
    let mut idle: Vec<RawClient> = (0..10)
        .map(|_| RawClient::connect(platform.gateway.port()))
        .collect();
    let mut tenant = platform.client("alpha-password");
    assert_eq!(call(&mut tenant, &["PING"]), "+PONG\r\n");
    // The unauthenticated cap holds on its own.
    let mut more: Vec<RawClient> = (0..10)
        .map(|_| RawClient::connect(platform.gateway.port()))
        .collect();
    let mut refused = RawClient::connect(platform.gateway.port());
    refused.expect(b"-ERR max number of clients reached\r\n");
    // Until they are closed for not authenticating in time; the tenant's connection stays.
    for client in idle.iter_mut().chain(more.iter_mut()) {
        client.expect_closed();
    }
    assert_eq!(call(&mut tenant, &["PING"]), "+PONG\r\n");
    let mut late = platform.client("beta-password");
    assert_eq!(call(&mut late, &["PING"]), "+PONG\r\n");
}

#[test]
fn failed_auth_is_counted_and_slowed_per_address_without_slowing_correct_clients() {
    let platform = Platform::start();
    let mut attacker = RawClient::connect(platform.gateway.port());
    let wrongpass = "-WRONGPASS invalid username-password pair or user is disabled.\r\n";
    let started = std::time::Instant::now();
    // Ten free failures; after each further one the connection waits 100, 200, 400, 800 ms... before its next
    // command is read.
    for attempt in 0..15 {
        let password = format!("guess-{attempt}");
        assert_eq!(
            call(&mut attacker, &["AUTH", "alpha", &password]),
            wrongpass
        );
    }
    let slowed = started.elapsed();
    assert!(
        slowed >= Duration::from_millis(1500),
        "15 failures took {slowed:?}"
    );
    // A client that knows its password, from the same address, is not slowed.
    let started = std::time::Instant::now();
    let mut tenant = platform.client("alpha-password");
    assert_eq!(call(&mut tenant, &["PING"]), "+PONG\r\n");
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    // Counted by the tenant named (unknown names and no name count under "").
    assert_eq!(
        call(&mut attacker, &["AUTH", "nosuchtenant", "x"]),
        wrongpass
    );
    let (_, metrics) = platform.gateway.admin_get("/metrics");
    assert!(
        metrics.contains("switchyard_auth_failures_total{tenant=\"alpha\"} 15"),
        "{metrics}"
    );
    assert!(
        metrics.contains("switchyard_auth_failures_total{tenant=\"\"} 1"),
        "{metrics}"
    );
    assert!(platform.gateway.log().contains("failed AUTH"));
}

#[test]
fn a_route_may_grant_a_tenant_more_databases_and_no_others() {
    let backend = RedisServer::start();
    let routes = json!({"tenants": [{"name": "wide", "passwords": ["wide-password"], "route":
        {"type": "single", "target": format!("{}/2", backend.url()), "databases": 3}}]});
    let gateway = Gateway::start(&routes);
    let mut client = RawClient::connect(gateway.port());
    client.roundtrip(b"AUTH wide-password\r\n", b"+OK\r\n");
    // Its databases 0, 1 and 2 are the backend's 2, 3 and 4.
    assert_eq!(call(&mut client, &["SET", "k", "v"]), "+OK\r\n");
    assert_eq!(call(&mut client, &["MOVE", "k", "1"]), ":1\r\n");
    assert_eq!(call(&mut client, &["SELECT", "1"]), "+OK\r\n");
    assert_eq!(call(&mut client, &["COPY", "k", "k", "DB", "2"]), ":1\r\n");
    assert_eq!(
        call(&mut client, &["SELECT", "3"]),
        "-ERR DB index is out of range\r\n"
    );
    assert_eq!(
        call(&mut client, &["MOVE", "k", "3"]),
        "-ERR DB index is out of range\r\n"
    );
    let mut direct = backend.client();
    for (db, keys) in [(2, 0), (3, 1), (4, 1), (5, 0), (1, 0), (0, 0)] {
        let () = redis::cmd("SELECT").arg(db).query(&mut direct).unwrap();
        let size: i64 = redis::cmd("DBSIZE").query(&mut direct).unwrap();
        assert_eq!(size, keys, "database {db}");
    }
}

#[test]
fn operator_provisioned_users_serve_where_the_gateway_may_not_create_its_own() {
    let backend = RedisServer::start();
    let mut admin = backend.client();
    provision_script_users(&mut admin);
    let provisioned = format!(
        "redis://gw:gwpw@127.0.0.1:{}/1?scriptUserName=scr&scriptPassword=scrpw",
        backend.port()
    );
    // The default user may run scripts: naming it as the gateway's is refused at connect.
    let careless = format!(
        "redis://127.0.0.1:{}/2?scriptUserName=scr&scriptPassword=scrpw",
        backend.port()
    );
    let routes = json!({"tenants": [
        {"name": "managed", "passwords": ["managed-password"], "route": {"type": "single", "target": provisioned}},
        {"name": "careless", "passwords": ["careless-password"], "route": {"type": "single", "target": careless}}
    ]});
    let gateway = Gateway::start(&routes);
    let mut client = RawClient::connect(gateway.port());
    client.roundtrip(b"AUTH managed-password\r\n", b"+OK\r\n");
    assert_eq!(call(&mut client, &["SET", "k", "v"]), "+OK\r\n");
    assert_eq!(
        call(
            &mut client,
            &["EVAL", "return redis.call('GET', KEYS[1])", "1", "k"]
        ),
        "$1\r\nv\r\n"
    );
    refused(
        &mut client,
        &["EVAL", "redis.call('SELECT', 2); return 1", "0"],
        "can't run this command",
    );
    let users: String = redis::cmd("CLIENT").arg("LIST").query(&mut admin).unwrap();
    assert!(users.contains("user=gw "), "{users}");
    assert!(
        !users.contains("switchyard-"),
        "no user of the gateway's own: {users}"
    );
    let mut careless = RawClient::connect(gateway.port());
    careless.roundtrip(b"AUTH careless-password\r\n", b"+OK\r\n");
    refused(&mut careless, &["GET", "k"], "may run scripts");
}

#[test]
fn a_tenants_runaway_script_is_killed_so_the_shared_redis_serves_everyone_again() {
    let platform = Platform::start_with(Gateway::builder().arg("--command-timeout-ms").arg("500"));
    seed(&platform);
    // Redis serves SCRIPT KILL once a script has run for this long (5 s by default).
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("busy-reply-threshold")
        .arg(200)
        .query(&mut platform.shared_db(0))
        .unwrap();
    let mut alpha = platform.client("alpha-password");
    let started = std::time::Instant::now();
    refused(
        &mut alpha,
        &["EVAL", "while true do end", "0"],
        "Script killed by user with SCRIPT KILL",
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // The same inside a transaction, which runs on a connection of its own.
    assert_eq!(call(&mut alpha, &["MULTI"]), "+OK\r\n");
    assert_eq!(
        call(&mut alpha, &["EVAL", "while true do end", "0"]),
        "+QUEUED\r\n"
    );
    let exec = call(&mut alpha, &["EXEC"]);
    assert!(
        exec.contains("Script killed by user with SCRIPT KILL"),
        "{exec}"
    );
    // The Redis every tenant shares is usable again, through the gateway and directly.
    let mut beta = platform.client("beta-password");
    assert_eq!(
        call(&mut beta, &["GET", "secret"]),
        "$11\r\nbeta-secret\r\n"
    );
    assert_eq!(
        call(&mut alpha, &["GET", "secret"]),
        "$12\r\nalpha-secret\r\n"
    );
    let pong: String = redis::cmd("PING")
        .query(&mut platform.shared_db(0))
        .unwrap();
    assert_eq!(pong, "PONG");
    // An admin's script is its own business: it is not killed, and runs past the command timeout to its end
    // within its tenant's limit (5 s by default).
    let mut root = platform.client(ROOT_PASSWORD);
    assert_eq!(
        call(
            &mut root,
            &[
                "EVAL",
                "local t = redis.call('TIME')[1] + 2 while tonumber(redis.call('TIME')[1]) < t do end return 1",
                "0",
            ],
        ),
        ":1\r\n"
    );
}

#[test]
fn a_route_change_moves_open_connections_to_the_tenants_new_databases_or_closes_them() {
    let backend = RedisServer::start();
    let routes = |db: u32, databases: u32| {
        json!({"tenants": [{"name": "t", "passwords": ["t-password"], "route":
            {"type": "single", "target": format!("{}/{db}", backend.url()), "databases": databases}}]})
    };
    let gateway = Gateway::start(&routes(1, 2));
    let mut on_first = RawClient::connect(gateway.port());
    on_first.roundtrip(b"AUTH t-password\r\n", b"+OK\r\n");
    let mut on_second = RawClient::connect(gateway.port());
    on_second.roundtrip(b"AUTH t-password\r\n", b"+OK\r\n");
    assert_eq!(call(&mut on_second, &["SELECT", "1"]), "+OK\r\n");
    assert_eq!(call(&mut on_first, &["SET", "where", "db1"]), "+OK\r\n");
    // The tenant now owns database 3 alone: its database 0 is the backend's 3 on every open connection, and a
    // connection on a database it no longer owns is closed rather than moved behind the client's back.
    gateway.reload(&routes(3, 1));
    wait_for("the new route", Duration::from_secs(10), || {
        call(&mut on_first, &["GET", "where"]) == "$-1\r\n"
    });
    assert_eq!(call(&mut on_first, &["SET", "where", "db3"]), "+OK\r\n");
    on_second.send(b"GET where\r\n");
    on_second.expect_closed();
    let mut direct = backend.client();
    for (db, value) in [(1, "db1"), (3, "db3")] {
        let () = redis::cmd("SELECT").arg(db).query(&mut direct).unwrap();
        let found: String = redis::cmd("GET").arg("where").query(&mut direct).unwrap();
        assert_eq!(found, value);
    }
}
