//! Following the control plane: long-poll its snapshot, validate and swap it in, keep the last good one on disk,
//! and report the revision served in heartbeats.
//!
//! Once the gateway serves a snapshot that names an epoch (protocol 2), it polls with that epoch and revision
//! and may get a delta; the first poll, and the one after a rejected snapshot or a delta that did not apply,
//! ask without an epoch, for a full snapshot. A control plane that names no epoch never gets one.
//!
//! The control plane being down never stops traffic: the gateway keeps serving the snapshot it has (or, after a
//! restart, the one in its cache file) and keeps retrying with backoff.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use switchyard_schemas::api::Heartbeat;
use tokio::sync::Notify;

use crate::backoff::Backoff;
use crate::cache::CacheWriter;
use crate::metrics::Metrics;
use crate::route::{Refused, Snapshot};
use crate::state::{ControlPlaneConfig, Gateway};

/// How long one long-poll waits at the control plane for a change.
const POLL_WAIT: Duration = Duration::from_secs(30);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(2);

pub(crate) struct Sync {
    config: ControlPlaneConfig,
    client: reqwest::Client,
    /// Rung after each applied snapshot so the heartbeat reports it at once.
    applied: Notify,
    /// Writes `--cache-file`, when there is one.
    cache: Option<CacheWriter>,
    /// The gateway's, for what the loop finds out about the control plane (`metrics.sync`).
    metrics: Arc<Metrics>,
    /// Numbers this gateway's requests to the control plane, for their `X-Request-Id`.
    requests: std::sync::atomic::AtomicU64,
}

enum Poll {
    Changed(bytes::Bytes),
    Unchanged,
    /// 400 to a poll with `epoch`: a control plane without deltas (e.g. after a downgrade, with a cache file
    /// from a newer one), which refuses parameters it does not know.
    EpochRefused,
}

impl Sync {
    pub(crate) fn new(config: ControlPlaneConfig, metrics: Arc<Metrics>) -> anyhow::Result<Sync> {
        let mut client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .tls_info(true);
        if let Some(ca) = &config.ca_file {
            client = client.tls_built_in_root_certs(false);
            let cas = crate::tls::control_plane_cas(ca)
                .map_err(|e| anyhow::anyhow!("the control plane's CA file: {e}"))?;
            for certificate in cas {
                client = client.add_root_certificate(certificate);
            }
        }
        let client = client.build().context("cannot build the HTTP client")?;
        let cache = match &config.cache_file {
            Some(path) => Some(
                CacheWriter::start(path.clone()).context("cannot start the cache file's writer")?,
            ),
            None => None,
        };
        metrics.sync.follow();
        Ok(Sync {
            config,
            client,
            applied: Notify::new(),
            cache,
            metrics,
            requests: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The HTTP client the gateway talks to the control plane with (its CA, its timeouts).
    pub(crate) fn client(&self) -> reqwest::Client {
        self.client.clone()
    }

    /// The first snapshot: from the control plane if it answers quickly, else from the cache file. Without
    /// either the gateway starts not ready and keeps trying in [`Sync::run`].
    pub(crate) async fn bootstrap(&self, gateway: &Gateway) {
        match tokio::time::timeout(
            Duration::from_secs(3),
            self.poll(None, None, Duration::ZERO),
        )
        .await
        {
            Ok(Ok(Poll::Changed(body))) => match self.apply(gateway, &body) {
                Ok(()) => return,
                Err(e) => tracing::error!("the control plane's snapshot was rejected: {e:#}"),
            },
            Ok(Ok(Poll::Unchanged | Poll::EpochRefused)) => {}
            Ok(Err(e)) => {
                tracing::warn!(control_plane = %self.config.url, "control plane unreachable at start: {e:#}")
            }
            Err(_) => tracing::warn!("control plane did not answer within 3 s at start"),
        }
        let Some(cache) = &self.config.cache_file else {
            return tracing::warn!("no cache file: not ready until the control plane answers");
        };
        match std::fs::read(cache) {
            Ok(body) => match gateway.apply_control_plane(&body) {
                Ok(_) => {
                    self.metrics.sync.serving_cache();
                    tracing::info!(cache = %cache.display(), "serving the cached snapshot until the control plane answers")
                }
                Err(e) => {
                    tracing::error!(cache = %cache.display(), "the cached snapshot is unusable: {e:#}")
                }
            },
            Err(e) => {
                tracing::warn!(cache = %cache.display(), "no cached snapshot ({e}): not ready until the control plane answers")
            }
        }
    }

    /// Long-polls forever, applying every new snapshot.
    pub(crate) async fn run(self: Arc<Self>, gateway: Arc<Gateway>) {
        tokio::spawn(Arc::clone(&self).heartbeats(Arc::clone(&gateway)));
        let mut backoff = Backoff::new(Duration::from_millis(100), MAX_BACKOFF);
        // After a rejected snapshot, wait for the next revision rather than fetching the same one again.
        let mut rejected: Option<i64> = None;
        // After a rejected snapshot or a delta that did not apply, ask for a full snapshot.
        let mut full = false;
        // A control plane that refused the epoch once is never sent it again (until the gateway restarts).
        let mut epoch_refused = false;
        // Whether the gateway is known to serve the control plane's latest revision. Until it is (after a start
        // from the cache file, or a failed poll), polls do not wait: the answer says at once whether the
        // gateway is current, which the last-sync series and the cache-file one report.
        let mut current = self.metrics.sync.has_synced();
        loop {
            let (after, epoch) = next_poll(&gateway.snapshot(), rejected, full || epoch_refused);
            let wait = if current { POLL_WAIT } else { Duration::ZERO };
            match self.poll(after, epoch.as_deref(), wait).await {
                Ok(Poll::Unchanged) => {
                    self.metrics.sync.synced();
                    current = true;
                    backoff.reset();
                }
                Ok(Poll::EpochRefused) => {
                    tracing::warn!(
                        "the control plane refused the epoch parameter: asking for full snapshots"
                    );
                    epoch_refused = true;
                }
                Ok(Poll::Changed(body)) => {
                    backoff.reset();
                    let applied = Arc::clone(&self)
                        .apply_off_runtime(Arc::clone(&gateway), body.clone())
                        .await;
                    full = applied.is_err();
                    let refused = match applied {
                        Ok(()) => {
                            current = true;
                            continue;
                        }
                        Err(refused) => refused,
                    };
                    gateway
                        .metrics
                        .snapshots_rejected
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if let Refused::DoesNotApply(why) = refused {
                        tracing::warn!("delta rejected, asking for a full snapshot: {why}");
                    } else {
                        tracing::error!(
                            "snapshot rejected, the previous one keeps serving: {refused}"
                        );
                        rejected = revision_of(&body);
                    }
                }
                Err(e) => {
                    current = false;
                    let wait = backoff.next();
                    tracing::warn!(control_plane = %self.config.url, "control plane poll failed, retrying in {wait:?}: {e:#}");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    async fn poll(
        &self,
        after: Option<i64>,
        epoch: Option<&str>,
        wait: Duration,
    ) -> anyhow::Result<Poll> {
        let url = snapshot_url(&self.config.url, after, epoch, wait)?;
        let response = self
            .client
            .get(url)
            .bearer_auth(&self.config.token)
            .header("x-request-id", self.request_id())
            .timeout(wait + Duration::from_secs(10))
            .send()
            .await;
        self.metrics.sync.reached(response.is_ok());
        let response = response.context("GET /v1/snapshot")?;
        crate::tls::observe_control_plane(&self.config.url, &response);
        match response.status() {
            reqwest::StatusCode::NOT_MODIFIED => Ok(Poll::Unchanged),
            reqwest::StatusCode::BAD_REQUEST if epoch.is_some() => Ok(Poll::EpochRefused),
            status if status.is_success() => Ok(Poll::Changed(
                response.bytes().await.context("reading the snapshot")?,
            )),
            status => anyhow::bail!("GET /v1/snapshot answered {status}"),
        }
    }

    /// The next request's id: the gateway id (kept to the characters and length the control plane echoes) and
    /// a sequence number, so that the control plane's access log says which gateway each poll and heartbeat
    /// came from.
    fn request_id(&self) -> String {
        let n = self
            .requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id: String = self
            .config
            .gateway_id
            .chars()
            .take(96)
            .map(|c| match c {
                'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' | ':' => c,
                _ => '_',
            })
            .collect();
        format!("{id}.{n}")
    }

    /// `apply` on the blocking pool: building a snapshot and writing the cache file must not hold up the runtime
    /// that accepts connections.
    async fn apply_off_runtime(
        self: Arc<Self>,
        gateway: Arc<Gateway>,
        body: bytes::Bytes,
    ) -> Result<(), Refused> {
        tokio::task::spawn_blocking(move || self.apply(&gateway, &body))
            .await
            .unwrap_or_else(|e| {
                Err(Refused::Failed(format!(
                    "applying the snapshot failed: {e}"
                )))
            })
    }

    /// Validates and swaps in a snapshot, then has the full snapshot now served written to the cache file.
    fn apply(&self, gateway: &Gateway, body: &[u8]) -> Result<(), Refused> {
        let received = gateway.apply_control_plane(body)?;
        self.metrics.sync.synced();
        self.applied.notify_one();
        if let Some(cache) = &self.cache {
            cache.submit(received);
        }
        Ok(())
    }

    async fn heartbeats(self: Arc<Self>, gateway: Arc<Gateway>) {
        let url = format!(
            "{}/v1/gateways/heartbeat",
            self.config.url.trim_end_matches('/')
        );
        loop {
            let beat = Heartbeat {
                id: self.config.gateway_id.clone(),
                address: gateway
                    .client_address()
                    .map(|addr| addr.to_string())
                    .unwrap_or_default(),
                revision: gateway.snapshot().revision.unwrap_or(0),
                version: env!("CARGO_PKG_VERSION").to_string(),
            };
            let sent = self
                .client
                .post(&url)
                .bearer_auth(&self.config.token)
                .header("x-request-id", self.request_id())
                .json(&beat)
                .timeout(Duration::from_secs(5))
                .send()
                .await;
            self.metrics.sync.reached(sent.is_ok());
            if let Err(e) = sent.and_then(reqwest::Response::error_for_status) {
                tracing::debug!("heartbeat failed: {e}");
            }
            let _ = tokio::time::timeout(HEARTBEAT_INTERVAL, self.applied.notified()).await;
        }
    }
}

/// What the next poll asks for: changes after the revision served (or after one rejected since), and with the
/// served snapshot's epoch (so that a delta may answer) unless a full snapshot is wanted.
fn next_poll(
    served: &Snapshot,
    rejected: Option<i64>,
    full: bool,
) -> (Option<i64>, Option<String>) {
    let after = rejected.max(served.revision);
    let epoch = served.epoch.clone().filter(|_| !full && after.is_some());
    (after, epoch)
}

/// `GET /v1/snapshot` under the control plane's base URL, its parameters URL-encoded.
fn snapshot_url(
    base: &str,
    after: Option<i64>,
    epoch: Option<&str>,
    wait: Duration,
) -> anyhow::Result<reqwest::Url> {
    let mut url = reqwest::Url::parse(&format!("{}/v1/snapshot", base.trim_end_matches('/')))
        .with_context(|| format!("'{base}' is not a URL"))?;
    let mut query = url.query_pairs_mut();
    query.append_pair("wait", &format!("{}ms", wait.as_millis()));
    if let Some(after) = after {
        query.append_pair("after", &after.to_string());
    }
    if let Some(epoch) = epoch {
        query.append_pair("epoch", epoch);
    }
    drop(query);
    Ok(url)
}

/// The revision a snapshot body names, if it names one.
fn revision_of(body: &[u8]) -> Option<i64> {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()?
        .get("revision")?
        .as_i64()
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::Ordering;
    use std::time::Instant;

    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;
    use crate::state::test_config;

    const BASE: &str = "http://cp.example:8080/";

    fn next_url(served: &Snapshot, rejected: Option<i64>, full: bool) -> reqwest::Url {
        let (after, epoch) = next_poll(served, rejected, full);
        snapshot_url(BASE, after, epoch.as_deref(), POLL_WAIT).unwrap()
    }

    /// The poll asks for a delta (passes `epoch` with `after`) only when the served snapshot names an epoch and
    /// no full snapshot is wanted; the epoch travels URL-encoded.
    #[test]
    fn the_poll_carries_the_epoch_only_when_a_delta_may_apply() {
        let gateway = Gateway::new(test_config(), None);
        let start = "http://cp.example:8080/v1/snapshot?wait=30000ms";
        // The first poll: nothing served yet.
        assert_eq!(next_url(&gateway.snapshot(), None, false).as_str(), start);
        // A control plane that names no epoch is never sent one.
        gateway
            .apply_control_plane(br#"{"revision":4,"tenants":[]}"#)
            .unwrap();
        let url = next_url(&gateway.snapshot(), None, false);
        assert_eq!(url.as_str(), format!("{start}&after=4"));

        let epoch = "db 1/&=+é";
        let body = format!(r#"{{"revision":5,"epoch":"{epoch}","tenants":[]}}"#);
        gateway.apply_control_plane(body.as_bytes()).unwrap();
        let url = next_url(&gateway.snapshot(), None, false);
        assert_eq!(
            url.as_str(),
            format!("{start}&after=5&epoch=db+1%2F%26%3D%2B%C3%A9")
        );
        let sent: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        assert_eq!(sent[2], ("epoch".to_string(), epoch.to_string()));
        // After a delta that did not apply: a full snapshot after the revision served; after a rejected one,
        // a full snapshot after the rejected revision.
        let url = next_url(&gateway.snapshot(), None, true);
        assert_eq!(url.as_str(), format!("{start}&after=5"));
        let url = next_url(&gateway.snapshot(), Some(7), true);
        assert_eq!(url.as_str(), format!("{start}&after=7"));
    }

    fn tenant(name: &str) -> String {
        crate::cache::test_tenant(name, 1)
    }

    /// A control plane that answers each `GET /v1/snapshot` with the next scripted (status, body), records what
    /// was asked, and once the script is done holds the poll open; heartbeats get 200.
    async fn scripted_control_plane(
        script: Vec<(u16, String)>,
    ) -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let asked = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&asked);
        tokio::spawn(async move {
            let mut script = script.into_iter();
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    let mut chunk = [0u8; 1024];
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&chunk[..n]),
                    }
                }
                let line = String::from_utf8_lossy(&head)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string();
                let (status, body) = match line.strip_prefix("GET ") {
                    Some(request) => {
                        let path = request.split(' ').next().unwrap_or("").to_string();
                        record.lock().unwrap().push(path);
                        match script.next() {
                            Some(answer) => answer,
                            None => {
                                // Hold the poll as a control plane with nothing new would.
                                tokio::spawn(async move {
                                    tokio::time::sleep(Duration::from_secs(60)).await;
                                    drop(stream);
                                });
                                continue;
                            }
                        }
                    }
                    None => (200, "{}".to_string()),
                };
                let response = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            }
        });
        (url, asked)
    }

    /// The sample lines of the gateway's `switchyard_snapshot_*`, `switchyard_control_plane_*` and
    /// `switchyard_serving_*` series.
    fn fleet_series(gateway: &Gateway) -> Vec<String> {
        let config = crate::MetricsConfig {
            active_window: Duration::from_secs(1),
            tenant_latency: false,
        };
        let text =
            gateway
                .metrics
                .render(&[], gateway.snapshot().revision, &config, Instant::now());
        text.lines()
            .filter(|line| {
                [
                    "switchyard_snapshot_",
                    "switchyard_control_plane_",
                    "switchyard_serving_",
                ]
                .iter()
                .any(|prefix| line.starts_with(prefix))
            })
            .map(str::to_string)
            .collect()
    }

    /// Follows the control plane at `url`, with a cache file.
    fn follower(url: String, cache: &std::path::Path, gateway: &Gateway) -> Sync {
        let config = ControlPlaneConfig {
            url,
            token: "t".to_string(),
            ca_file: None,
            cache_file: Some(cache.to_path_buf()),
            gateway_id: "g".to_string(),
        };
        Sync::new(config, Arc::clone(&gateway.metrics)).unwrap()
    }

    /// The whole loop against a control plane: the first poll asks for a full snapshot, then deltas are asked
    /// for with the epoch; a delta that does not apply is rejected and a full snapshot asked for; a 400 to the
    /// epoch makes the gateway ask without it; the cache file ends as the full snapshot served, and a gateway
    /// started from it asks for deltas.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_gateway_asks_for_deltas_and_falls_back_to_full_snapshots() {
        let (a, b, c) = (tenant("a"), tenant("b"), tenant("c"));
        let delta = |after: i64, revision: i64, tenants: &str| {
            format!(
                r#"{{"revision":{revision},"epoch":"e 1","tenants":[{tenants}],"delta":{{"after":{after},"removed_tenants":[]}}}}"#
            )
        };
        let full_6 = format!(r#"{{"revision":6,"epoch":"e 1","tenants":[{a},{b},{c}]}}"#);
        let full_7 = format!(r#"{{"revision":7,"epoch":"e 1","tenants":[{a},{b},{c}]}}"#);
        let script = vec![
            (
                200,
                format!(r#"{{"revision":3,"epoch":"e 1","tenants":[{a}]}}"#),
            ),
            (200, delta(3, 4, &b)),
            (200, delta(2, 5, &c)),
            (200, full_6.clone()),
            (400, "unknown parameter epoch".to_string()),
            (304, String::new()),
            (200, full_7.clone()),
            (304, String::new()),
        ];
        let (url, asked) = scripted_control_plane(script).await;
        let cache =
            std::env::temp_dir().join(format!("switchyard-sync-{}.json", std::process::id()));
        let gateway = Arc::new(Gateway::new(test_config(), None));
        let sync = follower(url, &cache, &gateway);
        sync.bootstrap(&gateway).await;
        tokio::spawn(Arc::new(sync).run(Arc::clone(&gateway)));

        let deadline = Instant::now() + Duration::from_secs(10);
        while asked.lock().unwrap().len() < 9 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let poll = "/v1/snapshot?wait=30000ms";
        assert_eq!(
            *asked.lock().unwrap(),
            [
                "/v1/snapshot?wait=0ms".to_string(),
                format!("{poll}&after=3&epoch=e+1"),
                format!("{poll}&after=4&epoch=e+1"),
                format!("{poll}&after=4"),
                format!("{poll}&after=6&epoch=e+1"),
                format!("{poll}&after=6"),
                format!("{poll}&after=6"),
                // Refused once, the epoch is not sent again, also after the next snapshot.
                format!("{poll}&after=7"),
                format!("{poll}&after=7"),
            ]
        );
        let snapshot = gateway.snapshot();
        let names: Vec<&str> = snapshot.tenants().iter().map(|t| t.name.as_str()).collect();
        assert_eq!((snapshot.revision, names), (Some(7), vec!["a", "b", "c"]));
        let metrics = &gateway.metrics;
        let count = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
        assert_eq!(count(&metrics.snapshots_applied_full), 3);
        assert_eq!(count(&metrics.snapshots_applied_delta), 1);
        assert_eq!(count(&metrics.snapshots_rejected), 1);
        let health = fleet_series(&gateway);
        assert!(health.contains(&"switchyard_serving_cache_file 0".to_string()));
        assert!(health.contains(&"switchyard_control_plane_up 1".to_string()));
        assert!(
            !health.contains(&"switchyard_control_plane_last_sync_timestamp_seconds 0".to_string())
        );
        let expected: switchyard_schemas::Snapshot = serde_json::from_str(&full_7).unwrap();
        let written = loop {
            let written = std::fs::read(&cache).ok().and_then(|body| {
                serde_json::from_slice::<switchyard_schemas::Snapshot>(&body).ok()
            });
            match written {
                Some(written) if written.revision == 7 => break written,
                _ if Instant::now() > deadline => panic!("the cache file never reached revision 7"),
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        };
        assert_eq!(written, expected);

        // A gateway restarted while the control plane fails serves its cache file, and goes on with deltas.
        let (url, asked) = scripted_control_plane(vec![(503, String::new())]).await;
        let restarted = Arc::new(Gateway::new(test_config(), None));
        let sync = follower(url, &cache, &restarted);
        sync.bootstrap(&restarted).await;
        assert_eq!(restarted.snapshot().revision, Some(7));
        let health = fleet_series(&restarted);
        for series in [
            "switchyard_snapshot_revision 7",
            "switchyard_serving_cache_file 1",
            // A 503 is an answer: the control plane is reachable, only not syncing.
            "switchyard_control_plane_up 1",
            "switchyard_control_plane_last_sync_timestamp_seconds 0",
        ] {
            assert!(health.contains(&series.to_string()), "{series}: {health:?}");
        }
        tokio::spawn(Arc::new(sync).run(Arc::clone(&restarted)));
        while asked.lock().unwrap().len() < 2 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            *asked.lock().unwrap(),
            [
                "/v1/snapshot?wait=0ms".to_string(),
                // Not known to be current yet: the poll asks for an answer at once.
                "/v1/snapshot?wait=0ms&after=7&epoch=e+1".to_string()
            ]
        );
        let _ = std::fs::remove_file(&cache);
    }
}
