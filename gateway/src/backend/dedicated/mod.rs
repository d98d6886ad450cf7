//! Dedicated backend connections: one client's own connection to one node, for what cannot ride the shared,
//! pipelined connections: blocking commands, transactions (WATCH ... EXEC) and subscriptions.
//!
//! A dedicated connection runs the shared connections' connect handshake (AUTH, SELECT, ROLE for sentinel
//! masters) and belongs to one session. Dropping the [`Dedicated`] handle closes the socket at once, even while a
//! command is blocked on it, so the node forgets the client as soon as the client leaves. Replies are matched to
//! requests in FIFO order as on a shared connection; a blocking command's reply gets no deadline (the client's own
//! timeout is the node's business, and 0 means forever), every other request's the command timeout, and writing
//! any request has the command timeout too: a node that stops reading fails the connection. A subscribed client's
//! connection has [`Pushes`]: the pub/sub messages the node sends between replies go to the client's reply queue
//! as messages (see `ReplyQueue::push_message`), and every frame is renamed on the way.
//!
//! Every connection holds a place in its tenant's budget of dedicated connections (`--max-dedicated-connections`)
//! and one in its node's, shared by tenants (see `budget`).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use super::ClusterBackend;
use super::NodeSpec;
use super::OnPanic;
use super::budget::NodeLease;
use super::cluster::{ClusterError, MAX_REDIRECTS, classify, not_a_member};
use super::connection::{ConnectionSettings, KILL_GRACE, Outbox, describe, kill_scripts};
use super::spares::Spares;
use crate::failure::Failure;
use crate::net::Stream;
use crate::reply::{ReplyHandle, ReplyQueue};
use crate::resp::{self, ReplyScanner};
use crate::signal::LocalSignal;
use crate::tenant::Lease;

/// Messages a subscriber may have waiting in its reply queue before the gateway stops reading from the node
/// (which then applies its own `client-output-buffer-limit pubsub` to the slow subscriber).
const MAX_PUSH_BACKLOG: usize = 64 * 1024;

/// A blocking command's client as the connection sees it: told once the node has the whole command, and dropped
/// when the reply comes or the connection goes (which is how its client stops counting as blocked).
pub(crate) trait Blocked {
    /// The command has been written to its node in full.
    fn reached(&mut self);
}

/// How long a request may wait for its reply.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Wait {
    /// The command timeout.
    Bounded,
    /// A transaction holding a script: its tenant's script limit. Past it a non-admin tenant's script
    /// (`kill`) is killed (see `connection::kill_scripts`), and its reply gets `KILL_GRACE` to come.
    Script { limit: Duration, kill: bool },
    /// As long as the node takes: a blocking command.
    Unbounded,
}

struct Outgoing {
    raw: Bytes,
    /// One handle per reply the request produces, in order.
    replies: Vec<ReplyHandle>,
    wait: Wait,
    /// A blocking command's client, shown blocked once the node has the command.
    blocked: Option<Box<dyn Blocked>>,
}

struct InFlight {
    reply: ReplyHandle,
    deadline: Option<Instant>,
    /// How long it was given, for the error once that has passed.
    timeout: Duration,
    /// Holds a tenant's script not killed yet (see [`Wait::Script`]).
    killable: bool,
    /// A blocking command's bytes, kept so that a cluster redirect can be followed (see [`Redirected`]).
    resend: Option<Bytes>,
    /// A blocking command's client, unblocked when the reply comes or the connection goes.
    blocked: Option<Box<dyn Blocked>>,
}

/// A blocking command that a cluster node answered with `-MOVED` or `-ASK` (its slot moved since the gateway's
/// slot map was read): the connection moves to the named node and sends it again there, so the client blocks
/// where the key now lives instead of seeing the redirect. Only when nothing else is in flight on the connection,
/// and only to a member of the connection's cluster (a redirect is text in a reply: see `cluster::members`).
struct Redirected {
    addr: String,
    /// The reply, as the node sent it.
    error: Bytes,
    asking: bool,
    raw: Bytes,
    reply: ReplyHandle,
    blocked: Option<Box<dyn Blocked>>,
}

struct Inner {
    node: NodeSpec,
    /// The cluster of a cluster route's node: a redirect is followed only to a member of it (none on other
    /// routes: a redirect from a node that is not in a cluster is passed on as it came).
    cluster: Option<Weak<ClusterBackend>>,
    queue: RefCell<VecDeque<Outgoing>>,
    wake: LocalSignal,
    closed: Cell<bool>,
    /// Set once the connection failed: a subscriber whose messages stopped coming is told by being disconnected.
    failed: Cell<bool>,
    /// Where pub/sub messages go (subscribed clients only).
    pushes: Option<Pushes>,
    /// Replies sent for but not received yet.
    pending: Cell<usize>,
    /// Whether the connection has served only blocking commands (no transaction, no subscription): once every
    /// reply has come it holds no state, and it goes back to the spares when released.
    reusable: Cell<bool>,
    spares: Rc<Spares>,
}

/// Where a subscribed connection's messages go: the client's reply queue. Every frame, message or reply, is
/// renamed on the way (the channel names of a tenant's namespace, see `tenancy::Channels`); a message renamed
/// to nothing (another tenant's key event) is dropped.
pub(crate) struct Pushes {
    pub queue: Rc<ReplyQueue>,
    pub rename: Option<Box<dyn Fn(Bytes) -> Bytes>>,
}

/// A session's own connection to one node.
pub(crate) struct Dedicated {
    inner: Rc<Inner>,
    /// Its places in the tenant's budget and in the node's.
    _leases: (Lease, NodeLease),
}

impl Dedicated {
    /// Starts connecting to `node` on the current worker (or takes one of its spares); requests sent meanwhile
    /// wait for the handshake.
    pub(crate) fn open(
        (node, cluster): (NodeSpec, Option<Weak<ClusterBackend>>),
        settings: ConnectionSettings,
        spares: Rc<Spares>,
        leases: (Lease, NodeLease),
        pushes: Option<Pushes>,
    ) -> Dedicated {
        let inner = Rc::new(Inner {
            node: node.clone(),
            cluster,
            queue: RefCell::new(VecDeque::new()),
            wake: LocalSignal::default(),
            closed: Cell::new(false),
            failed: Cell::new(false),
            reusable: Cell::new(pushes.is_none()),
            pushes,
            pending: Cell::new(0),
            spares,
        });
        tokio::task::spawn_local(run(Rc::clone(&inner), node, settings));
        Dedicated {
            inner,
            _leases: leases,
        }
    }

    /// The node's `host:port`.
    pub(crate) fn addr(&self) -> &str {
        &self.inner.node.addr
    }

    /// The node, as the connection logged in to it.
    pub(crate) fn node(&self) -> &NodeSpec {
        &self.inner.node
    }

    /// Sends a request whose replies, one per handle and in order, go to `replies`.
    pub(crate) fn send(&self, raw: Bytes, replies: Vec<ReplyHandle>, wait: Wait) {
        self.inner.reusable.set(false);
        self.enqueue(Outgoing {
            raw,
            replies,
            wait,
            blocked: None,
        });
    }

    /// Sends a blocking command: no deadline for its reply, and its client shows as blocked once the node has it.
    pub(crate) fn send_blocking(&self, raw: Bytes, reply: ReplyHandle, blocked: Box<dyn Blocked>) {
        self.enqueue(Outgoing {
            raw,
            replies: vec![reply],
            wait: Wait::Unbounded,
            blocked: Some(blocked),
        });
    }

    fn enqueue(&self, outgoing: Outgoing) {
        if self.inner.failed.get() {
            let failure = self.inner.unavailable("connection lost");
            failure.count(outgoing.replies.len() as u64);
            return self.inner.deliver_all(outgoing.replies, &failure.reply());
        }
        self.inner
            .pending
            .set(self.inner.pending.get() + outgoing.replies.len());
        self.inner.queue.borrow_mut().push_back(outgoing);
        self.inner.wake.notify();
    }

    /// Replies sent for but not received yet.
    pub(crate) fn pending(&self) -> usize {
        self.inner.pending.get()
    }

    /// Whether the connection failed (its requests got error replies).
    pub(crate) fn failed(&self) -> bool {
        self.inner.failed.get()
    }
}

impl Drop for Dedicated {
    fn drop(&mut self) {
        self.inner.closed.set(true);
        self.inner.wake.notify();
    }
}

impl Inner {
    fn unavailable(&self, reason: &str) -> Failure {
        Failure::unavailable(&self.node.addr, reason)
    }

    /// Fails everything sent and queued, and everything sent later.
    fn fail(&self, reason: &str, in_flight: &mut VecDeque<InFlight>) {
        let released = self.closed.get();
        if !released {
            tracing::warn!(backend = %self.node.addr, %reason, "dedicated backend connection lost");
        }
        self.failed.set(true);
        let failure = self.unavailable(reason);
        let error = failure.reply();
        let queued: Vec<Outgoing> = self.queue.borrow_mut().drain(..).collect();
        // The same words for all, but those in flight may have run.
        let sent = in_flight.len() as u64;
        let replies: Vec<ReplyHandle> = in_flight
            .drain(..)
            .map(|f| f.reply)
            .chain(queued.into_iter().flat_map(|o| o.replies))
            .collect();
        let unsent = replies.len() as u64 - sent;
        failure.clone().sent(true).count(sent);
        failure.count(unsent);
        self.pending.set(0);
        match &self.pushes {
            // A subscriber is told even when it waits for no reply (and its session, woken, sees the failure).
            Some(pushes) if !released && replies.is_empty() => pushes.queue.push_message(error),
            _ => self.deliver_all(replies, &error),
        }
    }

    fn deliver_all(&self, replies: Vec<ReplyHandle>, reply: &Bytes) {
        for handle in replies {
            handle.deliver(reply.clone());
        }
    }

    /// A frame as the client knows it.
    fn renamed(&self, frame: Bytes) -> Bytes {
        match self.pushes.as_ref().and_then(|p| p.rename.as_ref()) {
            Some(rename) => rename(frame),
            None => frame,
        }
    }
}

async fn run(inner: Rc<Inner>, mut node: NodeSpec, settings: ConnectionSettings) {
    // A panic in this task fails the connection as a lost one would: the session sees it failed, and what it
    // queued is answered (what was in flight goes with the task's state).
    let _failed = OnPanic(|| inner.fail("internal error", &mut VecDeque::new()));
    let mut in_flight = VecDeque::new();
    let mut redirects = 0;
    loop {
        let stream = tokio::select! {
            connected = inner.spares.connect(&node) => match connected {
                Ok(stream) => stream,
                Err(e) => return inner.fail(&describe(&e), &mut in_flight),
            },
            () = closed(&inner) => return,
        };
        tracing::debug!(backend = %node.addr, "dedicated connection up");
        let redirected = match serve(&inner, stream, settings.command_timeout, &mut in_flight).await
        {
            Ok(Ended::Released(idle)) => {
                if let Some(stream) = idle {
                    inner.spares.give_back(&node, stream);
                }
                return inner.fail("connection closed", &mut in_flight);
            }
            Ok(Ended::Redirected(redirected)) => redirected,
            Err(reason) => return inner.fail(&reason, &mut in_flight),
        };
        let member = match inner.cluster.as_ref().and_then(Weak::upgrade) {
            Some(cluster) => cluster.confirms_member(&redirected.addr).await,
            None => false,
        };
        if !member {
            // Not the cluster's word: the client gets the reply (refused, if it names a stranger), and the
            // connection goes on with the node it was on.
            let reply = match inner.cluster {
                Some(_) => not_a_member(&redirected.addr, &redirected.error),
                None => redirected.error,
            };
            redirected.reply.deliver(reply);
            continue;
        }
        redirects += 1;
        if redirects > MAX_REDIRECTS {
            let reply = resp::error_reply(&format!(
                "ERR too many cluster redirects (last: to {})",
                redirected.addr
            ));
            redirected.reply.deliver(reply);
            return inner.fail("too many cluster redirects", &mut in_flight);
        }
        tracing::debug!(from = %node.addr, to = %redirected.addr, "dedicated connection follows a cluster redirect");
        node.addr = redirected.addr;
        let mut replies = vec![redirected.reply];
        let raw = if redirected.asking {
            let mut raw = BytesMut::new();
            crate::resp::command(&mut raw, &[&b"ASKING"[..]]);
            raw.extend_from_slice(&redirected.raw);
            replies.insert(0, ReplyHandle::discard());
            raw.freeze()
        } else {
            redirected.raw
        };
        inner.pending.set(inner.pending.get() + replies.len());
        inner.queue.borrow_mut().push_front(Outgoing {
            raw,
            replies,
            wait: Wait::Unbounded,
            blocked: redirected.blocked,
        });
    }
}

/// Resolves once the handle is dropped.
async fn closed(inner: &Inner) {
    while !inner.closed.get() {
        inner.wake.notified().await;
    }
}

/// Whether a frame is a pub/sub message (`message`, `pmessage`, `smessage`, as a RESP2 array or a RESP3 push)
/// rather than a reply.
fn is_message(frame: &[u8]) -> bool {
    let Some((kind, rest)) = frame.split_first() else {
        return false;
    };
    matches!(kind, b'*' | b'>')
        && (rest.starts_with(b"3\r\n$7\r\nmessage\r\n")
            || rest.starts_with(b"4\r\n$8\r\npmessage\r\n")
            || rest.starts_with(b"3\r\n$8\r\nsmessage\r\n"))
}

/// Why [`serve`] ended, short of a failure.
enum Ended {
    /// The handle was dropped; the connection comes back if it may serve again (see `Inner::reusable`).
    Released(Option<Stream>),
    /// A blocking command must follow a cluster redirect.
    Redirected(Redirected),
}

/// Writes requests and matches replies until the handle is dropped, a blocking command must follow a cluster
/// redirect, or the connection fails.
async fn serve(
    inner: &Inner,
    stream: Stream,
    timeout: Duration,
    in_flight: &mut VecDeque<InFlight>,
) -> Result<Ended, String> {
    let socket = &stream;
    let mut read_buf = BytesMut::with_capacity(4096);
    let mut outbox = Outbox::with_capacity(0);
    // When the oldest bytes the node has not taken yet must be written by: a blocking command's reply has no
    // deadline, but writing it has.
    let mut write_deadline: Option<Instant> = None;
    let mut scanner = ReplyScanner::default();
    loop {
        if inner.closed.get() {
            let idle = inner.reusable.get()
                && in_flight.is_empty()
                && read_buf.is_empty()
                && !outbox.pending()
                && inner.queue.borrow().is_empty();
            return Ok(Ended::Released(idle.then_some(stream)));
        }
        let batch: Vec<Outgoing> = inner.queue.borrow_mut().drain(..).collect();
        if !batch.is_empty() {
            let now = Instant::now();
            write_deadline.get_or_insert(now + timeout);
            for outgoing in batch {
                outbox.buf().extend_from_slice(&outgoing.raw);
                let (waits, killable) = match outgoing.wait {
                    Wait::Bounded => (Some(timeout), false),
                    Wait::Script { limit, kill } => (Some(limit), kill),
                    Wait::Unbounded => (None, false),
                };
                let deadline = waits.map(|waits| now + waits);
                let resend = (outgoing.wait == Wait::Unbounded && outgoing.replies.len() == 1)
                    .then(|| outgoing.raw.clone());
                let mut blocked = outgoing.blocked;
                // A blocking command has one reply; the guard goes with the last.
                let last = outgoing.replies.len().saturating_sub(1);
                in_flight.extend(outgoing.replies.into_iter().enumerate().map(|(i, reply)| {
                    InFlight {
                        reply,
                        deadline,
                        timeout: waits.unwrap_or(timeout),
                        killable,
                        resend: resend.clone(),
                        blocked: if i == last { blocked.take() } else { None },
                    }
                }));
            }
            outbox.write(socket)?;
            reached(&outbox, in_flight);
        }
        if !outbox.pending() {
            write_deadline = None;
        }
        let deadline = in_flight
            .iter()
            .filter_map(|f| f.deadline)
            .chain(write_deadline)
            .min();
        let backlogged = inner
            .pushes
            .as_ref()
            .is_some_and(|p| p.queue.messages() > MAX_PUSH_BACKLOG);
        if read_buf.capacity() - read_buf.len() < 1024 {
            read_buf.reserve(read_buf.len().max(4096));
        }
        tokio::select! {
            read = socket.read_buf(&mut read_buf), if !backlogged => {
                match read {
                    Ok(0) => return Err("connection closed by the backend".to_string()),
                    Ok(_) => {}
                    Err(e) => return Err(format!("connection lost: {}", describe(&e))),
                }
                while let Some(len) = scanner.scan(&read_buf).map_err(|e| format!("protocol error: {e}"))? {
                    let mut frame = read_buf.split_to(len).freeze();
                    if let Some(pushes) = &inner.pushes {
                        frame = inner.renamed(frame);
                        if frame.is_empty() {
                            continue;
                        }
                        if is_message(&frame) {
                            pushes.queue.push_message(frame);
                            continue;
                        }
                    }
                    let Some(request) = in_flight.pop_front() else {
                        return Err("protocol error: reply without a request".to_string());
                    };
                    inner.pending.set(inner.pending.get().saturating_sub(1));
                    let redirectable = request.resend.is_some()
                        && in_flight.is_empty()
                        && frame.first() == Some(&b'-');
                    let redirect = match redirectable.then(|| classify(&frame)) {
                        Some(ClusterError::Moved { addr, .. }) => Some((addr.to_string(), false)),
                        Some(ClusterError::Ask { addr }) => Some((addr.to_string(), true)),
                        _ => None,
                    };
                    match (redirect, request.resend) {
                        (Some((addr, asking)), Some(raw)) => {
                            let (reply, blocked, error) = (request.reply, request.blocked, frame);
                            let redirected = Redirected { addr, error, asking, raw, reply, blocked };
                            return Ok(Ended::Redirected(redirected));
                        }
                        _ => request.reply.deliver(frame),
                    }
                }
            }
            // Only while the subscriber's queue is too long: until the client has been written some of it.
            () = drained(inner), if backlogged => {}
            // Only while the node has not taken everything written to it.
            writable = socket.writable(), if outbox.pending() => {
                writable.map_err(|e| format!("connection lost: {}", describe(&e)))?;
                outbox.write(socket)?;
                reached(&outbox, in_flight);
            }
            () = inner.wake.notified() => {}
            () = sleep_until(deadline) => {
                let now = Instant::now();
                if write_deadline.is_some_and(|at| at <= now) {
                    return Err(format!("timed out after {} ms", timeout.as_millis()));
                }
                let mut killing = false;
                for request in in_flight.iter_mut().filter(|r| r.killable) {
                    request.killable = false;
                    request.deadline = Some(now + KILL_GRACE);
                    killing = true;
                }
                if !killing {
                    let expired = in_flight.iter().find(|r| r.deadline.is_some_and(|at| at <= now));
                    let waited = expired.map_or(timeout, |r| r.timeout);
                    return Err(format!("timed out after {} ms", waited.as_millis()));
                }
                tracing::warn!(backend = %inner.node.addr, "killing a tenant's script that ran past its limit");
                tokio::task::spawn_local(kill_scripts(inner.node.clone()));
            }
        }
    }
}

/// Once the node has taken every byte written to it, the blocking commands among them count as blocked.
fn reached(outbox: &Outbox, in_flight: &mut VecDeque<InFlight>) {
    if !outbox.pending() {
        for blocked in in_flight.iter_mut().filter_map(|f| f.blocked.as_mut()) {
            blocked.reached();
        }
    }
}

/// Resolves once some of a subscriber's messages have been written to it.
async fn drained(inner: &Inner) {
    match &inner.pushes {
        Some(pushes) => pushes.queue.wait_drained().await,
        None => std::future::pending().await,
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
