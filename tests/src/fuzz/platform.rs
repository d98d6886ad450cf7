//! The platform under attack: one `redis-server` with a password, keyspace notifications on (`KEAnm`: key-miss
//! events show reads too) and dump compression off (so a `DUMP` shows the values it holds), shared by tenants by
//! database and by key namespace, none with `allow_admin`, behind one gateway. It owns the seeded victim data
//! (every value and some key names carry a canary naming the owner), restoring it, and restarting a backend that
//! a case killed or froze.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::{Gateway, RawClient, RedisServer};

pub(crate) const BACKEND_PASSWORD: &str = "fuzz-backend-secret";
/// A tenant's script is killed after this long; the backend's `busy-reply-threshold` is the same, as the runbook
/// of docs/operations.md#tenant-isolation asks, so a runaway script holds Redis for half a second.
pub(crate) const SCRIPT_TIMEOUT_MS: u64 = 500;
/// The longest string a request may carry (the gateway's `--max-bulk-len`) and Redis may build (its
/// `proto-max-bulk-len`), as docs/operations.md#tenant-isolation asks of a shared Redis: inside a script of a
/// tenant trusted with `"scripts": "allow"` only Redis bounds what `SETBIT` or `SETRANGE` grows.
const MAX_BULK_LEN: &str = "8mb";
/// Where the namespaced tenants live together.
const NAMESPACE_DB: u32 = 5;
/// Databases no tenant owns, seeded with the operator's data (owner `op`): nobody may change or read them.
const OPERATOR_DBS: [u32; 2] = [4, 15];
/// The canary's owner for the operator's databases.
pub(crate) const OPERATOR: &str = "op";
/// Every canary starts so; none of the fuzzer's own arguments contains it.
pub(crate) const CANARY: &[u8] = b"CANARY:";
/// The library an admin loaded, callable by every tenant (`FCALL fuzz_call`): it runs its arguments as a command,
/// an argument `KEYS[i]` standing for its i-th key.
const LIBRARY: &str = "#!lua name=fuzzlib\n\
    redis.register_function('fuzz_call', function(keys, args) local a = {} for i, v in ipairs(args) do \
    local n = string.match(v, '^KEYS%[(%d+)%]$') if n then a[i] = keys[tonumber(n)] else a[i] = v end end \
    return redis.call(unpack(a)) end)";
/// A script an admin loaded: a tenant's `SCRIPT FLUSH` reaching the backend would drop it.
pub(crate) const ADMIN_SCRIPT: &str = "return 'switchyard-fuzz-admin-script'";

/// A tenant of the platform, where its keys live, and what its policy lets it do.
pub(crate) struct Tenant {
    pub(crate) name: &'static str,
    pub(crate) place: Place,
    pub(crate) policy: Policy,
    /// `"scripts": "allow"` over the shared resource's `scripts=read_only`: a tenant trusted with write scripts
    /// (so that writes inside scripts stay fuzzed), and trusted not to run one that writes and then loops.
    pub(crate) write_scripts: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Policy {
    /// Every command of its own keys.
    Full,
    /// `"read_only": true`.
    ReadOnly,
    /// `"commands": {"deny": ["@write"]}`: as read-only, by command rules (which scripts must obey too).
    DenyWrites,
}

pub(crate) enum Place {
    /// Databases `first .. first + count` of the backend, as the tenant's 0 .. count.
    Databases { first: u32, count: u32 },
    /// Keys under `prefix` in the namespaces' shared database.
    Namespace { prefix: &'static str },
}

pub(crate) const TENANTS: &[Tenant] = &[
    Tenant {
        name: "d0",
        place: Place::Databases { first: 0, count: 1 },
        policy: Policy::Full,
        write_scripts: false,
    },
    Tenant {
        name: "d1",
        place: Place::Databases { first: 1, count: 1 },
        policy: Policy::Full,
        write_scripts: true,
    },
    Tenant {
        name: "d2",
        place: Place::Databases { first: 2, count: 2 },
        policy: Policy::Full,
        write_scripts: false,
    },
    Tenant {
        name: "n1",
        place: Place::Namespace { prefix: "n1:" },
        policy: Policy::Full,
        write_scripts: true,
    },
    Tenant {
        name: "n2",
        place: Place::Namespace { prefix: "{n2}:" },
        policy: Policy::Full,
        write_scripts: true,
    },
    // A namespace with a glob character: an unescaped MATCH or KEYS pattern of it matches the others'.
    Tenant {
        name: "n3",
        place: Place::Namespace { prefix: "n*:" },
        policy: Policy::Full,
        write_scripts: false,
    },
    // Tenants that may not write even their own keys: any write event in their space is a policy bypassed.
    Tenant {
        name: "r1",
        place: Place::Databases { first: 6, count: 1 },
        policy: Policy::ReadOnly,
        write_scripts: false,
    },
    Tenant {
        name: "w1",
        place: Place::Databases { first: 7, count: 1 },
        policy: Policy::DenyWrites,
        write_scripts: false,
    },
];

impl Tenant {
    pub(crate) fn password(&self) -> String {
        format!("{}-password", self.name)
    }

    /// Whether the key `key` of backend database `db` is this tenant's.
    pub(crate) fn owns(&self, db: u32, key: &[u8]) -> bool {
        match self.place {
            Place::Databases { first, count } => (first..first + count).contains(&db),
            Place::Namespace { prefix } => db == NAMESPACE_DB && key.starts_with(prefix.as_bytes()),
        }
    }

    pub(crate) fn describe(&self) -> String {
        let policy = match self.policy {
            Policy::Full => "",
            Policy::ReadOnly => ", read_only",
            Policy::DenyWrites => ", commands.deny [@write]",
        };
        let scripts = match self.write_scripts {
            true => ", scripts allow",
            false => "",
        };
        let place = match self.place {
            Place::Databases { first, count: 1 } => format!("{}: database {first}", self.name),
            Place::Databases { first, count } => format!(
                "{}: databases {first}..={} (its 0..={})",
                self.name,
                first + count - 1,
                count - 1
            ),
            Place::Namespace { prefix } => format!(
                "{}: namespace {prefix:?} in database {NAMESPACE_DB}",
                self.name
            ),
        };
        format!("{place}{policy}{scripts}")
    }

    /// The (database, key prefix) spaces it owns, as seeded.
    pub(crate) fn spaces(&self) -> Vec<(u32, &'static str)> {
        match self.place {
            Place::Databases { first, count } => {
                (first..first + count).map(|db| (db, "")).collect()
            }
            Place::Namespace { prefix } => vec![(NAMESPACE_DB, prefix)],
        }
    }
}

/// The name of whoever owns `key` of database `db`: a tenant, or the operator.
pub(crate) fn owner(db: u32, key: &[u8]) -> &'static str {
    TENANTS
        .iter()
        .find(|t| t.owns(db, key))
        .map_or(OPERATOR, |t| t.name)
}

/// The key names every space is seeded with, as its tenant names them.
pub(crate) const SEEDED_KEYS: &[&str] = &[
    "str", "hash", "list", "set", "zset", "stream", "exp", "bighash", "biglist", "STORE", "DB",
    "STREAMS",
];

pub(crate) struct Platform {
    backend: Option<RedisServer>,
    backend_port: u16,
    gateway: Gateway,
    pub(crate) backend_restarts: u32,
    pub(crate) gateway_restarts: u32,
}

impl Platform {
    pub(crate) fn start() -> Result<Platform> {
        let backend = start_backend(None);
        let backend_port = backend.port();
        let gateway = start_gateway(backend_port);
        let platform = Platform {
            backend: Some(backend),
            backend_port,
            gateway,
            backend_restarts: 0,
            gateway_restarts: 0,
        };
        platform.prepare_backend()?;
        platform.wait_for_gateway()?;
        Ok(platform)
    }

    pub(crate) fn gateway_port(&self) -> u16 {
        self.gateway.port()
    }

    pub(crate) fn backend_port(&self) -> u16 {
        self.backend_port
    }

    /// A connection straight to the backend as its own (default) user, on `db`, that waits at most `timeout`
    /// for a reply.
    pub(crate) fn admin(&self, db: u32, timeout: Duration) -> Result<redis::Connection> {
        let url = format!(
            "redis://:{BACKEND_PASSWORD}@127.0.0.1:{}/{db}",
            self.backend_port
        );
        let client = redis::Client::open(url)?;
        let con = client
            .get_connection_with_timeout(timeout)
            .context("connect to the backend")?;
        con.set_read_timeout(Some(timeout))?;
        con.set_write_timeout(Some(timeout))?;
        Ok(con)
    }

    /// Seeds every tenant's and the operator's spaces and loads what an admin would have loaded.
    fn prepare_backend(&self) -> Result<()> {
        for tenant in TENANTS {
            for (db, prefix) in tenant.spaces() {
                self.seed_space(db, prefix, tenant.name)?;
            }
        }
        for db in OPERATOR_DBS {
            self.seed_space(db, "", OPERATOR)?;
        }
        let mut con = self.admin(0, Duration::from_secs(5))?;
        let _: String = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(LIBRARY)
            .query(&mut con)?;
        let _: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(ADMIN_SCRIPT)
            .query(&mut con)?;
        Ok(())
    }

    /// Writes the victim data of one space: every type, listpack and hashtable encodings, an expiry, keys named
    /// like command tokens, and a key whose very name is a canary (a SCAN or KEYS that leaks shows it).
    fn seed_space(&self, db: u32, prefix: &str, owner: &str) -> Result<()> {
        let mut con = self.admin(db, Duration::from_secs(5))?;
        let key = |name: &str| format!("{prefix}{name}");
        let canary = |what: &str| format!("CANARY:{owner}:{what}");
        let mut pipe = redis::pipe();
        pipe.cmd("SET").arg(key("str")).arg(canary("str")).ignore();
        pipe.cmd("HSET")
            .arg(key("hash"))
            .arg("f1")
            .arg(canary("hash"))
            .arg("f2")
            .arg("v")
            .ignore();
        pipe.cmd("RPUSH")
            .arg(key("list"))
            .arg(canary("list"))
            .arg("a")
            .arg("b")
            .ignore();
        pipe.cmd("SADD")
            .arg(key("set"))
            .arg(canary("set"))
            .arg("m")
            .ignore();
        pipe.cmd("ZADD")
            .arg(key("zset"))
            .arg(1)
            .arg(canary("zset"))
            .arg(2)
            .arg("m")
            .ignore();
        pipe.cmd("XADD")
            .arg(key("stream"))
            .arg("1-1")
            .arg("f")
            .arg(canary("stream"))
            .ignore();
        // An absolute expiry (2100-01-01), so that a space seeded again has the same digest.
        pipe.cmd("SET")
            .arg(key("exp"))
            .arg(canary("exp"))
            .arg("EXAT")
            .arg(4_102_444_800u64)
            .ignore();
        let mut big_hash = redis::cmd("HSET");
        big_hash.arg(key("bighash")).arg("f").arg(canary("bighash"));
        let mut big_list = redis::cmd("RPUSH");
        big_list.arg(key("biglist")).arg(canary("biglist"));
        for i in 0..200 {
            big_hash.arg(format!("f{i}")).arg(format!("value-{i:0>80}"));
            big_list.arg(format!("element-{i:0>80}"));
        }
        pipe.add_command(big_hash).ignore();
        pipe.add_command(big_list).ignore();
        for name in ["STORE", "DB", "STREAMS"] {
            pipe.cmd("SET").arg(key(name)).arg(canary(name)).ignore();
        }
        pipe.cmd("SET")
            .arg(key(&format!("CANARY:{owner}:key-name")))
            .arg("x")
            .ignore();
        pipe.query::<()>(&mut con).context("seed")?;
        Ok(())
    }

    /// Deletes every key of the backend and seeds every space again (in place: the gateway's connections stay).
    pub(crate) fn reseed(&self) -> Result<()> {
        let mut con = self.admin(0, Duration::from_secs(5))?;
        redis::cmd("FLUSHALL").query::<()>(&mut con)?;
        self.prepare_backend()
    }

    /// Deletes whatever is in `tenant`'s spaces and seeds them again (the attacker's own keys after a window).
    pub(crate) fn restore_space(&self, tenant: &Tenant) -> Result<()> {
        for (db, prefix) in tenant.spaces() {
            let mut con = self.admin(db, Duration::from_secs(5))?;
            match prefix {
                "" => redis::cmd("FLUSHDB").query::<()>(&mut con)?,
                prefix => {
                    // SCAN, not KEYS: KEYS skips a key whose time is up without deleting it, and Redis would
                    // then expire it later, in another attacker's window.
                    let mut cursor = 0u64;
                    loop {
                        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                            .arg(cursor)
                            .arg("COUNT")
                            .arg(1000)
                            .query(&mut con)?;
                        let mine: Vec<&Vec<u8>> = keys
                            .iter()
                            .filter(|k| k.starts_with(prefix.as_bytes()))
                            .collect();
                        if !mine.is_empty() {
                            redis::cmd("DEL").arg(mine).query::<()>(&mut con)?;
                        }
                        if next == 0 {
                            break;
                        }
                        cursor = next;
                    }
                }
            }
            self.seed_space(db, prefix, tenant.name)?;
        }
        Ok(())
    }

    /// Kills the backend, starts an empty one on its port and seeds it again; waits for the gateway to serve
    /// every tenant from it.
    pub(crate) fn restart_backend(&mut self) -> Result<()> {
        // The old process (and its scratch directory) must be gone before the new one takes its port.
        self.backend = None;
        self.backend = Some(start_backend(Some(self.backend_port)));
        self.backend_restarts += 1;
        self.prepare_backend()?;
        self.wait_for_gateway()
    }

    /// Starts a new gateway (on a new port) in place of one a case took down.
    pub(crate) fn restart_gateway(&mut self) -> Result<()> {
        let log = self.gateway.log();
        self.gateway = start_gateway(self.backend_port);
        self.gateway_restarts += 1;
        eprintln!(
            "isolation fuzz: the gateway was down; its log ended with:\n{}",
            tail(&log, 20)
        );
        self.wait_for_gateway()
    }

    /// Closes the gateway's connections to the backend (the state a case left on them, such as `SCRIPT DEBUG`,
    /// goes with them) and waits until it serves every tenant again.
    pub(crate) fn cut_gateway_connections(&self) -> Result<()> {
        let mut con = self.admin(0, Duration::from_secs(5))?;
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .arg("SKIPME")
            .arg("yes")
            .query(&mut con)?;
        self.wait_for_gateway()
    }

    /// Waits (at most 5 s) until the gateway has finished with every client connection: one a case left waiting
    /// may still have requests queued behind its blocking command, which the gateway sends once that ends.
    pub(crate) fn wait_for_no_clients(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.gateway.metric("switchyard_client_connections") > 0 && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether the gateway accepts connections.
    pub(crate) fn gateway_alive(&self) -> bool {
        std::net::TcpStream::connect(("127.0.0.1", self.gateway.port())).is_ok()
    }

    /// Waits until every tenant's command reaches the backend through the gateway (after a restart the gateway
    /// reconnects with a backoff).
    pub(crate) fn wait_for_gateway(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        for tenant in TENANTS {
            loop {
                let mut client = RawClient::connect(self.gateway.port());
                let auth = client.request(&[
                    b"AUTH",
                    tenant.name.as_bytes(),
                    tenant.password().as_bytes(),
                ]);
                if auth != b"+OK\r\n" {
                    bail!(
                        "tenant {} cannot AUTH: {}",
                        tenant.name,
                        String::from_utf8_lossy(&auth)
                    );
                }
                // A key every tenant has: a missing one would be a key-miss event in the case being checked.
                if client.request(&[b"EXISTS", b"str"]).starts_with(b":") {
                    break;
                }
                if Instant::now() > deadline {
                    bail!("the gateway does not reach the backend for {}", tenant.name);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }
}

fn start_backend(port: Option<u16>) -> RedisServer {
    let builder = RedisServer::builder()
        .password(BACKEND_PASSWORD)
        .arg("--notify-keyspace-events")
        .arg("KEAnm")
        .arg("--rdbcompression")
        .arg("no")
        .arg("--busy-reply-threshold")
        .arg(&SCRIPT_TIMEOUT_MS.to_string())
        .arg("--proto-max-bulk-len")
        .arg(MAX_BULK_LEN);
    match port {
        Some(port) => builder.start_on(port),
        None => builder.start(),
    }
}

/// One worker: every client connection then shares the same backend connections, so that a state one case leaves
/// on them meets the next case there on every replay, not only when both land on the same worker. Requests carry
/// at most 8 MB, as an operator of a shared Redis would set it, so that a case that makes Redis build more shows
/// in its memory ([`oracle::MEMORY_BOUND`]).
fn start_gateway(backend_port: u16) -> Gateway {
    Gateway::builder()
        .arg("--workers")
        .arg("1")
        .arg("--max-bulk-len")
        .arg(MAX_BULK_LEN)
        .start(&routes(backend_port))
}

fn routes(backend_port: u16) -> Value {
    // `scripts=read_only` on the shared Redis, as docs/operations.md tells the operator of a shared Redis.
    let target = |db: u32| {
        format!("redis://:{BACKEND_PASSWORD}@127.0.0.1:{backend_port}/{db}?scripts=read_only")
    };
    let tenants: Vec<Value> = TENANTS
        .iter()
        .map(|tenant| {
            let mut entry = json!({"name": tenant.name, "passwords": [tenant.password()],
                                   "limits": {"script_timeout_ms": SCRIPT_TIMEOUT_MS}});
            if tenant.write_scripts {
                entry["scripts"] = json!("allow");
            }
            match tenant.policy {
                Policy::Full => {}
                Policy::ReadOnly => entry["read_only"] = json!(true),
                Policy::DenyWrites => entry["commands"] = json!({"deny": ["@write"]}),
            }
            entry["route"] = match tenant.place {
                Place::Databases { first, count } => {
                    json!({"type": "single", "target": target(first), "databases": count})
                }
                Place::Namespace { prefix } => {
                    entry["namespace"] = json!(prefix);
                    json!({"type": "single", "target": target(NAMESPACE_DB)})
                }
            };
            entry
        })
        .collect();
    json!({ "tenants": tenants })
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
