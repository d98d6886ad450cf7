//! One shared, pipelined connection to a backend node.
//!
//! Many client requests ride one connection: senders append to a queue, and the connection's task writes
//! everything queued in one write and matches replies to requests in FIFO order. The task owns the socket; it
//! reconnects with backoff, and while the node is down (from a failure until a reconnect's handshake passes)
//! requests fail at once instead of waiting. A panic in the task is caught: see `restart`.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use super::OnPanic;
use super::identity::{self, RunAs, ScriptUser};
use super::node::NodeSpec;
use crate::backoff::Backoff;
use crate::failure::Failure;
use crate::metrics::BackendMetrics;
use crate::reply::ReplyHandle;
use crate::signal::LocalSignal;

mod handshake;
mod outbox;
mod pipeline;
mod script;
mod tracking;

pub(crate) use handshake::{connect, open};
pub(super) use outbox::Outbox;
use pipeline::serve;
pub(crate) use script::kill_on;
pub(super) use script::{KILL_GRACE, kill_scripts};
use tracking::connect_tracking;
pub(crate) use tracking::{TrackingSink, Tracks};

#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectionSettings {
    pub connect_timeout: Duration,
    /// How long a request may wait for its reply before it fails (and the connection is reset).
    pub command_timeout: Duration,
}

/// The connection's state as senders see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// The connection's very first connect: requests wait for it.
    Connecting,
    Up,
    /// Failed, and not connected again since (a reconnect's handshake must pass first): requests fail at once.
    Down,
}

/// A request queued for the next write: `count` requests back to back (a run, see
/// [`BackendConnection::send_run`]), answered by `count` replies delivered as one.
struct Pending {
    raw: Bytes,
    reply: ReplyHandle,
    count: u32,
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
    /// Set for a connection that tracks keys (see `tracking`): where Redis' invalidations go.
    tracking: Option<Rc<dyn TrackingSink>>,
    /// What such a connection tracks.
    tracks: Tracks,
}

/// The `AUTH` commands of one node's users (a namespace's are made per socket: see `script::RestrictedUsers`).
struct Auths {
    gateway: Bytes,
    tenant_script: Bytes,
    admin_script: Bytes,
}

impl Auths {
    fn new(node: &NodeSpec) -> Auths {
        Auths {
            gateway: identity::auth_command(node, &RunAs::Gateway),
            tenant_script: identity::auth_command(node, &RunAs::script(ScriptUser::Tenant)),
            admin_script: identity::auth_command(node, &RunAs::script(ScriptUser::Admin)),
        }
    }

    /// The `AUTH` that switches to `run_as`, unless it is a namespace's user.
    fn of(&self, run_as: &RunAs) -> Option<&Bytes> {
        match run_as.script_user() {
            None => Some(&self.gateway),
            Some(ScriptUser::Tenant) => Some(&self.tenant_script),
            Some(ScriptUser::Admin) => Some(&self.admin_script),
            Some(ScriptUser::Restricted(_)) => None,
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
        Self::start(Shared::new(node, settings, metrics))
    }

    /// Starts a connection that tracks keys as `tracks` says (`CLIENT TRACKING on`, over RESP3, whatever
    /// `node` says): Redis' invalidations, and the connection's ups and downs, go to `sink`.
    pub(crate) fn open_tracking(
        node: NodeSpec,
        settings: ConnectionSettings,
        metrics: Arc<BackendMetrics>,
        sink: Rc<dyn TrackingSink>,
        tracks: Tracks,
    ) -> BackendConnection {
        let node = node.speaking(crate::resp::Protocol::Resp3);
        let mut shared = Shared::new(node, settings, metrics);
        shared.tracking = Some(sink);
        shared.tracks = tracks;
        Self::start(shared)
    }

    fn start(shared: Shared) -> BackendConnection {
        let shared = Rc::new(shared);
        tokio::task::spawn_local(run(Rc::clone(&shared), Duration::ZERO));
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
            let failure = self.shared.unavailable();
            failure.count(u64::from(count));
            reply.failed(answered_then(&[], count, &failure.reply()));
            return;
        }
        if let Some(refusal) = identity::refusal(&self.shared.node, reply.run_as()) {
            return reply.failed(refusal);
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
    fn new(node: NodeSpec, settings: ConnectionSettings, metrics: Arc<BackendMetrics>) -> Shared {
        Shared {
            auth: Auths::new(&node),
            node,
            settings,
            queue: RefCell::new(VecDeque::new()),
            wake: LocalSignal::default(),
            status: Cell::new(Status::Connecting),
            down_reason: RefCell::new(String::new()),
            closed: Cell::new(false),
            metrics,
            tracking: None,
            tracks: Tracks::Reads,
        }
    }

    /// A tracking connection's sink is told the connection is down (nothing it read is tracked any more).
    fn tracking_lost(&self) {
        if let Some(sink) = &self.tracking {
            sink.lost();
        }
    }

    fn unavailable(&self) -> Failure {
        Failure::unavailable(&self.node.addr, self.down_reason.borrow())
    }

    /// Fails every queued request with `failure`: none of them was sent, so nothing of them ran.
    fn fail_unsent(&self, failure: Failure) {
        let failure = failure.sent(false);
        failure.count(self.fail_queued(&failure.reply()));
    }

    /// Answers every queued request with `reply`; returns how many there were.
    fn fail_queued(&self, reply: &Bytes) -> u64 {
        let queued: Vec<Pending> = self.queue.borrow_mut().drain(..).collect();
        let mut requests = 0;
        for pending in queued {
            requests += u64::from(pending.count);
            pending
                .reply
                .failed(answered_then(&[], pending.count, reply));
        }
        requests
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

/// How long a connection whose task panicked waits before its new task connects: a panic that comes back at
/// once (say, in the handshake) does not spin.
const RESTART_DELAY: Duration = Duration::from_secs(1);

/// Connects, serves, and after a failure reconnects with backoff, until the last handle is gone. A node that
/// failed (timed out, lost, refused) is down until a reconnect's handshake, which always ends with a round trip,
/// passes: meanwhile requests fail at once instead of each waiting its timeout on a node that accepts
/// connections but answers nothing. Only the connection's very first connect keeps requests waiting
/// (`Connecting`). `delay`: a pause before the first attempt.
async fn run(shared: Rc<Shared>, delay: Duration) {
    let _restart = OnPanic(|| restart(&shared));
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
    loop {
        let connected = async {
            match shared.tracking {
                None => connect(&shared.node).await,
                Some(_) => connect_tracking(&shared.node, &shared.tracks).await,
            }
        };
        let reason = match tokio::time::timeout(shared.settings.connect_timeout, connected).await {
            Ok(Ok((stream, facts))) => {
                facts.note(&shared.metrics);
                shared.status.set(Status::Up);
                if let Some(sink) = &shared.tracking {
                    sink.up();
                }
                backoff.reset();
                tracing::debug!(backend = %shared.node.addr, "connected");
                shared
                    .metrics
                    .connections_up
                    .fetch_add(1, Ordering::Relaxed);
                let served = serve(&shared, stream, facts).await;
                // Before the count goes down, so that `restart` never counts it down twice.
                shared.status.set(Status::Down);
                shared.tracking_lost();
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
        shared.metrics.failed(&reason);
        *shared.down_reason.borrow_mut() = reason;
        shared.status.set(Status::Down);
        shared.tracking_lost();
        shared.fail_unsent(shared.unavailable());
        if shared.closed.get() {
            return;
        }
        tokio::time::sleep(backoff.next()).await;
        if shared.closed.get() {
            return;
        }
    }
}

/// After a panic in the connection's task, as tokio drops the task's future: the connection is down, what is
/// queued gets the error, and a new task takes over unless the last handle is gone. The requests in flight went
/// with the old task's state (their handles answer for themselves).
fn restart(shared: &Rc<Shared>) {
    tracing::error!(backend = %shared.node.addr, "backend connection task panicked; starting a new one");
    shared.metrics.failed("internal error");
    if shared.status.replace(Status::Down) == Status::Up {
        shared
            .metrics
            .connections_up
            .fetch_sub(1, Ordering::Relaxed);
    }
    if let Ok(mut reason) = shared.down_reason.try_borrow_mut() {
        *reason = "internal error".to_string();
    }
    shared.tracking_lost();
    shared.fail_unsent(shared.unavailable());
    if !shared.closed.get() {
        tokio::task::spawn_local(run(Rc::clone(shared), RESTART_DELAY));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::reply::ReplyQueue;

    /// A panic inside the guarded scope of a connection's task (as `run` guards itself): the connection is down
    /// at once, the queued request gets the error, and a new task connects (after `RESTART_DELAY`) and serves.
    #[tokio::test]
    async fn a_panicking_task_is_replaced_and_what_it_left_queued_is_answered() {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
                let addr = listener.local_addr().unwrap().to_string();
                let node = NodeSpec::bare_sentinel(addr.clone());
                let settings = ConnectionSettings {
                    connect_timeout: Duration::from_secs(1),
                    command_timeout: Duration::from_secs(1),
                };
                let shared = Rc::new(Shared::new(node, settings, Arc::default()));
                let connection = BackendConnection {
                    shared: Rc::clone(&shared),
                };
                let queue = Rc::new(ReplyQueue::default());
                connection.send(
                    Bytes::from_static(b"*1\r\n$4\r\nPING\r\n"),
                    queue.reserve(Instant::now()),
                );
                let task = tokio::task::spawn_local(async move {
                    let _restart = OnPanic(|| restart(&shared));
                    panic!("a bug in the connection's task");
                });
                assert!(task.await.unwrap_err().is_panic());
                assert_eq!(connection.status(), Status::Down);
                let mut answered = BytesMut::new();
                queue.drain_ready(&mut answered, |_| {});
                assert_eq!(
                    answered,
                    format!("-ERR backend {addr} unavailable: internal error\r\n").as_bytes()
                );

                let (mut node, _) = listener.accept().await.unwrap();
                let mut handshake = BytesMut::new();
                while !handshake.ends_with(b"PING\r\n") {
                    assert!(node.read_buf(&mut handshake).await.unwrap() > 0);
                }
                node.write_all(b"+PONG\r\n").await.unwrap();
                let up = async {
                    while connection.status() != Status::Up {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                };
                tokio::time::timeout(Duration::from_secs(5), up)
                    .await
                    .expect("the new task connects");
            })
            .await;
    }
}
