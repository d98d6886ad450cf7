//! A tenant's route table, compiled for the data path: placement built once, every resource parsed into what the
//! gateway connects to (a node, a cluster, a sentinel-managed master), or the error its commands get when this
//! version cannot serve it.

use std::sync::Arc;

use switchyard_schemas::placement::Placement;
use switchyard_schemas::resource::TlsOptions;
use switchyard_schemas::{
    AckMode, ReadPolicy, ResourceKind, ResourceUrl, RouteTable, ScriptsPolicy, Target,
};

use crate::backend::{ClusterSpec, NodeRole, NodeSpec, ResourceSpec, SentinelSpec};
use crate::resp::Protocol;
use crate::tls::BackendTls;
use switchyard_schemas::placement::slot_of;

pub(crate) struct RoutePlan {
    /// `None` for a single target (no hashing at all).
    pub placement: Option<Placement>,
    /// A double-write table's secondary table. Its shards are then every (primary shard, secondary shard) pair,
    /// `primary × count + secondary`, each a target that writes the primary's write set and then the
    /// secondary's: the data path double-writes exactly as it does for one target.
    paired: Option<Secondary>,
    pub shards: Vec<TargetPlan>,
    /// Shard names, for `explain` and errors.
    pub shard_names: Vec<String>,
    /// How many databases the route grants the tenant (see `RouteTable::databases`).
    granted: u32,
}

/// Where a double-write table's secondary table places keys: its shard, and the cluster slot in a shard served
/// by a Redis Cluster. During a migration it is the destination, against which readiness checks commands.
pub(crate) struct Secondary {
    placement: Option<Placement>,
    count: usize,
    /// By shard: whether one of its resources is a Redis Cluster (keys must then share a slot).
    clustered: Box<[bool]>,
}

impl Secondary {
    fn shard_of(&self, key: &[u8]) -> usize {
        self.placement.as_ref().map_or(0, |p| p.shard_of(key))
    }

    /// Which keys may go together in one command there: keys of one group may, keys of two may not.
    pub(crate) fn group_of(&self, key: &[u8]) -> (usize, u16) {
        let shard = self.shard_of(key);
        let clustered = self.clustered.get(shard).copied().unwrap_or(false);
        (shard, if clustered { slot_of(key) } else { 0 })
    }

    /// Whether some command could fail there for its keys' places: several shards, or a cluster. A single
    /// plain Redis takes every multi-key command.
    pub(crate) fn splits_keys(&self) -> bool {
        self.count > 1 || self.clustered.iter().any(|&c| c)
    }
    /// Where `table` (a readiness probe's destination) places keys, from the table alone: its placement, and
    /// which shards a Redis Cluster serves (their primary write resource's URL says). No resource is planned:
    /// nothing is ever sent there. None for a double-write table, which is no destination.
    pub(crate) fn of_table(table: &RouteTable) -> Option<Secondary> {
        let clustered = |target: &Target| {
            target.write_resources().first().is_some_and(|url| {
                ResourceUrl::parse(url)
                    .is_ok_and(|r| matches!(r.kind, ResourceKind::Cluster { .. }))
            })
        };
        match table {
            RouteTable::Single { target, .. } => Some(Secondary {
                placement: None,
                count: 1,
                clustered: Box::new([clustered(target)]),
            }),
            RouteTable::Sharded { hash, shards, .. } => Some(Secondary {
                placement: (shards.len() > 1).then(|| Placement::new(hash, shards)),
                count: shards.len(),
                clustered: shards.iter().map(|s| clustered(&s.target)).collect(),
            }),
            RouteTable::DoubleWrite { .. } => None,
        }
    }
}

pub(crate) struct TargetPlan {
    pub read: Vec<Arc<ResourcePlan>>,
    pub read_policy: ReadPolicy,
    /// The primary first, then double-write secondaries.
    pub write: Vec<Arc<ResourcePlan>>,
    pub ack: AckMode,
}

/// One resource: its display form (the URL without credentials) and what to connect to. Made once per URL in a
/// snapshot, and shared by every tenant that names it.
pub(crate) struct ResourcePlan {
    pub name: String,
    pub spec: Result<ResourceSpec, String>,
    /// The scripts policy of the tenants routed here that have none of their own (the URL's `scripts`).
    pub scripts: Option<ScriptsPolicy>,
}

impl RoutePlan {
    /// Compiles a validated route; `resolve` maps a resource (its name or URL) to its plan.
    pub(crate) fn new(
        route: &RouteTable,
        resolve: &dyn Fn(&str) -> Arc<ResourcePlan>,
    ) -> RoutePlan {
        let mut plan = RoutePlan::compile(route, resolve);
        plan.granted = route.databases();
        plan
    }

    fn compile(route: &RouteTable, resolve: &dyn Fn(&str) -> Arc<ResourcePlan>) -> RoutePlan {
        match route {
            RouteTable::Single { target, .. } => RoutePlan {
                placement: None,
                shards: vec![TargetPlan::new(target, resolve)],
                paired: None,
                shard_names: vec!["single".to_string()],
                granted: 1,
            },
            RouteTable::Sharded { hash, shards, .. } => RoutePlan {
                placement: (shards.len() > 1).then(|| Placement::new(hash, shards)),
                shards: shards
                    .iter()
                    .map(|s| TargetPlan::new(&s.target, resolve))
                    .collect(),
                paired: None,
                shard_names: shards.iter().map(|s| s.name.clone()).collect(),
                granted: 1,
            },
            RouteTable::DoubleWrite {
                primary,
                secondary,
                ack,
            } => {
                let (primary, secondary) = (
                    RoutePlan::compile(primary, resolve),
                    RoutePlan::compile(secondary, resolve),
                );
                let mut shards = Vec::new();
                let mut shard_names = Vec::new();
                for (p, p_name) in primary.shards.iter().zip(&primary.shard_names) {
                    for (s, s_name) in secondary.shards.iter().zip(&secondary.shard_names) {
                        shards.push(TargetPlan {
                            read: p.read.clone(),
                            read_policy: p.read_policy,
                            write: p.write.iter().chain(&s.write).cloned().collect(),
                            ack: *ack,
                        });
                        shard_names.push(format!("{p_name}+{s_name}"));
                    }
                }
                let clustered = secondary.shards.iter().map(TargetPlan::clustered).collect();
                RoutePlan {
                    placement: primary.placement,
                    paired: Some(Secondary {
                        placement: secondary.placement,
                        count: secondary.shards.len(),
                        clustered,
                    }),
                    shards,
                    shard_names,
                    granted: 1,
                }
            }
        }
    }

    /// The shard that owns `key`.
    pub(crate) fn shard_of(&self, key: &[u8]) -> usize {
        let primary = self.placement.as_ref().map_or(0, |p| p.shard_of(key));
        match &self.paired {
            None => primary,
            Some(secondary) => primary * secondary.count + secondary.shard_of(key),
        }
    }

    /// A double-write table's secondary table (a migration's destination).
    pub(crate) fn secondary(&self) -> Option<&Secondary> {
        self.paired.as_ref()
    }

    /// The shards a keyless command visits, each primary shard once (for reads: DBSIZE, KEYS, SCAN) or, for
    /// writes (FLUSHDB), every primary and every secondary shard at least once.
    pub(crate) fn fan_out(&self, write: bool) -> Vec<usize> {
        let Some(count) = self.paired.as_ref().map(|secondary| secondary.count) else {
            return (0..self.shards.len()).collect();
        };
        let primaries = self.shards.len() / count.max(1);
        if !write {
            return (0..primaries).map(|p| p * count).collect();
        }
        (0..primaries.max(count))
            .map(|k| (k % primaries) * count + k % count)
            .collect()
    }

    /// The resource a command on `key` (none: a keyless one) goes to first, as `GET /tenants` names it: its
    /// shard's primary for a write, its first read resource for a read. None for a keyless command on a route
    /// of several shards.
    pub(crate) fn resource_of(&self, key: Option<&[u8]>, write: bool) -> Option<&str> {
        let shard = match key {
            Some(key) => self.shard_of(key),
            None if self.shards.len() == 1 => 0,
            None => return None,
        };
        let target = self.shards.get(shard)?;
        let resources = if write { &target.write } else { &target.read };
        Some(resources.first()?.name.as_str())
    }

    /// Where `key` goes, for people: shard, read resources (with policy), write resources (with ack mode).
    pub(crate) fn explain(&self, key: &[u8]) -> String {
        let shard = self.shard_of(key);
        let names = |resources: &[Arc<ResourcePlan>]| {
            resources
                .iter()
                .map(|r| r.name.as_str())
                .collect::<Vec<_>>()
                .join(",")
        };
        match (self.shards.get(shard), self.shard_names.get(shard)) {
            (Some(target), Some(name)) => format!(
                "{}\tshard={name}\tread={} ({})\twrite={} (ack {})",
                String::from_utf8_lossy(key),
                names(&target.read),
                serde_name(&target.read_policy),
                names(&target.write),
                serde_name(&target.ack)
            ),
            _ => format!("{}\tno shard", String::from_utf8_lossy(key)),
        }
    }

    /// Every resource any shard may use.
    pub(crate) fn resources(&self) -> impl Iterator<Item = &ResourceSpec> {
        self.resource_plans()
            .filter_map(|resource| resource.spec.as_ref().ok())
    }

    /// Every resource any shard names, as planned (those that cannot be served included).
    pub(crate) fn resource_plans(&self) -> impl Iterator<Item = &Arc<ResourcePlan>> {
        self.shards
            .iter()
            .flat_map(|shard| shard.read.iter().chain(shard.write.iter()))
    }

    /// The scripts policy the route's resources set for tenants without one of their own: the strictest of them
    /// (a script runs on whichever resource its keys place it).
    pub(crate) fn scripts(&self) -> Option<ScriptsPolicy> {
        self.shards
            .iter()
            .flat_map(|shard| shard.read.iter().chain(shard.write.iter()))
            .filter_map(|resource| resource.scripts)
            .max()
    }

    /// Whether some resource is a Redis Cluster, where only database 0 exists.
    pub(crate) fn has_cluster(&self) -> bool {
        self.resources()
            .any(|spec| matches!(spec, ResourceSpec::Cluster(_)))
    }

    /// The databases a client may SELECT, numbered from the resource's own (see `ResourceSpec::with_db`). A
    /// tenant owns exactly the database its resource names, and the next ones its route grants
    /// (`RouteTable::databases`), so tenants that share a Redis stay apart; an admin tenant whose resource names
    /// db 0 may use all 16 (Redis' test suites and admin tools need them); a Redis Cluster has only db 0.
    pub(crate) fn databases(&self, admin: bool) -> std::ops::Range<i64> {
        if self.has_cluster() {
            return 0..1;
        }
        let granted = i64::from(self.granted);
        match admin && self.base_db() == 0 {
            true => 0..granted.max(16),
            false => 0..granted,
        }
    }

    /// The database of the first write resource (what `SELECT 0` means for this tenant).
    pub(crate) fn base_db(&self) -> u32 {
        self.resource_db(0, 0)
    }

    /// The own database of write resource `index` of shard `shard` (0 for a cluster, or a resource that is not
    /// there).
    pub(crate) fn resource_db(&self, shard: usize, index: usize) -> u32 {
        self.shards
            .get(shard)
            .and_then(|shard| shard.write.get(index))
            .and_then(|resource| resource.spec.as_ref().ok())
            .map_or(0, ResourceSpec::db)
    }
}

impl TargetPlan {
    /// Whether one of its resources is a Redis Cluster.
    fn clustered(&self) -> bool {
        self.read
            .iter()
            .chain(&self.write)
            .any(|resource| matches!(resource.spec, Ok(ResourceSpec::Cluster(_))))
    }

    fn new(target: &Target, resolve: &dyn Fn(&str) -> Arc<ResourcePlan>) -> TargetPlan {
        let plan = |references: &[String]| references.iter().map(|r| resolve(r)).collect();
        let (read_policy, ack) = (target.read_policy(), target.ack());
        TargetPlan {
            read: plan(target.read_resources()),
            read_policy,
            write: plan(target.write_resources()),
            ack,
        }
    }
}

impl ResourcePlan {
    pub(crate) fn new(url: &str) -> ResourcePlan {
        let parsed = ResourceUrl::parse(url);
        let name = switchyard_schemas::resource_location(url);
        let scripts = parsed.as_ref().ok().and_then(|url| url.scripts);
        let spec = match parsed {
            Err(e) => Err(format!("ERR bad resource URL: {e}")),
            Ok(url) => resource_spec(url),
        };
        ResourcePlan {
            name,
            spec,
            scripts,
        }
    }
}

/// What serves a resource, from its parsed URL; `Err` is the error its requests get.
fn resource_spec(url: ResourceUrl) -> Result<ResourceSpec, String> {
    let tls = backend_tls(url.tls.as_ref())?;
    let username = url.auth.as_ref().and_then(|a| a.username.clone());
    let password = url.auth.map(|a| a.password);
    let script_user = url
        .script_auth
        .map(|a| (a.username.unwrap_or_default(), a.password));
    Ok(match url.kind {
        ResourceKind::Standalone { node, db } => ResourceSpec::Node(NodeSpec {
            addr: node.to_string(),
            username,
            password,
            db,
            role: NodeRole::Any,
            script_user,
            protocol: Protocol::Resp2,
            tls,
        }),
        ResourceKind::Cluster { seeds, replicas } => ResourceSpec::Cluster(ClusterSpec {
            seeds: seeds.iter().map(ToString::to_string).collect(),
            username,
            password,
            replicas,
            script_user,
            protocol: Protocol::Resp2,
            tls,
        }),
        ResourceKind::Sentinel {
            sentinels,
            master_name,
            db,
            sentinel_auth,
            sentinel_tls,
            replicas,
        } => ResourceSpec::Sentinel(
            SentinelSpec {
                sentinels: sentinels.iter().map(ToString::to_string).collect(),
                master_name,
                sentinel_username: sentinel_auth.as_ref().and_then(|a| a.username.clone()),
                sentinel_password: sentinel_auth.map(|a| a.password),
                username,
                password,
                db,
                script_user,
                protocol: Protocol::Resp2,
                tls,
                sentinel_tls: backend_tls(sentinel_tls.as_ref())?,
            },
            replicas,
        ),
    })
}

/// The TLS configuration for a resource's options; `Err` is the error its requests get.
fn backend_tls(options: Option<&TlsOptions>) -> Result<Option<Arc<BackendTls>>, String> {
    options
        .map(|options| {
            BackendTls::get(options).map_err(|e| format!("ERR resource TLS settings: {e}"))
        })
        .transpose()
}

/// The name a policy or ack mode has in route tables.
fn serde_name(value: &impl serde::Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(json: &str) -> RouteTable {
        serde_json::from_str(json).unwrap()
    }

    /// A double-write table places each key by both tables' own sharding, and its pair writes the primary's
    /// resource first, then the secondary's.
    #[test]
    fn double_write_pairs_both_placements() {
        let three = r#"{"type":"sharded","shards":[{"name":"a","target":"redis://127.0.0.1:1"},
            {"name":"b","target":"redis://127.0.0.1:2"},{"name":"c","target":"redis://127.0.0.1:3"}]}"#;
        let old = r#"{"type":"single","target":"redis://127.0.0.1:9"}"#;
        let route = table(&format!(
            r#"{{"type":"double_write","primary":{old},"secondary":{three},"ack":"all"}}"#
        ));
        let identity = |r: &str| Arc::new(ResourcePlan::new(r));
        let plan = RoutePlan::new(&route, &identity);
        let secondary = RoutePlan::new(&table(three), &identity);
        assert_eq!(plan.shards.len(), 3);
        for key in ["a", "b", "user:1", "{x}y", "zzz"] {
            let pair = &plan.shards[plan.shard_of(key.as_bytes())];
            let placed = &secondary.shards[secondary.shard_of(key.as_bytes())];
            let names: Vec<&str> = pair.write.iter().map(|r| r.name.as_str()).collect();
            assert_eq!(names, ["127.0.0.1:9/0", placed.write[0].name.as_str()]);
            assert_eq!(pair.read[0].name, "127.0.0.1:9/0");
            assert_eq!(pair.ack, AckMode::All);
        }
        // Reads visit the one primary shard once; writes reach every secondary shard.
        assert_eq!(plan.fan_out(false), [0]);
        assert_eq!(plan.fan_out(true), [0, 1, 2]);
        let swapped = table(&format!(
            r#"{{"type":"double_write","primary":{three},"secondary":{old}}}"#
        ));
        let swapped = RoutePlan::new(&swapped, &identity);
        assert_eq!(swapped.fan_out(false), [0, 1, 2]);
        assert_eq!(swapped.fan_out(true), [0, 1, 2]);
    }

    /// A key of a tenant with a key namespace is placed as stored, with its prefix (golden: a slot, and the ring's
    /// shard), as camellia's key-prefix converter places it.
    #[test]
    fn a_namespaced_key_is_placed_as_stored() {
        use switchyard_schemas::placement::slot_of;
        let ring = r#"{"type":"sharded","shards":[{"name":"a","target":"redis://127.0.0.1:1"},
            {"name":"b","target":"redis://127.0.0.1:2"},{"name":"c","target":"redis://127.0.0.1:3"}]}"#;
        let plan = RoutePlan::new(&table(ring), &|r: &str| Arc::new(ResourcePlan::new(r)));
        let stored = |namespace: &str, key: &str| {
            let args = crate::cmd::words(&["GET", key]);
            let spec = crate::cmd::resolve(&args).unwrap();
            let request = crate::resp::Request::from_args(args);
            let namespace = crate::tenancy::Namespace::new(namespace);
            namespace.outbound(spec, request).unwrap().0.args()[1].clone()
        };
        assert_eq!(&stored("shop:", "cart")[..], b"shop:cart");
        assert_eq!(slot_of(&stored("shop:", "cart")), 7599);
        assert_eq!(
            plan.shard_of(&stored("shop:", "cart")),
            plan.shard_of(b"shop:cart")
        );
        assert_eq!(plan.shard_of(b"shop:cart"), 0);
        assert_eq!(
            ["a", "b", "c", "d"].map(|k| plan.shard_of(&stored("shop:", k))),
            [1, 1, 0, 0]
        );
        // Without braces, the tenant's own hash tags keep deciding co-location.
        for tag in ["{u1}", "{u2}", "{u3}"] {
            let cart = stored("shop:", &format!("{tag}:cart"));
            let orders = stored("shop:", &format!("{tag}:orders"));
            assert_eq!(slot_of(&cart), slot_of(&orders));
            assert_eq!(slot_of(&cart), slot_of(tag.as_bytes()));
            assert_eq!(plan.shard_of(&cart), plan.shard_of(&orders));
        }
        // `{shop}:` puts every key of the tenant in one slot and on one shard, its own tags included.
        for key in ["cart", "{u1}:cart", "x"] {
            let key = stored("{shop}:", key);
            assert_eq!(slot_of(&key), slot_of(b"shop"));
            assert_eq!(plan.shard_of(&key), plan.shard_of(b"{shop}:"));
        }
    }
}
