//! What the data path notices about each tenant's requests: commands slower than a threshold (each tenant's
//! slow log, which `SLOWLOG` reads), requests and replies larger than a threshold (big keys), and a sample of
//! the keys it touches (hot keys). The common request pays a countdown and two compares per reply slot; only a
//! request that trips one of them is looked into (see docs/tracking.md).
//!
//! Hot and big keys are kept per worker thread (`Observed`, behind a lock only that worker and the reporter take,
//! the worker only for the requests that trip something) and handed over whole at each report, so a tenant
//! without traffic costs nothing. A tenant's slow log is shared by its connections on every worker, as
//! `SLOWLOG` shows one log per server.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use switchyard_schemas::api::ObservationReport;

use crate::cmd::CommandSpec;
use crate::resp;

mod bigkeys;
mod config;
mod hotkeys;
mod slowlog;
mod summary;

pub(crate) use bigkeys::{BigKey, BigKeys, Direction};
pub use config::{TrackingConfig, TrackingFlags};
use hotkeys::FastHasher;
pub(crate) use hotkeys::HotKeys;
pub(crate) use slowlog::{SlowEntry, SlowLog, slowlog_args};

/// Bytes of a key that tracking keeps and reports: a longer one is cut, so that a huge key name cannot make a
/// sketch or a report huge.
pub(crate) const MAX_KEY_BYTES: usize = 1024;

/// `key` cut to `MAX_KEY_BYTES`, in a buffer of its own.
pub(crate) fn kept_key(key: &[u8]) -> Bytes {
    Bytes::copy_from_slice(&key[..key.len().min(MAX_KEY_BYTES)])
}

/// How many hot keys a tenant's report names (the sketches count more, so that the top ones are right).
pub(crate) const HOT_KEYS_REPORTED: usize = 20;

/// What one worker noticed since the last report, by tenant name.
#[derive(Default)]
pub(crate) struct Observed {
    tenants: HashMap<String, TenantObserved, BuildHasherDefault<FastHasher>>,
}

/// What was noticed of one tenant's requests.
#[derive(Default)]
pub(crate) struct TenantObserved {
    pub hot: HotKeys,
    /// The tenant's `hot_key_threshold` when a key was last counted.
    pub hot_threshold: u64,
    pub big: BigKeys,
    /// Slow log entries not reported yet (at most a slow log's length).
    pub slow: Vec<Arc<SlowEntry>>,
}

impl Observed {
    pub(crate) fn tenant(&mut self, name: &str) -> &mut TenantObserved {
        if !self.tenants.contains_key(name) {
            self.tenants
                .insert(name.to_string(), TenantObserved::default());
        }
        self.tenants
            .get_mut(name)
            .unwrap_or_else(|| unreachable!("inserted above"))
    }
}

impl TenantObserved {
    fn merge(&mut self, other: TenantObserved, max_slow: usize) {
        self.hot.merge(&other.hot);
        self.hot_threshold = self.hot_threshold.max(other.hot_threshold);
        self.big.merge(other.big);
        self.slow.extend(other.slow);
        if self.slow.len() > max_slow {
            self.slow
                .sort_by_key(|entry| std::cmp::Reverse(entry.duration_us));
            self.slow.truncate(max_slow);
        }
    }
}

/// Every worker's `Observed`, and the last report made of them (the admin port's `/tracking`).
pub struct Tracking {
    pub(crate) config: TrackingConfig,
    workers: Mutex<Vec<Arc<Mutex<Observed>>>>,
    last: Mutex<ObservationReport>,
}

impl Tracking {
    pub(crate) fn new(config: TrackingConfig) -> Tracking {
        Tracking {
            config,
            workers: Mutex::new(Vec::new()),
            last: Mutex::new(ObservationReport {
                gateway: String::new(),
                interval_ms: 0,
                tenants: Vec::new(),
                readiness: Vec::new(),
                usage: Vec::new(),
                resources: Vec::new(),
                divergence: Vec::new(),
            }),
        }
    }

    /// A new worker's own `Observed`.
    pub(crate) fn worker(&self) -> Arc<Mutex<Observed>> {
        let observed = Arc::new(Mutex::new(Observed::default()));
        lock(&self.workers).push(Arc::clone(&observed));
        observed
    }

    /// Takes what every worker noticed since the last call, merged by tenant.
    fn take(&self) -> HashMap<String, TenantObserved> {
        let workers: Vec<_> = lock(&self.workers).clone();
        let mut merged: HashMap<String, TenantObserved> = HashMap::new();
        for worker in workers {
            let taken = std::mem::take(&mut lock(&worker).tenants);
            for (tenant, observed) in taken {
                match merged.get_mut(&tenant) {
                    Some(into) => into.merge(observed, self.config.slowlog_max_len),
                    None => {
                        merged.insert(tenant, observed);
                    }
                }
            }
        }
        merged
    }
}

/// Locks `mutex`, whose data stays consistent even if a holder panicked (every update is one push or swap).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How many elements `reply` holds, if it is a collection (an array, a map's pairs, a set).
pub(crate) fn elements(reply: &[u8]) -> Option<u64> {
    let [b'*' | b'%' | b'~', line @ ..] = reply else {
        return None;
    };
    u64::try_from(resp::short_length(line)?.0).ok()
}

/// Microseconds since the Unix epoch.
pub(crate) fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// A key as reports show it: UTF-8 as is, every other byte (and `\`, and NUL, which the control plane's
/// Postgres cannot store in a JSON string: one such key would lose the whole report) escaped as `\xHH`, so that
/// any key is one unambiguous JSON string.
pub(crate) fn printable(key: &[u8]) -> String {
    match std::str::from_utf8(key) {
        Ok(text) if !text.contains(['\\', '\0']) => text.to_string(),
        _ => {
            let mut out = String::with_capacity(key.len());
            for chunk in key.utf8_chunks() {
                for c in chunk.valid().chars() {
                    match c {
                        '\\' => out.push_str("\\x5c"),
                        '\0' => out.push_str("\\x00"),
                        c => out.push(c),
                    }
                }
                for b in chunk.invalid() {
                    out.push_str(&format!("\\x{b:02x}"));
                }
            }
            out
        }
    }
}

/// The command `args` invoke, if the command table knows it, and where its keys are among them (none when the
/// table cannot find them).
fn command_keys(args: &[Bytes]) -> (Option<&'static CommandSpec>, Vec<usize>) {
    let mut keys = Vec::new();
    let spec = crate::cmd::lookup(args).ok();
    if let Some(spec) = spec
        && spec.key_indices(args, &mut keys).is_err()
    {
        keys.clear();
    }
    (spec, keys)
}

/// A request of a slot that tripped something, looked into: its arguments, with its keys as the tenant sent
/// them (its namespace's prefix taken off), and where its keys are among them.
pub(crate) struct Parsed {
    pub args: Vec<Bytes>,
    pub keys: Vec<usize>,
    /// The command table's name of its command (`""` for one it does not know).
    pub command: &'static str,
    /// Whether the command may write (a command it does not know is taken to).
    pub writes: bool,
}

impl Parsed {
    /// The request `frame` (a piece of `raw`), whose keys carry `prefix` if one is given.
    pub(crate) fn new(raw: &Bytes, frame: &[u8], prefix: Option<&[u8]>) -> Parsed {
        let mut args: Vec<Bytes> = resp::request_args(frame)
            .map(|arg| raw.slice_ref(arg))
            .collect();
        let (spec, keys) = command_keys(&args);
        for &i in &keys {
            if let (Some(prefix), Some(key)) = (prefix, args.get_mut(i))
                && key.starts_with(prefix)
            {
                *key = key.slice(prefix.len()..);
            }
        }
        Parsed {
            args,
            keys,
            command: spec.map_or("", |spec| spec.name),
            writes: spec.is_none_or(|spec| !spec.has(crate::cmd::flag::READONLY)),
        }
    }

    /// Its `n`-th key.
    pub(crate) fn key(&self, n: usize) -> Option<&Bytes> {
        self.args.get(*self.keys.get(n)?)
    }

    /// Its first key, as reports keep it (see `kept_key`).
    pub(crate) fn kept_key(&self) -> Option<Bytes> {
        self.key(0).map(|key| kept_key(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_shown_unambiguously_and_requests_as_the_tenant_sent_them() {
        assert_eq!(printable(b"user:1"), "user:1");
        assert_eq!(printable(b"a\\b\xff"), "a\\x5cb\\xff");
        assert_eq!(printable(b"a\0b"), "a\\x00b");
        let parse = |frame: &'static [u8], prefix: Option<&[u8]>| {
            Parsed::new(&Bytes::from_static(frame), frame, prefix)
        };
        let get = parse(b"*2\r\n$3\r\nGET\r\n$7\r\nns:user\r\n", Some(b"ns:"));
        assert_eq!(get.args, ["GET", "user"].map(Bytes::from));
        assert_eq!(
            (get.kept_key(), get.command),
            (Some(Bytes::from("user")), "get")
        );
        let mget = parse(b"*3\r\n$4\r\nMGET\r\n$4\r\nns:a\r\n$1\r\nb\r\n", None);
        assert_eq!(
            (&mget.args[1], mget.key(1)),
            (&Bytes::from("ns:a"), Some(&Bytes::from("b")))
        );
        // A frame cut short yields the arguments before the cut.
        let cut = parse(b"*2\r\n$3\r\nGET\r\n$7\r\nns:", None);
        assert_eq!((cut.args.len(), cut.key(0)), (1, None));
    }
}
