//! Which arguments of a request are keys, exactly as `COMMAND GETKEYS` says (db.c `getKeysFromCommandWithSpecs`):
//! the command's key specs first, its `getkeys_proc` (`keys_proc`) where the specs cannot say.

use bytes::Bytes;

use super::keys_proc::{FoundKey, keys_from_proc};
use super::lookup::CommandError;
use super::spec::{BeginSearch, CommandSpec, FindKeys, c_str, flag, key_flag};

impl CommandSpec {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::lookup::{commands, lookup, lookup_by_name};
    use crate::cmd::table::COMMANDS;
    use proptest::prelude::*;

    use crate::cmd::words as args;

    fn keys(words: &[&str]) -> Result<Vec<String>, CommandError> {
        let args = args(words);
        let spec = lookup(&args)?;
        let mut out = Vec::new();
        spec.key_indices(&args, &mut out)?;
        Ok(out.iter().map(|&i| words[i].to_string()).collect())
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

    proptest::proptest! {
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
