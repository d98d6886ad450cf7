//! A tenant's key namespace (`Namespace`): every key the tenant sends is stored under its prefix, and every key
//! name a reply carries is shown without it, so that tenants sharing one database never see each other's keys.
//!
//! Keys are found with the command table's key specs (`CommandSpec::key_indices`, what `COMMAND GETKEYS` says),
//! movable keys included; the patterns of `SCAN`/`KEYS` and of `SORT ... BY/GET` are prefixed too. Placement
//! hashes the key as stored (prefixed). Commands that act on or reveal the whole database cannot be narrowed to
//! the namespace and are refused ([`Namespace::refusal`]). Keys a script computes itself are not rewritten: they
//! are isolated by the script's backend user (see docs/tenant-policies.md).

mod direct;
mod replies;
#[cfg(test)]
mod tests;

use bytes::Bytes;
use switchyard_schemas::policy::MAX_NAMESPACE_LEN;
// Shared with the control plane's migration tasks, which scan a namespace's keys with the same pattern.
pub(super) use switchyard_schemas::policy::escape_glob;

use crate::cmd::{Command, CommandSpec};
use crate::reply::Transform;
use crate::resp::Request;

pub(crate) use direct::DirectKeys;
use replies::KeysIn;

/// A tenant's key prefix, as compiled from its `namespace` policy.
pub(crate) struct Namespace {
    prefix: Bytes,
    /// The prefix with glob characters escaped, for patterns (`SCAN ... MATCH`, `KEYS`, keyspace notifications).
    pattern: Bytes,
    /// The prefix in a block of fixed size, which the direct path copies without a copy call (see
    /// `Namespace::direct_frame`); empty for a prefix longer than a namespace may be.
    block: [u8; MAX_NAMESPACE_LEN],
}

/// The most buckets one `SCAN` of a namespaced tenant may walk (its `COUNT`, a hint Redis may go below anyway):
/// the database is shared, so a larger count walks other tenants' keys too, holding every client of the server
/// meanwhile (a `COUNT` of 100,000,000 over 1.5 million keys held one for 3.7 s; 1,000 costs about 1 ms).
const SCAN_COUNT_MAX_VALUE: i64 = 1000;
const SCAN_COUNT_MAX: &str = "1000";

/// Commands that act on or reveal every key of the database, which other tenants share: what to do instead.
const WHOLE_DATABASE: &[(Command, &str)] = &[
    (
        Command::Flushdb,
        "delete the namespace's keys with SCAN and UNLINK",
    ),
    (
        Command::Flushall,
        "delete the namespace's keys with SCAN and UNLINK",
    ),
    (Command::Dbsize, "count the namespace's keys with SCAN"),
    (Command::Randomkey, "pick a key from SCAN's replies"),
    (
        Command::Swapdb,
        "move keys one by one with COPY ... DB or MOVE",
    ),
    (Command::Migrate, "copy keys with DUMP and RESTORE"),
];

impl Namespace {
    pub(crate) fn new(prefix: &str) -> Namespace {
        let mut block = [0; MAX_NAMESPACE_LEN];
        if let Some(start) = block.get_mut(..prefix.len()) {
            start.copy_from_slice(prefix.as_bytes());
        }
        Namespace {
            prefix: Bytes::copy_from_slice(prefix.as_bytes()),
            pattern: escape_glob(prefix.as_bytes()).into(),
            block,
        }
    }

    /// The raw prefix every key of the tenant is stored under.
    pub(crate) fn prefix(&self) -> &Bytes {
        &self.prefix
    }

    /// The prefix as a glob pattern's literal start (its `*?[]\` escaped).
    pub(crate) fn pattern_prefix(&self) -> &Bytes {
        &self.pattern
    }

    /// Why `spec` is refused to a tenant with a namespace (admin or not): it would act on, or reveal, every
    /// tenant's keys of the shared database. `None` when it may run.
    pub(crate) fn refusal(spec: &CommandSpec) -> Option<String> {
        let (_, instead) = WHOLE_DATABASE.iter().find(|(id, _)| *id == spec.id)?;
        Some(format!(
            "ERR {} is refused for a tenant with a key namespace: it concerns every key of the database, which \
             other tenants share; {instead} instead",
            spec.display_name()
        ))
    }

    /// `request` with every key (and key pattern) under the prefix, and how its reply is rewritten for the
    /// tenant (key names stripped of the prefix), if it carries key names. Err: the request cannot be narrowed
    /// to the namespace (the reply the client gets).
    pub(crate) fn outbound(
        &self,
        spec: &CommandSpec,
        request: Request,
    ) -> Result<(Request, Option<Transform>), String> {
        let args = request.args();
        let mut prefixes: Vec<&[u8]> = vec![b""; args.len()];
        let mut keys = Vec::new();
        // Keys Redis would not find either: Redis refuses the command itself, with its own error.
        if spec.key_indices(args, &mut keys).is_ok() {
            for &key in &keys {
                prefixes[key] = &self.prefix;
            }
        }
        let mut matches_all = false;
        let mut counts = Vec::new();
        match spec.id {
            // Options come in pairs: with an odd one out, Redis' syntax error comes first either way.
            Command::Scan => {
                matches_all = !self.scan_pattern(args, &mut prefixes, &mut counts)
                    && args.len().is_multiple_of(2)
            }
            Command::Keys => prefixes[1] = &self.pattern,
            Command::Sort | Command::SortRo => self.sort_patterns(args, &mut prefixes)?,
            _ => {}
        }
        let transform = KeysIn::of(spec).map(|keys| self.stripping(keys));
        if prefixes.iter().all(|prefix| prefix.is_empty()) && !matches_all && counts.is_empty() {
            return Ok((request, transform));
        }
        let mut parts: Vec<(&[u8], &[u8])> = prefixes
            .iter()
            .zip(args)
            .map(|(prefix, arg)| (*prefix, &arg[..]))
            .collect();
        for count in counts {
            parts[count] = (b"", SCAN_COUNT_MAX.as_bytes());
        }
        if matches_all {
            parts.extend([(&b""[..], &b"MATCH"[..]), (&self.pattern[..], &b"*"[..])]);
        }
        Ok((Request::from_prefixed(&parts), transform))
    }

    /// Prefixes `SCAN`'s `MATCH` patterns (options come in pairs after the cursor, as Redis parses them);
    /// false when there is none. `counts`: the `COUNT` values above [`SCAN_COUNT_MAX`], to be lowered to it.
    fn scan_pattern<'a>(
        &'a self,
        args: &[Bytes],
        prefixes: &mut [&'a [u8]],
        counts: &mut Vec<usize>,
    ) -> bool {
        let mut matched = false;
        for i in (2..args.len().saturating_sub(1)).step_by(2) {
            if args[i].eq_ignore_ascii_case(b"match") {
                prefixes[i + 1] = &self.pattern;
                matched = true;
            } else if args[i].eq_ignore_ascii_case(b"count")
                && std::str::from_utf8(&args[i + 1])
                    .ok()
                    .and_then(|count| count.parse::<i64>().ok())
                    .is_some_and(|count| count > SCAN_COUNT_MAX_VALUE)
            {
                counts.push(i + 1);
            }
        }
        matched
    }

    /// Prefixes `SORT`'s `BY` and `GET` patterns, read as sort.c reads its options. A pattern without `*` looks
    /// nothing up (`BY nosort`, `GET #`): it stays as it is, so that it keeps meaning the same. A prefix with a `*`
    /// of its own would be substituted instead of the pattern's: refused.
    fn sort_patterns<'a>(
        &'a self,
        args: &[Bytes],
        prefixes: &mut [&'a [u8]],
    ) -> Result<(), String> {
        let mut j = 2;
        while j < args.len() {
            let left = args.len() - j - 1;
            let option = args[j].to_ascii_lowercase();
            match &option[..] {
                b"asc" | b"desc" | b"alpha" => {}
                b"limit" if left >= 2 => j += 2,
                b"store" if left >= 1 => j += 1,
                b"by" | b"get" if left >= 1 => {
                    j += 1;
                    if args[j].contains(&b'*') {
                        if self.prefix.contains(&b'*') {
                            return Err(
                                "ERR SORT with BY or GET patterns is refused for this tenant: its key namespace \
                                 holds a '*', which SORT would substitute"
                                    .to_string(),
                            );
                        }
                        prefixes[j] = &self.prefix;
                    }
                }
                _ => break, // Redis' syntax error
            }
            j += 1;
        }
        Ok(())
    }

    /// A transform that strips the prefix from the key names at `keys` in a reply.
    fn stripping(&self, keys: KeysIn) -> Transform {
        let prefix = self.prefix.clone();
        Box::new(move |reply| replies::strip(&prefix, &reply, keys))
    }
}
