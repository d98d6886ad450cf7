//! Bearer-token access control: admin tokens for the management API, gateway tokens for what gateways call.
//!
//! Tokens are kept only as digests and compared by digest, so the comparison leaks nothing useful through timing
//! and a heap dump holds no token. The actor recorded in the audit log is derived from the token's digest.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::Response;
use switchyard_schemas::credential_digest;

use crate::db::audit::Actor;
use crate::error::ApiError;

/// Which callers an endpoint admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Public,
    Admin,
    /// Gateways; admins are admitted too, to inspect what gateways see.
    Gateway,
}

/// The configured tokens, by digest.
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

    /// The caller's actor, or why it is refused: 401 when the token is missing or unknown, 403 when it is a
    /// valid token of a kind this endpoint does not admit (a gateway token on an admin endpoint), so a caller can
    /// tell "wrong secret" from "right secret, wrong role".
    fn admit(&self, access: Access, bearer: Option<&str>) -> Result<Actor, ApiError> {
        if access == Access::Public {
            return Ok(Actor("anonymous".to_string()));
        }
        let unauthorized = || {
            ApiError::Unauthorized(match access {
                Access::Admin => "a valid admin bearer token is required",
                _ => "a valid gateway or admin bearer token is required",
            })
        };
        let digest = credential_digest(bearer.ok_or_else(unauthorized)?);
        if let Some(admin) = self.admin.get(&digest) {
            return Ok(admin.clone());
        }
        match (access, self.gateway.get(&digest)) {
            (Access::Gateway, Some(gateway)) => Ok(gateway.clone()),
            (_, Some(_)) => Err(ApiError::Forbidden(
                "this endpoint needs an admin token; the token given is a gateway token",
            )),
            (_, None) => Err(unauthorized()),
        }
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

/// Middleware admitting only callers with an admin token; the handler finds the [`Actor`] in the extensions.
pub(crate) async fn require_admin(
    tokens: State<Arc<Tokens>>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    require(Access::Admin, tokens, request, next).await
}

/// Middleware admitting gateway (and admin) tokens.
pub(crate) async fn require_gateway(
    tokens: State<Arc<Tokens>>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    require(Access::Gateway, tokens, request, next).await
}

async fn require(
    access: Access,
    State(tokens): State<Arc<Tokens>>,
    mut request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let actor = tokens.admit(access, bearer(&request))?;
    request.extensions_mut().insert(actor);
    Ok(next.run(request).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(admin: &[&str], gateway: &[&str]) -> anyhow::Result<Tokens> {
        let owned = |list: &[&str]| list.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        Tokens::new(&owned(admin), &owned(gateway))
    }

    #[test]
    fn tokens_are_long_and_admins_required() {
        assert!(tokens(&[], &["gateway-token-0123456"]).is_err());
        assert!(tokens(&["short"], &[]).is_err());
        assert!(tokens(&["admin-token-0123456"], &["short"]).is_err());
        let tokens = tokens(&["admin-token-0123456", "other-admin-token-01"], &[]).unwrap();
        let one = tokens
            .admit(Access::Admin, Some("admin-token-0123456"))
            .ok()
            .unwrap();
        let two = tokens
            .admit(Access::Admin, Some("other-admin-token-01"))
            .ok()
            .unwrap();
        assert!(one.0.starts_with("admin:") && one.0.len() == 14);
        assert_ne!(one, two, "each admin token is its own actor");
        assert_eq!(
            tokens
                .admit(Access::Gateway, Some("admin-token-0123456"))
                .ok(),
            Some(one)
        );
        assert!(matches!(
            tokens.admit(Access::Admin, Some("admin-token-012345")),
            Err(ApiError::Unauthorized(_))
        ));
        assert!(matches!(
            tokens.admit(Access::Admin, None),
            Err(ApiError::Unauthorized(_))
        ));
    }
}
