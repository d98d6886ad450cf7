//! Background writes to double-write secondaries: bounded per secondary, and every failure counted and logged.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Destination, ReplyHandle};
use crate::resp;

/// Background writes to one double-write secondary, for one tenant on one worker: bounded, and every failure
/// counted and logged (with the command name, never its arguments).
pub(crate) struct DetachedWrites {
    pub tenant: String,
    pub resource: String,
    failures: Arc<AtomicU64>,
    in_flight: Cell<usize>,
}

/// Most background writes one secondary may have outstanding per worker before new ones count as failures.
pub(crate) const MAX_DETACHED_IN_FLIGHT: usize = 64 * 1024;

impl DetachedWrites {
    pub(crate) fn new(tenant: &str, resource: &str, failures: Arc<AtomicU64>) -> DetachedWrites {
        DetachedWrites {
            tenant: tenant.to_string(),
            resource: resource.to_string(),
            failures,
            in_flight: Cell::new(0),
        }
    }

    /// Takes a place for one more write, or counts it as failed when the secondary is too far behind.
    pub(crate) fn admit(self: &Rc<Self>, command: &'static str) -> Option<ReplyHandle> {
        self.admit_run(command, 1)
    }

    /// Takes places for the `count` writes of a run (see `BackendConnection::send_run`), or counts them all as
    /// failed when the secondary is too far behind.
    pub(crate) fn admit_run(
        self: &Rc<Self>,
        command: &'static str,
        count: u32,
    ) -> Option<ReplyHandle> {
        let count_usize = count as usize;
        if self.in_flight.get() + count_usize > MAX_DETACHED_IN_FLIGHT {
            for _ in 0..count {
                self.fail(command, "too many writes outstanding");
            }
            return None;
        }
        self.in_flight.set(self.in_flight.get() + count_usize);
        Some(ReplyHandle::new(Destination::detached(
            Rc::clone(self),
            command,
            count,
        )))
    }

    /// The replies to `count` writes: every error among them is a failure.
    pub(super) fn finish(&self, command: &'static str, replies: &[u8], count: u32) {
        self.in_flight
            .set(self.in_flight.get().saturating_sub(count as usize));
        for reply in resp::each_reply(replies) {
            if let Some(error) = reply.strip_prefix(b"-") {
                let line = error.split(|&b| b == b'\r').next().unwrap_or_default();
                self.fail(command, &String::from_utf8_lossy(line));
            }
        }
    }

    fn fail(&self, command: &'static str, reason: &str) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(tenant = %self.tenant, resource = %self.resource, command, reason, "double-write to a secondary failed");
    }
}
