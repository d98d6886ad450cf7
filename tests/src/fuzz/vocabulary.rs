//! The words the hostile grammar draws from: scripts, channels, configuration parameters, values, numbers,
//! patterns and keys an attacker would try, and the `DEBUG` subcommands worth trying.

pub(super) const LUA_SCRIPTS: &[&str] = &[
    "return redis.call('KEYS', '*')",
    "return redis.call('SCAN', '0', 'COUNT', '1000')",
    "return redis.call('SCAN', '0', 'MATCH', '*', 'COUNT', '1000')",
    "return redis.call('RANDOMKEY')",
    "return redis.call('DBSIZE')",
    "return redis.call('GET', 'n1:str')",
    "return redis.call('GET', '{n2}:str')",
    "return redis.call('HGETALL', 'n*:hash')",
    "return redis.call('SELECT', '0')",
    "redis.call('SELECT', '4') return redis.call('GET', 'str')",
    "return redis.call('FLUSHDB')",
    "return redis.call('FLUSHALL')",
    "return redis.call('INFO', 'keyspace')",
    "return redis.call('CONFIG', 'GET', '*')",
    "return redis.call('CONFIG', 'SET', 'notify-keyspace-events', '')",
    "return redis.call('ACL', 'LIST')",
    "return redis.call('CLIENT', 'LIST')",
    "return redis.call('CLIENT', 'KILL', 'TYPE', 'pubsub')",
    "return redis.call('PUBLISH', '__keyspace@5__:n1:str', 'del')",
    "return redis.call('PUBSUB', 'CHANNELS')",
    "return redis.call('SORT', KEYS[1], 'BY', 'n1:*', 'GET', '{n2}:*')",
    "return redis.call('SORT', KEYS[1], 'STORE', KEYS[1], 'STORE', 'n1:str')",
    "return redis.call('OBJECT', 'ENCODING', 'n1:str')",
    "return redis.call('MEMORY', 'USAGE', '{n2}:str')",
    "return redis.call('SLOWLOG', 'GET')",
    "return redis.call('DEBUG', 'SLEEP', '0')",
    "return redis.call('SCRIPT', 'FLUSH')",
    "return redis.call('FUNCTION', 'FLUSH')",
    "return redis.call('COPY', KEYS[1], 'n1:stolen', 'DB', '5')",
    "return redis.call('SET', KEYS[1], 'x')",
    "return redis.call('DEL', KEYS[1])",
    "return redis.call('XREAD', 'STREAMS', 'n1:stream', '0')",
    "return redis.call('LMOVE', KEYS[1], '{n2}:list', 'LEFT', 'LEFT')",
    "return redis.call('RESTORE', KEYS[1], '0', redis.call('DUMP', 'n1:hash'), 'REPLACE')",
    "return redis.call('SWAPDB', '0', '1')",
    "return redis.call('MOVE', KEYS[1], '1')",
    "return redis.call('GEORADIUS', KEYS[1], '0', '0', '1', 'km', 'STORE', KEYS[1], 'STORE', 'n1:geo')",
    "return redis.call('SHUTDOWN', 'NOSAVE')",
    "return redis.call('DEBUG', 'SEGFAULT')",
    "return redis.call('EVAL', 'return 1', '0')",
    "return redis.error_reply('MOVED 1 127.0.0.1:1')",
    "return redis.error_reply('ASK 1 127.0.0.1:1')",
    "return redis.error_reply('TRYAGAIN')",
    "return redis.error_reply('READONLY You can not write against a read only replica.')",
    // A runaway script, killed after the tenant's limit.
    "while true do end",
];

/// A script that writes and then loops: it cannot be killed, so only tenants not trusted with write scripts send it
/// (theirs run read-only, so its write fails and it stays killable).
pub(super) const UNKILLABLE_SCRIPT: &str =
    "redis.call('SET', KEYS[1] or 'x', 'x') while true do end";

pub(super) const LIBRARIES: &[&str] = &[
    "#!lua name=evil\nredis.register_function('evil', function() return redis.call('FLUSHALL') end)",
    "#!lua name=fuzzlib\nredis.register_function('fuzz_call', function() return 'hijacked' end)",
];

pub(super) const CHANNELS: &[&str] = &[
    "__keyspace@5__:n1:str",
    "__keyspace@0__:str",
    "__keyevent@1__:del",
    "__keyspace@*__:*",
    "__redis__:invalidate",
    "__sentinel__:hello",
    "d0:news",
    "news",
];

pub(super) const CONFIG_PARAMETERS: &[&str] = &[
    "*",
    "requirepass",
    "masterauth",
    "dir",
    "dbfilename",
    "notify-keyspace-events",
    "maxmemory",
    "maxmemory-policy",
    "databases",
    "sanitize-dump-payload",
    "busy-reply-threshold",
    "save",
    "appendonly",
    "enable-debug-command",
    "maxclients",
    "timeout",
];

pub(super) const USERNAMES: &[&str] =
    &["default", "switchyard-gateway", "switchyard-script", "fuzz"];

pub(super) const SECTIONS: &[&str] = &[
    "all",
    "everything",
    "keyspace",
    "clients",
    "commandstats",
    "server",
    "default",
];

pub(super) const VALUES: &[&[u8]] = &[
    b"v",
    b"",
    b"0",
    b"1",
    b"-1",
    b"x y",
    b"\0",
    b"\xff\xfe\xfd",
    b"\r\n",
    b"*1\r\n$8\r\nFLUSHALL\r\n",
    b"yes",
    b"no",
    b"KEA",
    b"/tmp",
    b"on",
    b"+@all",
    b"~*",
    b"allkeys",
    b"nopass",
];

pub(super) const INTEGERS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "5",
    "10",
    "16",
    "-1",
    "-2",
    "100",
    "65536",
    "2147483648",
    "9223372036854775807",
    "-9223372036854775808",
    "18446744073709551616",
    "abc",
    "1.5",
    "",
];

/// Offsets and counts that would make Redis build gigabytes from a few bytes (a bit offset, a negative count). Drawn
/// for commands sent as they are or in `MULTI` only: inside a script, what a call builds is bounded by the scripts
/// policy, not by the gateway (docs/operations.md), and Lua builds such strings by itself anyway.
pub(super) const GIGABYTES: &[&str] = &["3000000000", "-2000000000"];

pub(super) const DATABASES: &[&str] = &[
    "0", "1", "2", "3", "4", "5", "6", "15", "16", "-1", "00", "+1", " 1",
];

pub(super) const DOUBLES: &[&str] = &[
    "0", "1", "1.5", "-1", "0.01", "inf", "-inf", "+inf", "nan", "1e308", "abc", "",
];

pub(super) const PATTERNS: &[&str] = &[
    "*",
    "n1:*",
    "{n2}:*",
    "n*:*",
    "n\\*:*",
    "*str*",
    "[n]*",
    "?1:*",
    "\\",
    "",
    "__keyspace@*__:*",
    "*:*",
    "#",
];

pub(super) const UNIX_TIMES: &[&str] = &["0", "-1", "1", "2000000000", "9999999999999"];

pub(super) const WEIRD_KEYS: &[&[u8]] = &[
    b"",
    b"\0",
    b"\xff\xfe",
    b"k\r\n*1\r\n$8\r\nFLUSHALL\r\n",
    b"*",
    b"?",
    b"[",
    b"\\",
    b"__keyspace@5__:n1:str",
    b"KEYS[1]x",
];

/// Reads that walk a value (a forged one is trusted until then), tried on a key the case just named.
pub(super) const DEEP_READS: &[&[&str]] = &[
    &["HGETALL"],
    &["HRANDFIELD", "@", "-5", "WITHVALUES"],
    &["LRANGE", "@", "0", "-1"],
    &["SMEMBERS"],
    &["ZRANGE", "@", "0", "-1", "WITHSCORES"],
    &["XRANGE", "@", "-", "+"],
    &["GET"],
    &["SORT"],
    &["HLEN"],
    &["OBJECT", "ENCODING", "@"],
];

/// `DEBUG` has no documented arguments: its subcommands, the dangerous ones included.
pub(super) const DEBUG_SUBCOMMANDS: &[&[&str]] = &[
    &["SEGFAULT"],
    &["PANIC"],
    &["ASSERT"],
    &["OOM"],
    &["RESTART"],
    &["CRASH-AND-RECOVER"],
    &["SLEEP", "3"],
    &["SLEEP", "0"],
    &["RELOAD"],
    &["SET-ACTIVE-EXPIRE", "0"],
    &["OBJECT", "@"],
    &["DIGEST-VALUE", "@"],
    &["DIGEST"],
    &["JMAP"],
    &["CHANGE-REPL-ID"],
    &["QUICKLIST-PACKED-THRESHOLD", "1"],
    &["LISTPACK", "@"],
    &["PROTOCOL", "attrib"],
    &["POPULATE", "10", "pop"],
    &["STRINGMATCH-LEN", "*"],
];
