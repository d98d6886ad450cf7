//! The local routes file: tenants and their routes for a gateway that runs without a control plane.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{ClientCertificate, RouteTable};

/// `routes.json`: what a gateway started with `--routes` serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoutesFile {
    /// Named resources that routes may refer to by name instead of repeating a URL.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, String>,
    pub tenants: Vec<TenantConfig>,
}

with_policy_fields! {
    gathered
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct TenantConfig {
        pub name: String,
        /// Any of these authenticates a client as this tenant. Empty, and no `client_certificates`: clients need
        /// no AUTH (one tenant at most).
        pub passwords: Vec<String>,
        /// Client certificates (by public key) that authenticate a client over mutual TLS without AUTH.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub client_certificates: Vec<ClientCertificate>,
        pub route: RouteTable,
        #[serde(default)]
        pub limits: TenantLimits,
        /// Lets the tenant run dangerous admin commands (FLUSHALL, CONFIG SET, KEYS, ...).
        #[serde(default)]
        pub allow_admin: bool,
    }
}

impl TenantConfig {
    /// Whether clients reach this tenant without any credential.
    pub fn is_open(&self) -> bool {
        self.passwords.is_empty() && self.client_certificates.is_empty()
    }

    /// The digests of every credential the tenant has: its passwords and its client certificates (invalid ones
    /// are left out; validation reports them).
    pub fn digests(&self) -> Vec<String> {
        let passwords = self.passwords.iter().map(|p| crate::credential_digest(p));
        let certificates = self
            .client_certificates
            .iter()
            .filter_map(|c| c.digest().ok());
        passwords.chain(certificates).collect()
    }
}

/// Per-tenant limits. `max_connections` and `max_ops_per_sec` hold for the fleet of gateways that follow a
/// control plane, or for each gateway on its own, as the tenant's `limits_scope` says; the others always hold per
/// connection or per call.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantLimits {
    /// Most client connections this tenant may hold open (on the fleet, or on one gateway: `limits_scope`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u32>,
    /// Most commands per second this tenant may run (on the fleet, or on one gateway: `limits_scope`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ops_per_sec: Option<u32>,
    /// How many reply bytes one of the tenant's connections may leave unread, in place of the gateway's
    /// `--output-buffer-limit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_buffer_limit: Option<OutputBufferLimit>,
    /// The same for a connection while it is subscribed (pub/sub messages included), in place of the gateway's
    /// `--pubsub-output-buffer-limit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pubsub_output_buffer_limit: Option<OutputBufferLimit>,
    /// How long one of the tenant's script or function calls may run, in milliseconds (default 5000, Redis'
    /// `busy-reply-threshold`): the gateway waits that long for its reply in place of `--command-timeout-ms`,
    /// then kills it (`SCRIPT KILL`, `FUNCTION KILL`) unless the tenant has `allow_admin`. At least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub script_timeout_ms: Option<u32>,
}

impl TenantLimits {
    /// `script_timeout_ms` when none is given: Redis' own `busy-reply-threshold`, after which Redis itself
    /// serves `SCRIPT KILL`.
    pub const DEFAULT_SCRIPT_TIMEOUT_MS: u32 = 5000;

    /// How long one of the tenant's script or function calls may run, in milliseconds.
    pub fn script_limit_ms(&self) -> u32 {
        self.script_timeout_ms
            .unwrap_or(Self::DEFAULT_SCRIPT_TIMEOUT_MS)
    }
}

/// What a client connection may leave unread (replies and messages the gateway holds because the client does not
/// read them as fast as they come), as Redis' `client-output-buffer-limit`: the connection is closed at once over
/// `hard_bytes`, or once it has stayed over `soft_bytes` for `soft_seconds`. 0 turns a bound off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = "OutputBufferLimit::example")]
pub struct OutputBufferLimit {
    /// Unread bytes over which the connection is closed at once; 0: no hard bound. When both bounds are on,
    /// the control plane refuses a `hard_bytes` below `soft_bytes`.
    pub hard_bytes: u64,
    /// Unread bytes the connection may stay over for at most `soft_seconds`; 0: no soft bound.
    pub soft_bytes: u64,
    /// Seconds the connection may stay over `soft_bytes` before it is closed. The control plane refuses 0 while
    /// `soft_bytes` is not 0.
    pub soft_seconds: u32,
}

impl OutputBufferLimit {
    /// The gateway's default `--output-buffer-limit`, `512mb 64mb 60`: the documentation's example.
    fn example() -> OutputBufferLimit {
        OutputBufferLimit {
            hard_bytes: 512 << 20,
            soft_bytes: 64 << 20,
            soft_seconds: 60,
        }
    }
}
