//! Prometheus metrics: counters and histograms, gateway-wide, per worker, per backend node and per tenant, and
//! their exposition. Handles are created when a tenant or backend appears, never per command; the hot path only
//! does relaxed atomic adds.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::family::Family;

mod commands;
mod exposition;
mod fleet;
pub(crate) mod repairs;
mod stats;
mod usage;

pub(crate) use commands::CommandCounters;
pub use exposition::MetricsConfig;
use exposition::{Activity, Buckets};
pub(crate) use fleet::SyncHealth;
pub(crate) use stats::{ErrorStats, Stat};

/// Gateway-wide counters.
#[derive(Default)]
pub(crate) struct Metrics {
    pub connections_open: AtomicI64,
    pub connections_total: AtomicU64,
    pub connections_rejected: AtomicU64,
    pub protocol_errors: AtomicU64,
    pub snapshots_rejected: AtomicU64,
    /// Control-plane snapshots applied, full ones and deltas.
    pub snapshots_applied_full: AtomicU64,
    pub snapshots_applied_delta: AtomicU64,
    /// Clients waiting in a blocking command (INFO's `blocked_clients`).
    pub blocked_clients: AtomicI64,
    /// Failed AUTH that named no tenant, or one the gateway does not know (a tenant's own are its counters').
    pub auth_failures_unknown: AtomicU64,
    /// Connections to the TLS listener whose handshake failed or timed out.
    pub tls_handshake_failures: AtomicU64,
    /// The control plane as the sync loop last saw it.
    pub sync: SyncHealth,
    backends: Mutex<BTreeMap<String, Arc<BackendMetrics>>>,
    /// Each worker's command latency by family (a worker's own, so that workers never share a counter).
    latency: Mutex<Vec<Arc<FamilyLatency>>>,
}

/// One worker's command latency histograms, one per command family.
#[derive(Default)]
pub(crate) struct FamilyLatency([Histogram; Family::ALL.len()]);

impl FamilyLatency {
    /// Counts `count` commands of `family` that each took `elapsed`.
    #[inline]
    pub(crate) fn observe(&self, family: Family, elapsed: Duration, count: u32) {
        if let Some(histogram) = self.0.get(family.index()) {
            histogram.observe(elapsed, count);
        }
    }
}

/// Per backend node, summed over workers.
#[derive(Default)]
pub(crate) struct BackendMetrics {
    pub connections_up: AtomicI64,
    pub failures: AtomicU64,
    /// From a request's write to the node to its last reply read, per request (a run's share one figure).
    pub latency: Histogram,
    /// Error replies the node sent (cluster redirections included).
    pub error_replies: AtomicU64,
    /// The node's `maxclients` as a handshake last read it; 0 while none could (see `backend::budget`).
    pub maxclients: AtomicU64,
    /// Dedicated connections held to the node, and those its budget refused (see `backend::budget`).
    pub dedicated: AtomicI64,
    pub dedicated_refused: AtomicU64,
    /// Its scripts in flight, for `PING` (see `health`).
    pub scripts: crate::health::RunningScripts,
    /// The last failure of a connection to the node and when (milliseconds since the Unix epoch), for the
    /// resources' reachability (see `reach`).
    last_failure: Mutex<Option<(String, i64)>>,
}

impl BackendMetrics {
    /// Counts a failure of a connection to the node (a connect refused or timed out, a connection lost).
    pub(crate) fn failed(&self, reason: &str) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        let at = (crate::tracking::unix_micros() / 1000) as i64;
        *self.last_failure.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((reason.to_string(), at));
    }

    /// The last failure counted, and when.
    pub(crate) fn last_failure(&self) -> Option<(String, i64)> {
        self.last_failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Metrics {
    /// A new worker's own latency histograms.
    pub(crate) fn worker_latency(&self) -> Arc<FamilyLatency> {
        let latency = Arc::new(FamilyLatency::default());
        let mut workers = self.latency.lock().unwrap_or_else(|e| e.into_inner());
        workers.push(Arc::clone(&latency));
        latency
    }

    pub(crate) fn backend(&self, addr: &str) -> Arc<BackendMetrics> {
        let mut backends = self.backends.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(backends.entry(addr.to_string()).or_default())
    }
}

/// Why a client connection is closed by the gateway (the `reason` label of `switchyard_client_closed_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closed {
    /// Unread replies over the hard limit.
    OutputHard,
    /// Unread replies over the soft limit for longer than its seconds.
    OutputSoft,
    /// The client took nothing from its socket for the client write timeout.
    WriteTimeout,
    /// Nothing came from the client for the idle timeout.
    Idle,
    /// A request larger than the query buffer limit.
    QueryBuffer,
}

impl Closed {
    pub(crate) const ALL: [Closed; 5] = [
        Closed::OutputHard,
        Closed::OutputSoft,
        Closed::WriteTimeout,
        Closed::Idle,
        Closed::QueryBuffer,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Closed::OutputHard => "output_buffer_hard",
            Closed::OutputSoft => "output_buffer_soft",
            Closed::WriteTimeout => "write_timeout",
            Closed::Idle => "idle",
            Closed::QueryBuffer => "query_buffer",
        }
    }
}

/// One tenant's counters (kept with its runtime state across snapshots: see `tenant`).
#[derive(Default)]
pub(crate) struct TenantCounters {
    pub commands: CommandCounters,
    /// Error replies written to the tenant's clients.
    pub errors: ErrorStats,
    /// Connections that entered the tenant, and those its `max_connections` refused (INFO's stats).
    pub connections_received: Stat,
    pub connections_rejected: Stat,
    /// Bytes read from the tenant's clients (requests), and written to them (replies and messages).
    pub received_bytes: Stat,
    pub sent_bytes: Stat,
    pub latency: Histogram,
    double_write_failures: Mutex<BTreeMap<String, Arc<AtomicU64>>>,
    /// Commands refused by the tenant's ops/s limit.
    pub rate_limited: AtomicU64,
    /// Failed AUTH that named this tenant.
    pub auth_failures: AtomicU64,
    /// Client connections in the tenant (its leases: `tenant::Lease`).
    pub connections: AtomicI64,
    /// Dedicated backend connections held by the tenant's clients (blocking commands, transactions,
    /// subscriptions), on every worker (its leases too).
    pub dedicated: AtomicI64,
    /// Client connections the gateway closed, by `Closed` reason.
    closed: [AtomicU64; Closed::ALL.len()],
    /// Its near cache, on every worker (see `near_cache`).
    pub near_cache: NearCacheCounters,
    /// Whether `/metrics` exports the tenant's own series.
    activity: Activity,
    /// The counters at the last usage report.
    usage: usage::UsageMark,
}

impl TenantCounters {
    /// `CONFIG RESETSTAT`: INFO's figures of the tenant start again from zero.
    pub(crate) fn reset_stats(&self) {
        self.commands.reset();
        self.errors.reset();
        self.connections_received.reset();
        self.connections_rejected.reset();
        self.received_bytes.reset();
        self.sent_bytes.reset();
    }

    /// Counts a client connection closed for breaking a bound.
    pub(crate) fn closed(&self, reason: Closed) {
        self.closed[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The failure counter of double-writes to one secondary resource (created when a route is resolved).
    pub(crate) fn double_write_failures(&self, resource: &str) -> Arc<AtomicU64> {
        let mut counters = self
            .double_write_failures
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        Arc::clone(counters.entry(resource.to_string()).or_default())
    }
}

/// What a tenant's near cache did, on every worker (see `near_cache`).
#[derive(Default)]
pub(crate) struct NearCacheCounters {
    /// Reads answered from the cache.
    pub hits: AtomicU64,
    /// Reads of the kind it answers that went to Redis.
    pub misses: AtomicU64,
    /// Entries dropped because their key changed (Redis' invalidations, writes through the gateway) or their
    /// tracking connection went down.
    pub invalidations: AtomicU64,
    /// Entries dropped to stay within the tenant's or the gateway's bound.
    pub evictions: AtomicU64,
    /// Bytes its entries hold now.
    pub bytes: AtomicI64,
}

/// The time origin of the instants kept in atomics (as nanoseconds or milliseconds since).
pub(crate) fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// A latency histogram with fixed buckets.
pub(crate) struct Histogram {
    buckets: [AtomicU64; BUCKETS_US.len()],
    count: AtomicU64,
    sum_us: AtomicU64,
}

const BUCKETS_US: [u64; 12] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 100_000, 1_000_000, 10_000_000,
];

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// Counts `count` commands that each took `elapsed`.
    pub(crate) fn observe(&self, elapsed: Duration, count: u32) {
        // Not `as_micros`, whose u128 arithmetic shows in profiles of the reply path.
        let us = elapsed
            .as_secs()
            .saturating_mul(1_000_000)
            .saturating_add(u64::from(elapsed.subsec_micros()));
        self.observe_us(us, count);
    }

    /// Counts `count` commands that each took `us` microseconds.
    #[inline]
    pub(crate) fn observe_us(&self, us: u64, count: u32) {
        let count = u64::from(count);
        if let Some(i) = BUCKETS_US.iter().position(|&b| us <= b) {
            self.buckets[i].fetch_add(count, Ordering::Relaxed);
        }
        self.count.fetch_add(count, Ordering::Relaxed);
        self.sum_us.fetch_add(us * count, Ordering::Relaxed);
    }

    /// The histogram's figures now.
    fn load(&self) -> Buckets {
        Buckets {
            buckets: self.buckets.each_ref().map(|b| b.load(Ordering::Relaxed)),
            count: self.count.load(Ordering::Relaxed),
            sum_us: self.sum_us.load(Ordering::Relaxed),
        }
    }
}
