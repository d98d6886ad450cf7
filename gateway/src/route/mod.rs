//! Tenants and their routes, as served right now.
//!
//! A [`Snapshot`] is built off to the side from a routes file or a control-plane snapshot (whole, or from the one
//! served and a delta), fully validated, then published with one `ArcSwap` store; sessions pick it up at their
//! next command.
//!
//! Only a routes file can make a tenant "open" (served to clients that never AUTH): there `"passwords": []` is
//! written on purpose. In a control-plane snapshot a tenant without credentials is one whose first credential is
//! not issued yet, or whose last one was revoked; it is unreachable, never open.

use std::sync::Arc;

use anyhow::Context as _;
use switchyard_schemas::{RoutesFile, TenantLimits, certificate_digest, credential_digest};

use crate::backend::ResourceSpec;
use crate::tenant::TenantRuntime;

mod build;
mod by_name;
mod cached;
mod catalog;
mod credentials;
mod dedicated;
mod delta;
mod direct;
mod dispatch;
mod exec;
mod kill;
mod listing;
mod merge;
mod per_resource;
mod per_worker;
mod plan;
pub(crate) mod readiness;
mod resolve;
mod run;
mod scan;

pub(crate) use build::Refused;
pub(crate) use by_name::{ByName, Named};
pub(crate) use cached::{CacheNode, CacheRoute};
pub(crate) use catalog::Catalog;
use credentials::DigestIndex;
pub(crate) use dedicated::{Dedicated, Opening};
pub(crate) use direct::DirectRoute;
pub(crate) use dispatch::{Dispatch, splits};
pub(crate) use exec::Exec;
pub(crate) use merge::Merge;
pub(crate) use per_worker::PerCompiledTenant;
pub(crate) use plan::{ResourcePlan, RoutePlan, Secondary, TargetPlan};
pub(crate) use resolve::{CROSSSLOT, Place, ResolvedRoute, Resolver};
pub(crate) use run::{Run, RunTarget, WriteCopy};

/// Everything the gateway serves at one moment.
pub(crate) struct Snapshot {
    /// Increases with every published snapshot; sessions compare it to notice a change.
    pub generation: u64,
    /// The control plane's revision this snapshot reflects (none for a routes file).
    pub revision: Option<i64>,
    /// Sorted by name (see [`Snapshot::tenant_by_name`]), in chunks a delta shares with the snapshot before.
    tenants: ByName<Arc<Tenant>>,
    /// Names the control plane's history this snapshot belongs to (see `switchyard_schemas::Snapshot::epoch`).
    pub epoch: Option<String>,
    /// Which tenant each credential digest selects.
    by_digest: DigestIndex,
    /// The tenant clients get without AUTH: a routes file's tenant with no passwords, if there is one.
    open_tenant: Option<usize>,
    /// See [`Snapshot::resources`].
    resources: Arc<[ResourceSpec]>,
}

/// One tenant: who it is, where its commands go, what it may do.
pub(crate) struct Tenant {
    pub name: String,
    pub allow_admin: bool,
    pub limits: TenantLimits,
    pub route: RoutePlan,
    /// Digests of the credentials that select this tenant (a few: a list costs less than a set).
    pub credentials: Box<[String]>,
    /// Its limits' state, monitors, slow log and counters, kept across snapshots.
    pub runtime: TenantRuntime,
    /// Commands per second allowed, as a rate limiter's interval (none: unlimited).
    pub ops_interval: Option<std::time::Duration>,
    /// Whether its connection and rate limits hold for the fleet: here, its share of them when it has one
    /// (`tenant::TenantState::share`).
    pub fleet_limits: bool,
    /// Its namespace, read-only switch, command rules, address lists and blocked keys; none without any.
    pub policies: Option<Box<crate::tenancy::Policies>>,
    /// Who its scripts and functions run as on a backend (see `backend::identity`).
    pub scripts_run_as: crate::reply::RunAs,
    /// Its own thresholds of the slow log, big keys and hot keys (see `tracking`).
    pub tracking: switchyard_schemas::policy::TrackingPolicy,
    /// Its near cache's policy, if it has one (see `near_cache`).
    pub near_cache: Option<switchyard_schemas::NearCachePolicy>,
    /// Set while its route double-writes (a migration's destination), or it has a readiness probe: its commands
    /// are then checked against that destination (see `readiness`).
    pub readiness: Option<readiness::Readiness>,
}

impl Named for Arc<Tenant> {
    fn name(&self) -> &str {
        &self.name
    }
}

impl Tenant {
    /// Whether the tenant's ops/s limit admits one more command at `now` (see `TenantState::admit_op`).
    #[inline]
    pub(crate) fn admit_op(&self, now: std::time::Instant) -> bool {
        self.ops_interval
            .is_none_or(|interval| self.runtime.admit_op(now, interval, self.fleet_limits))
    }

    /// Whether its commands' keys are checked against a destination (see `places_apart`): each command must then
    /// take the session's steps, where they are, rather than the direct path.
    #[inline]
    pub(crate) fn checks_keys(&self) -> bool {
        self.readiness.as_ref().is_some_and(|r| r.places_apart)
    }

    /// The destination its commands' keys are checked against, with the counts, while it has one that places
    /// keys apart (see `readiness`).
    pub(crate) fn places_apart(&self) -> Option<(&readiness::Counters, &Secondary)> {
        let readiness = self.readiness.as_ref().filter(|r| r.places_apart)?;
        let destination = match &readiness.probe {
            Some(probe) => probe,
            None => self.route.secondary()?,
        };
        Some((&readiness.counters, destination))
    }

    /// The databases the tenant's clients may SELECT (see `RoutePlan::databases`).
    pub(crate) fn databases(&self) -> std::ops::Range<i64> {
        self.route.databases(self.allow_admin)
    }

    /// Whether a client at `address` may authenticate as the tenant (its `ip_allow` and `ip_deny`).
    pub(crate) fn admits(&self, address: std::net::IpAddr) -> bool {
        self.policies
            .as_ref()
            .is_none_or(|policies| policies.admits(address))
    }

    /// The tenant's key namespace, if it has one.
    pub(crate) fn namespace(&self) -> Option<&crate::tenancy::Namespace> {
        self.policies.as_deref()?.namespace.as_ref()
    }

    /// The tenant's pub/sub namespace, unless it is an admin, which sees the backend's channels as they are; a
    /// tenant with a key namespace (an admin too) hears its own keys' notifications only.
    pub(crate) fn channels(&self) -> Option<crate::tenancy::Channels> {
        use crate::tenancy::Channels;
        let databases = self.databases();
        let count = u32::try_from(databases.end - databases.start).unwrap_or(1);
        let channels = match (self.allow_admin, self.namespace()) {
            (false, _) => Channels::new(&self.name, self.route.base_db(), count),
            (true, Some(_)) => Channels::unrenamed(),
            (true, None) => return None,
        };
        Some(match self.namespace() {
            Some(namespace) => channels.with_keys(namespace),
            None => channels,
        })
    }
}

impl Snapshot {
    /// A snapshot that serves no one (the gateway before its first routes).
    pub(crate) fn empty() -> Snapshot {
        Snapshot {
            generation: 0,
            revision: None,
            epoch: None,
            tenants: ByName::default(),
            by_digest: DigestIndex::default(),
            open_tenant: None,
            resources: Arc::default(),
        }
    }

    pub(crate) fn tenants(&self) -> &ByName<Arc<Tenant>> {
        &self.tenants
    }

    pub(crate) fn tenant_by_name(&self, name: &str) -> Option<&Arc<Tenant>> {
        self.tenants.find(name)
    }

    /// Whether clients must AUTH before anything else.
    pub(crate) fn requires_auth(&self) -> bool {
        self.open_tenant.is_none()
    }

    pub(crate) fn open_tenant(&self) -> Option<&Arc<Tenant>> {
        self.open_tenant.and_then(|i| self.tenants.get(i))
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
        self.by_digest.find(digest, &self.tenants)
    }

    /// The distinct resource specs of every tenant's route (what each worker keeps connections open to), built
    /// with the snapshot; the same list as the previous snapshot's when no resource came or went.
    pub(crate) fn resources(&self) -> &Arc<[ResourceSpec]> {
        &self.resources
    }
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
    let snapshot =
        Snapshot::from_routes_file(&file, 1, &Snapshot::empty(), &mut Catalog::default())
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
        let snapshot =
            Snapshot::from_routes_file(&file, 1, &Snapshot::empty(), &mut Catalog::default())
                .unwrap();
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
        let refused =
            Snapshot::from_routes_file(&file, 1, &Snapshot::empty(), &mut Catalog::default()).err();
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
        let snapshot =
            Snapshot::from_control_plane(&cp, 1, &Snapshot::empty(), &mut Catalog::default())
                .unwrap();
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
        let first =
            Snapshot::from_routes_file(&file, 1, &Snapshot::empty(), &mut Catalog::default())
                .unwrap();
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
            .runtime
            .counters
            .commands
            .add(crate::cmd::Command::Get, 3);
        let second = Snapshot::from_routes_file(&file, 2, &first, &mut Catalog::default()).unwrap();
        let kept: Vec<_> = second
            .tenant_by_name("mid")
            .unwrap()
            .runtime
            .counters
            .commands
            .counts()
            .collect();
        assert_eq!(kept, [("get", 3)]);
    }
}
