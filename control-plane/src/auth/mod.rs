//! Bearer-token access control: the start-up tokens (`--admin-token`, `--gateway-token`), the API tokens of
//! `/v1/tokens` with their roles, and the middleware that admits each request to its endpoint's [`Access`].
//!
//! Tokens are kept only as digests and compared by digest, so the comparison leaks nothing useful through timing
//! and a heap dump holds no token. The start-up tokens are held in memory; an API token is looked up in Postgres
//! on every request it comes with, so a revocation or rotation is effective on every replica at once. The actor
//! recorded in the audit log is `admin:<first 8 hex of the digest>` for a start-up token, `token:<name>` for an
//! API token.

mod caller;

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::rejection::RawPathParamsRejection;
use axum::extract::{RawPathParams, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::Response;
use sqlx::PgPool;
use switchyard_schemas::api::TokenRole;
use switchyard_schemas::credential_digest;

pub(crate) use caller::{Caller, Kind};

use crate::access_log::Who;
use crate::db;
use crate::db::audit::Actor;
use crate::error::ApiError;

/// Which callers an endpoint admits. Each role-based level names its roles in [`Access::roles`]; a
/// `tenant-owner` is admitted where it is listed, to the tenants it owns only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Public,
    /// Gateways; admin and operator tokens too, to inspect what gateways see.
    Gateway,
    /// Reading anything: admin, operator, viewer.
    Read,
    /// Reading one tenant's data (the path's `{tenant}`): admin, operator, viewer, and its tenant-owners.
    TenantRead,
    /// Reading what the handler narrows to the caller's tenants (the tenant list, the caller itself): every role.
    OwnRead,
    /// Changing anything but tokens: admin, operator.
    Change,
    /// Changing one tenant's credentials (or the policies its token lists): admin, operator, its tenant-owners.
    TenantChange,
    /// The API tokens: admin only.
    Admin,
}

impl Access {
    /// The roles admitted.
    pub fn roles(self) -> &'static [TokenRole] {
        use TokenRole::{Admin, Operator, TenantOwner, Viewer};
        match self {
            Access::Public => &[Admin, Operator, Viewer, TenantOwner],
            Access::Gateway | Access::Change => &[Admin, Operator],
            Access::Read => &[Admin, Operator, Viewer],
            Access::TenantRead | Access::OwnRead => &[Admin, Operator, Viewer, TenantOwner],
            Access::TenantChange => &[Admin, Operator, TenantOwner],
            Access::Admin => &[Admin],
        }
    }

    fn admits(self, role: TokenRole) -> bool {
        self.roles().contains(&role)
    }

    /// Whether a `tenant-owner` is admitted only to the path's `{tenant}`.
    pub fn per_tenant(self) -> bool {
        matches!(self, Access::TenantRead | Access::TenantChange)
    }

    /// Whether the endpoint takes a role-based token (every one but the public and the gateways' ones).
    pub fn by_role(self) -> bool {
        !matches!(self, Access::Public | Access::Gateway)
    }

    /// "the role admin or operator", for refusals.
    fn needs(self) -> String {
        match self {
            Access::Gateway => "a gateway token, or the role admin or operator".to_string(),
            _ => roles_text(self.roles()),
        }
    }

    /// The roles that may act on any tenant.
    fn needs_beyond_owner(self) -> String {
        let roles: Vec<TokenRole> = (self.roles().iter().copied())
            .filter(|role| *role != TokenRole::TenantOwner)
            .collect();
        roles_text(&roles)
    }
}

fn roles_text(roles: &[TokenRole]) -> String {
    let names: Vec<&str> = roles.iter().map(|role| role.as_str()).collect();
    match names.as_slice() {
        [one] => format!("the role {one}"),
        [rest @ .., last] => format!("the role {} or {last}", rest.join(", ")),
        [] => "no role".to_string(),
    }
}

/// The start-up tokens, by digest.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    admin: HashMap<String, Actor>,
    gateway: HashMap<String, Actor>,
}

/// Shorter tokens are refused at start: they could be guessed.
pub(crate) const MIN_TOKEN_LEN: usize = 16;

impl Tokens {
    pub fn new(admin: &[String], gateway: &[String]) -> anyhow::Result<Tokens> {
        let index = |tokens: &[String], role: &str| {
            tokens
                .iter()
                .map(|token| {
                    anyhow::ensure!(
                        token.len() >= MIN_TOKEN_LEN,
                        "every {role} token must be at least {MIN_TOKEN_LEN} characters"
                    );
                    let digest = credential_digest(token);
                    let actor = Actor(format!("{role}:{}", &digest[..8]));
                    Ok((digest, actor))
                })
                .collect::<anyhow::Result<HashMap<_, _>>>()
        };
        let tokens = Tokens {
            admin: index(admin, "admin")?,
            gateway: index(gateway, "gateway")?,
        };
        anyhow::ensure!(
            !tokens.admin.is_empty(),
            "at least one admin token is required (--admin-token or SWITCHYARD_ADMIN_TOKEN)"
        );
        Ok(tokens)
    }

    /// The caller a start-up token of digest `digest` is.
    fn bootstrap(&self, digest: &str) -> Option<Caller> {
        if let Some(actor) = self.admin.get(digest) {
            return Some(Caller::bootstrap(
                actor.clone(),
                Kind::Role(TokenRole::Admin),
            ));
        }
        let actor = self.gateway.get(digest)?;
        Some(Caller::bootstrap(actor.clone(), Kind::Gateway))
    }
}

/// What the access middleware of one endpoint needs.
#[derive(Clone)]
pub(crate) struct Guard {
    pub(crate) pool: PgPool,
    pub(crate) tokens: Arc<Tokens>,
    pub(crate) access: Access,
}

impl Guard {
    /// The caller of `bearer`: 401 when the token is missing or unknown (or revoked, or past its overlap), so a
    /// caller can tell "wrong secret" from "right secret, wrong role" (403, from [`Caller::admit`]).
    async fn identify(&self, bearer: Option<&str>) -> Result<Caller, ApiError> {
        let unauthorized = || {
            ApiError::Unauthorized(match self.access {
                Access::Gateway => {
                    "a valid gateway token (or an admin or operator token) is required"
                }
                _ => "a valid bearer token is required",
            })
        };
        let digest = credential_digest(bearer.ok_or_else(unauthorized)?);
        if let Some(caller) = self.tokens.bootstrap(&digest) {
            return Ok(caller);
        }
        let row = db::tokens::valid(&self.pool, &digest).await?;
        row.map(Caller::of_token).ok_or_else(unauthorized)
    }
}

fn bearer(request: &Request) -> Option<&str> {
    let value = request.headers().get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Middleware admitting the callers of its endpoint's [`Access`]; the handler finds the [`Caller`] and its
/// [`Actor`] in the extensions, and the access log the actor in the response's.
pub(crate) async fn require(
    State(guard): State<Guard>,
    params: Result<RawPathParams, RawPathParamsRejection>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let caller = guard.identify(bearer(&request)).await?;
    let who = Who(caller.actor.0.clone());
    let tenant = params.ok().and_then(|params| {
        params
            .iter()
            .find(|(name, _)| *name == "tenant")
            .map(|(_, value)| value.to_string())
    });
    let admitted = caller.admit(guard.access, tenant.as_deref());
    let mut response = match admitted {
        Ok(()) => {
            request.extensions_mut().insert(caller.actor.clone());
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(refused) => axum::response::IntoResponse::into_response(refused),
    };
    response.extensions_mut().insert(who);
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(admin: &[&str], gateway: &[&str]) -> anyhow::Result<Tokens> {
        let owned = |list: &[&str]| list.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        Tokens::new(&owned(admin), &owned(gateway))
    }

    fn caller(tokens: &Tokens, token: &str) -> Option<Caller> {
        tokens.bootstrap(&credential_digest(token))
    }

    #[test]
    fn tokens_are_long_and_admins_required() {
        assert!(tokens(&[], &["gateway-token-0123456"]).is_err());
        assert!(tokens(&["short"], &[]).is_err());
        assert!(tokens(&["admin-token-0123456"], &["short"]).is_err());
        let tokens = tokens(
            &["admin-token-0123456", "other-admin-token-01"],
            &["gateway-token-0123456"],
        )
        .unwrap();
        let one = caller(&tokens, "admin-token-0123456").unwrap();
        let two = caller(&tokens, "other-admin-token-01").unwrap();
        assert!(one.actor.0.starts_with("admin:") && one.actor.0.len() == 14);
        assert_ne!(one.actor, two.actor, "each admin token is its own actor");
        assert!(one.admit(Access::Gateway, None).is_ok());
        assert!(one.admit(Access::Admin, None).is_ok());
        assert!(caller(&tokens, "admin-token-012345").is_none());
        let gateway = caller(&tokens, "gateway-token-0123456").unwrap();
        assert!(gateway.admit(Access::Gateway, None).is_ok());
        let Err(ApiError::Forbidden(refusal)) = gateway.admit(Access::Read, None) else {
            panic!("a gateway token reads nothing");
        };
        assert_eq!(
            refusal,
            "this endpoint needs the role admin, operator or viewer; the token given is a gateway token"
        );
    }
}
