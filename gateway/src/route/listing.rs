//! What a snapshot serves, for people and tests (the admin port's `GET /tenants`): read from the compiled
//! structures the data path uses (the tenants, their compiled routes, the credential index), never from the
//! JSON they were built from, so that two gateways serving the same thing list the same thing however they got
//! there. Credentials appear as a count and a hash of the digests, never a digest itself.

use std::sync::Arc;

use serde::Serialize;
use switchyard_schemas::{AckMode, ReadPolicy, TenantLimits, credential_digest};

use super::{ResourcePlan, Snapshot};

#[derive(Serialize)]
pub(crate) struct Listing<'a> {
    revision: Option<i64>,
    epoch: Option<&'a str>,
    generation: u64,
    tenants: Vec<TenantListing<'a>>,
}

#[derive(Serialize)]
struct TenantListing<'a> {
    name: &'a str,
    allow_admin: bool,
    limits: &'a TenantLimits,
    /// How many databases its clients may SELECT (0 to this, exclusive).
    databases: i64,
    shards: Vec<ShardListing<'a>>,
    /// How many digests the credential index maps to the tenant.
    credentials: usize,
    /// SHA-256 (hex) of those digests, sorted and joined by "\n".
    credentials_sha256: String,
}

#[derive(Serialize)]
struct ShardListing<'a> {
    name: &'a str,
    /// Resources by their display names (no credentials).
    read: Vec<&'a str>,
    read_policy: ReadPolicy,
    write: Vec<&'a str>,
    ack: AckMode,
}

impl Snapshot {
    /// What this snapshot serves, tenants sorted by name.
    pub(crate) fn listing(&self) -> Listing<'_> {
        let digests = self.by_digest.digests(&self.tenants);
        let tenants = self
            .tenants
            .iter()
            .zip(digests)
            .map(|(tenant, digests)| TenantListing {
                name: &tenant.name,
                allow_admin: tenant.allow_admin,
                limits: &tenant.limits,
                databases: tenant.databases().end,
                shards: tenant
                    .route
                    .shards
                    .iter()
                    .zip(&tenant.route.shard_names)
                    .map(|(shard, name)| ShardListing {
                        name,
                        read: names(&shard.read),
                        read_policy: shard.read_policy,
                        write: names(&shard.write),
                        ack: shard.ack,
                    })
                    .collect(),
                credentials: digests.len(),
                credentials_sha256: credential_digest(&digests.join("\n")),
            })
            .collect();
        Listing {
            revision: self.revision,
            epoch: self.epoch.as_deref(),
            generation: self.generation,
            tenants,
        }
    }
}

fn names(resources: &[Arc<ResourcePlan>]) -> Vec<&str> {
    resources.iter().map(|r| r.name.as_str()).collect()
}
