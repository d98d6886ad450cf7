//! The route guard: what a route change (`PUT .../route`, a rollback) does to where the tenant's keys are found,
//! and whether the resources it adds answer. A change that would leave keys where the gateways no longer look
//! (409 `keys_would_move`) or that names a resource the control plane cannot use (422) is refused unless the
//! request says `force`. The migration workflow changes routes without it: moving keys is what it is for.

mod namespace;
mod probe;
mod resource;

pub(crate) use namespace::NamespaceChange;
pub(crate) use resource::UrlChange;

use std::collections::{HashMap, HashSet};

use futures_util::future::join_all;
use sqlx::PgConnection;
use switchyard_schemas::api::{ErrorDetail, KeyMove, KeyMoves, MoveEstimate, percent};
use switchyard_schemas::placement::moves::{Estimate, Place, key_moves};
use switchyard_schemas::{RouteTable, Target};

use crate::db;
use crate::db::resources::Lock;
use crate::error::{ApiError, ApiResult};
use crate::{redact, references};

/// A route change to check: the tenant's current table (none for a first route) and the new one.
pub(crate) struct Guarded<'a> {
    pub(crate) tenant: &'a str,
    pub(crate) previous: Option<&'a RouteTable>,
    pub(crate) route: &'a RouteTable,
    pub(crate) force: bool,
    /// Where the table is in the request body, for error paths (`/route`, or `""` for a rollback's).
    pub(crate) prefix: &'static str,
}

impl Guarded<'_> {
    /// Measures the change and, unless forced, refuses one that strands keys or names a resource that does not
    /// answer as its URL says. Run inside the change's transaction (resource names read there).
    pub(crate) async fn check(&self, conn: &mut PgConnection) -> ApiResult<KeyMoves> {
        let names: Vec<String> = self
            .previous
            .into_iter()
            .chain([self.route])
            .flat_map(references::names)
            .collect();
        let urls = db::resources::urls(conn, &names, Lock::None).await?;
        let moves = match self.previous {
            None => KeyMoves::none(),
            Some(previous) => shown(key_moves(previous, self.route, &|name| {
                resolve(name, &urls)
            })),
        };
        if self.force {
            return Ok(moves);
        }
        if moves.strands_keys() {
            let message = format!(
                "{}: pass \"force\": true to change the route of '{}' anyway, or move the keys with a \
                 migration (POST /v1/tenants/{}/migrations)",
                moves.summary(),
                self.tenant,
                self.tenant
            );
            let details = moves
                .moves
                .iter()
                .map(|m| ErrorDetail {
                    path: self.prefix.to_string(),
                    message: format!(
                        "{} of the keys: {} -> {}",
                        percent(m.fraction),
                        m.from,
                        m.to
                    ),
                })
                .collect();
            return Err(keys_would_move(message, details));
        }
        self.probe_new_resources(&urls).await?;
        Ok(moves)
    }

    /// Probes, all at once, every resource of the new table that the current one does not name.
    async fn probe_new_resources(&self, urls: &HashMap<String, String>) -> ApiResult<()> {
        let url_of = |reference: &str| resolve(reference, urls);
        let known: HashSet<String> = self
            .previous
            .map(|previous| {
                uses(previous, "")
                    .into_iter()
                    .filter_map(|u| url_of(&u.reference))
                    .collect()
            })
            .unwrap_or_default();
        let mut fresh: HashMap<String, (String, bool)> = HashMap::new();
        for used in uses(self.route, self.prefix) {
            let Some(url) = url_of(&used.reference).filter(|url| !known.contains(url)) else {
                continue;
            };
            let entry = fresh.entry(url).or_insert((used.path, false));
            entry.1 |= used.writes;
        }
        let what = |failed: usize| {
            format!(
                "the route names resources the control plane cannot use; pass \"force\": true if they are \
                 provisioned later ({failed} of {} new resources failed their probe)",
                fresh.len()
            )
        };
        probe_all(&fresh, what).await
    }
}

/// The refusal of a change that would leave keys where the gateways no longer look.
fn keys_would_move(message: String, details: Vec<ErrorDetail>) -> ApiError {
    ApiError::ConflictWithDetails {
        code: "keys_would_move",
        message,
        details,
    }
}

/// Probes, all at once, each URL (with where it is in the request and whether routes write to it); a 422 naming
/// every one that failed, its message `what(how many failed)`.
async fn probe_all(
    fresh: &HashMap<String, (String, bool)>,
    what: impl FnOnce(usize) -> String,
) -> ApiResult<()> {
    let probes = fresh.iter().map(|(url, (path, writes))| async move {
        probe::probe(url, *writes)
            .await
            .err()
            .map(|why| ErrorDetail {
                path: path.clone(),
                message: format!("{}: {why}", redact::url(url)),
            })
    });
    let mut failed: Vec<ErrorDetail> = join_all(probes).await.into_iter().flatten().collect();
    if failed.is_empty() {
        return Ok(());
    }
    failed.sort_by(|a, b| a.path.cmp(&b.path));
    Err(ApiError::Unprocessable {
        message: what(failed.len()),
        details: failed,
    })
}

/// The URL a reference stands for: itself, or the registered URL of a name.
fn resolve(reference: &str, urls: &HashMap<String, String>) -> Option<String> {
    match references::is_name(reference) {
        true => urls.get(reference).cloned(),
        false => Some(reference.to_string()),
    }
}

/// The schemas' moves as the API shows them: names as they are, URLs without passwords.
fn shown(moves: switchyard_schemas::placement::moves::Moves) -> KeyMoves {
    let place = |p: &Place| {
        let resource = redact::url(&p.resource);
        match &p.shard {
            Some(shard) => format!("shard '{shard}': {resource}"),
            None => resource,
        }
    };
    let fraction = moves.share();
    let databases_dropped = moves.databases.map(|(from, to)| match from - to {
        1 => format!("{to}"),
        _ => format!("{to}-{}", from - 1),
    });
    let estimate = match (&moves.moves.is_empty(), moves.estimate) {
        (true, _) if databases_dropped.is_none() => MoveEstimate::None,
        (_, Estimate::Exact) => MoveEstimate::Exact,
        (_, Estimate::Sampled) => MoveEstimate::Sampled,
    };
    KeyMoves {
        fraction,
        estimate,
        moves: moves
            .moves
            .iter()
            .map(|m| KeyMove {
                from: place(&m.from),
                to: place(&m.to),
                fraction: m.share,
            })
            .collect(),
        databases_dropped,
    }
}

/// A resource reference of a table, where it is (a JSON pointer) and whether writes go to it.
struct Use {
    path: String,
    reference: String,
    writes: bool,
}

fn uses(route: &RouteTable, prefix: &str) -> Vec<Use> {
    match route {
        RouteTable::Single { target, .. } => target_uses(target, format!("{prefix}/target")),
        RouteTable::Sharded { shards, .. } => shards
            .iter()
            .enumerate()
            .flat_map(|(i, shard)| {
                target_uses(&shard.target, format!("{prefix}/shards/{i}/target"))
            })
            .collect(),
        RouteTable::DoubleWrite {
            primary, secondary, ..
        } => uses(primary, &format!("{prefix}/primary"))
            .into_iter()
            .chain(uses(secondary, &format!("{prefix}/secondary")))
            .collect(),
    }
}

fn target_uses(target: &Target, path: String) -> Vec<Use> {
    match target {
        Target::Resource(reference) => vec![Use {
            path,
            reference: reference.clone(),
            writes: true,
        }],
        Target::Split(split) => {
            let writes = split.write.resources.iter().enumerate().map(|(i, r)| Use {
                path: format!("{path}/write/resources/{i}"),
                reference: r.clone(),
                writes: true,
            });
            let reads = split.read.iter().flat_map(|read| {
                read.resources.iter().enumerate().map(|(i, r)| Use {
                    path: format!("{path}/read/resources/{i}"),
                    reference: r.clone(),
                    writes: false,
                })
            });
            writes.chain(reads).collect()
        }
    }
}
