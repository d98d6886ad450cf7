//! `switchyard-ctl tenants`: list, get, create, update and delete tenants (`/v1/tenants`).

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use reqwest::Method;
use switchyard_schemas::api::{TenantCreate, TenantPatch};
use switchyard_schemas::policy::DEFAULT_NEAR_CACHE_VALUE_BYTES;
use switchyard_schemas::{LimitsScope, NearCacheKeys, NearCachePolicy};

use crate::client::{Call, Outcome};
use crate::output::View;
use crate::session::{Change, Session, read_json};

const COLUMNS: &[(&str, &str)] = &[
    ("NAME", "/name"),
    ("ROUTE", "/route_version"),
    ("DISABLED", "/disabled"),
    ("NAMESPACE", "/namespace"),
    ("DESCRIPTION", "/description"),
];
const ONE: View = View::one(COLUMNS);

/// `tenants top`: each tenant's traffic now (its last two minutes, every gateway's summed).
const TOP_COLUMNS: &[(&str, &str)] = &[
    ("TENANT", "/tenant"),
    ("OPS/S", "/ops_per_sec"),
    ("ERRORS/S", "/errors_per_sec"),
    ("CONNECTIONS", "/connections"),
    ("IN B/S", "/bytes_in_per_sec"),
    ("OUT B/S", "/bytes_out_per_sec"),
    ("P99 US", "/p99_us"),
];

/// `tenants keyspace`: the tenant's keys and memory, asked of its Redis now.
const KEYSPACE: View = View::one(&[
    ("TENANT", "/tenant"),
    ("KEYS", "/keys"),
    ("MEMORY BYTES", "/memory_bytes"),
    ("METHOD", "/method"),
    ("ERROR", "/error"),
]);

/// `tenants divergence`: each double-write secondary of the tenant, every recent gateway's report together.
const DIVERGENCE: &[(&str, &str)] = &[
    ("RESOURCE", "/resource"),
    ("ESTIMATE", "/estimate"),
    ("SAMPLES", "/samples"),
    ("DIFFERING", "/differing"),
    ("PENDING", "/pending"),
    ("CATCHING UP", "/catching_up"),
    ("REPAIRED", "/repaired"),
    ("REPORTED", "/reported_at"),
];

/// What `tenants top` ranks by.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum TopBy {
    Ops,
    Errors,
    Connections,
}

/// Where a tenant's `max_connections` and `max_ops_per_sec` hold (`limits_scope`).
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum Scope {
    /// For the whole fleet of gateways: each enforces a share.
    Fleet,
    /// On each gateway on its own.
    Gateway,
}

/// Which keys a tenant's near cache holds (`near_cache.keys`).
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum CachedKeys {
    /// Keys read again and again on a gateway.
    Hot,
    /// Every key read.
    All,
}

/// A tenant's near cache, given whole (`near_cache`: docs/near-cache.md).
#[derive(Args)]
pub(crate) struct NearCacheArgs {
    /// Cache the tenant's hot reads in each gateway's memory, in at most this many bytes per gateway.
    #[arg(long)]
    near_cache_max_bytes: Option<u64>,
    /// Which keys the near cache holds (default: hot).
    #[arg(long, value_enum, requires = "near_cache_max_bytes")]
    near_cache_keys: Option<CachedKeys>,
    /// Largest value the near cache keeps, in bytes (default: 16384, or max-bytes if smaller).
    #[arg(long, requires = "near_cache_max_bytes")]
    near_cache_max_value_bytes: Option<u64>,
}

impl NearCacheArgs {
    /// The policy the flags give, if they give one.
    fn policy(&self) -> Option<NearCachePolicy> {
        let max_bytes = self.near_cache_max_bytes?;
        Some(NearCachePolicy {
            max_bytes,
            keys: match self.near_cache_keys {
                Some(CachedKeys::All) => NearCacheKeys::All,
                Some(CachedKeys::Hot) | None => NearCacheKeys::Hot,
            },
            max_value_bytes: self
                .near_cache_max_value_bytes
                .unwrap_or(DEFAULT_NEAR_CACHE_VALUE_BYTES.min(max_bytes.max(1))),
        })
    }
}

impl From<Scope> for LimitsScope {
    fn from(scope: Scope) -> LimitsScope {
        match scope {
            Scope::Fleet => LimitsScope::Fleet,
            Scope::Gateway => LimitsScope::Gateway,
        }
    }
}

#[derive(Subcommand)]
pub(crate) enum Tenants {
    /// List every tenant.
    #[command(
        after_help = "Examples:\n  switchyard-ctl tenants list\n  switchyard-ctl tenants list -o json"
    )]
    List,
    /// The busiest tenants now (their last two minutes, every gateway's summed), by ops/s, errors or
    /// connections.
    #[command(after_help = "Examples:\n  \
        switchyard-ctl tenants top\n  \
        switchyard-ctl tenants top --by errors --limit 5")]
    Top {
        #[arg(long, value_enum, default_value = "ops")]
        by: TopBy,
        /// At most this many tenants.
        #[arg(long, default_value_t = 10)]
        limit: usize,
    },
    /// The tenant's keys and the memory they take, asked of its Redis now: exact where it owns its databases,
    /// sampled under a key namespace (docs/usage.md#keys-and-memory).
    #[command(after_help = "Examples:\n  \
        switchyard-ctl tenants keyspace shop\n  \
        switchyard-ctl tenants keyspace shop -o json")]
    Keyspace { name: String },
    /// How far each double-write secondary of the tenant is from the primary: the share of keys found
    /// different among those the gateways sampled (ESTIMATE, 0 to 1), the keys the repair still owes it
    /// (PENDING) and those it repaired (docs/route-tables.md#repair-of-missed-writes).
    #[command(after_help = "Examples:\n  \
        switchyard-ctl tenants divergence shop\n  \
        switchyard-ctl tenants divergence shop -o json")]
    Divergence { name: String },
    /// Show one tenant.
    #[command(after_help = "Example:\n  switchyard-ctl tenants get shop -o yaml")]
    Get { name: String },
    /// Create a tenant (its limits and policies from a file, or from flags).
    #[command(after_help = "Examples:\n  \
        switchyard-ctl tenants create shop --description 'the web shop'\n  \
        switchyard-ctl tenants create shop --namespace 'shop:'\n  \
        switchyard-ctl tenants create shop --limits-scope gateway\n  \
        switchyard-ctl tenants create shop --near-cache-max-bytes 67108864 --near-cache-keys all\n  \
        switchyard-ctl tenants create --file shop.json   # a POST /v1/tenants body")]
    Create {
        /// The tenant's name (overrides the file's).
        name: Option<String>,
        /// A JSON file with the whole tenant (the body of `POST /v1/tenants`).
        #[arg(long, short = 'f')]
        file: Option<PathBuf>,
        #[arg(long)]
        description: Option<String>,
        /// A prefix put before every key the tenant names.
        #[arg(long)]
        namespace: Option<String>,
        /// Refuse the tenant's writes with READONLY.
        #[arg(long)]
        read_only: bool,
        /// Created disabled: its clients are refused until it is enabled.
        #[arg(long)]
        disabled: bool,
        /// The tenant may run admin commands (CONFIG, DEBUG, ...).
        #[arg(long)]
        allow_admin: bool,
        /// Where its max_connections and max_ops_per_sec hold (default: fleet).
        #[arg(long, value_enum)]
        limits_scope: Option<Scope>,
        #[command(flatten)]
        near_cache: NearCacheArgs,
    },
    /// Change a tenant: only what is given changes.
    #[command(after_help = "Examples:\n  \
        switchyard-ctl tenants update shop --disabled true\n  \
        switchyard-ctl tenants update shop --file patch.json   # a PATCH /v1/tenants/{tenant} body\n  \
        switchyard-ctl tenants update shop --near-cache-max-bytes 67108864   # or --no-near-cache\n  \
        switchyard-ctl tenants update shop --no-namespace --dry-run")]
    Update {
        name: String,
        /// A JSON file with the change (the body of `PATCH /v1/tenants/{tenant}`); flags override it.
        #[arg(long, short = 'f')]
        file: Option<PathBuf>,
        #[arg(long)]
        description: Option<String>,
        #[arg(long)]
        disabled: Option<bool>,
        #[arg(long)]
        allow_admin: Option<bool>,
        #[arg(long)]
        read_only: Option<bool>,
        #[arg(long, conflicts_with = "no_namespace")]
        namespace: Option<String>,
        /// Remove the tenant's namespace.
        #[arg(long)]
        no_namespace: bool,
        /// Where its max_connections and max_ops_per_sec hold.
        #[arg(long, value_enum)]
        limits_scope: Option<Scope>,
        /// The tenant's near cache, replaced whole.
        #[command(flatten)]
        near_cache: NearCacheArgs,
        /// Remove the tenant's near cache.
        #[arg(long, conflicts_with = "near_cache_max_bytes")]
        no_near_cache: bool,
        /// Change the namespace even though the tenant has a route and the keys it stored under the old one would
        /// no longer be found (409 keys_would_move).
        #[arg(long)]
        force: bool,
    },
    /// Delete a tenant with its credentials and route history.
    #[command(after_help = "Example:\n  switchyard-ctl tenants delete shop --dry-run")]
    Delete { name: String },
    /// A tenant's readiness probe: would its live traffic work on another deployment, without migrating?
    #[command(subcommand, name = "readiness-probe")]
    ReadinessProbe(crate::probes::Probe),
}

fn path(name: &str) -> String {
    format!("/v1/tenants/{name}")
}

impl Tenants {
    pub(crate) async fn run(self, session: &Session) -> Outcome {
        match self {
            Tenants::List => {
                let view = View::Rows {
                    list: "/tenants",
                    columns: COLUMNS,
                };
                session.show(Call::get("/v1/tenants"), &view).await
            }
            Tenants::Keyspace { name } => {
                let call = Call::get(format!("{}/keyspace", path(&name)));
                session.show(call, &KEYSPACE).await
            }
            Tenants::Divergence { name } => {
                let view = View::Rows {
                    list: "/secondaries",
                    columns: DIVERGENCE,
                };
                let call = Call::get(format!("{}/divergence", path(&name)));
                session.show(call, &view).await
            }
            Tenants::Top { by, limit } => {
                let list = match by {
                    TopBy::Ops => "/by_ops",
                    TopBy::Errors => "/by_errors",
                    TopBy::Connections => "/by_connections",
                };
                let view = View::Rows {
                    list,
                    columns: TOP_COLUMNS,
                };
                let call = Call::get(format!("/v1/usage?limit={limit}"));
                session.show(call, &view).await
            }
            Tenants::Get { name } => session.show(Call::get(path(&name)), &ONE).await,
            Tenants::Create {
                name,
                file,
                description,
                namespace,
                read_only,
                disabled,
                allow_admin,
                limits_scope,
                near_cache,
            } => {
                let mut tenant: TenantCreate = match &file {
                    Some(file) => read_json(file)?,
                    None => serde_json::from_value(serde_json::json!({ "name": "" }))?,
                };
                if let Some(name) = name {
                    tenant.name = name;
                }
                if tenant.name.is_empty() {
                    return Err(anyhow::anyhow!(
                        "a tenant needs a name (NAME, or \"name\" in --file)"
                    )
                    .into());
                }
                tenant.description = description.unwrap_or(tenant.description);
                tenant.namespace = namespace.or(tenant.namespace);
                tenant.read_only |= read_only;
                tenant.disabled |= disabled;
                tenant.allow_admin |= allow_admin;
                if let Some(scope) = limits_scope {
                    tenant.limits_scope = scope.into();
                }
                tenant.near_cache = near_cache.policy().or(tenant.near_cache);
                let call =
                    Call::new(Method::POST, "/v1/tenants").body(serde_json::to_value(&tenant)?);
                let change = Change::new(call, ONE).before(path(&tenant.name), "");
                session.change(change).await.map(drop)
            }
            Tenants::Update {
                name,
                file,
                description,
                disabled,
                allow_admin,
                read_only,
                namespace,
                no_namespace,
                limits_scope,
                near_cache,
                no_near_cache,
                force,
            } => {
                let mut patch: TenantPatch = match &file {
                    Some(file) => read_json(file)?,
                    None => TenantPatch::default(),
                };
                patch.description = description.or(patch.description);
                patch.disabled = disabled.or(patch.disabled);
                patch.allow_admin = allow_admin.or(patch.allow_admin);
                patch.read_only = read_only.or(patch.read_only);
                patch.limits_scope = limits_scope.map(LimitsScope::from).or(patch.limits_scope);
                if let Some(namespace) = namespace {
                    patch.namespace = Some(Some(namespace));
                }
                if no_namespace {
                    patch.namespace = Some(None);
                }
                if let Some(policy) = near_cache.policy() {
                    patch.near_cache = Some(Some(policy));
                }
                if no_near_cache {
                    patch.near_cache = Some(None);
                }
                patch.force |= force;
                let call =
                    Call::new(Method::PATCH, path(&name)).body(serde_json::to_value(&patch)?);
                let change = Change::new(call, ONE).before(path(&name), "");
                session.change(change).await.map(drop)
            }
            Tenants::ReadinessProbe(probe) => probe.run(session).await,
            Tenants::Delete { name } => {
                let change = Change::new(Call::new(Method::DELETE, path(&name)), View::deleted())
                    .before(path(&name), "");
                session.change(change).await.map(drop)
            }
        }
    }
}
