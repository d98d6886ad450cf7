//! The Postgres store: all SQL lives in this module's files, one per aggregate, and every change runs in a
//! [`change::Change`].

pub mod audit;
pub mod change;
pub mod credentials;
pub mod gateways;
pub mod migrations;
pub mod resources;
pub mod revision;
pub mod routes;
pub mod snapshot;
pub mod tenants;

use chrono::{DateTime, SecondsFormat, Utc};

/// The API's timestamp format: RFC 3339, UTC, milliseconds.
pub fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}
