//! Following the control plane: long-poll its snapshot, validate and swap it in, keep the last good one on disk,
//! and report the revision served in heartbeats.
//!
//! Once the gateway serves a snapshot that names an epoch (protocol 2), it polls with that epoch and revision
//! and may get a delta; the first poll, and the one after a rejected snapshot or a delta that did not apply,
//! ask without an epoch, for a full snapshot. A control plane that names no epoch never gets one.
//!
//! With several replicas ([`replicas`]) the gateway follows one: polls and heartbeats go to it, and a poll that
//! fails, or a heartbeat that gets no answer (a replica that accepts connections but never answers would
//! otherwise hold the long-poll for its 30 s), moves the gateway to the next one at once. The revision and the
//! epoch are the database's, not a replica's, so the delta chain goes on across replicas.
//!
//! The control plane being down never stops traffic: the gateway keeps serving the snapshot it has (or, after a
//! restart, the one in its cache file) and keeps retrying with backoff once every replica has failed.

mod replicas;
mod shares;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use switchyard_schemas::api::{Following as Followed, Heartbeat, HeartbeatAck};
use tokio::sync::{Notify, watch};

pub use self::replicas::parse_control_plane_urls;
use self::replicas::{Clients, Replica};
use crate::backoff::Backoff;
use crate::cache::CacheWriter;
use crate::metrics::Metrics;
use crate::route::{Refused, Snapshot};
use crate::state::{ControlPlaneConfig, Gateway};

/// How long one long-poll waits at the control plane for a change.
const POLL_WAIT: Duration = Duration::from_secs(30);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long a heartbeat may go unanswered before the replica followed counts as silent: with the default
/// interval (2 s), a silent replica is left within 5 s.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long the start waits for a control plane before serving the cache file.
const BOOTSTRAP_WAIT: Duration = Duration::from_secs(3);

pub(crate) struct Sync {
    config: ControlPlaneConfig,
    clients: Clients,
    following: Mutex<Following>,
    /// The generation of the last follow whose heartbeat got no answer: the poll loop leaves that replica.
    silent: watch::Sender<u64>,
    /// Rung after each applied snapshot so the heartbeat reports it at once.
    applied: Notify,
    /// Writes `--cache-file`, when there is one.
    cache: Option<CacheWriter>,
    /// The gateway's, for what the loop finds out about the control plane (`metrics.sync`).
    metrics: Arc<Metrics>,
    /// Numbers this gateway's requests to the control plane, for their `X-Request-Id`.
    requests: std::sync::atomic::AtomicU64,
}

/// The replicas as last resolved, and the one followed.
struct Following {
    replicas: Vec<Arc<Replica>>,
    index: usize,
    /// Counts the follows (each failover starts one), so that news about a replica left since is ignored.
    generation: u64,
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
        anyhow::ensure!(!config.urls.is_empty(), "no control-plane URL");
        let clients = Clients::new(config.ca_file.as_deref())?;
        let cache = match &config.cache_file {
            Some(path) => Some(
                CacheWriter::start(path.clone()).context("cannot start the cache file's writer")?,
            ),
            None => None,
        };
        metrics.sync.follow();
        let following = Following {
            replicas: clients.unresolved(&config.urls),
            index: 0,
            generation: 0,
        };
        metrics.sync.replicas(labels(&following.replicas), 0);
        Ok(Sync {
            config,
            clients,
            following: Mutex::new(following),
            silent: watch::Sender::new(u64::MAX),
            applied: Notify::new(),
            cache,
            metrics,
            requests: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The replica followed, and the generation of that follow.
    fn followed(&self) -> (Arc<Replica>, u64) {
        let following = self.following.lock().unwrap_or_else(|e| e.into_inner());
        let replica = Arc::clone(&following.replicas[following.index]);
        (replica, following.generation)
    }

    /// The replicas as DNS says now, still following the first of them (at start).
    async fn resolve(&self) {
        let replicas = self.clients.resolve(&self.config.urls).await;
        let mut following = self.following.lock().unwrap_or_else(|e| e.into_inner());
        self.metrics.sync.replicas(labels(&replicas), 0);
        following.replicas = replicas;
        following.index = 0;
    }

    /// The follow `generation` failed (`why`): resolves the replicas again and follows the one after the failed
    /// one. Returns how many replicas there are now.
    async fn fail_over(&self, generation: u64, why: &anyhow::Error) -> usize {
        let replicas = self.clients.resolve(&self.config.urls).await;
        let mut following = self.following.lock().unwrap_or_else(|e| e.into_inner());
        if following.generation != generation {
            return following.replicas.len();
        }
        let failed = Arc::clone(&following.replicas[following.index]);
        following.index = replicas::next_after(&replicas, &failed);
        following.replicas = replicas;
        following.generation += 1;
        let next = &following.replicas[following.index];
        self.metrics
            .sync
            .replicas(labels(&following.replicas), following.index);
        if following.replicas.len() > 1 {
            self.metrics.sync.failed_over();
            tracing::warn!(control_plane = %failed.name(), "control plane failed, following {} now: {why:#}", next.name());
        } else {
            tracing::warn!(control_plane = %failed.name(), "control plane failed: {why:#}");
        }
        following.replicas.len()
    }

    /// A request to the replica followed, with the gateway's token (the tracking report's push).
    pub(crate) fn post(&self, path: &str) -> reqwest::RequestBuilder {
        let (replica, _) = self.followed();
        replica
            .client
            .post(replica.endpoint(path))
            .bearer_auth(&self.config.token)
    }

    /// This gateway's id, as heartbeats and reports give it.
    pub(crate) fn gateway_id(&self) -> &str {
        &self.config.gateway_id
    }

    /// The first snapshot: from a control plane if one answers quickly (each replica tried in turn), else from
    /// the cache file. Without either the gateway starts not ready and keeps trying in [`Sync::run`].
    pub(crate) async fn bootstrap(&self, gateway: &Gateway) {
        self.resolve().await;
        let deadline = Instant::now() + BOOTSTRAP_WAIT;
        let mut tried = 0;
        loop {
            let (replica, generation) = self.followed();
            let left = deadline.saturating_duration_since(Instant::now());
            let failed =
                match tokio::time::timeout(left, self.poll(&replica, None, None, Duration::ZERO))
                    .await
                {
                    Ok(Ok(Poll::Changed(body))) => match self.apply(gateway, &body) {
                        Ok(()) => return,
                        Err(e) => {
                            tracing::error!("the control plane's snapshot was rejected: {e:#}");
                            break;
                        }
                    },
                    Ok(Ok(Poll::Unchanged | Poll::EpochRefused)) => break,
                    Ok(Err(e)) => e.context("unreachable at start"),
                    Err(_) => anyhow::anyhow!("no answer within {BOOTSTRAP_WAIT:?} at start"),
                };
            tried += 1;
            let replicas = self.fail_over(generation, &failed).await;
            if tried >= replicas || Instant::now() >= deadline {
                break;
            }
        }
        self.serve_cache_file(gateway);
    }

    /// Serves the cache file's snapshot, when there is one, until a control plane answers.
    fn serve_cache_file(&self, gateway: &Gateway) {
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
        let mut silent = self.silent.subscribe();
        let mut backoff = Backoff::new(Duration::from_millis(100), MAX_BACKOFF);
        // Polls failed since one was last answered, whichever replica they went to.
        let mut failed = 0;
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
            let (replica, generation) = self.followed();
            let (after, epoch) = next_poll(&gateway.snapshot(), rejected, full || epoch_refused);
            let wait = if current { POLL_WAIT } else { Duration::ZERO };
            let polled = tokio::select! {
                polled = self.poll(&replica, after, epoch.as_deref(), wait) => polled,
                _ = silent.wait_for(|silent| *silent == generation) => Err(anyhow::anyhow!(
                    "no answer to a heartbeat within {HEARTBEAT_TIMEOUT:?}"
                )),
            };
            if polled.is_ok() {
                failed = 0;
            }
            match polled {
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
                    failed += 1;
                    let replicas = self.fail_over(generation, &e).await;
                    // The next replica is asked at once; only when every one has failed is there a wait.
                    if failed >= replicas {
                        failed = 0;
                        let wait = backoff.next();
                        let serving = match gateway.snapshot().revision {
                            Some(revision) => format!("serving revision {revision} as it is"),
                            None => "no routes yet".to_string(),
                        };
                        tracing::warn!(
                            "no control plane answers ({replicas} tried): {serving}, retrying in {wait:?}"
                        );
                        tokio::time::sleep(wait).await;
                    }
                }
            }
        }
    }

    async fn poll(
        &self,
        replica: &Replica,
        after: Option<i64>,
        epoch: Option<&str>,
        wait: Duration,
    ) -> anyhow::Result<Poll> {
        let url = snapshot_url(&replica.url, after, epoch, wait)?;
        let response = replica
            .client
            .get(url)
            .bearer_auth(&self.config.token)
            .header("x-request-id", self.request_id())
            .timeout(wait + Duration::from_secs(10))
            .send()
            .await;
        self.metrics.sync.reached(response.is_ok());
        let response = response.context("GET /v1/snapshot")?;
        crate::tls::observe_control_plane(&replica.url, &response);
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

    /// Sends a heartbeat every interval (and at once after each applied snapshot), with the demand for fleet
    /// limits since the last one, and applies the shares the answer hands out. Without an answer the shares stay
    /// as they are.
    async fn heartbeats(self: Arc<Self>, gateway: Arc<Gateway>) {
        let interval = self.config.heartbeat_interval;
        let mut measured = Instant::now();
        loop {
            let (replica, generation) = self.followed();
            let now = Instant::now();
            let snapshot = gateway.snapshot();
            let beat = Heartbeat {
                id: self.config.gateway_id.clone(),
                address: gateway
                    .client_address()
                    .map(|addr| addr.to_string())
                    .unwrap_or_default(),
                revision: snapshot.revision.unwrap_or(0),
                version: env!("CARGO_PKG_VERSION").to_string(),
                interval_ms: Some(u64::try_from(interval.as_millis()).unwrap_or(u64::MAX)),
                following: Some(following(&replica)),
                demand: shares::demand(&snapshot, now.duration_since(measured)),
            };
            measured = now;
            match self.beat(&replica, &beat).await {
                Ok(Some(ack)) => shares::apply(&gateway.snapshot(), &ack),
                Ok(None) => {}
                // No answer at all: the poll loop leaves this replica (if it still follows it).
                Err(e) if e.status().is_none() => {
                    tracing::debug!(control_plane = %replica.name(), "heartbeat got no answer: {e}");
                    self.silent.send_replace(generation);
                }
                Err(e) => tracing::debug!(control_plane = %replica.name(), "heartbeat failed: {e}"),
            }
            let _ = tokio::time::timeout(interval, self.applied.notified()).await;
        }
    }

    /// Sends `beat` to `replica`; its answer, `None` when it names no shares (a control plane from before fleet
    /// limits, to which the heartbeat goes again with only the fields it knows when it refuses the others).
    async fn beat(
        &self,
        replica: &Replica,
        beat: &Heartbeat,
    ) -> Result<Option<HeartbeatAck>, reqwest::Error> {
        let send = |beat: &Heartbeat| {
            replica
                .client
                .post(replica.endpoint("/v1/gateways/heartbeat"))
                .bearer_auth(&self.config.token)
                .header("x-request-id", self.request_id())
                .json(beat)
                .timeout(HEARTBEAT_TIMEOUT)
                .send()
        };
        let mut sent = send(beat).await;
        if let Ok(response) = &sent
            && response.status() == reqwest::StatusCode::UNPROCESSABLE_ENTITY
        {
            let first_version = Heartbeat {
                interval_ms: None,
                following: None,
                demand: Vec::new(),
                ..beat.clone()
            };
            sent = send(&first_version).await;
        }
        self.metrics.sync.reached(sent.is_ok());
        let response = sent?.error_for_status()?;
        match response.json::<HeartbeatAck>().await {
            Ok(ack) => Ok(Some(ack)),
            Err(e) => {
                tracing::debug!(control_plane = %replica.name(), "the heartbeat's answer is not one: {e}");
                Ok(None)
            }
        }
    }
}

/// `replica`, as heartbeats name the one followed.
fn following(replica: &Replica) -> Followed {
    let (url, address) = replica.labels();
    Followed { url, address }
}

/// The replicas as `/metrics` labels them.
fn labels(replicas: &[Arc<Replica>]) -> Vec<(String, String)> {
    replicas.iter().map(|replica| replica.labels()).collect()
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
mod tests;
