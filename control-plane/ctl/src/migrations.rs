//! `switchyard-ctl migrations`: move a tenant to new deployments: create, each step (backfill, verify,
//! cutover, finish, abort), and watch a step's progress (`/v1/tenants/{tenant}/migrations`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand, ValueEnum};
use reqwest::Method;
use switchyard_schemas::api::{
    Migration, MigrationCreate, MigrationDestination, MigrationLimits, MigrationReadiness,
    MigrationState,
};
use switchyard_schemas::{AckMode, Target};

use crate::client::{Call, Failure, Outcome};
use crate::output::{Format, View};
use crate::session::{Change, Session, read_json};
use crate::watch::{line, watch};

#[derive(Subcommand)]
pub(crate) enum Migrations {
    /// A tenant's migrations, newest first.
    #[command(after_help = "Example:\n  switchyard-ctl migrations list shop")]
    List { tenant: String },
    /// One migration: its state and its tasks' progress (and, as a table, its readiness).
    #[command(after_help = "Example:\n  switchyard-ctl migrations get shop 1 -o yaml")]
    Get {
        tenant: String,
        /// The migration's id, as `create` printed it (numbered across all tenants, not per tenant).
        id: i64,
    },
    /// What of the tenant's live commands would fail on the destination, counted by the gateways.
    #[command(after_help = "Example:\n  switchyard-ctl migrations readiness shop 1")]
    Readiness {
        tenant: String,
        /// The migration's id, as `create` printed it.
        id: i64,
    },
    /// Start migrating a tenant: writes go to the old and the new deployment, reads stay on the old one. Prints the
    /// migration's id, which the other commands take.
    #[command(after_help = "Examples:\n  \
        switchyard-ctl migrations create shop --to new-main\n  \
        switchyard-ctl migrations create shop --file two-shards.json --ack all --keys-per-sec 5000")]
    Create {
        tenant: String,
        /// Where to: a resource (its name or URL).
        #[arg(long, required_unless_present = "file", conflicts_with = "file")]
        to: Option<String>,
        /// Where to, as JSON: a route table (to re-shard) or a target.
        #[arg(long, short = 'f')]
        file: Option<PathBuf>,
        /// When a double-written command is answered.
        #[arg(long, value_enum, default_value_t = Ack::Primary)]
        ack: Ack,
        /// Keys read per second by backfill and verify (0: unlimited).
        #[arg(long)]
        keys_per_sec: Option<u64>,
        /// Bytes of DUMP payload moved per second (0: unlimited).
        #[arg(long)]
        bytes_per_sec: Option<u64>,
        /// Keys per SCAN page.
        #[arg(long)]
        batch: Option<u64>,
        /// TTLs this many milliseconds apart count as equal in verify.
        #[arg(long)]
        ttl_tolerance_ms: Option<u64>,
    },
    /// Copy the keys that existed before double-write to the new deployment.
    #[command(after_help = "Example:\n  switchyard-ctl migrations backfill shop 1 --watch")]
    Backfill(Step),
    /// Compare every key on both sides and repair differences from the old one.
    #[command(after_help = "Example:\n  switchyard-ctl migrations verify shop 1 --watch")]
    Verify(Step),
    /// Serve reads from the new deployment (writes still go to both); refused while not ready, unless --force.
    #[command(after_help = "Examples:\n  \
        switchyard-ctl migrations cutover shop 1\n  \
        switchyard-ctl migrations cutover shop 1 --force")]
    Cutover {
        #[command(flatten)]
        step: Step,
        /// Cut over although gateways counted commands that would fail on the destination (409 not_ready).
        #[arg(long)]
        force: bool,
    },
    /// Make the new route the only one.
    #[command(after_help = "Example:\n  switchyard-ctl migrations finish shop 1")]
    Finish(Step),
    /// Go back to the old route; nothing is deleted anywhere. From cut_over, old is first repaired from new
    /// (state rolling_back) and the route returns to old when that is done, unless --force.
    #[command(after_help = "Examples:\n  \
        switchyard-ctl migrations abort shop 1 --watch\n  \
        switchyard-ctl migrations abort shop 1 --force")]
    Abort {
        #[command(flatten)]
        step: Step,
        /// From cut_over or rolling_back: return to old at once, without repairing from new what old missed
        /// (for a new deployment that cannot be read).
        #[arg(long)]
        force: bool,
    },
    /// Draw a migration's progress until its task is done (or until --until STATE).
    #[command(after_help = "Example:\n  switchyard-ctl migrations watch shop 1 --until verified")]
    Watch {
        tenant: String,
        /// The migration's id, as `create` printed it (numbered across all tenants, not per tenant).
        id: i64,
        #[command(flatten)]
        poll: Poll,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Ack {
    Primary,
    All,
}

#[derive(Args)]
pub(crate) struct Step {
    tenant: String,
    /// The migration's id, as `create` printed it (numbered across all tenants, not per tenant).
    id: i64,
    /// Then draw the started task's progress until it is done.
    #[arg(long)]
    watch: bool,
    /// How long to retry while gateways do not serve the migration's latest route yet (409
    /// gateways_not_converged); 0: fail at once.
    #[arg(long, default_value_t = 60.0)]
    wait: f64,
    #[command(flatten)]
    poll: Poll,
}

#[derive(Args)]
pub(crate) struct Poll {
    /// Seconds between polls.
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
    /// Keep watching until the migration is in this state (e.g. `verified`).
    #[arg(long, value_parser = parse_state)]
    until: Option<MigrationState>,
}

fn parse_state(name: &str) -> Result<MigrationState, String> {
    MigrationState::parse(name).ok_or_else(|| format!("no migration state '{name}'"))
}

const COLUMNS: &[(&str, &str)] = &[
    ("ID", "/id"),
    ("STATE", "/state"),
    ("ACK", "/ack"),
    ("CONVERGED", "/converged"),
    ("CREATED", "/created_at"),
    ("ERROR", "/error"),
];

/// A migration as its progress line.
fn one() -> View {
    View::Text(
        |body| match serde_json::from_value::<Migration>(body.clone()) {
            Ok(migration) => line(&migration) + "\n",
            Err(_) => body.to_string(),
        },
    )
}

fn path(tenant: &str) -> String {
    format!("/v1/tenants/{tenant}/migrations")
}

impl Poll {
    async fn watch(&self, session: &Session, tenant: &str, id: i64) -> Outcome {
        let interval = Duration::from_secs_f64(self.interval.max(0.05));
        watch(session, tenant, id, interval, self.until)
            .await
            .map(drop)
    }
}

impl Migrations {
    pub(crate) async fn run(self, session: &Session) -> Outcome {
        let (step, action) = match self {
            Migrations::List { tenant } => {
                let view = View::Rows {
                    list: "/migrations",
                    columns: COLUMNS,
                };
                return session.show(Call::get(path(&tenant)), &view).await;
            }
            Migrations::Get { tenant, id } => {
                let object = format!("{}/{id}", path(&tenant));
                session.show(Call::get(&object), &one()).await?;
                // JSON and YAML are the migration's body as it is; people get its readiness too.
                if session.format == Format::Table {
                    let readiness = session
                        .send(&Call::get(format!("{object}/readiness")))
                        .await?;
                    session.print(&readiness.body, &readiness_view())?;
                }
                return Ok(());
            }
            Migrations::Readiness { tenant, id } => {
                let call = Call::get(format!("{}/{id}/readiness", path(&tenant)));
                return session.show(call, &readiness_view()).await;
            }
            Migrations::Watch { tenant, id, poll } => {
                return poll.watch(session, &tenant, id).await;
            }
            Migrations::Create {
                tenant,
                to,
                file,
                ack,
                keys_per_sec,
                bytes_per_sec,
                batch,
                ttl_tolerance_ms,
            } => {
                let to = destination(to, file.as_deref())?;
                let defaults = MigrationLimits::default();
                let body = MigrationCreate {
                    to,
                    ack: match ack {
                        Ack::Primary => AckMode::Primary,
                        Ack::All => AckMode::All,
                    },
                    limits: MigrationLimits {
                        keys_per_sec: keys_per_sec.unwrap_or(defaults.keys_per_sec),
                        bytes_per_sec: bytes_per_sec.unwrap_or(defaults.bytes_per_sec),
                        batch: batch.unwrap_or(defaults.batch),
                        ttl_tolerance_ms: ttl_tolerance_ms.unwrap_or(defaults.ttl_tolerance_ms),
                    },
                };
                let call = Call::new(Method::POST, path(&tenant)).body(serde_json::to_value(body)?);
                return session.change(Change::new(call, one())).await.map(drop);
            }
            Migrations::Backfill(step) => (step, "backfill"),
            Migrations::Verify(step) => (step, "verify"),
            Migrations::Cutover { step, force } => {
                return step.take(session, "cutover", force).await;
            }
            Migrations::Finish(step) => (step, "finish"),
            Migrations::Abort { step, force } => {
                return step.take(session, "abort", force).await;
            }
        };
        step.take(session, action, false).await
    }
}

/// Where to, from `--to` (a resource's name or URL) or `--file` (a route table or a target, as JSON): a
/// migration's destination, or a readiness probe's.
pub(crate) fn destination(
    to: Option<String>,
    file: Option<&std::path::Path>,
) -> Outcome<MigrationDestination> {
    match (to, file) {
        (Some(to), _) => Ok(MigrationDestination::Target(Target::Resource(to))),
        (None, Some(file)) => read_json(file),
        (None, None) => Err(anyhow::anyhow!("give --to or --file").into()),
    }
}

/// A migration's readiness (or a readiness probe's), for people.
pub(crate) fn readiness_view() -> View {
    View::Text(
        |body| match serde_json::from_value::<MigrationReadiness>(body.clone()) {
            Ok(readiness) => readiness_text(&readiness),
            Err(_) => body.to_string(),
        },
    )
}

fn readiness_text(r: &MigrationReadiness) -> String {
    let c = &r.counts;
    let mut out = format!(
        "readiness: {} | checked {} | would fail: cross_slot {} transactions {} scripts {} unsupported {} | split by \
         the gateway {}\n",
        if r.ready { "ready" } else { "NOT READY" },
        r.checked,
        c.cross_slot,
        c.transactions,
        c.scripts,
        c.unsupported,
        c.split
    );
    if let Some(reason) = &r.commands_unchecked {
        out += &format!("  commands not checked against the destination: {reason}\n");
    }
    for e in &r.examples {
        let kind = serde_json::to_value(e.kind).unwrap_or_default();
        let kind = kind.as_str().unwrap_or_default();
        out += &format!(
            "  {kind:<12} {:<12} x{:<8} {}\n",
            e.command,
            e.count,
            e.keys.join("  ")
        );
    }
    out
}

impl Step {
    async fn take(self, session: &Session, action: &str, force: bool) -> Outcome {
        let object = format!("{}/{}", path(&self.tenant), self.id);
        let deadline = Instant::now() + Duration::from_secs_f64(self.wait.max(0.0));
        let mut said = false;
        loop {
            let call = Call::new(Method::POST, format!("{object}/{action}"))
                .query("force", force.then_some(true));
            let change = Change::new(call, one()).before(object.clone(), "/state");
            match session.change(change).await {
                Err(failure @ Failure::Api { .. })
                    if failure.code() == Some("gateways_not_converged")
                        && Instant::now() < deadline =>
                {
                    if !said {
                        eprintln!(
                            "waiting for every live gateway to serve the migration's latest route..."
                        );
                        said = true;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(failure) => return Err(failure),
                Ok(_) if self.watch && !session.dry_run => {
                    return self.poll.watch(session, &self.tenant, self.id).await;
                }
                Ok(_) => return Ok(()),
            }
        }
    }
}
