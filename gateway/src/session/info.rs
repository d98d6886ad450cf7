//! INFO: a Redis-shaped reply describing the gateway as the tenant sees it, with the keyspace section summed
//! over every shard and cluster master of the tenant's route.
//!
//! Tools read fields such as `redis_version`, `redis_mode`, `cluster_enabled`, `connected_clients`,
//! `used_memory` and `loading` from it, so those use Redis' names, formats and section order.

use std::collections::hash_map::RandomState;
use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;
use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};

use std::time::Instant;

use crate::cmd::CommandSpec;
use crate::resp::{self, Protocol, Request};
use crate::route::{Dispatch, Merge, Tenant};
use crate::state::Gateway;

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

pub(super) fn wants_keyspace(args: &[Bytes]) -> bool {
    wanted(args, "keyspace")
}

/// The gateway's own sections that `args` asks for; `tenant`'s commands for `commandstats`.
pub(super) fn render(gateway: &Gateway, tenant: Option<&Tenant>, args: &[Bytes]) -> String {
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

/// INFO: the gateway's own sections, then the keyspace section summed over every shard and cluster master.
pub(super) fn info(
    dispatch: &mut Dispatch<'_>,
    gateway: &Gateway,
    tenant: &Tenant,
    spec: &'static CommandSpec,
    request: &Request,
    started: Instant,
    protocol: Protocol,
) -> Result<(), String> {
    let local = render(gateway, Some(tenant), request.args());
    if !wants_keyspace(request.args()) {
        let mut out = BytesMut::new();
        resp::verbatim(&mut out, local.as_bytes(), protocol);
        dispatch.replies.push_ready(out.freeze(), started);
        return Ok(());
    }
    // A tenant sees its own databases, numbered as it selects them; an admin on database 0 sees them all.
    let base = tenant.route.base_db();
    let databases = tenant.databases();
    let count = u32::try_from(databases.end).unwrap_or(1);
    let merge = Merge::Keyspace {
        local: Some(local),
        own: (!tenant.allow_admin || base != 0).then(|| base..base + count),
        protocol,
    };
    let keyspace = Request::from_args(vec![
        Bytes::from_static(b"INFO"),
        Bytes::from_static(b"keyspace"),
    ]);
    dispatch.fan_out(spec, &keyspace, false, merge, started)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_sizes() {
        assert_eq!(human_bytes(512), "512B");
        assert_eq!(human_bytes(1536), "1.50K");
        assert_eq!(human_bytes(3 * 1024 * 1024), "3.00M");
    }
}
