//! `switchyard-ctl resources`: the Redis deployments routes name (`/v1/resources`).

use clap::Subcommand;
use reqwest::Method;
use switchyard_schemas::api::{ResourceCreate, ResourceUpdate};

use crate::client::{Call, Outcome};
use crate::output::View;
use crate::session::{Change, Session};

const COLUMNS: &[(&str, &str)] = &[
    ("NAME", "/name"),
    ("URL", "/url"),
    ("USED BY", "/used_by"),
    ("DESCRIPTION", "/description"),
];
const ONE: View = View::one(COLUMNS);

#[derive(Subcommand)]
pub(crate) enum Resources {
    /// List every resource (passwords masked).
    #[command(after_help = "Example:\n  switchyard-ctl resources list")]
    List,
    /// Show one resource.
    #[command(after_help = "Example:\n  switchyard-ctl resources get main -o yaml")]
    Get { name: String },
    /// Register a resource.
    #[command(after_help = "Examples:\n  \
        switchyard-ctl resources create main redis://10.0.0.5:6379\n  \
        switchyard-ctl resources create cache 'redis-sentinel://10.0.0.7:26379/mymaster' --description 'sessions'")]
    Create {
        name: String,
        /// A resource URL: redis://, rediss://, redis-sentinel://, redis-cluster://, ...
        #[arg(id = "resource_url", value_name = "URL")]
        url: String,
        #[arg(long, default_value = "")]
        description: String,
    },
    /// Change a resource's URL or description (a masked password, `***`, keeps the stored one).
    #[command(
        after_help = "Example:\n  switchyard-ctl resources update main redis://10.0.0.6:6379 --dry-run"
    )]
    Update {
        name: String,
        #[arg(id = "resource_url", value_name = "URL")]
        url: String,
        #[arg(long, default_value = "")]
        description: String,
    },
    /// Delete a resource that no current route uses.
    #[command(after_help = "Example:\n  switchyard-ctl resources delete main")]
    Delete { name: String },
}

fn path(name: &str) -> String {
    format!("/v1/resources/{name}")
}

impl Resources {
    pub(crate) async fn run(self, session: &Session) -> Outcome {
        let change = match self {
            Resources::List => {
                let view = View::Rows {
                    list: "/resources",
                    columns: COLUMNS,
                };
                return session.show(Call::get("/v1/resources"), &view).await;
            }
            Resources::Get { name } => return session.show(Call::get(path(&name)), &ONE).await,
            Resources::Create {
                name,
                url,
                description,
            } => {
                let body = ResourceCreate {
                    name: name.clone(),
                    url,
                    description,
                };
                let call =
                    Call::new(Method::POST, "/v1/resources").body(serde_json::to_value(body)?);
                Change::new(call, ONE).before(path(&name), "")
            }
            Resources::Update {
                name,
                url,
                description,
            } => {
                let body = ResourceUpdate { url, description };
                let call = Call::new(Method::PUT, path(&name)).body(serde_json::to_value(body)?);
                Change::new(call, ONE).before(path(&name), "")
            }
            Resources::Delete { name } => {
                Change::new(Call::new(Method::DELETE, path(&name)), View::deleted())
                    .before(path(&name), "")
            }
        };
        session.change(change).await.map(drop)
    }
}
