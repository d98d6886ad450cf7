//! `PATCH /v1/tenants/{tenant}`'s body.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::is_false;
use crate::TenantLimits;
use crate::policy::CommandRules;

/// `PATCH /v1/tenants/{tenant}`: only the fields given change; `limits` replaces all limits at once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantPatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_admin: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<TenantLimits>,
    /// `null` removes the namespace.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub namespace: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// Replaces both lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commands: Option<CommandRules>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_allow: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_deny: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_keys: Option<Vec<String>>,
    /// Replaces the tenant's tracking thresholds (`{}`: the gateway's again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracking: Option<crate::policy::TrackingPolicy>,
    /// `null` removes the tenant's own scripts policy: its resources' default applies again.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub scripts: Option<Option<crate::policy::ScriptsPolicy>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits_scope: Option<crate::policy::LimitsScope>,
    /// Replaces the tenant's near cache; `null` removes it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub near_cache: Option<Option<crate::policy::NearCachePolicy>>,
    /// Change the namespace even though the tenant has a route: the keys it stored under the old one would no
    /// longer be found (409 `keys_would_move`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub force: bool,
}

/// A field that is present, `null` included (`Some(None)`), as opposed to absent (`None`, its default).
fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}
