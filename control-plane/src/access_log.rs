//! The access log and request ids: every request gets an id (the caller's `X-Request-Id` when it is a sane
//! token, else a new random one), returned in the response's `X-Request-Id`, carried by every log line written
//! while the request is handled (the `request` span's `request_id`), and logged once more in one `access` line
//! per request: method, path (never the query string, which may carry keys or other caller data), status,
//! duration, request id and the token's actor (`token:<name>`, `admin:<8 hex>`; `-` when none was admitted).

use std::time::Instant;

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument as _;

pub(crate) const REQUEST_ID: &str = "x-request-id";

/// Who made a request, as the access middleware (`auth`) found out: put in the response's extensions for the
/// access line.
#[derive(Debug, Clone)]
pub(crate) struct Who(pub(crate) String);

/// The longest caller-chosen request id kept; a longer one is replaced.
const MAX_REQUEST_ID: usize = 128;

/// Middleware: logs one line per request, under the request's id.
pub(crate) async fn log(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let id = request
        .headers()
        .get(REQUEST_ID)
        .and_then(|value| value.to_str().ok())
        .filter(|id| sane(id))
        .map_or_else(generate, str::to_string);
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let span = tracing::info_span!("request", request_id = %id);
    let mut response = next.run(request).instrument(span).await;
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    let who = response
        .extensions()
        .get::<Who>()
        .map_or("-", |who| who.0.as_str());
    tracing::info!(
        target: "access",
        method = %method,
        path = %path,
        status = response.status().as_u16(),
        duration_ms = started.elapsed().as_micros() as f64 / 1000.0,
        request_id = %id,
        token = who,
        "request"
    );
    response
}

/// Whether a caller's request id can be logged and echoed as it is: a short token of letters, digits and
/// `-_.:` (what tracing ids and UUIDs use), so that it can neither forge log lines nor smuggle anything long.
fn sane(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_REQUEST_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// A new request id: 16 random hex digits (a counter would do for uniqueness within one process, but ids must
/// not collide across the control plane's replicas either).
fn generate() -> String {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        // No entropy: still unique enough within this process to tell requests apart.
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        bytes = now.map_or(0, |d| d.as_nanos() as u64).to_be_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_short_plain_tokens_are_kept() {
        for id in ["a", "0f1e-2d3c", "req_1.2:3", &"x".repeat(MAX_REQUEST_ID)] {
            assert!(sane(id), "{id}");
        }
        for id in [
            "",
            "a b",
            "a\nb",
            "é",
            "a\"b",
            "a=b",
            &"x".repeat(MAX_REQUEST_ID + 1),
        ] {
            assert!(!sane(id), "{id:?}");
        }
        let (a, b) = (generate(), generate());
        assert!(a.len() == 16 && sane(&a) && a != b, "{a} {b}");
    }
}
