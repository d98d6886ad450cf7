//! `COMMAND` and its subcommands, answered from the command table byte-identical to redis-server 7.0, in the
//! connection's protocol: RESP2, or RESP3 after `HELLO 3` (sets for flags and ACL categories, maps for key specs
//! and docs, `_` for unknown names). The table holds Redis' own bytes for both, so neither protocol converts.
//!
//! The one difference: where Redis lists every command (`COMMAND`, `COMMAND INFO`/`DOCS` without names,
//! `COMMAND LIST`) it walks its hash table, whose order changes with each server's random hash seed; the gateway
//! lists commands by name. Clients cannot rely on that order, since it differs between two Redis processes too.

use bytes::{BufMut, Bytes, BytesMut};

use super::glob::{self, Case};
use super::lookup;
use super::spec::{ACL_CATEGORY_NAMES, CommandSpec, KEY_FLAG_NAMES};
use super::table::{Command, HELP, TOP_LEVEL_COUNT, TOP_LEVEL_DOCS, TOP_LEVEL_INFO};
use crate::resp::{self, Protocol};

/// Answers a `COMMAND ...` request (`args[0]` is `COMMAND`, in any case) into `out` in `protocol`, errors
/// included.
pub fn reply(args: &[Bytes], protocol: Protocol, out: &mut BytesMut) {
    let spec = match lookup::lookup(args) {
        Ok(spec) => spec,
        Err(error) => return error.write_reply(out),
    };
    let names = args.get(2..).unwrap_or_default();
    match spec.id {
        Command::Command => all_info(protocol, out),
        Command::CommandCount => resp::integer(out, TOP_LEVEL_COUNT as i64),
        Command::CommandInfo if names.is_empty() => all_info(protocol, out),
        Command::CommandInfo => {
            resp::array_header(out, names.len());
            for name in names {
                match lookup::lookup_by_name(name) {
                    Some(spec) => out.put_slice(spec.info.get(protocol)),
                    // `addReplyNull`.
                    None => resp::null(out, protocol),
                }
            }
        }
        Command::CommandDocs if names.is_empty() => {
            resp::map_header(out, TOP_LEVEL_COUNT, protocol);
            out.put_slice(TOP_LEVEL_DOCS.get(protocol));
        }
        Command::CommandDocs => {
            // Unknown names are left out of the map.
            let found = || names.iter().filter_map(|name| lookup::lookup_by_name(name));
            resp::map_header(out, found().count(), protocol);
            for spec in found() {
                out.put_slice(spec.docs.get(protocol));
            }
        }
        Command::CommandList => list(names, out),
        Command::CommandGetkeys => getkeys(names, false, protocol, out),
        Command::CommandGetkeysandflags => getkeys(names, true, protocol, out),
        Command::CommandHelp => out.put_slice(HELP),
        // Not a COMMAND request at all: the caller routed it here by mistake.
        _ => resp::error(
            out,
            &format!("ERR '{}' is not a COMMAND subcommand", spec.name),
        ),
    }
}

fn all_info(protocol: Protocol, out: &mut BytesMut) {
    resp::array_header(out, TOP_LEVEL_COUNT);
    out.put_slice(TOP_LEVEL_INFO.get(protocol));
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
                return resp::error(out, "ERR syntax error");
            }
        }
        _ => return resp::error(out, "ERR syntax error"),
    };
    let matches = |spec: &CommandSpec| match filter {
        Filter::All => true,
        Filter::Module => false,
        Filter::AclCategory(bits) => spec.acl_categories & bits != 0,
        Filter::Pattern(pattern) => glob::matches(pattern, spec.name.as_bytes(), Case::Insensitive),
    };
    let listed = || {
        lookup::commands()
            .iter()
            .flat_map(|spec| std::iter::once(spec).chain(spec.subcommands))
            .filter(|spec| matches(spec))
    };
    resp::array_header(out, listed().count());
    for spec in listed() {
        resp::bulk(out, spec.name.as_bytes());
    }
}

/// `COMMAND GETKEYS` / `GETKEYSANDFLAGS` (server.c `getKeysSubcommandImpl`), with its checks in Redis' order.
fn getkeys(command: &[Bytes], with_flags: bool, protocol: Protocol, out: &mut BytesMut) {
    let Some(spec) = lookup::resolve(command) else {
        return resp::error(out, "ERR Invalid command specified");
    };
    if !spec.takes_keys() {
        return resp::error(out, "ERR The command has no key arguments");
    }
    if !spec.arity_ok(command.len()) {
        return resp::error(out, "ERR Invalid number of arguments specified for command");
    }
    let mut keys = Vec::new();
    if let Err(e) = spec.keys_and_flags(command, &mut keys) {
        return e.write_reply(out);
    }
    resp::array_header(out, keys.len());
    for (index, flags) in keys {
        let key = command.get(index).map_or(&[][..], |key| &key[..]);
        if with_flags {
            resp::array_header(out, 2);
            resp::bulk(out, key);
            let names = KEY_FLAG_NAMES.iter().filter(|(_, bit)| flags & bit != 0);
            resp::set_header(out, names.clone().count(), protocol);
            for (name, _) in names {
                resp::simple(out, name.as_bytes());
            }
        } else {
            resp::bulk(out, key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(words: &[&str]) -> String {
        run_in(Protocol::Resp2, words)
    }

    fn run_in(protocol: Protocol, words: &[&str]) -> String {
        let args = crate::cmd::words(words);
        let mut out = BytesMut::new();
        reply(&args, protocol, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Every entry of the table is exactly one reply in each protocol, and the top-level slices hold one per
    /// top-level command: a generator slip would show here before any client sees it.
    #[test]
    fn every_raw_reply_is_whole() {
        let one_reply = |bytes: &[u8], what: &str| {
            assert_eq!(resp::reply_len(bytes), Some(bytes.len()), "{what}");
        };
        for spec in lookup::commands()
            .iter()
            .flat_map(|spec| std::iter::once(spec).chain(spec.subcommands))
        {
            for protocol in [Protocol::Resp2, Protocol::Resp3] {
                one_reply(spec.info.get(protocol), spec.name);
                // A name, then its docs.
                let docs = spec.docs.get(protocol);
                let name = resp::reply_len(docs).unwrap_or_default();
                one_reply(&docs[name..], spec.name);
            }
        }
        for protocol in [Protocol::Resp2, Protocol::Resp3] {
            assert_eq!(
                resp::each_reply(TOP_LEVEL_INFO.get(protocol)).count(),
                TOP_LEVEL_COUNT
            );
            assert_eq!(
                resp::each_reply(TOP_LEVEL_DOCS.get(protocol)).count(),
                2 * TOP_LEVEL_COUNT
            );
        }
    }

    #[test]
    fn resp3_shapes() {
        let run3 = |words: &[&str]| run_in(Protocol::Resp3, words);
        assert!(
            run3(&["command", "info", "nosuch", "GET"])
                .starts_with("*2\r\n_\r\n*10\r\n$3\r\nget\r\n:2\r\n~2\r\n+readonly\r\n")
        );
        assert!(
            run3(&["command", "docs", "nosuch", "GET"]).starts_with("%1\r\n$3\r\nget\r\n%5\r\n")
        );
        assert_eq!(run3(&["command", "docs", "nosuch"]), "%0\r\n");
        assert!(run3(&["command", "docs"]).starts_with("%240\r\n"));
        assert!(run3(&["command"]).starts_with("*240\r\n*10\r\n"));
        assert_eq!(
            run3(&["command", "getkeysandflags", "set", "k", "v"]),
            "*1\r\n*2\r\n$1\r\nk\r\n~2\r\n+OW\r\n+update\r\n"
        );
        for same in [
            &["command", "count"][..],
            &["command", "getkeys", "mset", "a", "1", "b", "2"],
            &["command", "list", "filterby", "pattern", "config*"],
            &["command", "list", "x"],
            &["command", "help"],
        ] {
            assert_eq!(run3(same), run(same), "{same:?}");
        }
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
}
