//! A tenant's near cache: hot keys answered from the gateway's memory, kept exact by Redis' invalidations
//! (docs/near-cache.md). The policy says how much memory the tenant's cache may take on one gateway, which keys
//! it holds and the largest value it keeps.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Largest `max_bytes`: 64 GiB.
pub const MAX_NEAR_CACHE_BYTES: u64 = 64 << 30;
/// Largest `max_value_bytes`: 64 MiB.
pub const MAX_NEAR_CACHE_VALUE_BYTES: u64 = 64 << 20;
/// `max_value_bytes` when the policy does not say: 16 KiB.
pub const DEFAULT_NEAR_CACHE_VALUE_BYTES: u64 = 16 << 10;

/// A tenant's near cache on each gateway: its reads of single keys (`GET`) answered from the gateway's memory
/// while Redis has not told the gateway of a change to the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NearCachePolicy {
    /// Most bytes the tenant's cached keys and values take on one gateway (1 to 64 GiB); the least recently
    /// read are evicted beyond it. A gateway also bounds all tenants' together (`--near-cache-max-bytes`).
    pub max_bytes: u64,
    /// Which keys are cached: `hot` (the default), only keys read again and again on the gateway; `all`, every
    /// key read.
    #[serde(default, skip_serializing_if = "NearCacheKeys::is_hot")]
    pub keys: NearCacheKeys,
    /// Largest value cached, in bytes (1 to `max_bytes`, at most 64 MiB; default 16 KiB): larger ones are
    /// read from Redis every time.
    #[serde(
        default = "default_value_bytes",
        skip_serializing_if = "is_default_value_bytes"
    )]
    pub max_value_bytes: u64,
}

/// Which keys a tenant's near cache holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NearCacheKeys {
    /// Keys the gateway finds read again and again (a frequency summary of the tenant's reads on each worker).
    #[default]
    Hot,
    /// Every key read.
    All,
}

impl NearCacheKeys {
    pub fn is_hot(&self) -> bool {
        *self == NearCacheKeys::Hot
    }

    /// The keys named `text` (`hot`, `all`).
    pub fn parse(text: &str) -> Option<NearCacheKeys> {
        match text {
            "hot" => Some(NearCacheKeys::Hot),
            "all" => Some(NearCacheKeys::All),
            _ => None,
        }
    }
}

fn default_value_bytes() -> u64 {
    DEFAULT_NEAR_CACHE_VALUE_BYTES
}

fn is_default_value_bytes(value: &u64) -> bool {
    *value == DEFAULT_NEAR_CACHE_VALUE_BYTES
}

impl NearCachePolicy {
    /// A cache of `max_bytes` with the other fields at their defaults.
    pub fn of(max_bytes: u64) -> NearCachePolicy {
        NearCachePolicy {
            max_bytes,
            keys: NearCacheKeys::Hot,
            max_value_bytes: DEFAULT_NEAR_CACHE_VALUE_BYTES.min(max_bytes.max(1)),
        }
    }

    /// Its problems, each with its field's name under `near_cache`.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        let max_bytes_ok = (1..=MAX_NEAR_CACHE_BYTES).contains(&self.max_bytes);
        if !max_bytes_ok {
            problems.push((
                "max_bytes",
                format!("must be 1 to {MAX_NEAR_CACHE_BYTES} (64 GiB)"),
            ));
        }
        if !(1..=MAX_NEAR_CACHE_VALUE_BYTES).contains(&self.max_value_bytes) {
            problems.push((
                "max_value_bytes",
                format!("must be 1 to {MAX_NEAR_CACHE_VALUE_BYTES} (64 MiB)"),
            ));
        } else if max_bytes_ok && self.max_value_bytes > self.max_bytes {
            problems.push((
                "max_value_bytes",
                format!(
                    "must be at most max_bytes ({}): a larger value would never fit",
                    self.max_bytes
                ),
            ));
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_checked_and_defaults_left_out() {
        let policy: NearCachePolicy = serde_json::from_str(r#"{"max_bytes": 1000}"#).unwrap();
        assert_eq!(policy.keys, NearCacheKeys::Hot);
        assert_eq!(policy.max_value_bytes, DEFAULT_NEAR_CACHE_VALUE_BYTES);
        assert_eq!(
            serde_json::to_string(&policy).unwrap(),
            r#"{"max_bytes":1000}"#
        );
        let fields =
            |p: NearCachePolicy| p.problems().into_iter().map(|(f, _)| f).collect::<Vec<_>>();
        assert_eq!(fields(policy), ["max_value_bytes"]); // 16 KiB > 1000
        assert!(fields(NearCachePolicy::of(1 << 20)).is_empty());
        assert_eq!(fields(NearCachePolicy::of(0)), ["max_bytes"]);
        let all: NearCachePolicy = serde_json::from_str(
            r#"{"max_bytes": 1048576, "keys": "all", "max_value_bytes": 512}"#,
        )
        .unwrap();
        assert!(fields(all).is_empty());
        assert!(
            serde_json::from_str::<NearCachePolicy>(r#"{"max_bytes": 1, "keys": "cold"}"#).is_err()
        );
        assert!(serde_json::from_str::<NearCachePolicy>(r#"{"max_bytes": 1, "ttl": 3}"#).is_err());
    }
}
