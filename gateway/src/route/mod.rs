//! Tenants and their routes, as served right now.
//!
//! A [`Snapshot`] is built off to the side from a routes file or a control-plane snapshot, fully validated, then
//! published with one `ArcSwap` store; sessions pick it up at their next command.
//!
//! Only a routes file can make a tenant "open" (served to clients that never AUTH): there `"passwords": []` is
//! written on purpose. In a control-plane snapshot a tenant without credentials is one whose first credential is
//! not issued yet, or whose last one was revoked; it is unreachable, never open.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context as _;
use switchyard_schemas::{
    RouteTable, RoutesFile, TenantLimits, ValidationErrors, certificate_digest, credential_digest,
};

use crate::metrics::TenantMetrics;

mod dispatch;
mod kill;
mod merge;
mod plan;
mod resolve;
mod run;
mod scan;

pub(crate) use dispatch::Dispatch;
pub(crate) use merge::Merge;
pub(crate) use plan::{ResourcePlan, RoutePlan, TargetPlan};
pub(crate) use resolve::{
    CROSSSLOT, Direct, DirectRoute, Place, ResolvedRoute, Resolver, WriteCopy,
};
pub(crate) use run::{Run, RunTarget};

/// Everything the gateway serves at one moment.
pub(crate) struct Snapshot {
    /// Increases with every published snapshot; sessions compare it to notice a change.
    pub generation: u64,
    /// The control plane's revision this snapshot reflects (none for a routes file).
    pub revision: Option<i64>,
    /// Sorted by name (see [`Snapshot::tenant_by_name`]).
    tenants: Vec<Arc<Tenant>>,
    /// Credential digest -> tenant index.
    /// Credentials by the first 8 bytes of their digest: (full digest, tenant index). The map finds the candidate;
    /// the full digest is then compared in constant time.
    by_digest: HashMap<u64, Vec<(String, usize)>>,
    /// The tenant clients get without AUTH: a routes file's tenant with no passwords, if there is one.
    open_tenant: Option<usize>,
}

/// One tenant: who it is, where its commands go, what it may do.
pub(crate) struct Tenant {
    pub name: String,
    pub allow_admin: bool,
    pub limits: TenantLimits,
    pub route: RoutePlan,
    /// Digests of the credentials that select this tenant (a few: a list costs less than a set).
    pub credentials: Box<[String]>,
    pub metrics: TenantMetrics,
    /// Commands per second allowed, as a rate limiter's interval (none: unlimited).
    pub ops_interval: Option<std::time::Duration>,
}

impl Tenant {
    /// The databases the tenant's clients may SELECT (see `RoutePlan::databases`).
    pub(crate) fn databases(&self) -> std::ops::Range<i64> {
        self.route.databases(self.allow_admin)
    }

    /// The tenant's pub/sub namespace, unless it is an admin, which sees the backend's channels as they are.
    pub(crate) fn channels(&self) -> Option<crate::cmd::tenancy::Channels> {
        let databases = self.databases();
        let count = u32::try_from(databases.end - databases.start).unwrap_or(1);
        (!self.allow_admin)
            .then(|| crate::cmd::tenancy::Channels::new(&self.name, self.route.base_db(), count))
    }
}

/// A tenant as either source describes it, before it is compiled.
struct TenantSource<'a> {
    name: &'a str,
    allow_admin: bool,
    limits: &'a TenantLimits,
    digests: Vec<String>,
    route: &'a RouteTable,
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
    /// A snapshot that serves no one (the gateway before its first routes).
    pub(crate) fn empty() -> Snapshot {
        Snapshot {
            generation: 0,
            revision: None,
            tenants: Vec::new(),
            by_digest: HashMap::new(),
            open_tenant: None,
        }
    }

    /// Builds a snapshot from a routes file, after checking every rule.
    pub(crate) fn from_routes_file(
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
        let sources = file.tenants.iter().map(|tenant| TenantSource {
            name: &tenant.name,
            allow_admin: tenant.allow_admin,
            limits: &tenant.limits,
            digests: tenant.digests(),
            route: &tenant.route,
        });
        let snapshot = Snapshot::build(
            sources,
            WithoutCredentials::Open,
            None,
            generation,
            previous,
            &resolve,
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

    /// Builds a snapshot from the control plane's, after checking every route as the control plane did: a
    /// gateway never serves a table it would not accept itself. Disabled tenants are left out (their clients
    /// cannot authenticate, and open connections are closed).
    pub(crate) fn from_control_plane(
        snapshot: &switchyard_schemas::Snapshot,
        generation: u64,
        previous: &Snapshot,
    ) -> Result<Snapshot, ValidationErrors> {
        let mut errors = Vec::new();
        for (i, tenant) in snapshot.tenants.iter().enumerate() {
            if let Err(e) = tenant.route.validate(&|_| None) {
                errors.extend(e.0.into_iter().map(|mut e| {
                    e.path = format!("/tenants/{i}/route{}", e.path);
                    e
                }));
            }
        }
        if !errors.is_empty() {
            return Err(ValidationErrors(errors));
        }
        let sources = snapshot
            .tenants
            .iter()
            .filter(|t| !t.disabled)
            .map(|tenant| TenantSource {
                name: &tenant.name,
                allow_admin: tenant.allow_admin,
                limits: &tenant.limits,
                digests: tenant
                    .credentials
                    .iter()
                    .map(|c| c.digest.clone())
                    .collect(),
                route: &tenant.route,
            });
        let identity = |reference: &str| reference.to_string();
        Ok(Snapshot::build(
            sources,
            WithoutCredentials::Unreachable,
            Some(snapshot.revision),
            generation,
            previous,
            &identity,
        ))
    }

    fn build<'a>(
        sources: impl Iterator<Item = TenantSource<'a>>,
        without_credentials: WithoutCredentials,
        revision: Option<i64>,
        generation: u64,
        previous: &Snapshot,
        resolve: &dyn Fn(&str) -> String,
    ) -> Snapshot {
        let mut snapshot = Snapshot {
            generation,
            revision,
            tenants: Vec::new(),
            by_digest: HashMap::new(),
            open_tenant: None,
        };
        // One plan per resource URL, shared by every tenant that names it.
        let plans: RefCell<HashMap<String, Arc<ResourcePlan>>> = RefCell::default();
        let plan = |reference: &str| {
            let mut plans = plans.borrow_mut();
            let plan = plans
                .entry(resolve(reference))
                .or_insert_with_key(|url| Arc::new(ResourcePlan::new(url)));
            Arc::clone(plan)
        };
        for source in sources {
            // Counters survive a reload so that /metrics never goes backwards.
            let metrics = previous
                .tenant_by_name(source.name)
                .map(|t| t.metrics.clone())
                .unwrap_or_default();
            let ops_interval = source
                .limits
                .max_ops_per_sec
                .filter(|&n| n > 0)
                .map(|n| std::time::Duration::from_secs(1) / n);
            snapshot.tenants.push(Arc::new(Tenant {
                name: source.name.to_string(),
                allow_admin: source.allow_admin,
                limits: source.limits.clone(),
                route: RoutePlan::new(source.route, &plan),
                credentials: source.digests.into_iter().collect(),
                metrics,
                ops_interval,
            }));
        }
        // By name, so that a tenant is found by a binary search (a reload looks up every tenant of the
        // previous snapshot, and each session its own tenant on every change).
        snapshot
            .tenants
            .sort_unstable_by(|a, b| a.name.cmp(&b.name));
        for (index, tenant) in snapshot.tenants.iter().enumerate() {
            if tenant.credentials.is_empty() && without_credentials == WithoutCredentials::Open {
                snapshot.open_tenant = Some(index);
            }
            for digest in &tenant.credentials {
                snapshot
                    .by_digest
                    .entry(digest_prefix(digest))
                    .or_default()
                    .push((digest.clone(), index));
            }
        }
        snapshot
    }

    pub(crate) fn tenants(&self) -> &[Arc<Tenant>] {
        &self.tenants
    }

    pub(crate) fn tenant_by_name(&self, name: &str) -> Option<&Arc<Tenant>> {
        let found = self
            .tenants
            .binary_search_by(|t| t.name.as_str().cmp(name))
            .ok()?;
        self.tenants.get(found)
    }

    /// Whether clients must AUTH before anything else.
    pub(crate) fn requires_auth(&self) -> bool {
        self.open_tenant.is_none()
    }

    pub(crate) fn open_tenant(&self) -> Option<&Arc<Tenant>> {
        self.open_tenant.map(|i| &self.tenants[i])
    }

    /// The tenant a password selects, and the digest that matched; with a tenant name
    /// (`AUTH tenant password`), only that tenant's.
    pub(crate) fn authenticate(
        &self,
        tenant: Option<&[u8]>,
        password: &[u8],
    ) -> Option<(&Arc<Tenant>, String)> {
        let password = std::str::from_utf8(password).ok()?;
        let digest = credential_digest(password);
        let found = self.by_digest(&digest)?;
        match tenant {
            Some(name) if name != found.name.as_bytes() => None,
            _ => Some((found, digest)),
        }
    }

    /// The tenant a client certificate selects (by its `subjectPublicKeyInfo`), and its digest.
    pub(crate) fn authenticate_certificate(&self, spki: &[u8]) -> Option<(&Arc<Tenant>, String)> {
        let digest = certificate_digest(spki);
        Some((self.by_digest(&digest)?, digest))
    }

    fn by_digest(&self, digest: &str) -> Option<&Arc<Tenant>> {
        let candidates = self.by_digest.get(&digest_prefix(digest))?;
        let (_, index) = candidates
            .iter()
            .find(|(known, _)| constant_time_eq(known.as_bytes(), digest.as_bytes()))?;
        self.tenants.get(*index)
    }
}

/// The map key of a digest: the first 16 hex digits of its hash (after a certificate's prefix; a digest that
/// is not hex gets key 0 and still works).
fn digest_prefix(digest: &str) -> u64 {
    let hash = digest.rsplit(':').next().unwrap_or(digest);
    hash.get(..16)
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .unwrap_or(0)
}

/// Equality whose time depends only on the length, not on where the bytes differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `switchyard-gateway explain`: where each key of `keys` goes under `tenant`'s route in the routes file.
pub fn explain(
    routes: &std::path::Path,
    tenant: &str,
    keys: &[String],
) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(routes)
        .with_context(|| format!("cannot read {}", routes.display()))?;
    let file: RoutesFile = serde_json::from_str(&text)
        .with_context(|| format!("invalid routes file {}", routes.display()))?;
    let snapshot = Snapshot::from_routes_file(&file, 1, &Snapshot::empty())
        .with_context(|| format!("invalid routes file {}", routes.display()))?;
    let tenant = snapshot
        .tenant_by_name(tenant)
        .with_context(|| format!("no tenant '{tenant}' in the routes file"))?;
    Ok(keys
        .iter()
        .map(|key| tenant.route.explain(key.as_bytes()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUTE: &str = r#"{"type":"single","target":"redis://127.0.0.1:6379"}"#;

    #[test]
    fn a_routes_file_tenant_without_passwords_is_open() {
        let file: RoutesFile = serde_json::from_str(&format!(
            r#"{{"tenants":[{{"name":"open","passwords":[],"route":{ROUTE}}},
                {{"name":"locked","passwords":["pw"],"route":{ROUTE}}}]}}"#
        ))
        .unwrap();
        let snapshot = Snapshot::from_routes_file(&file, 1, &Snapshot::empty()).unwrap();
        assert!(!snapshot.requires_auth());
        assert_eq!(
            snapshot.open_tenant().map(|t| t.name.as_str()),
            Some("open")
        );
    }

    #[test]
    fn a_routes_file_whose_numbers_would_exhaust_memory_is_refused() {
        let file: RoutesFile = serde_json::from_str(
            r#"{"tenants":[{"name":"a","passwords":["pw"],"route":{"type":"sharded",
                "hash":{"algorithm":"crc16","buckets":4294967295},
                "shards":[{"name":"s","target":"redis://h:1","buckets":["0-4294967294"]}]}}]}"#,
        )
        .unwrap();
        let refused = Snapshot::from_routes_file(&file, 1, &Snapshot::empty()).err();
        assert_eq!(
            refused.map(|e| e.to_string()).as_deref(),
            Some("/tenants/0/route/hash/buckets: must be at most 65536")
        );
    }

    #[test]
    fn a_control_plane_tenant_without_credentials_is_unreachable() {
        // "fresh" has a route but no credential yet; "revoked" had its last credential revoked.
        let cp: switchyard_schemas::Snapshot = serde_json::from_str(&format!(
            r#"{{"revision":7,"tenants":[
                {{"name":"fresh","disabled":false,"allow_admin":false,"limits":{{}},"credentials":[],
                  "route":{ROUTE},"route_version":1}},
                {{"name":"kept","disabled":false,"allow_admin":false,"limits":{{}},
                  "credentials":[{{"id":1,"digest":"{}"}}],"route":{ROUTE},"route_version":1}},
                {{"name":"revoked","disabled":false,"allow_admin":true,"limits":{{}},"credentials":[],
                  "route":{ROUTE},"route_version":3}}]}}"#,
            credential_digest("secret")
        ))
        .unwrap();
        let snapshot = Snapshot::from_control_plane(&cp, 1, &Snapshot::empty()).unwrap();
        assert!(snapshot.requires_auth());
        assert!(snapshot.open_tenant().is_none());
        assert_eq!(snapshot.tenants().len(), 3);
        assert_eq!(
            snapshot
                .authenticate(None, b"secret")
                .map(|(t, _)| t.name.as_str()),
            Some("kept")
        );
        assert!(snapshot.authenticate(Some(b"fresh"), b"").is_none());
        assert!(snapshot.authenticate(Some(b"revoked"), b"secret").is_none());
    }

    /// Tenants in any order are found by name and by password, keep their counters across a reload, and share
    /// one plan per resource URL.
    #[test]
    fn tenants_are_found_by_name_and_password_and_share_their_resources() {
        let tenants: Vec<String> = ["zeta", "alpha", "mid", "beta"]
            .iter()
            .map(|name| format!(r#"{{"name":"{name}","passwords":["pw-{name}"],"route":{ROUTE}}}"#))
            .collect();
        let file: RoutesFile =
            serde_json::from_str(&format!(r#"{{"tenants":[{}]}}"#, tenants.join(","))).unwrap();
        let first = Snapshot::from_routes_file(&file, 1, &Snapshot::empty()).unwrap();
        for name in ["zeta", "alpha", "mid", "beta"] {
            let found = first.tenant_by_name(name).map(|t| t.name.as_str());
            assert_eq!(found, Some(name));
            let password = format!("pw-{name}");
            let authenticated = first.authenticate(None, password.as_bytes());
            assert_eq!(authenticated.map(|(t, _)| t.name.as_str()), Some(name));
        }
        assert!(first.tenant_by_name("omega").is_none());
        let resource = |snapshot: &Snapshot, name: &str| {
            let tenant = snapshot.tenant_by_name(name).unwrap();
            Arc::clone(&tenant.route.shards[0].write[0])
        };
        assert!(Arc::ptr_eq(
            &resource(&first, "zeta"),
            &resource(&first, "alpha")
        ));

        first
            .tenant_by_name("mid")
            .unwrap()
            .metrics
            .commands
            .add("get", 3);
        let second = Snapshot::from_routes_file(&file, 2, &first).unwrap();
        let kept: Vec<_> = second
            .tenant_by_name("mid")
            .unwrap()
            .metrics
            .commands
            .counts()
            .collect();
        assert_eq!(kept, [("get", 3)]);
    }
}
