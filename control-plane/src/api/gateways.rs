//! `/v1/gateways`: gateways' heartbeats, whether every live gateway serves the current revision, and removing a
//! gateway from the fleet.

use axum::extract::State;
use axum::http::{Method, StatusCode};
use axum::routing::{delete, get, post};
use axum::{Extension, Json};
use switchyard_schemas::api::{GatewayFleet, Heartbeat, HeartbeatAck};

use crate::auth::Access;
use crate::db;
use crate::db::audit::{Actor, AuditRecord};
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiPath, JsonBody};
use crate::fleet_limits;
use crate::openapi::Operation;
use crate::state::AppState;

pub(crate) fn operations() -> Vec<Operation> {
    vec![
        Operation::new(
            "heartbeat",
            Method::POST,
            "/v1/gateways/heartbeat",
            "A gateway reports the revision it serves and its tenants' demand; the answer hands it its shares of fleet limits",
            Access::Gateway,
            post(heartbeat),
        )
        .request::<Heartbeat>()
        .example(serde_json::json!({"id": "gw-1", "address": "127.0.0.1:6380", "revision": 4, "version": "0.1.0",
            "interval_ms": 2000, "demand": [{"tenant": "acme", "ops_per_sec": 812.5, "connections": 12, "connections_refused": 0}]}))
        .reply::<HeartbeatAck>(200),
        Operation::new(
            "listGateways",
            Method::GET,
            "/v1/gateways",
            "Gateways, their revisions, and whether all live ones are current (false when none is live)",
            Access::Read,
            get(fleet),
        )
        .reply::<GatewayFleet>(200),
        Operation::new(
            "deleteGateway",
            Method::DELETE,
            "/v1/gateways/{id}",
            "Forget a gateway (a running one comes back with its next heartbeat)",
            Access::Change,
            delete(remove),
        )
        .reply_empty(204)
        .errors(&[404]),
    ]
}

/// Records the heartbeat and hands the gateway its shares of fleet limits (`fleet_limits`).
async fn heartbeat(
    State(state): State<AppState>,
    Extension(_gateway): Extension<Actor>,
    JsonBody(heartbeat): JsonBody<Heartbeat>,
) -> ApiResult<Json<HeartbeatAck>> {
    let mut tx = state
        .pool
        .begin()
        .await
        .map_err(|e| ApiError::internal("starting a heartbeat", e))?;
    db::gateways::record(&mut *tx, &heartbeat).await?;
    let revision = db::revision::current(&mut *tx).await?;
    let ack = fleet_limits::hand_out(&mut tx, &heartbeat, revision).await?;
    tx.commit()
        .await
        .map_err(|e| ApiError::internal("committing a heartbeat", e))?;
    Ok(Json(ack))
}

async fn fleet(State(state): State<AppState>) -> ApiResult<Json<GatewayFleet>> {
    db::gateways::forget_silent(&state.pool, state.settings.gateway_retention).await?;
    let revision = db::revision::current(&state.pool).await?;
    let rows = db::gateways::list(&state.pool, state.settings.gateway_ttl).await?;
    let gateways: Vec<_> = rows.iter().map(|g| g.to_api(revision)).collect();
    let live: Vec<_> = gateways.iter().filter(|g| g.live).collect();
    // With no live gateway nothing serves the revision: "converged" would tell a deploy script the opposite.
    let converged = !live.is_empty() && live.iter().all(|g| g.up_to_date);
    Ok(Json(GatewayFleet {
        revision,
        converged,
        live: live.len(),
        gateways,
    }))
}

/// Fleet membership is not part of the snapshot, so removing a gateway is audited at the current revision
/// instead of making a new one (which every gateway would have to catch up with before the next migration step).
async fn remove(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<StatusCode> {
    let mut tx = state
        .pool
        .begin()
        .await
        .map_err(|e| ApiError::internal("starting a gateway removal", e))?;
    let revision = db::revision::current(&mut *tx).await?;
    let removed = db::gateways::remove(&mut tx, &id, state.settings.gateway_ttl)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no gateway '{id}'")))?;
    let record = AuditRecord::new(
        "gateway.delete",
        None,
        format!("gateways/{id}"),
        Some(&removed.to_api(revision)),
        None::<&()>,
    );
    db::audit::insert(&mut tx, revision, &actor, &record).await?;
    // Not a change of the snapshot, so not `AppState::commit`: the dry run is this handler's to honour.
    if crate::dry_run::active() {
        return Ok(StatusCode::NO_CONTENT); // dropping the transaction rolls it back
    }
    tx.commit()
        .await
        .map_err(|e| ApiError::internal("committing a gateway removal", e))?;
    tracing::info!(gateway = id, actor = actor.0, "gateway removed");
    Ok(StatusCode::NO_CONTENT)
}
