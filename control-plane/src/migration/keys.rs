//! A key on a migration's two sides: reading both copies, sending pipelines, deciding whether they match.
//!
//! Reads are DUMP and PTTL, pipelined per server; a pipeline's replies may be errors, which the caller counts.

use std::collections::HashMap;

use redis::{Pipeline, RedisResult, Value};
use sha2::{Digest, Sha256};

use crate::migration::deployment::Server;
use crate::migration::error::{TaskError, TaskResult};

/// A key as one server holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Copy {
    pub(crate) dump: Option<Vec<u8>>,
    /// -2: no key, -1: no TTL, else milliseconds left.
    pub(crate) pttl: i64,
}

/// One key on both sides: where the authority has it (`old`: old itself, or new in a rollback) and one server
/// of the side repaired from it (`new`) that should.
#[derive(Clone)]
pub(crate) struct Pair {
    pub(crate) key: Vec<u8>,
    pub(crate) old: Server,
    pub(crate) new: Server,
}

/// Sends `pipe` and answers each command's reply, errors included (a plain query fails on the first error).
pub(crate) async fn send(server: &Server, pipe: &Pipeline, count: usize) -> TaskResult<Vec<Value>> {
    if count == 0 {
        return Ok(Vec::new());
    }
    let mut conn = server.conn.clone();
    let replies = redis::aio::ConnectionLike::req_packed_commands(&mut conn, pipe, 0, count)
        .await
        .map_err(|e| TaskError::redis("sending a pipeline", &server.addr, e))?;
    if replies.len() != count {
        return Err(TaskError::unexpected(
            &server.addr,
            format!("answered {} replies to {count} commands", replies.len()),
        ));
    }
    Ok(replies)
}

/// DUMP and PTTL of `keys` on one server.
pub(crate) async fn read(server: &Server, keys: &[&[u8]]) -> TaskResult<Vec<Copy>> {
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.cmd("DUMP").arg(*key).cmd("PTTL").arg(*key);
    }
    let replies = send(server, &pipe, keys.len() * 2).await?;
    let mut replies = replies.into_iter();
    let mut copies = Vec::with_capacity(keys.len());
    // The dumps are taken out of the replies, not copied.
    while let (Some(dump), Some(pttl)) = (replies.next(), replies.next()) {
        let dump = match dump {
            Value::BulkString(bytes) => Some(bytes),
            _ => None,
        };
        let pttl = match (&dump, pttl) {
            (Some(_), Value::Int(ttl)) => ttl,
            _ => -2,
        };
        copies.push(Copy { dump, pttl });
    }
    Ok(copies)
}

/// Reads both sides of every pair, grouped into one pipeline per server.
pub(crate) async fn read_pairs(pairs: &[Pair]) -> TaskResult<Vec<(Copy, Copy)>> {
    let mut old = vec![None; pairs.len()];
    let mut new = vec![None; pairs.len()];
    for (side, pick) in [
        (&mut old, (|p: &Pair| &p.old) as fn(&Pair) -> &Server),
        (&mut new, |p: &Pair| &p.new),
    ] {
        let mut groups: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, pair) in pairs.iter().enumerate() {
            groups.entry(pick(pair).addr.as_str()).or_default().push(i);
        }
        for indices in groups.values() {
            let server = pick(&pairs[indices[0]]);
            let keys: Vec<&[u8]> = indices.iter().map(|&i| pairs[i].key.as_slice()).collect();
            for (&i, copy) in indices.iter().zip(read(server, &keys).await?) {
                side[i] = Some(copy);
            }
        }
    }
    Ok(old
        .into_iter()
        .zip(new)
        .filter_map(|(o, n)| Some((o?, n?)))
        .collect())
}

/// RESTORE arguments: the TTL as RESTORE takes it (0: none).
pub(crate) fn restore_ttl(pttl: i64) -> i64 {
    pttl.max(0)
}

/// The server error code of a reply, if it is one.
pub(crate) fn error_code(reply: &Value) -> Option<String> {
    match reply {
        Value::ServerError(e) => Some(e.code().to_string()),
        _ => None,
    }
}

/// Whether new's copy equals old's: both absent, or the same value (payload, or type-specific digest when
/// the payloads' encodings differ) with TTLs within the tolerance. A digest that cannot be read counts as a
/// difference, which the re-checks settle.
pub(crate) async fn same(pair: &Pair, old: &Copy, new: &Copy, ttl_tolerance_ms: u64) -> bool {
    let (Some(a), Some(b)) = (&old.dump, &new.dump) else {
        return old.dump.is_none() && new.dump.is_none();
    };
    let ttl_ok = match (old.pttl, new.pttl) {
        (-1, -1) => true,
        (x, y) if x >= 0 && y >= 0 => x.abs_diff(y) <= ttl_tolerance_ms,
        _ => false,
    };
    if !ttl_ok {
        return false;
    }
    if a == b {
        return true;
    }
    // A key changing type between two reads (WRONGTYPE) is a difference like any other: re-checked later.
    match (
        digest(&pair.old, &pair.key).await,
        digest(&pair.new, &pair.key).await,
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// A digest of a key's type and value that does not depend on how the server encodes it (hash tables iterate
/// in a per-process order, so equal sets can DUMP differently).
async fn digest(server: &Server, key: &[u8]) -> RedisResult<Vec<u8>> {
    let mut conn = server.conn.clone();
    let kind: String = redis::cmd("TYPE").arg(key).query_async(&mut conn).await?;
    let mut hasher = Sha256::new();
    hasher.update(kind.as_bytes());
    let mut add = |items: Vec<Vec<u8>>| {
        for item in items {
            hasher.update((item.len() as u64).to_le_bytes());
            hasher.update(&item);
        }
    };
    match kind.as_str() {
        "string" => {
            // None when the key went away since TYPE: the digest then differs, and the re-check settles it.
            let value: Option<Vec<u8>> = redis::cmd("GET").arg(key).query_async(&mut conn).await?;
            add(value.into_iter().collect());
        }
        "list" => add(redis::cmd("LRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await?),
        "zset" => add(redis::cmd("ZRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await?),
        "set" => {
            let mut members: Vec<Vec<u8>> = redis::cmd("SMEMBERS")
                .arg(key)
                .query_async(&mut conn)
                .await?;
            members.sort();
            add(members);
        }
        "hash" => {
            let fields: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL")
                .arg(key)
                .query_async(&mut conn)
                .await?;
            let mut fields: Vec<Vec<u8>> = fields
                .into_iter()
                .map(|(f, v)| [f.len().to_le_bytes().as_slice(), &f, &v].concat())
                .collect();
            fields.sort();
            add(fields);
        }
        // Streams (and anything else) keep their order and encoding: the DUMP payload is the digest.
        _ => {
            let dump: Option<Vec<u8>> = redis::cmd("DUMP").arg(key).query_async(&mut conn).await?;
            add(dump.into_iter().collect());
        }
    }
    Ok(hasher.finalize().to_vec())
}
