//! How far double-write secondaries are from their primaries: what each gateway's divergence sampler and repair
//! report with its tracking reports, and how `GET /v1/tenants/{tenant}/divergence` shows it
//! (docs/route-tables.md#repair-of-missed-writes).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One tenant's secondary as one gateway samples and repairs it at its report (a part of `ObservationReport`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SecondaryDivergence {
    pub tenant: String,
    /// The secondary as the route names it, never with a secret (its URL without credentials, or its name).
    pub resource: String,
    /// Keys sampled in the gateway's window (its last 1000, at most 10 minutes old).
    pub samples: u64,
    /// Of those, keys whose copies differed.
    pub differing: u64,
    /// Keys the secondary missed (or that sampling found different) and the repair has not made equal yet.
    pub pending: u64,
    /// Whether every key of the tenant is owed a comparison (a catch-up).
    pub catching_up: bool,
    /// Keys the repair made equal since the gateway started.
    pub repaired: u64,
}

/// `GET /v1/tenants/{tenant}/divergence`: each secondary the gateways double-write the tenant's keys to, as the
/// gateways that reported recently see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TenantDivergence {
    pub tenant: String,
    pub secondaries: Vec<DivergenceSummary>,
}

/// One secondary, every recent gateway's report summed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DivergenceSummary {
    pub resource: String,
    /// Estimated share of the tenant's keys whose copies differ: differing among sampled keys, every gateway's
    /// window together (so weighted by their samples); none before a key was sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<f64>,
    /// Every gateway's figures summed (`catching_up`: any gateway's).
    #[serde(flatten)]
    pub counts: DivergenceCounts,
    /// The latest report this comes from (RFC 3339).
    pub reported_at: String,
    /// Each gateway's report, by gateway id.
    pub gateways: Vec<GatewayDivergence>,
}

/// One gateway's report of a secondary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct GatewayDivergence {
    pub gateway: String,
    #[serde(flatten)]
    pub counts: DivergenceCounts,
    /// RFC 3339.
    pub reported_at: String,
}

/// A secondary's figures, as in [`SecondaryDivergence`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DivergenceCounts {
    /// Keys sampled in the window.
    pub samples: u64,
    /// Of those, keys whose copies differed.
    pub differing: u64,
    /// Keys the repair still owes the secondary.
    pub pending: u64,
    /// Whether every key of the tenant is owed a comparison (a catch-up).
    pub catching_up: bool,
    /// Keys the repair made equal since the gateway started.
    pub repaired: u64,
}

impl DivergenceCounts {
    /// Adds another gateway's figures.
    pub fn add(&mut self, other: &DivergenceCounts) {
        self.samples += other.samples;
        self.differing += other.differing;
        self.pending += other.pending;
        self.catching_up |= other.catching_up;
        self.repaired += other.repaired;
    }
}
