//! [`Caller`]: who a request comes from (a gateway, or a token with a role), and whether an endpoint's
//! [`Access`] admits it. A refusal says which roles the endpoint needs, so the caller knows whom to ask.

use switchyard_schemas::api::{OwnerPolicy, TenantPatch, TokenRole, WhoAmI};

use crate::auth::Access;
use crate::db::audit::Actor;
use crate::db::tokens::TokenRow;
use crate::error::ApiError;

/// A gateway (a `--gateway-token`), or a token with a role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Gateway,
    Role(TokenRole),
}

/// Who calls, as the access middleware found out; handlers find it in the request's extensions.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    pub(crate) actor: Actor,
    pub(crate) kind: Kind,
    /// A start-up `--admin-token` or `--gateway-token`, not a token of `/v1/tokens`.
    pub(crate) bootstrap: bool,
    /// `tenant-owner`: the tenants it owns by name.
    pub(crate) tenants: Vec<String>,
    /// `tenant-owner`: it also owns the tenants whose names start with this.
    pub(crate) tenant_prefix: Option<String>,
    /// `tenant-owner`: the policy fields it may change.
    pub(crate) policies: Vec<OwnerPolicy>,
}

impl Caller {
    /// A start-up token.
    pub(crate) fn bootstrap(actor: Actor, kind: Kind) -> Caller {
        Caller {
            actor,
            kind,
            bootstrap: true,
            tenants: Vec::new(),
            tenant_prefix: None,
            policies: Vec::new(),
        }
    }

    pub(crate) fn of_token(row: TokenRow) -> Caller {
        Caller {
            actor: Actor(format!("token:{}", row.name)),
            kind: Kind::Role(row.role()),
            bootstrap: false,
            policies: row.policies(),
            tenants: row.tenants,
            tenant_prefix: row.tenant_prefix,
        }
    }

    /// Whether this caller is limited to the tenants it owns.
    pub(crate) fn owner(&self) -> bool {
        self.kind == Kind::Role(TokenRole::TenantOwner)
    }

    /// Whether the caller may see `tenant`: any for every role but `tenant-owner`, which sees its own.
    pub(crate) fn sees(&self, tenant: &str) -> bool {
        !self.owner()
            || self.tenants.iter().any(|t| t == tenant)
            || self
                .tenant_prefix
                .as_deref()
                .is_some_and(|prefix| tenant.starts_with(prefix))
    }

    /// Admits the caller to an endpoint of `access` on `tenant` (the path's `{tenant}`, if it has one), or says
    /// why not: a 403 naming the roles the endpoint needs.
    pub(crate) fn admit(&self, access: Access, tenant: Option<&str>) -> Result<(), ApiError> {
        let admitted = match self.kind {
            Kind::Gateway => access == Access::Gateway,
            Kind::Role(role) => access.admits(role),
        };
        if !admitted {
            return Err(ApiError::Forbidden(format!(
                "this endpoint needs {}; {}",
                access.needs(),
                self.described()
            )));
        }
        if self.owner() && access.per_tenant() && !tenant.is_some_and(|t| self.sees(t)) {
            return Err(ApiError::Forbidden(format!(
                "{}, and tenant '{}' is not one of its tenants; any tenant needs {}",
                self.described(),
                tenant.unwrap_or_default(),
                access.needs_beyond_owner(),
            )));
        }
        Ok(())
    }

    /// Refuses a `PATCH` of a tenant by a `tenant-owner` that names a field its token does not list.
    pub(crate) fn may_patch(&self, patch: &TenantPatch) -> Result<(), ApiError> {
        if !self.owner() {
            return Ok(());
        }
        let given =
            serde_json::to_value(patch).map_err(|e| ApiError::internal("reading a patch", e))?;
        let fields = given
            .as_object()
            .map(|o| o.keys().cloned().collect::<Vec<_>>());
        // `force` changes no field: it only lets a change that moves keys through.
        for field in fields
            .unwrap_or_default()
            .into_iter()
            .filter(|f| f != "force")
        {
            if !self.policies.iter().any(|p| p.as_str() == field) {
                let allowed: Vec<&str> = self.policies.iter().map(|p| p.as_str()).collect();
                return Err(ApiError::Forbidden(format!(
                    "changing '{field}' needs the role admin or operator; {} and may change {}",
                    self.described(),
                    match allowed.as_slice() {
                        [] => "none of its tenants' fields".to_string(),
                        some => format!("only {}", some.join(", ")),
                    }
                )));
            }
        }
        Ok(())
    }

    /// "the token 'ci' has the role viewer", for refusals.
    fn described(&self) -> String {
        match self.kind {
            Kind::Gateway => "the token given is a gateway token".to_string(),
            Kind::Role(role) => {
                format!(
                    "the token '{}' has the role {}",
                    self.actor.0,
                    role.as_str()
                )
            }
        }
    }

    /// `GET /v1/whoami`; `None` for a gateway token (which that endpoint does not admit).
    pub(crate) fn who_am_i(&self) -> Option<WhoAmI> {
        let Kind::Role(role) = self.kind else {
            return None;
        };
        Some(WhoAmI {
            actor: self.actor.0.clone(),
            role,
            bootstrap: self.bootstrap,
            tenants: self.tenants.clone(),
            tenant_prefix: self.tenant_prefix.clone(),
            policies: self.policies.clone(),
        })
    }
}
