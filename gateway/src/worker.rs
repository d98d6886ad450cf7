//! A worker thread's context, shared by the sessions it runs: its pool of backend connections, the upstreams of
//! the current routes held open, and the signal that tells its sessions about route changes and the shutdown.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::backend::spares::Spares;
use crate::backend::{BackendPool, ConnectionSettings, ResourceSpec, Upstream};
use crate::metrics::FamilyLatency;
use crate::near_cache::NearCaches;
use crate::reply::DetachedWrites;
use crate::resp::Protocol;
use crate::route::{ResolvedRoute, Resolver, Tenant};
use crate::signal::LocalBroadcast;
use crate::state::Gateway;
use crate::tracking::Observed;

/// The upstreams a worker holds open while no client uses them (see `Worker::upstream`).
#[derive(Default)]
struct Pinned {
    generation: u64,
    /// The snapshot's resource list these were opened for (a new snapshot often shares it).
    resources: Arc<[ResourceSpec]>,
    specs: HashSet<ResourceSpec>,
    upstreams: Vec<Upstream>,
}

/// The per-worker context every session of that worker shares.
pub(crate) struct Worker {
    pub gateway: Arc<Gateway>,
    pool: Rc<BackendPool>,
    /// Spare dedicated connections (see `backend::spares`).
    pub spares: Rc<Spares>,
    /// Upstreams of the current snapshot's routes (and those opened since for another database or protocol),
    /// held open even while no client uses them, so that a new client never waits for a backend connect (or a
    /// cluster's first slot map). Replaced (and the dropped ones drained) when the routes' resources change.
    pinned: RefCell<Pinned>,
    /// Background double-write tracking, per tenant, secondary resource and database.
    detached: RefCell<HashMap<(String, String, u32), Rc<DetachedWrites>>>,
    /// Hot and big keys and slow commands noticed here since the last report (see `tracking`).
    pub observed: Arc<Mutex<Observed>>,
    /// Whether this worker reaches each resource of the routes, at its last look (see `reach`).
    pub reach: crate::reach::WorkerView,
    /// Command latency by family, of this worker's clients.
    pub latency: Arc<FamilyLatency>,
    /// Its tenants' near caches (see `near_cache`).
    pub near_caches: NearCaches,
    /// Its clients' tracking (`CLIENT TRACKING`, see `client_tracking`).
    pub client_tracking: crate::client_tracking::ClientTracking,
    pub shutdown: watch::Receiver<bool>,
    /// Tells every session of this worker that the snapshot changed or the gateway is shutting down.
    pub control: LocalBroadcast,
}

impl Worker {
    /// The context of a new worker thread.
    pub(crate) fn new(gateway: Arc<Gateway>, shutdown: watch::Receiver<bool>) -> Worker {
        let settings = ConnectionSettings {
            connect_timeout: gateway.config.connect_timeout,
            command_timeout: gateway.config.command_timeout,
        };
        let pool = Rc::new(BackendPool::new(
            settings,
            gateway.config.backend_connections,
            Arc::clone(&gateway.metrics),
            Arc::clone(&gateway.topologies),
        ));
        Worker {
            near_caches: NearCaches::new(
                gateway.config.near_cache_max_bytes,
                gateway.config.workers,
                Rc::clone(&pool),
            ),
            client_tracking: crate::client_tracking::ClientTracking::new(
                Rc::clone(&pool),
                Arc::clone(&gateway.clients),
            ),
            pinned: RefCell::new(Pinned::default()),
            detached: RefCell::new(HashMap::new()),
            observed: gateway.tracking.worker(),
            reach: gateway.reachability.worker(),
            latency: gateway.metrics.worker_latency(),
            spares: Rc::new(Spares::new(
                gateway.config.dedicated_spares,
                gateway.config.connect_timeout,
                Arc::clone(&gateway.metrics),
            )),
            pool,
            gateway,
            shutdown,
            control: LocalBroadcast::default(),
        }
    }

    /// The upstream for a resource, shared by every session of this worker.
    pub(crate) fn upstream(&self, spec: &ResourceSpec) -> Upstream {
        let mut pinned = self.pinned();
        let upstream = self.pool.upstream(spec);
        // Another database or protocol of a resource, once used, stays open until the routes change too.
        if pinned.specs.insert(spec.clone()) {
            pinned.upstreams.push(upstream.clone());
        }
        upstream
    }

    /// Opens the upstreams of the current snapshot's routes now, rather than for this worker's first client after
    /// a change: every worker has its backend connections (and a cluster's slot map) ready before a client asks,
    /// whichever worker the client lands on.
    pub(crate) fn pin_current_routes(&self) {
        drop(self.pinned());
        let snapshot = self.gateway.snapshot();
        self.near_caches
            .retain(|name| snapshot.tenant_by_name(name).map(Arc::as_ptr));
        self.client_tracking
            .retain(|name| snapshot.tenant_by_name(name).map(Arc::as_ptr));
    }

    /// Whether each resource of the current routes is healthy on this worker, and the nodes it knows now (see
    /// `reach`).
    pub(crate) fn resources_seen(&self) -> HashMap<ResourceSpec, crate::reach::Seen> {
        let pinned = self.pinned();
        pinned
            .resources
            .iter()
            .map(|spec| {
                let upstream = self.pool.upstream(spec);
                let seen = crate::reach::Seen {
                    healthy: upstream.is_healthy(),
                    nodes: upstream
                        .known_script_nodes()
                        .into_iter()
                        .map(|node| node.addr)
                        .collect(),
                };
                (spec.clone(), seen)
            })
            .collect()
    }

    /// The pinned upstreams, replaced first if the snapshot changed since they were opened.
    fn pinned(&self) -> std::cell::RefMut<'_, Pinned> {
        let generation = self.gateway.generation();
        let mut pinned = self.pinned.borrow_mut();
        if pinned.generation != generation {
            // The snapshot lists its distinct resources, built off this thread: the work here is in proportion
            // to the resources, never to the tenants, and none at all when no resource came or went.
            let snapshot = self.gateway.snapshot();
            let resources = snapshot.resources();
            if !Arc::ptr_eq(&pinned.resources, resources) {
                let specs: HashSet<ResourceSpec> = resources.iter().cloned().collect();
                let upstreams = specs.iter().map(|spec| self.pool.upstream(spec)).collect();
                *pinned = Pinned {
                    generation,
                    resources: Arc::clone(resources),
                    specs,
                    upstreams,
                };
            }
            pinned.generation = generation;
        }
        pinned
    }

    /// `tenant`'s route resolved with this worker's backends, for database `db` and a client speaking `protocol`.
    pub(crate) fn resolve(&self, tenant: &Tenant, db: u32, protocol: Protocol) -> ResolvedRoute {
        let resolver = TenantResolver {
            worker: self,
            tenant,
            db,
        };
        ResolvedRoute::new(&tenant.route, db, protocol, &resolver)
    }

    /// Where this worker tracks background writes of `tenant` to the double-write secondary `resource`, made
    /// in the client's database `db`.
    pub(crate) fn detached(&self, tenant: &Tenant, resource: &str, db: u32) -> Rc<DetachedWrites> {
        let key = (tenant.name.clone(), resource.to_string(), db);
        let mut detached = self.detached.borrow_mut();
        let writes = detached.entry(key).or_insert_with(|| {
            let failures = tenant.runtime.counters.double_write_failures(resource);
            let missed = self.gateway.repairs.missed(&tenant.name, resource);
            Rc::new(DetachedWrites::new(failures, missed, db))
        });
        Rc::clone(writes)
    }
}

/// Resolves a tenant's route with a worker's backends.
struct TenantResolver<'a> {
    worker: &'a Worker,
    tenant: &'a Tenant,
    db: u32,
}

impl Resolver for TenantResolver<'_> {
    fn upstream(&self, spec: &ResourceSpec) -> Upstream {
        self.worker.upstream(spec)
    }

    fn detached(&self, resource: &str) -> Rc<DetachedWrites> {
        self.worker.detached(self.tenant, resource, self.db)
    }
}
