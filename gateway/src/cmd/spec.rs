//! The command table's types and what the session asks of it on every request: find the command (case-insensitive,
//! container commands resolved to their subcommand), check its arity, and say which arguments are keys.
//!
//! Every answer mirrors redis-server 7.0: the lookup rules and error texts of `processCommand`, and the key
//! positions of `COMMAND GETKEYS` (key specs first, Redis' per-command `getkeys_proc` where the specs are
//! incomplete). The success path allocates nothing: names are lowercased into a stack buffer and binary-searched.

use bytes::{BufMut, Bytes, BytesMut};

use super::table::COMMANDS;
use crate::resp::Protocol;

/// Command flags (`CommandSpec::flags`). All but the last three are the flags `COMMAND INFO` prints.
pub mod flag {
    pub const WRITE: u32 = 1 << 0;
    pub const READONLY: u32 = 1 << 1;
    pub const DENYOOM: u32 = 1 << 2;
    pub const MODULE: u32 = 1 << 3;
    pub const ADMIN: u32 = 1 << 4;
    pub const PUBSUB: u32 = 1 << 5;
    pub const NOSCRIPT: u32 = 1 << 6;
    pub const BLOCKING: u32 = 1 << 7;
    pub const LOADING: u32 = 1 << 8;
    pub const STALE: u32 = 1 << 9;
    pub const SKIP_MONITOR: u32 = 1 << 10;
    pub const SKIP_SLOWLOG: u32 = 1 << 11;
    pub const ASKING: u32 = 1 << 12;
    pub const FAST: u32 = 1 << 13;
    pub const NO_AUTH: u32 = 1 << 14;
    pub const MAY_REPLICATE: u32 = 1 << 15;
    pub const NO_MANDATORY_KEYS: u32 = 1 << 16;
    pub const NO_MULTI: u32 = 1 << 17;
    pub const MOVABLE_KEYS: u32 = 1 << 18;
    pub const ALLOW_BUSY: u32 = 1 << 19;
    pub const NO_ASYNC_LOADING: u32 = 1 << 20;
    /// The command has no key specs at all (`PING`, `CONFIG GET`, `PUBLISH`...): it can go to any backend.
    pub const NO_KEYS: u32 = 1 << 24;
    /// The reply may differ between two servers holding the same data: the `nondeterministic_output` command tip
    /// (`RANDOMKEY`, `SPOP`, `SCAN`, `INFO`, ...). Redis 7 has no `@random` ACL category any more; the tip is
    /// the only source, so it is what double-write comparison and replica reads should consult.
    pub const NONDETERMINISTIC: u32 = 1 << 25;
    /// Same elements but possibly in a different order (`nondeterministic_output_order`: `KEYS`, `SMEMBERS`...).
    pub const NONDETERMINISTIC_ORDER: u32 = 1 << 26;
}

/// `COMMAND INFO` flag names, in the order Redis prints them.
pub const FLAG_NAMES: &[(&str, u32)] = &[
    ("write", flag::WRITE),
    ("readonly", flag::READONLY),
    ("denyoom", flag::DENYOOM),
    ("module", flag::MODULE),
    ("admin", flag::ADMIN),
    ("pubsub", flag::PUBSUB),
    ("noscript", flag::NOSCRIPT),
    ("blocking", flag::BLOCKING),
    ("loading", flag::LOADING),
    ("stale", flag::STALE),
    ("skip_monitor", flag::SKIP_MONITOR),
    ("skip_slowlog", flag::SKIP_SLOWLOG),
    ("asking", flag::ASKING),
    ("fast", flag::FAST),
    ("no_auth", flag::NO_AUTH),
    ("may_replicate", flag::MAY_REPLICATE),
    ("no_mandatory_keys", flag::NO_MANDATORY_KEYS),
    ("no_multi", flag::NO_MULTI),
    ("movablekeys", flag::MOVABLE_KEYS),
    ("allow_busy", flag::ALLOW_BUSY),
    ("no_async_loading", flag::NO_ASYNC_LOADING),
];

/// Key-spec flags (`KeySpec::flags`), with Redis' bit values (`CMD_KEY_*`).
pub mod key_flag {
    pub const RO: u16 = 1 << 0;
    pub const RW: u16 = 1 << 1;
    pub const OW: u16 = 1 << 2;
    pub const RM: u16 = 1 << 3;
    pub const ACCESS: u16 = 1 << 4;
    pub const UPDATE: u16 = 1 << 5;
    pub const INSERT: u16 = 1 << 6;
    pub const DELETE: u16 = 1 << 7;
    /// Not a key (sharded pub/sub channels): skipped by key extraction, as in Redis.
    pub const NOT_KEY: u16 = 1 << 8;
    /// The spec may miss keys; Redis then falls back to the command's own key finder.
    pub const INCOMPLETE: u16 = 1 << 9;
    /// The real flags depend on the arguments (`SET ... GET`, `BITFIELD ... SET`).
    pub const VARIABLE_FLAGS: u16 = 1 << 10;
}

/// Key-spec flag names, in the order Redis prints them (`COMMAND INFO`, `COMMAND GETKEYSANDFLAGS`).
pub const KEY_FLAG_NAMES: &[(&str, u16)] = &[
    ("RO", key_flag::RO),
    ("RW", key_flag::RW),
    ("OW", key_flag::OW),
    ("RM", key_flag::RM),
    ("access", key_flag::ACCESS),
    ("update", key_flag::UPDATE),
    ("insert", key_flag::INSERT),
    ("delete", key_flag::DELETE),
    ("not_key", key_flag::NOT_KEY),
    ("incomplete", key_flag::INCOMPLETE),
    ("variable_flags", key_flag::VARIABLE_FLAGS),
];

/// ACL categories (`CommandSpec::acl_categories`), in `ACL CAT` order.
pub mod acl {
    pub const KEYSPACE: u32 = 1 << 0;
    pub const READ: u32 = 1 << 1;
    pub const WRITE: u32 = 1 << 2;
    pub const SET: u32 = 1 << 3;
    pub const SORTEDSET: u32 = 1 << 4;
    pub const LIST: u32 = 1 << 5;
    pub const HASH: u32 = 1 << 6;
    pub const STRING: u32 = 1 << 7;
    pub const BITMAP: u32 = 1 << 8;
    pub const HYPERLOGLOG: u32 = 1 << 9;
    pub const GEO: u32 = 1 << 10;
    pub const STREAM: u32 = 1 << 11;
    pub const PUBSUB: u32 = 1 << 12;
    pub const ADMIN: u32 = 1 << 13;
    pub const FAST: u32 = 1 << 14;
    pub const SLOW: u32 = 1 << 15;
    pub const BLOCKING: u32 = 1 << 16;
    pub const DANGEROUS: u32 = 1 << 17;
    pub const CONNECTION: u32 = 1 << 18;
    pub const TRANSACTION: u32 = 1 << 19;
    pub const SCRIPTING: u32 = 1 << 20;
}

/// ACL category names without the `@`, in `ACL CAT` order.
pub const ACL_CATEGORY_NAMES: &[(&str, u32)] = &[
    ("keyspace", acl::KEYSPACE),
    ("read", acl::READ),
    ("write", acl::WRITE),
    ("set", acl::SET),
    ("sortedset", acl::SORTEDSET),
    ("list", acl::LIST),
    ("hash", acl::HASH),
    ("string", acl::STRING),
    ("bitmap", acl::BITMAP),
    ("hyperloglog", acl::HYPERLOGLOG),
    ("geo", acl::GEO),
    ("stream", acl::STREAM),
    ("pubsub", acl::PUBSUB),
    ("admin", acl::ADMIN),
    ("fast", acl::FAST),
    ("slow", acl::SLOW),
    ("blocking", acl::BLOCKING),
    ("dangerous", acl::DANGEROUS),
    ("connection", acl::CONNECTION),
    ("transaction", acl::TRANSACTION),
    ("scripting", acl::SCRIPTING),
];

/// One command or subcommand, as `COMMAND INFO` describes it.
#[derive(Debug)]
pub struct CommandSpec {
    /// Lowercase full name as Redis reports it: `get`, `config|get`.
    pub name: &'static str,
    /// Positive: exactly this many arguments (name included); negative: at least `-arity`.
    pub arity: i32,
    /// `flag::*` bits.
    pub flags: u32,
    /// `acl::*` bits.
    pub acl_categories: u32,
    pub key_specs: &'static [KeySpec],
    /// Sorted by name; empty unless this is a container command (`CONFIG`, `CLIENT`, ...).
    pub subcommands: &'static [CommandSpec],
    /// The key finder Redis uses where the key specs cannot say.
    pub keys_proc: KeysProc,
    /// The raw `COMMAND INFO` entry. A container's subcommands are sorted by name: Redis lists them in a
    /// per-process random order, so no fixed order could match every server.
    pub info: RawReply,
    /// The raw name + docs pair of a `COMMAND DOCS` reply, subcommands sorted likewise.
    pub docs: RawReply,
}

/// Bytes of a reply exactly as redis-server sends them in each protocol: RESP2, and RESP3 after `HELLO 3` (where
/// flags are sets, key specs and docs maps, ...). Both are captured from a live server, never converted.
#[derive(Debug, Clone, Copy)]
pub struct RawReply {
    pub resp2: &'static [u8],
    pub resp3: &'static [u8],
}

impl RawReply {
    /// The bytes for a connection speaking `protocol`.
    pub fn get(&self, protocol: Protocol) -> &'static [u8] {
        match protocol {
            Protocol::Resp2 => self.resp2,
            Protocol::Resp3 => self.resp3,
        }
    }

    /// `resp2[start2..end2]` and `resp3[start3..end3]`, at compile time (a range out of bounds fails the build).
    pub(super) const fn slice(
        self,
        start2: usize,
        end2: usize,
        start3: usize,
        end3: usize,
    ) -> RawReply {
        RawReply {
            resp2: self.resp2.split_at(end2).0.split_at(start2).1,
            resp3: self.resp3.split_at(end3).0.split_at(start3).1,
        }
    }
}

/// Where a key spec's keys are, Redis' `keySpec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySpec {
    /// `key_flag::*` bits.
    pub flags: u16,
    pub begin: BeginSearch,
    pub find: FindKeys,
}

/// Where the search for a spec's first key starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeginSearch {
    /// At this argument index.
    Index(i32),
    /// After the first argument equal (case-insensitively) to `keyword`, searching from `startfrom` (negative:
    /// from the end, backwards).
    Keyword {
        keyword: &'static str,
        startfrom: i32,
    },
    /// Cannot be told from the arguments (`SORT ... STORE`): the command's `KeysProc` decides.
    Unknown,
}

/// Which arguments from the first key on are keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FindKeys {
    /// `lastkey` relative to the first key (negative: from the end); with a `limit`, only `1/limit` of the rest.
    Range {
        lastkey: i32,
        keystep: i32,
        limit: i32,
    },
    /// The argument at `keynumidx` (relative to the first key) says how many keys follow from `firstkey`.
    Keynum {
        keynumidx: i32,
        firstkey: i32,
        keystep: i32,
    },
    Unknown,
}

/// Redis' per-command `getkeys_proc`, used when the key specs are incomplete, have variable flags or do not
/// match the arguments (exactly when Redis uses it, so `COMMAND GETKEYS` answers the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeysProc {
    None,
    /// `genericGetKeys`: `numkeys` keys from `first`, then the destination at `store` (0: none).
    Generic {
        store: u8,
        numkeys: u8,
        first: u8,
    },
    Sort,
    SortRo,
    Migrate,
    Georadius,
    Xread,
    Set,
    Bitfield,
}

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

/// What C string functions (`%s`, `strcasecmp`, `atoi`) see of an argument: the bytes before the first NUL.
pub(crate) fn c_str(bytes: &[u8]) -> &[u8] {
    bytes
        .iter()
        .position(|&b| b == 0)
        .map_or(bytes, |nul| &bytes[..nul])
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
static NEWER_SUBCOMMANDS: &[CommandSpec] = &[CommandSpec {
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
/// commands without subcommands are remembered (for the others the second argument decides), each with one
/// property of theirs that the connection asks about on every request (`mark`), computed once.
pub struct LookupCache {
    entries: [Cached; CACHED_COMMANDS],
    /// The entry the next miss replaces (round robin).
    next: usize,
    mark: fn(&CommandSpec) -> bool,
}

#[derive(Clone, Copy, Default)]
struct Cached {
    name: [u8; CACHED_NAME],
    len: usize,
    spec: Option<(&'static CommandSpec, bool)>,
}

const CACHED_COMMANDS: usize = 4;
const CACHED_NAME: usize = 16;

impl LookupCache {
    pub fn new(mark: fn(&CommandSpec) -> bool) -> LookupCache {
        LookupCache {
            entries: [Cached::default(); CACHED_COMMANDS],
            next: 0,
            mark,
        }
    }

    /// The remembered command named `name`, and its mark.
    #[inline]
    fn find(&self, name: &[u8]) -> Option<(&'static CommandSpec, bool)> {
        self.entries
            .iter()
            .find(|entry| name == &entry.name[..entry.len])?
            .spec
    }

    /// The remembered command and its mark, if the client named it again (`name`, with `args` arguments in all)
    /// with a number of arguments its arity admits. Asked for every request on the direct path: inlined there.
    #[inline]
    pub fn cached(&self, name: &[u8], args: usize) -> Option<(&'static CommandSpec, bool)> {
        self.find(name).filter(|(spec, _)| spec.arity_ok(args))
    }

    /// [`lookup`], remembering the answer for the next requests.
    pub fn lookup(&mut self, args: &[Bytes]) -> Result<&'static CommandSpec, CommandError> {
        let name = args.first().map_or(&[][..], |name| &name[..]);
        if let Some((spec, _)) = self.find(name) {
            return if spec.arity_ok(args.len()) {
                Ok(spec)
            } else {
                Err(CommandError::WrongArity { name: spec.name })
            };
        }
        let spec = lookup(args)?;
        if spec.subcommands.is_empty() && !spec.name.contains('|') && name.len() <= CACHED_NAME {
            let entry = &mut self.entries[self.next];
            entry.name[..name.len()].copy_from_slice(name);
            entry.len = name.len();
            entry.spec = Some((spec, (self.mark)(spec)));
            self.next = (self.next + 1) % CACHED_COMMANDS;
        }
        Ok(spec)
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

/// `XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold] [LIMIT count] id field value...` (options in any order,
/// as Redis parses them) with an explicit `id` (not `*` or `ms-*`, which the node generates) and no approximate
/// (`~`) trimming, whose cut depends on the node's internal layout.
fn xadd_is_deterministic(args: &[Bytes]) -> bool {
    let mut i = 2;
    while let Some(arg) = args.get(i) {
        match &arg.to_ascii_uppercase()[..] {
            b"NOMKSTREAM" => i += 1,
            b"MAXLEN" | b"MINID" => match args.get(i + 1).map(|a| &a[..]) {
                Some(b"~") => return false,
                Some(b"=") => i += 3,
                _ => i += 2,
            },
            b"LIMIT" => i += 2,
            _ => break,
        }
    }
    args.get(i)
        .is_some_and(|id| !id.is_empty() && &id[..] != b"*" && !id.ends_with(b"-*"))
}

/// A key found, as the caller wants it: one extraction serves both `key_indices` (positions only) and
/// `COMMAND GETKEYSANDFLAGS` (positions and flags).
trait FoundKey {
    fn new(index: usize, flags: u16) -> Self;
}

impl FoundKey for usize {
    fn new(index: usize, _flags: u16) -> usize {
        index
    }
}

impl FoundKey for (usize, u16) {
    fn new(index: usize, flags: u16) -> (usize, u16) {
        (index, flags)
    }
}

impl CommandSpec {
    /// Whether every bit of `flag` (`flag::*`) is set.
    /// The name as people write it in error messages: `CONFIG SET` for `config|set`.
    pub fn display_name(&self) -> String {
        self.name.replace('|', " ").to_uppercase()
    }

    pub fn has(&self, flag: u32) -> bool {
        self.flags & flag == flag
    }

    /// Whether this is one of the (un)subscribe commands.
    pub fn is_subscription(&self) -> bool {
        self.has(flag::PUBSUB) && self.name.ends_with("subscribe")
    }

    /// Whether running this command on two identical copies may leave them different (so it cannot be
    /// double-written): the writes Redis marks `nondeterministic_output`, except an `XADD` that names its entry ID
    /// and trims exactly, which every copy applies alike.
    pub fn random_effect(&self, args: &[Bytes]) -> bool {
        self.has(flag::NONDETERMINISTIC) && !(self.name == "xadd" && xadd_is_deterministic(args))
    }

    /// Whether the command's one key is its first argument, whatever the others are (`GET k`, `SET k v ...`,
    /// `HSET k f v ...`): then the key is known without looking for it. Where the spec's flags depend on the
    /// arguments (`SET ... GET`), Redis reads them from the command's own key finder, which finds the same key.
    pub fn key_is_first_argument(&self) -> bool {
        matches!(
            self.key_specs,
            [KeySpec {
                flags,
                begin: BeginSearch::Index(1),
                find: FindKeys::Range { lastkey: 0, .. },
            }] if flags & (key_flag::NOT_KEY | key_flag::INCOMPLETE) == 0
        )
    }

    /// Whether `argc` arguments (the name included) satisfy the arity.
    pub fn arity_ok(&self, argc: usize) -> bool {
        let argc = i64::try_from(argc).unwrap_or(i64::MAX);
        let arity = i64::from(self.arity);
        if arity > 0 {
            argc == arity
        } else {
            argc >= -arity
        }
    }

    /// Whether the command can have keys at all (Redis' `doesCommandHaveKeys`): `COMMAND GETKEYS` refuses the
    /// others with "The command has no key arguments".
    pub fn takes_keys(&self) -> bool {
        self.keys_proc != KeysProc::None
            || self
                .key_specs
                .iter()
                .any(|spec| spec.flags & key_flag::NOT_KEY == 0)
    }

    /// Replaces `out` with the indices into `args` (`args[0]` is the command name) of every key, in the order
    /// `COMMAND GETKEYS` lists them (for arguments that passed `lookup`'s arity check; without it the answer may
    /// differ from Redis', but every index is still inside `args`). Never panics, whatever the arguments. Ok with
    /// no keys for commands without keys, or whose keys are optional (`EVAL s 0`); `InvalidKeyArguments` when the
    /// command needs keys but none can be found (see there). `out` is reused, so the hot path does not allocate.
    pub fn key_indices(&self, args: &[Bytes], out: &mut Vec<usize>) -> Result<(), CommandError> {
        out.clear();
        self.find_keys(args, out)
    }

    /// Like `key_indices`, with each key's `key_flag::*` bits as Redis reports them (`COMMAND GETKEYSANDFLAGS`).
    pub fn keys_and_flags(
        &self,
        args: &[Bytes],
        out: &mut Vec<(usize, u16)>,
    ) -> Result<(), CommandError> {
        out.clear();
        self.find_keys(args, out)
    }

    /// db.c `getKeysFromCommandWithSpecs`, plus `COMMAND GETKEYS`' "no keys found" check.
    fn find_keys<K: FoundKey>(&self, args: &[Bytes], out: &mut Vec<K>) -> Result<(), CommandError> {
        let any_real_spec = self
            .key_specs
            .iter()
            .any(|spec| spec.flags & key_flag::NOT_KEY == 0);
        let variable_flags = self
            .key_specs
            .iter()
            .any(|spec| spec.flags & key_flag::VARIABLE_FLAGS != 0);
        let from_specs = any_real_spec && !variable_flags && self.keys_from_specs(args, out);
        if !from_specs {
            out.clear();
            keys_from_proc(self.keys_proc, args, out);
        }
        if out.is_empty() && self.takes_keys() && !self.has(flag::NO_MANDATORY_KEYS) {
            return Err(CommandError::InvalidKeyArguments);
        }
        Ok(())
    }

    /// db.c `getKeysUsingKeySpecs`; false where Redis returns -1 (an invalid or incomplete spec).
    fn keys_from_specs<K: FoundKey>(&self, args: &[Bytes], out: &mut Vec<K>) -> bool {
        // Redis computes in C `int`; argument counts never come near i32::MAX (the decoder caps them far lower),
        // and the wrapping arithmetic below keeps absurd `numkeys` values from panicking the way C would wrap.
        let argc = i32::try_from(args.len()).unwrap_or(i32::MAX);
        for spec in self.key_specs {
            if spec.flags & key_flag::NOT_KEY != 0 {
                continue;
            }
            let first = match spec.begin {
                BeginSearch::Index(pos) => pos,
                BeginSearch::Keyword { keyword, startfrom } => {
                    match find_keyword(args, argc, keyword, startfrom) {
                        Some(first) => first,
                        None => continue,
                    }
                }
                BeginSearch::Unknown => return false,
            };
            let (first, last, step) = match spec.find {
                FindKeys::Range {
                    lastkey,
                    keystep,
                    limit,
                } => {
                    let last = if lastkey >= 0 {
                        first.wrapping_add(lastkey)
                    } else if limit == 0 {
                        argc.wrapping_add(lastkey)
                    } else {
                        first.wrapping_add(
                            argc.wrapping_sub(first)
                                .wrapping_div(limit)
                                .wrapping_add(lastkey),
                        )
                    };
                    (first, last, keystep)
                }
                FindKeys::Keynum {
                    keynumidx,
                    firstkey,
                    keystep,
                } => {
                    if keynumidx >= argc {
                        return false;
                    }
                    let numkeys = usize::try_from(first.wrapping_add(keynumidx))
                        .ok()
                        .and_then(|i| args.get(i))
                        .and_then(|arg| crate::resp::parse_int(arg))
                        .filter(|&n| n >= 0);
                    let Some(numkeys) = numkeys else {
                        return false;
                    };
                    let first = first.wrapping_add(firstkey);
                    // `(int)numkeys` in Redis: truncation, not saturation.
                    (
                        first,
                        first.wrapping_add(numkeys as i32).wrapping_sub(1),
                        keystep,
                    )
                }
                FindKeys::Unknown => return false,
            };
            if last >= argc || last < first || first >= argc || first < 0 {
                return false;
            }
            // `first..=last` is within the arguments here; a zero step would loop forever in Redis, never here.
            let mut i = first;
            while i <= last {
                out.push(K::new(i as usize, spec.flags));
                i = i.saturating_add(step.max(1));
            }
            if spec.flags & key_flag::INCOMPLETE != 0 {
                return false;
            }
        }
        true
    }
}

/// The index after `keyword`, searched as Redis does: from `startfrom` forwards to the end, or from
/// `argc + startfrom` backwards; the loop's last index (`argc - 1`, or 1) is never compared, as in Redis.
fn find_keyword(args: &[Bytes], argc: i32, keyword: &str, startfrom: i32) -> Option<i32> {
    let (start, end) = if startfrom > 0 {
        (startfrom, argc - 1)
    } else {
        (argc.wrapping_add(startfrom), 1)
    };
    let forward = start <= end;
    let mut i = start;
    while i != end {
        if i >= argc || i < 1 {
            break;
        }
        if args
            .get(i as usize)
            .is_some_and(|arg| c_str(arg).eq_ignore_ascii_case(keyword.as_bytes()))
        {
            return Some(i + 1);
        }
        i = if forward { i + 1 } else { i - 1 };
    }
    None
}

/// Case-insensitive comparison the way `strcasecmp` sees an argument.
fn is(arg: &[u8], word: &str) -> bool {
    c_str(arg).eq_ignore_ascii_case(word.as_bytes())
}

/// db.c's `getkeys_proc`s. Each pushes the keys Redis' function returns, with the flags it reports.
fn keys_from_proc<K: FoundKey>(proc: KeysProc, args: &[Bytes], out: &mut Vec<K>) {
    let argc = args.len();
    let arg = |i: usize| args.get(i).map_or(&[][..], |a| &a[..]);
    // Redis' procs rely on the arity check; this keeps every index inside `args` even without it.
    let mut push = |index: usize, flags: u16| {
        if index < argc {
            out.push(K::new(index, flags));
        }
    };
    match proc {
        KeysProc::None => {}
        KeysProc::Generic {
            store,
            numkeys,
            first,
        } => {
            let (store, first) = (usize::from(store), usize::from(first));
            // Redis uses `atoi` here, not its strict parser: "2abc" counts as 2.
            let num = atoi(arg(usize::from(numkeys)));
            let available = argc.saturating_sub(first);
            let Ok(num) = usize::try_from(num) else {
                return;
            };
            if num < 1 || num > available {
                return;
            }
            for i in 0..num {
                push(first + i, 0);
            }
            if store != 0 {
                push(store, 0);
            }
        }
        KeysProc::SortRo => push(1, key_flag::RO | key_flag::ACCESS),
        KeysProc::Sort => {
            push(1, key_flag::RO | key_flag::ACCESS);
            let mut store = None;
            let mut i = 2;
            while i < argc {
                // Like Redis, the argument after STORE is not skipped: a destination named `limit` skips two.
                let a = arg(i);
                if is(a, "limit") {
                    i += 2;
                } else if is(a, "get") || is(a, "by") {
                    i += 1;
                } else if is(a, "store") && i + 1 < argc {
                    store = Some(i + 1);
                }
                i += 1;
            }
            if let Some(store) = store {
                push(store, key_flag::OW | key_flag::UPDATE);
            }
        }
        KeysProc::Migrate => {
            let (mut first, mut num) = (3, 1);
            if argc > 6 {
                let mut i = 6;
                while i < argc {
                    let a = arg(i);
                    if is(a, "keys") {
                        if arg(3).is_empty() {
                            first = i + 1;
                            num = argc - first;
                        } else {
                            num = 0;
                        }
                        break;
                    } else if is(a, "auth") {
                        i += 1;
                    } else if is(a, "auth2") {
                        i += 2;
                    }
                    i += 1;
                }
            }
            for i in first..first + num {
                push(i, key_flag::RW | key_flag::ACCESS | key_flag::DELETE);
            }
        }
        KeysProc::Georadius => {
            let mut stored = None;
            let mut i = 5;
            while i < argc {
                if (is(arg(i), "store") || is(arg(i), "storedist")) && i + 1 < argc {
                    stored = Some(i + 1);
                    i += 1;
                }
                i += 1;
            }
            push(1, 0);
            if let Some(stored) = stored {
                push(stored, 0);
            }
        }
        KeysProc::Xread => {
            let mut streams = None;
            let mut i = 1;
            while i < argc {
                let a = arg(i);
                if is(a, "block") || is(a, "count") {
                    i += 1;
                } else if is(a, "group") {
                    i += 2;
                } else if is(a, "streams") {
                    streams = Some(i);
                    break;
                } else if !is(a, "noack") {
                    break;
                }
                i += 1;
            }
            let Some(streams) = streams else {
                return;
            };
            let num = argc - streams - 1;
            if num == 0 || !num.is_multiple_of(2) {
                return;
            }
            for i in streams + 1..argc - num / 2 {
                push(i, 0);
            }
        }
        KeysProc::Set => {
            let get = (3..argc).any(|i| is(arg(i), "get"));
            push(
                1,
                if get {
                    key_flag::RW | key_flag::ACCESS | key_flag::UPDATE
                } else {
                    key_flag::OW | key_flag::UPDATE
                },
            );
        }
        KeysProc::Bitfield => {
            let mut readonly = true;
            let mut i = 2;
            while i < argc {
                let remaining = argc - i - 1;
                let a = arg(i);
                if is(a, "get") && remaining >= 2 {
                    i += 2;
                } else if (is(a, "set") || is(a, "incrby")) && remaining >= 3 {
                    readonly = false;
                    break;
                } else if is(a, "overflow") && remaining >= 1 {
                    i += 1;
                } else {
                    readonly = false;
                    break;
                }
                i += 1;
            }
            push(
                1,
                if readonly {
                    key_flag::RO | key_flag::ACCESS
                } else {
                    key_flag::RW | key_flag::ACCESS | key_flag::UPDATE
                },
            );
        }
    }
}

/// glibc's `atoi`: `(int) strtol(s, NULL, 10)`: leading whitespace and a sign, digits up to the first other byte,
/// saturating at the `long` range, then truncated to `int`.
fn atoi(bytes: &[u8]) -> i32 {
    let bytes = c_str(bytes);
    let start = bytes
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r'))
        .unwrap_or(bytes.len());
    let mut rest = &bytes[start..];
    let negative = rest.first() == Some(&b'-');
    if matches!(rest.first(), Some(b'-' | b'+')) {
        rest = &rest[1..];
    }
    let mut value: i64 = 0;
    for &d in rest.iter().take_while(|d| d.is_ascii_digit()) {
        let d = i64::from(d - b'0');
        value = if negative {
            value.saturating_mul(10).saturating_sub(d)
        } else {
            value.saturating_mul(10).saturating_add(d)
        };
    }
    value as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xadd_is_double_writable_only_with_an_explicit_id_and_exact_trimming() {
        let random = |words: &[&str]| {
            let args: Vec<Bytes> = words
                .iter()
                .map(|w| Bytes::copy_from_slice(w.as_bytes()))
                .collect();
            lookup(&args).unwrap().random_effect(&args)
        };
        assert!(random(&["XADD", "s", "*", "f", "v"]));
        assert!(random(&["XADD", "s", "5-*", "f", "v"]));
        assert!(random(&["XADD", "s", "MAXLEN", "~", "10", "1-1", "f", "v"]));
        assert!(random(&[
            "XADD",
            "s",
            "NOMKSTREAM",
            "MINID",
            "~",
            "0",
            "LIMIT",
            "5",
            "1-1",
            "f",
            "v"
        ]));
        assert!(!random(&["XADD", "s", "1-1", "f", "v"]));
        assert!(!random(&[
            "XADD",
            "s",
            "NOMKSTREAM",
            "maxlen",
            "=",
            "10",
            "7",
            "f",
            "v"
        ]));
        assert!(!random(&[
            "XADD",
            "s",
            "MAXLEN",
            "10",
            "NOMKSTREAM",
            "1-2",
            "f",
            "v"
        ]));
        assert!(random(&["SPOP", "s"]));
        assert!(!random(&["SET", "k", "v"]));
    }

    #[test]
    fn a_first_argument_key_is_what_key_indices_finds() {
        let mut keys = Vec::new();
        let mut checked = 0;
        // Top-level commands only: those are the ones a connection's lookup cache remembers.
        for spec in commands().iter().filter(|c| c.key_is_first_argument()) {
            // The shortest call the arity admits, with room for a key.
            let argc = (spec.arity.unsigned_abs() as usize).max(2);
            let mut args = vec![Bytes::from_static(b"x"); argc];
            args[0] = Bytes::from_static(spec.name.as_bytes());
            spec.key_indices(&args, &mut keys).unwrap();
            assert_eq!(keys, [1], "{}", spec.name);
            checked += 1;
        }
        assert!(checked > 100, "{checked}");
        let get = lookup_by_name(b"get").unwrap();
        assert!(
            get.key_is_first_argument() && lookup_by_name(b"set").unwrap().key_is_first_argument()
        );
        assert!(!lookup_by_name(b"mget").unwrap().key_is_first_argument());
        assert!(!lookup_by_name(b"eval").unwrap().key_is_first_argument());
    }

    #[test]
    fn the_lookup_cache_answers_as_lookup_does() {
        let args = |words: &[&str]| -> Vec<Bytes> {
            words
                .iter()
                .map(|w| Bytes::copy_from_slice(w.as_bytes()))
                .collect()
        };
        let readonly = |spec: &CommandSpec| spec.has(flag::READONLY);
        let mut cache = LookupCache::new(readonly);
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
            // A hit says what lookup says, with the command's mark.
            if let Some((spec, mark)) = cache.cached(&args[0], args.len()) {
                assert_eq!(Ok(spec.name), expected, "{words:?}");
                assert_eq!(mark, readonly(spec), "{words:?}");
            }
            let cached = cache
                .lookup(&args)
                .map(|spec| spec.name)
                .map_err(|e| format!("{e:?}"));
            assert_eq!(cached, expected, "{words:?}");
        }
        // A pipeline alternating a few commands finds each of them remembered.
        let mut cache = LookupCache::new(readonly);
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
    use proptest::prelude::*;

    fn args(words: &[&str]) -> Vec<Bytes> {
        words
            .iter()
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect()
    }

    fn keys(words: &[&str]) -> Result<Vec<String>, CommandError> {
        let args = args(words);
        let spec = lookup(&args)?;
        let mut out = Vec::new();
        spec.key_indices(&args, &mut out)?;
        Ok(out.iter().map(|&i| words[i].to_string()).collect())
    }

    fn err(words: &[&str]) -> String {
        lookup(&args(words)).unwrap_err().to_string()
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

    #[test]
    fn keys_of_ordinary_commands() {
        assert_eq!(keys(&["get", "k"]).unwrap(), ["k"]);
        assert_eq!(keys(&["mset", "a", "1", "b", "2"]).unwrap(), ["a", "b"]);
        assert_eq!(keys(&["mget", "a", "b", "c"]).unwrap(), ["a", "b", "c"]);
        assert_eq!(keys(&["del", "a", "b"]).unwrap(), ["a", "b"]);
        assert_eq!(keys(&["rename", "a", "b"]).unwrap(), ["a", "b"]);
        assert_eq!(keys(&["blpop", "a", "b", "0"]).unwrap(), ["a", "b"]);
        assert_eq!(keys(&["ping"]).unwrap(), Vec::<String>::new());
        assert_eq!(keys(&["object", "encoding", "k"]).unwrap(), ["k"]);
    }

    #[test]
    fn keys_of_numkeys_commands() {
        assert_eq!(
            keys(&["eval", "s", "2", "a", "b", "x"]).unwrap(),
            ["a", "b"]
        );
        assert_eq!(
            keys(&["eval", "s", "0", "x"]).unwrap(),
            Vec::<String>::new()
        );
        // Too many, negative or unparsable: no keys, and EVAL's keys are optional.
        assert_eq!(
            keys(&["eval", "s", "5", "a"]).unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(
            keys(&["eval", "s", "-1", "a"]).unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(keys(&["fcall", "f", "1", "a"]).unwrap(), ["a"]);
        assert_eq!(
            keys(&["zunionstore", "d", "2", "a", "b", "WEIGHTS", "1", "2"]).unwrap(),
            ["d", "a", "b"]
        );
        // Redis' fallback uses atoi and lists the destination last.
        assert_eq!(
            keys(&["zunionstore", "d", "2abc", "a", "b"]).unwrap(),
            ["a", "b", "d"]
        );
        assert_eq!(
            keys(&["zunionstore", "d", "0", "a"]),
            Err(CommandError::InvalidKeyArguments)
        );
        assert_eq!(keys(&["zunion", "2", "a", "b"]).unwrap(), ["a", "b"]);
        assert_eq!(keys(&["lmpop", "2", "a", "b", "LEFT"]).unwrap(), ["a", "b"]);
        assert_eq!(
            keys(&["blmpop", "0", "2", "a", "b", "LEFT"]).unwrap(),
            ["a", "b"]
        );
        assert_eq!(keys(&["zmpop", "1", "a", "MIN"]).unwrap(), ["a"]);
        assert_eq!(keys(&["bzmpop", "0", "1", "a", "MIN"]).unwrap(), ["a"]);
        assert_eq!(keys(&["sintercard", "2", "a", "b"]).unwrap(), ["a", "b"]);
    }

    #[test]
    fn keys_after_keywords() {
        assert_eq!(
            keys(&["xread", "COUNT", "2", "STREAMS", "a", "b", "0", "0"]).unwrap(),
            ["a", "b"]
        );
        assert_eq!(keys(&["xread", "streams", "a", "0"]).unwrap(), ["a"]);
        assert_eq!(
            keys(&[
                "xreadgroup",
                "GROUP",
                "g",
                "c",
                "STREAMS",
                "a",
                "b",
                ">",
                ">"
            ])
            .unwrap(),
            ["a", "b"]
        );
        assert_eq!(
            keys(&["xread", "COUNT", "2", "a", "b"]),
            Err(CommandError::InvalidKeyArguments)
        );
        assert_eq!(
            keys(&["sort", "k", "BY", "store", "STORE", "d"]).unwrap(),
            ["k", "d"]
        );
        assert_eq!(
            keys(&["sort", "k", "STORE", "d", "STORE", "e"]).unwrap(),
            ["k", "e"]
        );
        assert_eq!(keys(&["sort_ro", "k", "BY", "x"]).unwrap(), ["k"]);
        assert_eq!(keys(&["migrate", "h", "1", "k", "0", "5"]).unwrap(), ["k"]);
        assert_eq!(
            keys(&[
                "migrate", "h", "1", "", "0", "5", "AUTH", "keys", "KEYS", "a", "b"
            ])
            .unwrap(),
            ["a", "b"]
        );
        assert_eq!(
            keys(&["georadius", "k", "1", "2", "3", "m", "STORE", "d"]).unwrap(),
            ["k", "d"]
        );
        assert_eq!(
            keys(&["georadius", "k", "1", "2", "3", "m", "STOREDIST", "d"]).unwrap(),
            ["k", "d"]
        );
        assert_eq!(
            keys(&["georadiusbymember", "k", "m", "3", "km", "STORE", "d"]).unwrap(),
            ["k", "d"]
        );
        assert_eq!(keys(&["set", "k", "v", "GET"]).unwrap(), ["k"]);
    }

    #[test]
    fn key_flags_follow_the_arguments() {
        let flags = |words: &[&str]| {
            let args = args(words);
            let mut out = Vec::new();
            lookup(&args)
                .unwrap()
                .keys_and_flags(&args, &mut out)
                .unwrap();
            out
        };
        assert_eq!(
            flags(&["set", "k", "v"]),
            [(1, key_flag::OW | key_flag::UPDATE)]
        );
        assert_eq!(
            flags(&["set", "k", "v", "get"]),
            [(1, key_flag::RW | key_flag::ACCESS | key_flag::UPDATE)]
        );
        assert_eq!(
            flags(&["bitfield", "k", "GET", "u8", "0"]),
            [(1, key_flag::RO | key_flag::ACCESS)]
        );
    }

    #[test]
    fn number_parsers_match_c() {
        assert_eq!(crate::resp::parse_int(b"12"), Some(12));
        assert_eq!(crate::resp::parse_int(b"-3"), Some(-3));
        for bad in [
            &b""[..],
            b"01",
            b"+1",
            b" 1",
            b"-0",
            b"-",
            b"1a",
            b"99999999999999999999",
        ] {
            assert_eq!(crate::resp::parse_int(bad), None, "{bad:?}");
        }
        assert_eq!(atoi(b" 12abc"), 12);
        assert_eq!(atoi(b"-7"), -7);
        assert_eq!(atoi(b"x"), 0);
        assert_eq!(atoi(b"4294967297"), 1);
        assert_eq!(atoi(b"99999999999999999999"), -1);
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

        /// Whatever the arguments, extraction never panics and only ever points inside them.
        #[test]
        fn key_extraction_never_panics(
            command in (0..COMMANDS.len()).prop_map(|i| &COMMANDS[i]),
            words in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::sample::select(vec![
                        "0", "1", "2", "3", "-1", "-2", "2147483648", "4294967297", "9999999999999999999", "abc",
                        "STREAMS", "STORE", "STOREDIST", "KEYS", "GET", "BY", "LIMIT", "AUTH", "AUTH2", "GROUP",
                        "COUNT", "BLOCK", "SET", "OVERFLOW", "", "\0",
                    ]).prop_map(String::from),
                    "[a-z0-9 ]{0,4}",
                ],
                0..12,
            ),
        ) {
            let mut all = vec![Bytes::from_static(command.name.as_bytes())];
            for sub in command.subcommands.iter().take(1) {
                all.push(Bytes::from_static(sub.name.as_bytes().rsplit(|&b| b == b'|').next().unwrap_or_default()));
            }
            all.extend(words.into_iter().map(Bytes::from));
            let mut out = Vec::new();
            if let Ok(spec) = lookup(&all) {
                let _ = spec.key_indices(&all, &mut out);
                proptest::prop_assert!(out.iter().all(|&i| i > 0 && i < all.len()));
            }
            // Without the arity check too: the session may be handed a spec by other means.
            let _ = command.key_indices(&all, &mut out);
            proptest::prop_assert!(out.iter().all(|&i| i < all.len()));
        }
    }
}
