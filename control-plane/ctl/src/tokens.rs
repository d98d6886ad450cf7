//! `switchyard-ctl tokens`: the API's tokens (`/v1/tokens`, admin only): list, create (the secret shown once),
//! rotate (a new secret, the old one valid for an overlap) and delete (revoke); `whoami`: the token in use.

use clap::Subcommand;
use reqwest::Method;
use serde_json::Value;
use switchyard_schemas::api::{OwnerPolicy, TokenCreate, TokenRole, TokenRotate};

use crate::client::{Call, Outcome};
use crate::output::{self, View};
use crate::session::{Change, Session};

const COLUMNS: &[(&str, &str)] = &[
    ("ID", "/id"),
    ("NAME", "/name"),
    ("ROLE", "/role"),
    ("TENANTS", "/tenants"),
    ("PREFIX", "/tenant_prefix"),
    ("POLICIES", "/policies"),
    ("CREATED", "/created_at"),
    ("ROTATED", "/rotated_at"),
    ("REVOKED", "/revoked_at"),
];

#[derive(Subcommand)]
pub(crate) enum Tokens {
    /// List the tokens (never their secrets).
    #[command(after_help = "Example:\n  switchyard-ctl tokens list")]
    List,
    /// Create a token; its secret is shown once.
    #[command(after_help = "Examples:\n  \
        switchyard-ctl tokens create dashboards --role viewer\n  \
        switchyard-ctl tokens create team-a --role tenant-owner --tenant-prefix team-a- --policy ip_allow --policy ip_deny")]
    Create {
        name: String,
        /// admin, operator, viewer or tenant-owner.
        #[arg(long, value_parser = parse_role)]
        role: TokenRole,
        /// tenant-owner: a tenant it owns (repeat the flag for more).
        #[arg(long = "tenant")]
        tenants: Vec<String>,
        /// tenant-owner: it owns every tenant whose name starts with this.
        #[arg(long)]
        tenant_prefix: Option<String>,
        /// tenant-owner: a policy field it may change on its tenants (read_only, commands, ip_allow, ip_deny,
        /// blocked_keys, tracking, scripts; repeat the flag for more).
        #[arg(long = "policy", value_parser = parse_policy)]
        policies: Vec<OwnerPolicy>,
    },
    /// Give a token a new secret (shown once); the old one stays valid for the overlap.
    #[command(after_help = "Example:\n  switchyard-ctl tokens rotate 3 --overlap-secs 600")]
    Rotate {
        id: i64,
        /// How long the old secret stays valid, in seconds (0 to 86400) [default: 300].
        #[arg(long)]
        overlap_secs: Option<u64>,
    },
    /// Revoke a token: both its secrets stop working at once, on every control-plane replica.
    #[command(
        visible_alias = "revoke",
        after_help = "Example:\n  switchyard-ctl tokens delete 3"
    )]
    Delete { id: i64 },
}

fn parse_role(text: &str) -> Result<TokenRole, String> {
    TokenRole::parse(text).ok_or_else(|| "admin, operator, viewer or tenant-owner".to_string())
}

fn parse_policy(text: &str) -> Result<OwnerPolicy, String> {
    OwnerPolicy::parse(text).ok_or_else(|| {
        "read_only, commands, ip_allow, ip_deny, blocked_keys, tracking or scripts".to_string()
    })
}

/// The answer that holds a secret: said once, plainly.
fn issued(body: &Value) -> String {
    format!(
        "token {} ({}, role {}); its secret (shown only now):\n{}\n",
        output::cell(body.get("id")),
        output::cell(body.get("name")),
        output::cell(body.get("role")),
        output::cell(body.get("token")),
    )
}

impl Tokens {
    pub(crate) async fn run(self, session: &Session) -> Outcome {
        match self {
            Tokens::List => {
                let view = View::Rows {
                    list: "/tokens",
                    columns: COLUMNS,
                };
                session.show(Call::get("/v1/tokens"), &view).await
            }
            Tokens::Create {
                name,
                role,
                tenants,
                tenant_prefix,
                policies,
            } => {
                let request = TokenCreate {
                    name,
                    role,
                    tenants,
                    tenant_prefix,
                    policies,
                };
                let call =
                    Call::new(Method::POST, "/v1/tokens").body(serde_json::to_value(&request)?);
                let view = View::Text(issued);
                session.change(Change::new(call, view)).await.map(drop)
            }
            Tokens::Rotate { id, overlap_secs } => {
                let request = TokenRotate { overlap_secs };
                let call = Call::new(Method::POST, format!("/v1/tokens/{id}/rotate"))
                    .body(serde_json::to_value(&request)?);
                session
                    .change(Change::new(call, View::Text(issued)))
                    .await
                    .map(drop)
            }
            Tokens::Delete { id } => {
                let call = Call::new(Method::DELETE, format!("/v1/tokens/{id}"));
                session
                    .change(Change::new(call, View::deleted()))
                    .await
                    .map(drop)
            }
        }
    }
}

/// `switchyard-ctl whoami`.
pub(crate) async fn who_am_i(session: &Session) -> Outcome {
    let view = View::Rows {
        list: "",
        columns: &[
            ("ACTOR", "/actor"),
            ("ROLE", "/role"),
            ("TENANTS", "/tenants"),
            ("PREFIX", "/tenant_prefix"),
            ("POLICIES", "/policies"),
        ],
    };
    session.show(Call::get("/v1/whoami"), &view).await
}
