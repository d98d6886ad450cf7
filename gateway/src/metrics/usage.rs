//! A tenant's traffic since the last usage report (see `report`): its counters as they were at that report, kept
//! beside them, so that each report carries what was added since. Only the reporter reads and moves the mark; the
//! data path pays nothing for it.

use std::sync::Mutex;
use std::sync::atomic::Ordering;

use switchyard_schemas::api::NearCacheUsage;

use super::{BUCKETS_US, Buckets, NearCacheCounters, TenantCounters};

/// The tenant's counters at the last report.
#[derive(Default)]
pub(crate) struct UsageMark(Mutex<Marked>);

#[derive(Default, Clone, Copy)]
struct Marked {
    commands: u64,
    errors: u64,
    bytes_in: u64,
    bytes_out: u64,
    connections: i64,
    latency: Buckets,
    near_cache: NearCacheMark,
}

/// A near cache's counts, and the bytes it held, at a report.
#[derive(Default, Clone, Copy, PartialEq, Eq)]
struct NearCacheMark {
    hits: u64,
    misses: u64,
    invalidations: u64,
    evictions: u64,
    bytes: u64,
}

impl NearCacheMark {
    fn load(counters: &NearCacheCounters) -> NearCacheMark {
        NearCacheMark {
            hits: counters.hits.load(Ordering::Relaxed),
            misses: counters.misses.load(Ordering::Relaxed),
            invalidations: counters.invalidations.load(Ordering::Relaxed),
            evictions: counters.evictions.load(Ordering::Relaxed),
            bytes: counters.bytes.load(Ordering::Relaxed).max(0) as u64,
        }
    }

    /// What the cache did since `before`, and holds now; `None` when it did nothing, holds nothing and held
    /// nothing at the last report (a tenant without the cache: its report is as it was; one whose cache was
    /// emptied is reported once more, holding none).
    fn since(self, before: NearCacheMark) -> Option<NearCacheUsage> {
        let usage = NearCacheUsage {
            hits: self.hits.saturating_sub(before.hits),
            misses: self.misses.saturating_sub(before.misses),
            invalidations: self.invalidations.saturating_sub(before.invalidations),
            evictions: self.evictions.saturating_sub(before.evictions),
            bytes: self.bytes,
        };
        let idle = usage.hits == 0
            && usage.misses == 0
            && usage.invalidations == 0
            && usage.evictions == 0
            && usage.bytes == 0
            && before.bytes == 0;
        (!idle).then_some(usage)
    }
}

/// What a tenant's counters added since the last report, and its connections now.
pub(crate) struct UsageDelta {
    pub commands: u64,
    pub errors: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub connections: i64,
    /// Whether `connections` differs from the last report's (a tenant whose last client left is reported once
    /// more, with none).
    pub connections_changed: bool,
    /// The interval's 99th percentile latency, where the tenant's latency is timed and commands were.
    pub p99_us: Option<u64>,
    /// What its near cache did, where it did something or holds entries.
    pub near_cache: Option<NearCacheUsage>,
}

impl UsageDelta {
    /// Nothing to report: no traffic, no connection, and none closed since the last report.
    pub(crate) fn is_idle(&self) -> bool {
        self.commands == 0
            && self.errors == 0
            && self.bytes_in == 0
            && self.bytes_out == 0
            && self.connections == 0
            && !self.connections_changed
            && self.near_cache.is_none()
    }
}

impl TenantCounters {
    /// What was counted since the last call (the first: since the gateway started), and the mark moved to now.
    pub(crate) fn usage_since_report(&self) -> UsageDelta {
        let now = Marked {
            commands: self.commands.total(),
            errors: self.errors.total.total(),
            bytes_in: self.received_bytes.total(),
            bytes_out: self.sent_bytes.total(),
            connections: self.connections.load(Ordering::Relaxed),
            latency: self.latency.load(),
            near_cache: NearCacheMark::load(&self.near_cache),
        };
        let mut mark = self.usage.0.lock().unwrap_or_else(|e| e.into_inner());
        let before = std::mem::replace(&mut *mark, now);
        let mut latency = now.latency;
        for (bucket, was) in latency.buckets.iter_mut().zip(before.latency.buckets) {
            *bucket = bucket.saturating_sub(was);
        }
        latency.count = latency.count.saturating_sub(before.latency.count);
        UsageDelta {
            commands: now.commands.saturating_sub(before.commands),
            errors: now.errors.saturating_sub(before.errors),
            bytes_in: now.bytes_in.saturating_sub(before.bytes_in),
            bytes_out: now.bytes_out.saturating_sub(before.bytes_out),
            connections: now.connections,
            connections_changed: now.connections != before.connections,
            p99_us: p99(&latency),
            near_cache: now.near_cache.since(before.near_cache),
        }
    }
}

/// The upper bound of the bucket that holds the 99th percentile of `latency` (the last bound for one beyond
/// every bucket); `None` without a sample.
fn p99(latency: &Buckets) -> Option<u64> {
    if latency.count == 0 {
        return None;
    }
    let wanted = latency.count.saturating_mul(99).div_ceil(100);
    let mut seen = 0;
    for (bound, n) in BUCKETS_US.iter().zip(latency.buckets) {
        seen += n;
        if seen >= wanted {
            return Some(*bound);
        }
    }
    BUCKETS_US.last().copied()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::cmd::Command;

    #[test]
    fn each_report_carries_what_was_added_since_the_last() {
        let counters = TenantCounters::default();
        assert!(counters.usage_since_report().is_idle());
        counters.commands.add(Command::Get, 200);
        counters.received_bytes.add(10);
        counters.connections.store(2, Ordering::Relaxed);
        counters.latency.observe(Duration::from_micros(80), 98);
        counters.latency.observe(Duration::from_micros(3000), 2);
        let first = counters.usage_since_report();
        assert_eq!(
            (first.commands, first.bytes_in, first.connections),
            (200, 10, 2)
        );
        // 99 of 100 took at most 5 ms: the 99th is in the 5 ms bucket.
        assert_eq!(first.p99_us, Some(5_000));
        counters.commands.add(Command::Set, 5);
        counters.errors.count(b"-ERR x\r\n");
        let second = counters.usage_since_report();
        assert_eq!(
            (second.commands, second.errors, second.p99_us),
            (5, 1, None)
        );
        assert!(!second.connections_changed);
        // The last client leaves: reported once more, then idle.
        counters.connections.store(0, Ordering::Relaxed);
        assert!(!counters.usage_since_report().is_idle());
        assert!(counters.usage_since_report().is_idle());
    }

    #[test]
    fn a_near_cache_is_reported_while_it_works_or_holds_entries() {
        let counters = TenantCounters::default();
        assert_eq!(counters.usage_since_report().near_cache, None);
        let cache = &counters.near_cache;
        cache.hits.fetch_add(9, Ordering::Relaxed);
        cache.misses.fetch_add(1, Ordering::Relaxed);
        cache.bytes.store(300, Ordering::Relaxed);
        let first = counters.usage_since_report();
        assert!(!first.is_idle());
        let figures =
            |u: Option<NearCacheUsage>| u.map(|u| (u.hits, u.misses, u.evictions, u.bytes));
        assert_eq!(figures(first.near_cache), Some((9, 1, 0, 300)));
        // Nothing read, entries still held: the bytes are reported.
        assert_eq!(
            figures(counters.usage_since_report().near_cache),
            Some((0, 0, 0, 300))
        );
        cache.evictions.fetch_add(2, Ordering::Relaxed);
        cache.bytes.store(0, Ordering::Relaxed);
        assert_eq!(
            figures(counters.usage_since_report().near_cache),
            Some((0, 0, 2, 0))
        );
        assert!(counters.usage_since_report().is_idle());
    }
}
