//! Prometheus text metrics of the control plane: the build and the process, responses by status class,
//! revision, long-polls, snapshots and deltas, unfinished tenant migrations and their progress, and when the
//! certificates in use expire.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use switchyard_schemas::api::{MigrationProgress, MigrationState, TaskProgress};

#[derive(Default)]
pub struct Metrics {
    /// Indexed by status / 100 (1xx to 5xx).
    responses: [AtomicU64; 6],
    pub long_polls_waiting: AtomicI64,
    pub(crate) snapshots_served: AtomicU64,
    /// Snapshots read from the database (the rest were shared from the cache).
    pub snapshots_loaded: AtomicU64,
    pub(crate) deltas_served: AtomicU64,
    /// Deltas read from the database (the rest were shared from the cache).
    pub deltas_loaded: AtomicU64,
    /// The `notAfter` of each certificate in use, by role and file: read by scrapes only, so a lock is fine.
    certificates: Mutex<BTreeMap<(&'static str, String), i64>>,
}

impl Metrics {
    /// The exposition; `stored` is what the database says at the scrape (none: it did not answer, and those
    /// series are left out).
    pub(crate) fn render(&self, revision: i64, stored: Option<&Stored>) -> String {
        let mut out = String::new();
        switchyard_runtime::telemetry::render_process_metrics(&mut out, env!("CARGO_PKG_VERSION"));
        out.push_str("# HELP switchyard_cp_responses_total HTTP responses by status class.\n");
        out.push_str("# TYPE switchyard_cp_responses_total counter\n");
        for (class, count) in self.responses.iter().enumerate().skip(1) {
            let _ = writeln!(
                out,
                "switchyard_cp_responses_total{{class=\"{class}xx\"}} {}",
                count.load(Ordering::Relaxed)
            );
        }
        let gauges = [
            (
                "switchyard_cp_revision",
                "gauge",
                "The latest global revision this process knows of.",
                revision,
            ),
            (
                "switchyard_cp_long_polls_waiting",
                "gauge",
                "Snapshot long-polls waiting for a change.",
                self.long_polls_waiting.load(Ordering::Relaxed),
            ),
            (
                "switchyard_cp_snapshots_served_total",
                "counter",
                "Full snapshots sent to gateways.",
                counter(&self.snapshots_served),
            ),
            (
                "switchyard_cp_snapshots_loaded_total",
                "counter",
                "Snapshots read from the database; the others were shared.",
                counter(&self.snapshots_loaded),
            ),
            (
                "switchyard_cp_snapshot_deltas_served_total",
                "counter",
                "Snapshot deltas sent to gateways.",
                counter(&self.deltas_served),
            ),
            (
                "switchyard_cp_snapshot_deltas_loaded_total",
                "counter",
                "Snapshot deltas read from the database; the others were shared.",
                counter(&self.deltas_loaded),
            ),
        ];
        for (name, kind, help, value) in gauges {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        }
        if let Some(stored) = stored {
            render_gateways(&mut out, &stored.gateways);
            render_migrations(&mut out, &stored.migrations);
        }
        let certificates = self.certificates.lock().unwrap_or_else(|e| e.into_inner());
        if !certificates.is_empty() {
            out.push_str(
                "# HELP switchyard_tls_certificate_expiry_timestamp_seconds When each certificate in use expires (its notAfter), in seconds since the Unix epoch.\n\
                 # TYPE switchyard_tls_certificate_expiry_timestamp_seconds gauge\n",
            );
        }
        for ((role, source), not_after) in certificates.iter() {
            let _ = writeln!(
                out,
                "switchyard_tls_certificate_expiry_timestamp_seconds{{role=\"{role}\",source=\"{}\"}} {not_after}",
                label_value(source)
            );
        }
        out
    }

    /// Records when the certificate of `source` (a file), used as `role`, expires.
    pub(crate) fn certificate_expiry(&self, role: &'static str, source: &str, not_after: i64) {
        self.certificates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((role, source.to_string()), not_after);
    }

    /// Drops the certificate of `source` from the metric (its expiry is not known any more).
    pub(crate) fn forget_certificate(&self, role: &'static str, source: &str) {
        self.certificates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(role, source.to_string()));
    }
}

/// What `/metrics` reads from the database at each scrape, the same on every replica.
pub(crate) struct Stored<'a> {
    pub(crate) migrations: Vec<MigrationFigures<'a>>,
    pub(crate) gateways: GatewayCounts,
}

/// The gateways as their heartbeats report them.
pub(crate) struct GatewayCounts {
    /// Heard from within `--gateway-ttl-secs`.
    pub(crate) live: usize,
    /// Heard from before that (every gateway ever heard of is remembered).
    pub(crate) stale: usize,
    /// Live, and serving a revision older than the latest.
    pub(crate) behind: usize,
}

fn render_gateways(out: &mut String, gateways: &GatewayCounts) {
    let _ = writeln!(
        out,
        "# HELP switchyard_cp_gateways Gateways by their heartbeats: live (heard from within --gateway-ttl-secs) or stale.\n\
         # TYPE switchyard_cp_gateways gauge\n\
         switchyard_cp_gateways{{state=\"live\"}} {}\n\
         switchyard_cp_gateways{{state=\"stale\"}} {}\n\
         # HELP switchyard_cp_gateways_behind Live gateways whose heartbeat reports a revision older than the latest.\n\
         # TYPE switchyard_cp_gateways_behind gauge\n\
         switchyard_cp_gateways_behind {}",
        gateways.live, gateways.stale, gateways.behind
    );
}

/// An unfinished migration, as its row says at the scrape.
pub(crate) struct MigrationFigures<'a> {
    pub(crate) id: i64,
    pub(crate) tenant: &'a str,
    pub(crate) state: &'a str,
    pub(crate) progress: &'a MigrationProgress,
    /// When the row last changed (a step, or a task saving its progress, twice a second while it runs), in
    /// seconds since the Unix epoch.
    pub(crate) updated_at: i64,
}

/// One counter of a task's progress.
type TaskCounter = fn(&TaskProgress) -> u64;

/// The key counters of a task's progress, by the `kind` label.
const TASK_KEYS: [(&str, TaskCounter); 10] = [
    ("scanned", |p| p.scanned),
    ("copied", |p| p.copied),
    ("skipped", |p| p.skipped),
    ("failed", |p| p.failed),
    ("matched", |p| p.matched),
    ("repaired", |p| p.repaired),
    ("removed", |p| p.removed),
    ("unresolved", |p| p.unresolved),
    ("estimated_total", |p| p.estimated_total),
    ("remaining", |p| p.remaining),
];

/// How many migrations are in each unfinished state, and each one's state, last change and task progress.
fn render_migrations(out: &mut String, migrations: &[MigrationFigures]) {
    out.push_str(
        "# HELP switchyard_cp_migrations Tenant migrations not finished nor aborted, by state.\n\
         # TYPE switchyard_cp_migrations gauge\n",
    );
    for state in MigrationState::ALL
        .into_iter()
        .filter(|s| s.is_active())
        .map(MigrationState::as_str)
    {
        let count = migrations.iter().filter(|m| m.state == state).count();
        let _ = writeln!(out, "switchyard_cp_migrations{{state=\"{state}\"}} {count}");
    }
    out.push_str(
        "# HELP switchyard_cp_migration_updated_timestamp_seconds When each unfinished migration last changed (a step, or its task saving progress), by tenant, migration id and state.\n\
         # TYPE switchyard_cp_migration_updated_timestamp_seconds gauge\n",
    );
    for m in migrations {
        let _ = writeln!(
            out,
            "switchyard_cp_migration_updated_timestamp_seconds{{tenant=\"{}\",migration=\"{}\",state=\"{}\"}} {}",
            label_value(m.tenant),
            m.id,
            m.state,
            m.updated_at
        );
    }
    out.push_str(
        "# HELP switchyard_cp_migration_task_keys Keys a migration's backfill, verify or rollback task has seen, by kind (as its progress in the API).\n\
         # TYPE switchyard_cp_migration_task_keys gauge\n",
    );
    for m in migrations {
        for (task, progress) in tasks(m) {
            for (kind, value) in TASK_KEYS {
                let _ = writeln!(
                    out,
                    "switchyard_cp_migration_task_keys{{tenant=\"{}\",migration=\"{}\",task=\"{task}\",kind=\"{kind}\"}} {}",
                    label_value(m.tenant),
                    m.id,
                    value(progress)
                );
            }
        }
    }
    out.push_str(
        "# HELP switchyard_cp_migration_task_keys_per_second Keys per second over a migration task so far.\n\
         # TYPE switchyard_cp_migration_task_keys_per_second gauge\n",
    );
    for m in migrations {
        for (task, progress) in tasks(m) {
            let _ = writeln!(
                out,
                "switchyard_cp_migration_task_keys_per_second{{tenant=\"{}\",migration=\"{}\",task=\"{task}\"}} {}",
                label_value(m.tenant),
                m.id,
                progress.keys_per_sec
            );
        }
    }
}

/// A migration's tasks that have progress, by the `task` label.
fn tasks<'a>(m: &MigrationFigures<'a>) -> impl Iterator<Item = (&'static str, &'a TaskProgress)> {
    [
        ("backfill", &m.progress.backfill),
        ("verify", &m.progress.verify),
        ("rollback", &m.progress.rollback),
    ]
    .into_iter()
    .filter_map(|(task, progress)| Some((task, progress.as_ref()?)))
}

/// A Prometheus label value: backslash, double quote and newline escaped.
fn label_value(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn counter(value: &AtomicU64) -> i64 {
    i64::try_from(value.load(Ordering::Relaxed)).unwrap_or(i64::MAX)
}

/// Middleware counting every response.
pub(crate) async fn count(
    State(metrics): State<Arc<Metrics>>,
    request: Request,
    next: Next,
) -> Response {
    let response = next.run(request).await;
    let class = usize::from(response.status().as_u16() / 100);
    if let Some(counter) = metrics.responses.get(class) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_task_is_written_by_kind() {
        let progress = MigrationProgress {
            backfill: Some(TaskProgress {
                scanned: 120,
                copied: 100,
                estimated_total: 1000,
                remaining: 880,
                keys_per_sec: 12.5,
                ..TaskProgress::default()
            }),
            verify: None,
            rollback: None,
        };
        let figures = [MigrationFigures {
            id: 9,
            tenant: "a\"b",
            state: "backfilling",
            progress: &progress,
            updated_at: 1_800_000_000,
        }];
        let stored = Stored {
            migrations: figures.into(),
            gateways: GatewayCounts {
                live: 2,
                stale: 1,
                behind: 1,
            },
        };
        let text = Metrics::default().render(3, Some(&stored));
        for line in [
            "switchyard_cp_gateways{state=\"live\"} 2\nswitchyard_cp_gateways{state=\"stale\"} 1\n",
            "switchyard_cp_gateways_behind 1\n",
            "switchyard_cp_migrations{state=\"backfilling\"} 1\n",
            "switchyard_cp_migrations{state=\"cut_over\"} 0\n",
            "switchyard_cp_migration_updated_timestamp_seconds{tenant=\"a\\\"b\",migration=\"9\",state=\"backfilling\"} 1800000000\n",
            "switchyard_cp_migration_task_keys{tenant=\"a\\\"b\",migration=\"9\",task=\"backfill\",kind=\"copied\"} 100\n",
            "switchyard_cp_migration_task_keys{tenant=\"a\\\"b\",migration=\"9\",task=\"backfill\",kind=\"remaining\"} 880\n",
            "switchyard_cp_migration_task_keys_per_second{tenant=\"a\\\"b\",migration=\"9\",task=\"backfill\"} 12.5\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        assert!(!text.contains("task=\"verify\""), "{text}");
        // Without the database, no migration series at all.
        assert!(
            !Metrics::default()
                .render(3, None)
                .contains("switchyard_cp_migration")
        );
    }

    #[test]
    fn certificate_expiry_is_a_gauge_per_role_and_file() {
        let metrics = Metrics::default();
        assert!(!metrics.render(0, None).contains("switchyard_tls_"));
        metrics.certificate_expiry("listener", "/etc/cp/\"odd\"\\name.pem", 1_900_000_000);
        metrics.certificate_expiry("listener", "/etc/cp/cert.pem", 1_800_000_000);
        metrics.certificate_expiry("listener", "/etc/cp/cert.pem", 1_850_000_000);
        let rendered = metrics.render(0, None);
        assert!(rendered.contains(
            "# TYPE switchyard_tls_certificate_expiry_timestamp_seconds gauge\n\
             switchyard_tls_certificate_expiry_timestamp_seconds{role=\"listener\",source=\"/etc/cp/\\\"odd\\\"\\\\name.pem\"} 1900000000\n\
             switchyard_tls_certificate_expiry_timestamp_seconds{role=\"listener\",source=\"/etc/cp/cert.pem\"} 1850000000\n"
        ), "{rendered}");
        metrics.forget_certificate("listener", "/etc/cp/cert.pem");
        assert!(!metrics.render(0, None).contains("cert.pem"));
    }
}
