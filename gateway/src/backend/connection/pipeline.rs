//! A connected socket's work: writing what is queued, matching replies to requests in FIFO order, and the
//! command timeout.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::time::Instant;

use super::handshake::NodeFacts;
use super::outbox::Outbox;
use super::script::{ASKING, RestrictedUsers, busy, calls_function, unwrap_script};
use super::tracking::invalidation;
use super::{KILL_GRACE, Pending, Shared, answered_then, describe, kill_scripts};
use crate::backend::identity::RunAs;
use crate::failure::Failure;
use crate::metrics::BackendMetrics;
use crate::net::Stream;
use crate::reply::ReplyHandle;
use crate::resp::{self, ReplyScanner};
use crate::signal::after_queued_tasks;

/// A request written (or being written) to the node, waiting for its replies.
struct InFlight {
    reply: ReplyHandle,
    /// Replies the node sends for this entry: its requests' and, for a script, the `AUTH`s around it.
    count: u32,
    /// For a script: how many replies come before its own ([`LEAD`]: `AUTH`, before it the `ACL SETUSER` that
    /// creates a namespace's user, and `ASKING` after a cluster's `ASK`), which are the gateway's and not
    /// delivered, like the last one (see `identity`), with [`FUNCTION`] for a function call, [`KILLABLE`] for a
    /// non-admin tenant's script not yet killed and [`KILLED`] once it is; 0 for anything else. One byte: an
    /// entry is moved twice per request.
    wrapped: u8,
    /// When it was written (its backend latency counts from here), in the connection's `Clock`: four bytes, so
    /// that the entry stays small enough to be moved without a call to `memcpy`.
    sent: u32,
    deadline: Instant,
}

/// A connection's clock for its requests' latency: microseconds since it started, on 32 bits (wrapping after 71
/// minutes, which a latency never reaches: the command timeout ends a request long before).
struct Clock(Instant);

impl Clock {
    fn micros(&self, now: Instant) -> u32 {
        let since = now.saturating_duration_since(self.0);
        (since.as_secs() as u32)
            .wrapping_mul(1_000_000)
            .wrapping_add(since.subsec_micros())
    }
}

impl InFlight {
    /// For a script that has become the oldest request, so that the node is about to run it (or runs it): brings
    /// its deadline forward to its limit from now, when that is sooner than the one it was queued with (behind
    /// requests that have been answered since). The timer follows at the top of the loop.
    fn starts(&mut self) {
        if self.wrapped & LEAD != 0 && self.wrapped & KILLED == 0 {
            self.deadline = self
                .deadline
                .min(Instant::now() + self.reply.script_limit());
        }
    }

    /// Answers the requests still unanswered with `error`, after the `answered` complete replies in `replies`.
    /// Returns how many it answered so.
    fn fail(self, replies: &[u8], answered: u32, error: &Bytes, metrics: &BackendMetrics) -> u64 {
        let (reply, failed) = match self.wrapped {
            0 => {
                let unanswered = self.count - answered;
                (answered_then(replies, unanswered, error), unanswered)
            }
            // A script is one request: it gets the error, whatever its `AUTH`s got.
            _ => {
                metrics.scripts.finished();
                (error.clone(), 1)
            }
        };
        self.reply.failed(reply);
        u64::from(failed)
    }
}

/// In [`InFlight::wrapped`]: how many replies come before the script's own.
const LEAD: u8 = 0x03;
/// In [`InFlight::wrapped`]: a non-admin tenant's script, which the gateway kills when it runs past its limit.
const KILLABLE: u8 = 0x80;
/// In [`InFlight::wrapped`]: a script the gateway has tried to kill.
const KILLED: u8 = 0x40;
/// In [`InFlight::wrapped`]: a function call (`FCALL`), whose `BUSY` names `FUNCTION KILL`.
const FUNCTION: u8 = 0x20;

/// Pipelines requests over a connected socket until it fails (`Err(reason)`), or until every handle is gone
/// and nothing is in flight (`Ok`). On failure every request in flight or queued gets the error reply (`timed
/// out after N ms`, `connection lost: ...`).
pub(super) async fn serve(shared: &Shared, stream: Stream, facts: NodeFacts) -> Result<(), String> {
    let mut in_flight: VecDeque<InFlight> = VecDeque::new();
    let mut replies = Replies::default();
    let users = RestrictedUsers::new(facts.sanitizes_payloads);
    let result = pipeline(shared, stream, users, &mut in_flight, &mut replies).await;
    if let Err(reason) = &result {
        let failure = Failure::lost(&shared.node.addr, reason);
        let error = failure.reply();
        // The oldest request may be a run with some of its replies in: those go to the client as they are.
        let mut received = &replies.buf[..replies.scanned];
        let mut failed = 0;
        for request in in_flight.drain(..) {
            failed += request.fail(
                received,
                std::mem::take(&mut replies.answered),
                &error,
                &shared.metrics,
            );
            received = &[];
        }
        failure.count(failed);
        shared.fail_unsent(failure);
    }
    result
}

/// When the connection gives up on the script that is its oldest request: Redis still runs it, and answers
/// whatever comes after it with `BUSY`, so the requests behind it, sent or queued, get that. The script gets the
/// connection's error (`reason`).
fn busy_behind(
    shared: &Shared,
    in_flight: &mut VecDeque<InFlight>,
    replies: &mut Replies,
    reason: &str,
) {
    let Some(script) = in_flight.pop_front() else {
        return;
    };
    let busy = busy(script.wrapped & FUNCTION != 0);
    let failure = Failure::lost(&shared.node.addr, reason);
    failure.count(script.fail(&[], 0, &failure.reply(), &shared.metrics));
    // What was read of the script's replies (its `AUTH`'s) is no one else's.
    replies.buf.clear();
    (replies.scanned, replies.answered) = (0, 0);
    for request in in_flight.drain(..) {
        request.fail(&[], 0, &busy, &shared.metrics);
    }
    shared.fail_queued(&busy);
}

/// The deadline of a script about to be sent behind `in_flight`: its `limit` from when the node may start it at
/// the latest, that is now or when the last script before it is killed. The requests before it get its deadline
/// too (with the time a kill takes, when it is `killable`): Redis sends none of a connection's replies while a
/// script of that connection runs, not even those of requests it read before the script, so their replies may
/// only come once the script ends.
fn script_deadline(
    in_flight: &mut VecDeque<InFlight>,
    now: Instant,
    limit: Duration,
    killable: bool,
) -> Instant {
    let start = in_flight
        .iter()
        .rev()
        .find(|r| r.wrapped & LEAD != 0)
        .map_or(now, |script| script.deadline.max(now));
    let deadline = start + limit;
    let held = match killable {
        true => deadline + KILL_GRACE,
        false => deadline,
    };
    for request in in_flight.iter_mut().filter(|r| r.wrapped & LEAD == 0) {
        request.deadline = request.deadline.max(held);
    }
    deadline
}

/// The soonest deadline among the requests in flight: the oldest request's, or the first script's the gateway
/// watches to kill, when sooner.
fn next_deadline(in_flight: &VecDeque<InFlight>) -> Option<Instant> {
    let oldest = in_flight.front()?.deadline;
    let script = in_flight
        .iter()
        .find(|r| r.wrapped & (KILLABLE | KILLED) != 0)
        .map(|r| r.deadline);
    Some(script.map_or(oldest, |script| script.min(oldest)))
}

/// Replies read from the node and not yet delivered.
struct Replies {
    buf: BytesMut,
    scanner: ReplyScanner,
    /// Complete replies at the front of `buf` for the oldest request in flight (a run waits for all of its own),
    /// their length, and whether one of them is an error reply.
    answered: u32,
    scanned: usize,
    error: bool,
}

impl Default for Replies {
    fn default() -> Replies {
        Replies {
            buf: BytesMut::with_capacity(16 * 1024),
            scanner: ReplyScanner::default(),
            answered: 0,
            scanned: 0,
            error: false,
        }
    }
}

impl Replies {
    /// Delivers every request in flight whose replies are all in, and counts them in the node's metrics.
    fn deliver(
        &mut self,
        in_flight: &mut VecDeque<InFlight>,
        shared: &Shared,
        clock: &Clock,
    ) -> Result<(), String> {
        let node = &shared.node.addr;
        let metrics = &shared.metrics;
        let mut now = None; // read once, for the first request answered
        loop {
            let len = match self.scanner.scan(&self.buf[self.scanned..]) {
                Ok(Some(len)) => len,
                Ok(None) => return Ok(()),
                Err(e) => return Err(format!("protocol error: {e}")),
            };
            let first = self.buf.get(self.scanned);
            // Not a reply: Redis' push to a tracking connection (one well-predicted branch elsewhere). Any other
            // connection takes a push as the reply it stands for, as before.
            if first == Some(&b'>') && shared.tracking.is_some() {
                self.take_push(len, shared);
                continue;
            }
            self.error |= first == Some(&b'-');
            self.scanned += len;
            self.answered += 1;
            let Some(oldest) = in_flight.front() else {
                return Err("protocol error: reply without a request".to_string());
            };
            if self.answered < oldest.count {
                continue;
            }
            let reply = self.buf.split_to(self.scanned).freeze();
            self.scanned = 0;
            self.answered = 0;
            let error = std::mem::take(&mut self.error);
            let Some(request) = in_flight.pop_front() else {
                continue;
            };
            let now = *now.get_or_insert_with(|| clock.micros(Instant::now()));
            let elapsed = u64::from(now.wrapping_sub(request.sent));
            match request.wrapped & LEAD {
                0 => {
                    metrics.latency.observe_us(elapsed, request.count);
                    if error {
                        count_errors(metrics, &reply);
                    }
                    request.reply.deliver_run(reply, error);
                }
                lead => {
                    metrics.scripts.finished();
                    let (reply, switched_back) = unwrap_script(&reply, lead, node);
                    let error = reply.first() == Some(&b'-');
                    metrics.latency.observe_us(elapsed, 1);
                    if error {
                        count_errors(metrics, &reply);
                    }
                    request.reply.deliver_run(reply, error);
                    // Anything after it would run as the script's user: the connection is not the gateway's.
                    switched_back?;
                }
            }
        }
    }
}

impl Replies {
    /// Takes the push of `len` bytes at `scanned` out of a tracking connection's replies, and hands an
    /// invalidation to its sink (any other push is dropped: no request asked for it).
    #[cold]
    #[inline(never)]
    fn take_push(&mut self, len: usize, shared: &Shared) {
        let mut rest = self.buf.split_off(self.scanned);
        let push = rest.split_to(len.min(rest.len()));
        self.buf.unsplit(rest);
        if let (Some(sink), Some(keys)) = (&shared.tracking, invalidation(&push)) {
            sink.invalidated(keys);
        }
    }
}

/// Counts the error replies among `replies` (a run's, or one).
#[cold]
fn count_errors(metrics: &BackendMetrics, replies: &[u8]) {
    let errors = resp::each_reply(replies)
        .filter(|reply| reply.first() == Some(&b'-'))
        .count();
    metrics
        .error_replies
        .fetch_add(errors as u64, std::sync::atomic::Ordering::Relaxed);
}

async fn pipeline(
    shared: &Shared,
    stream: Stream,
    mut restricted_users: RestrictedUsers,
    in_flight: &mut VecDeque<InFlight>,
    replies: &mut Replies,
) -> Result<(), String> {
    let socket = &stream;
    let clock = Clock(Instant::now());
    let mut outbox = Outbox::with_capacity(16 * 1024);
    let timeout = shared.settings.command_timeout;
    let far_future = Instant::now() + Duration::from_secs(86400 * 365);
    let timer = tokio::time::sleep_until(far_future);
    tokio::pin!(timer);
    let mut timer_deadline = far_future;
    // Swapped with the shared queue, so neither is reallocated batch after batch.
    let mut batch: VecDeque<Pending> = VecDeque::new();
    loop {
        // Everything queued since the last write goes out in one write, after the client tasks already woken on
        // this worker have queued theirs: the connection may have been woken among them (by its replies, or by
        // the first of them), and writing at once would split their requests over several writes, each a
        // system call here and a read and a wake-up for the node. A request's deadline starts here: it bounds
        // the write too, however long the node takes to read it.
        if !shared.queue.borrow().is_empty() {
            after_queued_tasks().await;
        }
        std::mem::swap(&mut *shared.queue.borrow_mut(), &mut batch);
        if !batch.is_empty() {
            let now = Instant::now();
            // A request's deadline is the command timeout, and it waits for those before it. A script's is its
            // tenant's limit, from when it may start at the latest (see `script_deadline`).
            let by_timeout = now + timeout;
            let mut deadline = in_flight.back().map_or(now, |last| last.deadline);
            let mut soonest = far_future;
            let write_buf = outbox.buf();
            let sent = clock.micros(now);
            for pending in batch.drain(..) {
                let (count, wrapped) = match pending.reply.run_as() {
                    RunAs::Gateway => {
                        write_buf.extend_from_slice(&pending.raw);
                        deadline = deadline.max(by_timeout);
                        (pending.count, 0)
                    }
                    // A script, between the AUTHs that make it run as its user and back (see `identity`).
                    run_as => {
                        let mut lead = match shared.auth.of(run_as) {
                            Some(auth) => {
                                write_buf.extend_from_slice(auth);
                                1
                            }
                            None => restricted_users.switch(&shared.node, run_as, write_buf),
                        };
                        if pending.reply.asking() {
                            write_buf.extend_from_slice(ASKING);
                            lead += 1;
                        }
                        write_buf.extend_from_slice(&pending.raw);
                        write_buf.extend_from_slice(&shared.auth.gateway);
                        let killable = match run_as.is_tenants() {
                            true => KILLABLE,
                            false => 0,
                        };
                        let function = match calls_function(&pending.raw) {
                            true => FUNCTION,
                            false => 0,
                        };
                        shared.metrics.scripts.started(function != 0);
                        (
                            pending.count + u32::from(lead) + 1,
                            lead | killable | function,
                        )
                    }
                };
                let entry_deadline = match wrapped {
                    0 => deadline,
                    _ => {
                        let limit = pending.reply.script_limit();
                        let own = script_deadline(in_flight, now, limit, wrapped & KILLABLE != 0);
                        // The requests after it wait for it.
                        deadline = deadline.max(own);
                        soonest = soonest.min(own);
                        own
                    }
                };
                in_flight.push_back(InFlight {
                    reply: pending.reply,
                    count,
                    wrapped,
                    deadline: entry_deadline,
                    sent,
                });
            }
            outbox.write(socket)?;
            if soonest < timer_deadline {
                timer.as_mut().reset(soonest);
                timer_deadline = soonest;
            }
        }
        if shared.closed.get() && in_flight.is_empty() && shared.queue.borrow().is_empty() {
            return Ok(());
        }
        // The timer is moved only forward here, and otherwise left alone until it fires: resetting it per batch
        // costs a trip through the timer wheel. It moves forward to the oldest request's deadline when that is
        // sooner (the requests it was armed for were answered, or a script became the oldest: `InFlight::starts`),
        // and to a script's when the script is sent. When it fires it is armed for `next_deadline`.
        if let Some(oldest) = in_flight.front()
            && oldest.deadline < timer_deadline
        {
            timer.as_mut().reset(oldest.deadline);
            timer_deadline = oldest.deadline;
        }
        let read_buf = &mut replies.buf;
        if read_buf.capacity() - read_buf.len() < 4096 {
            read_buf.reserve(read_buf.len().max(16 * 1024));
        }
        tokio::select! {
            biased;
            read = socket.read_buf(read_buf) => {
                match read {
                    Ok(0) => return Err("connection lost: connection closed by the backend".to_string()),
                    Ok(_) => {}
                    Err(e) => return Err(format!("connection lost: {}", describe(&e))),
                }
                replies.deliver(in_flight, shared, &clock)?;
                if let Some(oldest) = in_flight.front_mut() {
                    oldest.starts();
                }
            }
            // Only while the node has not taken everything written to it.
            writable = socket.writable(), if outbox.pending() => {
                writable.map_err(|e| format!("connection lost: {}", describe(&e)))?;
                outbox.write(socket)?;
            }
            () = shared.wake.notified() => {}
            () = &mut timer => {
                let now = Instant::now();
                // A tenant's script that runs past its limit holds the node for every tenant: it is killed, and
                // its reply (Redis' error) gets until the kill is done to come. It may be behind requests whose
                // replies Redis holds while it runs.
                if let Some((position, script)) = in_flight
                    .iter_mut()
                    .enumerate()
                    .find(|(_, r)| r.wrapped & (KILLABLE | KILLED) != 0)
                    && script.deadline <= now
                {
                    if script.wrapped & KILLABLE != 0 {
                        script.wrapped = (script.wrapped & !KILLABLE) | KILLED;
                        script.deadline = now + KILL_GRACE;
                        tracing::warn!(backend = %shared.node.addr, "killing a tenant's script that ran past its limit");
                        tokio::task::spawn_local(kill_scripts(shared.node.clone()));
                    } else if position > 0 {
                        // Killed before it started (a slow request before it kept the node from running it,
                        // and the kill found no script): killed again once it may have run its limit.
                        script.wrapped = (script.wrapped & !KILLED) | KILLABLE;
                        script.deadline = now + script.reply.script_limit();
                    }
                }
                match in_flight.front() {
                    Some(oldest) if oldest.deadline <= now && oldest.wrapped & LEAD != 0 => {
                        let grace = match oldest.wrapped & KILLED {
                            0 => Duration::ZERO,
                            _ => KILL_GRACE,
                        };
                        let waited = oldest.reply.script_limit() + grace;
                        let reason = format!("timed out after {} ms", waited.as_millis());
                        busy_behind(shared, in_flight, replies, &reason);
                        return Err(reason);
                    }
                    Some(oldest) if oldest.deadline <= now => {
                        return Err(format!("timed out after {} ms", timeout.as_millis()));
                    }
                    // What the timer was armed for has its reply, or a script was killed: armed again.
                    _ => {
                        timer_deadline = next_deadline(in_flight).unwrap_or(far_future);
                        timer.as_mut().reset(timer_deadline);
                    }
                }
            }
        }
    }
}
