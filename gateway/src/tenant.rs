//! A tenant's runtime state: what the gateway keeps of a tenant while it serves it, carried from snapshot to
//! snapshot under the tenant's name (`route::build`), so that a reload neither resets a limit nor loses a monitor:
//! the rate its commands are admitted at, the places its limits bound (client and dedicated backend
//! connections, held as [`Lease`]s), its monitors, its slow log, its counters (`metrics::TenantCounters`), and
//! its credentials' use (connections open with each, and its last AUTH) for the usage reports, and its share of
//! its fleet limits ([`share`]).

mod share;

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use switchyard_schemas::api::{CredentialUsage, LimitDemand, TenantUsage};

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
    /// Its share of its fleet limits on this gateway, and the demand for them here.
    pub share: share::LimitShare,
    /// Each credential's use, by digest: touched at AUTH and by the reporter only.
    credentials: Mutex<HashMap<String, Arc<CredentialUse>>>,
}

/// One credential's use by the tenant's clients on this gateway, and what the last report said of it.
#[derive(Default)]
struct CredentialUse {
    open: AtomicI64,
    /// Its last successful AUTH, in milliseconds since the Unix epoch; 0: none.
    last_auth_ms: AtomicU64,
    reported_open: AtomicI64,
    reported_auth_ms: AtomicU64,
}

impl Deref for TenantRuntime {
    type Target = TenantState;
    fn deref(&self) -> &TenantState {
        &self.0
    }
}

impl TenantState {
    /// Admits one more command at `now` when the tenant runs at most one per `interval` (over any second), or,
    /// when its limits hold for the `fleet`, at the rate of its share here if it has one; a command refused is
    /// counted.
    pub(crate) fn admit_op(&self, now: Instant, interval: Duration, fleet: bool) -> bool {
        self.share.asked();
        let interval = match fleet {
            true => self.share.ops_interval().unwrap_or(interval),
            false => interval,
        };
        let admitted = self.rate.admit(now, interval);
        if !admitted {
            self.counters.rate_limited.fetch_add(1, Ordering::Relaxed);
        }
        admitted
    }
}

impl TenantRuntime {
    /// A place for one more client connection of the tenant, `None` when `max` are held (when its limits hold
    /// for the `fleet`, its share here if it has one).
    pub(crate) fn lease_connection(&self, max: Option<i64>, fleet: bool) -> Option<Lease> {
        let max = match fleet {
            true => max.map(|max| self.share.connections().unwrap_or(max)),
            false => max,
        };
        let place = Lease::take(self, |state| &state.counters.connections, max);
        if place.is_none() {
            self.share.refused();
        }
        place
    }

    /// The tenant's demand on this gateway over the `elapsed` since the last call, for the heartbeat; `None` when
    /// it asked nothing and holds no connection.
    pub(crate) fn limit_demand(&self, tenant: &str, elapsed: Duration) -> Option<LimitDemand> {
        let demand = self.share.demand_since_report();
        let open = self.counters.connections.load(Ordering::Relaxed).max(0);
        if demand.asked == 0 && demand.refused == 0 && open == 0 {
            return None;
        }
        let seconds = elapsed.as_secs_f64().max(1e-3);
        Some(LimitDemand {
            tenant: tenant.to_string(),
            ops_per_sec: demand.asked as f64 / seconds,
            connections: u32::try_from(open).unwrap_or(u32::MAX),
            connections_refused: u32::try_from(demand.refused).unwrap_or(u32::MAX),
        })
    }

    /// A place for one more dedicated backend connection of the tenant's clients, `None` when `max` are held.
    pub(crate) fn lease_dedicated(&self, max: i64) -> Option<Lease> {
        Lease::take(self, |state| &state.counters.dedicated, Some(max))
    }

    fn credential(&self, digest: &str) -> Arc<CredentialUse> {
        let mut credentials = self.credentials.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = credentials.get(digest) {
            return Arc::clone(known);
        }
        let usage = Arc::new(CredentialUse::default());
        credentials.insert(digest.to_string(), Arc::clone(&usage));
        usage
    }

    /// The tenant's part of a usage report (see `metrics::UsageMark`), `None` when it has nothing to say: no
    /// traffic, no connection and no credential's use changed since the last report.
    pub(crate) fn usage(&self, tenant: &str) -> Option<TenantUsage> {
        let delta = self.counters.usage_since_report();
        let credentials = self.credentials_since_report();
        if delta.is_idle() && credentials.is_empty() {
            return None;
        }
        Some(TenantUsage {
            tenant: tenant.to_string(),
            commands: delta.commands,
            errors: delta.errors,
            bytes_in: delta.bytes_in,
            bytes_out: delta.bytes_out,
            connections: delta.connections,
            p99_us: delta.p99_us,
            credentials,
            near_cache: delta.near_cache,
        })
    }

    /// The credentials with connections open, or whose count or last AUTH changed since the last report; one
    /// neither held by a connection nor changed is forgotten, so that the map holds only credentials in use.
    fn credentials_since_report(&self) -> Vec<CredentialUsage> {
        let mut credentials = self.credentials.lock().unwrap_or_else(|e| e.into_inner());
        let mut reported = Vec::new();
        credentials.retain(|digest, usage| {
            let open = usage.open.load(Ordering::Relaxed);
            let auth = usage.last_auth_ms.load(Ordering::Relaxed);
            let new_auth = auth != usage.reported_auth_ms.swap(auth, Ordering::Relaxed);
            let changed = open != usage.reported_open.swap(open, Ordering::Relaxed);
            if open > 0 || changed || new_auth {
                reported.push(CredentialUsage {
                    digest: digest.clone(),
                    connections: open,
                    last_auth_ms: new_auth.then_some(auth as i64),
                });
            }
            Arc::strong_count(usage) > 1
        });
        reported.sort_by(|a, b| a.digest.cmp(&b.digest));
        reported
    }
}

/// One of a tenant's places that a limit bounds (a client connection, a dedicated backend connection), counted
/// while held and given back when dropped.
pub(crate) struct Lease {
    runtime: TenantRuntime,
    counter: fn(&TenantState) -> &AtomicI64,
    /// For a client connection: the credential it authenticated with, whose connections it counts too.
    credential: Option<Arc<CredentialUse>>,
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
            credential: None,
        })
    }

    /// The same place, now counted as `digest`'s (the credential a client connection has just authenticated
    /// with; `None` for the open tenant), that credential's last AUTH being now.
    pub(crate) fn authenticated(mut self, digest: Option<&str>) -> Lease {
        if let Some(before) = self.credential.take() {
            before.open.fetch_sub(1, Ordering::Relaxed);
        }
        if let Some(digest) = digest {
            let usage = self.runtime.credential(digest);
            usage.open.fetch_add(1, Ordering::Relaxed);
            let now = crate::tracking::unix_micros() / 1000;
            usage.last_auth_ms.store(now.max(1), Ordering::Relaxed);
            self.credential = Some(usage);
        }
        self
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        (self.counter)(&self.runtime).fetch_sub(1, Ordering::AcqRel);
        if let Some(credential) = &self.credential {
            credential.open.fetch_sub(1, Ordering::Relaxed);
        }
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
        assert!(runtime.lease_connection(None, true).is_some());
    }

    #[test]
    fn each_credential_counts_its_connections_and_last_auth_until_reported() {
        let runtime = TenantRuntime::default();
        assert_eq!(runtime.usage("t"), None);
        let lease = |digest| {
            runtime
                .lease_connection(None, false)
                .map(|place| place.authenticated(Some(digest)))
        };
        let (a1, a2, b) = (lease("a"), lease("a"), lease("b"));
        let usage = runtime.usage("t").expect("two credentials in use");
        assert_eq!(usage.connections, 3);
        let counts: Vec<_> = usage
            .credentials
            .iter()
            .map(|c| (c.digest.as_str(), c.connections, c.last_auth_ms.is_some()))
            .collect();
        assert_eq!(counts, [("a", 2, true), ("b", 1, true)]);
        // A connection that authenticates again, as another credential, moves over (a millisecond later: the
        // last AUTH is a time).
        std::thread::sleep(Duration::from_millis(2));
        let a2 = a2.map(|place| place.authenticated(Some("b")));
        drop((a1, b));
        let usage = runtime.usage("t").expect("changes");
        let counts: Vec<_> = usage
            .credentials
            .iter()
            .map(|c| (c.digest.as_str(), c.connections, c.last_auth_ms.is_some()))
            .collect();
        assert_eq!(counts, [("a", 0, false), ("b", 1, true)]);
        // "a" was reported at 0 and is held by no connection: forgotten.
        assert_eq!(runtime.credentials.lock().map(|c| c.len()).ok(), Some(1));
        drop(a2);
        assert_eq!(runtime.usage("t").map(|u| u.credentials.len()), Some(1));
        assert_eq!(runtime.usage("t"), None);
    }

    #[test]
    fn commands_past_a_second_of_allowance_are_refused_and_counted() {
        let runtime = TenantRuntime::default();
        let now = Instant::now();
        let interval = Duration::from_millis(100);
        let admitted = (0..20)
            .filter(|_| runtime.admit_op(now, interval, false))
            .count();
        assert_eq!(admitted, 10);
        assert_eq!(runtime.counters.rate_limited.load(Ordering::Relaxed), 10);
        assert!(runtime.admit_op(now + Duration::from_secs(1), interval, false));
    }

    /// With a share of its fleet limits, the tenant is held to the share; without one, to the whole limit. Each
    /// command and connection asked is demand for the next heartbeat, refused or not.
    #[test]
    fn a_fleet_share_holds_in_place_of_the_limit_and_demand_counts_refusals() {
        let runtime = TenantRuntime::default();
        let now = Instant::now();
        let limit = Duration::from_millis(100);
        runtime.share.set(Some(4.0), Some(1));
        let admitted = (0..20)
            .filter(|_| runtime.admit_op(now, limit, true))
            .count();
        assert_eq!(admitted, 4);
        let first = runtime.lease_connection(Some(3), true);
        assert!(first.is_some());
        assert!(runtime.lease_connection(Some(3), true).is_none());
        // Per gateway, the share does not count.
        assert!(runtime.lease_connection(Some(3), false).is_some());
        let demand = runtime
            .limit_demand("t", Duration::from_secs(2))
            .expect("demand");
        assert_eq!(
            (
                demand.ops_per_sec,
                demand.connections,
                demand.connections_refused
            ),
            (10.0, 1, 1)
        );
        runtime.share.set(None, None);
        let later = now + Duration::from_secs(5);
        let admitted = (0..20)
            .filter(|_| runtime.admit_op(later, limit, true))
            .count();
        assert_eq!(admitted, 10);
        drop(first);
        assert_eq!(
            runtime
                .limit_demand("t", Duration::from_secs(1))
                .map(|d| d.connections),
            Some(0)
        );
        assert_eq!(runtime.limit_demand("t", Duration::from_secs(1)), None);
    }
}
