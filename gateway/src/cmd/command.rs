//! `COMMAND` and its subcommands, answered from the command table as RESP2, byte-identical to redis-server 7.0.
//!
//! The one difference: where Redis lists every command (`COMMAND`, `COMMAND INFO`/`DOCS` without names,
//! `COMMAND LIST`) it walks its hash table, whose order changes with each server's random hash seed; the gateway
//! lists commands by name. Clients cannot rely on that order, since it differs between two Redis processes too.

use bytes::{BufMut, Bytes, BytesMut};

use super::spec::{self, ACL_CATEGORY_NAMES, CommandSpec, KEY_FLAG_NAMES};
use super::table::{DOCS, HELP, INFO, TOP_LEVEL_COUNT, TOP_LEVEL_DOCS_LEN, TOP_LEVEL_INFO_LEN};

/// Answers a `COMMAND ...` request (`args[0]` is `COMMAND`, in any case) into `out`, errors included.
pub fn reply(args: &[Bytes], out: &mut BytesMut) {
    let spec = match spec::lookup(args) {
        Ok(spec) => spec,
        Err(error) => return error.write_reply(out),
    };
    let names = args.get(2..).unwrap_or_default();
    match spec.name {
        "command" => all_info(out),
        "command|count" => integer(out, TOP_LEVEL_COUNT),
        "command|info" if names.is_empty() => all_info(out),
        "command|info" => {
            array_len(out, names.len());
            for name in names {
                match spec::lookup_by_name(name) {
                    Some(spec) => out.put_slice(spec.info),
                    // `addReplyNull`: a null bulk string in RESP2.
                    None => out.put_slice(b"$-1\r\n"),
                }
            }
        }
        "command|docs" if names.is_empty() => {
            array_len(out, 2 * TOP_LEVEL_COUNT);
            out.put_slice(DOCS.get(..TOP_LEVEL_DOCS_LEN).unwrap_or_default());
        }
        "command|docs" => {
            // Unknown names are left out of the (RESP2-flattened) map.
            let found = || names.iter().filter_map(|name| spec::lookup_by_name(name));
            array_len(out, 2 * found().count());
            for spec in found() {
                out.put_slice(spec.docs);
            }
        }
        "command|list" => list(names, out),
        "command|getkeys" => getkeys(names, false, out),
        "command|getkeysandflags" => getkeys(names, true, out),
        "command|help" => out.put_slice(HELP),
        // Not a COMMAND request at all: the caller routed it here by mistake.
        other => error(out, &format!("ERR '{other}' is not a COMMAND subcommand")),
    }
}

fn all_info(out: &mut BytesMut) {
    array_len(out, TOP_LEVEL_COUNT);
    out.put_slice(INFO.get(..TOP_LEVEL_INFO_LEN).unwrap_or_default());
}

/// `COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN pattern]`.
fn list(options: &[Bytes], out: &mut BytesMut) {
    enum Filter<'a> {
        All,
        /// The gateway has no modules, so no command belongs to one.
        Module,
        AclCategory(u32),
        Pattern(&'a [u8]),
    }
    let filter = match options {
        [] => Filter::All,
        [filterby, kind, arg] if filterby.eq_ignore_ascii_case(b"filterby") => {
            if kind.eq_ignore_ascii_case(b"module") {
                Filter::Module
            } else if kind.eq_ignore_ascii_case(b"aclcat") {
                // An unknown category matches nothing, as in Redis.
                let bits = ACL_CATEGORY_NAMES
                    .iter()
                    .find(|(name, _)| arg.eq_ignore_ascii_case(name.as_bytes()))
                    .map_or(0, |&(_, bits)| bits);
                Filter::AclCategory(bits)
            } else if kind.eq_ignore_ascii_case(b"pattern") {
                Filter::Pattern(arg)
            } else {
                return error(out, "ERR syntax error");
            }
        }
        _ => return error(out, "ERR syntax error"),
    };
    let matches = |spec: &CommandSpec| match filter {
        Filter::All => true,
        Filter::Module => false,
        Filter::AclCategory(bits) => spec.acl_categories & bits != 0,
        Filter::Pattern(pattern) => glob_match(pattern, spec.name.as_bytes(), &mut false),
    };
    let listed = || {
        spec::commands()
            .iter()
            .flat_map(|spec| std::iter::once(spec).chain(spec.subcommands))
            .filter(|spec| matches(spec))
    };
    array_len(out, listed().count());
    for spec in listed() {
        bulk(out, spec.name.as_bytes());
    }
}

/// `COMMAND GETKEYS` / `GETKEYSANDFLAGS` (server.c `getKeysSubcommandImpl`), with its checks in Redis' order.
fn getkeys(command: &[Bytes], with_flags: bool, out: &mut BytesMut) {
    let Some(spec) = spec::resolve(command) else {
        return error(out, "ERR Invalid command specified");
    };
    if !spec.takes_keys() {
        return error(out, "ERR The command has no key arguments");
    }
    if !spec.arity_ok(command.len()) {
        return error(out, "ERR Invalid number of arguments specified for command");
    }
    let mut keys = Vec::new();
    if let Err(e) = spec.keys_and_flags(command, &mut keys) {
        return e.write_reply(out);
    }
    array_len(out, keys.len());
    for (index, flags) in keys {
        let key = command.get(index).map_or(&[][..], |key| &key[..]);
        if with_flags {
            array_len(out, 2);
            bulk(out, key);
            let names = KEY_FLAG_NAMES.iter().filter(|(_, bit)| flags & bit != 0);
            array_len(out, names.clone().count());
            for (name, _) in names {
                out.put_u8(b'+');
                out.put_slice(name.as_bytes());
                out.put_slice(b"\r\n");
            }
        } else {
            bulk(out, key);
        }
    }
}

/// Redis' `stringmatchlen` with `nocase`, the glob of `COMMAND LIST FILTERBY PATTERN`, `KEYS` and `SCAN`.
/// `skip_longer` is Redis' guard against exponential backtracking on patterns like `*a*a*a*b`.
fn glob_match(mut pattern: &[u8], mut string: &[u8], skip_longer: &mut bool) -> bool {
    // C compares `char`, signed on the platforms Redis runs on, and lowercases with `tolower`.
    fn fold(byte: u8) -> i32 {
        i32::from(byte.to_ascii_lowercase() as i8)
    }
    while let (Some(&p), Some(&s)) = (pattern.first(), string.first()) {
        match p {
            b'*' => {
                while pattern.get(1) == Some(&b'*') {
                    pattern = &pattern[1..];
                }
                if pattern.len() == 1 {
                    return true;
                }
                while !string.is_empty() {
                    if glob_match(&pattern[1..], string, skip_longer) {
                        return true;
                    }
                    if *skip_longer {
                        return false;
                    }
                    string = &string[1..];
                }
                *skip_longer = true;
                return false;
            }
            b'?' => pattern = &pattern[1..],
            b'[' => {
                pattern = &pattern[1..];
                let negate = pattern.first() == Some(&b'^');
                if negate {
                    pattern = &pattern[1..];
                }
                let mut matched = false;
                loop {
                    match *pattern {
                        [b'\\', escaped, ..] => {
                            matched |= escaped == s;
                            pattern = &pattern[2..];
                        }
                        [b']', ..] => {
                            pattern = &pattern[1..];
                            break;
                        }
                        // An unterminated class ends the pattern.
                        [] => break,
                        [start, b'-', end, ..] => {
                            let (start, end) = (fold(start), fold(end));
                            let (low, high) = if start > end {
                                (end, start)
                            } else {
                                (start, end)
                            };
                            matched |= (low..=high).contains(&fold(s));
                            pattern = &pattern[3..];
                        }
                        [c, ..] => {
                            matched |= fold(c) == fold(s);
                            pattern = &pattern[1..];
                        }
                    }
                }
                if matched == negate {
                    return false;
                }
            }
            _ => {
                if p == b'\\' && pattern.len() >= 2 {
                    pattern = &pattern[1..];
                }
                if pattern.first().map(|&c| fold(c)) != Some(fold(s)) {
                    return false;
                }
                pattern = &pattern[1..];
            }
        }
        string = &string[1..];
        if string.is_empty() {
            while pattern.first() == Some(&b'*') {
                pattern = &pattern[1..];
            }
            break;
        }
    }
    pattern.is_empty() && string.is_empty()
}

fn error(out: &mut BytesMut, text: &str) {
    out.put_u8(b'-');
    out.put_slice(text.as_bytes());
    out.put_slice(b"\r\n");
}

fn integer(out: &mut BytesMut, n: usize) {
    out.put_u8(b':');
    out.put_slice(itoa::Buffer::new().format(n).as_bytes());
    out.put_slice(b"\r\n");
}

fn array_len(out: &mut BytesMut, n: usize) {
    out.put_u8(b'*');
    out.put_slice(itoa::Buffer::new().format(n).as_bytes());
    out.put_slice(b"\r\n");
}

fn bulk(out: &mut BytesMut, bytes: &[u8]) {
    out.put_u8(b'$');
    out.put_slice(itoa::Buffer::new().format(bytes.len()).as_bytes());
    out.put_slice(b"\r\n");
    out.put_slice(bytes);
    out.put_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(words: &[&str]) -> String {
        let args: Vec<Bytes> = words
            .iter()
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect();
        let mut out = BytesMut::new();
        reply(&args, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    #[test]
    fn count_info_and_errors() {
        assert_eq!(
            run(&["COMMAND", "count"]),
            format!(":{TOP_LEVEL_COUNT}\r\n")
        );
        assert!(
            run(&["command", "info", "nosuch", "GET"])
                .starts_with("*2\r\n$-1\r\n*10\r\n$3\r\nget\r\n")
        );
        assert!(
            run(&["command", "docs", "nosuch", "GET"]).starts_with("*2\r\n$3\r\nget\r\n*10\r\n")
        );
        assert_eq!(
            run(&["command", "foo"]),
            "-ERR unknown subcommand 'foo'. Try COMMAND HELP.\r\n"
        );
        assert_eq!(
            run(&["command", "getkeys", "nosuch", "x"]),
            "-ERR Invalid command specified\r\n"
        );
        assert_eq!(
            run(&["command", "getkeys", "ping", "x"]),
            "-ERR The command has no key arguments\r\n"
        );
        assert_eq!(
            run(&["command", "getkeys", "get", "a", "b"]),
            "-ERR Invalid number of arguments specified for command\r\n"
        );
        assert_eq!(
            run(&["command", "getkeysandflags", "set", "k", "v"]),
            "*1\r\n*2\r\n$1\r\nk\r\n*2\r\n+OW\r\n+update\r\n"
        );
        assert_eq!(run(&["command", "list", "x"]), "-ERR syntax error\r\n");
    }

    #[test]
    fn list_filters() {
        let configs = run(&["command", "list", "filterby", "pattern", "CONFIG*"]);
        assert!(configs.starts_with("*6\r\n$6\r\nconfig\r\n"), "{configs}");
        assert_eq!(
            run(&["command", "list", "filterby", "aclcat", "nosuch"]),
            "*0\r\n"
        );
        assert_eq!(
            run(&["command", "list", "filterby", "module", "x"]),
            "*0\r\n"
        );
    }

    #[test]
    fn glob() {
        let m = |p: &str, s: &str| glob_match(p.as_bytes(), s.as_bytes(), &mut false);
        assert!(m("*", "get"));
        assert!(m("G?T", "get"));
        assert!(m("config|*", "config|get"));
        assert!(m("[a-h]et", "get"));
        assert!(!m("[^a-h]et", "get"));
        assert!(m("g\\et", "get"));
        assert!(!m("get*x", "get"));
        assert!(m("get**", "get"));
        assert!(!m("[abc", "g"));
        assert!(m("*a*a*a*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaab"));
    }
}
