//! INFO: a Redis-shaped reply describing the gateway, with the keyspace section from the tenant's backend.
//!
//! Tools read fields such as `redis_version`, `redis_mode`, `cluster_enabled` and `connected_clients` from it,
//! so those use Redis' names and formats.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};

use crate::resp;
use crate::server::Gateway;

/// Sections the gateway writes itself, in Redis' order.
const SECTIONS: &[&str] = &["server", "clients", "stats", "replication", "cluster"];

fn wanted(args: &[Bytes], section: &str) -> bool {
    let requested = &args[1.min(args.len())..];
    requested.is_empty()
        || requested.iter().any(|arg| {
            let arg = arg.to_ascii_lowercase();
            arg == section.as_bytes()
                || arg == b"all"
                || arg == b"everything"
                || (arg == b"default" && section != "commandstats")
        })
}

pub fn wants_keyspace(args: &[Bytes]) -> bool {
    wanted(args, "keyspace")
}

/// The gateway's own sections that `args` asks for.
pub fn render(gateway: &Gateway, args: &[Bytes]) -> String {
    let mut text = String::new();
    for section in SECTIONS.iter().filter(|s| wanted(args, s)) {
        if !text.is_empty() {
            text.push_str("\r\n");
        }
        let _ = match *section {
            "server" => write!(
                text,
                "# Server\r\nredis_version:{}\r\nswitchyard_version:{}\r\nredis_mode:standalone\r\nos:{}\r\narch_bits:{}\r\n\
                 process_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\nuptime_in_days:{}\r\n",
                crate::REDIS_VERSION,
                env!("CARGO_PKG_VERSION"),
                std::env::consts::OS,
                usize::BITS,
                std::process::id(),
                gateway.config.listen.port(),
                gateway.started.elapsed().as_secs(),
                gateway.started.elapsed().as_secs() / 86400,
            ),
            "clients" => write!(
                text,
                "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\nblocked_clients:0\r\n",
                gateway.clients.len(),
                gateway.config.max_clients,
            ),
            "stats" => write!(
                text,
                "# Stats\r\ntotal_connections_received:{}\r\nrejected_connections:{}\r\n",
                gateway.metrics.connections_total.load(Ordering::Relaxed),
                gateway.metrics.connections_rejected.load(Ordering::Relaxed),
            ),
            "replication" => write!(
                text,
                "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n"
            ),
            _ => write!(text, "# Cluster\r\ncluster_enabled:0\r\n"),
        };
    }
    text
}

/// Appends the keyspace section of a backend's `INFO keyspace` reply (a bulk string) to the local sections.
/// A tenant that owns one database of a shared Redis (`own_db`) sees only that one, as its `db0`; the others
/// belong to other tenants. An error or anything unexpected from the backend leaves the section empty rather
/// than failing INFO.
pub fn with_keyspace(local: &str, backend_reply: &[u8], own_db: Option<u32>) -> Bytes {
    let own = own_db.map(|db| format!("db{db}:"));
    let keyspace = bulk_body(backend_reply)
        .map(|body| {
            String::from_utf8_lossy(body)
                .split("\r\n")
                .filter_map(|line| match &own {
                    None => line.starts_with("db").then(|| format!("{line}\r\n")),
                    Some(prefix) => line
                        .strip_prefix(prefix.as_str())
                        .map(|stats| format!("db0:{stats}\r\n")),
                })
                .collect::<String>()
        })
        .unwrap_or_default();
    let mut text = local.to_string();
    if !text.is_empty() {
        text.push_str("\r\n");
    }
    text.push_str("# Keyspace\r\n");
    text.push_str(&keyspace);
    let mut out = BytesMut::new();
    resp::bulk(&mut out, text.as_bytes());
    out.freeze()
}

fn bulk_body(reply: &[u8]) -> Option<&[u8]> {
    let rest = reply.strip_prefix(b"$")?;
    let header_end = rest.windows(2).position(|w| w == b"\r\n")?;
    let len: usize = std::str::from_utf8(&rest[..header_end])
        .ok()?
        .parse()
        .ok()?;
    rest.get(header_end + 2..header_end + 2 + len)
}
