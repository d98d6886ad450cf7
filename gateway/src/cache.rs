//! The control plane's snapshot as the gateway received it, and the cache file written from it.
//!
//! Each tenant's JSON is kept as it came (by name, with the revision and epoch), replaced by each full snapshot
//! and patched by each delta, so that the cache file is always a full, consistent snapshot: the one the control
//! plane would send at that revision. A gateway restarted from it serves it and goes on with deltas.
//!
//! Writing it (25 MB and an fsync at 100,000 tenants) is left to a background thread, so that it never holds up
//! applying the next change; that thread writes only the latest snapshot, so a burst of changes costs one more
//! write after the burst, not one each.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use switchyard_schemas::{SnapshotDelta, SnapshotTenant};

use crate::route::{ByName, Named, Refused};

/// A full control-plane snapshot, each tenant as received, sorted by name.
pub(crate) struct Received {
    revision: i64,
    epoch: Option<String>,
    tenants: ByName<Arc<ReceivedTenant>>,
}

/// One tenant's JSON as the control plane sent it.
pub(crate) struct ReceivedTenant {
    name: String,
    json: Box<RawValue>,
}

impl Named for Arc<ReceivedTenant> {
    fn name(&self) -> &str {
        &self.name
    }
}

/// A snapshot body whose tenants are left unparsed.
#[derive(Deserialize)]
struct Body<'a> {
    revision: i64,
    #[serde(default)]
    epoch: Option<String>,
    #[serde(borrow)]
    tenants: Vec<&'a RawValue>,
    #[serde(default)]
    delta: Option<SnapshotDelta>,
}

/// The cache file's form: a full snapshot.
#[derive(Serialize)]
struct Written<'a> {
    revision: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    epoch: Option<&'a str>,
    tenants: Vec<&'a RawValue>,
}

/// Parses a snapshot body: the snapshot, and each of its tenants as received (in the body's order).
pub(crate) fn parse(
    body: &[u8],
) -> Result<(switchyard_schemas::Snapshot, Vec<Arc<ReceivedTenant>>), Refused> {
    let malformed = |e: serde_json::Error| {
        Refused::Failed(format!(
            "the snapshot is not valid JSON of the expected shape: {e}"
        ))
    };
    let body: Body<'_> = serde_json::from_slice(body).map_err(malformed)?;
    let mut tenants = Vec::with_capacity(body.tenants.len());
    let mut received = Vec::with_capacity(body.tenants.len());
    for (i, json) in body.tenants.into_iter().enumerate() {
        let tenant: SnapshotTenant = serde_json::from_str(json.get()).map_err(|e| {
            Refused::Failed(format!(
                "the snapshot is not valid JSON of the expected shape: /tenants/{i}: {e}"
            ))
        })?;
        received.push(Arc::new(ReceivedTenant {
            name: tenant.name.clone(),
            json: json.to_owned(),
        }));
        tenants.push(tenant);
    }
    let snapshot = switchyard_schemas::Snapshot {
        revision: body.revision,
        epoch: body.epoch,
        tenants,
        delta: body.delta,
    };
    Ok((snapshot, received))
}

impl Received {
    /// A full snapshot's tenants, as `parse` gave them.
    pub(crate) fn full(
        snapshot: &switchyard_schemas::Snapshot,
        mut tenants: Vec<Arc<ReceivedTenant>>,
    ) -> Received {
        tenants.sort_by(|a, b| a.name.cmp(&b.name));
        Received {
            revision: snapshot.revision,
            epoch: snapshot.epoch.clone(),
            tenants: ByName::from_sorted(tenants),
        }
    }

    /// This snapshot with a delta's tenants (as `parse` gave them) put in and its removed tenants taken out.
    pub(crate) fn patched(
        &self,
        changes: &switchyard_schemas::Snapshot,
        delta: &SnapshotDelta,
        mut tenants: Vec<Arc<ReceivedTenant>>,
    ) -> Received {
        tenants.sort_by(|a, b| a.name.cmp(&b.name));
        let mut removed: Vec<&str> = delta.removed_tenants.iter().map(String::as_str).collect();
        removed.sort_unstable();
        Received {
            revision: changes.revision,
            epoch: changes.epoch.clone(),
            tenants: self.tenants.patched(tenants, &removed).list,
        }
    }

    /// The cache file's contents: `{"revision":..,"epoch":..,"tenants":[..]}`.
    pub(crate) fn to_json(&self) -> serde_json::Result<Vec<u8>> {
        serde_json::to_vec(&Written {
            revision: self.revision,
            epoch: self.epoch.as_deref(),
            tenants: self.tenants.iter().map(|t| &*t.json).collect(),
        })
    }
}

/// Writes the latest snapshot handed to it to the cache file, on a thread of its own.
pub(crate) struct CacheWriter {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<Pending>,
    wake: Condvar,
}

#[derive(Default)]
struct Pending {
    /// The snapshot to write next (a newer one replaces it).
    latest: Option<Arc<Received>>,
    /// The writer is dropped: write what is pending and stop.
    closed: bool,
}

impl CacheWriter {
    /// Starts the thread that writes `path`.
    pub(crate) fn start(path: PathBuf) -> std::io::Result<CacheWriter> {
        let shared = Arc::new(Shared::default());
        let writer = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("snapshot-cache".to_string())
            .spawn(move || writer.write_until_closed(&path))?;
        Ok(CacheWriter { shared })
    }

    /// Has `received` written as soon as the write in progress (if any) is done, instead of any not begun.
    pub(crate) fn submit(&self, received: Arc<Received>) {
        lock(&self.shared.state).latest = Some(received);
        self.shared.wake.notify_one();
    }
}

impl Drop for CacheWriter {
    fn drop(&mut self) {
        lock(&self.shared.state).closed = true;
        self.shared.wake.notify_one();
    }
}

impl Shared {
    fn write_until_closed(&self, path: &Path) {
        loop {
            let mut pending = lock(&self.state);
            while pending.latest.is_none() && !pending.closed {
                pending = self.wake.wait(pending).unwrap_or_else(|e| e.into_inner());
            }
            let (latest, closed) = (pending.latest.take(), pending.closed);
            drop(pending);
            if let Some(received) = latest {
                let written = received
                    .to_json()
                    .context("serializing the snapshot")
                    .and_then(|body| write_atomically(path, &body));
                if let Err(e) = written {
                    tracing::warn!(cache = %path.display(), "cannot write the snapshot cache: {e:#}");
                }
            }
            if closed {
                return;
            }
        }
    }
}

fn lock(state: &Mutex<Pending>) -> std::sync::MutexGuard<'_, Pending> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Writes `body` to a temporary file next to `path`, flushed to disk, then renames it over `path` and flushes the
/// directory: a crash or a power loss never leaves a half-written cache. The file holds backend passwords and
/// credential digests, so it is readable by its owner only; the temporary file is created that way and the rename
/// keeps its mode.
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

/// A control-plane tenant's JSON, with a route to one Redis and no credential.
#[cfg(test)]
pub(crate) fn test_tenant(name: &str, version: i64) -> String {
    format!(
        r#"{{"name":"{name}","disabled":false,"allow_admin":false,"limits":{{}},"credentials":[],"route":{{"type":"single","target":"redis://127.0.0.1:1"}},"route_version":{version}}}"#
    )
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;
    use std::time::{Duration, Instant};

    use super::{test_tenant as tenant, *};

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("switchyard-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_cache_file_is_readable_by_its_owner_only() {
        let dir = temp_dir("cache");
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

    /// A burst of deltas handed to the writer ends in the cache file as one full snapshot, the one the control
    /// plane would send at the last revision, whatever the order of the tenants received.
    #[test]
    fn the_cache_file_is_the_full_snapshot_after_a_burst_of_deltas() {
        let dir = temp_dir("cache-writer");
        let path = dir.join("snapshot.json");
        let full = format!(
            r#"{{"revision":1,"epoch":"e","tenants":[{},{},{}]}}"#,
            tenant("c", 1),
            tenant("a", 1),
            tenant("b", 1)
        );
        let (snapshot, tenants) = parse(full.as_bytes()).unwrap();
        let mut received = Arc::new(Received::full(&snapshot, tenants));
        let writer = CacheWriter::start(path.clone()).unwrap();
        for revision in 2..=40 {
            let (changed, removed) = match revision {
                20 => (
                    format!("{},{}", tenant("z", 20), tenant("d", 20)),
                    r#""b","never""#,
                ),
                _ => (tenant("c", revision), ""),
            };
            let delta = format!(
                r#"{{"revision":{revision},"epoch":"e","tenants":[{changed}],"delta":{{"after":{},"removed_tenants":[{removed}]}}}}"#,
                revision - 1
            );
            let (changes, tenants) = parse(delta.as_bytes()).unwrap();
            let delta = changes.delta.as_ref().unwrap();
            received = Arc::new(received.patched(&changes, delta, tenants));
            writer.submit(Arc::clone(&received));
        }
        let expected = format!(
            r#"{{"revision":40,"epoch":"e","tenants":[{},{},{},{}]}}"#,
            tenant("a", 1),
            tenant("c", 40),
            tenant("d", 20),
            tenant("z", 20)
        );
        let expected: switchyard_schemas::Snapshot = serde_json::from_str(&expected).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let written = loop {
            let read = std::fs::read(&path).ok();
            let parsed = read.and_then(|body| {
                serde_json::from_slice::<switchyard_schemas::Snapshot>(&body).ok()
            });
            match parsed {
                Some(written) if written.revision == 40 => break written,
                _ if Instant::now() > deadline => {
                    panic!("the cache file never reached revision 40")
                }
                _ => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        assert_eq!(written, expected);
        assert_eq!(mode(&path), 0o600);
        drop(writer);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
