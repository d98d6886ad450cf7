//! What a tenant may run, and how the commands that name server-wide things are narrowed to the tenant's own.
//!
//! The gateway forwards only the commands of its table (anything else is an unknown command), and a tenant
//! without `allow_admin` is refused every command with the `admin` flag and a few more that reach past its
//! database ([`refusal`]). Commands that name a database (`MOVE`, `SWAPDB`, `COPY ... DB`) may name only the
//! tenant's own, and reach the backend with the backend's numbers ([`database_arguments`]). `CONFIG GET` shows a
//! non-admin tenant only parameters that are no secret and say nothing of other tenants ([`CONFIG_VISIBLE`]).
//! Scripts, which the gateway cannot read, run as a restricted ACL user (`backend::identity`).
//! On a shared Redis, a non-admin tenant's pub/sub channels live in its own namespace ([`Channels`]).

mod channels;
mod cost;
mod namespace;
mod policies;
mod reading;

use bytes::{Bytes, BytesMut};

use crate::cmd::{Command, CommandSpec, Policy};
use crate::resp::{self, Protocol, Request};

pub(crate) use channels::Channels;
pub(crate) use cost::refusal as cost_refusal;
pub(crate) use namespace::DirectKeys;
pub(crate) use namespace::Namespace;
pub(crate) use policies::Policies;
pub(crate) use reading::{Reading, reading, understand};

/// The command's [`Policy`]: the command table's (`Policy::of`), and `Checked` where these rules look at a command
/// the table would forward untouched: one refused to some tenants, read otherwise than by its key specs
/// ([`reading`]), or whose cost to the server its arguments set ([`cost`]).
pub(crate) fn policy(spec: &CommandSpec) -> Policy {
    match Policy::of(spec) {
        Policy::Verbatim
            if cost::is_bounded(spec.id)
                || !matches!(
                    reading::reading(spec),
                    Reading::Specs | Reading::Keyless | Reading::Database
                ) =>
        {
            Policy::Checked
        }
        policy => policy,
    }
}

/// Commands that would break the shared, pipelined backend connections, that only admins may run, or that the
/// gateway does not read the way Redis executes them ([`reading`]); `None` when `spec` may run.
pub(crate) fn refusal(spec: &CommandSpec, allow_admin: bool) -> Option<String> {
    if matches!(
        spec.id,
        Command::Readonly | Command::Readwrite | Command::Asking
    ) {
        return Some(format!(
            "ERR {} is not supported by the gateway yet",
            spec.display_name()
        ));
    }
    match reading::reading(spec) {
        _ if allow_admin => None,
        Reading::Server => Some(reading::admin_only(spec)),
        Reading::Refused(why) => Some(format!(
            "ERR {} is refused by the gateway: {why}",
            spec.display_name()
        )),
        _ => None,
    }
}

/// The `CONFIG SET` parameters that hold credentials the gateway logs in with: changing one on the backend would
/// lock every gateway connection opened after it out, for every tenant of that Redis.
const CREDENTIAL_PARAMETERS: &[&str] = &["requirepass", "masterauth", "masteruser", "aclfile"];

/// A request's arguments that a tenant may not send: `FUNCTION LIST WITHCODE` shows other tenants' code (an
/// admin may), a message on a keyspace notification channel would pose as Redis' own, and `CONFIG SET` of a
/// credential ([`CREDENTIAL_PARAMETERS`]) is refused to everyone.
pub(crate) fn argument_refusal(
    spec: &CommandSpec,
    args: &[Bytes],
    allow_admin: bool,
) -> Option<String> {
    match spec.id {
        Command::FunctionList if !allow_admin => args[2..]
            .iter()
            .any(|arg| arg.eq_ignore_ascii_case(b"withcode"))
            .then(|| {
                "ERR FUNCTION LIST WITHCODE is an admin command; this tenant may not run it (allow_admin)"
                    .to_string()
            }),
        // CONFIG SET parameter value [parameter value ...]
        Command::ConfigSet => args[2..].iter().step_by(2).find_map(|name| {
            let name = String::from_utf8_lossy(name).to_ascii_lowercase();
            CREDENTIAL_PARAMETERS.contains(&name.as_str()).then(|| {
                format!(
                    "ERR CONFIG SET {name} is refused by the gateway: it logs in to the backend with these \
                     credentials; change them in the resource's URL (the control plane or the routes file)"
                )
            })
        }),
        // Only Redis publishes keyspace notifications: a tenant's message there would pose as an event of its
        // database, which tenants with a key namespace share.
        Command::Publish | Command::Spublish if !allow_admin => {
            channels::is_notification(&args[1]).then(|| {
                format!(
                    "ERR {} to a keyspace notification channel is refused by the gateway: only Redis publishes \
                     on __keyspace@ and __keyevent@ channels",
                    spec.display_name()
                )
            })
        }
        _ => None,
    }
}

/// Where a command that names databases may go: `Ok(None)` as it is, `Ok(Some(request))` rewritten with the
/// backend's database numbers (the tenant's database `i` is `base + i` of its resource), or `Err` with the
/// reply. `databases` are the tenant's (see `RoutePlan::databases`).
pub(crate) fn database_arguments(
    spec: &CommandSpec,
    request: &Request,
    databases: std::ops::Range<i64>,
    base: u32,
    sharded: bool,
) -> Result<Option<Request>, String> {
    if sharded && !reading::databases(spec, request.args()).is_empty() {
        return Err(format!(
            "ERR {} is not supported on a route with several shards: databases are per backend",
            spec.display_name()
        ));
    }
    renumber_databases(spec, request, |index| {
        if !databases.contains(&index) {
            return Err("ERR DB index is out of range".to_string());
        }
        Ok(i64::from(base) + index)
    })
}

/// `request` with every argument that names a database (every one, where an option may be repeated: see
/// `reading::databases`) numbered by `number`; `Ok(None)` when that changes nothing. An argument that is not a
/// number stays as it is: Redis refuses it with its own error, before it copies or moves anything.
pub(crate) fn renumber_databases(
    spec: &CommandSpec,
    request: &Request,
    number: impl Fn(i64) -> Result<i64, String>,
) -> Result<Option<Request>, String> {
    let args = request.args();
    let mut rewritten = args.to_vec();
    let mut changed = false;
    let mut digits = itoa::Buffer::new();
    for position in reading::databases(spec, args) {
        let Some(index) = resp::parse_int(&args[position]) else {
            continue;
        };
        let numbered = number(index)?;
        changed |= numbered != index;
        rewritten[position] = Bytes::copy_from_slice(digits.format(numbered).as_bytes());
    }
    Ok(changed.then(|| Request::from_args(rewritten)))
}

/// The `CONFIG GET` parameters a tenant without `allow_admin` sees: limits and encodings it may plan for.
/// Everything else (passwords, paths, replication and TLS settings, ...) is left out of the reply, as Redis
/// leaves out parameters it does not know.
pub(crate) const CONFIG_VISIBLE: &[&str] = &[
    "active-expire-effort",
    "activerehashing",
    "appendonly",
    "busy-reply-threshold",
    "client-query-buffer-limit",
    "cluster-enabled",
    "databases",
    "hash-max-listpack-entries",
    "hash-max-listpack-value",
    "hash-max-ziplist-entries",
    "hash-max-ziplist-value",
    "hll-sparse-max-bytes",
    "hz",
    "lazyfree-lazy-eviction",
    "lazyfree-lazy-expire",
    "lazyfree-lazy-server-del",
    "lazyfree-lazy-user-del",
    "lazyfree-lazy-user-flush",
    "lfu-decay-time",
    "lfu-log-factor",
    "list-compress-depth",
    "list-max-listpack-size",
    "list-max-ziplist-size",
    "lua-time-limit",
    "maxmemory",
    "maxmemory-policy",
    "maxmemory-samples",
    "notify-keyspace-events",
    "proto-max-bulk-len",
    "set-max-intset-entries",
    "set-max-listpack-entries",
    "set-max-listpack-value",
    "slowlog-log-slower-than",
    "slowlog-max-len",
    "stream-node-max-bytes",
    "stream-node-max-entries",
    "timeout",
    "zset-max-listpack-entries",
    "zset-max-listpack-value",
    "zset-max-ziplist-entries",
    "zset-max-ziplist-value",
];

/// A `CONFIG GET` reply (name, value, name, value...: an array, or in RESP3 a map) with only the
/// [`CONFIG_VISIBLE`] parameters. Anything else (an error) is returned as it is.
pub(crate) fn visible_config(reply: Bytes) -> Bytes {
    let map = reply.starts_with(b"%");
    let Some(elements) = aggregate_elements(&reply) else {
        return reply;
    };
    let mut kept = Vec::new();
    for pair in elements.chunks_exact(2) {
        let name = bulk_content(pair[0]);
        if name.is_some_and(|name| CONFIG_VISIBLE.iter().any(|v| v.as_bytes() == name)) {
            kept.extend_from_slice(pair);
        }
    }
    let mut out = BytesMut::new();
    let protocol = if map {
        Protocol::Resp3
    } else {
        Protocol::Resp2
    };
    resp::map_header(&mut out, kept.len() / 2, protocol);
    for element in kept {
        out.extend_from_slice(element);
    }
    out.freeze()
}

/// The elements of an array, or of a map (keys and values in turn), each a complete reply.
fn aggregate_elements(reply: &[u8]) -> Option<Vec<&[u8]>> {
    if !(reply.starts_with(b"*") || reply.starts_with(b"%")) {
        return None;
    }
    resp_elements(reply)
}

/// The elements after an aggregate's header line.
fn resp_elements(reply: &[u8]) -> Option<Vec<&[u8]>> {
    let header = reply.iter().position(|&b| b == b'\n')? + 1;
    Some(resp::each_reply(&reply[header..]).collect())
}

/// The content of a bulk string reply.
fn bulk_content(element: &[u8]) -> Option<&[u8]> {
    if !element.starts_with(b"$") {
        return None;
    }
    let start = element.iter().position(|&b| b == b'\n')? + 1;
    element.get(start..element.len().checked_sub(2)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(args: &[&str]) -> (&'static CommandSpec, Request) {
        let args = crate::cmd::words(args);
        let spec = crate::cmd::resolve(&args).unwrap();
        (spec, Request::from_args(args))
    }

    fn rewrite(
        args: &[&str],
        databases: std::ops::Range<i64>,
        base: u32,
    ) -> Result<Option<Vec<String>>, String> {
        let (spec, request) = request(args);
        database_arguments(spec, &request, databases, base, false).map(|r| {
            r.map(|r| {
                r.args()
                    .iter()
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect()
            })
        })
    }

    #[test]
    fn every_command_has_the_policy_its_path_expects() {
        let policy_of = |name: &str| policy(crate::cmd::lookup_by_name(name.as_bytes()).unwrap());
        for name in [
            "ping",
            "echo",
            "select",
            "auth",
            "hello",
            "quit",
            "command",
            "command|docs",
            "client|list",
            "client|kill",
            "cluster|info",
            "acl|whoami",
            "acl|setuser",
            "slowlog|get",
            "readonly",
            "monitor",
        ] {
            assert_eq!(policy_of(name), Policy::Local, "{name}");
        }
        for name in [
            "multi",
            "exec",
            "watch",
            "reset",
            "subscribe",
            "ssubscribe",
            "publish",
            "blpop",
            "xread",
            "wait",
            "pubsub|channels",
        ] {
            assert_eq!(policy_of(name), Policy::Stateful, "{name}");
        }
        for name in [
            "info",
            "flushall",
            "move",
            "swapdb",
            "copy",
            "eval",
            "fcall_ro",
            "config|get",
            "acl|cat",
            "keys",
            "flushdb",
            "migrate",
            "debug",
            "setbit",
            "srandmember",
        ] {
            assert_eq!(policy_of(name), Policy::Checked, "{name}");
        }
        for name in [
            "get", "set", "mget", "mset", "del", "incr", "hgetall", "xadd", "lpop", "scan",
            "dbsize",
        ] {
            assert_eq!(policy_of(name), Policy::Verbatim, "{name}");
        }
    }

    /// What a tenant may be refused is never forwarded untouched.
    #[test]
    fn verbatim_commands_are_refused_to_no_tenant() {
        let every = crate::cmd::commands()
            .iter()
            .flat_map(|spec| std::iter::once(spec).chain(spec.subcommands));
        for spec in every.filter(|spec| policy(spec) == Policy::Verbatim) {
            assert_eq!(refusal(spec, false), None, "{}", spec.name);
        }
    }

    #[test]
    fn databases_are_the_tenants_own_and_numbered_from_its_resource() {
        let out_of_range = Err("ERR DB index is out of range".to_string());
        assert_eq!(rewrite(&["MOVE", "k", "1"], 0..1, 2), out_of_range);
        assert_eq!(rewrite(&["MOVE", "k", "-1"], 0..1, 2), out_of_range);
        assert_eq!(
            rewrite(&["COPY", "a", "b", "DB", "3"], 0..1, 2),
            out_of_range
        );
        assert_eq!(
            rewrite(&["COPY", "a", "b", "REPLACE", "db", "7"], 0..1, 0),
            out_of_range
        );
        assert_eq!(
            rewrite(&["MOVE", "k", "0"], 0..1, 2),
            Ok(Some(vec!["MOVE".into(), "k".into(), "2".into()]))
        );
        assert_eq!(
            rewrite(&["SWAPDB", "0", "1"], 0..2, 4),
            Ok(Some(vec!["SWAPDB".into(), "4".into(), "5".into()]))
        );
        // Numbered as the backend numbers them already, or naming no database: as they are.
        assert_eq!(rewrite(&["MOVE", "k", "3"], 0..16, 0), Ok(None));
        assert_eq!(rewrite(&["COPY", "a", "b"], 0..1, 2), Ok(None));
        assert_eq!(rewrite(&["COPY", "a", "b", "REPLACE"], 0..1, 2), Ok(None));
        // A key named "db" is not the option.
        assert_eq!(rewrite(&["COPY", "db", "b"], 0..1, 2), Ok(None));
        // Not a number: Redis' own error.
        assert_eq!(rewrite(&["MOVE", "k", "x"], 0..1, 2), Ok(None));
    }

    #[test]
    fn admin_commands_and_server_wide_state_are_refused_to_tenants() {
        let spec = |name: &str| crate::cmd::lookup_by_name(name.as_bytes()).unwrap();
        for name in [
            "config|set",
            "debug",
            "shutdown",
            "replicaof",
            "acl|setuser",
            "migrate",
            "flushall",
            "function|load",
            "function|dump",
            "function|restore",
            "function|stats",
            "memory|stats",
            "script|flush",
        ] {
            assert!(refusal(spec(name), false).is_some(), "{name}");
            assert!(refusal(spec(name), true).is_none(), "{name}");
        }
        for name in [
            "get",
            "config|get",
            "function|list",
            "fcall",
            "eval",
            "copy",
            "move",
        ] {
            assert!(refusal(spec(name), false).is_none(), "{name}");
        }
        let (list, withcode) = request(&["FUNCTION", "LIST", "WITHCODE"]);
        assert!(argument_refusal(list, withcode.args(), false).is_some());
        assert!(argument_refusal(list, withcode.args(), true).is_none());
        let (list, named) = request(&["FUNCTION", "LIST", "LIBRARYNAME", "x"]);
        assert!(argument_refusal(list, named.args(), false).is_none());
        // Credentials the gateway logs in with are nobody's to change through it, an admin's neither.
        for args in [
            &["CONFIG", "SET", "requirepass", "x"][..],
            &["config", "set", "maxmemory", "1mb", "MasterAuth", "x"],
        ] {
            let (set, request) = request(args);
            assert!(
                argument_refusal(set, request.args(), true).is_some(),
                "{args:?}"
            );
        }
        for channel in ["__keyspace@0__:victim", "__keyevent@3__:del"] {
            let (publish, forged) = request(&["PUBLISH", channel, "x"]);
            assert!(argument_refusal(publish, forged.args(), false).is_some());
            assert!(argument_refusal(publish, forged.args(), true).is_none());
        }
        let (publish, news) = request(&["SPUBLISH", "news", "x"]);
        assert!(argument_refusal(publish, news.args(), false).is_none());
        let (set, request) = request(&["CONFIG", "SET", "maxmemory-policy", "requirepass"]);
        assert!(argument_refusal(set, request.args(), true).is_none());
    }

    #[test]
    fn config_replies_keep_only_visible_parameters() {
        let reply = Bytes::from_static(
            b"*6\r\n$11\r\nrequirepass\r\n$6\r\nsecret\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n$3\r\ndir\r\n$4\r\n/var\r\n",
        );
        assert_eq!(
            &visible_config(reply)[..],
            b"*2\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n"
        );
        let map =
            Bytes::from_static(b"%2\r\n$10\r\nmasterauth\r\n$1\r\nx\r\n$7\r\ntimeout\r\n:0\r\n");
        assert_eq!(&visible_config(map)[..], b"%1\r\n$7\r\ntimeout\r\n:0\r\n");
        let error = Bytes::from_static(b"-ERR wrong\r\n");
        assert_eq!(visible_config(error.clone()), error);
        assert_eq!(
            &visible_config(Bytes::from_static(b"*0\r\n"))[..],
            b"*0\r\n"
        );
    }
}
