//! Tracking's settings: the gateway's command-line flags, and the thresholds a session compares against, the
//! gateway's with its tenant's own (`TrackingPolicy`) in their place.

use std::time::Duration;

use switchyard_schemas::policy::TrackingPolicy;

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
    pub big_key_bytes: u64,
    /// A reply that is a collection of at least this many elements is a big key (0: none is).
    #[arg(long, env = "SWITCHYARD_BIG_KEY_ELEMENTS", default_value_t = 10_000)]
    pub big_key_elements: u64,
    /// One request in this many, per client connection, has its key counted for the hot keys (0: none).
    #[arg(long, env = "SWITCHYARD_HOT_KEY_SAMPLE", default_value_t = 1000)]
    pub hot_key_sample: u32,
    /// Estimated accesses per second from which a key is reported hot (0: a tenant's most accessed keys are,
    /// whatever their rate).
    #[arg(long, env = "SWITCHYARD_HOT_KEY_THRESHOLD", default_value_t = 0)]
    pub hot_key_threshold: u64,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrackingConfig {
    /// `--tracking`: off, no threshold of a tenant's turns anything on.
    pub on: bool,
    /// Latency from which a command is slow (`Duration::MAX`: never).
    pub slower_than: Duration,
    pub slowlog_max_len: usize,
    /// Size from which a request or reply is big (`usize::MAX`: never).
    pub big_key_bytes: usize,
    /// Elements from which a collection reply is big (`usize::MAX`: never).
    pub big_key_elements: usize,
    /// The size from which a reply may be big, by its bytes or its elements (an element takes 4 bytes at the
    /// least): the one compare a reply slot pays for both.
    pub big_reply_bytes: usize,
    /// One request in this many is sampled (`u32::MAX`: practically none).
    pub hot_key_sample: u32,
    /// Estimated accesses per second from which a key is reported hot.
    pub hot_key_threshold: u64,
    pub report_interval: Duration,
    /// Whether reply slots keep their requests, which are looked into once their replies are in.
    pub keeps_requests: bool,
}

/// Bytes an element of a collection reply takes at the least (`:1\r\n`).
const MIN_ELEMENT_BYTES: usize = 4;

impl TrackingFlags {
    pub fn config(&self) -> TrackingConfig {
        let on = self.tracking;
        let hot_key_sample = match self.hot_key_sample {
            n @ 1.. if on => n,
            _ => u32::MAX,
        };
        TrackingConfig {
            on,
            slower_than: Duration::MAX,
            slowlog_max_len: self.slowlog_max_len,
            big_key_bytes: usize::MAX,
            big_key_elements: usize::MAX,
            big_reply_bytes: usize::MAX,
            hot_key_sample,
            hot_key_threshold: self.hot_key_threshold,
            report_interval: Duration::from_millis(self.tracking_report_interval_ms.max(100)),
            keeps_requests: false,
        }
        .with(&TrackingPolicy {
            slowlog_log_slower_than: Some(self.slowlog_log_slower_than),
            big_key_bytes: Some(self.big_key_bytes),
            big_key_elements: Some(self.big_key_elements),
            hot_key_threshold: None,
        })
    }
}

impl TrackingConfig {
    /// These thresholds with a tenant's own in their place (none when tracking is off).
    pub(crate) fn with(self, policy: &TrackingPolicy) -> TrackingConfig {
        if !self.on {
            return self;
        }
        let at_least = |n: u64| match usize::try_from(n) {
            Ok(0) => usize::MAX,
            Ok(n) => n,
            Err(_) => usize::MAX,
        };
        let slower_than = match policy.slowlog_log_slower_than.map(u64::try_from) {
            Some(Ok(us)) => Duration::from_micros(us),
            Some(Err(_)) => Duration::MAX,
            None => self.slower_than,
        };
        let big_key_bytes = policy.big_key_bytes.map_or(self.big_key_bytes, at_least);
        let big_key_elements = policy
            .big_key_elements
            .map_or(self.big_key_elements, at_least);
        TrackingConfig {
            slower_than,
            big_key_bytes,
            big_key_elements,
            big_reply_bytes: big_key_bytes.min(big_key_elements.saturating_mul(MIN_ELEMENT_BYTES)),
            hot_key_threshold: policy.hot_key_threshold.unwrap_or(self.hot_key_threshold),
            keeps_requests: slower_than != Duration::MAX
                || big_key_bytes != usize::MAX
                || big_key_elements != usize::MAX
                || self.hot_key_sample != u32::MAX,
            ..self
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config(args: &[&str]) -> Result<TrackingConfig, clap::Error> {
        #[derive(clap::Parser)]
        struct Args {
            #[command(flatten)]
            flags: TrackingFlags,
        }
        let args = std::iter::once("gateway").chain(args.iter().copied());
        <Args as clap::Parser>::try_parse_from(args).map(|args| args.flags.config())
    }

    #[test]
    fn tracking_can_be_turned_off_and_its_parts_one_by_one() {
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
        assert_eq!((on.big_key_elements, on.big_reply_bytes), (10_000, 40_000));
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
            "--big-key-elements",
            "0",
            "--hot-key-sample",
            "0",
        ];
        let none = config(&parts).expect("each part off");
        assert!(!none.keeps_requests);
        assert_eq!(none.big_reply_bytes, usize::MAX);
        let mut sampling = parts;
        sampling[7] = "1";
        assert!(config(&sampling).expect("sampling only").keeps_requests);
        assert!(config(&["--tracking", "yes"]).is_err());
    }

    #[test]
    fn a_tenants_thresholds_replace_the_gateways_but_never_turn_tracking_on() {
        let gateway = TrackingConfig::default();
        let tenant = TrackingPolicy {
            slowlog_log_slower_than: Some(0),
            big_key_bytes: Some(1024),
            big_key_elements: Some(0),
            hot_key_threshold: Some(50),
        };
        let mixed = gateway.with(&tenant);
        assert_eq!(mixed.slower_than, Duration::ZERO);
        assert_eq!(
            (
                mixed.big_key_bytes,
                mixed.big_key_elements,
                mixed.big_reply_bytes
            ),
            (1024, usize::MAX, 1024)
        );
        assert_eq!(mixed.hot_key_threshold, 50);
        assert_eq!(gateway.with(&TrackingPolicy::default()), gateway);
        let silent = TrackingPolicy {
            slowlog_log_slower_than: Some(-1),
            ..TrackingPolicy::default()
        };
        assert_eq!(gateway.with(&silent).slower_than, Duration::MAX);
        // A gateway with none of it on keeps requests for a tenant that wants its slow log.
        let quiet =
            config(&["--slowlog-log-slower-than", "-1", "--big-key-bytes", "0"]).expect("flags");
        let slow = TrackingPolicy {
            slowlog_log_slower_than: Some(100),
            ..TrackingPolicy::default()
        };
        assert_eq!(quiet.with(&slow).slower_than, Duration::from_micros(100));
        let off = config(&["--tracking", "off"]).expect("--tracking off");
        assert_eq!(off.with(&tenant), off);
    }
}
