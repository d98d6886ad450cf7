//! Probing a resource before a route names it: connected the way the migration worker connects (TCP, TLS,
//! `AUTH` and `SELECT` with the URL's credentials and database; a sentinel group's master as its sentinels name
//! it; a cluster's masters from `CLUSTER SLOTS`), then each data node asked `PING` and what it is (`ROLE`,
//! `INFO cluster`, `CLUSTER INFO`), so that an address where nothing listens, a wrong password or a deployment
//! of another kind than the URL says is named before any client is sent there.

use std::time::Duration;

use redis::{RedisResult, Value};
use switchyard_schemas::{ResourceKind, ResourceUrl};

use crate::migration::deployment::{Resource, Server};

/// The longest one resource's probe may take, from the first connection to the last answer.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Probes the resource at `url`; `writes`: a route writes to it, so its data nodes must be masters. `Err` says
/// why the gateways could not use it.
pub(crate) async fn probe(url: &str, writes: bool) -> Result<(), String> {
    let parsed = ResourceUrl::parse(url).map_err(|e| format!("bad resource URL: {e}"))?;
    let cluster = matches!(parsed.kind, ResourceKind::Cluster { .. });
    let checked = async {
        let resource = Resource::connect(url)
            .await
            .map_err(|e| hint(&parsed.kind, e.to_string()))?;
        for mut server in resource.masters() {
            let pong: RedisResult<String> = redis::cmd("PING").query_async(&mut server.conn).await;
            pong.map_err(|e| format!("{}: PING: {e}", server.addr))?;
            match cluster {
                true => cluster_is_serving(&mut server).await?,
                false => node_is_usable(&mut server, writes).await?,
            }
        }
        Ok(())
    };
    match tokio::time::timeout(PROBE_TIMEOUT, checked).await {
        Ok(result) => result,
        Err(_) => Err(format!("no answer within {PROBE_TIMEOUT:?}")),
    }
}

/// What a refusal by a server of another kind than the URL says means.
fn hint(kind: &ResourceKind, error: String) -> String {
    match kind {
        ResourceKind::Cluster { .. } if error.contains("cluster support disabled") => {
            format!("{error} (not a Redis Cluster node: a plain Redis is redis://)")
        }
        ResourceKind::Sentinel { .. } if error.contains("SENTINEL") => {
            format!("{error} (not a sentinel, or it knows no such master)")
        }
        _ => error,
    }
}

/// The first element of `ROLE`'s answer: `master`, `slave` or `sentinel`.
async fn role(server: &mut Server) -> Result<String, String> {
    let answer: RedisResult<Value> = redis::cmd("ROLE").query_async(&mut server.conn).await;
    match answer {
        Ok(Value::Array(parts)) => parts
            .first()
            .and_then(|first| redis::from_redis_value::<String>(first).ok())
            .ok_or_else(|| format!("{}: ROLE: an empty answer", server.addr)),
        Ok(_) => Err(format!("{}: ROLE: an unexpected answer", server.addr)),
        Err(e) => Err(format!("{}: ROLE: {e}", server.addr)),
    }
}

/// A plain Redis (or the master a sentinel named): not a sentinel nor a cluster node, and a master when it is
/// written to.
async fn node_is_usable(server: &mut Server, writes: bool) -> Result<(), String> {
    let role = role(server).await?;
    let addr = &server.addr;
    if role == "sentinel" {
        return Err(format!(
            "{addr} is a sentinel, not a data node: a sentinel group is redis-sentinel://"
        ));
    }
    if writes && role != "master" {
        return Err(format!(
            "{addr} is a replica (ROLE: {role}): writes would fail with READONLY"
        ));
    }
    let info: RedisResult<String> = redis::cmd("INFO")
        .arg("cluster")
        .query_async(&mut server.conn)
        .await;
    if info.is_ok_and(|text| text.contains("cluster_enabled:1")) {
        return Err(format!(
            "{addr} is a Redis Cluster node (cluster_enabled:1): a cluster is redis-cluster://"
        ));
    }
    Ok(())
}

/// A cluster's master: its cluster serving (`cluster_state:ok`).
async fn cluster_is_serving(server: &mut Server) -> Result<(), String> {
    let info: RedisResult<String> = redis::cmd("CLUSTER")
        .arg("INFO")
        .query_async(&mut server.conn)
        .await;
    let addr = &server.addr;
    let info = info.map_err(|e| format!("{addr}: CLUSTER INFO: {e}"))?;
    match info
        .lines()
        .find_map(|line| line.trim().strip_prefix("cluster_state:"))
    {
        Some("ok") => Ok(()),
        Some(state) => Err(format!(
            "{addr}: the cluster is not serving (cluster_state:{state})"
        )),
        None => Err(format!("{addr}: CLUSTER INFO has no cluster_state")),
    }
}
