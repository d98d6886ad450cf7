//! CLIENT LIST / CLIENT INFO fields, CLIENT UNBLOCK, CLIENT NO-EVICT and MONITOR, each compared with a plain
//! redis-server doing the same thing over raw connections: the gateway serves two tenants (`a`, `b`) over one
//! backend, and a tenant only ever sees and touches its own clients and commands.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::json;
use switchyard_tests::{Gateway, RawClient, RedisServer, wait_for};

/// A reference redis-server, and a gateway with tenants `a` (password `pa`) and `b` (`pb`) on another one.
struct Servers {
    reference: RedisServer,
    gateway: Gateway,
    backend: RedisServer,
}

impl Servers {
    fn start() -> Servers {
        let backend = RedisServer::start();
        let route = json!({"type": "single", "target": backend.url()});
        let gateway = Gateway::start(&json!({"tenants": [
            {"name": "a", "passwords": ["pa"], "route": route},
            {"name": "b", "passwords": ["pb"], "route": route},
        ]}));
        Servers {
            reference: RedisServer::start(),
            gateway,
            backend,
        }
    }

    /// A client of the reference (`None`) or of a tenant of the gateway, speaking `protocol`.
    fn client(&self, tenant: Option<&str>, protocol: u8) -> RawClient {
        let Some(tenant) = tenant else {
            return RawClient::connect_speaking(self.reference.port(), protocol);
        };
        let mut client = RawClient::connect(self.gateway.port());
        let password = format!("p{tenant}");
        assert_eq!(client.request(&[b"AUTH", password.as_bytes()]), b"+OK\r\n");
        if protocol == 3 {
            assert!(client.request(&[b"HELLO", b"3"]).starts_with(b"%7\r\n"));
        }
        client
    }
}

/// Where each comparison runs: the reference, then tenant `a` of the gateway.
const SIDES: [Option<&str>; 2] = [None, Some("a")];

fn id(client: &mut RawClient) -> u64 {
    let reply = client.request(&[b"CLIENT", b"ID"]);
    String::from_utf8_lossy(&reply[1..]).trim().parse().unwrap()
}

/// The `CLIENT LIST` line of client `id`, as field -> value, seen by `observer`.
fn fields_of(observer: &mut RawClient, id: u64) -> HashMap<String, String> {
    let reply = observer.request(&[b"CLIENT", b"LIST", b"ID", id.to_string().as_bytes()]);
    let text = String::from_utf8_lossy(&reply).into_owned();
    let line = text.lines().nth(1).unwrap_or_default();
    line.trim_start_matches("txt:")
        .split(' ')
        .filter_map(|field| field.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The fields of client `id` once `ready` holds for them.
fn fields_when(
    observer: &mut RawClient,
    id: u64,
    ready: impl Fn(&HashMap<String, String>) -> bool,
) -> HashMap<String, String> {
    let mut fields = HashMap::new();
    wait_for(
        "the client's CLIENT LIST line",
        Duration::from_secs(10),
        || {
            fields = fields_of(observer, id);
            ready(&fields)
        },
    );
    fields
}

fn pick(fields: &HashMap<String, String>, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|name| {
            format!(
                "{name}={}",
                fields.get(*name).map_or("<missing>", String::as_str)
            )
        })
        .collect()
}

/// What another connection sees of a subscriber, a blocked client, a client in MULTI and one with NO-EVICT: the
/// same flags, counts and last command as from Redis, and every field of Redis 7.0's line.
#[test]
fn client_list_shows_other_clients_as_redis_does() {
    let servers = Servers::start();
    let mut seen = Vec::new();
    for side in SIDES {
        let mut observer = servers.client(side, 2);
        let mut subscriber = servers.client(side, 2);
        let mut blocked = servers.client(side, 2);
        let mut transaction = servers.client(side, 2);
        let (subscriber_id, blocked_id, transaction_id) =
            (id(&mut subscriber), id(&mut blocked), id(&mut transaction));
        subscriber.send_command(&[b"SUBSCRIBE", b"news"]);
        subscriber.read_reply();
        blocked.send_command(&[b"BLPOP", b"queue", b"0"]);
        transaction.request(&[b"CLIENT", b"NO-EVICT", b"on"]);
        transaction.request(&[b"MULTI"]);
        transaction.request(&[b"SET", b"k", b"v"]);
        let subscribed = fields_when(&mut observer, subscriber_id, |f| f["sub"] == "1");
        let waiting = fields_when(&mut observer, blocked_id, |f| f["flags"] == "b");
        let queued = fields_when(&mut observer, transaction_id, |f| f["multi"] == "1");
        let observer_id = id(&mut observer);
        let own = fields_of(&mut observer, observer_id);
        // Every field of Redis 7.0's line is there, with a value (an fd: the gateway's socket).
        for field in [
            "id",
            "addr",
            "laddr",
            "fd",
            "name",
            "age",
            "idle",
            "flags",
            "db",
            "sub",
            "psub",
            "ssub",
            "multi",
            "qbuf",
            "qbuf-free",
            "argv-mem",
            "multi-mem",
            "rbs",
            "rbp",
            "obl",
            "oll",
            "omem",
            "tot-mem",
            "events",
            "cmd",
            "user",
            "redir",
            "resp",
        ] {
            assert!(own.contains_key(field), "{side:?} has no {field}: {own:?}");
        }
        assert!(own["fd"].parse::<i32>().unwrap() > 0, "{own:?}");
        let shown = [
            "flags", "sub", "psub", "ssub", "multi", "cmd", "argv-mem", "db", "obl", "oll", "omem",
            "events", "redir",
        ];
        seen.push((
            pick(&subscribed, &shown),
            pick(&waiting, &shown),
            pick(&queued, &["flags", "multi", "cmd", "sub"]),
            pick(&own, &["flags", "cmd", "argv-mem", "multi"]),
        ));
        // Released, the blocked client's line says so.
        servers.client(side, 2).request(&[b"RPUSH", b"queue", b"x"]);
        blocked.read_reply();
        fields_when(&mut observer, blocked_id, |f| f["flags"] == "N");
    }
    assert_eq!(seen[1], seen[0], "the gateway (right) against Redis (left)");
}

/// `CLIENT UNBLOCK` answers and releases a blocked client as Redis does, in both protocols; another tenant's
/// client is unknown to it; the released client's backend connection is closed.
#[test]
fn client_unblock_releases_a_blocked_client_as_redis_does() {
    let servers = Servers::start();
    for protocol in [2, 3] {
        let mut replies = Vec::new();
        for side in SIDES {
            let mut control = servers.client(side, 2);
            let mut got = Vec::new();
            for (command, reason) in [
                (&[&b"BLPOP"[..], b"list", b"0"][..], &b"TIMEOUT"[..]),
                (
                    &[b"BLMOVE", b"list", b"other", b"LEFT", b"LEFT", b"0"],
                    b"timeout",
                ),
                (&[b"BZPOPMIN", b"zset", b"0"], b"ERROR"),
                (
                    &[b"XREAD", b"BLOCK", b"0", b"STREAMS", b"s", b"$"],
                    b"Error",
                ),
            ] {
                let mut blocked = servers.client(side, protocol);
                let blocked_id = id(&mut blocked);
                blocked.send_command(command);
                fields_when(&mut control, blocked_id, |f| f["flags"] == "b");
                let blocked_id = blocked_id.to_string();
                got.push(control.request(&[b"CLIENT", b"UNBLOCK", blocked_id.as_bytes(), reason]));
                got.push(blocked.read_reply());
                // Unblocked, the client is served again.
                got.push(blocked.request(&[b"ECHO", b"again"]));
                // No longer blocked: 0.
                got.push(control.request(&[b"CLIENT", b"UNBLOCK", blocked_id.as_bytes()]));
            }
            for args in [
                &[&b"CLIENT"[..], b"UNBLOCK", b"999999"][..],
                &[b"CLIENT", b"UNBLOCK", b"x"],
                &[b"CLIENT", b"UNBLOCK", b"x", b"sometimes"],
                &[b"CLIENT", b"UNBLOCK", b"1", b"TIMEOUT", b"x"],
            ] {
                got.push(control.request(args));
            }
            replies.push(got);
        }
        let show = |replies: &[Vec<u8>]| -> Vec<String> {
            replies
                .iter()
                .map(|r| String::from_utf8_lossy(r).into_owned())
                .collect()
        };
        assert_eq!(
            show(&replies[1]),
            show(&replies[0]),
            "RESP{protocol}: the gateway (right) against Redis (left)"
        );
    }
    // The backend forgot the unblocked commands: their connections are closed.
    wait_for(
        "the unblocked clients' backend connections to close",
        Duration::from_secs(10),
        || {
            let list: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query(&mut servers.backend.client())
                .unwrap();
            !list.contains("flags=b")
        },
    );

    // Tenant b cannot unblock tenant a's client: 0, and the client stays blocked until its list gets a value.
    let mut blocked = servers.client(Some("a"), 2);
    let blocked_id = id(&mut blocked).to_string();
    blocked.send_command(&[b"BLPOP", b"mine", b"0"]);
    let mut observer = servers.client(Some("a"), 2);
    fields_when(&mut observer, blocked_id.parse().unwrap(), |f| {
        f["flags"] == "b"
    });
    let mut other = servers.client(Some("b"), 2);
    for reason in [&b"TIMEOUT"[..], b"ERROR"] {
        assert_eq!(
            other.request(&[b"CLIENT", b"UNBLOCK", blocked_id.as_bytes(), reason]),
            b":0\r\n"
        );
    }
    observer.request(&[b"RPUSH", b"mine", b"v"]);
    blocked.expect(b"*2\r\n$4\r\nmine\r\n$1\r\nv\r\n");
}

/// `CLIENT KILL` has taken effect when it answers, as on Redis: in the same pipeline, a second kill of the same
/// client finds none and `CLIENT LIST` no longer shows it, by `ID`, by `ADDR` and in the old `CLIENT KILL addr`
/// form.
#[test]
fn client_kill_is_done_when_it_answers() {
    let servers = Servers::start();
    let mut seen = Vec::new();
    for side in SIDES {
        let mut killer = servers.client(side, 2);
        let mut got = Vec::new();
        for form in ["ID", "ADDR", "old"] {
            let mut victim = servers.client(side, 2);
            let victim_id = id(&mut victim);
            let addr = fields_of(&mut killer, victim_id)["addr"].clone();
            let (id_text, addr) = (victim_id.to_string(), addr.as_bytes());
            let kill: Vec<&[u8]> = match form {
                "ID" => vec![b"CLIENT", b"KILL", b"ID", id_text.as_bytes()],
                "ADDR" => vec![b"CLIENT", b"KILL", b"ADDR", addr],
                _ => vec![b"CLIENT", b"KILL", addr],
            };
            killer.send_command(&kill);
            killer.send_command(&kill);
            killer.send_command(&[b"CLIENT", b"LIST", b"ID", id_text.as_bytes()]);
            for _ in 0..3 {
                got.push(text(&killer.read_reply()));
            }
            victim.expect_closed();
        }
        seen.push(got);
    }
    assert_eq!(seen[1], seen[0], "the gateway (right) against Redis (left)");
}

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).into_owned()
}

/// Reads MONITOR lines until one shows `ECHO marker`, and returns them without their timestamp and
/// `[db address]` (which differ between any two servers).
fn monitored_until(monitor: &mut RawClient, marker: &str) -> Vec<String> {
    let mut lines = Vec::new();
    loop {
        let line = String::from_utf8_lossy(&monitor.read_line()).into_owned();
        let (stamp, rest) = line.split_once(' ').unwrap_or_default();
        let (seconds, micros) = stamp.trim_start_matches('+').split_once('.').unwrap();
        assert!(
            stamp.starts_with('+') && seconds.parse::<u64>().is_ok() && micros.len() == 6,
            "{line:?}"
        );
        let (place, command) = rest.split_once("] ").unwrap();
        assert!(place.starts_with("[0 127.0.0.1:"), "{line:?}");
        lines.push(command.to_string());
        if command == format!("\"ECHO\" \"{marker}\"\r\n") {
            return lines;
        }
    }
}

/// MONITOR streams a tenant's own commands, in Redis' format (escaped arguments, passwords redacted, admin
/// commands and rejected ones left out, a transaction's commands in order), and never another tenant's; a
/// monitoring client may not touch keys.
#[test]
fn monitor_shows_a_tenant_its_own_commands_as_redis_does() {
    let servers = Servers::start();
    let mut streams = Vec::new();
    for side in SIDES {
        let mut monitor = servers.client(side, 2);
        assert_eq!(monitor.request(&[b"MONITOR"]), b"+OK\r\n");
        let mut other = side.map(|_| {
            let mut other_monitor = servers.client(Some("b"), 2);
            assert_eq!(other_monitor.request(&[b"MONITOR"]), b"+OK\r\n");
            (other_monitor, servers.client(Some("b"), 2))
        });
        let mut client = match side {
            None => servers.client(None, 2),
            Some(_) => RawClient::connect(servers.gateway.port()),
        };
        for command in [
            &[&b"AUTH"[..], b"pa"][..],
            &[b"SET", b"k", b"v"],
            &[b"SET", b"odd \"key\"", b"line\nbreak\ttab\x01\xff\\"],
            &[b"GET", b"k"],
            &[b"CLIENT", b"ID"],
            &[b"CLIENT", b"LIST"],
            &[b"NOSUCH", b"x"],
            &[b"GET"],
            &[b"MULTI"],
            &[b"INCR", b"n"],
            &[b"EXEC"],
            &[b"HELLO", b"3", b"AUTH", b"a", b"pa"],
            &[b"HELLO", b"2"],
            &[b"PING"],
        ] {
            client.request(command);
        }
        if let Some((_, b_client)) = &mut other {
            b_client.request(&[b"SET", b"b-key", b"b-value"]);
            b_client.request(&[b"ECHO", b"end-b"]);
        }
        client.request(&[b"ECHO", b"end"]);
        streams.push(monitored_until(&mut monitor, "end"));
        // The monitor may run what does not touch keys (shown too), not what does (not shown).
        assert_eq!(monitor.request(&[b"ECHO", b"x"]), b"$1\r\nx\r\n");
        assert_eq!(monitored_until(&mut monitor, "x"), ["\"ECHO\" \"x\"\r\n"]);
        assert_eq!(
            monitor.request(&[b"GET", b"k"]),
            b"-ERR Replica can't interact with the keyspace\r\n"
        );
        assert_eq!(monitor.request(&[b"ECHO", b"y"]), b"$1\r\ny\r\n");
        assert_eq!(monitored_until(&mut monitor, "y"), ["\"ECHO\" \"y\"\r\n"]);
        if let Some((mut b_monitor, _)) = other {
            assert_eq!(
                monitored_until(&mut b_monitor, "end-b"),
                [
                    "\"AUTH\" \"(redacted)\"\r\n",
                    "\"SET\" \"b-key\" \"b-value\"\r\n",
                    "\"ECHO\" \"end-b\"\r\n"
                ]
            );
        }
    }
    // The reference's AUTH fails (it has no password) yet shows, as the gateway's: the same lines.
    assert!(!streams[0].iter().any(|l| l.contains("b-key")));
    assert_eq!(
        streams[1], streams[0],
        "the gateway (right) against Redis (left)"
    );
    assert!(
        !streams[1].iter().any(|l| l.contains("b-")),
        "{:?}",
        streams[1]
    );
}

/// A monitor that reads nothing is disconnected once its lines pass the pub/sub output buffer limit, while the
/// client it watches is served at full speed throughout.
#[test]
fn a_monitor_that_does_not_read_is_dropped_past_its_limit() {
    let backend = RedisServer::start();
    let route = json!({"type": "single", "target": backend.url()});
    let gateway = Gateway::builder()
        .arg("--pubsub-output-buffer-limit")
        .arg("64kb 0 0")
        .start(&json!({"tenants": [{"name": "a", "passwords": ["pa"], "route": route}]}));
    let mut monitor = TcpStream::connect(("127.0.0.1", gateway.port())).unwrap();
    monitor.write_all(b"AUTH pa\r\nMONITOR\r\n").unwrap();
    let mut client = RawClient::connect(gateway.port());
    assert_eq!(client.request(&[b"AUTH", b"pa"]), b"+OK\r\n");
    let value = vec![b'v'; 10_000];
    // 20 MB of lines: more than any socket buffer holds.
    for _ in 0..2000 {
        assert_eq!(client.request(&[b"SET", b"k", &value]), b"+OK\r\n");
    }
    monitor
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut unread = Vec::new();
    monitor
        .read_to_end(&mut unread)
        .expect("the monitor's connection is closed");
    assert!(
        unread.starts_with(b"+OK\r\n+OK\r\n+"),
        "{:?}",
        &unread[..20]
    );
    assert_eq!(
        gateway
            .metric("switchyard_client_closed_total{tenant=\"a\",reason=\"output_buffer_hard\"}"),
        1
    );
    assert_eq!(client.request(&[b"STRLEN", b"k"]), b":10000\r\n");
}
