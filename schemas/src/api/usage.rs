//! What gateways report of their tenants' traffic (usage: requests, errors, bytes, connections, each credential's
//! connections and last AUTH, the near cache's figures), and the control plane's views of it over its window
//! (docs/usage.md).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One tenant's traffic on one gateway since that gateway's last report (a part of `ObservationReport`): counts
/// are what was added over the report's `interval_ms`, `connections` is what is open at the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantUsage {
    pub tenant: String,
    /// Commands the tenant's clients sent (refused ones included).
    pub commands: u64,
    /// Error replies written to the tenant's clients.
    pub errors: u64,
    /// Bytes read from the tenant's clients.
    pub bytes_in: u64,
    /// Bytes written to them.
    pub bytes_out: u64,
    /// Client connections open in the tenant at the report.
    pub connections: i64,
    /// The 99th percentile of the interval's command latency, in microseconds, as the upper bound of its
    /// histogram bucket; only where the gateway times each tenant (`--metrics-tenant-latency`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_us: Option<u64>,
    /// The credentials with connections open, or whose count or last AUTH changed since the last report.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<CredentialUsage>,
    /// Its near cache (docs/near-cache.md), where it has one that did something since the last report or holds
    /// entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub near_cache: Option<NearCacheUsage>,
}

/// A tenant's near cache on one gateway: counts over the report's interval (or, in a usage point, over the minute,
/// every gateway's summed), and the bytes its entries hold at the report (in a usage point: each gateway's last
/// report of the minute, summed).
/// (Unknown fields are not refused here, as in `TenantUsage`: a `NearCacheMinute` flattens it beside its ratio.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NearCacheUsage {
    /// Reads answered from the cache.
    pub hits: u64,
    /// Reads of the kind it answers that went to Redis.
    pub misses: u64,
    /// Entries dropped because their key changed or their tracking connection went down.
    pub invalidations: u64,
    /// Entries evicted to stay within the tenant's or the gateway's bound.
    pub evictions: u64,
    /// Bytes its entries hold.
    pub bytes: u64,
}

/// One credential's use on one gateway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CredentialUsage {
    /// The credential's digest, as the snapshot carries it.
    pub digest: String,
    /// Client connections open that authenticated with it.
    pub connections: i64,
    /// Its last successful AUTH (or TLS handshake, for a client certificate) since the last report, in
    /// milliseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_auth_ms: Option<i64>,
}

/// A credential's last successful AUTH, as `GET /v1/tenants/{tenant}/credentials` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CredentialLastUse {
    /// RFC 3339.
    pub at: String,
    /// The gateway it authenticated on.
    pub gateway: String,
}

/// A stretch of traffic as rates, every gateway's summed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UsageRates {
    pub ops_per_sec: f64,
    pub errors_per_sec: f64,
    pub bytes_in_per_sec: f64,
    pub bytes_out_per_sec: f64,
    /// Client connections open (each gateway's last report, summed).
    pub connections: i64,
    /// The highest p99 a gateway reported, in microseconds (absent where not measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_us: Option<u64>,
}

/// One minute of a tenant's traffic (or every tenant's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UsagePoint {
    /// The minute's start, in seconds since the Unix epoch.
    pub minute: i64,
    #[serde(flatten)]
    pub usage: UsageRates,
    /// The tenant's near cache over the minute (every tenant's summed, in the overview), where a gateway reported
    /// one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub near_cache: Option<NearCacheMinute>,
}

/// A minute of a near cache, every gateway's summed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NearCacheMinute {
    #[serde(flatten)]
    pub usage: NearCacheUsage,
    /// hits / (hits + misses); absent without a read of the kind it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hit_ratio: Option<f64>,
}

impl NearCacheMinute {
    /// The figures, with their hit ratio.
    pub fn new(usage: NearCacheUsage) -> NearCacheMinute {
        let reads = usage.hits.saturating_add(usage.misses);
        let hit_ratio = (reads > 0).then(|| usage.hits as f64 / reads as f64);
        NearCacheMinute { usage, hit_ratio }
    }
}

/// `GET /v1/tenants/{tenant}/usage`: the tenant's traffic minute by minute over the window, oldest first; a minute
/// without any report is left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TenantUsageSeries {
    pub tenant: String,
    pub points: Vec<UsagePoint>,
    /// The window the points cover, in seconds.
    pub window_s: u64,
    /// The length of one point, in seconds.
    pub resolution_s: u64,
}

/// One tenant's traffic now (its last two minutes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TenantUsageNow {
    pub tenant: String,
    #[serde(flatten)]
    pub usage: UsageRates,
}

/// `GET /v1/usage`: the platform at a glance: the busiest tenants now by ops/s, by errors and by connections.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UsageOverview {
    pub by_ops: Vec<TenantUsageNow>,
    pub by_errors: Vec<TenantUsageNow>,
    pub by_connections: Vec<TenantUsageNow>,
    /// Every tenant's traffic summed, minute by minute over the window.
    pub total: Vec<UsagePoint>,
    /// How far back "now" reaches, in seconds.
    pub recent_s: u64,
    pub window_s: u64,
}

/// `GET /v1/tenants/{tenant}/keyspace`: how many keys the tenant holds and the memory they take, asked of its
/// Redis at the request (docs/usage.md#keys-and-memory).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TenantKeyspace {
    pub tenant: String,
    /// `exact`: the tenant owns its databases whole, and `keys` is their `DBSIZE`; `sampled`: it shares them
    /// under a key namespace, and `keys` is the share of random keys in its namespace times `DBSIZE`;
    /// `shared`: it has no namespace but other tenants (`shared_with`) reach its databases too, and `keys` is
    /// their `DBSIZE`, everyone's keys there.
    pub method: KeyspaceMethod,
    /// The other tenants whose routes reach its databases.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_with: Vec<String>,
    /// Every server's count summed (absent when some server could not be asked: see `error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<u64>,
    /// The servers' `used_memory`, each apportioned by the tenant's share of the keys it holds (Redis counts
    /// memory per server, not per database or key prefix): an estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Each server holding the tenant's data (the primary write resource of each shard).
    pub servers: Vec<ServerKeyspace>,
    /// Why the figures are missing: no route, or a server that did not answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the servers were asked (RFC 3339).
    pub asked_at: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeyspaceMethod {
    Exact,
    Sampled,
    Shared,
}

/// What one server says of the tenant's database.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ServerKeyspace {
    /// `host:port`.
    pub server: String,
    /// Keys in the tenant's database there (`DBSIZE`).
    pub db_keys: u64,
    /// Keys in every database there (`INFO keyspace`).
    pub server_keys: u64,
    /// The server's `used_memory`.
    pub used_memory: u64,
    /// The tenant's keys there: `db_keys`, or for a namespace its sampled share of them.
    pub keys: u64,
    /// With a namespace: random keys drawn (`RANDOMKEY`) and how many were the tenant's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched: Option<u32>,
}
