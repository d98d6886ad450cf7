//! A tenant's route table, compiled for the data path: placement built once, every resource parsed into what the
//! gateway connects to (a node, a cluster, a sentinel-managed master), or the error its commands get when this
//! version cannot serve it.

use switchyard_schemas::placement::Placement;
use switchyard_schemas::{AckMode, ReadPolicy, ResourceKind, ResourceUrl, RouteTable, Target};

use crate::backend::{ClusterSpec, NodeRole, NodeSpec, ResourceSpec, SentinelSpec};

pub struct RoutePlan {
    /// `None` for a single target (no hashing at all).
    pub placement: Option<Placement>,
    pub shards: Vec<TargetPlan>,
    /// Shard names, for `explain` and errors.
    pub shard_names: Vec<String>,
}

pub struct TargetPlan {
    pub read: Vec<ResourcePlan>,
    pub read_policy: ReadPolicy,
    /// The primary first, then double-write secondaries.
    pub write: Vec<ResourcePlan>,
    pub ack: AckMode,
}

/// One resource: its display form (the URL without credentials) and what to connect to.
pub struct ResourcePlan {
    pub name: String,
    pub spec: Result<ResourceSpec, String>,
}

impl RoutePlan {
    /// Compiles a validated route; `resolve` maps a resource name to its URL.
    pub fn new(route: &RouteTable, resolve: &dyn Fn(&str) -> String) -> RoutePlan {
        match route {
            RouteTable::Single { target } => RoutePlan {
                placement: None,
                shards: vec![TargetPlan::new(target, resolve)],
                shard_names: vec!["single".to_string()],
            },
            RouteTable::Sharded { hash, shards } => RoutePlan {
                placement: (shards.len() > 1).then(|| Placement::new(hash, shards)),
                shards: shards
                    .iter()
                    .map(|s| TargetPlan::new(&s.target, resolve))
                    .collect(),
                shard_names: shards.iter().map(|s| s.name.clone()).collect(),
            },
        }
    }

    /// The shard that owns `key`.
    pub fn shard_of(&self, key: &[u8]) -> usize {
        self.placement.as_ref().map_or(0, |p| p.shard_of(key))
    }

    /// Where `key` goes, for people: shard, read resources (with policy), write resources (with ack mode).
    pub fn explain(&self, key: &[u8]) -> String {
        let shard = self.shard_of(key);
        let names = |resources: &[ResourcePlan]| {
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
    pub fn resources(&self) -> impl Iterator<Item = &ResourceSpec> {
        self.shards
            .iter()
            .flat_map(|shard| shard.read.iter().chain(shard.write.iter()))
            .filter_map(|resource| resource.spec.as_ref().ok())
    }

    /// Whether some resource is a Redis Cluster, where only database 0 exists.
    pub fn has_cluster(&self) -> bool {
        self.resources()
            .any(|spec| matches!(spec, ResourceSpec::Cluster(_)))
    }

    /// The database of the first write resource (what `SELECT 0` means for this tenant).
    pub fn base_db(&self) -> u32 {
        self.shards
            .first()
            .and_then(|shard| shard.write.first())
            .and_then(|resource| resource.spec.as_ref().ok())
            .map_or(0, ResourceSpec::db)
    }
}

impl TargetPlan {
    fn new(target: &Target, resolve: &dyn Fn(&str) -> String) -> TargetPlan {
        let plan = |references: &[String]| {
            references
                .iter()
                .map(|r| ResourcePlan::new(&resolve(r)))
                .collect()
        };
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
    fn new(url: &str) -> ResourcePlan {
        let parsed = ResourceUrl::parse(url);
        let name = match &parsed {
            Ok(ResourceUrl {
                kind: ResourceKind::Standalone { node, db },
                ..
            }) => format!("{node}/{db}"),
            _ => url.rsplit('@').next().unwrap_or(url).to_string(),
        };
        let spec = match parsed {
            Err(e) => Err(format!("ERR bad resource URL: {e}")),
            Ok(url) if url.tls => Err(
                "ERR TLS backends (rediss://) are not supported by this gateway version"
                    .to_string(),
            ),
            Ok(url) => {
                let username = url.auth.as_ref().and_then(|a| a.username.clone());
                let password = url.auth.map(|a| a.password);
                Ok(match url.kind {
                    ResourceKind::Standalone { node, db } => ResourceSpec::Node(NodeSpec {
                        addr: node.to_string(),
                        username,
                        password,
                        db,
                        role: NodeRole::Any,
                    }),
                    ResourceKind::Cluster { seeds, replicas } => {
                        ResourceSpec::Cluster(ClusterSpec {
                            seeds: seeds.iter().map(ToString::to_string).collect(),
                            username,
                            password,
                            replicas,
                        })
                    }
                    ResourceKind::Sentinel {
                        sentinels,
                        master_name,
                        db,
                        sentinel_auth,
                        replicas,
                    } => ResourceSpec::Sentinel(
                        SentinelSpec {
                            sentinels: sentinels.iter().map(ToString::to_string).collect(),
                            master_name,
                            sentinel_username: sentinel_auth
                                .as_ref()
                                .and_then(|a| a.username.clone()),
                            sentinel_password: sentinel_auth.map(|a| a.password),
                            username,
                            password,
                            db,
                        },
                        replicas,
                    ),
                })
            }
        };
        ResourcePlan { name, spec }
    }
}

/// The name a policy or ack mode has in route tables.
fn serde_name(value: &impl serde::Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}
