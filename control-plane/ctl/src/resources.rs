//! `switchyard-ctl resources`: the Redis deployments routes name (`/v1/resources`).

use clap::Subcommand;
use reqwest::Method;
use serde_json::Value;
use switchyard_schemas::api::{ResourceCreate, ResourceUpdate};

use crate::client::{Call, Outcome};
use crate::output::{View, cell, table};
use crate::session::{Change, Session};

const COLUMNS: &[(&str, &str)] = &[
    ("NAME", "/name"),
    ("URL", "/url"),
    ("USED BY", "/used_by"),
    ("DESCRIPTION", "/description"),
];
const ONE: View = View::one(COLUMNS);
/// Listings and `get`: the columns, and HEALTH after the URL.
const LISTED: View = View::Text(listed);

fn listed(body: &Value) -> String {
    let resources: Vec<&Value> = match body.get("resources").and_then(Value::as_array) {
        Some(list) => list.iter().collect(),
        None => vec![body],
    };
    let mut headers: Vec<String> = COLUMNS.iter().map(|(h, _)| h.to_string()).collect();
    headers.insert(2, "HEALTH".to_string());
    let rows: Vec<Vec<String>> = resources
        .iter()
        .map(|resource| {
            let mut row: Vec<String> = COLUMNS
                .iter()
                .map(|(_, p)| cell(resource.pointer(p)))
                .collect();
            row.insert(2, health(resource));
            row
        })
        .collect();
    table(&headers, &rows)
}

/// What the gateways say of the resource: `up` (every gateway reaches it), `down (reason)` (none does), `down on
/// N of M (reason)`, or `-` when no gateway reported it lately.
fn health(resource: &Value) -> String {
    let Some(reach) = resource.get("reachability") else {
        return "-".to_string();
    };
    let count = |field: &str| reach.get(field).and_then(Value::as_u64).unwrap_or(0);
    let (up, down) = (count("up"), count("down"));
    let reason = reach
        .get("gateways")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|g| g.get("up") == Some(&Value::Bool(false)))
        .and_then(|g| g.get("last_error"))
        .and_then(Value::as_str)
        .map(|e| format!(" ({e})"))
        .unwrap_or_default();
    match (up, down) {
        (_, 0) => "up".to_string(),
        (0, _) => format!("down{reason}"),
        _ => format!("down on {down} of {}{reason}", up + down),
    }
}

#[derive(Subcommand)]
pub(crate) enum Resources {
    /// List every resource (passwords masked), with whether the gateways reach it (HEALTH).
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
        /// Change the URL even though routes use the resource and it points at other data (409
        /// keys_would_move: their keys stay behind) or does not answer its probe (422).
        #[arg(long)]
        force: bool,
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
            Resources::List => return session.show(Call::get("/v1/resources"), &LISTED).await,
            Resources::Get { name } => return session.show(Call::get(path(&name)), &LISTED).await,
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
                force,
            } => {
                let body = ResourceUpdate {
                    url,
                    description,
                    force,
                };
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
