//! Hands what the data path noticed (hot keys, big keys, slow commands: see `tracking`; migration readiness: see
//! `route::readiness`) to the control plane every report interval, with the gateway's token, apart from heartbeats so
//! that a large report never delays one. Without a control plane (a routes file), reports are still made, for the admin port's `/tracking`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::state::Gateway;
use crate::sync::Sync;

/// How long one push may take before it is given up (the report is then lost: the next one carries on).
const PUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Reports every interval; with a control plane (`push`), to the replica it follows.
pub(crate) async fn run(gateway: Arc<Gateway>, push: Option<Arc<Sync>>) {
    let interval = gateway.tracking.config.report_interval;
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    let mut since = Instant::now();
    loop {
        ticker.tick().await;
        let now = Instant::now();
        let covered = now.duration_since(since).as_millis() as u64;
        since = now;
        let id = push.as_ref().map_or("", |sync| sync.gateway_id());
        let mut report = gateway.tracking.report(id, covered);
        report.readiness = crate::route::readiness::report(&gateway.snapshot());
        let Some(sync) = &push else {
            continue;
        };
        if report.tenants.is_empty() && report.readiness.is_empty() {
            continue;
        }
        let sent = sync
            .post("/v1/gateways/observations")
            .json(&report)
            .timeout(PUSH_TIMEOUT)
            .send()
            .await;
        if let Err(e) = sent.and_then(reqwest::Response::error_for_status) {
            tracing::debug!("tracking report failed: {e}");
        }
    }
}
