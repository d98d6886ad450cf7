//! A tenant's share of its fleet limits on this gateway (docs/tenant-policies.md, "Fleet limits"): the part of
//! its `max_ops_per_sec` and `max_connections` the control plane last handed to this gateway, and the demand
//! counted for the next heartbeat (commands asked, those refused included; connections refused).
//!
//! Until the first heartbeat's answer, and for a tenant whose limits hold per gateway, there is no share: the
//! whole limit holds here. When the control plane cannot be reached, the last shares stay.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// The smallest share of commands per second that admits anything: below it the tenant's commands are refused
/// here until the next share (the rate limiter's interval would overflow its clock).
const MIN_OPS_SHARE: f64 = 1e-3;

pub(crate) struct LimitShare {
    /// Commands per second, as `f64` bits; NaN: no share.
    ops: AtomicU64,
    /// Connections; negative: no share.
    connections: AtomicI64,
    /// Commands asked, admitted or refused, since the gateway started; and at the last heartbeat.
    asked: AtomicU64,
    asked_reported: AtomicU64,
    /// Connections refused by the tenant's limit since the gateway started; and at the last heartbeat.
    refused: AtomicU64,
    refused_reported: AtomicU64,
}

impl Default for LimitShare {
    fn default() -> LimitShare {
        LimitShare {
            ops: AtomicU64::new(f64::NAN.to_bits()),
            connections: AtomicI64::new(-1),
            asked: AtomicU64::new(0),
            asked_reported: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            refused_reported: AtomicU64::new(0),
        }
    }
}

/// What a tenant asked of this gateway since the last heartbeat.
#[derive(Debug, PartialEq)]
pub(crate) struct Demand {
    pub asked: u64,
    pub refused: u64,
}

impl LimitShare {
    /// Replaces the shares (`None`: none, the whole limit holds).
    pub(crate) fn set(&self, ops_per_sec: Option<f64>, connections: Option<u32>) {
        let ops = ops_per_sec
            .filter(|ops| ops.is_finite())
            .unwrap_or(f64::NAN);
        self.ops.store(ops.to_bits(), Ordering::Relaxed);
        let connections = connections.map_or(-1, i64::from);
        self.connections.store(connections, Ordering::Relaxed);
    }

    /// The rate limiter's interval for the share of commands per second, if there is one.
    pub(crate) fn ops_interval(&self) -> Option<Duration> {
        let ops = f64::from_bits(self.ops.load(Ordering::Relaxed));
        if ops.is_nan() {
            return None;
        }
        Some(Duration::from_secs_f64(1.0 / ops.max(MIN_OPS_SHARE)))
    }

    /// The share of connections, if there is one.
    pub(crate) fn connections(&self) -> Option<i64> {
        let connections = self.connections.load(Ordering::Relaxed);
        (connections >= 0).then_some(connections)
    }

    /// Counts a command asked (before the rate limit decides).
    #[inline]
    pub(crate) fn asked(&self) {
        self.asked.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a connection the tenant's limit refused.
    pub(crate) fn refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// What was asked since the last call.
    pub(crate) fn demand_since_report(&self) -> Demand {
        let asked = self.asked.load(Ordering::Relaxed);
        let refused = self.refused.load(Ordering::Relaxed);
        Demand {
            asked: asked.saturating_sub(self.asked_reported.swap(asked, Ordering::Relaxed)),
            refused: refused.saturating_sub(self.refused_reported.swap(refused, Ordering::Relaxed)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_sets_the_interval_and_the_connections_until_it_is_taken_away() {
        let share = LimitShare::default();
        assert_eq!((share.ops_interval(), share.connections()), (None, None));
        share.set(Some(250.0), Some(7));
        assert_eq!(share.ops_interval(), Some(Duration::from_millis(4)));
        assert_eq!(share.connections(), Some(7));
        // Nothing at all: a very long interval, which the limiter's second of allowance never reaches.
        share.set(Some(0.0), Some(0));
        assert!(share.ops_interval() > Some(Duration::from_secs(100)));
        assert_eq!(share.connections(), Some(0));
        share.set(None, None);
        assert_eq!((share.ops_interval(), share.connections()), (None, None));
    }

    #[test]
    fn demand_counts_what_was_asked_since_the_last_report() {
        let share = LimitShare::default();
        (0..5).for_each(|_| share.asked());
        share.refused();
        assert_eq!(
            share.demand_since_report(),
            Demand {
                asked: 5,
                refused: 1
            }
        );
        share.asked();
        assert_eq!(
            share.demand_since_report(),
            Demand {
                asked: 1,
                refused: 0
            }
        );
    }
}
