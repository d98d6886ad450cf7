//! `GET /v1/snapshot`: what gateways serve, with long-poll.
//!
//! A gateway passes the revision it has as `after` (or `If-None-Match`); the answer comes at once when the
//! control plane is at another revision, else when a change commits (on any replica: see `revision`), else
//! after `wait` as a 304. A gateway that also passes the `epoch` of the snapshot it has gets a delta (only what
//! changed since `after`) whenever one can be told, else the whole snapshot.

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use switchyard_schemas::Snapshot;

use crate::auth::Access;
use crate::db;
use crate::error::{ApiError, ApiResult};
use crate::etag::etag;
use crate::extract::{ApiQuery, if_none_match};
use crate::openapi::Operation;
use crate::state::AppState;

pub(crate) fn operations() -> Vec<Operation> {
    vec![
        Operation::new("getSnapshot", Method::GET, "/v1/snapshot", "Everything gateways serve; long-polls for a change", Access::Gateway, get(snapshot))
            .reply::<Snapshot>(200)
            .query_integer("after", "The revision the caller has: answer when the current one differs (else 304).")
            .query("epoch", "The `epoch` of the snapshot the caller has: with `after`, ask for a delta (answered with `delta` set when one can be told, else the whole snapshot).")
            .query("wait", "How long to wait for a change when at `after`: `30s`, `500ms`, `1m` or seconds; default 0.")
            .header("If-None-Match", "The revision the caller has, when `after` is not given.")
            .also(304)
            .errors(&[400]),
    ]
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SnapshotQuery {
    after: Option<i64>,
    wait: Option<String>,
    epoch: Option<String>,
}

/// `30s`, `500ms`, `2m`, or a bare number of seconds.
pub(crate) fn parse_wait(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let number: u64 = number.parse().ok()?;
    match unit {
        "ms" => Some(Duration::from_millis(number)),
        "s" => Some(Duration::from_secs(number)),
        "m" => Some(Duration::from_secs(number.checked_mul(60)?)),
        _ => None,
    }
}

/// Counts a waiting poll for the metrics, also when the client goes away mid-wait.
struct Waiting<'a>(&'a AppState);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0
            .metrics
            .long_polls_waiting
            .fetch_sub(1, Ordering::Relaxed);
    }
}

async fn snapshot(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<SnapshotQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let wait = match query.wait.as_deref() {
        None => Duration::ZERO,
        Some(text) => parse_wait(text).ok_or_else(|| {
            ApiError::BadRequest("wait must be like 30s, 500ms, 1m or a number of seconds".into())
        })?,
    }
    .min(state.settings.max_wait);
    let after = query.after.or_else(|| if_none_match(&headers));
    // Subscribe before reading, so a change committed in between still wakes us.
    let mut latest = state.revisions.subscribe();
    let mut stopping = state.stopping();
    let current = db::revision::current(&state.pool).await?;
    state.revisions.observe(current);
    let at_least = match after {
        Some(after) if after == current => {
            state
                .metrics
                .long_polls_waiting
                .fetch_add(1, Ordering::Relaxed);
            let _waiting = Waiting(&state);
            let changed = tokio::select! {
                changed = tokio::time::timeout(wait, latest.wait_for(|r| *r != after)) => {
                    matches!(changed, Ok(Ok(_)))
                }
                _ = stopping.wait_for(|stop| *stop) => false,
            };
            if !changed {
                return Ok((StatusCode::NOT_MODIFIED, [etag(after)]).into_response());
            }
            *latest.borrow()
        }
        _ => current,
    };
    let delta = match (&query.epoch, after) {
        (Some(epoch), Some(after)) if after < at_least => {
            state
                .snapshots
                .delta(&state.pool, &state.metrics, epoch, after, at_least)
                .await?
        }
        _ => None,
    };
    let snapshot = match delta {
        Some(delta) => {
            state.metrics.deltas_served.fetch_add(1, Ordering::Relaxed);
            delta
        }
        None => {
            state
                .metrics
                .snapshots_served
                .fetch_add(1, Ordering::Relaxed);
            state
                .snapshots
                .full(&state.pool, &state.metrics, at_least)
                .await?
        }
    };
    let json = (
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(([etag(snapshot.revision), json], snapshot.body).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_forms() {
        assert_eq!(parse_wait("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_wait("30"), Some(Duration::from_secs(30)));
        assert_eq!(parse_wait("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_wait("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_wait("2h"), None);
        assert_eq!(parse_wait("s"), None);
        assert_eq!(parse_wait("-1s"), None);
    }
}
