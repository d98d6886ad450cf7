//! Backend resources and their connections.
//!
//! Each worker thread owns its backend connections (no cross-thread hand-off on the data path); the
//! [`BackendPool`] of a worker hands out one shared [`Backend`] per node, created on first use and closed when no
//! route of the current snapshot refers to it any more.

mod connection;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::{Rc, Weak};
use std::sync::Arc;

use bytes::Bytes;

pub use connection::{BackendConnection, ConnectionSettings, NodeSpec, Status};

use crate::metrics::Metrics;
use crate::reply::ReplyHandle;

/// A backend node as one worker sees it: a few pipelined connections. Each client sticks to one of them, so
/// that its commands reach the node in the order it sent them.
pub struct Backend {
    connections: Vec<BackendConnection>,
}

impl Backend {
    fn open(
        node: &NodeSpec,
        settings: ConnectionSettings,
        count: usize,
        metrics: &Metrics,
    ) -> Backend {
        let metrics = metrics.backend(&node.addr);
        Backend {
            connections: (0..count.max(1))
                .map(|_| BackendConnection::open(node.clone(), settings, Arc::clone(&metrics)))
                .collect(),
        }
    }

    /// Sends on the connection `affinity` picks (a client id: the same client always gets the same one).
    pub fn send(&self, raw: Bytes, reply: ReplyHandle, affinity: usize) {
        let connection = &self.connections[affinity % self.connections.len()];
        connection.send(raw, reply);
    }

    /// Whether the node is usable: not every connection is down.
    pub fn is_healthy(&self) -> bool {
        self.connections.iter().any(|c| c.status() != Status::Down)
    }

    /// How many of this node's connections are up.
    pub fn connections_up(&self) -> usize {
        self.connections
            .iter()
            .filter(|c| c.status() == Status::Up)
            .count()
    }
}

/// One worker's backends, by node.
pub struct BackendPool {
    settings: ConnectionSettings,
    connections_per_node: usize,
    metrics: Arc<Metrics>,
    nodes: RefCell<HashMap<NodeSpec, Weak<Backend>>>,
}

impl BackendPool {
    pub fn new(
        settings: ConnectionSettings,
        connections_per_node: usize,
        metrics: Arc<Metrics>,
    ) -> BackendPool {
        BackendPool {
            settings,
            connections_per_node,
            metrics,
            nodes: RefCell::new(HashMap::new()),
        }
    }

    /// The shared backend for `node`, opening it if no one holds it.
    pub fn get(&self, node: &NodeSpec) -> Rc<Backend> {
        let mut nodes = self.nodes.borrow_mut();
        if let Some(backend) = nodes.get(node).and_then(Weak::upgrade) {
            return backend;
        }
        nodes.retain(|_, backend| backend.strong_count() > 0);
        let backend = Rc::new(Backend::open(
            node,
            self.settings,
            self.connections_per_node,
            &self.metrics,
        ));
        nodes.insert(node.clone(), Rc::downgrade(&backend));
        backend
    }

    /// (address, connections up, connections) for every node in use.
    pub fn states(&self) -> Vec<(String, usize, usize)> {
        self.nodes
            .borrow()
            .iter()
            .filter_map(|(node, backend)| {
                let backend = backend.upgrade()?;
                Some((
                    node.addr.clone(),
                    backend.connections_up(),
                    backend.connections.len(),
                ))
            })
            .collect()
    }
}
