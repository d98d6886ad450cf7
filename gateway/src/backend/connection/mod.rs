//! One shared, pipelined connection to a backend node.
//!
//! Many client requests ride one connection: senders append to a queue, and the connection's task writes
//! everything queued in one write and matches replies to requests in FIFO order. The task owns the socket; it
//! reconnects with backoff, and while the node is down requests fail at once instead of waiting.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::identity::{self, RunAs};
use crate::backoff::Backoff;
use crate::metrics::BackendMetrics;
use crate::reply::ReplyHandle;
use crate::resp::{self, Protocol, ReplyScanner};
use crate::signal::LocalSignal;

mod handshake;
mod script;

pub(crate) use handshake::connect;
use script::{ASKING, unwrap_script};
pub(super) use script::{KILL_GRACE, kill_scripts};

/// How to reach and set up one backend node.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct NodeSpec {
    /// `host:port`, as shown in errors and metrics.
    pub addr: String,
    pub username: Option<String>,
    pub password: Option<String>,
    pub db: u32,
    /// What the connect handshake checks or sets beyond AUTH and SELECT.
    pub role: NodeRole,
    /// An operator-provisioned user (name, password) that tenants' scripts run as; `None`: the gateway creates
    /// its own users (see `identity`).
    pub script_user: Option<(String, String)>,
    /// What the connection speaks once connected (`HELLO 3` ends the handshake of a RESP3 one).
    pub protocol: Protocol,
}

/// The role a node is used in, as far as the connect handshake is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) enum NodeRole {
    /// Whatever the node is (standalone resources, cluster masters: a cluster redirects misplaced writes).
    #[default]
    Any,
    /// A sentinel-managed master: `ROLE` must say `master`, so that a demoted master that came back as a replica
    /// never gets a write. A node that fails the check is down until it passes it.
    Master,
    /// A cluster replica serving reads: `READONLY` on connect.
    ClusterReplica,
    /// A sentinel process: no database, no ACL users of the gateway's (see `identity`).
    Sentinel,
}

impl NodeSpec {
    /// The same node, spoken to in `protocol` (the gateway's own queries parse RESP2 replies).
    pub(crate) fn speaking(mut self, protocol: Protocol) -> NodeSpec {
        self.protocol = protocol;
        self
    }
}

impl std::fmt::Debug for NodeSpec {
    // Never print the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeSpec")
            .field("addr", &self.addr)
            .field("username", &self.username)
            .field("db", &self.db)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectionSettings {
    pub connect_timeout: Duration,
    /// How long a request may wait for its reply before it fails (and the connection is reset).
    pub command_timeout: Duration,
}

/// The connection's state as senders see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Connecting,
    Up,
    Down,
}

/// A request queued for the next write: `count` requests back to back (a run, see
/// [`BackendConnection::send_run`]), answered by `count` replies delivered as one.
struct Pending {
    raw: Bytes,
    reply: ReplyHandle,
    count: u32,
}

struct InFlight {
    reply: ReplyHandle,
    /// Replies the node sends for this entry: its requests' and, for a script, the `AUTH`s around it.
    count: u32,
    /// For a script: how many replies come before its own (`AUTH`, and `ASKING` after a cluster's `ASK`), which
    /// are the gateway's and not delivered, like the last one (see `identity`), with [`KILLABLE`] for a
    /// non-admin tenant's script not yet killed; 0 for anything else. One byte: an entry is moved twice per
    /// request.
    wrapped: u8,
    deadline: Instant,
}

impl InFlight {
    /// Answers the requests still unanswered with `error`, after the `answered` complete replies in `replies`.
    fn fail(self, replies: &[u8], answered: u32, error: &Bytes) {
        let reply = match self.wrapped {
            0 => answered_then(replies, self.count - answered, error),
            // A script is one request: it gets the error, whatever its `AUTH`s got.
            _ => error.clone(),
        };
        self.reply.failed(reply);
    }
}

/// `replies`, then `error` once for each of `missing` requests: what a run whose connection failed gets.
fn answered_then(replies: &[u8], missing: u32, error: &Bytes) -> Bytes {
    if replies.is_empty() && missing == 1 {
        return error.clone();
    }
    let mut out = BytesMut::with_capacity(replies.len() + error.len() * missing as usize);
    out.extend_from_slice(replies);
    for _ in 0..missing {
        out.extend_from_slice(error);
    }
    out.freeze()
}

struct Shared {
    node: NodeSpec,
    settings: ConnectionSettings,
    queue: RefCell<VecDeque<Pending>>,
    wake: LocalSignal,
    status: Cell<Status>,
    /// Why the node is down, for the error replies sent while it is.
    down_reason: RefCell<String>,
    /// Set when the last handle is gone: the task finishes what is in flight and exits.
    closed: Cell<bool>,
    metrics: Arc<BackendMetrics>,
    /// The `AUTH`s that switch the connection to each user (see `identity`), made once.
    auth: Auths,
}

/// The `AUTH` commands of one node's users.
struct Auths {
    gateway: Bytes,
    tenant_script: Bytes,
    admin_script: Bytes,
}

impl Auths {
    fn new(node: &NodeSpec) -> Auths {
        Auths {
            gateway: identity::auth_command(node, RunAs::Gateway),
            tenant_script: identity::auth_command(node, RunAs::TenantScript),
            admin_script: identity::auth_command(node, RunAs::AdminScript),
        }
    }

    fn of(&self, run_as: RunAs) -> &Bytes {
        match run_as {
            RunAs::Gateway => &self.gateway,
            RunAs::TenantScript => &self.tenant_script,
            RunAs::AdminScript => &self.admin_script,
        }
    }
}

/// A handle to the connection; dropping the last one drains and closes it.
pub(crate) struct BackendConnection {
    shared: Rc<Shared>,
}

impl BackendConnection {
    /// Starts the connection task on the current worker's `LocalSet`.
    pub(crate) fn open(
        node: NodeSpec,
        settings: ConnectionSettings,
        metrics: Arc<BackendMetrics>,
    ) -> BackendConnection {
        let shared = Rc::new(Shared {
            auth: Auths::new(&node),
            node,
            settings,
            queue: RefCell::new(VecDeque::new()),
            wake: LocalSignal::default(),
            status: Cell::new(Status::Connecting),
            down_reason: RefCell::new(String::new()),
            closed: Cell::new(false),
            metrics,
        });
        tokio::task::spawn_local(run(Rc::clone(&shared)));
        BackendConnection { shared }
    }

    pub(crate) fn status(&self) -> Status {
        self.shared.status.get()
    }

    /// Queues a request; its reply (or an error reply) is delivered to `reply` exactly once.
    pub(crate) fn send(&self, raw: Bytes, reply: ReplyHandle) {
        self.send_run(raw, 1, reply);
    }

    /// Queues `count` requests that `raw` holds back to back; their `count` replies (or error replies) are
    /// delivered to `reply` together, exactly once, when the last has arrived.
    pub(crate) fn send_run(&self, raw: Bytes, count: u32, reply: ReplyHandle) {
        if self.shared.status.get() == Status::Down {
            reply.failed(answered_then(&[], count, &self.shared.unavailable()));
            return;
        }
        self.shared
            .queue
            .borrow_mut()
            .push_back(Pending { raw, reply, count });
        self.shared.wake.notify();
    }
}

impl Drop for BackendConnection {
    fn drop(&mut self) {
        self.shared.closed.set(true);
        self.shared.wake.notify();
    }
}

impl Shared {
    fn unavailable(&self) -> Bytes {
        resp::error_reply(&format!(
            "ERR backend {} unavailable: {}",
            self.node.addr,
            self.down_reason.borrow()
        ))
    }

    fn fail_queued(&self, reply: &Bytes) {
        let queued: Vec<Pending> = self.queue.borrow_mut().drain(..).collect();
        for pending in queued {
            pending
                .reply
                .failed(answered_then(&[], pending.count, reply));
        }
    }
}

/// A short, lowercase reason for an I/O failure, as it appears in error replies.
pub(super) fn describe(error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::ConnectionRefused => "connection refused".to_string(),
        io::ErrorKind::ConnectionReset => "connection reset".to_string(),
        io::ErrorKind::UnexpectedEof => "connection closed by the backend".to_string(),
        io::ErrorKind::TimedOut => "timed out".to_string(),
        _ => error.to_string(),
    }
}

async fn run(shared: Rc<Shared>) {
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
    loop {
        shared.status.set(Status::Connecting);
        let reason = match tokio::time::timeout(
            shared.settings.connect_timeout,
            connect(&shared.node),
        )
        .await
        {
            Ok(Ok(stream)) => {
                shared.status.set(Status::Up);
                backoff.reset();
                tracing::debug!(backend = %shared.node.addr, "connected");
                shared
                    .metrics
                    .connections_up
                    .fetch_add(1, Ordering::Relaxed);
                let served = serve(&shared, stream).await;
                shared
                    .metrics
                    .connections_up
                    .fetch_sub(1, Ordering::Relaxed);
                match served {
                    Ok(()) => return, // closed and drained
                    Err(reason) => reason,
                }
            }
            Ok(Err(e)) => describe(&e),
            Err(_) => "connect timed out".to_string(),
        };
        tracing::warn!(backend = %shared.node.addr, %reason, "backend connection down");
        shared.metrics.failures.fetch_add(1, Ordering::Relaxed);
        *shared.down_reason.borrow_mut() = reason;
        shared.status.set(Status::Down);
        shared.fail_queued(&shared.unavailable());
        if shared.closed.get() {
            return;
        }
        tokio::time::sleep(backoff.next()).await;
        if shared.closed.get() {
            return;
        }
    }
}

/// In [`InFlight::wrapped`]: a non-admin tenant's script, which the gateway kills when it runs too long.
const KILLABLE: u8 = 0x80;

/// Pipelines requests over a connected socket until it fails (`Err(reason)`), or until every handle is gone
/// and nothing is in flight (`Ok`). On failure every request in flight gets an error reply.
async fn serve(shared: &Shared, stream: TcpStream) -> Result<(), String> {
    let mut in_flight: VecDeque<InFlight> = VecDeque::new();
    let mut replies = Replies::default();
    let result = pipeline(shared, stream, &mut in_flight, &mut replies).await;
    if let Err(reason) = &result {
        let error = resp::error_reply(&format!("ERR backend {} {reason}", shared.node.addr));
        // The oldest request may be a run with some of its replies in: those go to the client as they are.
        let mut received = &replies.buf[..replies.scanned];
        for request in in_flight.drain(..) {
            request.fail(received, std::mem::take(&mut replies.answered), &error);
            received = &[];
        }
    }
    result
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
    /// Delivers every request in flight whose replies are all in.
    fn deliver(&mut self, in_flight: &mut VecDeque<InFlight>, node: &str) -> Result<(), String> {
        loop {
            let len = match self.scanner.scan(&self.buf[self.scanned..]) {
                Ok(Some(len)) => len,
                Ok(None) => return Ok(()),
                Err(e) => return Err(format!("protocol error: {e}")),
            };
            self.error |= self.buf.get(self.scanned) == Some(&b'-');
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
            match request.wrapped & !KILLABLE {
                0 => request.reply.deliver_run(reply, error),
                lead => {
                    let (reply, switched_back) = unwrap_script(&reply, lead, node);
                    let error = reply.first() == Some(&b'-');
                    request.reply.deliver_run(reply, error);
                    // Anything after it would run as the script's user: the connection is not the gateway's.
                    switched_back?;
                }
            }
        }
    }
}

async fn pipeline(
    shared: &Shared,
    mut stream: TcpStream,
    in_flight: &mut VecDeque<InFlight>,
    replies: &mut Replies,
) -> Result<(), String> {
    let (mut reader, mut writer) = stream.split();
    let mut write_buf = BytesMut::with_capacity(16 * 1024);
    let timeout = shared.settings.command_timeout;
    let far_future = Instant::now() + Duration::from_secs(86400 * 365);
    let timer = tokio::time::sleep_until(far_future);
    tokio::pin!(timer);
    let mut timer_deadline = far_future;
    // Set while the timer waits for a killed script's reply, whose deadline is later than the requests' after it.
    let mut killing = false;
    // Swapped with the shared queue, so neither is reallocated batch after batch.
    let mut batch: VecDeque<Pending> = VecDeque::new();
    loop {
        // Everything queued since the last write goes out in one write.
        std::mem::swap(&mut *shared.queue.borrow_mut(), &mut batch);
        if !batch.is_empty() {
            let deadline = Instant::now() + timeout;
            for pending in batch.drain(..) {
                let (count, wrapped) = match pending.reply.run_as() {
                    RunAs::Gateway => {
                        write_buf.extend_from_slice(&pending.raw);
                        (pending.count, 0)
                    }
                    // A script, between the AUTHs that make it run as its user and back (see `identity`).
                    run_as => {
                        write_buf.extend_from_slice(shared.auth.of(run_as));
                        let lead = if pending.reply.asking() {
                            write_buf.extend_from_slice(ASKING);
                            2
                        } else {
                            1
                        };
                        write_buf.extend_from_slice(&pending.raw);
                        write_buf.extend_from_slice(&shared.auth.gateway);
                        let killable = match run_as {
                            RunAs::TenantScript => KILLABLE,
                            _ => 0,
                        };
                        (pending.count + u32::from(lead) + 1, lead | killable)
                    }
                };
                in_flight.push_back(InFlight {
                    reply: pending.reply,
                    count,
                    wrapped,
                    deadline,
                });
            }
            writer
                .write_all(&write_buf)
                .await
                .map_err(|e| format!("connection lost: {}", describe(&e)))?;
            write_buf.clear();
        }
        if shared.closed.get() && in_flight.is_empty() && shared.queue.borrow().is_empty() {
            return Ok(());
        }
        // The timer is armed for the oldest request when the connection has none armed, and otherwise left
        // alone until it fires: resetting it per batch costs a trip through the timer wheel. Deadlines only grow
        // along the queue, so an armed timer never fires later than the oldest request's deadline.
        if timer_deadline == far_future
            && let Some(oldest) = in_flight.front()
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
            read = reader.read_buf(read_buf) => {
                match read {
                    Ok(0) => return Err("connection lost: connection closed by the backend".to_string()),
                    Ok(_) => {}
                    Err(e) => return Err(format!("connection lost: {}", describe(&e))),
                }
                replies.deliver(in_flight, &shared.node.addr)?;
                if killing && in_flight.front().is_none_or(|r| r.deadline < timer_deadline) {
                    // The killed script answered: the timer goes back to the oldest request's deadline.
                    killing = false;
                    timer_deadline = in_flight.front().map_or(far_future, |r| r.deadline);
                    timer.as_mut().reset(timer_deadline);
                }
            }
            () = shared.wake.notified() => {}
            () = &mut timer => {
                match in_flight.front_mut() {
                    // A tenant's script that runs too long holds the node for every tenant: it is killed, and
                    // its reply (Redis' error) gets until the kill is done to come.
                    Some(oldest) if oldest.deadline <= timer_deadline && oldest.wrapped & KILLABLE != 0 => {
                        oldest.wrapped &= !KILLABLE;
                        oldest.deadline = Instant::now() + KILL_GRACE;
                        killing = true;
                        timer_deadline = oldest.deadline;
                        timer.as_mut().reset(timer_deadline);
                        tracing::warn!(backend = %shared.node.addr, "killing a tenant's script that ran past the command timeout");
                        tokio::task::spawn_local(kill_scripts(shared.node.clone()));
                    }
                    Some(oldest) if oldest.deadline <= timer_deadline => {
                        return Err(format!("timed out after {} ms", timeout.as_millis()));
                    }
                    // The request the timer was armed for has its reply; re-arm for the oldest one left.
                    oldest => {
                        timer_deadline = oldest.map_or(far_future, |r| r.deadline);
                        timer.as_mut().reset(timer_deadline);
                    }
                }
            }
        }
    }
}
