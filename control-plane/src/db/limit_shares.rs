//! Fleet limits' shares (see `fleet_limits`): each live gateway's demand for each tenant whose limits hold for
//! the fleet, and the share last handed to it.
//!
//! A gateway takes part while it has missed fewer than three heartbeats (at its own interval, and at least 3 s, so
//! that one slow answer does not take its share away): a stopped gateway's shares go back to the others within
//! that. Gateways from before fleet limits (no interval) take no part.

use sqlx::PgConnection;
use switchyard_schemas::api::LimitDemand;

use crate::db::{DbResult, WithOperation};

/// Advisory-lock class of handing out shares: one heartbeat at a time, whichever replica answers it.
const SHARES_LOCK_CLASS: i32 = 0x5359_464c; // "SYFL"

/// One gateway's figures for one tenant, with the tenant's limits.
pub(crate) struct Seat {
    pub(crate) tenant_id: i64,
    pub(crate) tenant: String,
    pub(crate) max_ops_per_sec: Option<i64>,
    pub(crate) max_connections: Option<i64>,
    pub(crate) gateway_id: String,
    pub(crate) ops_demand: f64,
    pub(crate) connections: i64,
    pub(crate) connections_refused: i64,
    pub(crate) ops_share: Option<f64>,
    pub(crate) connection_share: Option<i64>,
}

impl Seat {
    /// The seat of a live gateway that reported no demand for `like`'s tenant and was handed no share of it.
    pub(crate) fn idle(like: &Seat, gateway: &str) -> Seat {
        Seat {
            tenant_id: like.tenant_id,
            tenant: like.tenant.clone(),
            max_ops_per_sec: like.max_ops_per_sec,
            max_connections: like.max_connections,
            gateway_id: gateway.to_string(),
            ops_demand: 0.0,
            connections: 0,
            connections_refused: 0,
            ops_share: None,
            connection_share: None,
        }
    }
}

/// The shares handed to a gateway for one tenant.
pub(crate) struct Grant {
    pub(crate) tenant_id: i64,
    pub(crate) ops_share: Option<f64>,
    pub(crate) connection_share: Option<i64>,
}

/// Whether any tenant has demand recorded (a seat), anywhere.
pub(crate) async fn any(conn: &mut PgConnection) -> DbResult<bool> {
    sqlx::query_scalar!(r#"SELECT EXISTS (SELECT 1 FROM limit_shares) AS "any!""#)
        .fetch_one(conn)
        .await
        .during("looking for limit shares")
}

/// Waits for the shares' lock, held until the transaction ends.
pub(crate) async fn lock(conn: &mut PgConnection) -> DbResult<()> {
    sqlx::query!("SELECT pg_advisory_xact_lock($1, 0)", SHARES_LOCK_CLASS)
        .execute(conn)
        .await
        .during("taking the limit shares' lock")?;
    Ok(())
}

/// Replaces `gateway`'s demand with `demand` (its tenants not named there have none now; names of tenants
/// that no longer exist are skipped).
pub(crate) async fn report(
    conn: &mut PgConnection,
    gateway: &str,
    demand: &[LimitDemand],
) -> DbResult<()> {
    sqlx::query!(
        "UPDATE limit_shares SET ops_demand = 0, connections = 0, connections_refused = 0
         WHERE gateway_id = $1",
        gateway,
    )
    .execute(&mut *conn)
    .await
    .during("clearing a gateway's demand")?;
    let tenants: Vec<String> = demand.iter().map(|d| d.tenant.clone()).collect();
    let ops: Vec<f64> = demand.iter().map(|d| d.ops_per_sec.max(0.0)).collect();
    let connections: Vec<i64> = demand.iter().map(|d| i64::from(d.connections)).collect();
    let refused: Vec<i64> = demand
        .iter()
        .map(|d| i64::from(d.connections_refused))
        .collect();
    sqlx::query!(
        "INSERT INTO limit_shares (tenant_id, gateway_id, ops_demand, connections, connections_refused)
         SELECT t.id, $1, d.ops, d.connections, d.refused
         FROM unnest($2::text[], $3::float8[], $4::int8[], $5::int8[])
              AS d(tenant, ops, connections, refused)
         JOIN tenants t ON t.name = d.tenant
         ON CONFLICT (tenant_id, gateway_id) DO UPDATE
         SET ops_demand = EXCLUDED.ops_demand, connections = EXCLUDED.connections,
             connections_refused = EXCLUDED.connections_refused",
        gateway,
        &tenants,
        &ops,
        &connections,
        &refused,
    )
    .execute(conn)
    .await
    .during("recording a gateway's demand")?;
    Ok(())
}

/// Drops the rows of gateways that no longer take part, of tenants whose limits no longer hold for the fleet,
/// and of tenants no gateway reports any demand for.
pub(crate) async fn prune(conn: &mut PgConnection) -> DbResult<()> {
    sqlx::query!(
        "DELETE FROM limit_shares s USING gateways g
         WHERE g.id = s.gateway_id
           AND (g.heartbeat_interval_ms IS NULL
                OR g.last_seen <= now() - make_interval(secs => greatest(3 * g.heartbeat_interval_ms / 1000.0, 3)))",
    )
    .execute(&mut *conn)
    .await
    .during("dropping the shares of gateways gone")?;
    sqlx::query!(
        "DELETE FROM limit_shares s USING tenants t
         WHERE t.id = s.tenant_id
           AND (t.policy ->> 'limits_scope' = 'gateway'
                OR (t.max_ops_per_sec IS NULL AND t.max_connections IS NULL))",
    )
    .execute(&mut *conn)
    .await
    .during("dropping the shares of tenants limited per gateway")?;
    sqlx::query!(
        "DELETE FROM limit_shares WHERE tenant_id IN (
             SELECT tenant_id FROM limit_shares GROUP BY tenant_id
             HAVING bool_and(ops_demand = 0 AND connections = 0 AND connections_refused = 0))",
    )
    .execute(conn)
    .await
    .during("dropping the shares of idle tenants")?;
    Ok(())
}

/// The gateways that take part in fleet limits now, by id.
pub(crate) async fn live_gateways(conn: &mut PgConnection) -> DbResult<Vec<String>> {
    sqlx::query_scalar!(
        "SELECT id FROM gateways
         WHERE heartbeat_interval_ms IS NOT NULL
           AND last_seen > now() - make_interval(secs => greatest(3 * heartbeat_interval_ms / 1000.0, 3))
         ORDER BY id",
    )
    .fetch_all(conn)
    .await
    .during("listing the gateways that share limits")
}

/// Every seat (after [`prune`]: of live gateways, for tenants with demand), by tenant.
pub(crate) async fn seats(conn: &mut PgConnection) -> DbResult<Vec<Seat>> {
    sqlx::query_as!(
        Seat,
        "SELECT s.tenant_id, t.name AS tenant, t.max_ops_per_sec, t.max_connections, s.gateway_id,
                s.ops_demand, s.connections, s.connections_refused, s.ops_share, s.connection_share
         FROM limit_shares s JOIN tenants t ON t.id = s.tenant_id
         ORDER BY s.tenant_id, s.gateway_id",
    )
    .fetch_all(conn)
    .await
    .during("reading the limit shares")
}

/// Records the shares handed to `gateway`.
pub(crate) async fn grant(
    conn: &mut PgConnection,
    gateway: &str,
    grants: &[Grant],
) -> DbResult<()> {
    let tenants: Vec<i64> = grants.iter().map(|g| g.tenant_id).collect();
    let ops: Vec<Option<f64>> = grants.iter().map(|g| g.ops_share).collect();
    let connections: Vec<Option<i64>> = grants.iter().map(|g| g.connection_share).collect();
    sqlx::query!(
        "INSERT INTO limit_shares (tenant_id, gateway_id, ops_share, connection_share)
         SELECT d.tenant_id, $1, d.ops, d.connections
         FROM unnest($2::int8[], $3::float8[], $4::int8[]) AS d(tenant_id, ops, connections)
         ON CONFLICT (tenant_id, gateway_id) DO UPDATE
         SET ops_share = EXCLUDED.ops_share, connection_share = EXCLUDED.connection_share",
        gateway,
        &tenants,
        &ops as &[Option<f64>],
        &connections as &[Option<i64>],
    )
    .execute(conn)
    .await
    .during("recording the limit shares handed out")?;
    Ok(())
}
