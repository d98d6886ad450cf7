//! Who gets in, and how fast a wrong password is tried.
//!
//! Connections that have not authenticated are capped apart from authenticated ones (`--max-unauthenticated-clients`
//! and `--max-clients`), so that sockets that never log in cannot take the places of tenants' clients; they are
//! also closed after `--auth-timeout-ms` (see `session`). A connection holds a [`Ticket`] for its place, moved
//! from one cap to the other when it authenticates and given back when it closes.
//!
//! Failed `AUTH` is counted by source address: past [`FREE_FAILURES`] failures within [`FAILURE_WINDOW`], each
//! further failure from that address makes its connection wait before anything else it sent is read (doubling
//! up to [`MAX_PENALTY`]). A client that knows its password never fails, so it is never slowed, even behind the
//! same address as an attacker. Failures are logged at most once a second, with how many were not.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Failed `AUTH`s an address may make within [`FAILURE_WINDOW`] before it is slowed.
pub(crate) const FREE_FAILURES: u32 = 10;

/// How long an address' failures are remembered after its last one.
pub(crate) const FAILURE_WINDOW: Duration = Duration::from_secs(60);

/// The longest wait after one failure.
pub(crate) const MAX_PENALTY: Duration = Duration::from_secs(5);

/// The wait after the first failure past [`FREE_FAILURES`]; it doubles with each further one.
const FIRST_PENALTY: Duration = Duration::from_millis(100);

/// Addresses remembered at most: beyond, the oldest are forgotten first (so the table's memory is bounded).
const MAX_ADDRESSES: usize = 65_536;

pub(crate) struct Admission {
    max_clients: usize,
    max_unauthenticated: usize,
    authenticated: AtomicUsize,
    unauthenticated: AtomicUsize,
    failures: Mutex<HashMap<IpAddr, Failures>>,
    /// When a failure was last logged, and how many were not logged since.
    log: Mutex<(Option<Instant>, u64)>,
}

struct Failures {
    count: u32,
    last: Instant,
}

/// Which cap a connection's place counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Unauthenticated,
    Authenticated,
}

/// A connection's place; given back when dropped.
pub(crate) struct Ticket {
    admission: Arc<Admission>,
    place: Place,
}

impl Admission {
    pub(crate) fn new(max_clients: usize, max_unauthenticated: usize) -> Admission {
        Admission {
            max_clients,
            max_unauthenticated,
            authenticated: AtomicUsize::new(0),
            unauthenticated: AtomicUsize::new(0),
            failures: Mutex::new(HashMap::new()),
            log: Mutex::new((None, 0)),
        }
    }

    /// A place for a new connection: an authenticated one when the connection needs no `AUTH` (a routes file's
    /// password-less tenant), else an unauthenticated one. `None` when that cap is reached.
    pub(crate) fn admit(self: &Arc<Self>, authenticated: bool) -> Option<Ticket> {
        let place = match authenticated {
            true => Place::Authenticated,
            false => Place::Unauthenticated,
        };
        self.take(place).then(|| Ticket {
            admission: Arc::clone(self),
            place,
        })
    }

    /// Connections open now, authenticated or not.
    #[cfg(test)]
    fn open(&self) -> (usize, usize) {
        (
            self.authenticated.load(Ordering::Relaxed),
            self.unauthenticated.load(Ordering::Relaxed),
        )
    }

    fn counter(&self, place: Place) -> (&AtomicUsize, usize) {
        match place {
            Place::Authenticated => (&self.authenticated, self.max_clients),
            Place::Unauthenticated => (&self.unauthenticated, self.max_unauthenticated),
        }
    }

    /// Takes a place under `place`'s cap; added first and checked after, so that two workers cannot both take
    /// the last one.
    fn take(&self, place: Place) -> bool {
        let (counter, max) = self.counter(place);
        if counter.fetch_add(1, Ordering::AcqRel) < max {
            return true;
        }
        counter.fetch_sub(1, Ordering::AcqRel);
        false
    }

    fn give_back(&self, place: Place) {
        self.counter(place).0.fetch_sub(1, Ordering::AcqRel);
    }

    /// Notes a failed `AUTH` from `ip`; returns how long its connection must wait before it is read again.
    pub(crate) fn failed(&self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if failures.len() >= MAX_ADDRESSES && !failures.contains_key(&ip) {
            failures.retain(|_, f| now.duration_since(f.last) < FAILURE_WINDOW);
            if failures.len() >= MAX_ADDRESSES {
                // Every address failed within the window: forget the one that failed longest ago.
                let oldest = failures
                    .iter()
                    .min_by_key(|(_, f)| f.last)
                    .map(|(ip, _)| *ip);
                if let Some(oldest) = oldest {
                    failures.remove(&oldest);
                }
            }
        }
        let entry = failures.entry(ip).or_insert(Failures {
            count: 0,
            last: now,
        });
        if now.duration_since(entry.last) >= FAILURE_WINDOW {
            entry.count = 0;
        }
        entry.count = entry.count.saturating_add(1);
        entry.last = now;
        penalty(entry.count)
    }

    /// Whether a failure is to be logged now (at most one a second), and how many were not since the last.
    pub(crate) fn log_failure(&self, now: Instant) -> Option<u64> {
        let mut log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        match log.0 {
            Some(last) if now.duration_since(last) < Duration::from_secs(1) => {
                log.1 += 1;
                None
            }
            _ => {
                log.0 = Some(now);
                Some(std::mem::take(&mut log.1))
            }
        }
    }
}

/// The wait after an address' `count`th failure within the window.
fn penalty(count: u32) -> Option<Duration> {
    let past = count.checked_sub(FREE_FAILURES + 1)?;
    let wait = FIRST_PENALTY.saturating_mul(1u32 << past.min(16));
    Some(wait.min(MAX_PENALTY))
}

impl Ticket {
    /// Moves an unauthenticated connection's place under the authenticated cap; false (and the place kept)
    /// when that cap is reached.
    pub(crate) fn authenticate(&mut self) -> bool {
        if self.place == Place::Authenticated {
            return true;
        }
        if !self.admission.take(Place::Authenticated) {
            return false;
        }
        self.admission.give_back(Place::Unauthenticated);
        self.place = Place::Authenticated;
        true
    }

    pub(crate) fn is_authenticated(&self) -> bool {
        self.place == Place::Authenticated
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.admission.give_back(self.place);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unauthenticated_connections_never_take_authenticated_places() {
        let admission = Arc::new(Admission::new(2, 3));
        let idle: Vec<Ticket> = (0..3).filter_map(|_| admission.admit(false)).collect();
        assert_eq!(idle.len(), 3);
        assert!(
            admission.admit(false).is_none(),
            "the unauthenticated cap holds"
        );
        let mut tenant = admission
            .admit(true)
            .expect("an authenticated place is free");
        assert!(tenant.authenticate());
        let mut second = idle.into_iter().next().expect("a ticket");
        assert!(second.authenticate(), "its place moves under the other cap");
        assert!(
            admission.admit(false).is_some(),
            "and frees an unauthenticated one"
        );
        assert!(
            admission.admit(true).is_none(),
            "both authenticated places are taken"
        );
        assert_eq!(admission.open().0, 2);
        drop(tenant);
        assert_eq!(admission.open().0, 1);
        assert!(admission.admit(true).is_some());
    }

    #[test]
    fn repeated_failures_from_one_address_are_slowed_and_forgotten_later() {
        let admission = Admission::new(10, 10);
        let (attacker, other) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let now = Instant::now();
        for _ in 0..FREE_FAILURES {
            assert_eq!(admission.failed(attacker, now), None);
        }
        assert_eq!(admission.failed(attacker, now), Some(FIRST_PENALTY));
        assert_eq!(admission.failed(attacker, now), Some(FIRST_PENALTY * 2));
        for _ in 0..20 {
            admission.failed(attacker, now);
        }
        assert_eq!(admission.failed(attacker, now), Some(MAX_PENALTY));
        assert_eq!(
            admission.failed(other, now),
            None,
            "another address is not slowed"
        );
        let later = now + FAILURE_WINDOW;
        assert_eq!(
            admission.failed(attacker, later),
            None,
            "forgotten after the window"
        );
    }

    #[test]
    fn failures_are_logged_at_most_once_a_second() {
        let admission = Admission::new(1, 1);
        let now = Instant::now();
        assert_eq!(admission.log_failure(now), Some(0));
        assert_eq!(admission.log_failure(now), None);
        assert_eq!(
            admission.log_failure(now + Duration::from_millis(500)),
            None
        );
        assert_eq!(admission.log_failure(now + Duration::from_secs(1)), Some(2));
    }
}
