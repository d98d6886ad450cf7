//! Semantic rules beyond the JSON Schema, shared by the gateway and the control plane.
//!
//! Every error names the JSON pointer of the offending field, so a long route table can be fixed without guessing.
//!
//! Every number that sizes memory (buckets, ring weights, shards, resources per set, string lengths) is bounded
//! here, and checked before anything is allocated by it: a table is a tenant admin's input, and a gateway or
//! the control plane must never abort on one.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use crate::{ResourceUrl, RouteTable, RoutesFile, SplitTarget, Target};

/// Most buckets of a bucket algorithm: CRC16 has 65,536 values, and camellia deployments use a few hundred or
/// thousand buckets. Placement keeps one `u16` owner per bucket.
pub const MAX_BUCKETS: u32 = 65_536;
/// Most shards of a sharded table (Redis Cluster's own guidance is at most 1,000 nodes).
pub const MAX_SHARDS: usize = 1_024;
/// The most the weights of a ring's shards may add up to: the ring holds 160 virtual nodes per unit of weight
/// (163,840 at most).
pub const MAX_RING_WEIGHT: u64 = 1_024;
/// Most resources in one read set or one write set (each write is copied to every write resource).
pub const MAX_SET_RESOURCES: usize = 16;
/// Most databases a route may grant a tenant.
pub const MAX_DATABASES: u32 = 256;
/// Longest shard name, in bytes (the ring keeps a copy per virtual node).
pub const MAX_SHARD_NAME_LEN: usize = 128;
/// Longest resource reference (a URL or a resource name), in bytes.
pub const MAX_RESOURCE_LEN: usize = 4_096;
/// Longest tenant name, in bytes (the control plane's database enforces the same).
pub const MAX_TENANT_NAME_LEN: usize = 64;

/// Whether `name` may name a tenant: a letter or digit, then letters, digits, `_`, `.` or `-`, as the control
/// plane requires. Tenants' pub/sub channels carry `name:` as their prefix on a shared Redis, which must never be
/// the start of another tenant's prefix: no `:` (nor glob characters) in names.
pub fn is_valid_tenant_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= MAX_TENANT_NAME_LEN
        && chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}
/// Longest password in a routes file, in bytes.
pub const MAX_PASSWORD_LEN: usize = 1_024;

/// One broken rule, at `path` (a JSON pointer into the document that was checked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError {
    pub path: String,
    pub message: String,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every broken rule of one document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationErrors(pub Vec<ValidationError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationErrors {}

/// Collects errors while walking a document.
struct Checker<'r> {
    errors: Vec<ValidationError>,
    resources: &'r dyn Fn(&str) -> Option<String>,
}

impl Checker<'_> {
    fn fail(&mut self, path: &str, message: impl Into<String>) {
        self.errors.push(ValidationError {
            path: path.to_string(),
            message: message.into(),
        });
    }

    /// A resource is a URL or the name of a registered resource (resolved to its URL).
    fn resource(&mut self, path: &str, reference: &str, writable: bool) {
        if reference.len() > MAX_RESOURCE_LEN {
            return self.fail(path, format!("must be at most {MAX_RESOURCE_LEN} bytes"));
        }
        let url = if reference.contains("://") {
            reference.to_string()
        } else {
            match (self.resources)(reference) {
                Some(url) => url,
                None => return self.fail(path, format!("unknown resource '{reference}'")),
            }
        };
        match ResourceUrl::parse(&url) {
            Err(e) => self.fail(path, e.to_string()),
            Ok(parsed) if writable && parsed.read_only() => self.fail(
                path,
                "a -slaves resource only serves reads; it cannot be written to",
            ),
            Ok(_) => {}
        }
    }

    fn target(&mut self, path: &str, target: &Target) {
        match target {
            Target::Resource(url) => self.resource(path, url, true),
            Target::Split(SplitTarget { read, write }) => {
                if write.resources.is_empty() {
                    self.fail(
                        &format!("{path}/write/resources"),
                        "at least one write resource is required",
                    );
                }
                self.set_size(&format!("{path}/write/resources"), &write.resources);
                for (i, url) in write.resources.iter().enumerate() {
                    self.resource(&format!("{path}/write/resources/{i}"), url, true);
                }
                if let Some(read) = read {
                    if read.resources.is_empty() {
                        self.fail(
                            &format!("{path}/read/resources"),
                            "at least one read resource is required",
                        );
                    }
                    self.set_size(&format!("{path}/read/resources"), &read.resources);
                    for (i, url) in read.resources.iter().enumerate() {
                        self.resource(&format!("{path}/read/resources/{i}"), url, false);
                    }
                }
            }
        }
    }

    fn set_size(&mut self, path: &str, resources: &[String]) {
        if resources.len() > MAX_SET_RESOURCES {
            self.fail(
                path,
                format!("at most {MAX_SET_RESOURCES} resources are allowed"),
            );
        }
    }

    fn route(&mut self, path: &str, route: &RouteTable) {
        if let RouteTable::Single { databases, .. } | RouteTable::Sharded { databases, .. } = route
            && !(1..=MAX_DATABASES).contains(databases)
        {
            self.fail(
                &format!("{path}/databases"),
                format!("must be between 1 and {MAX_DATABASES}"),
            );
        }
        let (hash, shards) = match route {
            RouteTable::Single { target, .. } => {
                return self.target(&format!("{path}/target"), target);
            }
            RouteTable::Sharded { hash, shards, .. } => (hash, shards),
            RouteTable::DoubleWrite {
                primary, secondary, ..
            } => {
                for (name, table) in [("primary", primary), ("secondary", secondary)] {
                    let inner = format!("{path}/{name}");
                    if matches!(**table, RouteTable::DoubleWrite { .. }) {
                        self.fail(&inner, "a double_write table cannot contain another");
                    } else {
                        self.route(&inner, table);
                    }
                }
                return;
            }
        };
        if shards.is_empty() {
            self.fail(&format!("{path}/shards"), "at least one shard is required");
        }
        if shards.len() > MAX_SHARDS {
            // Nothing below is worth checking (or allocating) for a table this size.
            return self.fail(
                &format!("{path}/shards"),
                format!("at most {MAX_SHARDS} shards are allowed"),
            );
        }
        let bucket_count = hash.bucket_count();
        match bucket_count {
            Some(0) => self.fail(&format!("{path}/hash/buckets"), "must be at least 1"),
            Some(count) if count > MAX_BUCKETS => {
                // The bucket ownership check below allocates one entry per bucket.
                return self.fail(
                    &format!("{path}/hash/buckets"),
                    format!("must be at most {MAX_BUCKETS}"),
                );
            }
            Some(_) => {}
            None => {
                let total: u64 = shards.iter().map(|s| u64::from(s.weight)).sum();
                if total > MAX_RING_WEIGHT {
                    self.fail(
                        &format!("{path}/shards"),
                        format!("the shards' weights add up to {total}; at most {MAX_RING_WEIGHT} is allowed"),
                    );
                }
            }
        }
        let mut names = HashSet::new();
        // Which shard (by index) owns each bucket, to report overlaps and gaps.
        let mut owner: Vec<Option<usize>> = vec![None; bucket_count.unwrap_or(0) as usize];
        for (i, shard) in shards.iter().enumerate() {
            let shard_path = format!("{path}/shards/{i}");
            if shard.name.is_empty() {
                self.fail(&format!("{shard_path}/name"), "must not be empty");
            } else if shard.name.len() > MAX_SHARD_NAME_LEN {
                self.fail(
                    &format!("{shard_path}/name"),
                    format!("must be at most {MAX_SHARD_NAME_LEN} bytes"),
                );
            } else if !names.insert(shard.name.as_str()) {
                self.fail(
                    &format!("{shard_path}/name"),
                    format!("duplicate shard name '{}'", shard.name),
                );
            }
            if shard.weight == 0 {
                self.fail(&format!("{shard_path}/weight"), "must be greater than 0");
            }
            self.target(&format!("{shard_path}/target"), &shard.target);
            if bucket_count.is_none() {
                if !shard.buckets.is_empty() {
                    self.fail(
                        &format!("{shard_path}/buckets"),
                        "the ring algorithm has no buckets",
                    );
                }
                continue;
            }
            if shard.buckets.len() > owner.len() {
                // Each entry owns at least one bucket no other entry owns: a longer list cannot be right, and
                // checking it would only pile up errors.
                self.fail(
                    &format!("{shard_path}/buckets"),
                    format!(
                        "at most {} entries (one per bucket) are allowed",
                        owner.len()
                    ),
                );
                continue;
            }
            for (j, range) in shard.buckets.iter().enumerate() {
                let range_path = format!("{shard_path}/buckets/{j}");
                match parse_bucket_range(range, owner.len()) {
                    Err(message) => self.fail(&range_path, message),
                    Ok((first, last)) => {
                        let taken = (first..=last)
                            .find_map(|bucket| Some((bucket, owner[bucket].replace(i)?)));
                        if let Some((bucket, other)) = taken {
                            self.fail(
                                &range_path,
                                format!(
                                    "bucket {bucket} is also owned by shard '{}'",
                                    shards[other].name
                                ),
                            );
                        }
                    }
                }
            }
        }
        if let Some(missing) = owner.iter().position(Option::is_none)
            && !shards.is_empty()
        {
            self.fail(&format!("{path}/shards"), format!("bucket {missing} is not owned by any shard (every bucket from 0 to {} must be)", owner.len() - 1));
        }
    }
}

/// Parses `"N"` or `"FIRST-LAST"` (inclusive) against `count` buckets.
pub fn parse_bucket_range(range: &str, count: usize) -> Result<(usize, usize), String> {
    let parse = |s: &str| {
        s.trim()
            .parse::<usize>()
            .map_err(|_| format!("bad bucket range '{range}' (expected \"N\" or \"FIRST-LAST\")"))
    };
    let (first, last) = match range.split_once('-') {
        Some((a, b)) => (parse(a)?, parse(b)?),
        None => {
            let n = parse(range)?;
            (n, n)
        }
    };
    if first > last {
        return Err(format!("bucket range '{range}' is reversed"));
    }
    if last >= count {
        return Err(format!(
            "bucket {last} is out of range (buckets are 0 to {})",
            count.saturating_sub(1)
        ));
    }
    Ok((first, last))
}

impl RouteTable {
    /// Checks the rules a schema cannot express. `resources` resolves a resource name to its URL.
    pub fn validate(
        &self,
        resources: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(), ValidationErrors> {
        let mut checker = Checker {
            errors: Vec::new(),
            resources,
        };
        checker.route("", self);
        checker.finish()
    }
}

impl RoutesFile {
    /// Checks every tenant of the file, including that passwords select exactly one tenant.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        let resources = |name: &str| self.resources.get(name).cloned();
        let mut checker = Checker {
            errors: Vec::new(),
            resources: &resources,
        };
        for (name, url) in &self.resources {
            if name.contains("://") {
                checker.fail(
                    &format!("/resources/{}", escape_pointer(name)),
                    "a resource name must not contain '://'",
                );
            }
            checker.resource(&format!("/resources/{}", escape_pointer(name)), url, false);
        }
        let mut names = HashSet::new();
        let mut passwords: BTreeMap<&str, &str> = BTreeMap::new();
        let mut open_tenant: Option<&str> = None;
        for (i, tenant) in self.tenants.iter().enumerate() {
            let path = format!("/tenants/{i}");
            if tenant.name.is_empty() {
                checker.fail(&format!("{path}/name"), "must not be empty");
            } else if !is_valid_tenant_name(&tenant.name) {
                checker.fail(
                    &format!("{path}/name"),
                    format!(
                        "must be a letter or digit, then letters, digits, '_', '.' or '-', at most \
                         {MAX_TENANT_NAME_LEN} bytes"
                    ),
                );
            } else if !names.insert(tenant.name.as_str()) {
                checker.fail(
                    &format!("{path}/name"),
                    format!("duplicate tenant name '{}'", tenant.name),
                );
            }
            if tenant.passwords.is_empty()
                && let Some(other) = open_tenant.replace(&tenant.name)
            {
                checker.fail(
                    &format!("{path}/passwords"),
                    format!(
                        "only one tenant may have no passwords, and '{other}' already has none"
                    ),
                );
            }
            for (j, password) in tenant.passwords.iter().enumerate() {
                let password_path = format!("{path}/passwords/{j}");
                if password.is_empty() {
                    checker.fail(&password_path, "must not be empty");
                } else if password.len() > MAX_PASSWORD_LEN {
                    checker.fail(
                        &password_path,
                        format!("must be at most {MAX_PASSWORD_LEN} bytes"),
                    );
                } else if let Some(other) = passwords.insert(password, &tenant.name) {
                    checker.fail(
                        &password_path,
                        format!("the same password is also given to tenant '{other}'"),
                    );
                }
            }
            checker.route(&format!("{path}/route"), &tenant.route);
        }
        checker.finish()
    }
}

impl Checker<'_> {
    fn finish(self) -> Result<(), ValidationErrors> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(ValidationErrors(self.errors))
        }
    }
}

fn escape_pointer(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(json: &str) -> Vec<String> {
        let route: RouteTable = serde_json::from_str(json).unwrap();
        match route.validate(&|name| (name == "main").then(|| "redis://127.0.0.1:6379".to_string()))
        {
            Ok(()) => Vec::new(),
            Err(e) => e.0.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn accepts_valid_tables() {
        assert!(errors(r#"{"type":"single","target":"main"}"#).is_empty());
        assert!(errors(r#"{"type":"sharded","hash":{"algorithm":"crc16","buckets":4},"shards":[
            {"name":"a","target":"redis://h:1","buckets":["0-1"]},{"name":"b","target":"main","buckets":["2","3"]}]}"#).is_empty());
        assert!(errors(r#"{"type":"single","target":{"read":{"resources":["redis-cluster-slaves://h:1"],"policy":"random"},
            "write":{"resources":["redis://h:1","redis://h:2"],"ack":"all"}}}"#).is_empty());
    }

    #[test]
    fn names_the_path_of_each_error() {
        assert_eq!(
            errors(
                r#"{"type":"sharded","hash":{"algorithm":"camellia","buckets":4},"shards":[
                {"name":"a","target":"redis://h:1","buckets":["0-2"]},
                {"name":"a","target":"nowhere","buckets":["2"],"weight":0}]}"#
            ),
            vec![
                "/shards/1/name: duplicate shard name 'a'",
                "/shards/1/weight: must be greater than 0",
                "/shards/1/target: unknown resource 'nowhere'",
                "/shards/1/buckets/0: bucket 2 is also owned by shard 'a'",
                "/shards: bucket 3 is not owned by any shard (every bucket from 0 to 3 must be)",
            ]
        );
        assert_eq!(
            errors(
                r#"{"type":"single","target":{"write":{"resources":["redis-sentinel-slaves://h:1/m"]},"read":{"resources":[]}}}"#
            ),
            vec![
                "/target/write/resources/0: a -slaves resource only serves reads; it cannot be written to",
                "/target/read/resources: at least one read resource is required",
            ]
        );
        assert_eq!(
            errors(
                r#"{"type":"sharded","shards":[{"name":"a","target":"redis://h:1","buckets":["0"]}]}"#
            ),
            vec!["/shards/0/buckets: the ring algorithm has no buckets"]
        );
    }

    /// A sharded table of `shards` ring shards named s0, s1, ... with `weight` each.
    fn ring(shards: usize, weight: u32) -> String {
        let shards: Vec<String> = (0..shards)
            .map(|i| format!(r#"{{"name":"s{i}","target":"main","weight":{weight}}}"#))
            .collect();
        format!(r#"{{"type":"sharded","shards":[{}]}}"#, shards.join(","))
    }

    #[test]
    fn bucket_counts_are_bounded_before_anything_is_allocated() {
        // 2^32 - 1 buckets would have allocated 64 GiB for the ownership check (and 8 GiB for placement).
        for algorithm in ["crc16", "camellia", "camellia_hashtag"] {
            assert_eq!(
                errors(&format!(
                    r#"{{"type":"sharded","hash":{{"algorithm":"{algorithm}","buckets":4294967295}},
                    "shards":[{{"name":"a","target":"main","buckets":["0-4294967294"]}}]}}"#
                )),
                vec!["/hash/buckets: must be at most 65536"]
            );
        }
        let most = format!(
            r#"{{"type":"sharded","hash":{{"algorithm":"crc16","buckets":{MAX_BUCKETS}}},
            "shards":[{{"name":"a","target":"main","buckets":["0-{}"]}}]}}"#,
            MAX_BUCKETS - 1
        );
        assert!(errors(&most).is_empty());
        let double = format!(
            r#"{{"type":"double_write","primary":{{"type":"single","target":"main"}},"secondary":
            {{"type":"sharded","hash":{{"algorithm":"camellia","buckets":{}}},"shards":[]}}}}"#,
            MAX_BUCKETS + 1
        );
        assert_eq!(
            errors(&double),
            vec![
                "/secondary/shards: at least one shard is required",
                "/secondary/hash/buckets: must be at most 65536",
            ]
        );
    }

    #[test]
    fn a_route_grants_between_one_and_max_databases() {
        assert!(errors(r#"{"type":"single","target":"main","databases":4}"#).is_empty());
        for databases in [0, MAX_DATABASES + 1] {
            assert_eq!(
                errors(&format!(
                    r#"{{"type":"single","target":"main","databases":{databases}}}"#
                )),
                vec!["/databases: must be between 1 and 256"]
            );
        }
    }

    #[test]
    fn a_shard_lists_at_most_one_entry_per_bucket() {
        let entries = [r#""0""#; 5].join(",");
        assert_eq!(
            errors(&format!(
                r#"{{"type":"sharded","hash":{{"algorithm":"crc16","buckets":4}},
                "shards":[{{"name":"a","target":"main","buckets":[{entries}]}}]}}"#
            )),
            vec![
                "/shards/0/buckets: at most 4 entries (one per bucket) are allowed",
                "/shards: bucket 0 is not owned by any shard (every bucket from 0 to 3 must be)",
            ]
        );
    }

    #[test]
    fn ring_weights_are_bounded() {
        assert!(errors(&ring(2, 512)).is_empty());
        assert_eq!(
            errors(&ring(2, 513)),
            vec!["/shards: the shards' weights add up to 1026; at most 1024 is allowed"]
        );
        // The sum cannot overflow into something small.
        assert_eq!(
            errors(&ring(3, u32::MAX)),
            vec!["/shards: the shards' weights add up to 12884901885; at most 1024 is allowed"]
        );
    }

    #[test]
    fn shard_counts_are_bounded() {
        assert!(errors(&ring(MAX_SHARDS, 1)).is_empty());
        assert_eq!(
            errors(&ring(MAX_SHARDS + 1, 1)),
            vec!["/shards: at most 1024 shards are allowed"]
        );
    }

    #[test]
    fn resource_sets_and_strings_are_bounded() {
        let set = |n: usize| vec![r#""redis://h:1""#; n].join(",");
        assert!(
            errors(&format!(
                r#"{{"type":"single","target":{{"read":{{"resources":[{}]}},"write":{{"resources":[{}]}}}}}}"#,
                set(MAX_SET_RESOURCES),
                set(MAX_SET_RESOURCES)
            ))
            .is_empty()
        );
        assert_eq!(
            errors(&format!(
                r#"{{"type":"single","target":{{"read":{{"resources":[{}]}},"write":{{"resources":[{}]}}}}}}"#,
                set(MAX_SET_RESOURCES + 1),
                set(MAX_SET_RESOURCES + 1)
            )),
            vec![
                "/target/write/resources: at most 16 resources are allowed",
                "/target/read/resources: at most 16 resources are allowed",
            ]
        );
        let long_url = format!("redis://{}:1", "h".repeat(MAX_RESOURCE_LEN));
        assert_eq!(
            errors(&format!(r#"{{"type":"single","target":"{long_url}"}}"#)),
            vec!["/target: must be at most 4096 bytes"]
        );
        let long_name = "n".repeat(MAX_SHARD_NAME_LEN + 1);
        assert_eq!(
            errors(&format!(
                r#"{{"type":"sharded","shards":[{{"name":"{long_name}","target":"main"}}]}}"#
            )),
            vec!["/shards/0/name: must be at most 128 bytes"]
        );
    }

    #[test]
    fn tenant_names_cannot_run_into_each_others_channel_prefix() {
        for name in ["alpha", "a", "team-1.cache_v2", "0"] {
            assert!(is_valid_tenant_name(name), "{name}");
        }
        for name in ["", "a:b", "a*", "-a", "a b", "é", &"t".repeat(65)] {
            assert!(!is_valid_tenant_name(name), "{name}");
        }
    }

    /// The validation errors of a routes file.
    fn file_errors(json: &str) -> Vec<String> {
        let file: RoutesFile = serde_json::from_str(json).unwrap();
        match file.validate() {
            Ok(()) => Vec::new(),
            Err(e) => e.0.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn routes_file_strings_are_bounded() {
        let messages = file_errors(&format!(
            r#"{{"tenants":[{{"name":"{}","passwords":["{}"],"route":{{"type":"single","target":"redis://h:1"}}}}]}}"#,
            "t".repeat(MAX_TENANT_NAME_LEN + 1),
            "p".repeat(MAX_PASSWORD_LEN + 1)
        ));
        assert_eq!(
            messages,
            vec![
                "/tenants/0/name: must be a letter or digit, then letters, digits, '_', '.' or '-', at most 64 bytes",
                "/tenants/0/passwords/0: must be at most 1024 bytes",
            ]
        );
    }

    #[test]
    fn a_misspelt_target_field_is_refused() {
        let misspelt = r#"{"type":"single","target":{"raed":{"resources":["redis://h:1"]},"write":{"resources":["redis://h:2"]}}}"#;
        assert!(serde_json::from_str::<RouteTable>(misspelt).is_err());
        let right = misspelt.replace("raed", "read");
        assert!(serde_json::from_str::<RouteTable>(&right).is_ok());
    }

    #[test]
    fn routes_file_rules() {
        let messages = file_errors(
            r#"{"tenants":[
                {"name":"a","passwords":[],"route":{"type":"single","target":"redis://h:1"}},
                {"name":"a","passwords":["x","x"],"route":{"type":"single","target":"redis://h:1"}},
                {"name":"c","passwords":[],"route":{"type":"single","target":"redis:/h"}}]}"#,
        );
        assert_eq!(
            messages,
            vec![
                "/tenants/1/name: duplicate tenant name 'a'",
                "/tenants/1/passwords/1: the same password is also given to tenant 'a'",
                "/tenants/2/passwords: only one tenant may have no passwords, and 'a' already has none",
                "/tenants/2/route/target: unknown resource 'redis:/h'",
            ]
        );
    }
}
