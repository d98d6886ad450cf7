//! The databases a tenant's route reaches, each named as one place so that two routes reaching one database name
//! it alike, and the rule they are held to: a tenant without a key namespace never shares a database with
//! namespaced tenants. No namespace is the start of every namespace, so its clients would read and write every
//! other tenant's keys there (`KEYS *`, `SCAN`, `FLUSHDB`), as overlapping namespaces would; the reverse (a
//! namespaced tenant joining a database a tenant without one uses) is refused alike, with the same 409
//! `namespace_overlaps`. Admin tenants (`allow_admin`) are left out on either side: they are the operators' own
//! tools, whose admin commands reach the whole server whatever their namespace, so keeping them out of a shared
//! database would protect nothing.
//!
//! Places are read from resource URLs alone (`switchyard_schemas::databases`): two URLs that name one server
//! differently are not seen as one, and docs/tenant-policies.md asks operators to name each server one way.
//!
//! A migration's destination is held to a stricter rule (`check_destination`): backfill copies into it and verify
//! deletes from it every key of the migrating tenant's namespace (of its whole database, without one), so no other
//! tenant (admin tenants included) may have keys there that could be the migrating tenant's. The rule holds from
//! the migration's creation until it is finished or aborted: `check`, which every change that records or alters
//! what a route reaches runs (a route, a resource URL, a namespace), holds each active migration's destination to
//! it too, and the steps that write to the destination or move the tenant check again.

use std::collections::{BTreeSet, HashMap};

use sqlx::PgPool;
use switchyard_schemas::policy::namespaces_overlap;
use switchyard_schemas::{RouteTable, databases};

use crate::db;
use crate::db::change::Change;
use crate::error::{ApiError, ApiResult};
use crate::references;

/// Every database `route` reaches, sorted (see `switchyard_schemas::databases`). `urls` are the URLs of the
/// resources it names.
pub(crate) fn places(route: &RouteTable, urls: &HashMap<String, String>) -> Vec<String> {
    databases::places(route, &|name| urls.get(name).cloned())
}

/// Records `places` as the databases of the tenant's current route, then holds it to the rule (see `check`).
pub(crate) async fn record(
    change: &mut Change,
    tenant_id: i64,
    places: &[String],
) -> ApiResult<()> {
    db::databases::replace(change.conn(), tenant_id, places).await?;
    check(change, tenant_id).await
}

/// Refuses (409 `namespace_overlaps`) a tenant that shares a database with a tenant of the other kind, with a
/// namespace where it has none or none where it has one, neither being an admin tenant; then (409
/// `destination_shared`) one whose keys could collide with a migrating tenant's in a database of the migration's
/// destination (`check_destinations`). Takes the revision lock first (`Change::revision`), so that two changes
/// cannot each pass this check into one database.
pub(crate) async fn check(change: &mut Change, tenant_id: i64) -> ApiResult<()> {
    change.revision().await?;
    if let Some(mixed) = db::databases::mixed(change.conn(), tenant_id).await? {
        let (tenant, other, place) = (mixed.tenant, mixed.other, mixed.place);
        let message = match mixed.namespace {
            Some(namespace) => databases::mixed_namespaces(&tenant, &other, &namespace, &place),
            None => format!(
                "tenant '{other}' uses database {place} without a key namespace: no namespace is the start of every \
                 namespace, so '{other}' would see tenant '{tenant}''s keys"
            ),
        };
        return Err(ApiError::Conflict {
            code: "namespace_overlaps",
            message,
        });
    }
    check_destinations(change, tenant_id).await
}

/// Holds the destination of every active migration to `check_destination`'s rule wherever `tenant_id` takes part:
/// as a tenant whose route reaches one of its databases (a route, resource URL or namespace change brought it
/// there or changed its keys), or as the migrating tenant (a resource URL change moved its destination). The
/// destination's places are read from the resources' URLs as they are in this transaction: a resource change
/// stores its new URL before the check. They are read without a lock, as the revision lock orders every change
/// that could move them (locking them could deadlock with a resource update that holds one and waits for it).
async fn check_destinations(change: &mut Change, tenant_id: i64) -> ApiResult<()> {
    let migrations = db::migrations::active_destinations(change.conn()).await?;
    if migrations.is_empty() {
        return Ok(());
    }
    let names: BTreeSet<String> = migrations
        .iter()
        .flat_map(|m| references::names(&m.destination.0))
        .collect();
    let names: Vec<String> = names.into_iter().collect();
    let urls = db::resources::urls(change.conn(), &names, db::resources::Lock::None).await?;
    let reached: BTreeSet<String> = db::databases::of_tenant(change.conn(), tenant_id)
        .await?
        .into_iter()
        .collect();
    for migration in migrations {
        let migrating = migration.tenant_id == tenant_id;
        let places = places(&migration.destination.0, &urls);
        if !migrating && !places.iter().any(|place| reached.contains(place)) {
            continue;
        }
        let namespace = migration.namespace.as_deref();
        let neighbours =
            db::databases::neighbours(change.conn(), migration.tenant_id, &places).await?;
        let found = neighbours
            .into_iter()
            .filter(|n| migrating || n.other_id == tenant_id)
            .find(|n| collide(namespace, n.namespace.as_deref()));
        if let Some(found) = found {
            let tenant = (migration.tenant.as_str(), namespace);
            return Err(destination_shared(Some(migration.id), tenant, found));
        }
    }
    Ok(())
}

/// Whether a key of a tenant with namespace `mine` could be one of a tenant with namespace `theirs` in one
/// database: always when either has none (its keys are any key), else when the namespaces overlap.
fn collide(mine: Option<&str>, theirs: Option<&str>) -> bool {
    match (mine, theirs) {
        (Some(mine), Some(theirs)) => namespaces_overlap(mine, theirs),
        _ => true,
    }
}

/// Refuses (409 `destination_shared`) a migration of `tenant` (namespace `namespace`) into `places`, the
/// databases of its destination, when another tenant's route reaches one of them and their keys could collide.
/// `migration` is the migration's id once it exists (a step checks again before it writes or moves the tenant).
/// Takes the revision lock first, as `check` does.
pub(crate) async fn check_destination(
    change: &mut Change,
    migration: Option<i64>,
    tenant: (i64, &str),
    namespace: Option<&str>,
    places: &[String],
) -> ApiResult<()> {
    change.revision().await?;
    let (tenant_id, name) = tenant;
    let neighbours = db::databases::neighbours(change.conn(), tenant_id, places).await?;
    match neighbours
        .into_iter()
        .find(|n| collide(namespace, n.namespace.as_deref()))
    {
        Some(found) => Err(destination_shared(migration, (name, namespace), found)),
        None => Ok(()),
    }
}

/// The 409 `destination_shared` for migrating tenant `tenant` (its name and namespace) whose destination `found`
/// shares: why their keys could collide, and what to do, which depends on whether the migration exists yet.
fn destination_shared(
    migration: Option<i64>,
    tenant: (&str, Option<&str>),
    found: db::databases::Neighbour,
) -> ApiError {
    let (name, namespace) = tenant;
    let (other, place) = (found.other, found.place);
    let why = match (namespace, found.namespace) {
        (None, _) => format!(
            "tenant '{name}' has no key namespace, so its keys are every key of database {place}, which tenant \
             '{other}' uses too: backfill would copy over and verify would delete '{other}''s keys"
        ),
        (Some(mine), None) => format!(
            "tenant '{other}' uses database {place} without a key namespace, so its keys may be any key, those \
             under '{name}''s namespace '{mine}' included: verify would repair or delete them"
        ),
        (Some(mine), Some(theirs)) => format!(
            "tenant '{other}' uses database {place} with namespace '{theirs}', which overlaps '{name}''s \
             namespace '{mine}': verify would repair or delete '{other}''s keys"
        ),
    };
    let message = match migration {
        None => format!(
            "{why}; migrate '{name}' to databases where no other tenant's keys could be its own (a namespaced \
             tenant's may be shared with tenants whose namespaces are apart from its own)"
        ),
        Some(id) => format!(
            "migration {id} of tenant '{name}' moves it into database {place}: {why}. Until the migration is \
             finished or aborted, no other tenant whose keys could be '{name}''s may use that database; if one \
             does, move it out (or give it a namespace apart from '{name}''s) before the next step, or abort the \
             migration (abort deletes nothing)"
        ),
    };
    ApiError::Conflict {
        code: "destination_shared",
        message,
    }
}

/// Records the databases of routes stored before they were recorded (a control plane of an earlier version
/// wrote them), so that the rule sees them. A no-op once they are.
pub(crate) async fn record_stored(pool: &PgPool) -> db::DbResult<()> {
    let unrecorded = db::databases::unrecorded(pool).await?;
    if unrecorded.is_empty() {
        return Ok(());
    }
    let urls = db::resources::all_urls(pool).await?;
    for (tenant_id, route) in unrecorded {
        db::databases::record_unrecorded(pool, tenant_id, &places(&route.0, &urls)).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(json: &str) -> RouteTable {
        serde_json::from_str(json).expect("a route table")
    }

    #[test]
    fn keys_collide_unless_both_tenants_have_namespaces_apart() {
        assert!(!collide(Some("t1:"), Some("t2:")));
        assert!(collide(Some("app:"), Some("app:x:")));
        assert!(collide(Some("t1:"), None));
        assert!(collide(None, Some("t1:")));
        assert!(collide(None, None));
    }

    #[test]
    fn one_database_is_named_alike_however_a_route_reaches_it() {
        let urls: HashMap<String, String> = [
            ("main", "rediss://user:pw@Cache.Example:6380/2"),
            (
                "ha",
                "redis-sentinel-slaves://s1:26379,s2:26379/mymaster?db=1&withMaster=true",
            ),
            ("cluster", "redis-cluster://c1:7000,c2:7001"),
        ]
        .into_iter()
        .map(|(name, url)| (name.to_string(), url.to_string()))
        .collect();
        let single = route(r#"{"type": "single", "target": "main"}"#);
        assert_eq!(places(&single, &urls), ["cache.example:6380/2"]);
        let inline = route(
            r#"{"type": "single", "target": "redis://cache.example:6380/2", "databases": 2}"#,
        );
        assert_eq!(
            places(&inline, &urls),
            ["cache.example:6380/2", "cache.example:6380/3"]
        );
        let sharded = route(
            r#"{"type": "sharded", "shards": [
                {"name": "a", "target": "cluster"},
                {"name": "b", "target": {"write": {"resources": ["redis-sentinel://s2:26379/mymaster?db=1"]},
                                         "read": {"resources": ["ha"]}}}]}"#,
        );
        assert_eq!(
            places(&sharded, &urls),
            [
                "c1:7000/0",
                "c2:7001/0",
                "sentinel s1:26379 mymaster/1",
                "sentinel s2:26379 mymaster/1"
            ]
        );
        // A double-write table reaches both its tables' databases; a name no resource has reaches none.
        let moving = route(
            r#"{"type": "double_write",
                "primary": {"type": "single", "target": "main"},
                "secondary": {"type": "single", "target": "gone"}}"#,
        );
        assert_eq!(places(&moving, &urls), ["cache.example:6380/2"]);
    }
}
