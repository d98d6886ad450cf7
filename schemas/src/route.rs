//! The route table: which backend(s) serve a tenant's commands.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A tenant's route table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum RouteTable {
    /// Every command goes to one target.
    Single {
        target: Target,
        /// How many databases the tenant owns, from its resources' own (see [`RouteTable::databases`]).
        #[serde(default = "one", skip_serializing_if = "is_one")]
        databases: u32,
    },
    /// Keys are spread over shards by a hash of the key (or of its `{hash tag}`).
    Sharded {
        #[serde(default)]
        hash: HashSpec,
        shards: Vec<Shard>,
        /// How many databases the tenant owns, from its resources' own (see [`RouteTable::databases`]).
        #[serde(default = "one", skip_serializing_if = "is_one")]
        databases: u32,
    },
    /// Two tables written together while a tenant moves between deployments (the migration workflow): each
    /// write goes to the key's place in `primary` first, then to its place in `secondary` (placed by the
    /// secondary's own sharding), as a double-written target would; reads are served by `primary` only.
    DoubleWrite {
        primary: Box<RouteTable>,
        secondary: Box<RouteTable>,
        /// When a write is answered; the write sets' own `ack` inside the two tables is not used.
        #[serde(default)]
        ack: AckMode,
    },
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

impl RouteTable {
    /// A single-target table owning one database.
    pub fn single(target: Target) -> RouteTable {
        RouteTable::Single {
            target,
            databases: 1,
        }
    }

    /// How many databases the tenant owns: its resources' own database and the next `databases - 1` (clients
    /// `SELECT` them as 0, 1, ...). One unless the table grants more; a double-write table's is its primary's.
    pub fn databases(&self) -> u32 {
        match self {
            RouteTable::Single { databases, .. } | RouteTable::Sharded { databases, .. } => {
                *databases
            }
            RouteTable::DoubleWrite { primary, .. } => primary.databases(),
        }
    }

    /// The tables that place keys: this one, or the primary and the secondary of a double-write table.
    pub fn parts(&self) -> Vec<&RouteTable> {
        match self {
            RouteTable::DoubleWrite {
                primary, secondary, ..
            } => vec![primary, secondary],
            _ => vec![self],
        }
    }

    /// Every target of the table, the secondary's included.
    pub fn targets(&self) -> Vec<&Target> {
        match self {
            RouteTable::Single { target, .. } => vec![target],
            RouteTable::Sharded { shards, .. } => shards.iter().map(|s| &s.target).collect(),
            RouteTable::DoubleWrite {
                primary, secondary, ..
            } => [primary, secondary]
                .into_iter()
                .flat_map(|t| t.targets())
                .collect(),
        }
    }

    /// Every target of the table, mutably (to inline resource names).
    pub fn targets_mut(&mut self) -> Vec<&mut Target> {
        match self {
            RouteTable::Single { target, .. } => vec![target],
            RouteTable::Sharded { shards, .. } => {
                shards.iter_mut().map(|s| &mut s.target).collect()
            }
            RouteTable::DoubleWrite {
                primary, secondary, ..
            } => [primary, secondary]
                .into_iter()
                .flat_map(|t| t.targets_mut())
                .collect(),
        }
    }
}

/// How a sharded table maps a key to a shard.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "algorithm", rename_all = "snake_case", deny_unknown_fields)]
pub enum HashSpec {
    /// Consistent hash ring over FNV-1a; adding a shard of N moves about 1/N of the keys.
    #[default]
    Ring,
    /// CRC16/XMODEM modulo `buckets`, like Redis Cluster; shards own explicit bucket ranges.
    Crc16 {
        #[serde(default = "default_crc16_buckets")]
        buckets: u32,
    },
    /// camellia-redis-proxy's default sharding (Java `hashCode` of the key bytes), without hash tags.
    Camellia { buckets: u32 },
    /// camellia-redis-proxy's sharding with hash tags honoured.
    CamelliaHashtag { buckets: u32 },
}

impl HashSpec {
    /// The number of buckets shards must cover, or `None` for the ring (which has no buckets).
    pub fn bucket_count(&self) -> Option<u32> {
        match self {
            HashSpec::Ring => None,
            HashSpec::Crc16 { buckets }
            | HashSpec::Camellia { buckets }
            | HashSpec::CamelliaHashtag { buckets } => Some(*buckets),
        }
    }
}

fn default_crc16_buckets() -> u32 {
    16384
}

/// One shard of a sharded table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Shard {
    /// Unique within the table; placement on the ring depends on it, so renaming a shard moves its keys.
    pub name: String,
    pub target: Target,
    /// Ring only: relative share of the keys (virtual nodes = 160 × weight).
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Bucket algorithms only: the buckets this shard owns, as `"N"` or `"FIRST-LAST"` (inclusive).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buckets: Vec<String>,
}

fn default_weight() -> u32 {
    1
}

/// Where a shard's (or a single table's) commands go: a resource, or separate read and write sets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Target {
    /// One resource (a URL, or the name of a registered resource) serves reads and writes.
    Resource(String),
    Split(SplitTarget),
}

/// Separate read and write sets. Unknown fields are refused, so a misspelt `"raed"` is an error, not a read set
/// silently left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SplitTarget {
    /// Defaults to the write primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<ReadSet>,
    pub write: WriteSet,
}

impl Target {
    /// The resources writes go to: the primary first, then the double-write secondaries.
    pub fn write_resources(&self) -> &[String] {
        match self {
            Target::Resource(url) => std::slice::from_ref(url),
            Target::Split(split) => &split.write.resources,
        }
    }

    /// How reads choose among the read resources.
    pub fn read_policy(&self) -> ReadPolicy {
        match self {
            Target::Split(SplitTarget {
                read: Some(read), ..
            }) => read.policy,
            _ => ReadPolicy::Primary,
        }
    }

    /// When a write is answered.
    pub fn ack(&self) -> AckMode {
        match self {
            Target::Split(split) => split.write.ack,
            Target::Resource(_) => AckMode::Primary,
        }
    }

    /// The resources reads may go to (the write primary when no read set is given).
    pub fn read_resources(&self) -> &[String] {
        match self {
            Target::Split(SplitTarget {
                read: Some(read), ..
            }) => &read.resources,
            _ => {
                let writes = self.write_resources();
                &writes[..writes.len().min(1)]
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadSet {
    pub resources: Vec<String>,
    #[serde(default)]
    pub policy: ReadPolicy,
}

/// Which read resource serves a read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReadPolicy {
    /// Always the first resource.
    #[default]
    Primary,
    /// Any healthy resource.
    Random,
    /// The first healthy resource (a failover list).
    Ordered,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteSet {
    /// The primary first, then double-write secondaries in the order they are written.
    pub resources: Vec<String>,
    #[serde(default)]
    pub ack: AckMode,
}

/// When a double-written command is answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AckMode {
    /// As soon as the primary answers; secondaries complete in the background.
    #[default]
    Primary,
    /// After every resource answered; the primary's reply is returned.
    All,
    /// After every resource answered; the first error is returned if any failed.
    AllCheckError,
}
