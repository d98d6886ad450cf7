//! The gateway as one member of a fleet, in `/metrics`: the control-plane revision it serves, when it last knew
//! that revision to be current, whether it reaches the control plane, which replica it follows and how often it
//! moved to another, whether it serves its cache file, and the
//! process series every Switchyard binary writes (`switchyard_build_info`, `process_*`). Set by the sync loop
//! (one store per poll or heartbeat), read by scrapes: nothing here is on the data path.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::exposition::{family, labels};

/// What the sync loop last found out about the control plane.
#[derive(Default)]
pub(crate) struct SyncHealth {
    /// Whether routes come from a control plane at all: with a routes file none of this is written.
    follows: AtomicBool,
    /// Whether the last request to the control plane (a poll or a heartbeat) got an HTTP answer.
    reachable: AtomicBool,
    /// When a poll last left the gateway current (a snapshot applied, or a `304` to a long-poll), in
    /// milliseconds since the Unix epoch; 0: never.
    synced_at_ms: AtomicU64,
    /// Whether the snapshot served is the cache file's, read at start, with nothing from the control plane since.
    from_cache: AtomicBool,
    /// The control-plane replicas known (URL, and the address a name's several addresses pin each to), and
    /// the position of the one followed.
    replicas: Mutex<(Vec<(String, String)>, usize)>,
    /// How many times the gateway left the replica it followed for another.
    failovers: AtomicU64,
}

impl SyncHealth {
    pub(crate) fn follow(&self) {
        self.follows.store(true, Ordering::Relaxed);
    }

    /// Records whether a request to the control plane got an answer (of any status).
    pub(crate) fn reached(&self, answered: bool) {
        self.reachable.store(answered, Ordering::Relaxed);
    }

    /// Records that the gateway serves what the control plane has now.
    pub(crate) fn synced(&self) {
        self.reached(true);
        self.from_cache.store(false, Ordering::Relaxed);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        self.synced_at_ms
            .store(now.map_or(0, |d| d.as_millis() as u64), Ordering::Relaxed);
    }

    /// Whether a poll ever left the gateway current.
    pub(crate) fn has_synced(&self) -> bool {
        self.synced_at_ms.load(Ordering::Relaxed) != 0
    }

    /// Records the replicas known, and which of them is followed.
    pub(crate) fn replicas(&self, replicas: Vec<(String, String)>, followed: usize) {
        *self.replicas.lock().unwrap_or_else(|e| e.into_inner()) = (replicas, followed);
    }

    /// Counts a move to another replica.
    pub(crate) fn failed_over(&self) {
        self.failovers.fetch_add(1, Ordering::Relaxed);
    }

    /// Records that the cache file's snapshot is served.
    pub(crate) fn serving_cache(&self) {
        self.from_cache.store(true, Ordering::Relaxed);
    }

    /// The control-plane series, when the gateway follows one; `revision` is the one served (none yet: the
    /// revision sample is left out, so that an alert on `absent()` sees it).
    pub(super) fn render(&self, out: &mut String, revision: Option<i64>) {
        if !self.follows.load(Ordering::Relaxed) {
            return;
        }
        let global = |value: i64| [(String::new(), value)];
        family(
            out,
            "switchyard_snapshot_revision",
            "The control-plane revision the gateway serves.",
            "gauge",
            revision.map(|revision| (String::new(), revision)),
        );
        let flag = |flag: &AtomicBool| i64::from(flag.load(Ordering::Relaxed));
        family(
            out,
            "switchyard_control_plane_up",
            "Whether the last request to the control plane (poll or heartbeat) got an answer.",
            "gauge",
            global(flag(&self.reachable)),
        );
        family(
            out,
            "switchyard_control_plane_last_sync_timestamp_seconds",
            "When the gateway last knew it served the control plane's latest revision (Unix time; 0: never).",
            "gauge",
            global((self.synced_at_ms.load(Ordering::Relaxed) / 1000) as i64),
        );
        let following: Vec<(String, i64)> = {
            let replicas = self.replicas.lock().unwrap_or_else(|e| e.into_inner());
            let (replicas, followed) = &*replicas;
            replicas
                .iter()
                .enumerate()
                .map(|(i, (url, address))| {
                    let pairs = [("url", url.as_str()), ("address", address.as_str())];
                    (labels(&pairs), i64::from(i == *followed))
                })
                .collect()
        };
        family(
            out,
            "switchyard_control_plane_following",
            "Each control-plane replica known (its URL, and the address when a name's several addresses are replicas): 1 the one followed.",
            "gauge",
            following,
        );
        family(
            out,
            "switchyard_control_plane_failovers_total",
            "How many times the gateway left the control-plane replica it followed for another.",
            "counter",
            global(self.failovers.load(Ordering::Relaxed) as i64),
        );
        family(
            out,
            "switchyard_serving_cache_file",
            "Whether the snapshot served is the cache file's, with nothing from the control plane since start.",
            "gauge",
            global(flag(&self.from_cache)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_written_without_a_control_plane_and_the_state_follows_the_loop() {
        let health = SyncHealth::default();
        let render = |revision| {
            let mut out = String::new();
            health.render(&mut out, revision);
            out
        };
        assert_eq!(render(Some(3)), "");
        health.follow();
        let start = render(None);
        assert!(
            !start.contains("\nswitchyard_snapshot_revision "),
            "{start}"
        );
        assert!(start.contains("switchyard_control_plane_up 0\n"), "{start}");
        assert!(start.contains("switchyard_control_plane_last_sync_timestamp_seconds 0\n"));
        health.serving_cache();
        let cached = render(Some(7));
        assert!(
            cached.contains("switchyard_snapshot_revision 7\n"),
            "{cached}"
        );
        assert!(
            cached.contains("switchyard_serving_cache_file 1\n"),
            "{cached}"
        );
        health.synced();
        let synced = render(Some(8));
        assert!(
            synced.contains("switchyard_control_plane_up 1\n"),
            "{synced}"
        );
        assert!(
            synced.contains("switchyard_serving_cache_file 0\n"),
            "{synced}"
        );
        assert!(!synced.contains("_timestamp_seconds 0\n"), "{synced}");
        health.reached(false);
        assert!(render(Some(8)).contains("switchyard_control_plane_up 0\n"));
        let replicas = vec![
            ("http://a:1".to_string(), String::new()),
            ("https://cp\"x".to_string(), "10.0.0.2:443".to_string()),
        ];
        health.replicas(replicas, 1);
        health.failed_over();
        let following = render(Some(8));
        for series in [
            "switchyard_control_plane_following{url=\"http://a:1\",address=\"\"} 0\n",
            "switchyard_control_plane_following{url=\"https://cp\\\"x\",address=\"10.0.0.2:443\"} 1\n",
            "switchyard_control_plane_failovers_total 1\n",
        ] {
            assert!(following.contains(series), "{series}: {following}");
        }
    }
}
