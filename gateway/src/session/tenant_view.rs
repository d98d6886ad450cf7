//! The tenant a client is served as: entering it (its route resolved on this worker for the client's database and
//! protocol), following it into each new snapshot (a revoked credential, a removed tenant or a refused address
//! closes the connection), and resolving its route again for another database or protocol.
//!
//! Each method that enters the tenant (again) says so: the session then does its own part (see
//! `Session::entered`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::client::{Client, TenantView};
use crate::resp::Protocol;
use crate::route::Tenant;
use crate::tenant::Lease;

impl Client {
    /// Serves the client as `tenant`, authenticated with `credential`, in its `place`.
    pub(super) fn enter_tenant(
        &mut self,
        tenant: Arc<Tenant>,
        credential: Option<String>,
        place: Lease,
    ) {
        let generation = self.worker.gateway.generation();
        let route = self.worker.resolve(&tenant, self.db, self.protocol);
        let near = super::near::NearView::of(&self.worker, &tenant, &route);
        // Requests a policy may refuse or rewrite are each looked at: they never take the direct path.
        let direct = route.direct().filter(|_| {
            !tenant
                .policies
                .as_ref()
                .is_some_and(|p| p.checks_commands())
        });
        self.info.set_tenant(&tenant.name);
        self.tenant = Some(TenantView {
            tenant,
            generation,
            route,
            direct,
            near,
            credential,
            place,
        });
    }

    /// Leaves the tenant; its place among the tenant's connections is returned, to keep or to drop.
    pub(super) fn leave_tenant(&mut self) -> Option<Lease> {
        self.tenant.take().map(|view| view.place)
    }

    /// Picks up a new snapshot at the first command after it was published. Returns whether the client entered
    /// its tenant again (as the snapshot has it now).
    pub(super) fn refresh_tenant(&mut self) -> bool {
        let generation = self.worker.gateway.generation();
        let Some(view) = &self.tenant else {
            return false;
        };
        if view.generation == generation {
            return false;
        }
        let snapshot = self.worker.gateway.snapshot();
        let credential = view.credential.clone();
        let current = snapshot
            .tenant_by_name(&view.tenant.name)
            .filter(|tenant| match &credential {
                Some(digest) => tenant.credentials.contains(digest),
                None => tenant.credentials.is_empty(),
            })
            .cloned();
        // A delta carries unchanged tenants over as they are: the route resolved for this one still holds.
        if let (Some(tenant), Some(view)) = (&current, &mut self.tenant)
            && Arc::ptr_eq(tenant, &view.tenant)
        {
            view.generation = generation;
            return false;
        }
        let address = self.info.addr.ip();
        if current
            .as_ref()
            .is_some_and(|tenant| !tenant.admits(address))
        {
            tracing::info!(client = %self.info.addr, "closing a connection whose address the tenant no longer admits (ip_allow/ip_deny)");
            self.leave_tenant();
            self.closing = true;
            return false;
        }
        let place = self.leave_tenant();
        match (current, place) {
            (Some(tenant), Some(place)) if tenant.databases().contains(&i64::from(self.db)) => {
                self.enter_tenant(tenant, credential, place);
                return true;
            }
            // Moving the client to another database behind its back could send its writes anywhere.
            (Some(_), _) => {
                tracing::info!(client = %self.info.addr, db = self.db, "closing a connection whose database the tenant no longer owns");
            }
            (None, _) => {
                tracing::info!(client = %self.info.addr, "closing a connection whose tenant or credential was removed");
            }
        }
        self.closing = true;
        false
    }

    /// Switches the client to database `db`, re-resolving its route there. Returns whether it entered its tenant
    /// again.
    pub(super) fn set_db(&mut self, db: u32) -> bool {
        if db == self.db {
            return false;
        }
        self.db = db;
        self.info.db.store(self.db, Ordering::Relaxed);
        self.reresolve()
    }

    /// Switches the client to `protocol`: its route is resolved again, to backend connections that speak it.
    /// Returns whether it entered its tenant again.
    pub(super) fn set_protocol(&mut self, protocol: Protocol) -> bool {
        if protocol == self.protocol {
            return false;
        }
        self.protocol = protocol;
        let resp = if protocol == Protocol::Resp3 { 3 } else { 2 };
        self.info.resp.store(resp, Ordering::Relaxed);
        self.reresolve()
    }

    /// Resolves the tenant's route again, for the client's database and protocol.
    fn reresolve(&mut self) -> bool {
        let Some((tenant, credential)) = self
            .tenant
            .as_ref()
            .map(|v| (Arc::clone(&v.tenant), v.credential.clone()))
        else {
            return false;
        };
        let Some(place) = self.leave_tenant() else {
            return false;
        };
        self.enter_tenant(tenant, credential, place);
        true
    }
}
