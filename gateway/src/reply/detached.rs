//! Background writes to double-write secondaries: bounded per secondary, and every failure counted, logged and
//! its keys recorded for the repair (see `repair`).

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use super::{Destination, ReplyHandle};
use crate::missed::Missed;
use crate::resp;

/// Background writes to one double-write secondary, for one tenant and database on one worker: bounded, and
/// every failure counted and logged (with the command name, never its arguments), and its keys recorded.
pub(crate) struct DetachedWrites {
    failures: Arc<AtomicU64>,
    in_flight: Cell<usize>,
    /// Where the keys of failed writes go.
    missed: Arc<Missed>,
    /// The client's database the writes were made in.
    db: u32,
}

/// Most background writes one secondary may have outstanding per worker before new ones count as failures.
pub(crate) const MAX_DETACHED_IN_FLIGHT: usize = 64 * 1024;

impl DetachedWrites {
    pub(crate) fn new(failures: Arc<AtomicU64>, missed: Arc<Missed>, db: u32) -> DetachedWrites {
        DetachedWrites {
            failures,
            in_flight: Cell::new(0),
            missed,
            db,
        }
    }

    /// Takes a place for one more write (`raw`), or counts it as failed when the secondary is too far behind.
    pub(crate) fn admit(
        self: &Rc<Self>,
        command: &'static str,
        raw: &Bytes,
    ) -> Option<ReplyHandle> {
        self.admit_run(command, raw, 1)
    }

    /// Takes places for the `count` writes of a run (`raw`, see `BackendConnection::send_run`), or counts them
    /// all as failed when the secondary is too far behind.
    pub(crate) fn admit_run(
        self: &Rc<Self>,
        command: &'static str,
        raw: &Bytes,
        count: u32,
    ) -> Option<ReplyHandle> {
        let count_usize = count as usize;
        if self.in_flight.get() + count_usize > MAX_DETACHED_IN_FLIGHT {
            for _ in 0..count {
                self.fail(command, "too many writes outstanding");
            }
            self.missed.record_requests(self.db, raw);
            return None;
        }
        self.in_flight.set(self.in_flight.get() + count_usize);
        Some(ReplyHandle::new(Destination::detached(
            Rc::clone(self),
            command,
            raw.clone(),
            count,
        )))
    }

    /// The replies to `count` writes (`raw`): every error among them is a failure, whose request's keys are
    /// recorded.
    pub(super) fn finish(&self, command: &'static str, raw: &[u8], replies: &[u8], count: u32) {
        self.in_flight
            .set(self.in_flight.get().saturating_sub(count as usize));
        self.failed(command, raw, replies);
    }

    /// Makes `handle`, which a write to this secondary that the client waits for (ack `all` or
    /// `all_check_error`) answers, record the keys of the write (`raw`) when it fails: the client sees the
    /// error, but the primary applied the write, so the copies differ all the same.
    pub(crate) fn witness(
        self: &Rc<Self>,
        handle: ReplyHandle,
        command: &'static str,
        raw: &Bytes,
    ) -> ReplyHandle {
        handle.witnessed(Rc::clone(self), command, raw.clone())
    }

    /// Counts, logs and records each write of `raw` whose reply in `replies` is an error.
    pub(super) fn failed(&self, command: &'static str, raw: &[u8], replies: &[u8]) {
        for (request, reply) in resp::each_request(raw).zip(resp::each_reply(replies)) {
            if let Some(error) = reply.strip_prefix(b"-") {
                let line = error.split(|&b| b == b'\r').next().unwrap_or_default();
                self.fail(command, &String::from_utf8_lossy(line));
                self.missed.record_request(self.db, request);
            }
        }
    }

    fn fail(&self, command: &'static str, reason: &str) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        let (tenant, resource) = (&self.missed.tenant, &self.missed.resource);
        tracing::warn!(%tenant, %resource, command, reason, "double-write to a secondary failed");
    }
}
