//! What the fuzzer checks on the backend itself, past the gateway: the keyspace events a case caused (one
//! subscriber on `__keyspace@*__:*`, fenced per case by a barrier message, so every event is the case's), the
//! data of every space as `DUMP`s, the server-wide state a tenant must not change (configuration, users,
//! function libraries, the script cache, replication role, saves and forks), and other tenants' canaries in what
//! the attacker was answered.

use std::collections::BTreeMap;
use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use redis::Value;

use super::platform::{BACKEND_PASSWORD, CANARY, Platform, owner};

/// The channel the fuzzer publishes its barriers on, straight to the backend.
const BARRIER: &str = "switchyard-fuzz-barrier";
/// How long the backend may take to answer before it counts as frozen.
pub(crate) const DEADLINE: Duration = Duration::from_secs(2);

/// A keyspace event: what happened to which key of which database.
pub(crate) struct Event {
    pub(crate) db: u32,
    pub(crate) key: Vec<u8>,
    pub(crate) event: String,
}

/// The backend's keyspace events, read on a connection of the backend's own user.
pub(crate) struct Notifications {
    reader: BufReader<TcpStream>,
    parser: redis::Parser,
}

impl Notifications {
    pub(crate) fn connect(port: u16) -> Result<Notifications> {
        let mut stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(DEADLINE))?;
        stream.write_all(
            format!(
                "AUTH {BACKEND_PASSWORD}\r\nPSUBSCRIBE __keyspace@*__:*\r\nSUBSCRIBE {BARRIER}\r\n"
            )
            .as_bytes(),
        )?;
        let mut notifications = Notifications {
            reader: BufReader::new(stream),
            parser: redis::Parser::new(),
        };
        for _ in 0..3 {
            notifications.next()?;
        }
        Ok(notifications)
    }

    fn next(&mut self) -> Result<Value> {
        Ok(self.parser.parse_value(&mut self.reader)?)
    }

    /// The events that arrive before barrier `number` (published after the case was answered).
    pub(crate) fn until_barrier(&mut self, number: u64) -> Result<Vec<Event>> {
        let mut events = Vec::new();
        loop {
            let Value::Array(message) = self.next()? else {
                continue;
            };
            let parts: Vec<Vec<u8>> = message
                .iter()
                .map(|v| match v {
                    Value::BulkString(b) => b.clone(),
                    _ => Vec::new(),
                })
                .collect();
            match parts.first().map(Vec::as_slice) {
                Some(b"message") if parts.get(2) == Some(&number.to_string().into_bytes()) => {
                    return Ok(events);
                }
                Some(b"pmessage") if parts.len() == 4 => {
                    if let Some((db, key)) = keyspace_channel(&parts[2]) {
                        events.push(Event {
                            db,
                            key,
                            event: String::from_utf8_lossy(&parts[3]).into_owned(),
                        });
                    }
                }
                _ => {}
            }
        }
    }
}

/// `__keyspace@5__:some:key` -> (5, `some:key`).
fn keyspace_channel(channel: &[u8]) -> Option<(u32, Vec<u8>)> {
    let rest = channel.strip_prefix(b"__keyspace@")?;
    let end = rest.iter().position(|&b| b == b'_')?;
    let db = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
    let key = rest[end..].strip_prefix(b"__:")?;
    Some((db, key.to_vec()))
}

/// Publishes barrier `number` to the subscriber; an error means the backend did not answer in time.
pub(crate) fn publish_barrier(admin: &mut redis::Connection, number: u64) -> Result<()> {
    let _: i64 = redis::cmd("PUBLISH")
        .arg(BARRIER)
        .arg(number)
        .query(admin)?;
    Ok(())
}

/// How the backend is doing.
pub(crate) enum Health {
    Alive,
    /// Accepts connections but does not answer within [`DEADLINE`].
    Frozen,
    /// Refuses connections: the process is gone.
    Dead,
}

pub(crate) fn health(platform: &Platform) -> Health {
    match TcpStream::connect(("127.0.0.1", platform.backend_port())) {
        Err(_) => Health::Dead,
        Ok(_) => match platform
            .admin(0, DEADLINE)
            .and_then(|mut con| redis::cmd("PING").query::<String>(&mut con).context("PING"))
        {
            Ok(_) => Health::Alive,
            Err(_) => Health::Frozen,
        },
    }
}

/// Every key of every database: its `DUMP` and when it expires (`PEXPIRETIME`).
pub(crate) struct Digest(BTreeMap<(u32, Vec<u8>), (Vec<u8>, i64)>);

impl Digest {
    pub(crate) fn take(platform: &Platform) -> Result<Digest> {
        let mut all = BTreeMap::new();
        let mut con = platform.admin(0, Duration::from_secs(10))?;
        for db in 0..16 {
            redis::cmd("SELECT").arg(db).query::<()>(&mut con)?;
            let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut con)?;
            if keys.is_empty() {
                continue;
            }
            let mut pipe = redis::pipe();
            for key in &keys {
                pipe.cmd("DUMP").arg(key).cmd("PEXPIRETIME").arg(key);
            }
            let values: Vec<Value> = pipe.query(&mut con)?;
            for (key, pair) in keys.into_iter().zip(values.chunks_exact(2)) {
                let dump = match &pair[0] {
                    Value::BulkString(b) => b.clone(),
                    _ => Vec::new(),
                };
                let expires = match pair[1] {
                    Value::Int(n) => n,
                    _ => -3,
                };
                all.insert((db, key), (dump, expires));
            }
        }
        Ok(Digest(all))
    }

    /// What differs from `seeded` outside `attacker`'s spaces, and which of `attacker`'s keys hold another's
    /// canary (copied over from a space it may not read).
    pub(crate) fn problems(&self, seeded: &Digest, attacker: &str) -> Vec<String> {
        let mut problems = Vec::new();
        let keys: std::collections::BTreeSet<&(u32, Vec<u8>)> =
            self.0.keys().chain(seeded.0.keys()).collect();
        for key @ (db, name) in keys {
            let whose = owner(*db, name);
            if whose == attacker {
                if let Some((dump, _)) = self.0.get(key) {
                    for other in canary_owners(dump) {
                        if other != attacker {
                            problems.push(format!(
                                "db {db} key {}: the attacker's key holds {other}'s data",
                                show(name)
                            ));
                        }
                    }
                }
                continue;
            }
            let what = match (seeded.0.get(key), self.0.get(key)) {
                (Some(_), None) => "deleted",
                (None, Some(_)) => "created",
                (Some(a), Some(b)) if a.0 != b.0 => "value changed",
                (Some(a), Some(b)) if a.1 != b.1 => "expiry changed",
                _ => continue,
            };
            problems.push(format!("db {db} key {} ({whose}'s): {what}", show(name)));
        }
        problems
    }
}

/// The server-wide state a tenant may not change, as name -> value.
#[derive(PartialEq)]
pub(crate) struct ServerState(BTreeMap<String, String>);

impl ServerState {
    pub(crate) fn take(con: &mut redis::Connection, admin_script_sha: &str) -> Result<ServerState> {
        let mut state = BTreeMap::new();
        let config: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("*").query(con)?;
        for pair in config.chunks_exact(2) {
            state.insert(format!("config {}", pair[0]), pair[1].clone());
        }
        let users: Vec<String> = redis::cmd("ACL").arg("LIST").query(con)?;
        // The gateway's own users come and go with its connections (and namespaces' users with their first
        // script); a tenant that could change users could add others, which shows.
        for user in users.iter().filter(|u| !u.starts_with("user switchyard-")) {
            let name = user.split(' ').nth(1).unwrap_or_default();
            state.insert(format!("acl user {name}"), user.clone());
        }
        let functions: Value = redis::cmd("FUNCTION")
            .arg("LIST")
            .arg("WITHCODE")
            .query(con)?;
        state.insert("function libraries".into(), format!("{functions:?}"));
        let cached: Vec<i64> = redis::cmd("SCRIPT")
            .arg("EXISTS")
            .arg(admin_script_sha)
            .query(con)?;
        state.insert("the admin's script cached".into(), format!("{cached:?}"));
        let role: Value = redis::cmd("ROLE").query(con)?;
        let role = match role {
            Value::Array(parts) => format!("{:?}", parts.first()),
            other => format!("{other:?}"),
        };
        state.insert("role".into(), role);
        let lastsave: i64 = redis::cmd("LASTSAVE").query(con)?;
        state.insert("last save".into(), lastsave.to_string());
        let stats: String = redis::cmd("INFO").arg("stats").query(con)?;
        let forks = stats
            .lines()
            .find_map(|l| l.strip_prefix("total_forks:"))
            .unwrap_or("?");
        state.insert("forks".into(), forks.to_string());
        Ok(ServerState(state))
    }

    pub(crate) fn changes(&self, before: &ServerState) -> Vec<String> {
        let names: std::collections::BTreeSet<&String> =
            self.0.keys().chain(before.0.keys()).collect();
        names
            .into_iter()
            .filter_map(|name| {
                let (old, new) = (before.0.get(name), self.0.get(name));
                (old != new).then(|| {
                    format!(
                        "{name}: {} -> {}",
                        old.map_or("(none)", String::as_str),
                        new.map_or("(none)", String::as_str)
                    )
                })
            })
            .collect()
    }
}

/// The most memory the shared Redis may use: the seeded data and every case's own small writes take a few MB; a
/// request that makes Redis build more than a request may carry (8 MB here, the gateway's `--max-bulk-len` and
/// Redis' `proto-max-bulk-len`) shows.
pub(crate) const MEMORY_BOUND: u64 = 64 << 20;

/// The shared Redis' `used_memory`.
pub(crate) fn used_memory(con: &mut redis::Connection) -> Result<u64> {
    let info: String = redis::cmd("INFO").arg("memory").query(con)?;
    info.lines()
        .find_map(|line| line.strip_prefix("used_memory:"))
        .and_then(|bytes| bytes.trim().parse().ok())
        .context("used_memory in INFO memory")
}

/// Walks every value of every database (`DEBUG DIGEST`): a forged value the attacker restored into its own key
/// takes Redis down on its first full read, here rather than at an unlucky tenant's read later.
pub(crate) fn read_everything(platform: &Platform) -> Result<()> {
    let mut con = platform.admin(0, Duration::from_secs(10))?;
    let digest: Value = redis::cmd("DEBUG").arg("DIGEST").query(&mut con)?;
    if !matches!(digest, Value::BulkString(_) | Value::SimpleString(_)) {
        bail!("DEBUG DIGEST answered {digest:?}");
    }
    Ok(())
}

/// The owners of the canaries in `bytes` (`CANARY:<owner>:...`).
pub(crate) fn canary_owners(bytes: &[u8]) -> Vec<String> {
    let mut owners = Vec::new();
    let mut rest = bytes;
    while let Some(at) = find(rest, CANARY) {
        rest = &rest[at + CANARY.len()..];
        let end = rest.iter().position(|&b| b == b':').unwrap_or(rest.len());
        let name = String::from_utf8_lossy(&rest[..end]).into_owned();
        if !owners.contains(&name) {
            owners.push(name);
        }
    }
    owners
}

/// Up to 160 bytes of `bytes` around its first canary of `owner`, for a report.
pub(crate) fn excerpt(bytes: &[u8], owner: &str) -> String {
    let needle = [CANARY, owner.as_bytes()].concat();
    let at = find(bytes, &needle).unwrap_or(0);
    let start = at.saturating_sub(80);
    let end = (at + 80).min(bytes.len());
    show(&bytes[start..end])
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Bytes as printable text, others escaped.
pub(crate) fn show(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}
