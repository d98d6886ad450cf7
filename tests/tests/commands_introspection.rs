//! What tools ask at connect and while watching: COMMAND and its subcommands, CONFIG GET/SET, INFO (every
//! standard section, the keyspace summed over shards and cluster masters, commandstats for the tenant), CLIENT
//! LIST/INFO/KILL for the gateway's own clients, MEMORY USAGE/OBJECT/TYPE/TTL by key, SLOWLOG's
//! replies in Redis' words, LATENCY refused;
//! none of them closes the connection.

use serde_json::json;
use switchyard_schemas::placement::{crc16, hash_tag};
use switchyard_tests::compare::{Backends, each_topology};
use switchyard_tests::{Gateway, RawClient, RedisServer, wait_for};

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).into_owned()
}

/// `field` of `# Keyspace`'s `db0` line in an INFO reply.
fn db0_field(info: &str, field: &str) -> Option<u64> {
    let line = info.lines().find(|l| l.starts_with("db0:"))?;
    line["db0:".len()..]
        .split(',')
        .find_map(|kv| kv.strip_prefix(&format!("{field}=")))
        .and_then(|v| v.parse().ok())
}

/// The gateway answers COMMAND from its own table, in the connection's protocol: byte for byte what Redis sends
/// in RESP2 and, after `HELLO 3`, in RESP3 (sets, maps, `_` nulls). Listings of the whole table come in another
/// order (Redis' is its hash table's, random per process), so they compare as sets; entries of container commands
/// list their subcommands in that random order too and are left to `command_table.rs`, which sorts them.
#[test]
fn command_matches_redis_in_both_protocols() {
    each_topology(|c| {
        c.all_same(&[
            &["COMMAND", "COUNT"],
            &[
                "COMMAND",
                "INFO",
                "get",
                "nosuch",
                "SET",
                "keys",
                "config|get",
                "client|list",
            ],
            &["COMMAND", "INFO", "nosuch"],
            &["command", "info", "EVAL", "xread", "georadius", "spublish"],
            &[
                "COMMAND",
                "DOCS",
                "get",
                "nosuch",
                "client|list",
                "zadd",
                "set",
            ],
            &["COMMAND", "DOCS", "nosuch"],
            &["COMMAND", "DOCS", "shutdown", "xadd", "config|set"],
            &["COMMAND", "GETKEYS", "mset", "{k}a", "1", "{k}b", "2"],
            &["COMMAND", "GETKEYSANDFLAGS", "set", "k", "v", "GET"],
            &[
                "COMMAND",
                "GETKEYSANDFLAGS",
                "lmove",
                "a",
                "b",
                "LEFT",
                "RIGHT",
            ],
            &["COMMAND", "GETKEYSANDFLAGS", "eval", "s", "2", "a", "b"],
            &["COMMAND", "GETKEYS", "ping"],
            &["COMMAND", "GETKEYS", "nosuch", "x"],
            &["COMMAND", "GETKEYS", "get"],
            &["COMMAND", "GETKEYS"],
            &["COMMAND", "LIST", "FILTERBY", "MODULE", "x"],
            &["COMMAND", "LIST", "FILTERBY", "ACLCAT", "nosuch"],
            &["COMMAND", "LIST", "x"],
            &["COMMAND", "HELP"],
            &["COMMAND", "NOSUCH"],
            &["COMMAND", "COUNT", "x"],
        ]);
        c.unordered(&["COMMAND", "LIST"]);
        c.unordered(&["COMMAND", "LIST", "FILTERBY", "PATTERN", "config*"]);
        c.unordered(&["COMMAND", "LIST", "FILTERBY", "ACLCAT", "pubsub"]);
        c.same(&["PING"]);
    });
}

#[test]
fn config_memory_object_by_key_and_refusals_match_redis() {
    each_topology(|c| {
        c.all_same(&[
            &["CONFIG", "GET", "maxmemory"],
            &["CONFIG", "GET", "maxmemory-policy"],
            &["CONFIG", "GET", "save"],
            &["CONFIG", "GET", "appendonly"],
            &["CONFIG", "GET", "nosuchparameter"],
            &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"],
            &["CONFIG", "GET", "maxmemory-policy"],
            &["CONFIG", "SET", "maxmemory-policy", "nonsense"],
        ]);
        // CONFIG SET reached every shard and every master.
        let ports: Vec<u16> = match c.backends() {
            Backends::Servers(servers) => servers.iter().map(RedisServer::port).collect(),
            Backends::Cluster(cluster) => cluster.masters().iter().map(|m| m.port).collect(),
        };
        for port in ports {
            let policy =
                RawClient::connect(port).request(&[b"CONFIG", b"GET", b"maxmemory-policy"]);
            assert!(
                text(&policy).contains("allkeys-lru"),
                "[{}] node {port}",
                c.topology()
            );
        }
        c.all_same(&[
            &["CONFIG", "SET", "maxmemory-policy", "noeviction"],
            &["SET", "m:a", "some value"],
            &["RPUSH", "m:l", "1", "2", "3"],
            &["HSET", "m:h", "f", "v"],
            &["EXPIRE", "m:h", "1000"],
            &["MEMORY", "USAGE", "m:missing"],
            &["OBJECT", "ENCODING", "m:l"],
            &["OBJECT", "ENCODING", "m:missing"],
            &["OBJECT", "FREQ", "m:a"],
            &["TYPE", "m:l"],
            &["TYPE", "m:h"],
            &["TTL", "m:a"],
            &["PTTL", "m:missing"],
            &["EXPIRETIME", "m:a"],
        ]);
        // A cluster node counts some bytes more per key than a plain Redis: the owner's own answer is the one.
        for args in [
            &["MEMORY", "USAGE", "m:a"][..],
            &["MEMORY", "USAGE", "m:l", "SAMPLES", "0"][..],
        ] {
            match c.backends() {
                Backends::Cluster(cluster) => {
                    let owner = cluster.slot_owners()
                        [usize::from(crc16(hash_tag(args[2].as_bytes())) % 16384)];
                    let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
                    let direct = RawClient::connect(owner).request(&bytes);
                    let (_, gateway) = c.both(args);
                    assert_eq!(text(&gateway), text(&direct), "{args:?}");
                }
                Backends::Servers(_) => {
                    c.same(args);
                }
            }
        }
        let why = "docs/commands.md#introspection: the backends keep their own";
        // The gateway answers SLOWLOG with the tenant's own log (tests/tracking.rs), in Redis' words.
        c.all_same(&[
            &["SLOWLOG", "HELP"],
            &["SLOWLOG", "RESET"],
            &["SLOWLOG", "GET", "-2"],
            &["SLOWLOG", "GET", "x"],
        ]);
        let refusal = "-ERR LATENCY LATEST is not supported by the gateway: each backend keeps its own; the \
                       gateway's command latency is the switchyard_gateway_command_duration_seconds histogram on \
                       its admin port\r\n";
        c.differs(&["LATENCY", "LATEST"], refusal.as_bytes(), why);
        c.differs(
            &["CLIENT", "PAUSE", "100"],
            b"-ERR CLIENT PAUSE is not supported by the gateway: it would pause the backend for every tenant and every gateway\r\n",
            "docs/commands.md#client",
        );
        c.all_same(&[
            &["CLIENT", "NO-EVICT", "on"],
            &["CLIENT", "NO-EVICT", "maybe"],
            &["CLIENT", "NO-EVICT", "OFF"],
            &["CLIENT", "GETREDIR"],
            &["CLIENT", "TRACKINGINFO"],
            &["CLIENT", "KILL", "ID", "notanumber"],
            &["CLIENT", "KILL", "ID", "0"],
            &["CLIENT", "KILL", "ID", "99999"],
            &["CLIENT", "KILL", "BADFILTER", "x"],
            &["CLIENT", "KILL", "ADDR"],
            &["CLIENT", "KILL", "192.0.2.1:1"],
            &["CLIENT", "KILL", "SKIPME", "maybe"],
            &["CLIENT", "KILL", "TYPE", "nosuch"],
            &["CLIENT", "KILL", "TYPE", "pubsub"],
            &["CLIENT", "KILL", "USER", "nosuch"],
            &["CLIENT", "LIST", "ID", "99999", "99998"],
            &["CLIENT", "LIST", "ID", "x"],
            &["CLIENT", "LIST", "ID"],
            &["CLIENT", "LIST", "TYPE", "master"],
            &["CLIENT", "LIST", "TYPE", "nosuch"],
            &["CLIENT", "LIST", "BAD", "x"],
            &["GET", "m:a"],
            // The gateway is a standalone Redis to its clients, even in front of a cluster.
            &["CLUSTER", "SLOTS"],
            &["CLUSTER", "NODES"],
            &["CLUSTER", "INFO"],
            &["CLUSTER", "KEYSLOT", "k"],
            &["CLUSTER", "NOSUCH"],
            &["READONLY"],
            &["READWRITE"],
            &["ASKING"],
        ]);
    });
}

#[test]
fn info_has_every_section_and_sums_the_keyspace() {
    each_topology(|c| {
        for i in 0..200 {
            let key = format!("i:{i}");
            c.same(&["SET", &key, "v"]);
            if i % 4 == 0 {
                c.same(&["EXPIRE", &key, "10000"]);
            }
        }
        // The same sections in the same order as Redis, by default and with everything.
        let headers = |info: &str| -> Vec<String> {
            info.lines()
                .filter(|l| l.starts_with('#'))
                .map(str::to_string)
                .collect()
        };
        for args in [
            &["INFO"][..],
            &["INFO", "everything"][..],
            &["INFO", "server", "cpu"][..],
        ] {
            let (reference, gateway) = c.both(args);
            assert_eq!(
                headers(&text(&gateway)),
                headers(&text(&reference)),
                "{args:?}"
            );
        }
        // Every field the gateway writes is one Redis has (but the gateway's own version).
        let (reference, gateway) = c.both(&["INFO", "everything"]);
        let fields = |info: &str| -> Vec<String> {
            info.lines()
                .filter_map(|l| l.split_once(':').map(|(name, _)| name.to_string()))
                .filter(|name| !name.starts_with("db") && !name.starts_with("cmdstat_"))
                .collect()
        };
        let known = fields(&text(&reference));
        for field in fields(&text(&gateway)) {
            assert!(
                field == "switchyard_version" || known.contains(&field),
                "[{}] {field} is not a Redis INFO field",
                c.topology()
            );
        }
        let (reference, gateway) = c.both(&["INFO"]);
        let (reference, gateway) = (text(&reference), text(&gateway));
        for section in [
            "# Server",
            "# Clients",
            "# Memory",
            "# Persistence",
            "# Stats",
            "# Replication",
            "# CPU",
            "# Keyspace",
        ] {
            assert!(
                gateway.contains(section),
                "[{}] {section} in {gateway}",
                c.topology()
            );
        }
        for field in [
            "redis_version:",
            "redis_mode:standalone",
            "connected_clients:",
            "used_memory:",
            "loading:0",
            "role:master",
            "used_cpu_user:",
            "run_id:",
            "multiplexing_api:",
        ] {
            assert!(gateway.contains(field), "[{}] {field}", c.topology());
        }
        assert!(
            !gateway.contains("# Commandstats"),
            "not in the default sections"
        );
        for field in ["keys", "expires"] {
            assert_eq!(
                db0_field(&gateway, field),
                db0_field(&reference, field),
                "[{}] db0 {field}: {gateway}",
                c.topology()
            );
        }
        assert_eq!(db0_field(&gateway, "keys"), Some(200));
        let (_, keyspace) = c.both(&["INFO", "keyspace"]);
        let keyspace = text(&keyspace);
        // A bulk string, or in RESP3 a verbatim string, as from Redis.
        let kind = if c.protocol() == 3 { "=" } else { "$" };
        assert!(
            keyspace.starts_with(kind)
                && keyspace.contains("# Keyspace\r\ndb0:keys=200,expires=50,"),
            "{keyspace}"
        );
        let (_, stats) = c.both(&["INFO", "commandstats"]);
        let stats = text(&stats);
        assert!(
            stats.contains("cmdstat_set:calls=200,") && stats.contains("cmdstat_expire:calls=50,"),
            "[{}] {stats}",
            c.topology()
        );
        assert!(!stats.contains("# Server"));
        c.same(&["PING"]);
    });
}

#[test]
fn client_kill_closes_the_tenants_own_clients_only() {
    let backend = RedisServer::start();
    let routes = json!({"tenants": [
        {"name": "t", "passwords": ["pw-t"], "route": {"type": "single", "target": backend.url()}},
        {"name": "u", "passwords": ["pw-u"], "route": {"type": "single", "target": backend.url()}},
    ]});
    let gateway = Gateway::start(&routes);
    let login = |password: &str| {
        let mut client = RawClient::connect(gateway.port());
        client.roundtrip(format!("AUTH {password}\r\n").as_bytes(), b"+OK\r\n");
        client
    };
    let mut admin = login("pw-t");
    let mut victim = login("pw-t");
    let mut other = login("pw-t");
    let mut stranger = login("pw-u");
    let id = |client: &mut RawClient| {
        text(&client.request(&[b"CLIENT", b"ID"]))[1..]
            .trim()
            .to_string()
    };
    let victim_id = id(&mut victim);
    let stranger_id = id(&mut stranger);

    let list = text(&admin.request(&[b"CLIENT", b"LIST"]));
    assert_eq!(list.matches("user=t").count(), 3, "{list}");
    let normal = text(&admin.request(&[b"CLIENT", b"LIST", b"TYPE", b"normal"]));
    assert_eq!(normal.matches("user=t").count(), 3, "{normal}");
    let one = text(&admin.request(&[
        b"CLIENT",
        b"LIST",
        b"ID",
        victim_id.as_bytes(),
        stranger_id.as_bytes(),
    ]));
    assert_eq!(
        one.matches("id=").count(),
        1,
        "only the tenant's own client: {one}"
    );
    assert!(one.contains(&format!("id={victim_id} ")), "{one}");
    assert!(
        !list.contains(&format!("id={stranger_id} ")),
        "another tenant's client is not listed"
    );
    let info = text(&admin.request(&[b"CLIENT", b"INFO"]));
    assert!(
        info.contains("cmd=client|info") && info.contains("user=t"),
        "{info}"
    );

    // Another tenant's client cannot be killed, whatever the filter.
    let kill = |client: &mut RawClient, args: &[&str]| {
        let mut full: Vec<&[u8]> = vec![b"CLIENT", b"KILL"];
        full.extend(args.iter().map(|a| a.as_bytes()));
        text(&client.request(&full))
    };
    assert_eq!(kill(&mut admin, &["ID", &stranger_id]), ":0\r\n");
    assert_eq!(
        kill(&mut admin, &["USER", "u"]),
        "-ERR No such user 'u'\r\n"
    );
    stranger.roundtrip(b"PING\r\n", b"+PONG\r\n");

    assert_eq!(kill(&mut admin, &["ID", &victim_id]), ":1\r\n");
    victim.expect_closed();
    // The old form, by address.
    let addr = text(&other.request(&[b"CLIENT", b"INFO"]))
        .split(' ')
        .find_map(|f| f.strip_prefix("addr=").map(str::to_string))
        .expect("addr field");
    assert_eq!(kill(&mut admin, &[&addr]), "+OK\r\n");
    other.expect_closed();
    assert_eq!(kill(&mut admin, &[&addr]), "-ERR No such client\r\n");
    wait_for(
        "the killed clients to leave CLIENT LIST",
        std::time::Duration::from_secs(10),
        || {
            text(&admin.request(&[b"CLIENT", b"LIST"]))
                .matches("user=t")
                .count()
                == 1
        },
    );
    // SKIPME no: the caller is killed too, after its reply.
    assert_eq!(kill(&mut admin, &["USER", "t", "SKIPME", "no"]), ":1\r\n");
    admin.expect_closed();
    stranger.roundtrip(b"PING\r\n", b"+PONG\r\n");
}

#[test]
fn admin_commands_are_refused_without_allow_admin_and_connections_stay_open() {
    let backend = RedisServer::start();
    let gateway = Gateway::start(&switchyard_tests::open_single_tenant(json!(backend.url())));
    let mut client = RawClient::connect(gateway.port());
    client.roundtrip(
        b"CONFIG SET maxmemory 1\r\n",
        b"-ERR CONFIG SET is an admin command; this tenant may not run it (allow_admin)\r\n",
    );
    let get = client.request(&[b"CONFIG", b"GET", b"maxmemory"]);
    assert_eq!(get, b"*2\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n");
    client.roundtrip(b"ACL WHOAMI\r\n", b"$1\r\nt\r\n");
    client.roundtrip(
        b"ACL LIST\r\n",
        b"-ERR ACL LIST is not supported by the gateway: tenants and their passwords are managed by the control plane\r\n",
    );
    let categories = client.request(&[b"ACL", b"CAT"]);
    assert!(categories.starts_with(b"*"), "ACL CAT is forwarded");
    client.roundtrip(b"PING\r\n", b"+PONG\r\n");
}

/// CLIENT KILL of a client blocked in BLPOP closes it at once and releases its dedicated backend connection.
#[test]
fn client_kill_releases_a_blocked_client() {
    let backend = RedisServer::start();
    let gateway = Gateway::start(&switchyard_tests::open_single_tenant(json!(backend.url())));
    let mut blocked = RawClient::connect(gateway.port());
    let id = text(&blocked.request(&[b"CLIENT", b"ID"]))[1..]
        .trim()
        .to_string();
    blocked.send(b"BLPOP killed:list 0\r\n");
    let mut direct = RawClient::connect(backend.port());
    let blocked_on_backend =
        |direct: &mut RawClient| text(&direct.request(&[b"CLIENT", b"LIST"])).contains("cmd=blpop");
    wait_for(
        "the BLPOP to reach the backend",
        std::time::Duration::from_secs(10),
        || blocked_on_backend(&mut direct),
    );
    let mut admin = RawClient::connect(gateway.port());
    admin.roundtrip(format!("CLIENT KILL ID {id}\r\n").as_bytes(), b":1\r\n");
    blocked.expect_closed();
    wait_for(
        "the backend connection to go",
        std::time::Duration::from_secs(10),
        || !blocked_on_backend(&mut direct),
    );
    // Nobody pops what is pushed now.
    admin.roundtrip(b"LPUSH killed:list x\r\n", b":1\r\n");
    admin.roundtrip(b"LLEN killed:list\r\n", b":1\r\n");
}
