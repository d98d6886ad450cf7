//! A sentinel-managed master (and its replicas) as one upstream.
//!
//! What the sentinels say of the master and its replicas is the process's: one view per sentinel set (sentinels,
//! master name, sentinel credentials), kept by one watcher task ([`watch`]) and shared by every worker, whatever
//! the database, protocol or read mode its clients use. Each worker follows the view with a small task of its own
//! that moves the worker's traffic (its own node connections) when the view changes, and tells the watcher when it
//! finds the master's connections down. The `redis-sentinel://` and `redis-sentinel-slaves://` resources of one
//! set share a worker's backend: an [`Upstream::Sentinel`](super::Upstream) carries the read mode, the backend the
//! worker's side of the view.
//!
//! The master's connections check `ROLE` on every (re)connect ([`NodeRole::Master`]): a node that reports
//! `slave`, such as an old master restarted and turned into a replica before the gateway heard of the switch,
//! never gets a write; its requests fail fast until the watcher moves traffic away.

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};
use std::sync::Arc;

use bytes::Bytes;
use switchyard_schemas::ReplicaMode;
use tokio::sync::watch::Receiver;

use super::{Backend, BackendPool, NodeRole, NodeSpec};
use crate::reply::ReplyHandle;
use crate::resp::{self, Protocol};
use crate::signal::LocalSignal;
use crate::tls::BackendTls;

mod watch;

pub(crate) use watch::SentinelTopology;
use watch::{LOOKUP_PERIOD_UNHEALTHY, MasterView, SentinelView};

/// Requests held while the first lookup is under way (a route's first clients); beyond this they fail.
const MAX_WAITING: usize = 16 * 1024;

/// How to reach a sentinel-managed master: a sentinel set.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct SentinelSpec {
    /// `host:port` of each sentinel.
    pub sentinels: Vec<String>,
    pub master_name: String,
    pub sentinel_username: Option<String>,
    pub sentinel_password: Option<String>,
    /// Credentials and database of the data nodes.
    pub username: Option<String>,
    pub password: Option<String>,
    /// An operator-provisioned script user (see `NodeSpec::script_user`).
    pub script_user: Option<(String, String)>,
    pub protocol: Protocol,
    pub db: u32,
    /// TLS to the data nodes (`rediss-sentinel`).
    pub tls: Option<Arc<BackendTls>>,
    /// TLS to the sentinels (`sentinelSSL=true`).
    pub sentinel_tls: Option<Arc<BackendTls>>,
}

impl std::fmt::Debug for SentinelSpec {
    // Never print a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelSpec")
            .field("sentinels", &self.sentinels)
            .field("master_name", &self.master_name)
            .field("db", &self.db)
            .finish_non_exhaustive()
    }
}

impl SentinelSpec {
    /// What identifies the set's view: the sentinels and the master's name, not how clients use the data nodes.
    pub(super) fn topology_key(&self) -> SentinelSpec {
        SentinelSpec {
            username: None,
            password: None,
            script_user: None,
            protocol: Protocol::Resp2,
            db: 0,
            tls: None,
            ..self.clone()
        }
    }

    /// The master at `addr`, in this resource's database, reached as its user (for the repair of double-write
    /// secondaries).
    pub(crate) fn master_node(&self, addr: &str) -> NodeSpec {
        self.data_node(addr, NodeRole::Master)
    }

    fn data_node(&self, addr: &str, role: NodeRole) -> NodeSpec {
        NodeSpec {
            addr: addr.to_string(),
            username: self.username.clone(),
            password: self.password.clone(),
            db: self.db,
            role,
            script_user: self.script_user.clone(),
            protocol: self.protocol,
            tls: self.tls.clone(),
        }
    }

    fn sentinel_node(&self, addr: &str) -> NodeSpec {
        NodeSpec {
            addr: addr.to_string(),
            username: self.sentinel_username.clone(),
            password: self.sentinel_password.clone(),
            db: 0,
            role: NodeRole::Sentinel,
            script_user: None,
            protocol: Protocol::Resp2,
            tls: self.sentinel_tls.clone(),
        }
    }
}

/// One worker's view of a sentinel-managed master.
pub(crate) struct SentinelBackend {
    spec: SentinelSpec,
    pool: Rc<BackendPool>,
    master: RefCell<Master>,
    /// Healthy-looking replicas, for `-slaves` resources.
    replicas: RefCell<Vec<Rc<Backend>>>,
    /// Set once a `-slaves` resource uses this set: only then are replicas looked up and connected to.
    replicas_wanted: Cell<bool>,
    next_read: Cell<usize>,
    /// The process's view of the set.
    topology: Arc<SentinelTopology>,
    /// Ends the task that follows the view, when the backend is dropped.
    closed: Rc<LocalSignal>,
}

enum Master {
    /// Before the first answer: requests wait for it.
    Unknown(Vec<(Bytes, ReplyHandle, usize)>),
    Known {
        addr: String,
        backend: Rc<Backend>,
    },
    /// No sentinel could name the master: requests fail with this error until one does.
    Failed(Bytes),
}

impl SentinelBackend {
    /// Opens the resource on the current worker, following the process's view of the set (whose watcher starts
    /// when this is the first worker to open the set): what is known already serves at once.
    pub(super) fn open(
        spec: SentinelSpec,
        pool: &Rc<BackendPool>,
        topology: Arc<SentinelTopology>,
    ) -> Rc<SentinelBackend> {
        let view = topology.subscribe();
        let closed = Rc::new(LocalSignal::default());
        let backend = Rc::new(SentinelBackend {
            spec,
            pool: Rc::clone(pool),
            master: RefCell::new(Master::Unknown(Vec::new())),
            replicas: RefCell::new(Vec::new()),
            replicas_wanted: Cell::new(false),
            next_read: Cell::new(0),
            topology,
            closed: Rc::clone(&closed),
        });
        backend.apply(&backend.topology.current());
        tokio::task::spawn_local(follow(Rc::downgrade(&backend), view, closed));
        backend
    }

    /// Starts looking up replicas (for a `-slaves` resource of this set).
    pub(super) fn want_replicas(&self) {
        if !self.replicas_wanted.replace(true) {
            self.topology.want_replicas();
            if let Some(replicas) = &self.topology.current().replicas {
                self.set_replicas(replicas);
            }
        }
    }

    /// Tells the watcher when every connection of this worker to the master is down: it looks up at once.
    fn check_master(&self) {
        if matches!(&*self.master.borrow(), Master::Known { backend, .. } if !backend.is_healthy())
        {
            self.topology.master_is_down();
        }
    }

    /// Moves this worker's traffic to what the view says.
    fn apply(&self, view: &SentinelView) {
        match &view.master {
            MasterView::Known(addr) => self.set_master(addr),
            MasterView::Failed(reason) => self.set_failed(reason),
            MasterView::Unknown => {}
        }
        if let Some(replicas) = view
            .replicas
            .as_ref()
            .filter(|_| self.replicas_wanted.get())
        {
            self.set_replicas(replicas);
        }
    }

    /// Sends to the master, or with `reads` (a `-slaves` resource) to a replica.
    pub(crate) fn send(
        &self,
        raw: Bytes,
        reply: ReplyHandle,
        affinity: usize,
        reads: Option<ReplicaMode>,
    ) {
        if let Some(mode) = reads
            && let Some(read) = self.pick_read(mode)
        {
            return read.send(raw, reply, affinity);
        }
        let backend = match &mut *self.master.borrow_mut() {
            Master::Known { backend, .. } => Rc::clone(backend),
            Master::Unknown(waiting) if waiting.len() < MAX_WAITING => {
                return waiting.push((raw, reply, affinity));
            }
            Master::Unknown(_) => {
                return reply.deliver(resp::error_reply(&format!(
                    "ERR sentinel master {} not known yet",
                    self.spec.master_name
                )));
            }
            Master::Failed(error) => return reply.deliver(error.clone()),
        };
        backend.send(raw, reply, affinity);
    }

    /// The current master's backend, once a sentinel has named it.
    pub(crate) fn known_master(&self) -> Option<Rc<Backend>> {
        match &*self.master.borrow() {
            Master::Known { backend, .. } => Some(Rc::clone(backend)),
            _ => None,
        }
    }

    pub(crate) fn is_healthy(&self) -> bool {
        match &*self.master.borrow() {
            Master::Known { backend, .. } => backend.is_healthy(),
            _ => false,
        }
    }

    /// The current master, for the commands that will need a dedicated connection to it (blocking commands,
    /// transactions, subscriptions); `None` until a sentinel has named it.
    pub(crate) fn master(&self) -> Option<NodeSpec> {
        match &*self.master.borrow() {
            Master::Known { addr, .. } => Some(self.spec.data_node(addr, NodeRole::Master)),
            _ => None,
        }
    }

    pub(crate) fn master_name(&self) -> &str {
        &self.spec.master_name
    }

    /// Round robin over the healthy replicas (and the master with `withMaster=true`); `None` sends to the master.
    fn pick_read(&self, mode: ReplicaMode) -> Option<Rc<Backend>> {
        let replicas = self.replicas.borrow();
        let master = match &*self.master.borrow() {
            Master::Known { backend, .. } if mode.with_master => Some(Rc::clone(backend)),
            _ => None,
        };
        let count = replicas.len() + usize::from(master.is_some());
        let start = self.next_read.get();
        self.next_read.set(start.wrapping_add(1));
        (0..count)
            .filter_map(|i| replicas.get((start + i) % count).or(master.as_ref()))
            .find(|b| b.is_healthy())
            .cloned()
    }

    /// Moves traffic to the master at `addr` (and releases requests that waited for the first answer).
    fn set_master(&self, addr: &str) {
        if matches!(&*self.master.borrow(), Master::Known { addr: current, .. } if current == addr)
        {
            return;
        }
        let backend = self.pool.get(&self.spec.data_node(addr, NodeRole::Master));
        let previous = std::mem::replace(
            &mut *self.master.borrow_mut(),
            Master::Known {
                addr: addr.to_string(),
                backend: Rc::clone(&backend),
            },
        );
        if let Master::Unknown(waiting) = previous {
            for (raw, reply, affinity) in waiting {
                backend.send(raw, reply, affinity);
            }
        }
    }

    /// No sentinel answered: waiting requests (and later ones, until a sentinel answers) get `reason`.
    fn set_failed(&self, reason: &str) {
        let mut master = self.master.borrow_mut();
        if matches!(&*master, Master::Known { .. }) {
            return; // keep serving the last known master
        }
        let error = resp::error_reply(&format!(
            "ERR sentinel master {} unknown: {reason}",
            self.spec.master_name
        ));
        let previous = std::mem::replace(&mut *master, Master::Failed(error.clone()));
        drop(master);
        if let Master::Unknown(waiting) = previous {
            for (_, reply, _) in waiting {
                reply.deliver(error.clone());
            }
        }
    }

    fn set_replicas(&self, replicas: &[String]) {
        *self.replicas.borrow_mut() = replicas
            .iter()
            .map(|addr| self.pool.get(&self.spec.data_node(addr, NodeRole::Any)))
            .collect();
    }
}

impl Drop for SentinelBackend {
    fn drop(&mut self) {
        self.closed.notify();
    }
}

/// Follows the process's view of the set on one worker until the backend is dropped: applies each change, and
/// checks the master's connections as often as the watcher looks up an unhealthy master.
async fn follow(
    backend: Weak<SentinelBackend>,
    mut view: Receiver<SentinelView>,
    closed: Rc<LocalSignal>,
) {
    loop {
        let current = view.borrow_and_update().clone();
        match backend.upgrade() {
            Some(backend) => backend.apply(&current),
            None => return,
        }
        loop {
            tokio::select! {
                changed = view.changed() => match changed {
                    Ok(()) => break,
                    Err(_) => return,
                },
                () = tokio::time::sleep(LOOKUP_PERIOD_UNHEALTHY) => match backend.upgrade() {
                    Some(backend) => backend.check_master(),
                    None => return,
                },
                () = closed.notified() => return,
            }
        }
    }
}
