//! Tenants and their routes, as served right now.
//!
//! A [`Snapshot`] is built off to the side from a routes file (or, later, a control-plane snapshot), fully
//! validated, then published with one `ArcSwap` store; sessions pick it up at their next command.

use std::collections::HashMap;
use std::sync::Arc;

use switchyard_schemas::{RoutesFile, TenantLimits, ValidationErrors};

use crate::metrics::TenantMetrics;

mod dispatch;
mod merge;
mod plan;

pub use dispatch::{CROSSSLOT, Dispatch, ResolvedRoute, Resolver};
pub use plan::{ResourcePlan, RoutePlan, TargetPlan};

/// Everything the gateway serves at one moment.
pub struct Snapshot {
    /// Increases with every published snapshot; sessions compare it to notice a change.
    pub generation: u64,
    tenants: Vec<Arc<Tenant>>,
    by_password: HashMap<String, usize>,
    /// The tenant clients get without AUTH, if one has no passwords.
    open_tenant: Option<usize>,
}

/// One tenant: who it is, where its commands go, what it may do.
pub struct Tenant {
    pub name: String,
    pub allow_admin: bool,
    pub limits: TenantLimits,
    pub route: RoutePlan,
    pub metrics: TenantMetrics,
}

impl Snapshot {
    /// A snapshot that serves no one (the gateway before its first routes).
    pub fn empty() -> Snapshot {
        Snapshot {
            generation: 0,
            tenants: Vec::new(),
            by_password: HashMap::new(),
            open_tenant: None,
        }
    }

    /// Builds a snapshot from a routes file, after checking every rule.
    pub fn from_routes_file(
        file: &RoutesFile,
        generation: u64,
        previous: &Snapshot,
    ) -> Result<Snapshot, ValidationErrors> {
        file.validate()?;
        let resolve = |reference: &str| -> String {
            file.resources
                .get(reference)
                .cloned()
                .unwrap_or_else(|| reference.to_string())
        };
        let mut snapshot = Snapshot {
            generation,
            tenants: Vec::with_capacity(file.tenants.len()),
            by_password: HashMap::new(),
            open_tenant: None,
        };
        for (index, config) in file.tenants.iter().enumerate() {
            if config.passwords.is_empty() {
                snapshot.open_tenant = Some(index);
            }
            for password in &config.passwords {
                snapshot.by_password.insert(password.clone(), index);
            }
            let route = RoutePlan::new(&config.route, &resolve);
            // Counters survive a reload so that /metrics never goes backwards.
            let metrics = previous
                .tenant_by_name(&config.name)
                .map(|t| t.metrics.clone())
                .unwrap_or_default();
            snapshot.tenants.push(Arc::new(Tenant {
                name: config.name.clone(),
                allow_admin: config.allow_admin,
                limits: config.limits.clone(),
                route,
                metrics,
            }));
        }
        Ok(snapshot)
    }

    pub fn tenants(&self) -> &[Arc<Tenant>] {
        &self.tenants
    }

    pub fn tenant_by_name(&self, name: &str) -> Option<&Arc<Tenant>> {
        self.tenants.iter().find(|t| t.name == name)
    }

    /// Whether clients must AUTH before anything else.
    pub fn requires_auth(&self) -> bool {
        self.open_tenant.is_none()
    }

    pub fn open_tenant(&self) -> Option<&Arc<Tenant>> {
        self.open_tenant.map(|i| &self.tenants[i])
    }

    /// The tenant a password selects; with a tenant name (`AUTH tenant password`), only that tenant's.
    pub fn authenticate(&self, tenant: Option<&[u8]>, password: &[u8]) -> Option<&Arc<Tenant>> {
        let password = std::str::from_utf8(password).ok()?;
        let found = &self.tenants[*self.by_password.get(password)?];
        match tenant {
            Some(name) if name != found.name.as_bytes() => None,
            _ => Some(found),
        }
    }
}
