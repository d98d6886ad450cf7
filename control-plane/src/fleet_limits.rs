//! Fleet limits: a tenant's `max_ops_per_sec` and `max_connections` hold for every gateway together (unless its
//! `limits_scope` is `gateway`). Each gateway reports, in its heartbeat, the tenant's recent demand there; the
//! answer hands it its share of each limit, worked out from what every live gateway reported last (in Postgres,
//! so any replica answers alike). docs/tenant-policies.md, "Fleet limits", says why this way and what happens
//! when a gateway or the control plane goes away.
//!
//! A gateway's share is its fair part ([`fair`]) within what the other gateways may still use: a gateway keeps
//! the share it was last handed until its next heartbeat, and its open connections until its clients close them,
//! so the shares handed out never add up to more than the limit, even while demand moves between gateways (which
//! then takes one more heartbeat round).

use std::collections::BTreeMap;

use sqlx::PgConnection;
use switchyard_schemas::api::{Heartbeat, HeartbeatAck, LimitShare};

use crate::db;
use crate::db::limit_shares::{Grant, Seat};
use crate::error::ApiResult;

/// The part of a limit every live gateway gets whatever its demand, as a fraction of an even split: enough for an
/// idle gateway to admit a first burst, little enough that gateways without demand hold back little of the limit.
const FLOOR: f64 = 0.05;

/// How a share of one limit is counted.
#[derive(Clone, Copy)]
enum Unit {
    /// Commands per second: any fraction.
    Rate,
    /// Connections: whole ones.
    Count,
}

/// Each gateway's fair part of `limit`, by `demands`: an even floor for every one; then, when the demands above
/// the floor fit in what is left, each its demand and an even part of the rest; else what is left in proportion to
/// the demands above the floor. The parts add up to `limit`.
fn fair(limit: f64, demands: &[f64]) -> Vec<f64> {
    let n = demands.len() as f64;
    let floor = limit * FLOOR / n;
    let above: Vec<f64> = demands.iter().map(|d| (d - floor).max(0.0)).collect();
    let wanted: f64 = above.iter().sum();
    let rest = limit - floor * n;
    if wanted <= rest {
        let spare = (rest - wanted) / n;
        above.iter().map(|a| floor + a + spare).collect()
    } else {
        above.iter().map(|a| floor + rest * a / wanted).collect()
    }
}

/// The share of `limit` for gateway `me` among `seats` (every live gateway): its fair part, within what the
/// others may use until their next heartbeat (the share each was handed, or the even split a gateway enforces
/// before it has one, and at least what it holds).
fn share(limit: f64, unit: Unit, seats: &[Seat], demand: impl Fn(&Seat) -> f64, me: usize) -> f64 {
    let n = seats.len() as f64;
    let even = match unit {
        Unit::Rate => limit / n,
        Unit::Count => (limit / n).floor(),
    };
    let demands: Vec<f64> = seats.iter().map(&demand).collect();
    let fair = fair(limit, &demands)[me];
    let others: f64 = seats
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != me)
        .map(|(_, seat)| {
            let (share, held) = match unit {
                Unit::Rate => (seat.ops_share, 0.0),
                Unit::Count => (
                    seat.connection_share.map(|c| c as f64),
                    seat.connections as f64,
                ),
            };
            share.unwrap_or(even).max(held)
        })
        .sum();
    let left = (limit - others).max(0.0);
    match unit {
        Unit::Rate => fair.min(left),
        Unit::Count => fair.round().min(left.floor()),
    }
}

/// Records `heartbeat`'s demand and hands its gateway its shares: the heartbeat's answer, but for the revision.
/// Run in the heartbeat's transaction; shares are handed out one heartbeat at a time across replicas.
pub(crate) async fn hand_out(
    conn: &mut PgConnection,
    heartbeat: &Heartbeat,
    revision: i64,
) -> ApiResult<HeartbeatAck> {
    let mut ack = HeartbeatAck {
        revision,
        live_gateways: 0,
        shares: Vec::new(),
    };
    // A gateway from before fleet limits enforces its limits on its own and takes no share.
    if heartbeat.interval_ms.is_none() {
        return Ok(ack);
    }
    // Nothing to record and no tenant with demand anywhere: every tenant's share is the even split.
    if heartbeat.demand.is_empty() && !db::limit_shares::any(conn).await? {
        let live = db::limit_shares::live_gateways(conn).await?;
        ack.live_gateways = u32::try_from(live.len()).unwrap_or(u32::MAX);
        return Ok(ack);
    }
    db::limit_shares::lock(conn).await?;
    db::limit_shares::report(conn, &heartbeat.id, &heartbeat.demand).await?;
    db::limit_shares::prune(conn).await?;
    let live = db::limit_shares::live_gateways(conn).await?;
    ack.live_gateways = u32::try_from(live.len()).unwrap_or(u32::MAX);
    let mut tenants: BTreeMap<i64, Vec<Seat>> = BTreeMap::new();
    for seat in db::limit_shares::seats(conn).await? {
        tenants.entry(seat.tenant_id).or_default().push(seat);
    }
    let mut grants = Vec::new();
    for (tenant_id, mut seats) in tenants {
        // Every live gateway has a seat, with no demand when it reported none.
        for gateway in &live {
            if !seats.iter().any(|s| &s.gateway_id == gateway) {
                seats.push(Seat::idle(&seats[0], gateway));
            }
        }
        let Some(me) = seats.iter().position(|s| s.gateway_id == heartbeat.id) else {
            continue;
        };
        let limits = &seats[me];
        let ops = limits
            .max_ops_per_sec
            .map(|limit| share(limit as f64, Unit::Rate, &seats, |s| s.ops_demand, me));
        let connections = limits.max_connections.map(|limit| {
            let demand = |s: &Seat| (s.connections + s.connections_refused) as f64;
            share(limit as f64, Unit::Count, &seats, demand, me)
        });
        ack.shares.push(LimitShare {
            tenant: limits.tenant.clone(),
            ops_per_sec: ops,
            connections: connections.map(|c| c as u32),
        });
        grants.push(Grant {
            tenant_id,
            ops_share: ops,
            connection_share: connections.map(|c| c as i64),
        });
    }
    db::limit_shares::grant(conn, &heartbeat.id, &grants).await?;
    Ok(ack)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seat(gateway: &str, ops: f64, connections: i64, shares: (Option<f64>, Option<i64>)) -> Seat {
        Seat {
            tenant_id: 1,
            tenant: "t".to_string(),
            max_ops_per_sec: Some(300),
            max_connections: Some(30),
            gateway_id: gateway.to_string(),
            ops_demand: ops,
            connections,
            connections_refused: 0,
            ops_share: shares.0,
            connection_share: shares.1,
        }
    }

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
    }

    #[test]
    fn fair_parts_add_up_to_the_limit_with_a_floor_for_idle_gateways() {
        // Contended: a floor of 5 each, the remaining 285 by demand above the floor.
        let parts = fair(300.0, &[1005.0, 290.0, 0.0]);
        assert!(close(
            &parts,
            &[
                5.0 + 285.0 * 1000.0 / 1285.0,
                5.0 + 285.0 * 285.0 / 1285.0,
                5.0
            ]
        ));
        assert!((parts.iter().sum::<f64>() - 300.0).abs() < 1e-9);
        // Room to spare: each its demand (at least the floor), the 145 left split evenly.
        let parts = fair(300.0, &[105.0, 45.0, 0.0]);
        let spare = (285.0 - 140.0) / 3.0;
        assert!(close(&parts, &[105.0 + spare, 45.0 + spare, 5.0 + spare]));
        // No demand anywhere: the even split.
        assert!(close(
            &fair(300.0, &[0.0, 0.0, 0.0]),
            &[100.0, 100.0, 100.0]
        ));
    }

    #[test]
    fn a_share_never_takes_what_another_gateway_may_still_use() {
        // Demand moved to b, but a was handed 250 and keeps it until its next heartbeat: b gets what is left.
        let seats = [
            seat("a", 0.0, 0, (Some(250.0), None)),
            seat("b", 1000.0, 0, (Some(40.0), None)),
            seat("c", 0.0, 0, (Some(10.0), None)),
        ];
        let b = share(300.0, Unit::Rate, &seats, |s| s.ops_demand, 1);
        assert!((b - 40.0).abs() < 1e-9, "{b}");
        // a's next heartbeat gives back all but its floor; then b gets its fair part.
        let a = share(300.0, Unit::Rate, &seats, |s| s.ops_demand, 0);
        assert!((a - 5.0).abs() < 1e-9, "{a}");
        let seats = [
            seat("a", 0.0, 0, (Some(a), None)),
            seat("b", 1000.0, 0, (Some(40.0), None)),
            seat("c", 0.0, 0, (Some(10.0), None)),
        ];
        let b = share(300.0, Unit::Rate, &seats, |s| s.ops_demand, 1);
        assert!((b - 285.0).abs() < 1e-9, "{b}");
        // A gateway without a share yet is taken to enforce the even split.
        let seats = [
            seat("a", 1000.0, 0, (None, None)),
            seat("b", 0.0, 0, (None, None)),
            seat("c", 0.0, 0, (None, None)),
        ];
        let a = share(300.0, Unit::Rate, &seats, |s| s.ops_demand, 0);
        assert!((a - 100.0).abs() < 1e-9, "{a}");
    }

    #[test]
    fn connection_shares_are_whole_and_count_what_each_gateway_holds() {
        // b holds 20 connections though its share is down to 5: a may not have more than 30 - 20 - c's 3.
        let seats = [
            seat("a", 0.0, 10, (Some(10.0), Some(10))),
            seat("b", 0.0, 20, (Some(5.0), Some(5))),
            seat("c", 0.0, 1, (Some(3.0), Some(3))),
        ];
        let demand = |s: &Seat| s.connections as f64 + 50.0;
        let a = share(30.0, Unit::Count, &seats, demand, 0);
        assert_eq!(a, 7.0);
        // Nothing held elsewhere: a fair, whole part.
        let seats = [
            seat("a", 0.0, 0, (None, None)),
            seat("b", 0.0, 0, (Some(0.0), Some(0))),
        ];
        let a = share(7.0, Unit::Count, &seats, |s| s.connections as f64, 0);
        assert_eq!(a, 4.0);
    }
}
