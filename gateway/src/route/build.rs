//! Building a whole [`Snapshot`] from a routes file or a control-plane snapshot, and the parts a delta shares
//! with it: checking routes as the control plane did, and compiling one tenant.

use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::Arc;

use switchyard_schemas::{
    RouteTable, RoutesFile, SnapshotTenant, TenantLimits, TenantPolicy, ValidationError,
    ValidationErrors,
};

use super::readiness::Readiness;
use super::{ByName, Catalog, DigestIndex, ResourcePlan, RoutePlan, Snapshot, Tenant};
use crate::backend::identity;

/// Why a control-plane snapshot is not served.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    /// A delta that applies to another revision or epoch than the one served: a full snapshot will do.
    #[error("{0}")]
    DoesNotApply(String),
    /// It breaks the route-table rules (or, for a delta, the rules of deltas).
    #[error("the snapshot breaks the route-table rules: {0}")]
    Invalid(#[from] ValidationErrors),
    /// It could not be read or applied (the text says why).
    #[error("{0}")]
    Failed(String),
}

/// A tenant as either source describes it, before it is compiled.
pub(super) struct TenantSource<'a> {
    name: &'a str,
    allow_admin: bool,
    limits: &'a TenantLimits,
    digests: Vec<String>,
    route: &'a RouteTable,
    policy: Cow<'a, TenantPolicy>,
    /// Its readiness probe's destination (a control plane's tenants only).
    probe: Option<&'a RouteTable>,
}

impl<'a> TenantSource<'a> {
    pub(super) fn control_plane(tenant: &'a SnapshotTenant) -> TenantSource<'a> {
        TenantSource {
            name: &tenant.name,
            allow_admin: tenant.allow_admin,
            limits: &tenant.limits,
            digests: tenant
                .credentials
                .iter()
                .map(|c| c.digest.clone())
                .collect(),
            route: &tenant.route,
            policy: Cow::Borrowed(&tenant.policy),
            probe: tenant.readiness_probe.as_ref(),
        }
    }
}

/// What a tenant without credentials is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum WithoutCredentials {
    /// Served to clients that do not AUTH (a routes file's explicit `"passwords": []`).
    Open,
    /// Reachable by no one until it has a credential (the control plane's tenants).
    Unreachable,
}

impl Snapshot {
    /// Builds a snapshot from a routes file, after checking every rule.
    pub(crate) fn from_routes_file(
        file: &RoutesFile,
        generation: u64,
        previous: &Snapshot,
        catalog: &mut Catalog,
    ) -> Result<Snapshot, ValidationErrors> {
        file.validate()?;
        let resolve = |reference: &str| -> String {
            file.resources
                .get(reference)
                .cloned()
                .unwrap_or_else(|| reference.to_string())
        };
        let sources = file.tenants.iter().map(|tenant| TenantSource {
            name: &tenant.name,
            allow_admin: tenant.allow_admin,
            limits: &tenant.limits,
            digests: tenant.digests(),
            route: &tenant.route,
            policy: Cow::Owned(tenant.policy()),
            probe: None,
        });
        let snapshot = Snapshot::build(
            sources,
            WithoutCredentials::Open,
            (None, None),
            generation,
            previous,
            &resolve,
            catalog,
        );
        if let Some(open) = snapshot.open_tenant() {
            tracing::warn!(
                tenant = %open.name,
                "tenant '{}' has no passwords nor client certificates: every client that does not AUTH is served as it",
                open.name
            );
        }
        Ok(snapshot)
    }

    /// Builds a snapshot from the control plane's full one, after checking every route as the control plane
    /// did: a gateway never serves a table it would not accept itself. Disabled tenants are left out (their
    /// clients cannot authenticate, and open connections are closed).
    pub(crate) fn from_control_plane(
        snapshot: &switchyard_schemas::Snapshot,
        generation: u64,
        previous: &Snapshot,
        catalog: &mut Catalog,
    ) -> Result<Snapshot, ValidationErrors> {
        validate_routes(&snapshot.tenants, Vec::new())?;
        let sources = snapshot
            .tenants
            .iter()
            .filter(|t| !t.disabled)
            .map(TenantSource::control_plane);
        let identity = |reference: &str| reference.to_string();
        Ok(Snapshot::build(
            sources,
            WithoutCredentials::Unreachable,
            (Some(snapshot.revision), snapshot.epoch.clone()),
            generation,
            previous,
            &identity,
            catalog,
        ))
    }

    fn build<'a>(
        sources: impl Iterator<Item = TenantSource<'a>>,
        without_credentials: WithoutCredentials,
        (revision, epoch): (Option<i64>, Option<String>),
        generation: u64,
        previous: &Snapshot,
        resolve: &dyn Fn(&str) -> String,
        catalog: &mut Catalog,
    ) -> Snapshot {
        let shared = RefCell::new(&mut *catalog);
        let plan = |reference: &str| shared.borrow_mut().plan(&resolve(reference));
        let mut tenants: Vec<Arc<Tenant>> = sources
            .map(|source| compile(source, previous, &plan))
            .collect();
        // By name, so that a tenant is found by a binary search (a reload looks up every tenant of the
        // previous snapshot, and each session its own tenant on every change).
        tenants.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        catalog.clear_uses();
        for tenant in &tenants {
            catalog.hold(&tenant.route);
        }
        let open_tenant = match without_credentials {
            WithoutCredentials::Open => tenants.iter().rposition(|t| t.credentials.is_empty()),
            WithoutCredentials::Unreachable => None,
        };
        let tenants = ByName::from_sorted(tenants);
        Snapshot {
            generation,
            revision,
            epoch,
            by_digest: DigestIndex::new(&tenants),
            tenants,
            open_tenant,
            resources: catalog.specs(),
        }
    }
}

/// Checks every tenant's route and policies as the control plane did, each error named by the tenant's place in
/// the snapshot (`/tenants/{i}/route...`), after `errors` found before.
pub(super) fn validate_routes(
    tenants: &[SnapshotTenant],
    mut errors: Vec<ValidationError>,
) -> Result<(), ValidationErrors> {
    for (i, tenant) in tenants.iter().enumerate() {
        let tables = std::iter::once(("route", &tenant.route)).chain(
            tenant
                .readiness_probe
                .iter()
                .map(|p| ("readiness_probe", p)),
        );
        for (field, table) in tables {
            if let Err(e) = table.validate(&|_| None) {
                errors.extend(e.0.into_iter().map(|mut e| {
                    e.path = format!("/tenants/{i}/{field}{}", e.path);
                    e
                }));
            }
        }
        errors.extend(tenant.policy.problems(&format!("/tenants/{i}")));
    }
    errors.extend(switchyard_schemas::policy::overlapping_namespaces(
        tenants.iter().enumerate().filter_map(|(i, t)| {
            Some((
                format!("/tenants/{i}/namespace"),
                t.policy.namespace.as_deref()?,
            ))
        }),
    ));
    match errors.is_empty() {
        true => Ok(()),
        false => Err(ValidationErrors(errors)),
    }
}

/// Compiles one tenant; `plan` gives the plan of a resource reference.
pub(super) fn compile(
    source: TenantSource<'_>,
    previous: &Snapshot,
    plan: &dyn Fn(&str) -> Arc<ResourcePlan>,
) -> Arc<Tenant> {
    // The runtime state survives a reload: limits are not reset, monitors keep watching, /metrics never goes
    // backwards.
    let runtime = previous
        .tenant_by_name(source.name)
        .map(|t| t.runtime.clone())
        .unwrap_or_default();
    let ops_interval = source
        .limits
        .max_ops_per_sec
        .filter(|&n| n > 0)
        .map(|n| std::time::Duration::from_secs(1) / n);
    let route = RoutePlan::new(source.route, plan);
    // The counts not reported yet survive a reload, as long as the route keeps a destination.
    let readiness = Readiness::of(
        &route,
        source.probe,
        previous
            .tenant_by_name(source.name)
            .and_then(|t| t.readiness.as_ref()),
        &runtime.counters.commands,
    );
    // A resource's scripts policy is the operator's default for the tenants that share it, not for admins.
    let mut policy = source.policy.clone();
    if !source.allow_admin
        && policy.scripts.is_none()
        && let Some(default) = route.scripts()
    {
        policy.to_mut().scripts = Some(default);
    }
    let policies = crate::tenancy::Policies::compile(&policy);
    let namespace = policies.as_ref().and_then(|p| p.namespace.as_ref());
    let commands = policies
        .as_ref()
        .map(|p| p.commands.acl_rules())
        .unwrap_or_default();
    let scripts_run_as = identity::scripts_run_as(
        source.allow_admin,
        namespace.map(|n| &n.prefix()[..]),
        commands,
    );
    Arc::new(Tenant {
        name: source.name.to_string(),
        allow_admin: source.allow_admin,
        limits: source.limits.clone(),
        route,
        credentials: source.digests.into_iter().collect(),
        runtime,
        ops_interval,
        fleet_limits: source.policy.limits_scope.is_fleet()
            && (source.limits.max_ops_per_sec.is_some() || source.limits.max_connections.is_some()),
        policies,
        scripts_run_as,
        tracking: source.policy.tracking,
        near_cache: source.policy.near_cache,
        readiness,
    })
}
