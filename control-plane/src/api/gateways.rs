//! `/v1/gateways`: gateways' heartbeats, and whether every live gateway serves the current revision.

use axum::extract::State;
use axum::http::Method;
use axum::routing::{get, post};
use axum::{Extension, Json};
use switchyard_schemas::api::{GatewayFleet, Heartbeat, HeartbeatAck};

use crate::auth::Access;
use crate::db;
use crate::db::audit::Actor;
use crate::error::ApiResult;
use crate::extract::JsonBody;
use crate::openapi::Operation;
use crate::state::AppState;

pub(crate) fn operations() -> Vec<Operation> {
    vec![
        Operation::new(
            "heartbeat",
            Method::POST,
            "/v1/gateways/heartbeat",
            "A gateway reports the revision it serves",
            Access::Gateway,
            post(heartbeat),
        )
        .request::<Heartbeat>()
        .reply::<HeartbeatAck>(200),
        Operation::new(
            "listGateways",
            Method::GET,
            "/v1/gateways",
            "Gateways, their revisions, and whether all live ones are current",
            Access::Admin,
            get(fleet),
        )
        .reply::<GatewayFleet>(200),
    ]
}

async fn heartbeat(
    State(state): State<AppState>,
    Extension(_gateway): Extension<Actor>,
    JsonBody(heartbeat): JsonBody<Heartbeat>,
) -> ApiResult<Json<HeartbeatAck>> {
    db::gateways::record(&state.pool, &heartbeat).await?;
    Ok(Json(HeartbeatAck {
        revision: db::revision::current(&state.pool).await?,
    }))
}

async fn fleet(State(state): State<AppState>) -> ApiResult<Json<GatewayFleet>> {
    let revision = db::revision::current(&state.pool).await?;
    let rows = db::gateways::list(&state.pool, state.settings.gateway_ttl).await?;
    let gateways: Vec<_> = rows.iter().map(|g| g.to_api(revision)).collect();
    let converged = gateways.iter().filter(|g| g.live).all(|g| g.up_to_date);
    Ok(Json(GatewayFleet {
        revision,
        converged,
        gateways,
    }))
}
