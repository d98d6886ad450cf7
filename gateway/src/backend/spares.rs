//! Spare dedicated connections, one worker's: connected and through the handshake before a client needs one, so
//! that a blocking command, a transaction or a subscription starts at once instead of after a connect and a
//! handshake (three round trips or more), and reaches its node before what other clients send after it.
//!
//! Per node (its address, credentials, database and protocol: one [`NodeSpec`]) a worker keeps up to `per_node`
//! spares. A node gets them once a dedicated connection to it has been asked for, and each spare taken is
//! replaced in the background. A blocking command's connection comes back once its reply has come, as it holds
//! no state then (see [`Spares::give_back`]); up to twice `per_node` are kept, so that a client that blocks again
//! and again takes back its own connection instead of making the node's spares be replaced each time. A spare unused for [`IDLE`] is closed, and one that the node closed
//! meanwhile (its `timeout`, a restart) is never handed out. Spares are the gateway's, not a tenant's: they do not
//! count toward a tenant's `--max-dedicated-connections` until taken.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;

use super::NodeSpec;
use super::connection::{self, describe};
use crate::metrics::Metrics;
use crate::net::Stream;

/// How long a spare may wait unused before it is closed.
pub(crate) const IDLE: Duration = Duration::from_secs(30);

struct Spare {
    stream: Stream,
    since: Instant,
}

pub(crate) struct Spares {
    per_node: usize,
    connect_timeout: Duration,
    idle: RefCell<HashMap<NodeSpec, Vec<Spare>>>,
    /// Spares being connected, per node (they count toward `per_node`).
    connecting: RefCell<HashMap<NodeSpec, usize>>,
    /// Whether the task that closes unused spares runs.
    sweeping: Cell<bool>,
    /// Where what a handshake learns of a node is kept.
    metrics: Arc<Metrics>,
}

impl Spares {
    pub(crate) fn new(per_node: usize, connect_timeout: Duration, metrics: Arc<Metrics>) -> Spares {
        Spares {
            per_node,
            connect_timeout,
            idle: RefCell::default(),
            connecting: RefCell::default(),
            sweeping: Cell::new(false),
            metrics,
        }
    }

    /// A connection to `node` through its handshake: a spare if one is ready, else a new one. Either way the
    /// node's spares are made up in the background.
    pub(crate) async fn connect(self: &Rc<Self>, node: &NodeSpec) -> io::Result<Stream> {
        let spare = self.take(node);
        self.refill(node);
        match spare {
            Some(stream) => Ok(stream),
            None => tokio::time::timeout(self.connect_timeout, self.handshake(node))
                .await
                .unwrap_or_else(|_| {
                    Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))
                }),
        }
    }

    /// Connects with the handshake, and notes what it learned of the node.
    async fn handshake(&self, node: &NodeSpec) -> io::Result<Stream> {
        let (stream, facts) = connection::connect(node).await?;
        facts.note(&self.metrics.backend(&node.addr));
        Ok(stream)
    }

    /// Keeps a connection that served only blocking commands, every reply received, as a spare of `node` (while
    /// the node has fewer than twice `per_node`).
    pub(crate) fn give_back(self: &Rc<Self>, node: &NodeSpec, stream: Stream) {
        if self.idle.borrow().get(node).map_or(0, Vec::len) < 2 * self.per_node {
            self.put(node, stream);
        }
    }

    /// The newest spare of `node` that is still open; older and closed ones are dropped on the way.
    fn take(&self, node: &NodeSpec) -> Option<Stream> {
        let mut idle = self.idle.borrow_mut();
        let spares = idle.get_mut(node)?;
        let now = Instant::now();
        let mut found = None;
        while let Some(spare) = spares.pop() {
            if now.duration_since(spare.since) < IDLE && is_open(&spare.stream) {
                found = Some(spare.stream);
                break;
            }
        }
        if spares.is_empty() {
            idle.remove(node);
        }
        found
    }

    /// How many more spares `node` should have.
    fn wanted(&self, node: &NodeSpec) -> usize {
        let idle = self.idle.borrow().get(node).map_or(0, Vec::len);
        let connecting = self.connecting.borrow().get(node).copied().unwrap_or(0);
        self.per_node.saturating_sub(idle + connecting)
    }

    fn refill(self: &Rc<Self>, node: &NodeSpec) {
        for _ in 0..self.wanted(node) {
            *self
                .connecting
                .borrow_mut()
                .entry(node.clone())
                .or_default() += 1;
            let (spares, node) = (Rc::clone(self), node.clone());
            tokio::task::spawn_local(async move {
                let connected =
                    tokio::time::timeout(spares.connect_timeout, spares.handshake(&node)).await;
                let mut connecting = spares.connecting.borrow_mut();
                if let Some(count) = connecting.get_mut(&node) {
                    *count -= 1;
                    if *count == 0 {
                        connecting.remove(&node);
                    }
                }
                drop(connecting);
                match connected {
                    Ok(Ok(stream)) => spares.put(&node, stream),
                    Ok(Err(e)) => {
                        tracing::debug!(backend = %node.addr, "no spare connection: {}", describe(&e))
                    }
                    Err(_) => {
                        tracing::debug!(backend = %node.addr, "no spare connection: connect timed out")
                    }
                }
            });
        }
    }

    fn put(self: &Rc<Self>, node: &NodeSpec, stream: Stream) {
        let since = Instant::now();
        self.idle
            .borrow_mut()
            .entry(node.clone())
            .or_default()
            .push(Spare { stream, since });
        if !self.sweeping.replace(true) {
            tokio::task::spawn_local(Rc::clone(self).sweep());
        }
    }

    /// Closes spares unused for [`IDLE`], until there are none left.
    async fn sweep(self: Rc<Self>) {
        loop {
            tokio::time::sleep(IDLE / 2).await;
            let now = Instant::now();
            let mut idle = self.idle.borrow_mut();
            idle.retain(|_, spares| {
                spares.retain(|spare| now.duration_since(spare.since) < IDLE);
                !spares.is_empty()
            });
            if idle.is_empty() {
                self.sweeping.set(false);
                return;
            }
        }
    }
}

/// Whether the node has neither closed the connection nor sent anything on it (a spare has no request out, so
/// anything readable means it is unusable; what TLS says on its own, a session ticket, is not data).
fn is_open(stream: &Stream) -> bool {
    let mut scratch = BytesMut::new();
    matches!(stream.try_read_buf(&mut scratch), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}
