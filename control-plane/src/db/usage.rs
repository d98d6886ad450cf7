//! Gateways' usage reports: each tenant's traffic by minute and gateway, each credential's connections and last
//! AUTH by gateway, kept for the usage window.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool};
use switchyard_schemas::api::{
    CredentialLastUse, NearCacheMinute, NearCacheUsage, TenantUsage, TenantUsageNow, UsagePoint,
    UsageRates,
};

use crate::db::{DbResult, WithOperation, timestamp};

/// Adds one gateway report's usage (covering `interval_ms`) to the current minute's rows of its tenants (those
/// the control plane does not know are dropped), records its credentials' use, and prunes every row older than
/// `window`.
pub(crate) async fn record(
    db: &PgPool,
    gateway: &str,
    interval_ms: u64,
    usage: &[TenantUsage],
    window: Duration,
) -> DbResult<()> {
    if !usage.is_empty() {
        let column = |f: fn(&TenantUsage) -> u64| column_of(usage, f);
        let tenants: Vec<String> = usage.iter().map(|u| u.tenant.clone()).collect();
        let connections: Vec<i64> = usage.iter().map(|u| u.connections).collect();
        let p99: Vec<Option<i64>> = usage.iter().map(|u| u.p99_us.map(clamp)).collect();
        let near = |f: fn(&NearCacheUsage) -> u64| {
            column_of(usage, move |u| u.near_cache.as_ref().map_or(0, f))
        };
        let near_bytes: Vec<Option<i64>> = usage
            .iter()
            .map(|u| u.near_cache.as_ref().map(|n| clamp(n.bytes)))
            .collect();
        sqlx::query!(
            "INSERT INTO tenant_usage (tenant_id, minute, gateway, covered_ms, commands, errors, bytes_in,
                                       bytes_out, connections, p99_us, near_cache_hits, near_cache_misses,
                                       near_cache_invalidations, near_cache_evictions, near_cache_bytes)
             SELECT t.id, date_trunc('minute', now()), $1, $2, u.commands, u.errors, u.bytes_in, u.bytes_out,
                    u.connections, u.p99_us, u.hits, u.misses, u.invalidations, u.evictions, u.near_bytes
               FROM UNNEST($3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[],
                           $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[],
                           $14::bigint[])
                    AS u(tenant, commands, errors, bytes_in, bytes_out, connections, p99_us, hits, misses,
                         invalidations, evictions, near_bytes)
               JOIN tenants t ON t.name = u.tenant
             ON CONFLICT (tenant_id, minute, gateway) DO UPDATE SET
                covered_ms = tenant_usage.covered_ms + EXCLUDED.covered_ms,
                commands = tenant_usage.commands + EXCLUDED.commands,
                errors = tenant_usage.errors + EXCLUDED.errors,
                bytes_in = tenant_usage.bytes_in + EXCLUDED.bytes_in,
                bytes_out = tenant_usage.bytes_out + EXCLUDED.bytes_out,
                connections = EXCLUDED.connections,
                p99_us = GREATEST(tenant_usage.p99_us, EXCLUDED.p99_us),
                near_cache_hits = tenant_usage.near_cache_hits + EXCLUDED.near_cache_hits,
                near_cache_misses = tenant_usage.near_cache_misses + EXCLUDED.near_cache_misses,
                near_cache_invalidations =
                    tenant_usage.near_cache_invalidations + EXCLUDED.near_cache_invalidations,
                near_cache_evictions = tenant_usage.near_cache_evictions + EXCLUDED.near_cache_evictions,
                near_cache_bytes = COALESCE(EXCLUDED.near_cache_bytes, tenant_usage.near_cache_bytes)",
            gateway,
            clamp(interval_ms),
            &tenants,
            &column(|u| u.commands),
            &column(|u| u.errors),
            &column(|u| u.bytes_in),
            &column(|u| u.bytes_out),
            &connections,
            &p99 as &[Option<i64>],
            &near(|n| n.hits),
            &near(|n| n.misses),
            &near(|n| n.invalidations),
            &near(|n| n.evictions),
            &near_bytes as &[Option<i64>],
        )
        .execute(db)
        .await
        .during("recording tenants' usage")?;
        let credentials = usage
            .iter()
            .flat_map(|u| u.credentials.iter().map(move |c| (&u.tenant, c)));
        let (mut tenants, mut digests, mut connections, mut auths) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (tenant, credential) in credentials {
            tenants.push(tenant.clone());
            digests.push(credential.digest.clone());
            connections.push(credential.connections);
            auths.push(credential.last_auth_ms);
        }
        sqlx::query!(
            "INSERT INTO credential_usage (credential_id, gateway, connections, last_auth_at)
             SELECT c.id, $1, u.connections, to_timestamp(u.auth_ms / 1000.0)
               FROM UNNEST($2::text[], $3::text[], $4::bigint[], $5::bigint[])
                    AS u(tenant, digest, connections, auth_ms)
               JOIN credentials c ON c.digest = u.digest
               JOIN tenants t ON t.id = c.tenant_id AND t.name = u.tenant
             ON CONFLICT (credential_id, gateway) DO UPDATE SET
                connections = EXCLUDED.connections,
                reported_at = now(),
                last_auth_at = COALESCE(EXCLUDED.last_auth_at, credential_usage.last_auth_at)",
            gateway,
            &tenants,
            &digests,
            &connections,
            &auths as &[Option<i64>],
        )
        .execute(db)
        .await
        .during("recording credentials' use")?;
    }
    sqlx::query!(
        "DELETE FROM tenant_usage WHERE minute < now() - make_interval(secs => $1)",
        window.as_secs_f64(),
    )
    .execute(db)
    .await
    .during("pruning tenants' usage")?;
    sqlx::query!(
        "DELETE FROM credential_usage WHERE reported_at < now() - make_interval(secs => $1)",
        window.as_secs_f64(),
    )
    .execute(db)
    .await
    .during("pruning credentials' use")?;
    Ok(())
}

/// The `UsageRates` of a row of `series` or `now`, whose columns are named alike.
macro_rules! rates {
    ($row:ident) => {
        UsageRates {
            ops_per_sec: $row.ops,
            errors_per_sec: $row.errors,
            bytes_in_per_sec: $row.bytes_in,
            bytes_out_per_sec: $row.bytes_out,
            connections: $row.connections,
            p99_us: $row.p99_us.map(|us| us.max(0) as u64),
        }
    };
}

/// One count of each tenant's usage, as Postgres' bigints.
fn column_of(usage: &[TenantUsage], f: impl Fn(&TenantUsage) -> u64) -> Vec<i64> {
    usage.iter().map(|u| clamp(f(u))).collect()
}

/// A count as Postgres' bigint holds it.
fn clamp(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// The tenant's minutes over the last `window` (every tenant's summed, for `None`), oldest first.
pub(crate) async fn series(
    db: impl PgExecutor<'_>,
    tenant_id: Option<i64>,
    window: Duration,
) -> DbResult<Vec<UsagePoint>> {
    let rows = sqlx::query!(
        r#"SELECT extract(epoch FROM minute)::bigint AS "minute!",
                  sum(commands::float8 * 1000 / GREATEST(covered_ms, 1)) AS "ops!",
                  sum(errors::float8 * 1000 / GREATEST(covered_ms, 1)) AS "errors!",
                  sum(bytes_in::float8 * 1000 / GREATEST(covered_ms, 1)) AS "bytes_in!",
                  sum(bytes_out::float8 * 1000 / GREATEST(covered_ms, 1)) AS "bytes_out!",
                  sum(connections)::bigint AS "connections!",
                  max(p99_us) AS p99_us,
                  sum(near_cache_hits)::bigint AS "near_cache_hits!",
                  sum(near_cache_misses)::bigint AS "near_cache_misses!",
                  sum(near_cache_invalidations)::bigint AS "near_cache_invalidations!",
                  sum(near_cache_evictions)::bigint AS "near_cache_evictions!",
                  sum(near_cache_bytes)::bigint AS near_cache_bytes
             FROM tenant_usage
            WHERE ($1::bigint IS NULL OR tenant_id = $1) AND minute > now() - make_interval(secs => $2)
            GROUP BY minute ORDER BY minute"#,
        tenant_id,
        window.as_secs_f64(),
    )
    .fetch_all(db)
    .await
    .during("reading usage by minute")?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let count = |n: i64| n.max(0) as u64;
            // A minute in which no gateway reported a near cache has no bytes: then it has none.
            let near_cache = row.near_cache_bytes.map(|bytes| {
                NearCacheMinute::new(NearCacheUsage {
                    hits: count(row.near_cache_hits),
                    misses: count(row.near_cache_misses),
                    invalidations: count(row.near_cache_invalidations),
                    evictions: count(row.near_cache_evictions),
                    bytes: count(bytes),
                })
            });
            UsagePoint {
                minute: row.minute,
                usage: rates!(row),
                near_cache,
            }
        })
        .collect())
}

/// Every tenant's traffic over the current and the previous minute: each gateway's rate over what its reports
/// covered and its connections at its last report, summed over gateways.
pub(crate) async fn now(db: impl PgExecutor<'_>) -> DbResult<Vec<TenantUsageNow>> {
    let rows = sqlx::query!(
        r#"WITH per_gateway AS (
             SELECT tenant_id,
                    sum(commands)::float8 * 1000 / GREATEST(sum(covered_ms), 1) AS ops,
                    sum(errors)::float8 * 1000 / GREATEST(sum(covered_ms), 1) AS errors,
                    sum(bytes_in)::float8 * 1000 / GREATEST(sum(covered_ms), 1) AS bytes_in,
                    sum(bytes_out)::float8 * 1000 / GREATEST(sum(covered_ms), 1) AS bytes_out,
                    (array_agg(connections ORDER BY minute DESC))[1] AS connections,
                    max(p99_us) AS p99_us
               FROM tenant_usage
              WHERE minute >= date_trunc('minute', now()) - interval '1 minute'
              GROUP BY tenant_id, gateway)
           SELECT t.name AS tenant, sum(p.ops) AS "ops!", sum(p.errors) AS "errors!",
                  sum(p.bytes_in) AS "bytes_in!", sum(p.bytes_out) AS "bytes_out!",
                  sum(p.connections)::bigint AS "connections!", max(p.p99_us) AS p99_us
             FROM per_gateway p JOIN tenants t ON t.id = p.tenant_id
            GROUP BY t.name"#,
    )
    .fetch_all(db)
    .await
    .during("reading tenants' usage now")?;
    Ok(rows
        .into_iter()
        .map(|row| TenantUsageNow {
            tenant: row.tenant,
            usage: rates!(row),
        })
        .collect())
}

/// What the gateways said of a credential: its connections now, and its last AUTH.
pub(crate) struct CredentialUse {
    pub(crate) connections: i64,
    pub(crate) last_used: Option<CredentialLastUse>,
}

/// The use of each of the tenant's credentials that a gateway reported within the window, by credential id; a
/// gateway's connections count only when it reported them within `fresh` (a gateway that stopped reporting,
/// stopped, holds none).
pub(crate) async fn credentials(
    db: impl PgExecutor<'_>,
    tenant_id: i64,
    fresh: Duration,
) -> DbResult<HashMap<i64, CredentialUse>> {
    let rows = sqlx::query!(
        r#"SELECT u.credential_id,
                  coalesce(sum(u.connections) FILTER (WHERE u.reported_at > now() - make_interval(secs => $2)), 0)::bigint
                      AS "connections!",
                  max(u.last_auth_at) AS last_auth_at,
                  (array_agg(u.gateway ORDER BY u.last_auth_at DESC NULLS LAST))[1] AS "gateway!"
             FROM credential_usage u JOIN credentials c ON c.id = u.credential_id
            WHERE c.tenant_id = $1
            GROUP BY u.credential_id"#,
        tenant_id,
        fresh.as_secs_f64(),
    )
    .fetch_all(db)
    .await
    .during("reading credentials' use")?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let last_used = row.last_auth_at.map(|at: DateTime<Utc>| CredentialLastUse {
                at: timestamp(at),
                gateway: row.gateway.clone(),
            });
            let usage = CredentialUse {
                connections: row.connections,
                last_used,
            };
            (row.credential_id, usage)
        })
        .collect())
}
