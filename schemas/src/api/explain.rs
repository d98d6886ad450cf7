//! `.../route/explain`: where keys go under a tenant's current route, as the control plane answers it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `GET .../route/explain?key=K`: where a key goes under the current route, computed by the placement code the
/// gateways use. `shard`, `bucket`, `ring_point`, `read` and `write` are the key's place in the table that serves
/// reads (a double-write table's primary); `writes` lists every place a write goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RouteExplanation {
    pub key: String,
    pub version: i64,
    /// The shard's name; `null` for a single-target route.
    pub shard: Option<String>,
    /// The key's bucket under a bucket algorithm (`crc16`: with 16,384 buckets, its Redis Cluster slot;
    /// `camellia`, `camellia_hashtag`); `null` for the ring and single-target routes.
    pub bucket: Option<u32>,
    /// The key's point on the ring (`ring` hash only).
    pub ring_point: Option<RingPoint>,
    /// Read resources (names or URLs without passwords), in policy order.
    pub read: Vec<String>,
    pub read_policy: crate::ReadPolicy,
    /// The write set of the key's target in the table that serves reads, in order (each write is copied to
    /// every one).
    pub write: Vec<String>,
    /// When a write is answered (a double-write table's own `ack`).
    pub ack: crate::AckMode,
    /// Every table a write of this key goes to, in the order written: one for a plain route; for a double-write
    /// route (a migration's), the primary then the secondary, each placed by its own sharding.
    pub writes: Vec<WritePlace>,
    /// The tenant's active migration, whose double-write route this is.
    pub migration: Option<i64>,
}

/// A key's place on the ring: its 64-bit hash and the ring point (virtual node) that owns it, the first at or
/// after the hash. Both as 16 hex digits (JSON numbers lose precision above 2^53).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RingPoint {
    pub hash: String,
    pub point: String,
}

/// One table a write goes to, and the key's place in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct WritePlace {
    pub table: WriteTable,
    pub shard: Option<String>,
    pub bucket: Option<u32>,
    pub ring_point: Option<RingPoint>,
    /// The target's write set (names or URLs without passwords), in order.
    pub write: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WriteTable {
    /// The route itself (not a double-write one).
    Route,
    /// A double-write route's primary (during a migration: the source until cutover, then the destination).
    Primary,
    /// A double-write route's secondary (during a migration: the destination until cutover, then the source).
    Secondary,
}

/// Most keys one `POST .../route/explain` places.
pub const MAX_EXPLAIN_KEYS: usize = 1_000;

/// `POST .../route/explain`: several keys at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteExplainKeys {
    /// 1 to 1,000 keys.
    pub keys: Vec<String>,
}

/// The answer to `POST .../route/explain`: one explanation per key, in the order given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RouteExplanations {
    pub version: i64,
    pub explanations: Vec<RouteExplanation>,
}
