//! Finding the command a request invokes: case-insensitive lookup, container commands resolved to their
//! subcommand, the arity check, Redis' error texts for what fails (`CommandError`), and a connection's
//! `LookupCache`.
//!
//! The lookup rules and error texts are those of redis-server 7.0's `processCommand`. The success path allocates
//! nothing: names are lowercased into a stack buffer and looked up in a table built once.

use bytes::{BufMut, Bytes, BytesMut};

use super::policy::Policy;
use super::spec::{CommandSpec, KeysProc, RawReply, acl, c_str, flag};
use super::table::{COMMANDS, Command};

/// Why a request cannot be served as the command table describes it. `Display` is Redis' exact error text
/// without the leading `-` and the CRLF (lossily decoded where a client sent non-UTF-8 bytes); `write_reply`
/// writes the exact bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// `ERR unknown command 'name', with args beginning with: 'a' 'b' `. Both fields are already rendered the way
    /// Redis does it: cut at NUL, truncated, CR/LF blanked.
    #[error("{}", self.text())]
    UnknownCommand { name: Bytes, args: Bytes },
    /// `ERR unknown subcommand 'x'. Try CONFIG HELP.`; `subcommand` is already rendered like `UnknownCommand`'s.
    #[error("{}", self.text())]
    UnknownSubcommand {
        container: &'static str,
        subcommand: Bytes,
    },
    /// `ERR wrong number of arguments for 'config|get' command`, with the full name. Redis reports a rejected EXEC
    /// as an aborted transaction, even outside MULTI (`rejectCommand` -> `execCommandAbort`).
    #[error("{}", self.text())]
    WrongArity { name: &'static str },
    /// The command takes keys but none can be found in these arguments (a malformed `numkeys`, `XREAD` without
    /// `STREAMS`, ...). This is `COMMAND GETKEYS`' text; the command itself would fail in Redis with its own,
    /// more specific error, and since no key is touched the session may forward it to any backend to get it.
    #[error("{}", self.text())]
    InvalidKeyArguments,
}

impl CommandError {
    /// Writes the error reply, `-<text>\r\n`, byte-identical to Redis'.
    pub fn write_reply(&self, out: &mut BytesMut) {
        out.put_u8(b'-');
        self.write_text(out);
        out.put_slice(b"\r\n");
    }

    fn text(&self) -> String {
        let mut text = BytesMut::new();
        self.write_text(&mut text);
        String::from_utf8_lossy(&text).into_owned()
    }

    fn write_text(&self, out: &mut BytesMut) {
        match self {
            CommandError::UnknownCommand { name, args } => {
                out.put_slice(b"ERR unknown command '");
                out.put_slice(name);
                out.put_slice(b"', with args beginning with: ");
                out.put_slice(args);
            }
            CommandError::UnknownSubcommand {
                container,
                subcommand,
            } => {
                out.put_slice(b"ERR unknown subcommand '");
                out.put_slice(subcommand);
                out.put_slice(b"'. Try ");
                out.extend(container.bytes().map(|b| b.to_ascii_uppercase()));
                out.put_slice(b" HELP.");
            }
            CommandError::WrongArity { name } => {
                out.put_slice(if *name == "exec" {
                    &b"EXECABORT Transaction discarded because of: "[..]
                } else {
                    b"ERR "
                });
                out.put_slice(b"wrong number of arguments for '");
                out.put_slice(name.as_bytes());
                out.put_slice(b"' command");
            }
            CommandError::InvalidKeyArguments => {
                out.put_slice(b"ERR Invalid arguments specified for command");
            }
        }
    }

    fn unknown_command(args: &[Bytes]) -> CommandError {
        // Arguments are added while the list is shorter than the limit, each cut to what is left of it.
        let mut rendered = BytesMut::new();
        for arg in args.iter().skip(1) {
            if rendered.len() >= QUOTE_LIMIT {
                break;
            }
            let room = QUOTE_LIMIT - rendered.len();
            rendered.put_u8(b'\'');
            rendered.put_slice(&quoted(arg, room));
            rendered.put_slice(b"' ");
        }
        CommandError::UnknownCommand {
            name: quoted(args.first().map_or(&[][..], |name| name), QUOTE_LIMIT),
            args: rendered.freeze(),
        }
    }
}

/// Redis quotes client bytes in its errors with `%.128s` (or `%.*s`): a C string, so cut at the first NUL, then
/// at `limit` bytes; CR and LF become spaces afterwards so that they cannot break the protocol.
const QUOTE_LIMIT: usize = 128;

fn quoted(bytes: &[u8], limit: usize) -> Bytes {
    let bytes = c_str(bytes);
    bytes[..bytes.len().min(limit)]
        .iter()
        .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b })
        .collect::<Vec<u8>>()
        .into()
}

/// The top-level commands by lowercase name, built once.
static TOP_LEVEL: std::sync::LazyLock<fnv::FnvHashMap<&'static [u8], &'static CommandSpec>> =
    std::sync::LazyLock::new(|| {
        COMMANDS
            .iter()
            .map(|spec| (spec.name.as_bytes(), spec))
            .collect()
    });

/// Longer than any command or subcommand name, so a longer name is simply unknown.
const MAX_NAME: usize = 32;

/// Finds `name` (case-insensitively) in a sorted table whose names all start with `prefix_len` bytes of prefix
/// (`config|` for CONFIG's subcommands).
fn find(
    table: &'static [CommandSpec],
    prefix_len: usize,
    name: &[u8],
) -> Option<&'static CommandSpec> {
    if name.len() > MAX_NAME {
        return None;
    }
    let mut buf = [0u8; MAX_NAME];
    let lower = &mut buf[..name.len()];
    lower.copy_from_slice(name);
    lower.make_ascii_lowercase();
    let lower = &*lower;
    if prefix_len == 0 && std::ptr::eq(table, COMMANDS) {
        // Every request looks up its command here: a hash lookup beats ~8 out-of-line comparisons.
        return TOP_LEVEL.get(lower).copied();
    }
    table
        .binary_search_by(|spec| {
            spec.name
                .as_bytes()
                .get(prefix_len..)
                .unwrap_or_default()
                .cmp(lower)
        })
        .ok()
        .and_then(|i| table.get(i))
}

fn find_subcommand(container: &'static CommandSpec, name: &[u8]) -> Option<&'static CommandSpec> {
    find(container.subcommands, container.name.len() + 1, name)
}

/// Finds the command `args` invoke, checks its arity, and returns it. Errors are Redis' for the same request.
pub fn lookup(args: &[Bytes]) -> Result<&'static CommandSpec, CommandError> {
    let Some(spec) = resolve(args).or_else(|| newer_subcommand(args)) else {
        // `resolve` fails with a known first argument only for a container given an unknown subcommand.
        let container = args.first().and_then(|name| find(COMMANDS, 0, name));
        return Err(match (container, args.get(1)) {
            (Some(container), Some(sub)) => CommandError::UnknownSubcommand {
                container: container.name,
                subcommand: quoted(sub, QUOTE_LIMIT),
            },
            _ => CommandError::unknown_command(args),
        });
    };
    if spec.arity_ok(args.len()) {
        Ok(spec)
    } else {
        Err(CommandError::WrongArity { name: spec.name })
    }
}

/// Subcommands of Redis versions after the table's that clients send on connect, which the gateway serves
/// itself: Redis 7.2's `CLIENT SETINFO` (redis-py 8 and node-redis 6 send it). `lookup` finds them, so they run;
/// `resolve` and `lookup_by_name` do not, so `COMMAND` and its subcommands still answer exactly as the table's
/// Redis does, which has no such subcommand.
pub(super) static NEWER_SUBCOMMANDS: &[CommandSpec] = &[CommandSpec {
    id: Command::ClientSetinfo,
    name: "client|setinfo",
    // Arity, flags and ACL categories are Redis 7.2's, the same as `client|setname`'s.
    arity: 4,
    flags: flag::NOSCRIPT | flag::LOADING | flag::STALE | flag::NO_KEYS,
    acl_categories: acl::SLOW | acl::CONNECTION,
    key_specs: &[],
    subcommands: &[],
    keys_proc: KeysProc::None,
    // Never served: `COMMAND` does not know these.
    info: RawReply {
        resp2: &[],
        resp3: &[],
    },
    docs: RawReply {
        resp2: &[],
        resp3: &[],
    },
}];

/// The newer subcommand `args` invoke (see `NEWER_SUBCOMMANDS`), without the arity check. Only asked when the
/// table knows no such command, so the requests it serves pay nothing for it.
fn newer_subcommand(args: &[Bytes]) -> Option<&'static CommandSpec> {
    let (container, subcommand) = (args.first()?, args.get(1)?);
    NEWER_SUBCOMMANDS.iter().find(|spec| {
        spec.name.split_once('|').is_some_and(|(c, s)| {
            container.eq_ignore_ascii_case(c.as_bytes())
                && subcommand.eq_ignore_ascii_case(s.as_bytes())
        })
    })
}

/// The last few commands a connection looked up, as the client spelled them. Pipelines repeat a handful of
/// commands, and comparing a few bytes is cheaper than lower-casing and hashing a name again. Only top-level
/// commands without subcommands are remembered (for the others the second argument decides), each with its
/// [`Policy`], which the connection asks about on every request, computed once.
pub struct LookupCache {
    entries: [Cached; CACHED_COMMANDS],
    /// The entry the next miss replaces (round robin).
    next: usize,
    /// What decides a command's policy: [`Policy::of`], or a rule of the caller's that builds on it.
    policy_of: fn(&CommandSpec) -> Policy,
}

#[derive(Clone, Copy, Default)]
struct Cached {
    name: [u8; CACHED_NAME],
    len: usize,
    spec: Option<(&'static CommandSpec, Policy)>,
}

const CACHED_COMMANDS: usize = 4;
const CACHED_NAME: usize = 16;

impl LookupCache {
    /// A cache that remembers each command with the policy `policy_of` gives it.
    pub fn new(policy_of: fn(&CommandSpec) -> Policy) -> LookupCache {
        LookupCache {
            entries: [Cached::default(); CACHED_COMMANDS],
            next: 0,
            policy_of,
        }
    }

    /// The remembered command named `name`, and its policy.
    #[inline]
    fn find(&self, name: &[u8]) -> Option<(&'static CommandSpec, Policy)> {
        self.entries
            .iter()
            .find(|entry| name == &entry.name[..entry.len])?
            .spec
    }

    /// The remembered command and its policy, if the client named it again (`name`, with `args` arguments in
    /// all) with a number of arguments its arity admits. Asked for every request on the direct path: inlined there.
    #[inline(always)]
    pub fn cached(&self, name: &[u8], args: usize) -> Option<(&'static CommandSpec, Policy)> {
        self.find(name).filter(|(spec, _)| spec.arity_ok(args))
    }

    /// [`lookup`] and the command's [`Policy`], remembering both for the next requests.
    pub fn lookup(
        &mut self,
        args: &[Bytes],
    ) -> Result<(&'static CommandSpec, Policy), CommandError> {
        let name = args.first().map_or(&[][..], |name| &name[..]);
        if let Some((spec, policy)) = self.find(name) {
            return if spec.arity_ok(args.len()) {
                Ok((spec, policy))
            } else {
                Err(CommandError::WrongArity { name: spec.name })
            };
        }
        let spec = lookup(args)?;
        let policy = (self.policy_of)(spec);
        if spec.subcommands.is_empty() && !spec.name.contains('|') && name.len() <= CACHED_NAME {
            let entry = &mut self.entries[self.next];
            entry.name[..name.len()].copy_from_slice(name);
            entry.len = name.len();
            entry.spec = Some((spec, policy));
            self.next = (self.next + 1) % CACHED_COMMANDS;
        }
        Ok((spec, policy))
    }
}

/// The command `args` invoke, without the arity check (Redis' `lookupCommand`): a container command with a second
/// argument resolves to that subcommand, or to nothing when it has no such subcommand.
pub fn resolve(args: &[Bytes]) -> Option<&'static CommandSpec> {
    let base = find(COMMANDS, 0, args.first()?)?;
    match args.get(1) {
        Some(sub) if !base.subcommands.is_empty() => find_subcommand(base, sub),
        _ => Some(base),
    }
}

/// A command by its full name, `get` or `config|get`, case-insensitively (Redis' `lookupCommandBySds`, used by
/// `COMMAND INFO` and `COMMAND DOCS`): `config` is the container itself, `get|x` and `a|b|c` are nothing.
pub fn lookup_by_name(name: &[u8]) -> Option<&'static CommandSpec> {
    let mut parts = name.split(|&b| b == b'|');
    let base = find(COMMANDS, 0, parts.next()?)?;
    match (parts.next(), parts.next()) {
        (None, _) => Some(base),
        (Some(sub), None) => find_subcommand(base, sub),
        (Some(_), Some(_)) => None,
    }
}

/// All top-level commands, sorted by name.
pub fn commands() -> &'static [CommandSpec] {
    COMMANDS
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    use crate::cmd::words as args;

    /// The control plane checks command rules against `switchyard_schemas::policy::COMMAND_NAMES` and
    /// `ACL_CATEGORIES`: both must be this table's. `SWITCHYARD_BLESS=1` rewrites the names file.
    #[test]
    fn policy_command_names_match_the_table() {
        let names: String = commands()
            .iter()
            .flat_map(|spec| std::iter::once(spec).chain(spec.subcommands))
            .map(|spec| format!("{}\n", spec.name))
            .collect();
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../schemas/src/policy/commands.txt"
        );
        if std::env::var_os("SWITCHYARD_BLESS").is_some() {
            std::fs::write(path, &names).unwrap();
        }
        assert!(
            names == switchyard_schemas::policy::COMMAND_NAMES,
            "{path} is out of date: run `SWITCHYARD_BLESS=1 cargo test -p switchyard-gateway --lib \
             policy_command_names` and commit it"
        );
        let categories: Vec<_> = crate::cmd::ACL_CATEGORY_NAMES
            .iter()
            .map(|(name, _)| *name)
            .collect();
        assert_eq!(categories, switchyard_schemas::policy::ACL_CATEGORIES);
    }

    fn err(words: &[&str]) -> String {
        lookup(&args(words)).unwrap_err().to_string()
    }

    #[test]
    fn the_lookup_cache_answers_as_lookup_does() {
        let mut cache = LookupCache::new(Policy::of);
        for words in [
            &["GET", "k"][..],
            &["GET", "k"],
            &["GET"],
            &["get", "k"],
            &["CLIENT", "LIST"],
            &["CLIENT", "NOPE"],
            &["CLIENT"],
            &["GET", "k", "extra"],
            &["NOSUCHCOMMAND"],
            &["SET", "k", "v"],
        ] {
            let args = args(words);
            let expected = lookup(&args)
                .map(|spec| spec.name)
                .map_err(|e| format!("{e:?}"));
            // A hit says what lookup says, with the command's policy.
            if let Some((spec, policy)) = cache.cached(&args[0], args.len()) {
                assert_eq!(Ok(spec.name), expected, "{words:?}");
                assert_eq!(policy, Policy::of(spec), "{words:?}");
            }
            let cached = cache
                .lookup(&args)
                .map(|(spec, _)| spec.name)
                .map_err(|e| format!("{e:?}"));
            assert_eq!(cached, expected, "{words:?}");
        }
        // A pipeline alternating a few commands finds each of them remembered.
        let mut cache = LookupCache::new(Policy::of);
        for words in [
            &["GET", "k"][..],
            &["SET", "k", "v"],
            &["INCR", "k"],
            &["DEL", "k"],
        ] {
            cache.lookup(&args(words)).unwrap();
        }
        for (name, argc) in [("GET", 2), ("SET", 3), ("INCR", 2), ("DEL", 2)] {
            assert!(cache.cached(name.as_bytes(), argc).is_some(), "{name}");
        }
    }
    #[test]
    fn table_is_sorted_and_names_fit_the_lookup_buffer() {
        for table in std::iter::once(COMMANDS).chain(COMMANDS.iter().map(|c| c.subcommands)) {
            assert!(table.windows(2).all(|w| w[0].name < w[1].name));
            assert!(table.iter().all(|c| c.name.len() <= MAX_NAME));
        }
    }

    #[test]
    fn lookup_is_case_insensitive_and_resolves_subcommands() {
        assert_eq!(lookup(&args(&["GeT", "k"])).unwrap().name, "get");
        assert_eq!(
            lookup(&args(&["config", "GET", "x"])).unwrap().name,
            "config|get"
        );
        assert_eq!(
            lookup(&args(&["Object", "encoding", "k"])).unwrap().name,
            "object|encoding"
        );
        assert_eq!(
            lookup(&args(&["XINFO", "stream", "k"])).unwrap().name,
            "xinfo|stream"
        );
        assert_eq!(lookup_by_name(b"CONFIG|get").unwrap().name, "config|get");
        assert_eq!(lookup_by_name(b"config").unwrap().name, "config");
        assert!(lookup_by_name(b"get|x").is_none());
        assert!(lookup_by_name(b"config|get|x").is_none());
        assert!(lookup_by_name(b"").is_none());
        let get = lookup(&args(&["get", "k"])).unwrap();
        assert!(get.has(flag::READONLY | flag::FAST));
        assert!(!get.has(flag::WRITE));
        assert!(lookup(&args(&["ping"])).unwrap().has(flag::NO_KEYS));
        assert!(
            lookup(&args(&["randomkey"]))
                .unwrap()
                .has(flag::NONDETERMINISTIC)
        );
    }

    /// `CLIENT SETINFO` runs, with Redis 7.2's arity, but `COMMAND` (which resolves names itself) stays 7.0's.
    #[test]
    fn newer_subcommands_are_found_by_lookup_only() {
        let setinfo = lookup(&args(&["Client", "SETINFO", "lib-name", "x"])).unwrap();
        assert_eq!(setinfo.name, "client|setinfo");
        assert!(setinfo.has(flag::NO_KEYS) && setinfo.acl_categories & acl::CONNECTION != 0);
        assert_eq!(
            err(&["client", "setinfo", "lib-name"]),
            "ERR wrong number of arguments for 'client|setinfo' command"
        );
        assert!(resolve(&args(&["client", "setinfo", "lib-name", "x"])).is_none());
        assert!(lookup_by_name(b"client|setinfo").is_none());
        // Only as a subcommand of its own container.
        assert_eq!(
            err(&["config", "setinfo", "a", "b"]),
            "ERR unknown subcommand 'setinfo'. Try CONFIG HELP."
        );
        assert_eq!(
            err(&["client", "maint_notifications", "on"]),
            "ERR unknown subcommand 'maint_notifications'. Try CLIENT HELP."
        );
    }

    #[test]
    fn errors_are_redis_texts() {
        assert_eq!(
            err(&["foo", "a", "b"]),
            "ERR unknown command 'foo', with args beginning with: 'a' 'b' "
        );
        assert_eq!(
            err(&["foo"]),
            "ERR unknown command 'foo', with args beginning with: "
        );
        assert_eq!(
            err(&["config", "x"]),
            "ERR unknown subcommand 'x'. Try CONFIG HELP."
        );
        assert_eq!(
            err(&["Config"]),
            "ERR wrong number of arguments for 'config' command"
        );
        assert_eq!(
            err(&["config", "get"]),
            "ERR wrong number of arguments for 'config|get' command"
        );
        assert_eq!(
            err(&["GET"]),
            "ERR wrong number of arguments for 'get' command"
        );
        assert_eq!(
            err(&["get", "a", "b"]),
            "ERR wrong number of arguments for 'get' command"
        );
        let long = "x".repeat(200);
        assert_eq!(
            err(&[&long, &long, "b"]),
            format!(
                "ERR unknown command '{}', with args beginning with: '{}' ",
                &long[..128],
                &long[..128]
            )
        );
        assert_eq!(
            err(&["f\r\no", "a\0b", "c\nd"]),
            "ERR unknown command 'f  o', with args beginning with: 'a' 'c d' "
        );
        let mut reply = BytesMut::new();
        lookup(&[Bytes::from_static(b"\xff"), Bytes::from_static(b"\xfe")])
            .unwrap_err()
            .write_reply(&mut reply);
        assert_eq!(
            &reply[..],
            b"-ERR unknown command '\xff', with args beginning with: '\xfe' \r\n"
        );
    }

    #[test]
    fn many_args_stop_at_128_bytes() {
        let words: Vec<String> = (0..100).map(|i| format!("arg{i}")).collect();
        let mut all = vec!["nope"];
        all.extend(words.iter().map(String::as_str));
        let text = err(&all);
        let listed = text.split_once("beginning with: ").unwrap().1;
        // 'argN' plus a space is 7 or 8 bytes: arguments are added until the list reaches 128 bytes.
        assert!(listed.len() >= 128 && listed.len() < 128 + 8, "{listed}");
        assert!(listed.starts_with("'arg0' 'arg1' "));
    }

    proptest::proptest! {
        /// Any request gets a spec or a one-line error reply, never a panic or a reply broken by user bytes.
        #[test]
        fn lookup_never_panics_and_errors_stay_one_line(
            words in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 0..40),
            prefix in proptest::sample::select(vec!["", "config", "CLIENT", "get", "xinfo"]),
        ) {
            let mut all: Vec<Bytes> = Vec::new();
            if !prefix.is_empty() {
                all.push(Bytes::from_static(prefix.as_bytes()));
            }
            all.extend(words.into_iter().map(Bytes::from));
            if let Err(error) = lookup(&all) {
                let mut reply = BytesMut::new();
                error.write_reply(&mut reply);
                prop_assert!(reply.starts_with(b"-") && reply.ends_with(b"\r\n"));
                let body = &reply[1..reply.len() - 2];
                prop_assert!(!body.contains(&b'\r') && !body.contains(&b'\n'));
                // Name and arguments are each capped at 128 bytes, plus quotes and a little over for the last.
                prop_assert!(reply.len() < 128 * 2 + 100, "{} bytes", reply.len());
            }
        }

    }
}
