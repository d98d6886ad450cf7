//! Following the control plane: long-poll its snapshot, validate and swap it in, keep the last good one on disk,
//! and report the revision served in heartbeats.
//!
//! The control plane being down never stops traffic: the gateway keeps serving the snapshot it has (or, after a
//! restart, the one in its cache file) and keeps retrying with backoff.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use switchyard_schemas::api::Heartbeat;
use tokio::sync::Notify;

use crate::backoff::Backoff;
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
}

enum Poll {
    Changed(bytes::Bytes),
    Unchanged,
}

impl Sync {
    pub(crate) fn new(config: ControlPlaneConfig) -> anyhow::Result<Sync> {
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
        Ok(Sync {
            config,
            client,
            applied: Notify::new(),
        })
    }

    /// The first snapshot: from the control plane if it answers quickly, else from the cache file. Without
    /// either the gateway starts not ready and keeps trying in [`Sync::run`].
    pub(crate) async fn bootstrap(&self, gateway: &Gateway) {
        match tokio::time::timeout(Duration::from_secs(3), self.poll(None, Duration::ZERO)).await {
            Ok(Ok(Poll::Changed(body))) => match self.apply(gateway, &body) {
                Ok(()) => return,
                Err(e) => tracing::error!("the control plane's snapshot was rejected: {e:#}"),
            },
            Ok(Ok(Poll::Unchanged)) => {}
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
                Ok(()) => {
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
        loop {
            let after = rejected.max(gateway.snapshot().revision);
            match self.poll(after, POLL_WAIT).await {
                Ok(Poll::Unchanged) => backoff.reset(),
                Ok(Poll::Changed(body)) => {
                    backoff.reset();
                    let applied = Arc::clone(&self)
                        .apply_off_runtime(Arc::clone(&gateway), body.clone())
                        .await;
                    if let Err(e) = applied {
                        gateway
                            .metrics
                            .snapshots_rejected
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tracing::error!("snapshot rejected, the previous one keeps serving: {e:#}");
                        rejected = revision_of(&body);
                    }
                }
                Err(e) => {
                    let wait = backoff.next();
                    tracing::warn!(control_plane = %self.config.url, "control plane poll failed, retrying in {wait:?}: {e:#}");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    async fn poll(&self, after: Option<i64>, wait: Duration) -> anyhow::Result<Poll> {
        let mut url = format!(
            "{}/v1/snapshot?wait={}ms",
            self.config.url.trim_end_matches('/'),
            wait.as_millis()
        );
        if let Some(after) = after {
            url.push_str(&format!("&after={after}"));
        }
        let response = self
            .client
            .get(&url)
            .bearer_auth(&self.config.token)
            .timeout(wait + Duration::from_secs(10))
            .send()
            .await
            .context("GET /v1/snapshot")?;
        crate::tls::observe_control_plane(&self.config.url, &response);
        match response.status() {
            reqwest::StatusCode::NOT_MODIFIED => Ok(Poll::Unchanged),
            status if status.is_success() => Ok(Poll::Changed(
                response.bytes().await.context("reading the snapshot")?,
            )),
            status => anyhow::bail!("GET /v1/snapshot answered {status}"),
        }
    }

    /// `apply` on the blocking pool: building a snapshot and writing the cache file must not hold up the runtime
    /// that accepts connections.
    async fn apply_off_runtime(
        self: Arc<Self>,
        gateway: Arc<Gateway>,
        body: bytes::Bytes,
    ) -> anyhow::Result<()> {
        tokio::task::spawn_blocking(move || self.apply(&gateway, &body))
            .await
            .unwrap_or_else(|e| Err(anyhow::anyhow!("applying the snapshot failed: {e}")))
    }

    /// Validates and swaps in a snapshot, then keeps it as the last good one on disk.
    fn apply(&self, gateway: &Gateway, body: &[u8]) -> anyhow::Result<()> {
        gateway.apply_control_plane(body)?;
        self.applied.notify_one();
        if let Some(cache) = &self.config.cache_file
            && let Err(e) = write_atomically(cache, body)
        {
            tracing::warn!(cache = %cache.display(), "cannot write the snapshot cache: {e:#}");
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
                .json(&beat)
                .timeout(Duration::from_secs(5))
                .send()
                .await;
            if let Err(e) = sent.and_then(reqwest::Response::error_for_status) {
                tracing::debug!("heartbeat failed: {e}");
            }
            let _ = tokio::time::timeout(HEARTBEAT_INTERVAL, self.applied.notified()).await;
        }
    }
}

/// The CA certificates of `--control-plane-ca`: a gateway that cannot read them does not start, rather than
/// run on its cache without ever reaching the control plane.
fn revision_of(body: &[u8]) -> Option<i64> {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()?
        .get("revision")?
        .as_i64()
}

/// Writes `body` to a temporary file next to `path`, flushed to disk, then renames it over `path` and flushes the
/// directory: a crash or a power loss never leaves a half-written cache. The file holds backend passwords and credential digests, so it is readable by its owner
/// only; the temporary file is created that way and the rename keeps its mode.
fn write_atomically(path: &Path, body: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};

    let temp = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)
        .with_context(|| format!("create {}", temp.display()))?;
    // `mode` only applies to a new file: a temporary file left by a crash keeps whatever mode it had.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .and_then(|()| file.write_all(body))
        .and_then(|()| file.sync_all())
        .with_context(|| format!("write {}", temp.display()))?;
    drop(file);
    std::fs::rename(&temp, path)
        .with_context(|| format!("rename {} to {}", temp.display(), path.display()))?;
    // The rename is durable once the directory is.
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    std::fs::File::open(directory)
        .and_then(|directory| directory.sync_all())
        .with_context(|| format!("sync {}", directory.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_cache_file_is_readable_by_its_owner_only() {
        let dir = std::env::temp_dir().join(format!("switchyard-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cache = dir.join("snapshot.json");
        // A cache written before this fix, and a temporary file a crash left behind, both world-readable.
        std::fs::write(&cache, b"old").unwrap();
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o644)).unwrap();
        let temp = cache.with_extension("tmp");
        std::fs::write(&temp, b"stale").unwrap();
        std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o644)).unwrap();

        write_atomically(&cache, b"{\"revision\":1}").unwrap();
        assert_eq!(mode(&cache), 0o600);
        assert_eq!(std::fs::read(&cache).unwrap(), b"{\"revision\":1}");
        assert!(!temp.exists());

        // An operator's chmod survives the next write.
        write_atomically(&cache, b"{\"revision\":2}").unwrap();
        assert_eq!(mode(&cache), 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
