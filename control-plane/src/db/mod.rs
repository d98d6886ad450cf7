//! The Postgres store: all SQL lives in this module's files, one per aggregate, and every change runs in a
//! [`change::Change`].

pub(crate) mod audit;
pub(crate) mod change;
pub(crate) mod credentials;
pub(crate) mod gateways;
pub(crate) mod migrations;
pub(crate) mod resources;
pub(crate) mod revision;
pub(crate) mod routes;
pub(crate) mod snapshot;
pub(crate) mod tenants;

use chrono::{DateTime, SecondsFormat, Utc};

/// The API's timestamp format: RFC 3339, UTC, milliseconds.
pub(crate) fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}
