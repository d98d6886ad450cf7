//! INFO: a Redis-shaped reply describing the gateway as the tenant sees it, with the keyspace section summed
//! over every shard and cluster master of the tenant's route.
//!
//! Tools read fields such as `redis_version`, `redis_mode`, `cluster_enabled`, `connected_clients`,
//! `used_memory` and `loading` from it, so those use Redis' names, formats and section order.

use std::collections::BTreeMap;
use std::collections::hash_map::RandomState;
use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher};
use std::ops::Range;
use std::sync::OnceLock;
use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};

use crate::resp::{self, Protocol};
use crate::route::Tenant;
use crate::server::Gateway;

/// Sections the gateway writes itself, in Redis' order (`keyspace` comes last, from the backends).
const SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "modules",
    "commandstats",
    "errorstats",
    "latencystats",
    "cluster",
];

/// Sections that `INFO` and `INFO default` leave out, as Redis does.
const NOT_DEFAULT: &[&str] = &["commandstats", "latencystats"];

fn wanted(args: &[Bytes], section: &str) -> bool {
    let requested = &args[1.min(args.len())..];
    let default = !NOT_DEFAULT.contains(&section);
    if requested.is_empty() {
        return default;
    }
    requested.iter().any(|arg| {
        let arg = arg.to_ascii_lowercase();
        arg == section.as_bytes()
            || arg == b"all"
            || arg == b"everything"
            || (arg == b"default" && default)
    })
}

pub fn wants_keyspace(args: &[Bytes]) -> bool {
    wanted(args, "keyspace")
}

/// The gateway's own sections that `args` asks for; `tenant`'s commands for `commandstats`.
pub fn render(gateway: &Gateway, tenant: Option<&Tenant>, args: &[Bytes]) -> String {
    let mut text = String::new();
    let process = ProcessStats::read();
    for section in SECTIONS.iter().filter(|s| wanted(args, s)) {
        if !text.is_empty() {
            text.push_str("\r\n");
        }
        let _ = match *section {
            "server" => write!(
                text,
                "# Server\r\nredis_version:{}\r\nredis_git_sha1:00000000\r\nredis_git_dirty:0\r\n\
                 switchyard_version:{}\r\nredis_mode:standalone\r\nos:{}\r\narch_bits:{}\r\n\
                 multiplexing_api:epoll\r\nprocess_id:{}\r\nrun_id:{}\r\ntcp_port:{}\r\n\
                 server_time_usec:{}\r\nuptime_in_seconds:{}\r\nuptime_in_days:{}\r\nconfig_file:\r\n",
                crate::REDIS_VERSION,
                env!("CARGO_PKG_VERSION"),
                std::env::consts::OS,
                usize::BITS,
                std::process::id(),
                run_id(),
                gateway.config.listen.port(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_micros()),
                gateway.started.elapsed().as_secs(),
                gateway.started.elapsed().as_secs() / 86400,
            ),
            "clients" => {
                // A tenant sees its own clients only, as CLIENT LIST shows them; an admin, the gateway's.
                let (connected, blocked) = match tenant.filter(|t| !t.allow_admin) {
                    Some(tenant) => {
                        let clients = gateway.clients.of_tenant(&tenant.name);
                        let blocked = clients.iter().filter(|c| c.is_blocked()).count();
                        (clients.len(), blocked as i64)
                    }
                    None => (
                        gateway.clients.len(),
                        gateway.metrics.blocked_clients.load(Ordering::Relaxed),
                    ),
                };
                write!(
                    text,
                    "# Clients\r\nconnected_clients:{connected}\r\nmaxclients:{}\r\nblocked_clients:{blocked}\r\n",
                    gateway.config.max_clients,
                )
            }
            "memory" => write!(
                text,
                "# Memory\r\nused_memory:{rss}\r\nused_memory_human:{human}\r\nused_memory_rss:{rss}\r\n\
                 used_memory_rss_human:{human}\r\nmaxmemory:0\r\nmaxmemory_human:0B\r\n\
                 maxmemory_policy:noeviction\r\nmem_allocator:libc\r\n",
                rss = process.rss_bytes,
                human = human_bytes(process.rss_bytes),
            ),
            "persistence" => text.write_str(
                "# Persistence\r\nloading:0\r\nasync_loading:0\r\nrdb_changes_since_last_save:0\r\n\
                 rdb_bgsave_in_progress:0\r\nrdb_last_bgsave_status:ok\r\naof_enabled:0\r\n\
                 aof_rewrite_in_progress:0\r\naof_last_bgrewrite_status:ok\r\naof_last_write_status:ok\r\n",
            ),
            "stats" => {
                let commands = tenant.map_or(0, |t| t.metrics.commands.counts().map(|(_, n)| n).sum::<i64>());
                let _ = write!(text, "# Stats\r\ntotal_commands_processed:{commands}\r\n");
                // The gateway's connection figures are every tenant's: an admin's only.
                match tenant.is_none_or(|t| t.allow_admin) {
                    true => write!(
                        text,
                        "total_connections_received:{}\r\nrejected_connections:{}\r\n",
                        gateway.metrics.connections_total.load(Ordering::Relaxed),
                        gateway.metrics.connections_rejected.load(Ordering::Relaxed),
                    ),
                    false => Ok(()),
                }
            }
            "replication" => text.write_str("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n"),
            "cpu" => write!(
                text,
                "# CPU\r\nused_cpu_sys:{:.6}\r\nused_cpu_user:{:.6}\r\nused_cpu_sys_children:0.000000\r\n\
                 used_cpu_user_children:0.000000\r\n",
                process.cpu_sys, process.cpu_user,
            ),
            "modules" => text.write_str("# Modules\r\n"),
            "commandstats" => {
                text.push_str("# Commandstats\r\n");
                for (name, calls) in tenant.into_iter().flat_map(|t| t.metrics.commands.counts()) {
                    let _ = write!(
                        text,
                        "cmdstat_{name}:calls={calls},usec=0,usec_per_call=0.00,rejected_calls=0,failed_calls=0\r\n"
                    );
                }
                Ok(())
            }
            "errorstats" => text.write_str("# Errorstats\r\n"),
            "latencystats" => text.write_str("# Latencystats\r\n"),
            _ => text.write_str("# Cluster\r\ncluster_enabled:0\r\n"),
        };
    }
    text
}

/// A random identifier of this gateway process, in Redis' `run_id` format (40 hex digits): tools tell a restarted
/// server from a running one by it.
fn run_id() -> &'static str {
    static RUN_ID: OnceLock<String> = OnceLock::new();
    RUN_ID.get_or_init(|| {
        let random = || RandomState::new().build_hasher().finish();
        format!("{:016x}{:016x}{:08x}", random(), random(), random() as u32)
    })
}

/// The gateway process' memory and CPU, from `/proc/self` (zero where that is not available).
#[derive(Default)]
struct ProcessStats {
    rss_bytes: u64,
    cpu_user: f64,
    cpu_sys: f64,
}

impl ProcessStats {
    fn read() -> ProcessStats {
        // Linux's page size and clock tick on the platforms the gateway ships for.
        const PAGE: u64 = 4096;
        const TICKS: f64 = 100.0;
        let mut stats = ProcessStats::default();
        if let Ok(statm) = std::fs::read_to_string("/proc/self/statm") {
            let pages = statm.split(' ').nth(1).and_then(|p| p.parse::<u64>().ok());
            stats.rss_bytes = pages.unwrap_or(0) * PAGE;
        }
        if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
            // Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
            let fields: Vec<&str> = stat
                .rsplit_once(')')
                .map_or(Vec::new(), |(_, rest)| rest.split(' ').collect());
            let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
            stats.cpu_user = ticks(12).unwrap_or(0.0) / TICKS;
            stats.cpu_sys = ticks(13).unwrap_or(0.0) / TICKS;
        }
        stats
    }
}

/// Redis' `*_human` format: `1.50M`.
fn human_bytes(bytes: u64) -> String {
    let mut value = bytes as f64;
    for unit in ["B", "K", "M", "G", "T"] {
        if value < 1024.0 || unit == "T" {
            return if unit == "B" {
                format!("{bytes}B")
            } else {
                format!("{value:.2}{unit}")
            };
        }
        value /= 1024.0;
    }
    format!("{bytes}B")
}

/// One `dbN:keys=..,expires=..,avg_ttl=..` line's numbers.
#[derive(Default, Clone, Copy)]
struct DbStats {
    keys: u64,
    expires: u64,
    avg_ttl: u64,
}

/// The keyspace section summed over several backends' `INFO keyspace` replies (bulk strings), after `local`
/// (the gateway's other sections; `None` for a partial sum, such as one cluster's masters). Keys and expiring
/// keys add up, `avg_ttl` is weighted by the expiring keys. A tenant sees only the databases it owns (`own`,
/// numbered from its `db0`); the others belong to other tenants. A failed backend adds nothing rather than
/// failing INFO.
pub fn keyspace(
    local: Option<&str>,
    replies: &[Bytes],
    own: Option<Range<u32>>,
    protocol: Protocol,
) -> Bytes {
    let mut dbs: BTreeMap<u32, DbStats> = BTreeMap::new();
    for body in replies.iter().filter_map(|reply| bulk_body(reply)) {
        for line in String::from_utf8_lossy(body).split("\r\n") {
            let Some((db, stats)) = parse_db_line(line) else {
                continue;
            };
            let db = match &own {
                None => db,
                Some(own) if own.contains(&db) => db - own.start,
                Some(_) => continue,
            };
            let total = dbs.entry(db).or_default();
            let expires = total.expires + stats.expires;
            if expires > 0 {
                total.avg_ttl = ((u128::from(total.avg_ttl) * u128::from(total.expires)
                    + u128::from(stats.avg_ttl) * u128::from(stats.expires))
                    / u128::from(expires)) as u64;
            }
            total.keys += stats.keys;
            total.expires = expires;
        }
    }
    let mut text = local.map(str::to_string).unwrap_or_default();
    if !text.is_empty() {
        text.push_str("\r\n");
    }
    text.push_str("# Keyspace\r\n");
    for (db, stats) in dbs.iter().filter(|(_, s)| s.keys > 0) {
        let _ = write!(
            text,
            "db{db}:keys={},expires={},avg_ttl={}\r\n",
            stats.keys, stats.expires, stats.avg_ttl
        );
    }
    let mut out = BytesMut::new();
    resp::verbatim(&mut out, text.as_bytes(), protocol);
    out.freeze()
}

fn parse_db_line(line: &str) -> Option<(u32, DbStats)> {
    let (db, fields) = line.strip_prefix("db")?.split_once(':')?;
    let mut stats = DbStats::default();
    for field in fields.split(',') {
        let (name, value) = field.split_once('=')?;
        let value = value.parse().ok()?;
        match name {
            "keys" => stats.keys = value,
            "expires" => stats.expires = value,
            "avg_ttl" => stats.avg_ttl = value,
            _ => {}
        }
    }
    Some((db.parse().ok()?, stats))
}

/// The text of a bulk string reply, or of a RESP3 verbatim string (without its `txt:` format).
fn bulk_body(reply: &[u8]) -> Option<&[u8]> {
    let (kind, rest) = reply.split_first()?;
    let header_end = rest.windows(2).position(|w| w == b"\r\n")?;
    let len: usize = std::str::from_utf8(&rest[..header_end])
        .ok()?
        .parse()
        .ok()?;
    let body = rest.get(header_end + 2..header_end + 2 + len)?;
    match kind {
        b'$' => Some(body),
        b'=' => body.get(4..),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Bytes {
        let mut out = BytesMut::new();
        resp::bulk(&mut out, text.as_bytes());
        out.freeze()
    }

    #[test]
    fn keyspaces_add_up() {
        let replies = [
            bulk(
                "# Keyspace\r\ndb0:keys=10,expires=2,avg_ttl=1000\r\ndb3:keys=1,expires=0,avg_ttl=0\r\n",
            ),
            bulk("# Keyspace\r\ndb0:keys=5,expires=2,avg_ttl=3000\r\n"),
            Bytes::from_static(b"-ERR down\r\n"),
        ];
        assert_eq!(
            keyspace(Some("# Server\r\n"), &replies, None, Protocol::Resp2),
            bulk(
                "# Server\r\n\r\n# Keyspace\r\ndb0:keys=15,expires=4,avg_ttl=2000\r\ndb3:keys=1,expires=0,avg_ttl=0\r\n"
            )
        );
        assert_eq!(
            keyspace(None, &replies, Some(3..4), Protocol::Resp2),
            bulk("# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n")
        );
        // A tenant on database 0 does not see its neighbours' on 3; one that owns 0 to 3 sees both.
        assert_eq!(
            keyspace(None, &replies, Some(0..1), Protocol::Resp2),
            bulk("# Keyspace\r\ndb0:keys=15,expires=4,avg_ttl=2000\r\n")
        );
        assert_eq!(
            keyspace(None, &replies, Some(0..4), Protocol::Resp2),
            bulk(
                "# Keyspace\r\ndb0:keys=15,expires=4,avg_ttl=2000\r\ndb3:keys=1,expires=0,avg_ttl=0\r\n"
            )
        );
        assert_eq!(
            keyspace(None, &[], None, Protocol::Resp2),
            bulk("# Keyspace\r\n")
        );
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human_bytes(512), "512B");
        assert_eq!(human_bytes(1536), "1.50K");
        assert_eq!(human_bytes(3 * 1024 * 1024), "3.00M");
    }
}
