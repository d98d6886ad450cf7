//! Whether gateways reach the backend resources their routes use: what each gateway reports with its tracking
//! reports, and how the resource listing shows it (docs/usage.md#resources).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One resource as one gateway reaches it at its report (a part of `ObservationReport`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceReach {
    /// Where the resource is, never with a secret (`host:port/db`, or a sentinel set's or cluster's hosts and
    /// path), as [`resource_location`](crate::resource_location) gives it from the URL.
    pub location: String,
    /// Whether the gateway holds a working connection to it: to the node, to a sentinel set's master, to some
    /// master of a cluster.
    pub up: bool,
    /// Since when it is up (or down) as the gateway saw it, in milliseconds since the Unix epoch.
    pub since_ms: i64,
    /// The last failure the gateway saw connecting to it or on its connections, whenever it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When, in milliseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_ms: Option<i64>,
}

/// How the gateways reach a resource, as `GET /v1/resources` and `GET /v1/resources/{name}` show it: every
/// gateway whose last report named it, recently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceReachability {
    /// Gateways that reach it now.
    pub up: u32,
    /// Gateways that do not.
    pub down: u32,
    /// Each gateway's view, by gateway id.
    pub gateways: Vec<GatewayReach>,
}

/// One gateway's view of a resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct GatewayReach {
    pub gateway: String,
    pub up: bool,
    /// Since when it is up or down there (RFC 3339).
    pub since: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_at: Option<String>,
    /// The gateway's report this comes from (RFC 3339).
    pub reported_at: String,
}
