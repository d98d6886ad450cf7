//! Which control-plane replica a gateway follows, as its heartbeats report it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The replica a gateway follows among its `--control-plane` URLs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Following {
    /// The URL, as configured (at most 200 characters).
    pub url: String,
    /// The address the URL's host name resolved to, when it resolves to several (one replica each); empty when the
    /// system resolves it at each connection.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub address: String,
}
