//! The command table's types: one command's spec (`CommandSpec`), its key specs, and the flag, key-flag and ACL
//! category bits with the names `COMMAND INFO` prints for them.

use bytes::Bytes;

use super::table::Command;
use crate::family::Family;
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
    /// Which command this is: what the gateway matches on (the name is for people).
    pub id: Command,
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

/// The commands that run a script or a function (which run as another ACL user: see `backend::identity`).
pub const SCRIPT_COMMANDS: &[Command] = &[
    Command::Eval,
    Command::Evalsha,
    Command::EvalRo,
    Command::EvalshaRo,
    Command::Fcall,
    Command::FcallRo,
];

/// Whether `spec` runs a script or a function.
pub fn is_script(spec: &CommandSpec) -> bool {
    SCRIPT_COMMANDS.contains(&spec.id)
}

/// What C string functions (`%s`, `strcasecmp`, `atoi`) see of an argument: the bytes before the first NUL.
pub(crate) fn c_str(bytes: &[u8]) -> &[u8] {
    bytes
        .iter()
        .position(|&b| b == 0)
        .map_or(bytes, |nul| &bytes[..nul])
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

impl CommandSpec {
    /// The name as people write it in error messages: `CONFIG SET` for `config|set`.
    pub fn display_name(&self) -> String {
        self.name.replace('|', " ").to_uppercase()
    }

    /// Whether every bit of `flag` (`flag::*`) is set.
    pub fn has(&self, flag: u32) -> bool {
        self.flags & flag == flag
    }

    /// The command's family (see `crate::family`).
    pub(crate) fn family(&self) -> Family {
        let category = |bits: u32| self.acl_categories & bits != 0;
        if category(acl::SCRIPTING) {
            Family::Script
        } else if category(acl::BLOCKING) || self.has(flag::BLOCKING) {
            Family::Blocking
        } else if category(acl::PUBSUB) {
            Family::PubSub
        } else if category(acl::TRANSACTION) {
            Family::Transaction
        } else if self.has(flag::WRITE) {
            Family::Write
        } else if self.has(flag::READONLY) {
            Family::Read
        } else {
            Family::Other
        }
    }

    /// Whether this is one of the (un)subscribe commands.
    pub fn is_subscription(&self) -> bool {
        self.has(flag::PUBSUB) && self.name.ends_with("subscribe")
    }

    /// Whether running this command on two identical copies may leave them different (so it cannot be
    /// double-written): the writes Redis marks `nondeterministic_output`, except an `XADD` that names its entry ID
    /// and trims exactly, which every copy applies alike.
    pub fn random_effect(&self, args: &[Bytes]) -> bool {
        self.has(flag::NONDETERMINISTIC)
            && !(self.id == Command::Xadd && xadd_is_deterministic(args))
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
}

#[cfg(test)]
mod tests {
    use super::CommandSpec;
    use crate::cmd::table::COMMANDS;
    use crate::family::Family;

    #[test]
    fn xadd_is_double_writable_only_with_an_explicit_id_and_exact_trimming() {
        let random = |words: &[&str]| {
            let args = crate::cmd::words(words);
            // The table itself, not `lookup` (which builds on this module): every name here is top-level.
            let spec = COMMANDS
                .iter()
                .find(|spec| spec.name.eq_ignore_ascii_case(words[0]))
                .unwrap();
            assert!(spec.arity_ok(args.len()), "{words:?}");
            spec.random_effect(&args)
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
    fn each_command_is_in_the_family_its_nature_says() {
        let family = |name: &str| {
            crate::cmd::lookup_by_name(name.to_ascii_lowercase().as_bytes())
                .map(CommandSpec::family)
        };
        for (name, expected) in [
            ("GET", Family::Read),
            ("MGET", Family::Read),
            ("SET", Family::Write),
            ("DEL", Family::Write),
            ("BLPOP", Family::Blocking),
            ("EVAL", Family::Script),
            ("FCALL", Family::Script),
            ("PUBLISH", Family::PubSub),
            ("SUBSCRIBE", Family::PubSub),
            ("MULTI", Family::Transaction),
            ("EXEC", Family::Transaction),
            ("PING", Family::Other),
            ("INFO", Family::Other),
        ] {
            assert_eq!(family(name), Some(expected), "{name}");
        }
        for (i, family) in Family::ALL.iter().enumerate() {
            assert_eq!(family.index(), i);
        }
    }
}
