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

use std::sync::OnceLock;

use bytes::Bytes;

use crate::cmd::{Command, CommandSpec};

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
const SPECS: &[Command] = &[
    Command::Append,
    Command::Bitcount,
    Command::Bitfield,
    Command::BitfieldRo,
    Command::Bitop,
    Command::Bitpos,
    Command::Blmove,
    Command::Blmpop,
    Command::Blpop,
    Command::Brpop,
    Command::Brpoplpush,
    Command::Bzmpop,
    Command::Bzpopmax,
    Command::Bzpopmin,
    Command::Decr,
    Command::Decrby,
    Command::Del,
    Command::Dump,
    Command::Eval,
    Command::EvalRo,
    Command::Evalsha,
    Command::EvalshaRo,
    Command::Exists,
    Command::Expire,
    Command::Expireat,
    Command::Expiretime,
    Command::Fcall,
    Command::FcallRo,
    Command::Geoadd,
    Command::Geodist,
    Command::Geohash,
    Command::Geopos,
    Command::GeoradiusRo,
    Command::GeoradiusbymemberRo,
    Command::Geosearch,
    Command::Geosearchstore,
    Command::Get,
    Command::Getbit,
    Command::Getdel,
    Command::Getex,
    Command::Getrange,
    Command::Getset,
    Command::Hdel,
    Command::Hexists,
    Command::Hget,
    Command::Hgetall,
    Command::Hincrby,
    Command::Hincrbyfloat,
    Command::Hkeys,
    Command::Hlen,
    Command::Hmget,
    Command::Hmset,
    Command::Hrandfield,
    Command::Hscan,
    Command::Hset,
    Command::Hsetnx,
    Command::Hstrlen,
    Command::Hvals,
    Command::Incr,
    Command::Incrby,
    Command::Incrbyfloat,
    Command::Lcs,
    Command::Lindex,
    Command::Linsert,
    Command::Llen,
    Command::Lmove,
    Command::Lmpop,
    Command::Lpop,
    Command::Lpos,
    Command::Lpush,
    Command::Lpushx,
    Command::Lrange,
    Command::Lrem,
    Command::Lset,
    Command::Ltrim,
    Command::MemoryUsage,
    Command::Mget,
    Command::Mset,
    Command::Msetnx,
    Command::ObjectEncoding,
    Command::ObjectFreq,
    Command::ObjectIdletime,
    Command::ObjectRefcount,
    Command::Persist,
    Command::Pexpire,
    Command::Pexpireat,
    Command::Pexpiretime,
    Command::Pfadd,
    Command::Pfcount,
    Command::Pfmerge,
    Command::Psetex,
    Command::Pttl,
    Command::Rename,
    Command::Renamenx,
    Command::Restore,
    Command::Rpop,
    Command::Rpoplpush,
    Command::Rpush,
    Command::Rpushx,
    Command::Sadd,
    Command::Scard,
    Command::Sdiff,
    Command::Sdiffstore,
    Command::Set,
    Command::Setbit,
    Command::Setex,
    Command::Setnx,
    Command::Setrange,
    Command::Sinter,
    Command::Sintercard,
    Command::Sinterstore,
    Command::Sismember,
    Command::Smembers,
    Command::Smismember,
    Command::Smove,
    Command::Spop,
    Command::Srandmember,
    Command::Srem,
    Command::Sscan,
    Command::Strlen,
    Command::Substr,
    Command::Sunion,
    Command::Sunionstore,
    Command::Touch,
    Command::Ttl,
    Command::Type,
    Command::Unlink,
    Command::Watch,
    Command::Xack,
    Command::Xadd,
    Command::Xautoclaim,
    Command::Xclaim,
    Command::Xdel,
    Command::XgroupCreate,
    Command::XgroupCreateconsumer,
    Command::XgroupDelconsumer,
    Command::XgroupDestroy,
    Command::XgroupSetid,
    Command::XinfoConsumers,
    Command::XinfoGroups,
    Command::XinfoStream,
    Command::Xlen,
    Command::Xpending,
    Command::Xrange,
    Command::Xrevrange,
    Command::Xsetid,
    Command::Xtrim,
    Command::Zadd,
    Command::Zcard,
    Command::Zcount,
    Command::Zdiff,
    Command::Zdiffstore,
    Command::Zincrby,
    Command::Zinter,
    Command::Zintercard,
    Command::Zinterstore,
    Command::Zlexcount,
    Command::Zmpop,
    Command::Zmscore,
    Command::Zpopmax,
    Command::Zpopmin,
    Command::Zrandmember,
    Command::Zrange,
    Command::Zrangebylex,
    Command::Zrangebyscore,
    Command::Zrangestore,
    Command::Zrank,
    Command::Zrem,
    Command::Zremrangebylex,
    Command::Zremrangebyrank,
    Command::Zremrangebyscore,
    Command::Zrevrange,
    Command::Zrevrangebylex,
    Command::Zrevrangebyscore,
    Command::Zrevrank,
    Command::Zscan,
    Command::Zscore,
    Command::Zunion,
    Command::Zunionstore,
];

/// Commands without keys that only answer, or act on server-wide state every tenant may use (the script cache,
/// which is addressed by content).
const KEYLESS: &[Command] = &[
    Command::AclCat,
    Command::AclGenpass,
    Command::AclHelp,
    Command::ClientHelp,
    Command::ClusterHelp,
    Command::CommandHelp,
    Command::ConfigHelp,
    Command::FunctionHelp,
    Command::FunctionList,
    Command::LatencyHelp,
    Command::Lolwut,
    Command::MemoryHelp,
    Command::ModuleHelp,
    Command::ObjectHelp,
    Command::PubsubHelp,
    Command::Role,
    Command::ScriptExists,
    Command::ScriptHelp,
    Command::ScriptLoad,
    Command::SlowlogHelp,
    Command::Time,
    Command::Lastsave,
    Command::XgroupHelp,
    Command::XinfoHelp,
    Command::Info,
    Command::ConfigGet,
    Command::ConfigResetstat,
];

/// Commands that act on or reveal every key of the database.
const DATABASE: &[Command] = &[Command::Dbsize, Command::Randomkey, Command::Scan];

/// Commands that name pub/sub channels.
const CHANNELS: &[Command] = &[
    Command::Publish,
    Command::Spublish,
    Command::Subscribe,
    Command::Psubscribe,
    Command::Ssubscribe,
    Command::Unsubscribe,
    Command::Punsubscribe,
    Command::Sunsubscribe,
    Command::PubsubChannels,
    Command::PubsubNumpat,
    Command::PubsubNumsub,
    Command::PubsubShardchannels,
    Command::PubsubShardnumsub,
];

/// Commands the session serves itself (`Policy::Local` and the stateful ones it answers on the connection).
const SESSION: &[Command] = &[
    Command::Auth,
    Command::Hello,
    Command::Quit,
    Command::Select,
    Command::Ping,
    Command::Echo,
    Command::Reset,
    Command::Multi,
    Command::Exec,
    Command::Discard,
    Command::Unwatch,
    Command::Wait,
    Command::Monitor,
    Command::Readonly,
    Command::Readwrite,
    Command::Asking,
    Command::CommandCount,
    Command::CommandDocs,
    Command::CommandGetkeys,
    Command::CommandGetkeysandflags,
    Command::CommandInfo,
    Command::CommandList,
];

/// The server's: for admins only. Besides everything with the `admin` flag (below): commands that act on every
/// database or every key at once, reach another server, or hold the whole server for as long as they like.
const SERVER: &[Command] = &[
    Command::Flushall,
    Command::Flushdb,
    // O(N) over the whole database in one go: a shared Redis answers nobody meanwhile. SCAN serves instead.
    Command::Keys,
    Command::Swapdb,
    Command::Migrate,
    // The slot-migration form of RESTORE, which a cluster's own tools send.
    Command::RestoreAsking,
    Command::ScriptFlush,
    Command::ScriptKill,
    // Function libraries are server-wide: loading one may replace another tenant's, and their code is theirs.
    Command::FunctionLoad,
    Command::FunctionFlush,
    Command::FunctionKill,
    Command::FunctionDelete,
    Command::FunctionRestore,
    Command::FunctionDump,
    // The running function's name and arguments may be another tenant's.
    Command::FunctionStats,
    // Figures of every database of the server, other tenants' included, and actions on the whole server.
    Command::MemoryStats,
    Command::MemoryDoctor,
    Command::MemoryMallocStats,
    Command::MemoryPurge,
];

/// Commands refused to every tenant without `allow_admin`, and why.
const REFUSED: &[(Command, &str)] = &[(
    Command::ScriptDebug,
    "it turns the shared backend connection into a Lua debugger session (SYNC freezes the whole server, YES \
     forks it)",
)];

/// Commands read by a parser that follows their implementation.
const PARSED: &[(Command, parse::Parser)] = &[
    (Command::Sort, parse::sort),
    (Command::SortRo, parse::sort_ro),
    (Command::Georadius, parse::georadius),
    (Command::Georadiusbymember, parse::georadius_by_member),
    (Command::Xread, parse::xread),
    (Command::Xreadgroup, parse::xread),
    (Command::Copy, parse::copy),
    (Command::Move, parse::moves),
];

/// Commands that name databases, and the parser that finds where.
const DATABASES: &[(Command, parse::Parser)] = &[
    (Command::Copy, parse::copy),
    (Command::Move, parse::moves),
    (Command::Swapdb, parse::swapdb),
];

/// The arguments of a request for `spec` that name a database, as Redis reads them: every one of them, where an
/// option may be repeated.
pub(crate) fn databases(spec: &CommandSpec, args: &[Bytes]) -> Vec<usize> {
    DATABASES
        .iter()
        .find(|(id, _)| *id == spec.id)
        .and_then(|(_, parse)| parse(args).ok())
        .map(|found| found.databases)
        .unwrap_or_default()
}

/// How the gateway reads `spec` (see the module's docs).
pub(crate) fn reading(spec: &CommandSpec) -> Reading {
    filed(spec.id).unwrap_or_else(|| unfiled(spec))
}

/// How the tables below file `id`, if they do.
fn filed(id: Command) -> Option<Reading> {
    static READINGS: OnceLock<Vec<Option<Reading>>> = OnceLock::new();
    let readings = READINGS.get_or_init(|| {
        let mut readings = vec![None; Command::COUNT];
        let mut file = |ids: &[Command], reading: Reading| {
            for &id in ids {
                readings[id as usize] = Some(reading);
            }
        };
        file(SPECS, Reading::Specs);
        file(KEYLESS, Reading::Keyless);
        file(DATABASE, Reading::Database);
        file(CHANNELS, Reading::Channels);
        file(SESSION, Reading::Session);
        file(SERVER, Reading::Server);
        for &(id, why) in REFUSED {
            file(&[id], Reading::Refused(why));
        }
        for &(id, parser) in PARSED {
            file(&[id], Reading::Parsed(parser));
        }
        readings
    });
    readings.get(id as usize).copied().flatten()
}

/// How a command the tables do not file is read: by its flags and its container, or not at all.
fn unfiled(spec: &CommandSpec) -> Reading {
    if spec.has(crate::cmd::flag::ADMIN) {
        return Reading::Server;
    }
    match spec.id.container() {
        // Containers the session answers or refuses whole.
        Some(
            Command::Client | Command::Cluster | Command::Acl | Command::Slowlog | Command::Latency,
        ) => Reading::Session,
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
