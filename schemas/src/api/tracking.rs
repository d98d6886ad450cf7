//! What gateways report of their tenants' requests (hot keys, big keys, slow commands), and the control plane's
//! views of it (docs/tracking.md).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `POST /v1/gateways/observations`: what a gateway noticed of its tenants' requests since its last report
/// (see docs/tracking.md). Keys are as the tenant sent them: UTF-8 as is, other bytes (and `\`) as `\xHH`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ObservationReport {
    /// The reporting gateway's id (as in its heartbeats).
    pub gateway: String,
    /// How long the report covers, in milliseconds.
    pub interval_ms: u64,
    /// Only tenants with something to report.
    pub tenants: Vec<TenantObservations>,
    /// The tenants whose route double-writes to a destination the gateway checks commands against (a migration's
    /// readiness, docs/migration.md#readiness), with what it counted since its last report.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readiness: Vec<super::TenantReadiness>,
    /// The tenants with traffic or connections since the last report (docs/usage.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub usage: Vec<super::TenantUsage>,
    /// Every resource the gateway's routes use, and whether it reaches it (docs/usage.md#resources); in the
    /// first post of a report only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<super::ResourceReach>,
    /// Every tenant's double-write secondary the gateway samples or repairs, and how far it is from the primary
    /// (docs/route-tables.md#repair-of-missed-writes); in the first post of a report only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub divergence: Vec<super::SecondaryDivergence>,
}

/// One tenant's part of an `ObservationReport`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantObservations {
    pub tenant: String,
    /// The most frequently accessed keys, most first, with their estimated access counts.
    #[serde(default)]
    pub hot_keys: Vec<HotKey>,
    #[serde(default)]
    pub big_keys: Vec<BigKey>,
    /// Slow log entries logged since the last report.
    #[serde(default)]
    pub slowlog: Vec<SlowLogEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HotKey {
    pub key: String,
    /// Estimated accesses (sampled accesses times the sampling rate).
    pub count: u64,
}

/// `GET /v1/tenants/{tenant}/hot-keys`: the tenant's hottest keys over the window, every gateway's counts summed,
/// most accessed first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HotKeys {
    pub keys: Vec<HotKey>,
    /// The window the counts cover, in seconds.
    pub window_s: u64,
}

/// A hot key of one tenant, in the view across tenants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantHotKey {
    pub tenant: String,
    pub key: String,
    /// Estimated accesses (sampled accesses times the sampling rate), every gateway's summed.
    pub count: u64,
}

/// `GET /v1/hot-keys`: the hottest keys of every tenant over the window, most accessed first: which tenant and
/// which key load the shared backends most.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FleetHotKeys {
    pub keys: Vec<TenantHotKey>,
    /// The window the counts cover, in seconds.
    pub window_s: u64,
}

/// Whether a big key's size is its request's (a large value written) or its reply's (a large value read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BigKeyDirection {
    Request,
    Reply,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BigKey {
    /// `None` for a command without a key.
    pub key: Option<String>,
    /// The command, as the command table names it (`set`, `config|get`).
    pub command: String,
    pub direction: BigKeyDirection,
    pub bytes: u64,
    /// For a reply that is a collection (array, map, set): how many elements it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elements: Option<u64>,
    /// When it was last seen, in milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// The gateway that saw it (set by the control plane; empty in a report).
    #[serde(default)]
    pub gateway: String,
}

/// `GET /v1/tenants/{tenant}/big-keys`: the largest requests and replies over the window, largest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BigKeys {
    pub keys: Vec<BigKey>,
    pub window_s: u64,
}

/// One slow command, as `SLOWLOG GET` shows it plus its first key and the gateway that logged it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SlowLogEntry {
    /// The entry's id in its gateway's log of the tenant (`SLOWLOG GET`'s first field).
    pub id: u64,
    /// Unix time in seconds.
    pub timestamp: i64,
    /// Gateway-side latency in microseconds.
    pub duration_us: u64,
    /// Arguments, cut as Redis cuts them (at most 32, each at most 128 bytes plus a note of the rest).
    pub args: Vec<String>,
    pub key: Option<String>,
    pub client_addr: String,
    pub client_name: String,
    /// The resource the command's key maps to, as `GET /tenants` on a gateway names it: its shard's primary for a
    /// write, its first read resource for a read (empty for a keyless command on a route of several shards).
    #[serde(default)]
    pub backend: String,
    /// How many pipelined requests the latency covers (1: the command alone; more: it led a run).
    pub run: u32,
    /// The gateway that logged it (set by the control plane; empty in a report).
    #[serde(default)]
    pub gateway: String,
}

impl SlowLogEntry {
    /// What stands for an argument value that is not shown (as the gateway's admin port writes it).
    pub const REDACTED: &'static str = "(redacted)";

    /// The entry without its argument values, for those who may see that a command was slow but not the tenant's
    /// data: the command's name and its key stay, every other argument reads [`SlowLogEntry::REDACTED`].
    pub fn without_values(mut self) -> SlowLogEntry {
        for (i, arg) in self.args.iter_mut().enumerate() {
            if i > 0 && self.key.as_ref() != Some(arg) {
                *arg = SlowLogEntry::REDACTED.to_string();
            }
        }
        self
    }
}

/// `GET /v1/tenants/{tenant}/slowlog`: every gateway's entries over the window, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SlowLog {
    pub entries: Vec<SlowLogEntry>,
    pub window_s: u64,
}
