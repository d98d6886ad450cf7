//! `switchyard-ctl tenants readiness-probe`: set, get and delete a tenant's readiness probe
//! (`/v1/tenants/{tenant}/readiness-probe`): would its live traffic work on another deployment, before any
//! migration (docs/migration.md#readiness).

use std::path::PathBuf;

use clap::Subcommand;
use reqwest::Method;
use switchyard_schemas::api::ReadinessProbeSet;

use crate::client::{Call, Outcome};
use crate::migrations::{destination, readiness_view};
use crate::output::View;
use crate::session::{Change, Session};

#[derive(Subcommand)]
pub(crate) enum Probe {
    /// Check the tenant's live commands against a destination, as a migration there would (replaces its probe,
    /// and its counts).
    #[command(after_help = "Examples:\n  \
        switchyard-ctl tenants readiness-probe set shop --to redis-cluster://10.0.0.5:7000\n  \
        switchyard-ctl tenants readiness-probe set shop --file two-shards.json")]
    Set {
        tenant: String,
        /// The destination: a resource (its name or URL).
        #[arg(long, required_unless_present = "file", conflicts_with = "file")]
        to: Option<String>,
        /// The destination, as JSON: a route table or a target.
        #[arg(long, short = 'f')]
        file: Option<PathBuf>,
    },
    /// What of the tenant's commands would fail on the probe's destination, across gateways.
    #[command(after_help = "Example:\n  switchyard-ctl tenants readiness-probe get shop")]
    Get { tenant: String },
    /// Stop the probe (its counts go with it).
    #[command(after_help = "Example:\n  switchyard-ctl tenants readiness-probe delete shop")]
    Delete { tenant: String },
}

fn path(tenant: &str) -> String {
    format!("/v1/tenants/{tenant}/readiness-probe")
}

impl Probe {
    pub(crate) async fn run(self, session: &Session) -> Outcome {
        match self {
            Probe::Set { tenant, to, file } => {
                let body = ReadinessProbeSet {
                    to: destination(to, file.as_deref())?,
                };
                let call = Call::new(Method::PUT, path(&tenant)).body(serde_json::to_value(body)?);
                session
                    .change(Change::new(call, readiness_view()))
                    .await
                    .map(drop)
            }
            Probe::Get { tenant } => {
                session
                    .show(Call::get(path(&tenant)), &readiness_view())
                    .await
            }
            Probe::Delete { tenant } => {
                let call = Call::new(Method::DELETE, path(&tenant));
                session
                    .change(Change::new(call, View::deleted()))
                    .await
                    .map(drop)
            }
        }
    }
}
