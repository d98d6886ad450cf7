//! Redis' per-command key finders (db.c's `getkeys_proc`s), for the commands whose key specs are incomplete,
//! have variable flags or do not match the arguments.

use bytes::Bytes;

use super::spec::{KeysProc, c_str, key_flag};

/// A key found, as the caller wants it: one extraction serves both `key_indices` (positions only) and
/// `COMMAND GETKEYSANDFLAGS` (positions and flags).
pub(super) trait FoundKey {
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

/// Case-insensitive comparison the way `strcasecmp` sees an argument.
fn is(arg: &[u8], word: &str) -> bool {
    c_str(arg).eq_ignore_ascii_case(word.as_bytes())
}

/// db.c's `getkeys_proc`s. Each pushes the keys Redis' function returns, with the flags it reports.
pub(super) fn keys_from_proc<K: FoundKey>(proc: KeysProc, args: &[Bytes], out: &mut Vec<K>) {
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
}
