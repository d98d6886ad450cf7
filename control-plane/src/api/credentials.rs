//! `/v1/tenants/{tenant}/credentials`: issue or import, list and revoke a tenant's credentials.
//!
//! A secret exists in clear only in the response that issues it; what is stored, logged, audited and shipped to
//! gateways is its digest.

use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::routing::{delete, get, post};
use axum::{Extension, Json};
use switchyard_schemas::api::{Credential, CredentialCreate, CredentialIssued, CredentialList};
use switchyard_schemas::credential_digest;

use crate::api::lookup;
use crate::auth::Access;
use crate::db;
use crate::db::audit::{Actor, AuditRecord};
use crate::db::change::Change;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, JsonBody};
use crate::openapi::Operation;
use crate::state::AppState;

/// Imported passwords shorter than this are refused: a single unsalted hash is only safe for long secrets.
pub(crate) const MIN_IMPORTED_LEN: usize = 16;

/// Issued secrets start with this, so they are recognisable in a config file or a leak scanner.
pub(crate) const SECRET_PREFIX: &str = "sy_";

pub(crate) fn operations() -> Vec<Operation> {
    let path = "/v1/tenants/{tenant}/credentials";
    vec![
        Operation::new(
            "createCredential",
            Method::POST,
            path,
            "Issue a secret (shown once) or import a password",
            Access::TenantChange,
            post(create),
        )
        .request::<CredentialCreate>()
        .example(serde_json::json!({"description": "checkout service"}))
        .reply::<CredentialIssued>(201)
        .errors(&[404, 409]),
        Operation::new(
            "listCredentials",
            Method::GET,
            path,
            "List a tenant's credentials (never their secrets), with their connections open and last use",
            Access::TenantRead,
            get(list),
        )
        .reply::<CredentialList>(200)
        .errors(&[404]),
        Operation::new(
            "revokeCredential",
            Method::DELETE,
            "/v1/tenants/{tenant}/credentials/{id}",
            "Revoke a credential",
            Access::TenantChange,
            delete(revoke),
        )
        .reply_empty(204)
        .errors(&[400, 404]),
    ]
}

/// 256 random bits, hex-encoded after `prefix` (credentials' and API tokens' secrets alike).
pub(crate) fn issue_secret(prefix: &str) -> Result<String, ApiError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| {
        ApiError::internal("issuing a secret", anyhow::anyhow!("no randomness: {e}"))
    })?;
    let mut secret = String::from(prefix);
    for byte in bytes {
        secret.push_str(&format!("{byte:02x}"));
    }
    Ok(secret)
}

/// The digest a credential is stored as, and the secret to hand out when the control plane issued one; a 422
/// (with paths into the request) when the request names no valid credential.
pub(crate) fn digest_of(request: &CredentialCreate) -> ApiResult<(String, Option<String>)> {
    match (
        request.password.as_deref(),
        request.client_certificate.as_ref(),
    ) {
        (Some(_), Some(_)) => Err(ApiError::invalid(
            "/client_certificate",
            "give a password or a client certificate, not both",
        )),
        (Some(password), None) if password.chars().count() < MIN_IMPORTED_LEN => {
            Err(ApiError::invalid(
                "/password",
                format!("an imported password must be at least {MIN_IMPORTED_LEN} characters"),
            ))
        }
        (Some(password), None) => Ok((credential_digest(password), None)),
        (None, Some(certificate)) => {
            let digest = certificate
                .digest()
                .map_err(|problem| ApiError::invalid("/client_certificate/spki_sha256", problem))?;
            Ok((digest, None))
        }
        (None, None) => {
            let secret = issue_secret(SECRET_PREFIX)?;
            Ok((credential_digest(&secret), Some(secret)))
        }
    }
}

async fn create(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(tenant): ApiPath<String>,
    JsonBody(request): JsonBody<CredentialCreate>,
) -> ApiResult<(StatusCode, Json<CredentialIssued>)> {
    let (digest, secret) = digest_of(&request)?;
    let mut change = Change::begin(&state.pool).await?;
    let row = lookup::tenant(change.conn(), &tenant).await?;
    let credential: Credential = db::credentials::insert(
        change.conn(),
        row.id,
        &digest,
        &request.description,
        secret.is_none(),
    )
    .await?
    .into();
    let record = AuditRecord::new(
        "credential.create",
        Some(&tenant),
        format!("tenants/{tenant}/credentials/{}", credential.id),
        None::<&Credential>,
        Some(&credential),
    );
    state.commit(change, &actor, record).await?;
    let issued = CredentialIssued { credential, secret };
    Ok((StatusCode::CREATED, Json(issued)))
}

async fn list(
    State(state): State<AppState>,
    ApiPath(tenant): ApiPath<String>,
) -> ApiResult<Json<CredentialList>> {
    let row = lookup::tenant(&state.pool, &tenant).await?;
    let credentials = db::credentials::list(&state.pool, row.id).await?;
    let mut used = db::usage::credentials(&state.pool, row.id, super::usage::FRESH).await?;
    let credentials = credentials
        .into_iter()
        .map(|row| {
            let usage = used.remove(&row.id);
            Credential {
                connections: Some(usage.as_ref().map_or(0, |u| u.connections)),
                last_used: usage.and_then(|u| u.last_used),
                ..Credential::from(row)
            }
        })
        .collect();
    Ok(Json(CredentialList { credentials }))
}

async fn revoke(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath((tenant, id)): ApiPath<(String, i64)>,
) -> ApiResult<StatusCode> {
    let mut change = Change::begin(&state.pool).await?;
    let row = lookup::tenant(change.conn(), &tenant).await?;
    let revoked: Credential = db::credentials::revoke(change.conn(), row.id, id)
        .await?
        .ok_or_else(|| {
            ApiError::not_found(format!("tenant '{tenant}' has no active credential {id}"))
        })?
        .into();
    let before = Credential {
        revoked_at: None,
        ..revoked.clone()
    };
    let record = AuditRecord::new(
        "credential.revoke",
        Some(&tenant),
        format!("tenants/{tenant}/credentials/{id}"),
        Some(&before),
        Some(&revoked),
    );
    state.commit(change, &actor, record).await?;
    Ok(StatusCode::NO_CONTENT)
}
