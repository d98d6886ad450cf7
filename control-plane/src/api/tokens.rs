//! `/v1/tokens`: create, list, rotate and revoke the API's tokens (admin only), and `/v1/whoami`: the token a
//! request carries.
//!
//! A token exists in clear only in the response that creates or rotates it; what is stored is its digest, and
//! what is audited is its name, role and scope.

use std::time::Duration;

use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::routing::{delete, get, post};
use axum::{Extension, Json};
use switchyard_schemas::api::{
    ApiToken, TokenCreate, TokenIssued, TokenList, TokenRole, TokenRotate, WhoAmI,
};
use switchyard_schemas::credential_digest;

use crate::api::credentials::issue_secret;
use crate::auth::{Access, Caller};
use crate::db;
use crate::db::audit::{Actor, AuditRecord};
use crate::db::change::Change;
use crate::db::tokens::NewToken;
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, JsonBody};
use crate::openapi::Operation;
use crate::state::AppState;

/// Issued tokens start with this, so they are told from tenants' secrets (`sy_`) in a config file or a leak
/// scanner.
pub(crate) const TOKEN_PREFIX: &str = "syt_";

/// How long the old secret of a rotated token stays valid when the request does not say.
pub(crate) const DEFAULT_OVERLAP: Duration = Duration::from_secs(300);

/// The longest overlap a rotation may ask for: a leaked secret must not outlive its rotation by more.
pub(crate) const MAX_OVERLAP: Duration = Duration::from_secs(86_400);

pub(crate) fn operations() -> Vec<Operation> {
    vec![
        Operation::new(
            "createToken",
            Method::POST,
            "/v1/tokens",
            "Create an API token (its secret is shown once)",
            Access::Admin,
            post(create),
        )
        .request::<TokenCreate>()
        .example(serde_json::json!({"name": "team-a", "role": "tenant-owner", "tenant_prefix": "team-a-", "policies": ["ip_allow", "ip_deny"]}))
        .reply::<TokenIssued>(201)
        .errors(&[409]),
        Operation::new(
            "listTokens",
            Method::GET,
            "/v1/tokens",
            "List the API tokens (never their secrets)",
            Access::Admin,
            get(list),
        )
        .reply::<TokenList>(200),
        Operation::new(
            "rotateToken",
            Method::POST,
            "/v1/tokens/{id}/rotate",
            "Give a token a new secret; the old one stays valid for the overlap",
            Access::Admin,
            post(rotate),
        )
        .request::<TokenRotate>()
        .example(serde_json::json!({"overlap_secs": 600}))
        .reply::<TokenIssued>(200)
        .errors(&[404]),
        Operation::new(
            "revokeToken",
            Method::DELETE,
            "/v1/tokens/{id}",
            "Revoke a token (both its secrets, at once)",
            Access::Admin,
            delete(revoke),
        )
        .reply_empty(204)
        .errors(&[404]),
        Operation::new(
            "whoAmI",
            Method::GET,
            "/v1/whoami",
            "The token this request carries: its name, role and tenants",
            Access::OwnRead,
            get(who_am_i),
        )
        .reply::<WhoAmI>(200),
    ]
}

fn object(id: i64) -> String {
    format!("tokens/{id}")
}

/// The rules `TokenCreate`'s types do not express: a tenant-owner names its tenants (or a prefix), the other
/// roles name none; tenant names are tenant names.
fn check(request: &TokenCreate) -> ApiResult<()> {
    let owner = request.role == TokenRole::TenantOwner;
    let scoped = !request.tenants.is_empty() || request.tenant_prefix.is_some();
    if owner && !scoped {
        return Err(ApiError::invalid(
            "/tenants",
            "a tenant-owner token needs tenants, a tenant_prefix, or both",
        ));
    }
    if !owner {
        let given = [
            ("/tenants", !request.tenants.is_empty()),
            ("/tenant_prefix", request.tenant_prefix.is_some()),
            ("/policies", !request.policies.is_empty()),
        ];
        if let Some((path, _)) = given.iter().find(|(_, given)| *given) {
            return Err(ApiError::invalid(
                path,
                "only a tenant-owner token is limited to tenants",
            ));
        }
    }
    for (i, tenant) in request.tenants.iter().enumerate() {
        if !tenant_name(tenant) {
            return Err(ApiError::invalid(
                &format!("/tenants/{i}"),
                "1 to 64 of A-Z a-z 0-9 _ . -, starting with a letter or digit",
            ));
        }
    }
    if let Some(prefix) = &request.tenant_prefix
        && !(prefix.len() <= 64 && prefix.bytes().all(tenant_name_byte) && !prefix.is_empty())
    {
        return Err(ApiError::invalid(
            "/tenant_prefix",
            "1 to 64 of A-Z a-z 0-9 _ . -",
        ));
    }
    Ok(())
}

fn tenant_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')
}

/// The tenants' name rule (`tenants_name_format` in `migrations/`).
fn tenant_name(name: &str) -> bool {
    name.len() <= 64
        && name.bytes().all(tenant_name_byte)
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
}

async fn create(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    JsonBody(request): JsonBody<TokenCreate>,
) -> ApiResult<(StatusCode, Json<TokenIssued>)> {
    check(&request)?;
    let token = issue_secret(TOKEN_PREFIX)?;
    let digest = credential_digest(&token);
    let mut policies: Vec<String> = request.policies.iter().map(|p| p.as_str().into()).collect();
    policies.sort();
    policies.dedup();
    let new = NewToken {
        name: &request.name,
        role: request.role,
        tenants: &request.tenants,
        tenant_prefix: request.tenant_prefix.as_deref(),
        policies,
        digest: &digest,
        created_by: &actor.0,
    };
    let mut change = Change::begin(&state.pool).await?;
    let created = db::tokens::insert(change.conn(), &new).await?.to_api();
    let record = AuditRecord::new(
        "token.create",
        None,
        object(created.id),
        None::<&ApiToken>,
        Some(&created),
    );
    state.commit(change, &actor, record).await?;
    let issued = TokenIssued {
        api_token: created,
        token,
    };
    Ok((StatusCode::CREATED, Json(issued)))
}

async fn list(State(state): State<AppState>) -> ApiResult<Json<TokenList>> {
    let rows = db::tokens::list(&state.pool).await?;
    Ok(Json(TokenList {
        tokens: rows.iter().map(|row| row.to_api()).collect(),
    }))
}

async fn rotate(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(id): ApiPath<i64>,
    JsonBody(request): JsonBody<TokenRotate>,
) -> ApiResult<Json<TokenIssued>> {
    let overlap = request
        .overlap_secs
        .map_or(DEFAULT_OVERLAP, Duration::from_secs);
    if overlap > MAX_OVERLAP {
        return Err(ApiError::invalid(
            "/overlap_secs",
            format!("must be at most {}", MAX_OVERLAP.as_secs()),
        ));
    }
    let token = issue_secret(TOKEN_PREFIX)?;
    let mut change = Change::begin(&state.pool).await?;
    let rotated = db::tokens::rotate(
        change.conn(),
        id,
        &credential_digest(&token),
        overlap.as_secs_f64(),
    )
    .await?
    .ok_or_else(|| ApiError::not_found(format!("there is no active token {id}")))?
    .to_api();
    let record = AuditRecord::new(
        "token.rotate",
        None,
        object(id),
        None::<&ApiToken>,
        Some(&rotated),
    );
    state.commit(change, &actor, record).await?;
    Ok(Json(TokenIssued {
        api_token: rotated,
        token,
    }))
}

async fn revoke(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<StatusCode> {
    let mut change = Change::begin(&state.pool).await?;
    let revoked = db::tokens::revoke(change.conn(), id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("there is no active token {id}")))?
        .to_api();
    let before = ApiToken {
        revoked_at: None,
        ..revoked.clone()
    };
    let record = AuditRecord::new(
        "token.revoke",
        None,
        object(id),
        Some(&before),
        Some(&revoked),
    );
    state.commit(change, &actor, record).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn who_am_i(Extension(caller): Extension<Caller>) -> ApiResult<Json<WhoAmI>> {
    caller
        .who_am_i()
        .map(Json)
        .ok_or_else(|| ApiError::Forbidden("a gateway token has no role".to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_names_follow_the_tenants_rule() {
        for good in ["a", "acme", "team-a.prod_1", &"x".repeat(64)] {
            assert!(tenant_name(good), "{good}");
        }
        for bad in ["", "-a", ".a", "a b", "a/b", "é", &"x".repeat(65)] {
            assert!(!tenant_name(bad), "{bad}");
        }
    }
}
