//! `Pace`: what a task's run has moved, held to its keys/s and bytes/s limits, and the rate and ETA it shows.

use std::time::{Duration, Instant};

use switchyard_schemas::api::{MigrationLimits, TaskProgress};

/// This run's start and what it moved since (a resumed run starts counting afresh: the limits bound what this
/// process puts on the servers, not the migration's average).
pub(crate) struct Pace {
    started: Instant,
    keys: u64,
    bytes: u64,
    keys_per_sec: u64,
    bytes_per_sec: u64,
}

impl Pace {
    pub(crate) fn new(limits: &MigrationLimits) -> Pace {
        Pace {
            started: Instant::now(),
            keys: 0,
            bytes: 0,
            keys_per_sec: limits.keys_per_sec,
            bytes_per_sec: limits.bytes_per_sec,
        }
    }

    /// Counts keys taken on and payload bytes moved.
    pub(crate) fn add(&mut self, keys: usize, bytes: u64) {
        self.keys += keys as u64;
        self.bytes += bytes;
    }

    /// How long to wait before taking on more keys, to stay within both limits (zero: go on).
    pub(crate) fn due(&self) -> Duration {
        let by = |moved: u64, limit: u64| match limit {
            0 => Duration::ZERO,
            limit => Duration::from_secs_f64(moved as f64 / limit as f64),
        };
        let due = by(self.keys, self.keys_per_sec).max(by(self.bytes, self.bytes_per_sec));
        due.saturating_sub(self.started.elapsed())
    }

    /// Sleeps until this run is back within its limits.
    pub(crate) async fn throttle(&self) {
        let due = self.due();
        if !due.is_zero() {
            tokio::time::sleep(due).await;
        }
    }

    /// Refreshes the rate, the keys remaining and the ETA shown with `counters`.
    pub(crate) fn report(&self, counters: &mut TaskProgress) {
        let rate = self.keys as f64 / self.started.elapsed().as_secs_f64().max(0.001);
        counters.keys_per_sec = (rate * 10.0).round() / 10.0;
        counters.remaining = counters.estimated_total.saturating_sub(counters.scanned);
        counters.eta_secs = (rate > 0.0).then(|| (counters.remaining as f64 / rate).ceil() as u64);
    }
}
