//! `GET /v1/tenants/{tenant}/keyspace`: how many keys a tenant holds and the memory they take, asked of its Redis
//! by the control plane at the request (docs/usage.md#keys-and-memory): `DBSIZE` where the tenant owns its
//! database (or shares it without a namespace: everyone's keys there), a sample of `RANDOMKEY` where it shares one
//! under a key namespace, and `INFO` for the memory.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::Method;
use axum::routing::get;
use redis::RedisResult;
use switchyard_schemas::RouteTable;
use switchyard_schemas::api::{KeyspaceMethod, ServerKeyspace, TenantKeyspace};

use crate::api::lookup;
use crate::auth::Access;
use crate::db::{self, WithOperation};
use crate::error::ApiResult;
use crate::extract::ApiPath;
use crate::migration::deployment::{Server, Side};
use crate::openapi::Operation;
use crate::references;
use crate::state::AppState;

/// The longest the servers may take to answer, all of them.
const ASK_TIMEOUT: Duration = Duration::from_secs(3);
/// Random keys drawn per server for a namespaced tenant: its share is known to about ±2.5 points (one standard
/// deviation at most sqrt(0.25/400)).
const SAMPLES: u32 = 400;

pub(crate) fn operations() -> Vec<Operation> {
    vec![
        Operation::new(
            "getTenantKeyspace",
            Method::GET,
            "/v1/tenants/{tenant}/keyspace",
            "The tenant's keys and their memory, asked of its Redis now: exact where it owns its databases, sampled under a key namespace",
            Access::TenantRead,
            get(keyspace),
        )
        .reply::<TenantKeyspace>(200)
        .errors(&[404]),
    ]
}

async fn keyspace(
    State(state): State<AppState>,
    ApiPath(tenant): ApiPath<String>,
) -> ApiResult<Json<TenantKeyspace>> {
    let row = lookup::tenant(&state.pool, &tenant).await?;
    let namespace = row.policy.0.namespace.clone();
    let mut conn = state
        .pool
        .acquire()
        .await
        .during("reading the databases of a tenant")?;
    let places = db::databases::of_tenant(&mut conn, row.id).await?;
    let mut shared_with: Vec<String> = db::databases::neighbours(&mut conn, row.id, &places)
        .await?
        .into_iter()
        .map(|n| n.other)
        .collect();
    drop(conn);
    shared_with.dedup();
    let mut answer = TenantKeyspace {
        tenant: row.name.clone(),
        method: match (&namespace, shared_with.is_empty()) {
            (Some(_), _) => KeyspaceMethod::Sampled,
            (None, true) => KeyspaceMethod::Exact,
            (None, false) => KeyspaceMethod::Shared,
        },
        shared_with,
        keys: None,
        memory_bytes: None,
        servers: Vec::new(),
        error: None,
        asked_at: db::timestamp(chrono::Utc::now()),
    };
    let Some(version) = db::routes::get(&state.pool, row.id, None).await? else {
        answer.error = Some("the tenant has no route yet".to_string());
        return Ok(Json(answer));
    };
    let mut route: RouteTable = version.route.0;
    let names = references::names(&route);
    let mut conn = state
        .pool
        .acquire()
        .await
        .during("reading the resources of a route")?;
    let urls = db::resources::urls(&mut conn, &names, db::resources::Lock::None).await?;
    drop(conn);
    if let Err(resource) = references::inline(&mut route, &urls) {
        answer.error = Some(format!(
            "the route names resource '{resource}', which no longer exists"
        ));
        return Ok(Json(answer));
    }
    match tokio::time::timeout(ASK_TIMEOUT, ask(route, namespace.as_deref())).await {
        Ok(Ok(servers)) => {
            answer.keys = Some(servers.iter().map(|s| s.keys).sum());
            answer.memory_bytes = Some(servers.iter().map(memory_share).sum());
            answer.servers = servers;
        }
        Ok(Err(e)) => answer.error = Some(e),
        Err(_) => answer.error = Some(format!("no answer within {ASK_TIMEOUT:?}")),
    }
    Ok(Json(answer))
}

/// The server's memory apportioned by the tenant's share of its keys.
fn memory_share(server: &ServerKeyspace) -> u64 {
    match server.server_keys {
        0 => 0,
        all => (server.used_memory as f64 * server.keys as f64 / all as f64).round() as u64,
    }
}

/// Every server holding the tenant's data, asked.
async fn ask(route: RouteTable, namespace: Option<&str>) -> Result<Vec<ServerKeyspace>, String> {
    let side = Side::connect("tenant", route)
        .await
        .map_err(|e| e.to_string())?;
    let mut answers = Vec::new();
    for mut server in side.servers() {
        let answer = ask_server(&mut server, namespace)
            .await
            .map_err(|e| format!("{}: {e}", server.addr))?;
        answers.push(answer);
    }
    Ok(answers)
}

async fn ask_server(server: &mut Server, namespace: Option<&str>) -> RedisResult<ServerKeyspace> {
    let db_keys: u64 = redis::cmd("DBSIZE").query_async(&mut server.conn).await?;
    let memory: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut server.conn)
        .await?;
    let keyspace: String = redis::cmd("INFO")
        .arg("keyspace")
        .query_async(&mut server.conn)
        .await?;
    let mut answer = ServerKeyspace {
        server: server.addr.clone(),
        db_keys,
        server_keys: server_keys(&keyspace),
        used_memory: info_field(&memory, "used_memory").unwrap_or(0),
        keys: db_keys,
        samples: None,
        matched: None,
    };
    if let Some(namespace) = namespace {
        let mut pipe = redis::pipe();
        for _ in 0..SAMPLES {
            pipe.cmd("RANDOMKEY");
        }
        let drawn: Vec<Option<Vec<u8>>> = pipe.query_async(&mut server.conn).await?;
        let drawn: Vec<Vec<u8>> = drawn.into_iter().flatten().collect();
        let matched = drawn
            .iter()
            .filter(|key| key.starts_with(namespace.as_bytes()))
            .count();
        answer.keys = match drawn.len() {
            0 => 0,
            n => (db_keys as f64 * matched as f64 / n as f64).round() as u64,
        };
        answer.samples = Some(drawn.len() as u32);
        answer.matched = Some(matched as u32);
    }
    Ok(answer)
}

/// A numeric field of an `INFO` section (`name:value` lines).
fn info_field(info: &str, name: &str) -> Option<u64> {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|value| value.trim().parse().ok())
}

/// Every database's keys in `INFO keyspace` (`db0:keys=3,expires=0,avg_ttl=0`).
fn server_keys(info: &str) -> u64 {
    info.lines()
        .filter(|line| line.starts_with("db"))
        .filter_map(|line| {
            line.split_once("keys=")?
                .1
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}
