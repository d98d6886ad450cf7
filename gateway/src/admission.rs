//! Who gets in, and how fast a wrong password is tried.
//!
//! Connections that have not authenticated are capped apart from authenticated ones (`--max-unauthenticated-clients`
//! and `--max-clients`), so that sockets that never log in cannot take the places of tenants' clients; they are
//! also closed after `--auth-timeout-ms` (see `session`). A connection holds a [`Ticket`] for its place, moved
//! from one cap to the other when it authenticates and given back when it closes.
//!
//! The unauthenticated places are shared fairly among source addresses: once more than half of them are in use,
//! an address (an IPv6 address' /64, see [`source_of`]) holding `--max-unauthenticated-per-address` of them gets
//! no more, so that sockets opened from one place cannot lock every other client of every tenant out. While at
//! most half are in use, any address may take more than its share: an application server that opens its whole
//! pool at once is not refused on a quiet gateway, and places taken beyond a share can never be more than half,
//! so the other half stays open to addresses within theirs. Behind `--proxy-protocol` the address is the
//! client's, from its header (see `proxy_protocol::client_address`); until the header is read the place counts
//! against no address, since the peer is the balancer, whose bursts of new connections would otherwise be refused
//! (whoever can reach the listener without the balancer can name any address in a header anyway).
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

/// What a connection over a cap or a share gets before it is closed: Redis' own words.
pub(crate) const MAX_CLIENTS: &str = "-ERR max number of clients reached\r\n";

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
    max_unauthenticated_per_source: usize,
    /// Every connection's peer is a load balancer (`--proxy-protocol`), not the client.
    behind_balancer: bool,
    authenticated: AtomicUsize,
    unauthenticated: AtomicUsize,
    /// Unauthenticated places held per source; a source holding none has no entry, so the table never has more
    /// entries than the unauthenticated cap.
    by_source: Mutex<HashMap<IpAddr, usize>>,
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
    /// The source an unauthenticated place counts against (see [`source_of`]).
    source: Option<IpAddr>,
}

/// What an unauthenticated place counts against: an IPv4 address (an IPv4 client of a dual-stack listener
/// included), or the /64 an IPv6 address is in, since one host is usually given a whole /64 and would otherwise
/// have as many shares as it has addresses.
fn source_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
    }
}

impl Admission {
    /// `max_unauthenticated_per_source`: the share of the unauthenticated places one source may hold;
    /// `behind_balancer`: connections come through a load balancer that sends PROXY headers.
    pub(crate) fn new(
        max_clients: usize,
        max_unauthenticated: usize,
        max_unauthenticated_per_source: usize,
        behind_balancer: bool,
    ) -> Admission {
        Admission {
            max_clients,
            max_unauthenticated,
            max_unauthenticated_per_source,
            behind_balancer,
            authenticated: AtomicUsize::new(0),
            unauthenticated: AtomicUsize::new(0),
            by_source: Mutex::new(HashMap::new()),
            failures: Mutex::new(HashMap::new()),
            log: Mutex::new((None, 0)),
        }
    }

    /// A place for a new connection from `peer`: an authenticated one when the connection needs no `AUTH` (a
    /// routes file's password-less tenant), else an unauthenticated one, within `peer`'s share (behind a
    /// balancer, within no address's until the header names the client's: see [`Ticket::count_against`]).
    /// `None` when that cap (or share) is reached.
    pub(crate) fn admit(self: &Arc<Self>, authenticated: bool, peer: IpAddr) -> Option<Ticket> {
        if authenticated {
            return self.take(Place::Authenticated).then(|| Ticket {
                admission: Arc::clone(self),
                place: Place::Authenticated,
                source: None,
            });
        }
        if !self.take(Place::Unauthenticated) {
            return None;
        }
        // Dropped at once when the source's share is taken: it gives the place back.
        let mut ticket = Ticket {
            admission: Arc::clone(self),
            place: Place::Unauthenticated,
            source: None,
        };
        (self.behind_balancer || ticket.count_against(peer)).then_some(ticket)
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

    /// Takes one of `source`'s unauthenticated places (already counted under the cap); false when it holds its
    /// share and more than half the places are in use.
    fn take_for(&self, source: IpAddr) -> bool {
        let mut by_source = self.by_source.lock().unwrap_or_else(|e| e.into_inner());
        let held = by_source.entry(source).or_default();
        let contended = self.unauthenticated.load(Ordering::Acquire) > self.max_unauthenticated / 2;
        if *held >= self.max_unauthenticated_per_source && contended {
            if *held == 0 {
                by_source.remove(&source);
            }
            return false;
        }
        *held += 1;
        true
    }

    fn give_back_for(&self, source: IpAddr) {
        let mut by_source = self.by_source.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(held) = by_source.get_mut(&source) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                by_source.remove(&source);
            }
        }
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
    /// Counts an unauthenticated place against `ip`'s source from now on (the client's address, once a PROXY
    /// header gave it); false (and the place kept as it was) when that source holds its share. An
    /// authenticated place counts against no source.
    pub(crate) fn count_against(&mut self, ip: IpAddr) -> bool {
        let source = source_of(ip);
        if self.place == Place::Authenticated || self.source == Some(source) {
            return true;
        }
        if !self.admission.take_for(source) {
            return false;
        }
        if let Some(previous) = self.source.replace(source) {
            self.admission.give_back_for(previous);
        }
        true
    }

    /// Moves an unauthenticated connection's place under the authenticated cap, out of its source's share;
    /// false (and the place kept) when that cap is reached.
    pub(crate) fn authenticate(&mut self) -> bool {
        if self.place == Place::Authenticated {
            return true;
        }
        if !self.admission.take(Place::Authenticated) {
            return false;
        }
        self.admission.give_back(Place::Unauthenticated);
        if let Some(source) = self.source.take() {
            self.admission.give_back_for(source);
        }
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
        if let Some(source) = self.source {
            self.admission.give_back_for(source);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unauthenticated_connections_never_take_authenticated_places() {
        let admission = Arc::new(Admission::new(2, 3, 3, false));
        let idle: Vec<Ticket> = (0..3)
            .filter_map(|_| admission.admit(false, ip(1)))
            .collect();
        assert_eq!(idle.len(), 3);
        assert!(
            admission.admit(false, ip(2)).is_none(),
            "the unauthenticated cap holds"
        );
        let mut tenant = admission
            .admit(true, ip(2))
            .expect("an authenticated place is free");
        assert!(tenant.authenticate());
        let mut second = idle.into_iter().next().expect("a ticket");
        assert!(second.authenticate(), "its place moves under the other cap");
        assert!(
            admission.admit(false, ip(1)).is_some(),
            "and frees an unauthenticated one"
        );
        assert!(
            admission.admit(true, ip(1)).is_none(),
            "both authenticated places are taken"
        );
        assert_eq!(admission.open().0, 2);
        drop(tenant);
        assert_eq!(admission.open().0, 1);
        assert!(admission.admit(true, ip(1)).is_some());
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn one_source_holds_at_most_its_share_of_unauthenticated_places_once_half_are_in_use() {
        let admission = Arc::new(Admission::new(10, 10, 2, false));
        let others: Vec<Ticket> = (3..6)
            .filter_map(|a| admission.admit(false, ip(a)))
            .collect();
        assert_eq!(others.len(), 3);
        let first: Vec<Ticket> = (0..2)
            .filter_map(|_| admission.admit(false, ip(1)))
            .collect();
        assert_eq!(first.len(), 2);
        assert!(
            admission.admit(false, ip(1)).is_none(),
            "its share is taken and half the places are in use"
        );
        assert_eq!(admission.open().1, 5, "a refused place is given back");
        // The same address written as IPv4-mapped IPv6 is the same source.
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert!(admission.admit(false, mapped).is_none());
        let other = admission.admit(false, ip(2));
        assert!(other.is_some(), "another source has its own share");
        // A place that authenticates leaves its source's share, and so does one that closes.
        let Ok([mut authenticated, closed]) = <[Ticket; 2]>::try_from(first) else {
            panic!("two tickets");
        };
        assert!(authenticated.authenticate());
        let again = admission.admit(false, ip(1));
        assert!(again.is_some());
        assert!(admission.admit(false, ip(1)).is_none());
        drop(closed);
        assert!(admission.admit(false, ip(1)).is_some());
    }

    #[test]
    fn a_source_may_take_more_than_its_share_while_at_most_half_the_places_are_in_use() {
        let admission = Arc::new(Admission::new(10, 10, 2, false));
        let burst: Vec<Ticket> = (0..10)
            .filter_map(|_| admission.admit(false, ip(1)))
            .collect();
        assert_eq!(
            burst.len(),
            5,
            "a quiet gateway takes a pool opened at once, up to half"
        );
        let others: Vec<Ticket> = (2..7)
            .filter_map(|a| admission.admit(false, ip(a)))
            .collect();
        assert_eq!(
            others.len(),
            5,
            "the other half stays open to other sources"
        );
        assert!(admission.admit(false, ip(8)).is_none(), "the cap holds");
    }

    #[test]
    fn an_ipv6_64_is_one_source() {
        let admission = Arc::new(Admission::new(10, 2, 1, false));
        let v6 = |text: &str| text.parse::<IpAddr>().unwrap();
        let held = admission.admit(false, v6("2001:db8:0:1::7"));
        assert!(held.is_some());
        assert!(admission.admit(false, v6("2001:db8:0:1:ffff::1")).is_none());
        assert!(admission.admit(false, v6("2001:db8:0:2::7")).is_some());
    }

    #[test]
    fn a_place_taken_before_the_proxy_header_counts_against_the_address_it_gives() {
        let admission = Arc::new(Admission::new(10, 2, 1, true));
        let balancer = ip(100);
        let mut first = admission.admit(false, balancer).expect("a place");
        assert!(first.count_against(ip(1)), "the client's own share");
        let mut second = admission
            .admit(false, balancer)
            .expect("the balancer's address holds no share");
        assert!(!second.count_against(ip(1)), "that client's share is taken");
        assert!(second.count_against(ip(2)));
        drop(second);
        assert_eq!(admission.open().1, 1);
        assert!(first.authenticate(), "which leaves the client's share");
        let mut third = admission.admit(false, balancer).expect("a place");
        assert!(third.count_against(ip(1)));
    }

    #[test]
    fn repeated_failures_from_one_address_are_slowed_and_forgotten_later() {
        let admission = Admission::new(10, 10, 10, false);
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
        let admission = Admission::new(1, 1, 1, false);
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
