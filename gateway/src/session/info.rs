//! INFO and CONFIG RESETSTAT: the gateway's own fields of INFO (what the gateway is to the client: its process,
//! the tenant's clients, commands and errors), filled in for the sections asked, and the backends asked for the
//! sections whose fields describe the data and the servers holding it (see `crate::info`).

use std::collections::hash_map::RandomState;
use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::cmd::CommandSpec;
use crate::info::Local;
use crate::resp::{self, Protocol, Request};
use crate::route::{Dispatch, Merge, Tenant};
use crate::state::Gateway;

/// The gateway's fields of the sections `local` asks for, as `tenant` sees them.
fn fill(local: &mut Local, gateway: &Gateway, tenant: &Tenant) {
    let metrics = &tenant.runtime.counters;
    if local.wants("server") {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let uptime = gateway.started.elapsed().as_secs();
        local.set("redis_version", crate::REDIS_VERSION);
        local.set("switchyard_version", env!("CARGO_PKG_VERSION"));
        local.set("os", os());
        local.set("arch_bits", usize::BITS);
        local.set("process_id", std::process::id());
        local.set("run_id", run_id());
        local.set(
            "tcp_port",
            gateway.config.listen.map_or(0, |addr| addr.port()),
        );
        local.set("server_time_usec", now.as_micros());
        local.set("uptime_in_seconds", uptime);
        local.set("uptime_in_days", uptime / 86400);
        // Redis' LRU clock: seconds, on 24 bits.
        local.set("lru_clock", now.as_secs() & ((1 << 24) - 1));
        local.set("executable", executable());
    }
    if local.wants("clients") {
        // A tenant sees its own clients only, as CLIENT LIST shows them; an admin, the gateway's.
        let (connected, blocked) = match tenant.allow_admin {
            false => {
                let clients = gateway.clients.of_tenant(&tenant.name);
                let blocked = clients.iter().filter(|c| c.is_blocked()).count();
                (clients.len(), blocked as i64)
            }
            true => (
                gateway.clients.len(),
                gateway.metrics.blocked_clients.load(Ordering::Relaxed),
            ),
        };
        local.set("connected_clients", connected);
        local.set("maxclients", gateway.config.max_clients);
        local.set("blocked_clients", blocked);
    }
    let commands = metrics.commands.since_reset();
    if local.wants("stats") {
        let calls: u64 = commands.iter().map(|c| c.calls).sum();
        local.set(
            "total_connections_received",
            metrics.connections_received.since_reset(),
        );
        local.set("total_commands_processed", calls);
        local.set(
            "total_net_input_bytes",
            metrics.received_bytes.since_reset(),
        );
        local.set("total_net_output_bytes", metrics.sent_bytes.since_reset());
        local.set(
            "rejected_connections",
            metrics.connections_rejected.since_reset(),
        );
        local.set("total_error_replies", metrics.errors.total.since_reset());
    }
    if local.wants("cpu") {
        let (user, sys) = cpu_seconds("/proc/self/stat");
        let (thread_user, thread_sys) = cpu_seconds("/proc/thread-self/stat");
        local.set("used_cpu_sys", format!("{sys:.6}"));
        local.set("used_cpu_user", format!("{user:.6}"));
        // The worker thread serving this connection stands for Redis' main thread.
        local.set("used_cpu_sys_main_thread", format!("{thread_sys:.6}"));
        local.set("used_cpu_user_main_thread", format!("{thread_user:.6}"));
    }
    if local.wants("commandstats") {
        let mut lines = String::new();
        for command in &commands {
            let _ = write!(
                lines,
                "cmdstat_{}:calls={},usec=0,usec_per_call=0.00,rejected_calls={},failed_calls=0\r\n",
                command.name, command.calls, command.rejected,
            );
        }
        local.set_lines("commandstats", lines);
    }
    if local.wants("errorstats") {
        local.set_lines("errorstats", metrics.errors.lines());
    }
    if local.wants("nearcache") {
        let near = &metrics.near_cache;
        let (hits, misses) = (
            near.hits.load(Ordering::Relaxed),
            near.misses.load(Ordering::Relaxed),
        );
        let ratio = match hits + misses {
            0 => 0.0,
            reads => hits as f64 / reads as f64,
        };
        local.set("near_cache_enabled", u8::from(tenant.near_cache.is_some()));
        let max_bytes = tenant.near_cache.map_or(0, |policy| policy.max_bytes);
        local.set("near_cache_max_bytes", max_bytes);
        local.set(
            "near_cache_bytes",
            near.bytes.load(Ordering::Relaxed).max(0),
        );
        local.set("near_cache_hits", hits);
        local.set("near_cache_misses", misses);
        local.set("near_cache_hit_ratio", format!("{ratio:.4}"));
        let invalidations = near.invalidations.load(Ordering::Relaxed);
        local.set("near_cache_invalidations", invalidations);
        local.set(
            "near_cache_evictions",
            near.evictions.load(Ordering::Relaxed),
        );
    }
}

/// INFO: answered at once when no section asked for takes values from the backends; else those sections are
/// asked of every shard and cluster master, and combined with the gateway's fields.
pub(super) fn info(
    dispatch: &mut Dispatch<'_>,
    gateway: &Gateway,
    tenant: &Tenant,
    spec: &'static CommandSpec,
    request: &Request,
    started: Instant,
    protocol: Protocol,
) -> Result<(), String> {
    let mut local = Local::asked(request.args());
    fill(&mut local, gateway, tenant);
    let sections = local.backend_sections();
    if sections.is_empty() {
        dispatch
            .replies
            .push_ready(local.reply(&[], None, protocol), started);
        return Ok(());
    }
    // A tenant sees its own databases, numbered as it selects them; an admin on database 0 sees them all. A
    // namespaced tenant sees none: the counts are the shared database's, every tenant's keys.
    let base = tenant.route.base_db();
    let databases = tenant.databases();
    let count = match tenant.namespace() {
        Some(_) => 0,
        None => u32::try_from(databases.end).unwrap_or(1),
    };
    let merge = Merge::Info {
        local: Some(Arc::new(local)),
        own: (!tenant.allow_admin || base != 0 || count == 0).then(|| base..base + count),
        protocol,
    };
    // Redis before 7 answers one section per INFO: several are asked as its default set, which holds them all.
    let section = match sections[..] {
        [one] => Some(one),
        _ => None,
    };
    let asked = Request::from_args(
        std::iter::once("INFO")
            .chain(section)
            .map(|arg| Bytes::from_static(arg.as_bytes()))
            .collect(),
    );
    dispatch.fan_out(spec, &asked, false, merge, started)
}

/// CONFIG RESETSTAT: the tenant's figures in INFO start again from zero; an admin's also goes to every write
/// resource, as its other configuration commands do.
pub(super) fn resetstat(
    dispatch: &mut Dispatch<'_>,
    tenant: &Tenant,
    spec: &'static CommandSpec,
    request: &Request,
    started: Instant,
) -> Result<(), String> {
    tenant.runtime.counters.reset_stats();
    if tenant.allow_admin {
        return dispatch.forward(spec, request, started);
    }
    let mut out = bytes::BytesMut::new();
    resp::simple(&mut out, b"OK");
    dispatch.replies.push_ready(out.freeze(), started);
    Ok(())
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

/// The system as Redis names it (`uname`'s system, release and machine): `Linux 6.1.0 x86_64`.
fn os() -> &'static str {
    static OS: OnceLock<String> = OnceLock::new();
    OS.get_or_init(|| {
        let read = |path: &str| std::fs::read_to_string(path).map(|s| s.trim().to_string());
        match (
            read("/proc/sys/kernel/ostype"),
            read("/proc/sys/kernel/osrelease"),
        ) {
            (Ok(system), Ok(release)) => {
                format!("{system} {release} {}", std::env::consts::ARCH)
            }
            _ => format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
        }
    })
}

/// The gateway's executable, as Redis shows its own.
fn executable() -> &'static str {
    static EXECUTABLE: OnceLock<String> = OnceLock::new();
    EXECUTABLE.get_or_init(|| {
        std::env::current_exe()
            .map(|path| path.display().to_string())
            .unwrap_or_default()
    })
}

/// User and system CPU seconds from a `/proc/.../stat` file (zero where that is not available).
fn cpu_seconds(path: &str) -> (f64, f64) {
    // Linux's clock tick on the platforms the gateway ships for.
    const TICKS: f64 = 100.0;
    let Ok(stat) = std::fs::read_to_string(path) else {
        return (0.0, 0.0);
    };
    // Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split(' ').collect());
    let seconds = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
            / TICKS
    };
    (seconds(12), seconds(13))
}
