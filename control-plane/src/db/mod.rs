//! The Postgres store: all SQL, one file per aggregate, and the [`DbError`] a failed query answers.
//!
//! Every change runs in a [`change::Change`]; a [`DbError`] names the operation its query was part of.
//!
//! A row type's columns are listed again in each `query_as!` that answers it (the macro takes its SQL as a
//! literal). A view would not save that: sqlx takes every column of a view as nullable, so each query would still
//! list the columns, to mark the non-null ones (`id AS "id!"`) and type the jsonb ones.

pub(crate) mod audit;
pub(crate) mod change;
pub(crate) mod credentials;
pub(crate) mod databases;
pub(crate) mod divergence;
pub(crate) mod gateways;
pub(crate) mod limit_shares;
pub(crate) mod migrations;
pub(crate) mod observations;
pub(crate) mod reachability;
pub(crate) mod readiness;
pub(crate) mod resources;
pub(crate) mod revision;
pub(crate) mod routes;
pub(crate) mod snapshot;
pub(crate) mod tenants;
pub(crate) mod tokens;
pub(crate) mod usage;

use chrono::{DateTime, SecondsFormat, Utc};

/// A database operation that failed: which one (`"locking a tenant"`), and what sqlx said. The API maps
/// constraint violations to 409/422 by the cause; anything else is an internal error logged with the operation.
#[derive(Debug, thiserror::Error)]
#[error("{operation}: {cause}")]
pub struct DbError {
    pub(crate) operation: &'static str,
    pub(crate) cause: sqlx::Error,
}

pub(crate) type DbResult<T> = Result<T, DbError>;

/// Names the operation a sqlx result belongs to.
pub(crate) trait WithOperation<T> {
    fn during(self, operation: &'static str) -> DbResult<T>;
}

impl<T> WithOperation<T> for sqlx::Result<T> {
    fn during(self, operation: &'static str) -> DbResult<T> {
        self.map_err(|cause| DbError { operation, cause })
    }
}

/// The API's timestamp format: RFC 3339, UTC, milliseconds.
pub(crate) fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}
