//! How the gateway reads each command: the one place that says, for every command of the table, whether the
//! gateway knows every key, database and channel the command touches *as Redis executes it*, and so may forward
//! it for a tenant that shares a Redis with others ("understand or refuse").
//!
//! Key specs (what `COMMAND GETKEYS` and Redis' own ACL key patterns use) describe most commands exactly: fixed
//! positions, ranges, counted keys. For a few, execution differs: an option that may be repeated and whose last
//! occurrence wins (`SORT ... STORE`, `GEORADIUS ... STORE`, `COPY ... DB`), a keyword searched for where it may
//! also be a key or a group name (`XREADGROUP ... STREAMS`). Those commands are read by a parser that follows
//! the command's own implementation ([`parse`]), and a request is forwarded only when that reading and the key
//! specs' agree; where they do not, the request is refused, never sent as it is.
//!
//! The tables below are reviewed by hand against redis-server's sources, command by command. A command that is
//! in none of them (one a newer Redis adds to the generated table) is refused to tenants without `allow_admin`
//! until someone reads it and files it here; `every_command_is_read_or_refused` keeps the tables complete.

mod parse;

use std::collections::HashMap;
use std::sync::OnceLock;

use bytes::Bytes;

use crate::cmd::CommandSpec;

/// How the gateway reads a command's arguments.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Reading {
    /// Names no key, database or channel, and acts on nothing shared beyond what every tenant may use.
    Keyless,
    /// Touches exactly the keys its key specs find, whatever the arguments.
    Specs,
    /// Touches the keys (and names the databases) that [`parse`] finds, reading the arguments as the command's
    /// implementation does; forwarded only when the key specs find the same keys.
    Parsed(parse::Parser),
    /// Acts on or reveals every key of its database (`DBSIZE`, `SCAN`, `RANDOMKEY`): narrowed or refused for a
    /// tenant with a key namespace (`Namespace`).
    Database,
    /// Names pub/sub channels, which `Channels` renames.
    Channels,
    /// Served by the session itself (connection state, transactions, subscriptions, answered locally).
    Session,
    /// The server's, not a tenant's: administration, replication, persistence, figures of every database,
    /// operations that hold the whole server. For tenants with `allow_admin` only.
    Server,
    /// Refused to every tenant without `allow_admin`, for the reason given.
    Refused(&'static str),
}

/// Commands whose keys are exactly where their key specs say (fixed positions, ranges, `numkeys`-counted keys,
/// checked against each command's implementation).
const SPECS: &[&str] = &[
    "append",
    "bitcount",
    "bitfield",
    "bitfield_ro",
    "bitop",
    "bitpos",
    "blmove",
    "blmpop",
    "blpop",
    "brpop",
    "brpoplpush",
    "bzmpop",
    "bzpopmax",
    "bzpopmin",
    "decr",
    "decrby",
    "del",
    "dump",
    "eval",
    "eval_ro",
    "evalsha",
    "evalsha_ro",
    "exists",
    "expire",
    "expireat",
    "expiretime",
    "fcall",
    "fcall_ro",
    "geoadd",
    "geodist",
    "geohash",
    "geopos",
    "georadius_ro",
    "georadiusbymember_ro",
    "geosearch",
    "geosearchstore",
    "get",
    "getbit",
    "getdel",
    "getex",
    "getrange",
    "getset",
    "hdel",
    "hexists",
    "hget",
    "hgetall",
    "hincrby",
    "hincrbyfloat",
    "hkeys",
    "hlen",
    "hmget",
    "hmset",
    "hrandfield",
    "hscan",
    "hset",
    "hsetnx",
    "hstrlen",
    "hvals",
    "incr",
    "incrby",
    "incrbyfloat",
    "lcs",
    "lindex",
    "linsert",
    "llen",
    "lmove",
    "lmpop",
    "lpop",
    "lpos",
    "lpush",
    "lpushx",
    "lrange",
    "lrem",
    "lset",
    "ltrim",
    "memory|usage",
    "mget",
    "mset",
    "msetnx",
    "object|encoding",
    "object|freq",
    "object|idletime",
    "object|refcount",
    "persist",
    "pexpire",
    "pexpireat",
    "pexpiretime",
    "pfadd",
    "pfcount",
    "pfmerge",
    "psetex",
    "pttl",
    "rename",
    "renamenx",
    "restore",
    "rpop",
    "rpoplpush",
    "rpush",
    "rpushx",
    "sadd",
    "scard",
    "sdiff",
    "sdiffstore",
    "set",
    "setbit",
    "setex",
    "setnx",
    "setrange",
    "sinter",
    "sintercard",
    "sinterstore",
    "sismember",
    "smembers",
    "smismember",
    "smove",
    "spop",
    "srandmember",
    "srem",
    "sscan",
    "strlen",
    "substr",
    "sunion",
    "sunionstore",
    "touch",
    "ttl",
    "type",
    "unlink",
    "watch",
    "xack",
    "xadd",
    "xautoclaim",
    "xclaim",
    "xdel",
    "xgroup|create",
    "xgroup|createconsumer",
    "xgroup|delconsumer",
    "xgroup|destroy",
    "xgroup|setid",
    "xinfo|consumers",
    "xinfo|groups",
    "xinfo|stream",
    "xlen",
    "xpending",
    "xrange",
    "xrevrange",
    "xsetid",
    "xtrim",
    "zadd",
    "zcard",
    "zcount",
    "zdiff",
    "zdiffstore",
    "zincrby",
    "zinter",
    "zintercard",
    "zinterstore",
    "zlexcount",
    "zmpop",
    "zmscore",
    "zpopmax",
    "zpopmin",
    "zrandmember",
    "zrange",
    "zrangebylex",
    "zrangebyscore",
    "zrangestore",
    "zrank",
    "zrem",
    "zremrangebylex",
    "zremrangebyrank",
    "zremrangebyscore",
    "zrevrange",
    "zrevrangebylex",
    "zrevrangebyscore",
    "zrevrank",
    "zscan",
    "zscore",
    "zunion",
    "zunionstore",
];

/// Commands without keys that only answer, or act on server-wide state every tenant may use (the script cache,
/// which is addressed by content).
const KEYLESS: &[&str] = &[
    "acl|cat",
    "acl|genpass",
    "acl|help",
    "client|help",
    "cluster|help",
    "command|help",
    "config|help",
    "function|help",
    "function|list",
    "latency|help",
    "lolwut",
    "memory|help",
    "module|help",
    "object|help",
    "pubsub|help",
    "role",
    "script|exists",
    "script|help",
    "script|load",
    "slowlog|help",
    "time",
    "lastsave",
    "xgroup|help",
    "xinfo|help",
    "info",
    "config|get",
    "config|resetstat",
];

/// Commands that act on or reveal every key of the database.
const DATABASE: &[&str] = &["dbsize", "randomkey", "scan"];

/// Commands that name pub/sub channels.
const CHANNELS: &[&str] = &[
    "publish",
    "spublish",
    "subscribe",
    "psubscribe",
    "ssubscribe",
    "unsubscribe",
    "punsubscribe",
    "sunsubscribe",
    "pubsub|channels",
    "pubsub|numpat",
    "pubsub|numsub",
    "pubsub|shardchannels",
    "pubsub|shardnumsub",
];

/// Commands the session serves itself (`Policy::Local` and the stateful ones it answers on the connection).
const SESSION: &[&str] = &[
    "auth",
    "hello",
    "quit",
    "select",
    "ping",
    "echo",
    "reset",
    "multi",
    "exec",
    "discard",
    "unwatch",
    "wait",
    "monitor",
    "readonly",
    "readwrite",
    "asking",
    "command|count",
    "command|docs",
    "command|getkeys",
    "command|getkeysandflags",
    "command|info",
    "command|list",
];

/// The server's: for admins only. Besides everything with the `admin` flag (below): commands that act on every
/// database or every key at once, reach another server, or hold the whole server for as long as they like.
const SERVER: &[&str] = &[
    "flushall",
    "flushdb",
    // O(N) over the whole database in one go: a shared Redis answers nobody meanwhile. SCAN serves instead.
    "keys",
    "swapdb",
    "migrate",
    // The slot-migration form of RESTORE, which a cluster's own tools send.
    "restore-asking",
    "script|flush",
    "script|kill",
    // Function libraries are server-wide: loading one may replace another tenant's, and their code is theirs.
    "function|load",
    "function|flush",
    "function|kill",
    "function|delete",
    "function|restore",
    "function|dump",
    // The running function's name and arguments may be another tenant's.
    "function|stats",
    // Figures of every database of the server, other tenants' included, and actions on the whole server.
    "memory|stats",
    "memory|doctor",
    "memory|malloc-stats",
    "memory|purge",
];

/// Commands refused to every tenant without `allow_admin`, and why.
const REFUSED: &[(&str, &str)] = &[(
    "script|debug",
    "it turns the shared backend connection into a Lua debugger session (SYNC freezes the whole server, YES \
     forks it)",
)];

/// Commands read by a parser that follows their implementation.
const PARSED: &[(&str, parse::Parser)] = &[
    ("sort", parse::sort),
    ("sort_ro", parse::sort_ro),
    ("georadius", parse::georadius),
    ("georadiusbymember", parse::georadius_by_member),
    ("xread", parse::xread),
    ("xreadgroup", parse::xread),
    ("copy", parse::copy),
    ("move", parse::moves),
];

/// Commands that name databases, and the parser that finds where.
const DATABASES: &[(&str, parse::Parser)] = &[
    ("copy", parse::copy),
    ("move", parse::moves),
    ("swapdb", parse::swapdb),
];

/// The arguments of a request for `spec` that name a database, as Redis reads them: every one of them, where an
/// option may be repeated.
pub(crate) fn databases(spec: &CommandSpec, args: &[Bytes]) -> Vec<usize> {
    DATABASES
        .iter()
        .find(|(name, _)| *name == spec.name)
        .and_then(|(_, parse)| parse(args).ok())
        .map(|found| found.databases)
        .unwrap_or_default()
}

/// How the gateway reads `spec` (see the module's docs).
pub(crate) fn reading(spec: &CommandSpec) -> Reading {
    static READINGS: OnceLock<HashMap<usize, Reading>> = OnceLock::new();
    let readings = READINGS.get_or_init(|| {
        let mut readings = HashMap::new();
        let mut file = |names: &[&'static str], reading: Reading| {
            for name in names {
                if let Some(spec) = crate::cmd::lookup_by_name(name.as_bytes()) {
                    readings.insert(spec.name_address(), reading);
                }
            }
        };
        file(SPECS, Reading::Specs);
        file(KEYLESS, Reading::Keyless);
        file(DATABASE, Reading::Database);
        file(CHANNELS, Reading::Channels);
        file(SESSION, Reading::Session);
        file(SERVER, Reading::Server);
        for (name, why) in REFUSED {
            file(&[name], Reading::Refused(why));
        }
        for (name, parser) in PARSED {
            file(&[name], Reading::Parsed(*parser));
        }
        readings
    });
    if let Some(reading) = readings.get(&spec.name_address()) {
        return *reading;
    }
    if spec.has(crate::cmd::flag::ADMIN) {
        return Reading::Server;
    }
    match spec.name.split_once('|') {
        // Containers the session answers or refuses whole (CLIENT, CLUSTER, ACL, SLOWLOG, LATENCY).
        Some(("client" | "cluster" | "acl" | "slowlog" | "latency", _)) => Reading::Session,
        // A container without its subcommand never gets past lookup's arity check.
        _ if !spec.subcommands.is_empty() => Reading::Keyless,
        _ => Reading::Refused(NOT_READ),
    }
}

/// Why a command nobody has filed in the tables is refused.
const NOT_READ: &str = "the gateway does not know how Redis reads its arguments, so it cannot keep it to the \
                        tenant's own keys";

/// What a parser found, as Redis executes the request: the keys (indices into the arguments), and the arguments
/// that name a database.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Found {
    pub(crate) keys: Vec<usize>,
    pub(crate) databases: Vec<usize>,
}

/// Checks that the gateway reads `args` (a request for `spec`, which `tenancy::refusal` let through) as Redis
/// will execute it. `Err` is the reply: the request is refused. `namespaced`: the tenant's keys are rewritten
/// under a prefix, so every key must be found.
pub(crate) fn understand(
    spec: &CommandSpec,
    args: &[Bytes],
    namespaced: bool,
) -> Result<(), String> {
    let reading = reading(spec);
    let Reading::Parsed(parser) = reading else {
        let mut keys = Vec::new();
        if namespaced
            && matches!(reading, Reading::Specs)
            && spec.key_indices(args, &mut keys).is_err()
        {
            // Redis would refuse it too; sent as it is, no key of it would carry the namespace's prefix.
            return Err(format!(
                "ERR {} is refused by the gateway: no key can be found in its arguments, so it cannot be kept \
                 to the tenant's key namespace",
                spec.display_name()
            ));
        }
        return Ok(());
    };
    let found = parser(args).map_err(|e| e.reply(spec))?;
    let mut keys = Vec::new();
    let _ = spec.key_indices(args, &mut keys);
    keys.sort_unstable();
    let mut executed = found.keys.clone();
    executed.sort_unstable();
    if keys != executed {
        return Err(format!(
            "ERR {} is refused by the gateway: Redis would read its keys differently from its key specs (a \
             repeated option, or a key spelled like an option); send it without the ambiguity",
            spec.display_name()
        ));
    }
    Ok(())
}

/// The refusal of a command the server's administrators run.
pub(super) fn admin_only(spec: &CommandSpec) -> String {
    format!(
        "ERR {} is an admin command; this tenant may not run it (allow_admin)",
        spec.display_name()
    )
}

#[cfg(test)]
mod tests;
