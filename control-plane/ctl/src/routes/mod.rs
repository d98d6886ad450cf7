//! `switchyard-ctl routes`: a tenant's route table: get, set from a file, edit, versions, diff, rollback and
//! explain (`/v1/tenants/{tenant}/route`).

use std::path::PathBuf;

use clap::Subcommand;
use reqwest::Method;
use serde_json::{Value, json};
use switchyard_schemas::RouteTable;
use switchyard_schemas::api::{KeyMoves, ResourceList, RoutePut, RouteRollback, percent};

mod edit;

use crate::client::{Call, Outcome};
use crate::output::{self, Format, View};
use crate::session::{Change, Session, read_json};

#[derive(Subcommand)]
pub(crate) enum Routes {
    /// Show the current route table (or an earlier version).
    #[command(after_help = "Examples:\n  \
        switchyard-ctl routes get shop\n  \
        switchyard-ctl routes get shop --version 3 -o json")]
    Get {
        tenant: String,
        #[arg(long)]
        version: Option<i64>,
    },
    /// Set the route table from a JSON file: a new version.
    #[command(
        after_help = "The file holds a route table, or a whole PUT body ({\"route\": ..., \"comment\": ...}).\n\n\
        Examples:\n  \
        switchyard-ctl routes set shop --file route.json --comment 'two shards'\n  \
        switchyard-ctl routes set shop --file route.json --if-match 4 --dry-run\n  \
        switchyard-ctl routes set shop --file route.json --force"
    )]
    Set {
        tenant: String,
        /// The route table (`-`: standard input).
        #[arg(long, short = 'f')]
        file: PathBuf,
        #[arg(long)]
        comment: Option<String>,
        /// Only if the current version is this one (0: no route yet); else exit 3 (412).
        #[arg(long)]
        if_match: Option<i64>,
        /// Change the route even though keys would no longer be found (409 keys_would_move) or a new resource
        /// does not answer its probe (422); the answer says how many keys the change moved.
        #[arg(long)]
        force: bool,
    },
    /// Edit the current route table in $VISUAL or $EDITOR, check it, and set it if nobody changed it meanwhile.
    #[command(
        after_help = "The table is opened as JSON. It is parsed and validated before it is sent; the \
        change is made only if the route is still at the version opened (If-Match). If someone else changed it \
        meanwhile, their change is shown and the edit is kept in a file.\n\n\
        Examples:\n  \
        switchyard-ctl routes edit shop\n  \
        EDITOR=nano switchyard-ctl routes edit shop --comment 'more shards' --dry-run"
    )]
    Edit {
        tenant: String,
        #[arg(long, default_value = "edited with switchyard-ctl")]
        comment: String,
        /// Change the route even though keys would no longer be found (409 keys_would_move) or a new resource
        /// does not answer its probe (422); the answer says how many keys the change moved.
        #[arg(long)]
        force: bool,
    },
    /// The route's history, newest first.
    #[command(after_help = "Example:\n  switchyard-ctl routes versions shop --limit 10")]
    Versions {
        tenant: String,
        /// Only versions below this one (the next page).
        #[arg(long)]
        before: Option<i64>,
        #[arg(long)]
        limit: Option<i64>,
    },
    /// What changed between two versions (to the current one without TO).
    #[command(after_help = "Examples:\n  \
        switchyard-ctl routes diff shop 3 4\n  \
        switchyard-ctl routes diff shop 3")]
    Diff {
        tenant: String,
        from: i64,
        to: Option<i64>,
    },
    /// Make a new version equal to an earlier one.
    #[command(
        after_help = "Example:\n  switchyard-ctl routes rollback shop 3 --comment 'back to one shard'"
    )]
    Rollback {
        tenant: String,
        version: i64,
        #[arg(long)]
        comment: Option<String>,
        /// Only if the current version is this one; else exit 3 (412).
        #[arg(long)]
        if_match: Option<i64>,
        /// Change the route even though keys would no longer be found (409 keys_would_move) or a new resource
        /// does not answer its probe (422); the answer says how many keys the change moved.
        #[arg(long)]
        force: bool,
    },
    /// Where keys go under the current route: shard, read and write resources.
    #[command(
        after_help = "Example:\n  switchyard-ctl routes explain shop user:1 user:2 '{cart}:9'"
    )]
    Explain {
        tenant: String,
        #[arg(required = true)]
        keys: Vec<String>,
    },
}

pub(crate) fn path(tenant: &str) -> String {
    format!("/v1/tenants/{tenant}/route")
}

/// Where one version is read; the current one without a number.
fn version_path(tenant: &str, version: Option<i64>) -> String {
    match version {
        Some(v) => format!("{}/versions/{v}", path(tenant)),
        None => path(tenant),
    }
}

/// A version: a line about it, then its table as YAML.
pub(crate) fn version_text(body: &Value) -> String {
    format!(
        "version {} by {} at {}: {}\n{}",
        output::cell(body.get("version")),
        output::cell(body.get("author")),
        output::cell(body.get("created_at")),
        output::cell(body.get("comment")),
        body.get("route").map(output::yaml).unwrap_or_default()
    )
}

/// What a change answers: the new version and its revision, and the keys it moved (when forced to).
pub(crate) fn changed(body: &Value) -> String {
    format!(
        "route version {} (revision {}): {}\n{}",
        output::cell(body.get("version")),
        output::cell(body.get("revision")),
        output::cell(body.get("comment")),
        keys(body)
    )
}

/// The guard's report of a change: how many of the tenant's keys would no longer be found, and where they are.
pub(crate) fn keys(body: &Value) -> String {
    let Some(moves) = body
        .get("keys")
        .and_then(|k| serde_json::from_value::<KeyMoves>(k.clone()).ok())
    else {
        return String::new();
    };
    let mut text = format!("keys: {}\n", moves.summary());
    for m in &moves.moves {
        text.push_str(&format!(
            "  {} {} -> {}\n",
            percent(m.fraction),
            m.from,
            m.to
        ));
    }
    text
}

/// The checks the control plane makes of a table, made here first with the registered resources (URLs
/// masked, which the rules do not look at), so that a mistake is named before anything is sent.
pub(crate) async fn check(session: &Session, route: &RouteTable) -> Outcome {
    let resources: ResourceList = session.read("/v1/resources").await?;
    let lookup = |name: &str| {
        resources
            .resources
            .iter()
            .find(|r| r.name == name)
            .map(|r| r.url.clone())
    };
    route.validate(&lookup).map_err(|errors| {
        let details: String = errors
            .0
            .iter()
            .map(|e| {
                format!(
                    "\n  {}: {}",
                    if e.path.is_empty() { "/" } else { &e.path },
                    e.message
                )
            })
            .collect();
        anyhow::anyhow!("the route table is invalid:{details}").into()
    })
}

/// A change of the route (`set`, `edit`, `rollback`), diffed against the current table in a dry run.
pub(crate) fn route_change(tenant: &str, call: Call) -> Change {
    Change::new(call, View::Text(changed))
        .before(path(tenant), "/route")
        .note(keys)
}

impl Routes {
    pub(crate) async fn run(self, session: &Session) -> Outcome {
        match self {
            Routes::Get { tenant, version } => {
                let call = Call::get(version_path(&tenant, version));
                session.show(call, &View::Text(version_text)).await
            }
            Routes::Set {
                tenant,
                file,
                comment,
                if_match,
                force,
            } => {
                let body: Value = read_json(&file)?;
                let mut put: RoutePut = match body.get("route") {
                    Some(_) => read_value(body, &file)?,
                    None => RoutePut {
                        route: read_value(body, &file)?,
                        comment: String::new(),
                        force: false,
                    },
                };
                put.comment = comment.unwrap_or(put.comment);
                put.force |= force;
                check(session, &put.route).await?;
                let call = Call::new(Method::PUT, path(&tenant))
                    .body(serde_json::to_value(&put)?)
                    .if_match(if_match);
                session.change(route_change(&tenant, call)).await.map(drop)
            }
            Routes::Edit {
                tenant,
                comment,
                force,
            } => edit::edit(session, &tenant, comment, force).await,
            Routes::Versions {
                tenant,
                before,
                limit,
            } => {
                let call = Call::get(format!("{}/versions", path(&tenant)))
                    .query("before", before)
                    .query("limit", limit);
                let view = View::Rows {
                    list: "/versions",
                    columns: &[
                        ("VERSION", "/version"),
                        ("AUTHOR", "/author"),
                        ("CREATED", "/created_at"),
                        ("COMMENT", "/comment"),
                    ],
                };
                session.show(call, &view).await
            }
            Routes::Diff { tenant, from, to } => {
                let read = |version: Option<i64>| {
                    let call = Call::get(version_path(&tenant, version));
                    async move { session.send(&call).await.map(|r| r.body) }
                };
                let (old, new) = (read(Some(from)).await?, read(to).await?);
                let both = json!({ "from": old, "to": new });
                match session.format {
                    Format::Table => {
                        let yaml = |v: &Value| v.get("route").map(output::yaml).unwrap_or_default();
                        let diff = output::diff(&yaml(&old), &yaml(&new));
                        print!(
                            "--- version {}\n+++ version {}\n{}",
                            output::cell(old.get("version")),
                            output::cell(new.get("version")),
                            if diff.is_empty() {
                                "no difference\n"
                            } else {
                                &diff
                            }
                        );
                        Ok(())
                    }
                    _ => session.print(&both, &View::Text(|_| String::new())),
                }
            }
            Routes::Rollback {
                tenant,
                version,
                comment,
                if_match,
                force,
            } => {
                let body = RouteRollback {
                    version,
                    comment,
                    force,
                };
                let call = Call::new(Method::POST, format!("{}/rollback", path(&tenant)))
                    .body(serde_json::to_value(body)?)
                    .if_match(if_match);
                session.change(route_change(&tenant, call)).await.map(drop)
            }
            Routes::Explain { tenant, keys } => {
                // One key: the GET's answer; several: one POST for all of them, each answer as the API's body.
                let (call, list) = match keys.as_slice() {
                    [key] => (
                        Call::get(format!("{}/explain", path(&tenant))).query("key", Some(key)),
                        "",
                    ),
                    _ => (
                        Call::new(Method::POST, format!("{}/explain", path(&tenant)))
                            .body(json!({"keys": keys})),
                        "/explanations",
                    ),
                };
                let body = session.send(&call).await?.body;
                let view = View::Rows {
                    list,
                    columns: &[
                        ("KEY", "/key"),
                        ("SHARD", "/shard"),
                        ("BUCKET", "/bucket"),
                        ("READ", "/read"),
                        ("WRITE", "/write"),
                        ("THEN WRITE", "/writes/1/write"),
                        ("ACK", "/ack"),
                        ("MIGRATION", "/migration"),
                        ("VERSION", "/version"),
                    ],
                };
                session.print(&body, &view)
            }
        }
    }
}

fn read_value<T: serde::de::DeserializeOwned>(value: Value, file: &std::path::Path) -> Outcome<T> {
    crate::session::parse_json(&value.to_string())
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()).into())
}
