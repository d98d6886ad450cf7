//! `ApiError`: every way a request can fail, and how each one is answered (status, JSON body).
//!
//! Database constraint violations are mapped by constraint name, so the database stays the authority on what is
//! unique, referenced or well-formed, and a request that loses a race still gets a 409/422 instead of a 500.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use switchyard_schemas::ValidationErrors;
use switchyard_schemas::api::{ErrorBody, ErrorDetail};

use crate::db::DbError;
use crate::db::snapshot::SnapshotError;
use crate::etag::etag;

#[derive(Debug, thiserror::Error)]
pub(crate) enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    /// No token, or one that is not valid (unknown, revoked, or a rotated secret past its overlap).
    #[error("{0}")]
    Unauthorized(&'static str),
    /// A valid token of a role the endpoint does not admit (or of a tenant-owner, for another tenant); the message
    /// names the roles it needs.
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("this endpoint does not answer this method (the Allow header lists the ones it does)")]
    MethodNotAllowed,
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    /// A 409 whose details say what stands in the way (a cutover's readiness counts).
    #[error("{message}")]
    ConflictWithDetails {
        code: &'static str,
        message: String,
        details: Vec<ErrorDetail>,
    },
    #[error("the route is at version {current}, not the version given in If-Match")]
    PreconditionFailed { current: i64 },
    #[error("{message}")]
    Unprocessable {
        message: String,
        details: Vec<ErrorDetail>,
    },
    /// Anything the client could not have caused: the operation that failed, and why. Both are logged, never
    /// sent.
    #[error("internal error")]
    Internal {
        operation: &'static str,
        #[source]
        cause: anyhow::Error,
    },
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub(crate) fn internal(operation: &'static str, cause: impl Into<anyhow::Error>) -> Self {
        ApiError::Internal {
            operation,
            cause: cause.into(),
        }
    }

    pub(crate) fn not_found(what: impl Into<String>) -> Self {
        ApiError::NotFound(what.into())
    }

    /// A 422 about one field.
    pub(crate) fn invalid(path: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        ApiError::Unprocessable {
            // "" is the pointer to the whole body.
            message: if path.is_empty() {
                message.clone()
            } else {
                format!("{path}: {message}")
            },
            details: vec![ErrorDetail {
                path: path.to_string(),
                message,
            }],
        }
    }

    /// A 422 listing several problems under one summary; a single problem reads as [`ApiError::invalid`].
    pub(crate) fn invalid_all(summary: &str, details: Vec<ErrorDetail>) -> Self {
        if let [only] = details.as_slice() {
            return ApiError::invalid(&only.path, only.message.clone());
        }
        ApiError::Unprocessable {
            message: summary.to_string(),
            details,
        }
    }

    /// A 422 listing every broken rule of a route table, with paths under `prefix`.
    pub(crate) fn invalid_route(prefix: &str, errors: ValidationErrors) -> Self {
        ApiError::Unprocessable {
            message: "the route table is invalid".to_string(),
            details: errors
                .0
                .into_iter()
                .map(|e| ErrorDetail {
                    path: format!("{prefix}{}", e.path),
                    message: e.message,
                })
                .collect(),
        }
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            ApiError::Conflict { code, .. } | ApiError::ConflictWithDetails { code, .. } => {
                (StatusCode::CONFLICT, code)
            }
            ApiError::PreconditionFailed { .. } => {
                (StatusCode::PRECONDITION_FAILED, "precondition_failed")
            }
            ApiError::Unprocessable { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "invalid"),
            ApiError::Internal { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

impl From<DbError> for ApiError {
    fn from(error: DbError) -> Self {
        let (constraint, code) = match &error.cause {
            sqlx::Error::Database(db) => (
                db.constraint().map(str::to_string),
                db.code().map(|c| c.into_owned()),
            ),
            _ => (None, None),
        };
        if let Some(mapped) = constraint.as_deref().and_then(constraint_error) {
            return mapped;
        }
        match code.as_deref() {
            // Text Postgres cannot store (a NUL, in `text` or `jsonb`): only a client's input can hold it, and the
            // extractors refuse it first; this covers any text that reaches a query another way.
            Some("22021" | "22P05") => ApiError::BadRequest(
                "text must not contain NUL (\\u0000) or characters the database cannot store"
                    .to_string(),
            ),
            // Deadlock or serialization failure: nothing was changed, and trying again will do.
            Some("40P01" | "40001") => ApiError::Conflict {
                code: "concurrent_change",
                message: "a concurrent change got in the way; nothing was changed, retry"
                    .to_string(),
            },
            _ => ApiError::internal(error.operation, error.cause),
        }
    }
}

impl From<SnapshotError> for ApiError {
    fn from(error: SnapshotError) -> Self {
        match error {
            SnapshotError::Db(error) => error.into(),
            other => ApiError::internal("building the snapshot", other),
        }
    }
}

const OUTPUT_BUFFER_LIMIT_RULES: &str = "hard_bytes and soft_bytes must be at most 9223372036854775807, \
    soft_seconds greater than 0 when soft_bytes is not 0, and hard_bytes 0 or not below soft_bytes";

/// What a violated constraint means to the client. Names are those of `migrations/`.
fn constraint_error(name: &str) -> Option<ApiError> {
    let conflict = |code, message: &str| ApiError::Conflict {
        code,
        message: message.to_string(),
    };
    Some(match name {
        "tenants_name_key" => conflict("tenant_exists", "a tenant with this name already exists"),
        "tenants_namespace" => conflict(
            "namespace_overlaps",
            "another tenant already has this namespace",
        ),
        "resources_name_key" => conflict(
            "resource_exists",
            "a resource with this name already exists",
        ),
        "api_tokens_name_key" => conflict(
            "token_exists",
            "a token with this name exists (or existed and was revoked); choose another",
        ),
        "api_tokens_name_format" => ApiError::invalid(
            "/name",
            "1 to 64 of A-Z a-z 0-9 _ . -, starting with a letter or digit",
        ),
        "credentials_digest_key" => conflict(
            "credential_exists",
            "this password is already in use (or was used and revoked); choose another",
        ),
        // Only reachable if two changes to one tenant's route slip past the tenant lock.
        "route_versions_pkey" => conflict(
            "concurrent_change",
            "another change to this route was made at the same time; retry",
        ),
        "tenant_migrations_one_active" => conflict(
            "migration_active",
            "the tenant already has an active migration; finish or abort it first",
        ),
        "credentials_tenant_id_fkey"
        | "route_versions_tenant_id_fkey"
        | "tenant_migrations_tenant_id_fkey" => {
            ApiError::not_found("the tenant was deleted meanwhile")
        }
        "route_resource_refs_resource_id_fkey" => conflict(
            "resource_in_use",
            "a tenant's current route uses this resource; change those routes first",
        ),
        "tenants_name_format" => ApiError::invalid(
            "/name",
            "1 to 64 of A-Z a-z 0-9 _ . -, starting with a letter or digit",
        ),
        "resources_name_format" => ApiError::invalid(
            "/name",
            "1 to 128 of A-Z a-z 0-9 _ . -, starting with a letter or digit",
        ),
        "tenants_max_connections_positive" => {
            ApiError::invalid("/limits/max_connections", "must be greater than 0")
        }
        "tenants_max_ops_per_sec_positive" => {
            ApiError::invalid("/limits/max_ops_per_sec", "must be greater than 0")
        }
        "tenants_script_timeout_ms_positive" => {
            ApiError::invalid("/limits/script_timeout_ms", "must be greater than 0")
        }
        // The API checks these rules first, with a message per field; the database has the last word.
        "tenants_output_buffer_limit_valid" => {
            ApiError::invalid("/limits/output_buffer_limit", OUTPUT_BUFFER_LIMIT_RULES)
        }
        "tenants_pubsub_output_buffer_limit_valid" => ApiError::invalid(
            "/limits/pubsub_output_buffer_limit",
            OUTPUT_BUFFER_LIMIT_RULES,
        ),
        "gateways_id_format" => ApiError::invalid("/id", "must be 1 to 200 characters"),
        "gateways_address_length" => {
            ApiError::invalid("/address", "must be at most 200 characters")
        }
        "gateways_version_length" => {
            ApiError::invalid("/version", "must be at most 100 characters")
        }
        "gateways_revision_not_negative" => ApiError::invalid("/revision", "must not be negative"),
        _ => return None,
    })
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        if let ApiError::Internal { operation, cause } = &self {
            tracing::error!(operation, error = format!("{cause:#}"), "request failed");
        }
        let details = match &self {
            ApiError::Unprocessable { details, .. }
            | ApiError::ConflictWithDetails { details, .. } => details.clone(),
            _ => Vec::new(),
        };
        let body = ErrorBody {
            error: code.to_string(),
            message: self.to_string(),
            details,
        };
        let mut response = (status, Json(body)).into_response();
        if let ApiError::PreconditionFailed { current } = self {
            let (name, value) = etag(current);
            response.headers_mut().insert(name, value);
        }
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Collects what the fmt subscriber writes.
    #[derive(Clone, Default)]
    struct Log(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Log {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Log {
        type Writer = Log;

        fn make_writer(&'a self) -> Log {
            self.clone()
        }
    }

    #[test]
    fn a_failed_query_is_logged_with_its_operation_and_answered_500() {
        let error = ApiError::from(DbError {
            operation: "locking a tenant",
            cause: sqlx::Error::PoolTimedOut,
        });
        let log = Log::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(log.clone())
            .with_ansi(false)
            .finish();
        let response = tracing::subscriber::with_default(subscriber, || error.into_response());
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let logged = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
        assert!(
            logged.contains(r#"operation="locking a tenant""#)
                && logged.contains("pool timed out")
                && logged.contains("request failed"),
            "{logged}"
        );
    }
}
