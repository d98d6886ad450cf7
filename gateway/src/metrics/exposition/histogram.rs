//! Latency histograms as the exposition writes them: their figures at one moment, summed, and their samples.

use std::fmt::Write as _;

use super::super::BUCKETS_US;

/// A latency histogram's figures at one moment; summed over workers for the gateway-wide ones.
#[derive(Default, Clone, Copy)]
pub(in crate::metrics) struct Buckets {
    pub(in crate::metrics) buckets: [u64; BUCKETS_US.len()],
    pub(in crate::metrics) count: u64,
    pub(in crate::metrics) sum_us: u64,
}

impl Buckets {
    pub(super) fn add(&mut self, other: &Buckets) {
        for (total, n) in self.buckets.iter_mut().zip(other.buckets) {
            *total += n;
        }
        self.count += other.count;
        self.sum_us += other.sum_us;
    }

    /// The samples of histogram `name` with `labels` (already escaped; empty for none).
    pub(super) fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (bound, n) in BUCKETS_US.iter().zip(self.buckets) {
            cumulative += n;
            let le = *bound as f64 / 1e6;
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}"
            );
        }
        let count = self.count;
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let braces = |labels: &str| {
            if labels.is_empty() {
                String::new()
            } else {
                format!("{{{labels}}}")
            }
        };
        let sum = self.sum_us as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum{} {sum}", braces(labels));
        let _ = writeln!(out, "{name}_count{} {count}", braces(labels));
    }
}

pub(super) fn histogram_header(out: &mut String, name: &str) {
    let _ = writeln!(
        out,
        "# HELP {name} Time from reading a command to its reply being ready.\n# TYPE {name} histogram"
    );
}
