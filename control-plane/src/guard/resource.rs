//! The guard of a resource's new URL (`PUT /v1/resources/{name}`) while current routes use it: a URL
//! that points at other data (another server, database, sentinel master or cluster, or another kind of
//! deployment) leaves every key those tenants stored there where the gateways no longer look (409
//! `keys_would_move`); a URL that keeps the data (other credentials, TLS parameters, `scripts` or other query
//! parameters) is probed as a route's new resource is (422 when it does not answer as it says). `force`
//! overrides both.

use std::collections::HashMap;

use switchyard_schemas::api::{ErrorDetail, percent};
use switchyard_schemas::placement::moves::same_data;
use switchyard_schemas::{ResourceKind, ResourceUrl, RouteTable, resource_location};

use super::{keys_would_move, probe_all, uses};
use crate::error::ApiResult;
use crate::redact;

/// A resource's URL change to check, with the current routes that use it.
pub(crate) struct UrlChange<'a> {
    pub(crate) name: &'a str,
    pub(crate) from: &'a str,
    pub(crate) to: &'a str,
    /// Each tenant whose current route uses the resource, with that route (as stored).
    pub(crate) using: &'a [(String, RouteTable)],
    pub(crate) force: bool,
}

impl UrlChange<'_> {
    /// Unless forced, refuses a new URL that would strand the tenants' keys or that does not answer its probe.
    pub(crate) async fn check(&self) -> ApiResult<()> {
        if self.force || self.using.is_empty() || self.from == self.to {
            return Ok(());
        }
        if !same_data(self.from, self.to) {
            let (from, to) = (place(self.from), place(self.to));
            let tenants: Vec<&str> = self.using.iter().map(|(t, _)| t.as_str()).collect();
            let message = format!(
                "the new URL points at other data than the current one ({from} -> {to}): every key of tenant(s) \
                 {} kept in resource '{}' would no longer be found; pass \"force\": true to change the URL \
                 anyway, or register the new URL as another resource and move each tenant's keys to it with a \
                 migration",
                tenants.join(", "),
                self.name
            );
            let details = tenants
                .iter()
                .map(|tenant| ErrorDetail {
                    path: "/url".to_string(),
                    message: format!(
                        "tenant '{tenant}': {} of its keys in '{}': {from} -> {to}",
                        percent(1.0),
                        self.name
                    ),
                })
                .collect();
            return Err(keys_would_move(message, details));
        }
        let writes = self.using.iter().any(|(_, route)| {
            uses(route, "")
                .iter()
                .any(|u| u.writes && u.reference == self.name)
        });
        let probed = HashMap::from([(self.to.to_string(), ("/url".to_string(), writes))]);
        let to = redact::url(self.to);
        probe_all(&probed, |_| {
            format!(
                "the new URL {to} does not answer as it says; pass \"force\": true if it is provisioned later"
            )
        })
        .await
    }
}

/// Where a URL's keys are, without secrets: its location, with the database of a sentinel master.
fn place(url: &str) -> String {
    let location = resource_location(url);
    match ResourceUrl::parse(url).map(|parsed| parsed.kind) {
        Ok(ResourceKind::Sentinel { db, .. }) => format!("{location} db {db}"),
        _ => location,
    }
}
