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
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use switchyard_schemas::api::ObservationReport;

use crate::resp;

mod bigkeys;
mod hotkeys;
mod slowlog;
mod summary;

pub(crate) use bigkeys::{BigKey, BigKeys, Direction};
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

/// The tracking flags of the gateway's command line.
#[derive(clap::Args, Debug, Clone)]
pub struct TrackingFlags {
    /// Slow log, big keys and hot keys: `on` or `off` (`off` leaves SLOWLOG answering with an empty log).
    #[arg(
        long = "tracking",
        env = "SWITCHYARD_TRACKING",
        default_value = "on",
        value_parser = on_off,
        action = clap::ArgAction::Set
    )]
    pub tracking: bool,
    /// Commands whose gateway-side latency reaches this many microseconds enter their tenant's slow log
    /// (Redis' slowlog-log-slower-than: negative turns the slow log off, 0 logs every command).
    #[arg(
        long,
        env = "SWITCHYARD_SLOWLOG_LOG_SLOWER_THAN",
        default_value_t = 10_000,
        allow_negative_numbers = true
    )]
    pub slowlog_log_slower_than: i64,
    /// Entries each tenant's slow log keeps (Redis' slowlog-max-len).
    #[arg(long, env = "SWITCHYARD_SLOWLOG_MAX_LEN", default_value_t = 128)]
    pub slowlog_max_len: usize,
    /// A request or a reply of at least this many bytes is a big key (0: none is).
    #[arg(long, env = "SWITCHYARD_BIG_KEY_BYTES", default_value_t = 1_000_000)]
    pub big_key_bytes: usize,
    /// One request in this many, per client connection, has its key counted for the hot keys (0: none).
    #[arg(long, env = "SWITCHYARD_HOT_KEY_SAMPLE", default_value_t = 1000)]
    pub hot_key_sample: u32,
    /// How often the gateway hands what it noticed to the control plane (and to its admin port's /tracking).
    #[arg(
        long,
        env = "SWITCHYARD_TRACKING_REPORT_INTERVAL_MS",
        default_value_t = 10_000
    )]
    pub tracking_report_interval_ms: u64,
}

fn on_off(value: &str) -> Result<bool, String> {
    match value {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("expected on or off, not {value:?}")),
    }
}

/// The thresholds the data path compares against, set so that "off" is a compare that never succeeds.
#[derive(Debug, Clone, Copy)]
pub struct TrackingConfig {
    /// Latency from which a command is slow (`Duration::MAX`: never).
    pub slower_than: Duration,
    pub slowlog_max_len: usize,
    /// Size from which a request or reply is big (`usize::MAX`: never).
    pub big_key_bytes: usize,
    /// One request in this many is sampled (`u32::MAX`: practically none).
    pub hot_key_sample: u32,
    pub report_interval: Duration,
    /// Whether reply slots keep their requests, which are looked into once their replies are in.
    pub keeps_requests: bool,
}

impl TrackingFlags {
    pub fn config(&self) -> TrackingConfig {
        let on = self.tracking;
        let slower_than = match u64::try_from(self.slowlog_log_slower_than) {
            Ok(us) if on => Duration::from_micros(us),
            _ => Duration::MAX,
        };
        let big_key_bytes = match self.big_key_bytes {
            0 => usize::MAX,
            bytes if on => bytes,
            _ => usize::MAX,
        };
        let hot_key_sample = match self.hot_key_sample {
            n @ 1.. if on => n,
            _ => u32::MAX,
        };
        TrackingConfig {
            slower_than,
            slowlog_max_len: self.slowlog_max_len,
            big_key_bytes,
            hot_key_sample,
            report_interval: Duration::from_millis(self.tracking_report_interval_ms.max(100)),
            keeps_requests: slower_than != Duration::MAX
                || big_key_bytes != usize::MAX
                || hot_key_sample != u32::MAX,
        }
    }
}

impl Default for TrackingConfig {
    /// The command line's defaults.
    fn default() -> TrackingConfig {
        #[derive(clap::Parser)]
        struct Defaults {
            #[command(flatten)]
            flags: TrackingFlags,
        }
        match <Defaults as clap::Parser>::try_parse_from(["switchyard-gateway"]) {
            Ok(defaults) => defaults.flags.config(),
            Err(e) => unreachable!("the tracking flags' defaults parse: {e}"),
        }
    }
}

/// What one worker noticed since the last report, by tenant name.
#[derive(Default)]
pub(crate) struct Observed {
    tenants: HashMap<String, TenantObserved, BuildHasherDefault<FastHasher>>,
}

/// What was noticed of one tenant's requests.
#[derive(Default)]
pub(crate) struct TenantObserved {
    pub hot: HotKeys,
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

/// Microseconds since the Unix epoch.
pub(crate) fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// A key as reports show it: UTF-8 as is, every other byte (and `\`) escaped as `\xHH`, so that any key is
/// one unambiguous JSON string.
pub(crate) fn printable(key: &[u8]) -> String {
    match std::str::from_utf8(key) {
        Ok(text) if !text.contains('\\') => text.to_string(),
        _ => {
            let mut out = String::with_capacity(key.len());
            for chunk in key.utf8_chunks() {
                for c in chunk.valid().chars() {
                    match c {
                        '\\' => out.push_str("\\x5c"),
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

/// A request of a slot that tripped something, looked into: its arguments, with its keys as the tenant sent
/// them (its namespace's prefix taken off), and where its keys are among them.
pub(crate) struct Parsed {
    pub args: Vec<Bytes>,
    pub keys: Vec<usize>,
    /// The command table's name of its command (`""` for one it does not know).
    pub command: &'static str,
}

impl Parsed {
    /// The request `frame` (a piece of `raw`), whose keys carry `prefix` if one is given.
    pub(crate) fn new(raw: &Bytes, frame: &[u8], prefix: Option<&[u8]>) -> Parsed {
        let mut args: Vec<Bytes> = resp::request_args(frame)
            .map(|arg| raw.slice_ref(arg))
            .collect();
        let mut keys = Vec::new();
        let spec = crate::cmd::lookup(&args).ok();
        if let Some(spec) = spec {
            let _ = spec.key_indices(&args, &mut keys);
        }
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
    fn tracking_can_be_turned_off_and_its_parts_one_by_one() {
        #[derive(clap::Parser)]
        struct Args {
            #[command(flatten)]
            flags: TrackingFlags,
        }
        let config = |args: &[&str]| {
            let args = std::iter::once("gateway").chain(args.iter().copied());
            <Args as clap::Parser>::try_parse_from(args).map(|args| args.flags.config())
        };
        let on = TrackingConfig::default();
        assert_eq!(
            (
                on.slower_than,
                on.big_key_bytes,
                on.hot_key_sample,
                on.keeps_requests
            ),
            (Duration::from_millis(10), 1_000_000, 1000, true)
        );
        let off = config(&["--tracking", "off"]).expect("--tracking off");
        assert_eq!(
            (
                off.slower_than,
                off.big_key_bytes,
                off.hot_key_sample,
                off.keeps_requests
            ),
            (Duration::MAX, usize::MAX, u32::MAX, false)
        );
        let parts = [
            "--slowlog-log-slower-than",
            "-1",
            "--big-key-bytes",
            "0",
            "--hot-key-sample",
            "0",
        ];
        assert!(!config(&parts).expect("each part off").keeps_requests);
        let sampling = [
            "--slowlog-log-slower-than",
            "-1",
            "--big-key-bytes",
            "0",
            "--hot-key-sample",
            "1",
        ];
        assert!(config(&sampling).expect("sampling only").keeps_requests);
        assert!(config(&["--tracking", "yes"]).is_err());
    }

    #[test]
    fn keys_are_shown_unambiguously_and_requests_as_the_tenant_sent_them() {
        assert_eq!(printable(b"user:1"), "user:1");
        assert_eq!(printable(b"a\\b\xff"), "a\\x5cb\\xff");
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
