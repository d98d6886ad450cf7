//! `switchyard-ctl credentials`: a tenant's credentials: list, create (issue a secret, or import a password or a
//! client certificate) and delete (revoke).

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use reqwest::Method;
use switchyard_schemas::api::CredentialCreate;

use crate::client::{Call, Outcome};
use crate::output::View;
use crate::session::{Change, Session, read_json};

const COLUMNS: &[(&str, &str)] = &[
    ("ID", "/id"),
    ("IMPORTED", "/imported"),
    ("CREATED", "/created_at"),
    ("REVOKED", "/revoked_at"),
    ("CONNECTIONS", "/connections"),
    ("LAST USED", "/last_used/at"),
    ("ON", "/last_used/gateway"),
    ("DESCRIPTION", "/description"),
];

#[derive(Subcommand)]
pub(crate) enum Credentials {
    /// List a tenant's credentials (never their secrets), with the connections open with each and its last
    /// successful AUTH (time and gateway, within the last day).
    #[command(after_help = "Example:\n  switchyard-ctl credentials list shop")]
    List { tenant: String },
    /// Issue a secret (shown once), or import a password or a client certificate.
    #[command(after_help = "Examples:\n  \
        switchyard-ctl credentials create shop --description 'web servers'\n  \
        switchyard-ctl credentials create shop --password-file old-proxy-password.txt\n  \
        switchyard-ctl credentials create shop --file cert.json   # a POST .../credentials body")]
    Create {
        tenant: String,
        #[arg(long)]
        description: Option<String>,
        /// Import the password in this file (at least 16 characters) instead of issuing one.
        #[arg(long)]
        password_file: Option<PathBuf>,
        /// A JSON file with the whole request (the body of `POST /v1/tenants/{tenant}/credentials`).
        #[arg(long, short = 'f', conflicts_with = "password_file")]
        file: Option<PathBuf>,
    },
    /// Revoke a credential: connections that authenticated with it are closed.
    #[command(
        visible_alias = "revoke",
        after_help = "Example:\n  switchyard-ctl credentials delete shop 3"
    )]
    Delete { tenant: String, id: i64 },
}

fn path(tenant: &str) -> String {
    format!("/v1/tenants/{tenant}/credentials")
}

impl Credentials {
    pub(crate) async fn run(self, session: &Session) -> Outcome {
        match self {
            Credentials::List { tenant } => {
                let view = View::Rows {
                    list: "/credentials",
                    columns: COLUMNS,
                };
                session.show(Call::get(path(&tenant)), &view).await
            }
            Credentials::Create {
                tenant,
                description,
                password_file,
                file,
            } => {
                let mut request: CredentialCreate = match &file {
                    Some(file) => read_json(file)?,
                    None => CredentialCreate::default(),
                };
                request.description = description.unwrap_or(request.description);
                if let Some(file) = password_file {
                    let text = std::fs::read_to_string(&file)
                        .with_context(|| format!("reading {}", file.display()))?;
                    request.password = Some(text.trim_end_matches(['\r', '\n']).to_string());
                }
                let call =
                    Call::new(Method::POST, path(&tenant)).body(serde_json::to_value(&request)?);
                let view = View::Text(|body| {
                    let id = crate::output::cell(body.get("id"));
                    match body.get("secret").and_then(|s| s.as_str()) {
                        Some(secret) => format!(
                            "credential {id} created; its secret (shown only now):\n{secret}\n"
                        ),
                        None => format!("credential {id} created\n"),
                    }
                });
                session.change(Change::new(call, view)).await.map(drop)
            }
            Credentials::Delete { tenant, id } => {
                let call = Call::new(Method::DELETE, format!("{}/{id}", path(&tenant)));
                session
                    .change(Change::new(call, View::deleted()))
                    .await
                    .map(drop)
            }
        }
    }
}
