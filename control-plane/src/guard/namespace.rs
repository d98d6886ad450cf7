//! The guard of a tenant's new key namespace (`PATCH /v1/tenants/{tenant}` with `namespace` set, changed or
//! removed) while the tenant has a route: the gateways look for its keys under the new prefix only, and a
//! namespace change moves nothing (nor does a migration, which keeps the namespace), so every key it stored
//! would no longer be found (409 `keys_would_move`, fraction 1), unless the request says `force`.

use switchyard_schemas::api::{ErrorDetail, percent};

use super::keys_would_move;
use crate::error::ApiError;

/// A routed tenant's namespace change (`None`: no namespace).
pub(crate) struct NamespaceChange<'a> {
    pub(crate) tenant: &'a str,
    pub(crate) from: Option<&'a str>,
    pub(crate) to: Option<&'a str>,
}

impl NamespaceChange<'_> {
    /// The refusal of the change, unforced.
    pub(crate) fn refusal(&self) -> ApiError {
        let shown = |namespace: Option<&str>| match namespace {
            Some(prefix) => format!("'{prefix}'"),
            None => "none".to_string(),
        };
        let (from, to) = (shown(self.from), shown(self.to));
        let message = format!(
            "{} of the tenant's keys would no longer be found: tenant '{}' has a route, and its keys are stored \
             under namespace {from}, where the gateways would no longer look (namespace {to}); a namespace change \
             moves no key, nor does a migration. Rename the keys on the backend (RENAME, with the tenant's clients \
             stopped) and pass \"force\": true to change the namespace",
            percent(1.0),
            self.tenant
        );
        let details = vec![ErrorDetail {
            path: "/namespace".to_string(),
            message: format!("{} of the keys: namespace {from} -> {to}", percent(1.0)),
        }];
        keys_would_move(message, details)
    }
}
