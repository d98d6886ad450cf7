//! Client-side caching for the gateway's own clients (`CLIENT TRACKING`, docs/near-cache.md "Client-side
//! caching through the gateway").
//!
//! A client's reads ride backend connections shared with other clients, where Redis cannot track them for that
//! client: the gateway tracks them itself. Each worker keeps, per tenant with a client that tracks, a
//! [`TenantWatch`]: one connection of its own to every node the tenant's reads go to, in broadcasting mode
//! (`CLIENT TRACKING on BCAST PREFIX <the tenant's key namespace>`, or every key without one), which Redis tells
//! of every change there. Each change is handed to the tenant's [`Tracker`]s (one per tracking client), which
//! tell their client as Redis would have: the keys it read since it was last told of them (default mode; a read
//! counts from when it is sent), the keys under its prefixes (`BCAST`), the reads `CLIENT CACHING` selected
//! (`OPTIN`, `OPTOUT`); with the tenant's namespace taken off, and never a key outside it.
//!
//! What keeps a client's cache from going stale:
//! - a push goes after the replies of every command the client had sent when the change came
//!   (`ReplyQueue::push_after_sent`), so "invalidate k" never comes before a reply that may hold k's old value;
//! - a watch that is lost (killed, a failed node, a timed-out heartbeat) tells every tracking client of the
//!   tenant to drop everything (a null invalidation), and so does a change of the nodes watched (a sentinel
//!   set's new master, a cluster's new masters, a new route for the tenant);
//! - a read sent while a watch was not up is followed by a null invalidation once every watch is up, or within
//!   a second while one stays down.

mod options;
mod tracker;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

pub(crate) use options::{Info, Switch, caching, parse};
pub(crate) use tracker::Tracker;

use crate::backend::{BackendConnection, BackendPool, NodeSpec, TrackingSink, Upstream};
use crate::clients::{ClientInfo, Clients, Mailbox};
use crate::reply::{ReplyHandle, ReplyQueue};
use crate::resp::Protocol;
use crate::route::{PerCompiledTenant, Tenant};

/// A worker's tracking: a watch per tenant with tracking clients, and the clients an invalidation may be
/// redirected to.
pub(crate) struct ClientTracking {
    pool: Rc<BackendPool>,
    tenants: PerCompiledTenant<TenantWatch>,
    ports: Rc<Ports>,
    /// What other workers redirect to this worker's clients, until `redirected` takes it.
    inbox: RefCell<Option<mpsc::UnboundedReceiver<(u64, Bytes)>>>,
}

/// The clients a tracking client may redirect its invalidations to: those of its worker, by id, and those of the
/// other workers, through the gateway's registry of clients and their workers' inboxes.
pub(crate) struct Ports {
    here: RefCell<HashMap<u64, Port>>,
    clients: Arc<Clients>,
    mailbox: Mailbox,
}

struct Port {
    queue: Weak<ReplyQueue>,
    info: Arc<ClientInfo>,
}

/// Where an invalidation redirected to a client goes.
pub(crate) enum Target {
    /// Its replies, on this worker.
    Here(Rc<ReplyQueue>),
    /// Its worker's inbox.
    Elsewhere(Mailbox),
}

impl Target {
    /// Gives client `id` the invalidation `message`, as a pub/sub message.
    pub(crate) fn send(&self, id: u64, message: Bytes) {
        match self {
            Target::Here(queue) => queue.push_message(message),
            // A worker that is gone takes nothing: its clients went with it.
            Target::Elsewhere(mailbox) => drop(mailbox.send((id, message))),
        }
    }
}

impl Ports {
    /// The client `id` of `tenant`, on any worker: where its invalidations go, and what it is.
    fn get(&self, id: u64, tenant: &str) -> Option<(Target, Arc<ClientInfo>)> {
        let (target, info) = match self.here.borrow().get(&id) {
            Some(port) => (Target::Here(port.queue.upgrade()?), Arc::clone(&port.info)),
            None => {
                let info = self.clients.get(id)?;
                (Target::Elsewhere(info.mailbox.clone()), info)
            }
        };
        (info.tenant().as_deref() == Some(tenant)).then_some((target, info))
    }
}

impl ClientTracking {
    pub(crate) fn new(pool: Rc<BackendPool>, clients: Arc<Clients>) -> ClientTracking {
        let (mailbox, inbox) = mpsc::unbounded_channel();
        ClientTracking {
            pool,
            tenants: PerCompiledTenant::default(),
            ports: Rc::new(Ports {
                here: RefCell::default(),
                clients,
                mailbox,
            }),
            inbox: RefCell::new(Some(inbox)),
        }
    }

    /// The inbox of this worker, for its clients' [`ClientInfo`].
    pub(crate) fn mailbox(&self) -> Mailbox {
        self.ports.mailbox.clone()
    }

    /// The worker's task that hands the invalidations other workers redirect to its clients to them; `None`
    /// once taken.
    pub(crate) fn redirected(&self) -> Option<impl Future<Output = ()> + 'static> {
        let mut inbox = self.inbox.borrow_mut().take()?;
        let ports = Rc::clone(&self.ports);
        Some(async move {
            while let Some((id, message)) = inbox.recv().await {
                let queue = ports.here.borrow().get(&id).and_then(|p| p.queue.upgrade());
                // A client gone since is told nothing, as on its own worker.
                if let Some(queue) = queue {
                    queue.push_message(message);
                }
            }
        })
    }

    /// A client of this worker, which tracking clients may redirect their invalidations to.
    pub(crate) fn open_port(&self, info: &Arc<ClientInfo>, queue: &Rc<ReplyQueue>) {
        let port = Port {
            queue: Rc::downgrade(queue),
            info: Arc::clone(info),
        };
        self.ports.here.borrow_mut().insert(info.id, port);
    }

    /// The client `id` is gone.
    pub(crate) fn close_port(&self, id: u64) {
        self.ports.here.borrow_mut().remove(&id);
    }

    /// Whether `id` is a client of `tenant` on any worker (what `REDIRECT` may name).
    pub(crate) fn has_client(&self, id: u64, tenant: &str) -> bool {
        self.ports.get(id, tenant).is_some()
    }

    /// `tenant`'s watch on this worker, as its snapshot has it (a tenant compiled anew gets a new one).
    pub(crate) fn for_tenant(&self, tenant: &Arc<Tenant>) -> Rc<TenantWatch> {
        self.tenants.get_or_make(tenant, || {
            let prefix = tenant
                .namespace()
                .map(|namespace| Bytes::copy_from_slice(namespace.prefix()))
                .unwrap_or_default();
            Rc::new_cyclic(|me| TenantWatch {
                me: me.clone(),
                name: tenant.name.clone(),
                prefix,
                pool: Rc::clone(&self.pool),
                ports: Rc::clone(&self.ports),
                upstreams: RefCell::new(Vec::new()),
                watches: RefCell::new(Vec::new()),
                trackers: RefCell::new(Vec::new()),
                waiting: RefCell::new(Vec::new()),
                beating: Cell::new(false),
            })
        })
    }

    /// Forgets the watches of tenants `current` no longer has as they were; their connections close once no
    /// tracking client holds them.
    pub(crate) fn retain(&self, current: impl Fn(&str) -> Option<*const Tenant>) {
        self.tenants.retain(current);
    }
}

/// One tenant's watch on one worker: its broadcasting connections, and its tracking clients.
pub(crate) struct TenantWatch {
    me: Weak<TenantWatch>,
    name: String,
    /// The tenant's key namespace as stored (empty without one).
    prefix: Bytes,
    pool: Rc<BackendPool>,
    ports: Rc<Ports>,
    /// The resources the tenant's tracking clients read from: their nodes are watched.
    upstreams: RefCell<Vec<Upstream>>,
    watches: RefCell<Vec<Watch>>,
    trackers: RefCell<Vec<Weak<Tracker>>>,
    /// Replies to `CLIENT TRACKING on`, given once every watch has connected (or failed to).
    waiting: RefCell<Vec<ReplyHandle>>,
    /// The heartbeat task runs.
    beating: Cell<bool>,
}

/// A broadcasting connection to one node.
struct Watch {
    node: NodeSpec,
    sink: Rc<WatchSink>,
    connection: BackendConnection,
}

/// What a watch's connection tells (its `TrackingSink`).
struct WatchSink {
    watch: Weak<TenantWatch>,
    up: Cell<bool>,
    /// It connected, or failed to, at least once.
    tried: Cell<bool>,
}

impl TrackingSink for WatchSink {
    fn up(&self) {
        self.up.set(true);
        self.tried.set(true);
        if let Some(watch) = self.watch.upgrade() {
            watch.came_up();
        }
    }

    fn invalidated(&self, keys: Option<Vec<Bytes>>) {
        if let Some(watch) = self.watch.upgrade() {
            watch.invalidated(keys.as_deref());
        }
    }

    /// Told once per loss (the connection reports a failure more than once, and each failed reconnect): reads
    /// sent while it is down are covered by `came_up`.
    fn lost(&self) {
        let was_up = self.up.replace(false);
        let first = !self.tried.replace(true);
        if let Some(watch) = self.watch.upgrade() {
            if was_up || first {
                watch.invalidated(None);
            }
            watch.answer_waiting();
        }
    }
}

/// How often a watch's connections are sent `PING` (a silent node fails at the command timeout after it), the
/// nodes of the tenant's resources looked at again (a sentinel set's new master, a cluster's new masters), and
/// the clients that read while a watch was down told to drop everything.
const HEARTBEAT: Duration = Duration::from_secs(1);

async fn heartbeat(watch: Weak<TenantWatch>) {
    let mut ticker = tokio::time::interval(HEARTBEAT);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let Some(watch) = watch.upgrade() else {
            return;
        };
        if watch.live_trackers().is_empty() {
            watch.beating.set(false);
            watch.watches.borrow_mut().clear();
            watch.upstreams.borrow_mut().clear();
            return;
        }
        watch.refresh();
        // A watch that stays down (a node that refuses it): what was read meanwhile is dropped every beat.
        if !watch.all_up() {
            for tracker in watch.live_trackers() {
                tracker.watched();
            }
        }
        for w in watch.watches.borrow().iter().filter(|w| w.sink.up.get()) {
            let ping = Bytes::from_static(b"*1\r\n$4\r\nPING\r\n");
            w.connection.send(ping, ReplyHandle::discard());
        }
    }
}

fn same_upstream(a: &Upstream, b: &Upstream) -> bool {
    match (a, b) {
        (Upstream::Node(a), Upstream::Node(b)) => Rc::ptr_eq(a, b),
        (Upstream::Cluster(a), Upstream::Cluster(b)) => Rc::ptr_eq(a, b),
        (Upstream::Sentinel(a, _), Upstream::Sentinel(b, _)) => Rc::ptr_eq(a, b),
        _ => false,
    }
}

impl TenantWatch {
    /// `tracker` tracks here, reading from `upstreams`; `reply` (the `+OK` of its `CLIENT TRACKING on`) is
    /// given once every watch has connected or failed to.
    pub(crate) fn join(
        &self,
        tracker: &Rc<Tracker>,
        upstreams: &[Upstream],
        reply: Option<ReplyHandle>,
    ) {
        {
            let mut trackers = self.trackers.borrow_mut();
            trackers.retain(|t| t.strong_count() > 0);
            if !trackers.iter().any(|t| t.as_ptr() == Rc::as_ptr(tracker)) {
                trackers.push(Rc::downgrade(tracker));
            }
            let mut known = self.upstreams.borrow_mut();
            for upstream in upstreams {
                if !known.iter().any(|k| same_upstream(k, upstream)) {
                    known.push(upstream.clone());
                }
            }
        }
        self.refresh();
        if let Some(reply) = reply {
            self.waiting.borrow_mut().push(reply);
            self.answer_waiting();
        }
        if !self.beating.replace(true) {
            tokio::task::spawn_local(heartbeat(self.me.clone()));
        }
    }

    /// Whether every watch is up.
    pub(crate) fn all_up(&self) -> bool {
        let watches = self.watches.borrow();
        !watches.is_empty() && watches.iter().all(|w| w.sink.up.get())
    }

    /// The tenant's key namespace as stored (empty without one).
    pub(crate) fn prefix(&self) -> &Bytes {
        &self.prefix
    }

    /// Opens a watch on every node of the tenant's resources not watched yet, and drops the watches of nodes
    /// they no longer have (then every tracking client drops everything: what it read there is not watched).
    fn refresh(&self) {
        let mut nodes: Vec<NodeSpec> = Vec::new();
        for upstream in self.upstreams.borrow().iter() {
            for node in upstream.known_script_nodes() {
                let mut node = node.speaking(Protocol::Resp3);
                // Redis tracks key names, not databases: one watch per node tells of every database's changes
                // (a watch per database would tell each change once per database).
                node.db = 0;
                if !nodes.contains(&node) {
                    nodes.push(node);
                }
            }
        }
        let mut watches = self.watches.borrow_mut();
        let before = watches.len();
        watches.retain(|w| nodes.contains(&w.node));
        let dropped = watches.len() < before;
        for node in nodes {
            if watches.iter().any(|w| w.node == node) {
                continue;
            }
            let sink = Rc::new(WatchSink {
                watch: self.me.clone(),
                up: Cell::new(false),
                tried: Cell::new(false),
            });
            let connection = self.pool.open_broadcast(
                &node,
                Rc::clone(&sink) as Rc<dyn TrackingSink>,
                self.prefix.clone(),
            );
            watches.push(Watch {
                node,
                sink,
                connection,
            });
        }
        drop(watches);
        if dropped {
            self.invalidated(None);
        }
    }

    /// A watch is up: the clients that read while one was not drop everything once all are.
    fn came_up(&self) {
        if self.all_up() {
            for tracker in self.live_trackers() {
                tracker.watched();
            }
        }
        self.answer_waiting();
    }

    /// Gives the waiting `CLIENT TRACKING on` replies once every watch has connected or failed to.
    fn answer_waiting(&self) {
        if !self.watches.borrow().iter().all(|w| w.sink.tried.get()) {
            return;
        }
        let waiting: Vec<ReplyHandle> = self.waiting.borrow_mut().drain(..).collect();
        for reply in waiting {
            reply.deliver(Bytes::from_static(b"+OK\r\n"));
        }
    }

    fn live_trackers(&self) -> Vec<Rc<Tracker>> {
        let mut trackers = self.trackers.borrow_mut();
        trackers.retain(|t| t.strong_count() > 0);
        trackers.iter().filter_map(Weak::upgrade).collect()
    }

    /// Redis says these keys changed (`None`: every key, or a watch is lost): each tracking client is told
    /// what concerns it.
    fn invalidated(&self, keys: Option<&[Bytes]>) {
        for tracker in self.live_trackers() {
            tracker.changed(keys, self);
        }
    }
}
