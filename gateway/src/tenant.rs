//! A tenant's runtime state: what the gateway keeps of a tenant while it serves it, carried from snapshot to
//! snapshot under the tenant's name (`route::build`), so that a reload neither resets a limit nor loses a monitor:
//! the rate its commands are admitted at, the places its limits bound (client and dedicated backend
//! connections, held as [`Lease`]s), its monitors, its slow log, and its counters (`metrics::TenantCounters`).

use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::metrics::{TenantCounters, epoch};
use crate::monitor::Monitors;
use crate::tracking::SlowLog;

/// One tenant's runtime state; cloned into every snapshot that keeps the tenant.
#[derive(Clone, Default)]
pub(crate) struct TenantRuntime(Arc<TenantState>);

#[derive(Default)]
pub(crate) struct TenantState {
    /// What `INFO` and `/metrics` show of the tenant; the leases' places are counted there too.
    pub counters: TenantCounters,
    /// The tenant's clients in MONITOR mode.
    pub monitors: Monitors,
    /// The tenant's slow log (`SLOWLOG`).
    pub slowlog: SlowLog,
    rate: RateLimiter,
}

impl Deref for TenantRuntime {
    type Target = TenantState;
    fn deref(&self) -> &TenantState {
        &self.0
    }
}

impl TenantState {
    /// Admits one more command at `now` when the tenant runs at most one per `interval` (over any second); a
    /// command refused is counted.
    pub(crate) fn admit_op(&self, now: Instant, interval: Duration) -> bool {
        let admitted = self.rate.admit(now, interval);
        if !admitted {
            self.counters.rate_limited.fetch_add(1, Ordering::Relaxed);
        }
        admitted
    }
}

impl TenantRuntime {
    /// A place for one more client connection of the tenant, `None` when `max` are held.
    pub(crate) fn lease_connection(&self, max: Option<i64>) -> Option<Lease> {
        Lease::take(self, |state| &state.counters.connections, max)
    }

    /// A place for one more dedicated backend connection of the tenant's clients, `None` when `max` are held.
    pub(crate) fn lease_dedicated(&self, max: i64) -> Option<Lease> {
        Lease::take(self, |state| &state.counters.dedicated, Some(max))
    }
}

/// One of a tenant's places that a limit bounds (a client connection, a dedicated backend connection), counted
/// while held and given back when dropped.
pub(crate) struct Lease {
    runtime: TenantRuntime,
    counter: fn(&TenantState) -> &AtomicI64,
}

impl Lease {
    /// Takes a place counted by `counter`, or `None` when `max` are held already: checked and taken in one atomic
    /// step, so that two workers never both take the last place.
    fn take(
        runtime: &TenantRuntime,
        counter: fn(&TenantState) -> &AtomicI64,
        max: Option<i64>,
    ) -> Option<Lease> {
        let held = counter(runtime).fetch_add(1, Ordering::AcqRel);
        if max.is_some_and(|max| held >= max) {
            counter(runtime).fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Lease {
            runtime: runtime.clone(),
            counter,
        })
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        (self.counter)(&self.runtime).fetch_sub(1, Ordering::AcqRel);
    }
}

/// A per-gateway ops/s limit, as GCRA over one atomic: each admitted command pushes a "theoretical arrival time"
/// forward by one interval; a command is refused when that time runs more than one second ahead of now (so
/// bursts of up to one second's allowance pass). No lock, one compare-and-swap per command.
#[derive(Default)]
struct RateLimiter {
    /// Nanoseconds since `epoch()`.
    arrival: AtomicU64,
}

impl RateLimiter {
    fn admit(&self, now: Instant, interval: Duration) -> bool {
        let now = now.saturating_duration_since(epoch()).as_nanos() as u64;
        let interval = interval.as_nanos() as u64;
        let burst = 1_000_000_000u64;
        let mut current = self.arrival.load(Ordering::Relaxed);
        loop {
            let next = current.max(now) + interval;
            if next > now + burst {
                return false;
            }
            match self.arrival.compare_exchange_weak(
                current,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => current = actual,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_is_refused_beyond_the_limit_and_given_back_on_drop() {
        let runtime = TenantRuntime::default();
        let first = runtime.lease_dedicated(2);
        let second = runtime.lease_dedicated(2);
        assert!(first.is_some() && second.is_some());
        assert!(runtime.lease_dedicated(2).is_none());
        drop(first);
        assert!(runtime.lease_dedicated(2).is_some());
        assert_eq!(runtime.counters.dedicated.load(Ordering::Relaxed), 1);
        assert!(runtime.lease_connection(None).is_some());
    }

    #[test]
    fn commands_past_a_second_of_allowance_are_refused_and_counted() {
        let runtime = TenantRuntime::default();
        let now = Instant::now();
        let interval = Duration::from_millis(100);
        let admitted = (0..20).filter(|_| runtime.admit_op(now, interval)).count();
        assert_eq!(admitted, 10);
        assert_eq!(runtime.counters.rate_limited.load(Ordering::Relaxed), 10);
        assert!(runtime.admit_op(now + Duration::from_secs(1), interval));
    }
}
