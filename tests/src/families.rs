//! The comparison harness's command families: sequences of commands whose replies through the gateway must be
//! Redis' own (see `compare`), run over every topology by tests/commands.rs and for namespaced tenants sharing a
//! database by tests/namespaces.rs. Multi-key commands use hash tags, as applications written for Redis Cluster
//! do.

use crate::compare::{Comparison, Topology};

/// Strings, counters, bits, expiry and multi-key string commands.
pub fn strings(c: &mut Comparison) {
    c.all_same(&[
        &["SET", "s:a", "hello"],
        &["GET", "s:a"],
        &["GET", "s:missing"],
        &["APPEND", "s:a", " world"],
        &["STRLEN", "s:a"],
        &["GETRANGE", "s:a", "0", "4"],
        &["SETRANGE", "s:a", "6", "there"],
        &["SET", "s:n", "10"],
        &["INCR", "s:n"],
        &["INCRBY", "s:n", "5"],
        &["DECRBY", "s:n", "3"],
        &["INCRBYFLOAT", "s:n", "1.5"],
        &["INCR", "s:a"],
        &["SET", "s:a", "v", "NX"],
        &["SET", "s:a", "v2", "XX", "GET"],
        &["GETDEL", "s:a"],
        &["SETNX", "s:a", "1"],
        &["GETSET", "s:a", "2"],
        &["MSET", "{s}1", "a", "{s}2", "b", "{s}3", "c"],
        &["MGET", "{s}1", "{s}2", "{s}missing", "{s}3"],
        &["MSETNX", "{s}1", "x", "{s}4", "y"],
        &["SET", "s:bits", "\x0f"],
        &["GETBIT", "s:bits", "5"],
        &["SETBIT", "s:bits", "0", "1"],
        &["BITCOUNT", "s:bits"],
        &["BITPOS", "s:bits", "0"],
        &["SET", "{s}lcs1", "ohmytext"],
        &["SET", "{s}lcs2", "mynewtext"],
        &["LCS", "{s}lcs1", "{s}lcs2"],
        &["SET", "s:ttl", "v", "EX", "100"],
        &["PERSIST", "s:ttl"],
        &["TTL", "s:ttl"],
        &["GETEX", "s:ttl", "PX", "500000"],
        &["SET", "s:a", "v", "EX", "0"],
        &["SET", "s:a", "v", "BADOPTION"],
    ]);
    c.pipeline_same(&[
        &["SET", "s:p1", "1"],
        &["INCR", "s:p1"],
        &["GET", "s:p1"],
        &["DEL", "s:p1"],
        &["GET", "s:p1"],
    ]);
}

/// HyperLogLogs, geo, bitfields, BITOP and SORT (with its BY/GET patterns).
pub fn hyperloglogs_geo_and_bitfields(c: &mut Comparison) {
    c.all_same(&[
        &["PFADD", "{hll}a", "x", "y", "z"],
        &["PFADD", "{hll}b", "z", "w"],
        &["PFCOUNT", "{hll}a"],
        &["PFCOUNT", "{hll}a", "{hll}b"],
        &["PFMERGE", "{hll}m", "{hll}a", "{hll}b"],
        &["PFCOUNT", "{hll}m"],
        &[
            "GEOADD",
            "{geo}p",
            "13.361389",
            "38.115556",
            "Palermo",
            "15.087269",
            "37.502669",
            "Catania",
        ],
        &["GEODIST", "{geo}p", "Palermo", "Catania", "km"],
        &["GEOPOS", "{geo}p", "Palermo", "Nowhere"],
        &["GEOHASH", "{geo}p", "Catania"],
        &[
            "GEOSEARCH",
            "{geo}p",
            "FROMLONLAT",
            "15",
            "37",
            "BYRADIUS",
            "200",
            "km",
            "ASC",
            "WITHDIST",
        ],
        &[
            "GEOSEARCHSTORE",
            "{geo}near",
            "{geo}p",
            "FROMMEMBER",
            "Palermo",
            "BYBOX",
            "400",
            "400",
            "km",
        ],
        &["ZCARD", "{geo}near"],
        &[
            "BITFIELD", "bf", "SET", "u8", "0", "200", "INCRBY", "u8", "0", "100", "GET", "u4", "0",
        ],
        &["BITFIELD_RO", "bf", "GET", "u8", "0"],
        &["SET", "{bit}a", "\x7f"],
        &["SET", "{bit}b", "\x0f"],
        &["BITOP", "AND", "{bit}and", "{bit}a", "{bit}b"],
        &["GET", "{bit}and"],
        &["SORT", "{s}list"],
        &["RPUSH", "{s}list", "3", "1", "2"],
        &["SORT", "{s}list", "DESC", "LIMIT", "0", "2"],
        &["SORT", "{s}list", "ALPHA", "STORE", "{s}sorted"],
        &["LRANGE", "{s}sorted", "0", "-1"],
        &["SORT_RO", "{s}list"],
        &["SORT", "{s}list", "BY", "constant", "LIMIT", "0", "1"],
        &["SORT", "{s}list", "STORE", "{s}by", "ASC"],
        &["SORT", "{s}list", "BADOPTION"],
    ]);
    // Patterns name keys that may be on any shard: refused as Redis Cluster refuses them.
    let why = "docs/commands.md#keys-and-multi-key-commands: SORT patterns on several shards";
    for (args, reply) in [
        (
            &["SORT", "{s}list", "BY", "w_*"][..],
            &b"-ERR BY option of SORT denied in Cluster mode.\r\n"[..],
        ),
        (
            &["SORT", "{s}list", "DESC", "GET", "#"][..],
            &b"-ERR GET option of SORT denied in Cluster mode.\r\n"[..],
        ),
    ] {
        if c.topology() == Topology::Single {
            c.same(args);
        } else {
            c.differs(args, reply, why);
        }
    }
}

/// Hashes, lists (LMPOP included) and sets.
pub fn hashes_lists_sets(c: &mut Comparison) {
    c.all_same(&[
        &["HSET", "h", "f1", "v1", "f2", "v2"],
        &["HGET", "h", "f1"],
        &["HMGET", "h", "f1", "nope", "f2"],
        &["HINCRBY", "h", "n", "3"],
        &["HINCRBYFLOAT", "h", "x", "0.5"],
        &["HDEL", "h", "f2", "nope"],
        &["HLEN", "h"],
        &["HEXISTS", "h", "f1"],
        &["HSTRLEN", "h", "f1"],
        &["HSETNX", "h", "f1", "z"],
        &["HGETALL", "h"],
        &["HKEYS", "h"],
        &["HVALS", "h"],
        &["HSET", "h", "odd"],
        &["RPUSH", "l", "a", "b", "c", "d"],
        &["LPUSH", "l", "z"],
        &["LRANGE", "l", "0", "-1"],
        &["LINDEX", "l", "2"],
        &["LSET", "l", "0", "y"],
        &["LINSERT", "l", "BEFORE", "c", "bb"],
        &["LPOS", "l", "c"],
        &["LREM", "l", "1", "bb"],
        &["LTRIM", "l", "0", "3"],
        &["LPOP", "l"],
        &["RPOP", "l", "2"],
        &["LLEN", "l"],
        &["RPUSH", "{l}src", "1", "2", "3"],
        &["LMOVE", "{l}src", "{l}dst", "LEFT", "RIGHT"],
        &["RPOPLPUSH", "{l}src", "{l}dst"],
        &["LMPOP", "2", "{l}none", "{l}src", "LEFT"],
        &["LRANGE", "{l}dst", "0", "-1"],
        &["LPUSH", "h", "x"],
        &["SADD", "{s}a", "1", "2", "3", "4"],
        &["SADD", "{s}b", "3", "4", "5"],
        &["SCARD", "{s}a"],
        &["SISMEMBER", "{s}a", "2"],
        &["SMISMEMBER", "{s}a", "2", "9"],
        &["SREM", "{s}a", "1"],
        &["SMOVE", "{s}a", "{s}b", "2"],
        &["SINTERCARD", "2", "{s}a", "{s}b"],
        &["SINTERSTORE", "{s}i", "{s}a", "{s}b"],
        &["SUNIONSTORE", "{s}u", "{s}a", "{s}b"],
        &["SDIFFSTORE", "{s}d", "{s}b", "{s}a"],
        &["SCARD", "{s}u"],
    ]);
    // Set members come in hash-table order, which depends on the server's history, not on the gateway.
    c.unordered(&["SMEMBERS", "{s}b"]);
    c.unordered(&["SINTER", "{s}a", "{s}b"]);
    c.unordered(&["SUNION", "{s}a", "{s}b"]);
    c.unordered(&["SDIFF", "{s}b", "{s}a"]);
}

/// Sorted sets (ZMPOP, ZUNIONSTORE numkeys included) and streams (XREAD, XREADGROUP).
pub fn sorted_sets_and_streams(c: &mut Comparison) {
    c.all_same(&[
        &["ZADD", "{z}a", "1", "one", "2", "two", "3", "three"],
        &["ZADD", "{z}b", "2", "two", "5", "five"],
        &["ZADD", "{z}a", "XX", "CH", "10", "one"],
        &["ZADD", "{z}a", "NX", "GT", "1", "x"],
        &["ZSCORE", "{z}a", "one"],
        &["ZMSCORE", "{z}a", "one", "nope"],
        &["ZINCRBY", "{z}a", "1.5", "two"],
        &["ZRANK", "{z}a", "two"],
        &["ZREVRANK", "{z}a", "two"],
        &["ZCARD", "{z}a"],
        &["ZCOUNT", "{z}a", "2", "+inf"],
        &["ZRANGE", "{z}a", "0", "-1", "WITHSCORES"],
        &["ZRANGE", "{z}a", "(1", "10", "BYSCORE", "LIMIT", "0", "2"],
        &["ZRANGEBYSCORE", "{z}a", "-inf", "+inf"],
        &["ZREVRANGE", "{z}a", "0", "1"],
        &["ZRANGESTORE", "{z}r", "{z}a", "0", "1"],
        &[
            "ZUNIONSTORE",
            "{z}u",
            "2",
            "{z}a",
            "{z}b",
            "WEIGHTS",
            "1",
            "2",
        ],
        &["ZINTER", "2", "{z}a", "{z}b", "WITHSCORES"],
        &["ZDIFF", "2", "{z}a", "{z}b"],
        &["ZINTERCARD", "2", "{z}a", "{z}b"],
        &["ZPOPMIN", "{z}u"],
        &["ZPOPMAX", "{z}u", "2"],
        &["ZMPOP", "2", "{z}none", "{z}a", "MIN", "COUNT", "2"],
        &["ZREM", "{z}a", "three", "nope"],
        &["ZADD", "{z}lex", "0", "a", "0", "b", "0", "c"],
        &["ZRANGEBYLEX", "{z}lex", "[b", "+"],
        &["ZLEXCOUNT", "{z}lex", "-", "+"],
        &["ZREMRANGEBYLEX", "{z}lex", "[a", "[a"],
        &["ZADD", "{z}a", "nan", "x"],
        &["XADD", "st", "1-1", "f", "v"],
        &["XADD", "st", "1-2", "f", "w", "g", "x"],
        &["XADD", "st", "1-1", "f", "v"],
        &["XLEN", "st"],
        &["XRANGE", "st", "-", "+"],
        &["XREVRANGE", "st", "+", "-", "COUNT", "1"],
        &["XREAD", "COUNT", "10", "STREAMS", "st", "0"],
        &["XGROUP", "CREATE", "st", "g1", "0"],
        &[
            "XREADGROUP",
            "GROUP",
            "g1",
            "c1",
            "COUNT",
            "1",
            "STREAMS",
            "st",
            ">",
        ],
        &["XACK", "st", "g1", "1-1"],
        &["XPENDING", "st", "g1"],
        &["XDEL", "st", "1-2"],
        &["XTRIM", "st", "MAXLEN", "0"],
        &["XLEN", "st"],
    ]);
}
