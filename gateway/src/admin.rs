//! The admin HTTP port: `/healthz`, `/readyz`, `/metrics`, `/tenants` (what the gateway serves) and `/tracking`.
//!
//! A deliberately tiny HTTP/1.1 responder (GET only, one request per connection): it is polled by load
//! balancers and Prometheus, never by browsers, and keeps the gateway free of an HTTP stack on its data path.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::state::Gateway;

pub(crate) async fn serve(listener: TcpListener, gateway: Arc<Gateway>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(respond(stream, Arc::clone(&gateway)));
            }
            Err(e) => {
                tracing::warn!("admin accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn respond(mut stream: TcpStream, gateway: Arc<Gateway>) {
    let mut request = Vec::with_capacity(1024);
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        let mut chunk = [0u8; 1024];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16 * 1024 {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => request.extend_from_slice(&chunk[..n]),
            }
        }
        true
    })
    .await;
    if !matches!(read, Ok(true)) {
        return;
    }
    let line = String::from_utf8_lossy(&request);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, content_type, body) = match (method, path) {
        ("GET", "/healthz") => ("200 OK", "text/plain", "ok\n".to_string()),
        ("GET", "/readyz") if gateway.is_ready() => ("200 OK", "text/plain", "ready\n".to_string()),
        ("GET", "/readyz") => (
            "503 Service Unavailable",
            "text/plain",
            "no routes loaded\n".to_string(),
        ),
        // Summing every tenant's counters takes ~5 µs a tenant (half a second at 100,000): off the runtime
        // that accepts client connections and follows the control plane.
        ("GET", "/metrics") => {
            let gateway = Arc::clone(&gateway);
            match tokio::task::spawn_blocking(move || metrics_text(&gateway)).await {
                Ok(text) => ("200 OK", "text/plain; version=0.0.4", text),
                Err(_) => (
                    "500 Internal Server Error",
                    "text/plain",
                    "metrics failed\n".to_string(),
                ),
            }
        }
        // A listing of every tenant: as large as the snapshot, so made off the runtime too.
        ("GET", "/tenants") => {
            let gateway = Arc::clone(&gateway);
            let listing = tokio::task::spawn_blocking(move || {
                serde_json::to_string(&gateway.snapshot().listing())
            })
            .await;
            match listing {
                Ok(Ok(json)) => ("200 OK", "application/json", json),
                _ => (
                    "500 Internal Server Error",
                    "text/plain",
                    "listing failed\n".to_string(),
                ),
            }
        }
        // The last tracking report: tenants' keys, for the operator only (the admin port is not the tenants'), and
        // without argument values, which the port, taking no token, must not serve (the control plane's copy,
        // behind its admin token, keeps them).
        ("GET", "/tracking") => match serde_json::to_string(&gateway.tracking.last()) {
            Ok(json) => ("200 OK", "application/json", json),
            Err(_) => (
                "500 Internal Server Error",
                "text/plain",
                "tracking failed\n".to_string(),
            ),
        },
        ("GET", _) => ("404 Not Found", "text/plain", "not found\n".to_string()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "only GET\n".to_string(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
}

/// `/metrics`: the gateway's counters, the totals over every tenant of the current snapshot, and the series of
/// those active recently (`MetricsConfig`).
fn metrics_text(gateway: &Gateway) -> String {
    let snapshot = gateway.snapshot();
    let tenants: Vec<_> = snapshot
        .tenants()
        .iter()
        .map(|t| (t.name.as_str(), &t.runtime.counters))
        .collect();
    let mut text = gateway.metrics.render(
        &tenants,
        snapshot.revision,
        &gateway.config.metrics,
        Instant::now(),
    );
    crate::metrics::repairs::render(&mut text, &gateway.repairs.figures());
    crate::metrics::repairs::render_divergence(&mut text, &gateway.divergence.figures());
    text
}
