//! Per-tenant policies: a key namespace, a read-only switch, command rules, client address lists and blocked
//! keys, and a near cache. They are top-level fields of a tenant wherever one is described (the REST API, the snapshot, the routes
//! file), next to `limits`; [`TenantPolicy`] holds them together, and [`TenantPolicy::problems`] checks them the
//! same way for the control plane and the gateway.

use std::net::IpAddr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ValidationError;

mod near_cache;
pub use near_cache::{
    DEFAULT_NEAR_CACHE_VALUE_BYTES, MAX_NEAR_CACHE_BYTES, MAX_NEAR_CACHE_VALUE_BYTES,
    NearCacheKeys, NearCachePolicy,
};

/// Longest namespace, in bytes.
pub const MAX_NAMESPACE_LEN: usize = 64;
/// Most entries of one command list, address list or blocked-key list.
pub const MAX_POLICY_ENTRIES: usize = 1_024;
/// Longest blocked key or key pattern, in bytes.
pub const MAX_BLOCKED_KEY_LEN: usize = 1_024;

/// Redis' ACL categories (`ACL CAT`), which command rules name as `@category`.
pub const ACL_CATEGORIES: &[&str] = &[
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

/// Every command and subcommand the gateway knows (`get`, `config|get`), one per line: the gateway's command
/// table, checked by its `policy_command_names_match_the_table` test.
pub const COMMAND_NAMES: &str = include_str!("policy/commands.txt");

with_policy_fields! {
    /// A tenant's policies, as the snapshot and the REST API's tenant carry them (flattened: top-level fields).
    /// Every field left at its default is omitted.
    #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
    pub struct TenantPolicy {}
}

/// Which commands a tenant may run: each entry a command (`get`), a subcommand (`config|get`) or an ACL
/// category (`@dangerous`). A command must match `allow` when it is not empty, and must not match `deny`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandRules {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

impl CommandRules {
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }
}

/// What a tenant's scripts and functions (`EVAL`, `EVALSHA`, `FCALL` and their `_RO` forms) may do: the tenant's
/// `scripts` policy, or where it has none, the `scripts` parameter of its route's resources (the strictest of
/// them), which an operator sets on a shared Redis. Ordered from the most to the least permissive.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ScriptsPolicy {
    /// Scripts run as sent. One that has written and then loops cannot be killed: Redis stays busy for every
    /// tenant until an operator shuts it down.
    Allow,
    /// Scripts run in their read-only form (`EVAL_RO`, `EVALSHA_RO`, `FCALL_RO`): Redis refuses their writes,
    /// and a script that never wrote can always be killed.
    ReadOnly,
    /// Scripts and functions are refused.
    Deny,
}

impl ScriptsPolicy {
    /// The policy named `text` (`allow`, `read_only`, `deny`).
    pub fn parse(text: &str) -> Option<ScriptsPolicy> {
        match text {
            "allow" => Some(ScriptsPolicy::Allow),
            "read_only" => Some(ScriptsPolicy::ReadOnly),
            "deny" => Some(ScriptsPolicy::Deny),
            _ => None,
        }
    }
}

/// Where a tenant's `max_ops_per_sec` and `max_connections` hold (docs/tenant-policies.md, "Fleet limits").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LimitsScope {
    /// For the whole fleet: the control plane hands each live gateway a share of each limit, by its recent
    /// demand there.
    #[default]
    Fleet,
    /// On each gateway on its own: behind N gateways the tenant may get N times its limits.
    Gateway,
}

impl LimitsScope {
    pub fn is_fleet(&self) -> bool {
        *self == LimitsScope::Fleet
    }
}

/// A tenant's own thresholds of what the gateway notices of its requests (docs/tracking.md); each one left out
/// is the gateway's (its command-line flag). A gateway started with `--tracking off` notices nothing, whatever
/// a tenant asks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrackingPolicy {
    /// Microseconds of gateway-side latency from which a command enters the tenant's slow log (as Redis'
    /// `slowlog-log-slower-than`: 0 logs every command, a negative value none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowlog_log_slower_than: Option<i64>,
    /// Bytes from which a request or a reply is a big key (0: none is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub big_key_bytes: Option<u64>,
    /// Elements from which a reply that is a collection (array, map, set) is a big key (0: none is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub big_key_elements: Option<u64>,
    /// Estimated accesses per second, over a report interval, from which a key is reported hot (0: the most
    /// accessed keys are, whatever their rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hot_key_threshold: Option<u64>,
}

impl TrackingPolicy {
    pub fn is_empty(&self) -> bool {
        *self == TrackingPolicy::default()
    }
}

impl TenantPolicy {
    /// The rules the fields' types do not express, each at its path under `path` (the tenant's).
    pub fn problems(&self, path: &str) -> Vec<ValidationError> {
        let mut errors = Vec::new();
        let mut fail = |field: String, message: String| {
            errors.push(ValidationError {
                path: format!("{path}/{field}"),
                message,
            })
        };
        if let Some(namespace) = &self.namespace
            && let Err(message) = check_namespace(namespace)
        {
            fail("namespace".to_string(), message);
        }
        for (list, entries) in [
            ("allow", &self.commands.allow),
            ("deny", &self.commands.deny),
        ] {
            if entries.len() > MAX_POLICY_ENTRIES {
                fail(format!("commands/{list}"), too_many());
            }
            for (i, entry) in entries.iter().enumerate() {
                if let Err(message) = check_command_entry(entry) {
                    fail(format!("commands/{list}/{i}"), message);
                }
            }
        }
        for (field, entries) in [("ip_allow", &self.ip_allow), ("ip_deny", &self.ip_deny)] {
            if entries.len() > MAX_POLICY_ENTRIES {
                fail(field.to_string(), too_many());
            }
            for (i, entry) in entries.iter().enumerate() {
                if let Err(message) = IpNet::parse(entry) {
                    fail(format!("{field}/{i}"), message);
                }
            }
        }
        if self.blocked_keys.len() > MAX_POLICY_ENTRIES {
            fail("blocked_keys".to_string(), too_many());
        }
        for (i, key) in self.blocked_keys.iter().enumerate() {
            if key.is_empty() || key.len() > MAX_BLOCKED_KEY_LEN {
                fail(
                    format!("blocked_keys/{i}"),
                    format!("must be 1 to {MAX_BLOCKED_KEY_LEN} bytes"),
                );
            }
        }
        for (field, message) in self.near_cache.iter().flat_map(NearCachePolicy::problems) {
            fail(format!("near_cache/{field}"), message);
        }
        errors
    }
}

fn too_many() -> String {
    format!("must have at most {MAX_POLICY_ENTRIES} entries")
}

/// A namespace is 1 to [`MAX_NAMESPACE_LEN`] printable ASCII characters (no space), with either no braces at
/// all or a leading `{tag}` and no other brace, so that which hash tag places a key is never in doubt.
fn check_namespace(namespace: &str) -> Result<(), String> {
    if namespace.is_empty()
        || namespace.len() > MAX_NAMESPACE_LEN
        || !namespace.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(format!(
            "must be 1 to {MAX_NAMESPACE_LEN} printable ASCII characters, without spaces"
        ));
    }
    let braces = namespace
        .bytes()
        .filter(|b| matches!(b, b'{' | b'}'))
        .count();
    let leading_tag = namespace
        .strip_prefix('{')
        .and_then(|rest| rest.find('}'))
        .is_some_and(|end| end > 0);
    match braces {
        0 => Ok(()),
        2 if leading_tag => Ok(()),
        _ => Err(
            "may hold braces only as a leading hash tag, as in '{shop}:' (all the tenant's keys in one slot), \
             or none, as in 'shop:' (the tenant's own hash tags place its keys)"
                .to_string(),
        ),
    }
}

/// `text` with the glob characters `*?[]\` escaped, as the literal start of a pattern: `SCAN ... MATCH` and `KEYS`
/// over a namespace's keys are `escape_glob(namespace)` followed by `*` (the gateway's rewrite and the control
/// plane's migration tasks both build them so).
pub fn escape_glob(text: &[u8]) -> Vec<u8> {
    let mut escaped = Vec::with_capacity(text.len() + 4);
    for &c in text {
        if matches!(c, b'*' | b'?' | b'[' | b']' | b'\\') {
            escaped.push(b'\\');
        }
        escaped.push(c);
    }
    escaped
}

/// Whether two namespaces would let one tenant see the other's keys: one is the start of the other.
pub fn namespaces_overlap(a: &str, b: &str) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// Finds the namespaces of one document (a routes file, a snapshot, an import) that overlap another, each
/// given with the path of its `namespace` field. In sorted order, every namespace between `a` and one that
/// starts with `a` starts with `a` too: one pass over the sorted list finds every namespace with another at its
/// start.
pub fn overlapping_namespaces<'a>(
    namespaces: impl IntoIterator<Item = (String, &'a str)>,
) -> Vec<ValidationError> {
    let mut sorted: Vec<(&str, String)> = namespaces.into_iter().map(|(p, n)| (n, p)).collect();
    sorted.sort_unstable();
    let mut errors = Vec::new();
    let mut root: Option<&(&str, String)> = None;
    for entry in &sorted {
        match root {
            Some((start, other)) if entry.0.starts_with(start) => errors.push(ValidationError {
                path: entry.1.clone(),
                message: format!(
                    "overlaps the namespace at {other}: one is the start of the other, so one tenant would see \
                     the other's keys"
                ),
            }),
            _ => root = Some(entry),
        }
    }
    errors
}

fn check_command_entry(entry: &str) -> Result<(), String> {
    let lower = entry.to_ascii_lowercase();
    if let Some(category) = lower.strip_prefix('@') {
        return match ACL_CATEGORIES.contains(&category) {
            true => Ok(()),
            false => Err(format!(
                "unknown ACL category '{entry}'; one of @{}",
                ACL_CATEGORIES.join(", @")
            )),
        };
    }
    match COMMAND_NAMES.lines().any(|name| name == lower) {
        true => Ok(()),
        false => Err(format!(
            "unknown command '{entry}' (a command as 'get', a subcommand as 'config|get', or a category as \
             '@dangerous')"
        )),
    }
}

/// An address range: a CIDR (`10.0.0.0/8`, `2001:db8::/32`) or one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    address: IpAddr,
    prefix: u8,
}

impl IpNet {
    /// Parses a CIDR or a single address; an address with bits set past the prefix is refused, as it is
    /// probably a mistake.
    pub fn parse(text: &str) -> Result<IpNet, String> {
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let address: IpAddr = address
            .parse()
            .map_err(|_| format!("'{text}' is not an IP address or a CIDR such as 10.0.0.0/8"))?;
        let bits = if address.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            Some(prefix) => prefix
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= bits)
                .ok_or_else(|| format!("'{text}': the prefix length must be 0 to {bits}"))?,
        };
        let net = IpNet { address, prefix };
        if net.host_bits(address) != 0 {
            return Err(format!(
                "'{text}' has bits set past its prefix length (the network is {})",
                net.network()
            ));
        }
        Ok(net)
    }

    /// Whether `address` is in the range. An IPv4 address written as IPv6 (`::ffff:10.0.0.1`, as a dual-stack
    /// listener sees IPv4 clients) is the IPv4 address.
    pub fn contains(&self, address: IpAddr) -> bool {
        let address = match address {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        match (self.address, address) {
            (IpAddr::V4(net), IpAddr::V4(a)) => {
                mask(u128::from(u32::from(net) ^ u32::from(a)), 32, self.prefix) == 0
            }
            (IpAddr::V6(net), IpAddr::V6(a)) => {
                mask(u128::from(net) ^ u128::from(a), 128, self.prefix) == 0
            }
            _ => false,
        }
    }

    fn host_bits(&self, address: IpAddr) -> u128 {
        match address {
            IpAddr::V4(a) => {
                u128::from(u32::from(a)) & !mask(u128::MAX, 32, self.prefix) & 0xffff_ffff
            }
            IpAddr::V6(a) => u128::from(a) & !mask(u128::MAX, 128, self.prefix),
        }
    }

    fn network(&self) -> String {
        let address = match self.address {
            IpAddr::V4(a) => IpAddr::V4(std::net::Ipv4Addr::from(
                (u128::from(u32::from(a)) & mask(u128::MAX, 32, self.prefix)) as u32,
            )),
            IpAddr::V6(a) => IpAddr::V6(std::net::Ipv6Addr::from(
                u128::from(a) & mask(u128::MAX, 128, self.prefix),
            )),
        };
        format!("{address}/{}", self.prefix)
    }
}

/// The top `prefix` of `width` bits of `value`.
fn mask(value: u128, width: u32, prefix: u8) -> u128 {
    let host = width - u32::from(prefix);
    let keep = if host >= 128 { 0 } else { u128::MAX << host };
    value & keep & (u128::MAX >> (128 - width))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contains(net: &str, address: &str) -> bool {
        IpNet::parse(net)
            .unwrap()
            .contains(address.parse().unwrap())
    }

    #[test]
    fn address_ranges() {
        assert!(contains("127.0.0.0/8", "127.0.0.1"));
        assert!(contains("127.0.0.0/8", "::ffff:127.9.0.1"));
        assert!(!contains("127.0.0.0/8", "128.0.0.1"));
        assert!(contains("127.0.0.1", "127.0.0.1"));
        assert!(!contains("127.0.0.1", "127.0.0.2"));
        assert!(contains("0.0.0.0/0", "10.1.2.3"));
        assert!(!contains("0.0.0.0/0", "::1"));
        assert!(contains("::/0", "::1"));
        assert!(contains("2001:db8::/32", "2001:db8:ffff::1"));
        assert!(!contains("2001:db8::/32", "2001:db9::1"));
        assert!(contains("::1", "::1"));
        for (text, message) in [
            (
                "10.0.0.1/8",
                "'10.0.0.1/8' has bits set past its prefix length (the network is 10.0.0.0/8)",
            ),
            (
                "10.0.0.0/33",
                "'10.0.0.0/33': the prefix length must be 0 to 32",
            ),
            ("::/129", "'::/129': the prefix length must be 0 to 128"),
            (
                "localhost",
                "'localhost' is not an IP address or a CIDR such as 10.0.0.0/8",
            ),
        ] {
            assert_eq!(IpNet::parse(text), Err(message.to_string()), "{text}");
        }
    }

    #[test]
    fn namespaces() {
        for good in ["shop:", "{shop}:", "{s}", "a", "tenant/7:"] {
            assert_eq!(check_namespace(good), Ok(()), "{good}");
        }
        for bad in ["", "a b", "shop{x}:", "{}:", "{a}{b}", "{a", "a}", "é:"] {
            assert!(check_namespace(bad).is_err(), "{bad}");
        }
        assert!(namespaces_overlap("a:", "a:b:"));
        assert!(!namespaces_overlap("a:", "b:"));
        let errors = overlapping_namespaces([
            ("/0".to_string(), "a:"),
            ("/1".to_string(), "b:"),
            ("/2".to_string(), "a:x"),
        ]);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].path, "/2");
    }

    #[test]
    fn command_rules_name_known_commands_and_categories() {
        let policy = TenantPolicy {
            commands: CommandRules {
                allow: vec!["GET".into(), "config|get".into(), "@Read".into()],
                deny: vec!["@nope".into(), "flushal".into(), "config|nope".into()],
            },
            ..TenantPolicy::default()
        };
        let paths: Vec<_> = policy.problems("").into_iter().map(|e| e.path).collect();
        assert_eq!(
            paths,
            ["/commands/deny/0", "/commands/deny/1", "/commands/deny/2"]
        );
    }
}
