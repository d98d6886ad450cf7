//! A tenant's key namespace (`Namespace`): every key the tenant sends is stored under its prefix, and every key
//! name a reply carries is shown without it, so that tenants sharing one database never see each other's keys.
//!
//! Keys are found with the command table's key specs (`CommandSpec::key_indices`, what `COMMAND GETKEYS` says),
//! movable keys included; the patterns of `SCAN`/`KEYS` and of `SORT ... BY/GET` are prefixed too. Placement
//! hashes the key as stored (prefixed). Commands that act on or reveal the whole database cannot be narrowed to
//! the namespace and are refused ([`Namespace::refusal`]). Keys a script computes itself are not rewritten: they
//! are isolated by the script's backend user (see docs/tenant-policies.md).

mod replies;
#[cfg(test)]
mod tests;

use bytes::{Bytes, BytesMut};

use crate::cmd::CommandSpec;
use crate::cmd::spec::{BeginSearch, FindKeys, KeySpec, key_flag};
use crate::reply::Transform;
use crate::resp::{self, Frame, Request, RequestDecoder};

use replies::KeysIn;

/// A tenant's key prefix, as compiled from its `namespace` policy.
pub struct Namespace {
    prefix: Bytes,
    /// The prefix with glob characters escaped, for patterns (`SCAN ... MATCH`, `KEYS`, keyspace notifications).
    pattern: Bytes,
}

/// Commands that act on or reveal every key of the database, which other tenants share: what to do instead.
const WHOLE_DATABASE: &[(&str, &str)] = &[
    (
        "flushdb",
        "delete the namespace's keys with SCAN and UNLINK",
    ),
    (
        "flushall",
        "delete the namespace's keys with SCAN and UNLINK",
    ),
    ("dbsize", "count the namespace's keys with SCAN"),
    ("randomkey", "pick a key from SCAN's replies"),
    ("swapdb", "move keys one by one with COPY ... DB or MOVE"),
    ("migrate", "copy keys with DUMP and RESTORE"),
];

impl Namespace {
    pub fn new(prefix: &str) -> Namespace {
        Namespace {
            prefix: Bytes::copy_from_slice(prefix.as_bytes()),
            pattern: escape_glob(prefix.as_bytes()).into(),
        }
    }

    /// The raw prefix every key of the tenant is stored under.
    pub fn prefix(&self) -> &Bytes {
        &self.prefix
    }

    /// The prefix as a glob pattern's literal start (its `*?[]\` escaped).
    pub fn pattern_prefix(&self) -> &Bytes {
        &self.pattern
    }

    /// Why `spec` is refused to a tenant with a namespace (admin or not): it would act on, or reveal, every
    /// tenant's keys of the shared database. `None` when it may run.
    pub fn refusal(spec: &CommandSpec) -> Option<String> {
        let (_, instead) = WHOLE_DATABASE.iter().find(|(name, _)| *name == spec.name)?;
        Some(format!(
            "ERR {} is refused for a tenant with a key namespace: it concerns every key of the database, which \
             other tenants share; {instead} instead",
            spec.display_name()
        ))
    }

    /// `request` with every key (and key pattern) under the prefix, and how its reply is rewritten for the
    /// tenant (key names stripped of the prefix), if it carries key names. Err: the request cannot be narrowed
    /// to the namespace (the reply the client gets).
    pub fn outbound(
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
        match spec.name {
            // Options come in pairs: with an odd one out, Redis' syntax error comes first either way.
            "scan" => {
                matches_all =
                    !self.scan_pattern(args, &mut prefixes) && args.len().is_multiple_of(2)
            }
            "keys" => prefixes[1] = &self.pattern,
            "sort" | "sort_ro" => self.sort_patterns(args, &mut prefixes)?,
            _ => {}
        }
        let transform = KeysIn::of(spec).map(|keys| self.stripping(keys));
        if prefixes.iter().all(|prefix| prefix.is_empty()) && !matches_all {
            return Ok((request, transform));
        }
        let mut parts: Vec<(&[u8], &[u8])> = prefixes
            .iter()
            .zip(args)
            .map(|(prefix, arg)| (*prefix, &arg[..]))
            .collect();
        if matches_all {
            parts.extend([(&b""[..], &b"MATCH"[..]), (&self.pattern[..], &b"*"[..])]);
        }
        Ok((Request::from_prefixed(&parts), transform))
    }

    /// Prefixes `SCAN`'s `MATCH` patterns (options come in pairs after the cursor, as Redis parses them);
    /// false when there is none.
    fn scan_pattern<'a>(&'a self, args: &[Bytes], prefixes: &mut [&'a [u8]]) -> bool {
        let mut matched = false;
        for i in (2..args.len().saturating_sub(1)).step_by(2) {
            if args[i].eq_ignore_ascii_case(b"match") {
                prefixes[i + 1] = &self.pattern;
                matched = true;
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

    /// For the direct path: `frame` (the request `decoder` decoded last) re-encoded with its keys under the
    /// prefix, in one buffer, when the argument count alone tells where its keys are (`GET`, `SET`, `MGET`,
    /// `MSET`, `HSET`...), and where its first key is in the new frame. `None`: the request must take the
    /// dispatch path (keyless, movable keys, or a reply to rewrite).
    pub(crate) fn direct_frame(
        &self,
        spec: &CommandSpec,
        decoder: &RequestDecoder,
        frame: &Frame,
    ) -> Option<(Frame, (usize, usize))> {
        let argc = decoder.arg_count();
        let (first, last, step) = fixed_keys(spec, argc)?;
        let extra = (last - first) / step + 1;
        let mut out = BytesMut::with_capacity(frame.0.len() + extra * (self.prefix.len() + 2));
        let parts = (0..argc).map(|i| {
            let key = i >= first && i <= last && (i - first) % step == 0;
            let prefix: &[u8] = if key { &self.prefix } else { b"" };
            (prefix, decoder.arg(frame, i).unwrap_or_default())
        });
        let mut first_key = (0, 0);
        let mut index = 0;
        resp::command_prefixed(&mut out, argc, parts, |start, end| {
            if index == first {
                first_key = (start, end);
            }
            index += 1;
        });
        Some((Frame(out), first_key))
    }
}

/// Where the keys of a command with `argc` arguments are when the count alone tells: `(first, last, step)`
/// indices, as `key_indices` finds them. Only commands with one plain key spec, a fixed start and a range
/// without a limit qualify (and those whose one key is the first argument, whatever their flags).
fn fixed_keys(spec: &CommandSpec, argc: usize) -> Option<(usize, usize, usize)> {
    if spec.key_is_first_argument() {
        return (argc > 1).then_some((1, 1, 1));
    }
    let [
        KeySpec {
            flags,
            begin: BeginSearch::Index(first),
            find:
                FindKeys::Range {
                    lastkey,
                    keystep,
                    limit: 0,
                },
        },
    ] = spec.key_specs
    else {
        return None;
    };
    let plain = flags & (key_flag::NOT_KEY | key_flag::INCOMPLETE | key_flag::VARIABLE_FLAGS) == 0;
    let argc = i64::try_from(argc).ok()?;
    let (first, lastkey) = (i64::from(*first), i64::from(*lastkey));
    let last = if lastkey >= 0 {
        first + lastkey
    } else {
        argc + lastkey
    };
    let valid = plain && *keystep > 0 && first >= 1 && first <= last && last < argc;
    valid.then(|| {
        (
            first as usize,
            last as usize,
            usize::try_from(*keystep).unwrap_or(1),
        )
    })
}

/// `text` with the glob characters `*?[]\` escaped, as a pattern's literal part.
pub(super) fn escape_glob(text: &[u8]) -> Vec<u8> {
    let mut escaped = Vec::with_capacity(text.len() + 4);
    for &c in text {
        if matches!(c, b'*' | b'?' | b'[' | b']' | b'\\') {
            escaped.push(b'\\');
        }
        escaped.push(c);
    }
    escaped
}
