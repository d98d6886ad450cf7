//! `/metrics` in the Prometheus text exposition format, bounded by activity: a tenant's own series are written
//! only while it is active (an open connection, or a counter of it that moved within the window), gateway-wide
//! totals over every tenant always. With 100,000 tenants of which 1,000 are active, the scrape carries 1,000
//! tenants' series, and `sum()` over the totals stays right however many tenants are idle.
//!
//! Written by hand rather than with the `prometheus-client` crate: the counters are the data path's own relaxed
//! atomics inside each tenant's `TenantCounters` (created when a route table is built, never per command), and
//! which tenants to write is decided at scrape time; the crate would want its own metric types registered per
//! tenant and a custom collector to skip idle ones, leaving it only the text writer, which is `family` and
//! `label_value` below.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{Closed, Metrics, TenantCounters, epoch};
use crate::failure;
use crate::family::Family;

mod format;
mod histogram;
mod scalars;
pub(super) use format::{family, labels};
pub(super) use histogram::Buckets;
use histogram::histogram_header;
use scalars::{SCALARS, Scalars};

/// What `/metrics` writes of each tenant.
#[derive(Debug, Clone, Copy)]
pub struct MetricsConfig {
    /// A tenant's own series are written while it has an open connection and for this long after a scrape last
    /// saw one of its counters move (a command, a connection, a failed AUTH...). An idle tenant's counters keep
    /// counting and stay in the gateway-wide totals; its series come back, with their higher values, when it is
    /// active again.
    pub active_window: Duration,
    /// Whether each tenant's latency is timed too, and each active tenant's histogram written (15 series a
    /// tenant); the gateway-wide histograms by command family always are.
    pub tenant_latency: bool,
}

/// When a scrape last saw a tenant's counters move. Kept by the scrapes, so the data path pays nothing for it.
#[derive(Default)]
pub(super) struct Activity {
    /// The sum of the tenant's monotonic counters at the last scrape: any change means activity.
    seen: AtomicU64,
    /// When that sum last changed, in milliseconds since `epoch()` plus one (0: never).
    moved_at: AtomicU64,
}

impl Activity {
    /// Whether the tenant is active at `now`, given the sum of its counters and whether it holds a connection.
    fn recent(&self, moves: u64, open: bool, now: Instant, window: Duration) -> bool {
        let now = now.saturating_duration_since(epoch()).as_millis() as u64 + 1;
        if self.seen.swap(moves, Ordering::Relaxed) != moves {
            self.moved_at.store(now, Ordering::Relaxed);
        }
        let moved_at = self.moved_at.load(Ordering::Relaxed);
        open || (moved_at != 0 && now - moved_at.min(now) <= window.as_millis() as u64)
    }
}

/// One tenant's figures, read once per scrape.
struct Figures {
    scalars: Scalars,
    auth_failures: i64,
    closed: [i64; Closed::ALL.len()],
    double_write_failures: Vec<(String, i64)>,
    latency: Buckets,
    /// Connections that entered the tenant (written nowhere, but activity).
    received: i64,
}

impl Figures {
    fn of(tenant: &TenantCounters) -> Figures {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed) as i64;
        let double_write_failures = tenant
            .double_write_failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(resource, n)| (resource.clone(), load(n)))
            .collect();
        Figures {
            scalars: Scalars {
                errors: tenant.errors.total.total() as i64,
                rate_limited: load(&tenant.rate_limited),
                connections: tenant.connections.load(Ordering::Relaxed),
                dedicated: tenant.dedicated.load(Ordering::Relaxed),
                received_bytes: tenant.received_bytes.total() as i64,
                sent_bytes: tenant.sent_bytes.total() as i64,
                near_cache_hits: load(&tenant.near_cache.hits),
                near_cache_misses: load(&tenant.near_cache.misses),
                near_cache_invalidations: load(&tenant.near_cache.invalidations),
                near_cache_evictions: load(&tenant.near_cache.evictions),
                near_cache_bytes: tenant.near_cache.bytes.load(Ordering::Relaxed),
            },
            auth_failures: load(&tenant.auth_failures),
            closed: tenant.closed.each_ref().map(load),
            double_write_failures,
            latency: tenant.latency.load(),
            received: tenant.connections_received.total() as i64,
        }
    }

    /// Whether the tenant holds a connection now.
    fn open(&self) -> bool {
        self.scalars.connections > 0 || self.scalars.dedicated > 0
    }

    /// The sum of the monotonic counters: it changes whenever one of them does.
    fn moves(&self) -> u64 {
        let counters = [
            self.scalars.errors,
            self.scalars.rate_limited,
            self.scalars.received_bytes,
            self.scalars.sent_bytes,
            self.scalars.near_cache_hits,
            self.scalars.near_cache_misses,
            self.scalars.near_cache_invalidations,
            self.scalars.near_cache_evictions,
            self.auth_failures,
            self.received,
            self.latency.count as i64,
            self.double_write_total(),
        ];
        counters.iter().chain(&self.closed).sum::<i64>() as u64
    }

    fn double_write_total(&self) -> i64 {
        self.double_write_failures.iter().map(|(_, n)| n).sum()
    }
}

/// The gateway-wide sums of every tenant's figures, idle tenants included.
#[derive(Default)]
struct Totals {
    commands: BTreeMap<&'static str, i64>,
    scalars: Scalars,
    auth_failures: i64,
    closed: [i64; Closed::ALL.len()],
    double_write_failures: i64,
}

impl Totals {
    fn add(&mut self, tenant: &TenantCounters, figures: &Figures) {
        for (command, n) in tenant.commands.counts() {
            *self.commands.entry(command).or_default() += n;
        }
        let (sum, add) = (&mut self.scalars, figures.scalars);
        sum.errors += add.errors;
        sum.rate_limited += add.rate_limited;
        sum.connections += add.connections;
        sum.dedicated += add.dedicated;
        sum.received_bytes += add.received_bytes;
        sum.sent_bytes += add.sent_bytes;
        sum.near_cache_hits += add.near_cache_hits;
        sum.near_cache_misses += add.near_cache_misses;
        sum.near_cache_invalidations += add.near_cache_invalidations;
        sum.near_cache_evictions += add.near_cache_evictions;
        sum.near_cache_bytes += add.near_cache_bytes;
        self.auth_failures += figures.auth_failures;
        for (total, n) in self.closed.iter_mut().zip(figures.closed) {
            *total += n;
        }
        self.double_write_failures += figures.double_write_total();
    }
}

impl Metrics {
    /// The Prometheus text exposition: the process and the control plane as the gateway sees it (serving
    /// `revision`), the gateway's counters, the totals over all `tenants`, and the series of those active at
    /// `now`.
    pub(crate) fn render(
        &self,
        tenants: &[(&str, &TenantCounters)],
        revision: Option<i64>,
        config: &MetricsConfig,
        now: Instant,
    ) -> String {
        let mut totals = Totals::default();
        let mut active = Vec::new();
        for &(name, metrics) in tenants {
            let figures = Figures::of(metrics);
            totals.add(metrics, &figures);
            if metrics
                .activity
                .recent(figures.moves(), figures.open(), now, config.active_window)
            {
                active.push((name, metrics, figures));
            }
        }
        let mut out = String::new();
        switchyard_runtime::telemetry::render_process_metrics(&mut out, env!("CARGO_PKG_VERSION"));
        self.sync.render(&mut out, revision);
        self.render_gateway(&mut out);
        render_totals(&mut out, &totals, tenants.len(), active.len());
        self.render_latency(&mut out);
        let unknown_auth = self.auth_failures_unknown.load(Ordering::Relaxed) as i64;
        render_tenants(&mut out, &active, unknown_auth, config.tenant_latency);
        out
    }

    /// The gateway-wide latency histogram, by command family: every worker's summed.
    fn render_latency(&self, out: &mut String) {
        let mut families = [Buckets::default(); Family::ALL.len()];
        for worker in self
            .latency
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            for (sum, histogram) in families.iter_mut().zip(&worker.0) {
                sum.add(&histogram.load());
            }
        }
        let name = "switchyard_gateway_command_duration_seconds";
        histogram_header(out, name);
        for (family, buckets) in Family::ALL.iter().zip(&families) {
            buckets.render(out, name, &labels(&[("family", family.label())]));
        }
    }

    /// The gateway's own counters and its backends'.
    fn render_gateway(&self, out: &mut String) {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed) as i64;
        let global = |value: i64| [(String::new(), value)];
        family(
            out,
            "switchyard_client_connections",
            "Open client connections.",
            "gauge",
            global(self.connections_open.load(Ordering::Relaxed)),
        );
        family(
            out,
            "switchyard_client_connections_total",
            "Client connections accepted.",
            "counter",
            global(load(&self.connections_total)),
        );
        family(
            out,
            "switchyard_client_connections_rejected_total",
            "Client connections refused by a limit.",
            "counter",
            global(load(&self.connections_rejected)),
        );
        family(
            out,
            "switchyard_client_tls_handshake_failures_total",
            "Connections to the TLS listener whose handshake failed or timed out.",
            "counter",
            global(load(&self.tls_handshake_failures)),
        );
        let expiries =
            crate::tls::certificates()
                .expiries()
                .into_iter()
                .map(|(role, source, not_after)| {
                    (labels(&[("role", role), ("source", &source)]), not_after)
                });
        family(
            out,
            "switchyard_tls_certificate_expiry_timestamp_seconds",
            "When each certificate the gateway holds, trusts or was presented by a backend expires (notAfter, Unix time).",
            "gauge",
            expiries,
        );
        family(
            out,
            "switchyard_protocol_errors_total",
            "Client connections closed for a protocol error.",
            "counter",
            global(load(&self.protocol_errors)),
        );
        family(
            out,
            "switchyard_failed_requests_total",
            "Requests the gateway answered with an error of its own, by the side that failed (client: refused as asked; gateway; backend) and whether retrying them is safe (nothing of them ran).",
            "counter",
            failure::failed_requests()
                .map(|(side, safe, count)| {
                    let safe = if safe { "true" } else { "false" };
                    (
                        labels(&[("side", side.label()), ("retry_safe", safe)]),
                        count as i64,
                    )
                })
                .collect::<Vec<_>>(),
        );
        family(
            out,
            "switchyard_snapshots_rejected_total",
            "Control-plane snapshots rejected: invalid, or a delta that does not apply to the snapshot served.",
            "counter",
            global(load(&self.snapshots_rejected)),
        );
        let applied = [
            ("full", &self.snapshots_applied_full),
            ("delta", &self.snapshots_applied_delta),
        ]
        .map(|(kind, count)| (labels(&[("kind", kind)]), load(count)));
        family(
            out,
            "switchyard_snapshots_applied_total",
            "Control-plane snapshots applied (those read from the cache file at start included), by kind: full or delta.",
            "counter",
            applied,
        );
        family(
            out,
            "switchyard_replies_lost_total",
            "Requests answered with `ERR internal: reply lost` (a bug: a reply slot dropped unanswered).",
            "counter",
            global(load(&crate::reply::REPLIES_LOST)),
        );

        let backends = self.backends.lock().unwrap_or_else(|e| e.into_inner());
        let per_backend = |value: &dyn Fn(&super::BackendMetrics) -> i64| {
            backends
                .iter()
                .map(|(addr, b)| (labels(&[("backend", addr)]), value(b)))
                .collect::<Vec<_>>()
        };
        family(
            out,
            "switchyard_backend_connections_up",
            "Backend connections currently up.",
            "gauge",
            per_backend(&|b| b.connections_up.load(Ordering::Relaxed)),
        );
        family(
            out,
            "switchyard_backend_failures_total",
            "Backend connections lost or refused.",
            "counter",
            per_backend(&|b| load(&b.failures)),
        );
        family(
            out,
            "switchyard_backend_error_replies_total",
            "Error replies backend nodes sent (cluster redirections included).",
            "counter",
            per_backend(&|b| load(&b.error_replies)),
        );
        family(
            out,
            "switchyard_backend_maxclients",
            "The backend node's maxclients as the gateway last read it (CONFIG GET at connect); 0: not readable, --backend-maxclients is assumed.",
            "gauge",
            per_backend(&|b| load(&b.maxclients)),
        );
        family(
            out,
            "switchyard_backend_dedicated_connections",
            "Dedicated connections (blocking commands, transactions, subscriptions) held to the backend node.",
            "gauge",
            per_backend(&|b| b.dedicated.load(Ordering::Relaxed)),
        );
        family(
            out,
            "switchyard_backend_dedicated_refused_total",
            "Dedicated connections to the backend node refused by its budget (used up, or the tenant at its share).",
            "counter",
            per_backend(&|b| load(&b.dedicated_refused)),
        );
        let name = "switchyard_backend_request_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time from writing a request to a backend node to reading its reply.\n# TYPE {name} histogram"
        );
        for (addr, backend) in backends.iter() {
            backend
                .latency
                .load()
                .render(out, name, &labels(&[("backend", addr)]));
        }
    }
}

/// The sums over every tenant, idle ones included: what dashboards and alerts over the whole gateway use.
fn render_totals(out: &mut String, totals: &Totals, tenants: usize, active: usize) {
    let global = |value: i64| [(String::new(), value)];
    family(
        out,
        "switchyard_tenants",
        "Tenants in the routes the gateway serves.",
        "gauge",
        global(tenants as i64),
    );
    family(
        out,
        "switchyard_tenants_active",
        "Tenants active within --metrics-active-window-s: those whose own series are written.",
        "gauge",
        global(active as i64),
    );
    let commands = totals
        .commands
        .iter()
        .map(|(command, n)| (labels(&[("command", command)]), *n));
    family(
        out,
        "switchyard_gateway_commands_total",
        "Commands of all tenants, by command.",
        "counter",
        commands,
    );
    for scalar in &SCALARS {
        let help = format!("{} of all tenants.", scalar.help);
        let value = (scalar.value)(&totals.scalars);
        family(out, scalar.gateway, &help, scalar.kind, global(value));
    }
    family(
        out,
        "switchyard_gateway_double_write_failures_total",
        "Writes to a double-write secondary that failed or were dropped, all tenants.",
        "counter",
        global(totals.double_write_failures),
    );
    family(
        out,
        "switchyard_gateway_auth_failures_total",
        "Failed AUTH that named a tenant the gateway serves (others: switchyard_auth_failures_total{tenant=\"\"}).",
        "counter",
        global(totals.auth_failures),
    );
    let closed = Closed::ALL
        .iter()
        .zip(totals.closed)
        .map(|(reason, n)| (labels(&[("reason", reason.label())]), n));
    family(
        out,
        "switchyard_gateway_client_closed_total",
        "Client connections the gateway closed for breaking a bound, all tenants, by reason.",
        "counter",
        closed,
    );
}

/// The series of each active tenant.
fn render_tenants(
    out: &mut String,
    active: &[(&str, &TenantCounters, Figures)],
    unknown_auth: i64,
    latency: bool,
) {
    let tenant = |name: &str| labels(&[("tenant", name)]);
    let commands = active.iter().flat_map(|(name, metrics, _)| {
        metrics
            .commands
            .counts()
            .map(move |(command, n)| (labels(&[("tenant", name), ("command", command)]), n))
    });
    family(
        out,
        "switchyard_commands_total",
        "Commands by tenant and command.",
        "counter",
        commands,
    );
    for scalar in &SCALARS {
        let help = format!("{} by tenant.", scalar.help);
        let samples = active
            .iter()
            .map(|(name, _, figures)| (tenant(name), (scalar.value)(&figures.scalars)));
        family(out, scalar.tenant, &help, scalar.kind, samples);
    }
    let double_writes = active.iter().flat_map(|(name, _, figures)| {
        figures
            .double_write_failures
            .iter()
            .map(move |(resource, n)| (labels(&[("tenant", name), ("resource", resource)]), *n))
    });
    family(
        out,
        "switchyard_double_write_failures_total",
        "Writes to a double-write secondary that failed or were dropped.",
        "counter",
        double_writes,
    );
    let auth_failures = active
        .iter()
        .map(|(name, _, figures)| (tenant(name), figures.auth_failures))
        .chain([(tenant(""), unknown_auth)]);
    family(
        out,
        "switchyard_auth_failures_total",
        "Failed AUTH by the tenant it named (\"\": none, or one that does not exist).",
        "counter",
        auth_failures,
    );
    let closed = active.iter().flat_map(|(name, _, figures)| {
        Closed::ALL
            .iter()
            .zip(figures.closed)
            .map(move |(reason, n)| (labels(&[("tenant", name), ("reason", reason.label())]), n))
    });
    family(
        out,
        "switchyard_client_closed_total",
        "Client connections the gateway closed for breaking a bound, by tenant and reason.",
        "counter",
        closed,
    );
    if latency {
        let histogram = "switchyard_command_duration_seconds";
        histogram_header(out, histogram);
        for (name, _, figures) in active {
            figures.latency.render(out, histogram, &tenant(name));
        }
    }
}

#[cfg(test)]
mod tests;
