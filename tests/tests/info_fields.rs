//! INFO field by field: every field redis-server 7.0 writes, section by section in its order, through the
//! gateway over every topology; the values a test can pin (changes since the last save, error replies by
//! prefix, cached scripts, the backend's allocator, a tenant's own keyspace on a shared Redis); CONFIG
//! RESETSTAT, which zeroes one tenant's figures and no one else's.

use serde_json::json;
use switchyard_tests::compare::{Comparison, each_topology};
use switchyard_tests::{Gateway, RawClient, RedisServer, command_calls};

/// The text of an INFO reply (a bulk string, or a RESP3 verbatim string).
fn body(reply: &[u8]) -> String {
    let text = String::from_utf8_lossy(reply);
    let text = text.split_once("\r\n").map_or("", |(_, rest)| rest);
    text.strip_prefix("txt:").unwrap_or(text).to_string()
}

/// Fields named after what they count: which of them are there depends on what ran.
fn counted(name: &str) -> bool {
    ["cmdstat_", "errorstat_", "latency_percentiles_usec_"]
        .iter()
        .any(|prefix| name.starts_with(prefix))
        || name
            .strip_prefix("db")
            .is_some_and(|n| n.parse::<u32>().is_ok())
}

/// Each section's heading and the names of its fields, in order (without `counted` ones).
fn field_names(info: &str) -> Vec<(String, Vec<String>)> {
    let mut sections: Vec<(String, Vec<String>)> = Vec::new();
    for line in info.lines() {
        if let Some(title) = line.strip_prefix("# ") {
            sections.push((title.to_string(), Vec::new()));
        } else if let (Some((name, _)), Some((_, fields))) =
            (line.split_once(':'), sections.last_mut())
            && !counted(name)
        {
            fields.push(name.to_string());
        }
    }
    sections
}

/// `field`'s value in `INFO section`.
fn field(client: &mut RawClient, section: &str, field: &str) -> Option<String> {
    let info = body(&client.request(&[b"INFO", section.as_bytes()]));
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .map(str::to_string)
}

fn number(client: &mut RawClient, section: &str, name: &str) -> i64 {
    value_of(&body(&client.request(&[b"INFO", section.as_bytes()])), name)
}

/// `INFO everything` through the gateway has the fields a plain redis-server writes, section by section in its
/// order; the one addition is the gateway's `switchyard_version` (docs/commands.md#introspection).
#[test]
fn info_has_every_field_redis_writes_in_its_order() {
    each_topology(|c| {
        c.same(&["SET", "k", "v"]);
        let (reference, gateway) = c.both(&["INFO", "everything"]);
        let mut gateway = field_names(&body(&gateway));
        for (_, fields) in &mut gateway {
            fields.retain(|name| name != "switchyard_version");
        }
        assert_eq!(
            gateway,
            field_names(&body(&reference)),
            "[{}, RESP{}]",
            c.topology(),
            c.protocol()
        );
        // Summed over every shard and cluster master: the changes the writes made, wherever their keys went.
        let changes = |c: &mut Comparison| {
            let info = body(&c.both(&["INFO", "persistence"]).1);
            value_of(&info, "rdb_changes_since_last_save")
        };
        let before = changes(c);
        for i in 0..20 {
            c.same(&["SET", &format!("spread:{i}"), "v"]);
        }
        assert_eq!(changes(c), before + 20, "[{}]", c.topology());
        // An admin's RESETSTAT reaches every backend too; the counts start again as on Redis.
        c.same(&["CONFIG", "RESETSTAT"]);
        let (reference, gateway) = c.both(&["INFO", "stats"]);
        for name in ["total_commands_processed", "total_error_replies"] {
            assert_eq!(
                value_of(&body(&gateway), name),
                value_of(&body(&reference), name),
                "[{}] {name}",
                c.topology()
            );
        }
    });
}

fn value_of(info: &str, name: &str) -> i64 {
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("{name}:")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} in {info}"))
}

/// The fields that describe the data come from the tenant's backend; errors and commands from the gateway, which
/// counts every error reply it writes to the tenant's clients (its own and the backend's, pipelined or not).
#[test]
fn info_values_come_from_the_backend_and_the_gateway() {
    let backend = RedisServer::start();
    let gateway = Gateway::start(&switchyard_tests::open_single_tenant(json!(backend.url())));
    let mut client = RawClient::connect(gateway.port());
    let mut direct = RawClient::connect(backend.port());

    let changes = number(&mut client, "persistence", "rdb_changes_since_last_save");
    client.roundtrip(b"SET a 1\r\nSET b 2\r\n", b"+OK\r\n+OK\r\n");
    assert_eq!(
        number(&mut client, "persistence", "rdb_changes_since_last_save"),
        changes + 2
    );
    assert_eq!(
        field(&mut client, "memory", "mem_allocator"),
        field(&mut direct, "memory", "mem_allocator")
    );

    assert_eq!(number(&mut client, "memory", "number_of_cached_scripts"), 0);
    let sha = client.request(&[b"SCRIPT", b"LOAD", b"return 1"]);
    assert!(sha.starts_with(b"$40\r\n"), "{sha:?}");
    assert_eq!(number(&mut client, "memory", "number_of_cached_scripts"), 1);

    assert_eq!(number(&mut client, "stats", "total_error_replies"), 0);
    // A backend's error inside a pipelined run, the gateway's own error, and one more of the backend's.
    client.roundtrip(
        b"SET s x\r\nLPUSH s a\r\nGET s\r\nNOSUCH\r\nINCR s\r\n",
        b"+OK\r\n-WRONGTYPE Operation against a key holding the wrong kind of value\r\n$1\r\nx\r\n\
          -ERR unknown command 'NOSUCH', with args beginning with: \r\n\
          -ERR value is not an integer or out of range\r\n",
    );
    assert_eq!(number(&mut client, "stats", "total_error_replies"), 3);
    let errors = body(&client.request(&[b"INFO", b"errorstats"]));
    assert_eq!(
        errors,
        "# Errorstats\r\nerrorstat_ERR:count=2\r\nerrorstat_WRONGTYPE:count=1\r\n\r\n"
    );

    // INFO inside a transaction would be the backend's (every tenant's databases): refused.
    client.roundtrip(b"MULTI\r\n", b"+OK\r\n");
    client.roundtrip(
        b"INFO\r\n",
        b"-ERR INFO inside MULTI is not supported by the gateway\r\n",
    );
    client.roundtrip(b"DISCARD\r\n", b"+OK\r\n");
}

const SHARED: &[(&str, &str, u32)] = &[("alpha", "alpha-pw", 0), ("beta", "beta-pw", 1)];

/// Two tenants on databases 0 and 1 of one Redis: each sees its own keyspace, and `CONFIG RESETSTAT` (+OK for a
/// tenant without `allow_admin`) zeroes the figures of the tenant that sent it, not its neighbour's nor the
/// backend's.
#[test]
fn config_resetstat_zeroes_the_tenants_own_figures_only() {
    let shared = RedisServer::start();
    let tenants: Vec<_> = SHARED
        .iter()
        .map(|(name, password, db)| {
            json!({"name": name, "passwords": [password],
                   "route": {"type": "single", "target": format!("{}/{db}", shared.url())}})
        })
        .collect();
    let gateway = Gateway::start(&json!({ "tenants": tenants }));
    let connect = |password: &str| {
        let mut client = RawClient::connect(gateway.port());
        client.roundtrip(format!("AUTH {password}\r\n").as_bytes(), b"+OK\r\n");
        client
    };
    let (mut alpha, mut beta) = (connect(SHARED[0].1), connect(SHARED[1].1));
    alpha.roundtrip(b"SET a1 x\r\nSET a2 x\r\n", b"+OK\r\n+OK\r\n");
    beta.roundtrip(b"SET b1 x\r\n", b"+OK\r\n");
    for client in [&mut alpha, &mut beta] {
        let error = client.request(&[b"INCR", b"nosuch", b"x"]);
        assert!(error.starts_with(b"-ERR wrong number of arguments"));
    }
    let keyspace = body(&alpha.request(&[b"INFO", b"keyspace"]));
    assert_eq!(
        keyspace,
        "# Keyspace\r\ndb0:keys=2,expires=0,avg_ttl=0\r\n\r\n"
    );
    let keyspace = body(&beta.request(&[b"INFO", b"keyspace"]));
    assert_eq!(
        keyspace,
        "# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n\r\n"
    );

    alpha.roundtrip(b"CONFIG RESETSTAT\r\n", b"+OK\r\n");
    // One command since: INFO itself (Redis counts RESETSTAT instead, and INFO once it has run).
    assert_eq!(number(&mut alpha, "stats", "total_commands_processed"), 1);
    assert_eq!(number(&mut alpha, "stats", "total_error_replies"), 0);
    assert_eq!(number(&mut alpha, "stats", "total_connections_received"), 0);
    assert_eq!(
        body(&alpha.request(&[b"INFO", b"errorstats"])),
        "# Errorstats\r\n\r\n"
    );
    let commands = body(&alpha.request(&[b"INFO", b"commandstats"]));
    assert!(!commands.contains("cmdstat_set"), "{commands}");

    assert_eq!(number(&mut beta, "stats", "total_error_replies"), 1);
    assert_eq!(number(&mut beta, "stats", "total_connections_received"), 1);
    let errors = body(&beta.request(&[b"INFO", b"errorstats"]));
    assert_eq!(errors, "# Errorstats\r\nerrorstat_ERR:count=1\r\n\r\n");
    let commands = body(&beta.request(&[b"INFO", b"commandstats"]));
    assert!(commands.contains("cmdstat_set:calls=1,"), "{commands}");
    assert!(
        commands.contains("rejected_calls=0,failed_calls=0"),
        "{commands}"
    );
    // The backend's own figures are every tenant's: a tenant's RESETSTAT does not reach them.
    assert_eq!(command_calls(&mut shared.client(), "set"), 3);
}
