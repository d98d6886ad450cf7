//! Semantic rules beyond the JSON Schema, shared by the gateway and the control plane.
//!
//! Every error names the JSON pointer of the offending field, so a long route table can be fixed without guessing.
//!
//! Every number that sizes memory (buckets, ring weights, shards, resources per set, string lengths) is bounded
//! here, and checked before anything is allocated by it: a table is a tenant admin's input, and a gateway or
//! the control plane must never abort on one.

use std::collections::{BTreeMap, HashSet};

use crate::error::{ValidationError, ValidationErrors};
use crate::{ResourceUrl, RouteTable, RoutesFile, SplitTarget, Target, TenantLimits};

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

/// The message for a tagged object (a route table's `type`, a hash's `algorithm`) whose tag names no variant.
/// The value is echoed only when it is a short plain word: a tag field is sometimes given a URL, password and all.
pub fn unknown_tag(what: &str, given: &serde_json::Value, expected: &[&str]) -> String {
    let expected = expected.join(", ");
    match given.as_str() {
        Some(word)
            if !word.is_empty()
                && word.len() <= 64
                && word
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')) =>
        {
            format!("unknown {what} '{word}', expected one of: {expected}")
        }
        _ => format!("unknown {what}, expected one of: {expected}"),
    }
}

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

impl TenantLimits {
    /// The rules of a tenant's limits that their types do not express, each at its path under `path`: a soft
    /// output buffer bound needs a duration, a hard one below it would close the connection before it applies,
    /// and a script needs some time to run.
    pub fn problems(&self, path: &str) -> Vec<ValidationError> {
        let mut errors = Vec::new();
        if self.script_timeout_ms == Some(0) {
            errors.push(ValidationError {
                path: format!("{path}/script_timeout_ms"),
                message: "must be greater than 0".to_string(),
            });
        }
        let buffers = [
            ("output_buffer_limit", self.output_buffer_limit),
            (
                "pubsub_output_buffer_limit",
                self.pubsub_output_buffer_limit,
            ),
        ];
        for (field, limit) in buffers {
            let Some(limit) = limit else { continue };
            if limit.soft_bytes > 0 && limit.soft_seconds == 0 {
                errors.push(ValidationError {
                    path: format!("{path}/{field}/soft_seconds"),
                    message: "must be greater than 0 when soft_bytes is not 0: a soft bound needs a duration \
                              (soft_bytes 0 turns it off)"
                        .to_string(),
                });
            }
            if limit.hard_bytes > 0 && limit.soft_bytes > 0 && limit.hard_bytes < limit.soft_bytes {
                errors.push(ValidationError {
                    path: format!("{path}/{field}/hard_bytes"),
                    message: format!(
                        "must not be below soft_bytes ({}): the hard bound would close the connection before \
                         the soft one could apply (hard_bytes 0 turns it off)",
                        limit.soft_bytes
                    ),
                });
            }
        }
        errors
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
        let mut pins: BTreeMap<String, &str> = BTreeMap::new();
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
            checker
                .errors
                .extend(tenant.limits.problems(&format!("{path}/limits")));
            checker.errors.extend(tenant.policy().problems(&path));
            if tenant.is_open()
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
            for (j, certificate) in tenant.client_certificates.iter().enumerate() {
                let pin_path = format!("{path}/client_certificates/{j}/spki_sha256");
                match certificate.digest() {
                    Err(problem) => checker.fail(&pin_path, problem),
                    Ok(digest) => {
                        if let Some(other) = pins.insert(digest, &tenant.name) {
                            checker.fail(
                                &pin_path,
                                format!("the same certificate also authenticates tenant '{other}'"),
                            );
                        }
                    }
                }
            }
            checker.route(&format!("{path}/route"), &tenant.route);
        }
        checker.errors.extend(crate::policy::overlapping_namespaces(
            self.tenants.iter().enumerate().filter_map(|(i, t)| {
                Some((format!("/tenants/{i}/namespace"), t.namespace.as_deref()?))
            }),
        ));
        checker.errors.extend(self.mixed_databases(&resources));
        checker.finish()
    }

    /// A tenant without a key namespace sharing a database with a namespaced one, neither an admin tenant (see
    /// `databases::mixed_namespaces`): reported on the later of the two in the file.
    fn mixed_databases(&self, url_of: &dyn Fn(&str) -> Option<String>) -> Vec<ValidationError> {
        let mut errors = Vec::new();
        // Each place's first tenant without a namespace, and first with one.
        let mut bare: BTreeMap<String, &str> = BTreeMap::new();
        let mut namespaced: BTreeMap<String, (&str, &str)> = BTreeMap::new();
        for (i, tenant) in self.tenants.iter().enumerate() {
            if tenant.allow_admin {
                continue;
            }
            let name = tenant.name.as_str();
            for place in crate::databases::places(&tenant.route, url_of) {
                let clash = match tenant.namespace.as_deref() {
                    None => namespaced.get(&place).map(|&(other, namespace)| {
                        crate::databases::mixed_namespaces(name, other, namespace, &place)
                    }),
                    Some(namespace) => bare.get(&place).map(|&other| {
                        crate::databases::mixed_namespaces(other, name, namespace, &place)
                    }),
                };
                if let Some(message) = clash {
                    errors.push(ValidationError {
                        path: format!("/tenants/{i}/route"),
                        message,
                    });
                    break;
                }
                match tenant.namespace.as_deref() {
                    None => {
                        bare.entry(place).or_insert(name);
                    }
                    Some(namespace) => {
                        namespaced.entry(place).or_insert((name, namespace));
                    }
                }
            }
        }
        errors
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
mod tests;
