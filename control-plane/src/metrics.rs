//! Prometheus text metrics of the control plane: the build and the process, responses by status class,
//! revision, long-polls, snapshots and deltas, and when the certificates in use expire.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

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
    pub(crate) fn render(&self, revision: i64) -> String {
        let mut out = String::new();
        switchyard_schemas::telemetry::render_process_metrics(&mut out, env!("CARGO_PKG_VERSION"));
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
    fn certificate_expiry_is_a_gauge_per_role_and_file() {
        let metrics = Metrics::default();
        assert!(!metrics.render(0).contains("switchyard_tls_"));
        metrics.certificate_expiry("listener", "/etc/cp/\"odd\"\\name.pem", 1_900_000_000);
        metrics.certificate_expiry("listener", "/etc/cp/cert.pem", 1_800_000_000);
        metrics.certificate_expiry("listener", "/etc/cp/cert.pem", 1_850_000_000);
        let rendered = metrics.render(0);
        assert!(rendered.contains(
            "# TYPE switchyard_tls_certificate_expiry_timestamp_seconds gauge\n\
             switchyard_tls_certificate_expiry_timestamp_seconds{role=\"listener\",source=\"/etc/cp/\\\"odd\\\"\\\\name.pem\"} 1900000000\n\
             switchyard_tls_certificate_expiry_timestamp_seconds{role=\"listener\",source=\"/etc/cp/cert.pem\"} 1850000000\n"
        ), "{rendered}");
        metrics.forget_certificate("listener", "/etc/cp/cert.pem");
        assert!(!metrics.render(0).contains("cert.pem"));
    }
}
