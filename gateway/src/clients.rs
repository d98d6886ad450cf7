//! The registry of connected clients, for CLIENT LIST / CLIENT INFO and INFO's clients section.
//!
//! Touched on connect, disconnect and the rare commands that change what CLIENT LIST shows (AUTH, SETNAME,
//! SETINFO, SELECT): never per command.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::metrics::Metrics;

pub(crate) struct ClientInfo {
    pub id: u64,
    pub addr: SocketAddr,
    pub local_addr: SocketAddr,
    pub created: Instant,
    pub db: AtomicU32,
    /// The protocol the client speaks: 2 or 3.
    pub resp: AtomicU32,
    names: Mutex<Names>,
    /// Set by CLIENT KILL from another connection (any worker); the session closes when it is woken (see
    /// `Gateway::wake_sessions`).
    killed: AtomicBool,
    /// Set while a blocking command of the client's waits on its node (see [`Blocked`]).
    blocked: AtomicBool,
    state: Mutex<ClientState>,
}

/// The names CLIENT LIST shows: who the client is and what it calls itself.
#[derive(Clone, Default)]
struct Names {
    tenant: Option<String>,
    /// `CLIENT SETNAME`.
    client: Option<String>,
    /// `CLIENT SETINFO LIB-NAME` and `LIB-VER` (Redis 7.2's): the client library and its version.
    lib_name: Option<String>,
    lib_ver: Option<String>,
}

/// The attributes of `CLIENT SETINFO`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LibAttribute {
    Name,
    Version,
}

/// What the client's transactions and subscriptions left it in, as CLIENT LIST shows it.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ClientState {
    pub channels: usize,
    pub patterns: usize,
    pub shard_channels: usize,
    /// Commands queued, while in a transaction.
    pub multi: Option<usize>,
}

impl ClientState {
    /// CLIENT LIST's `flags` (Redis' letters: P subscribed, x in MULTI, b blocked; N for none).
    fn flags(&self, blocked: bool) -> String {
        let mut flags = String::new();
        if self.channels + self.patterns + self.shard_channels > 0 {
            flags.push('P');
        }
        if self.multi.is_some() {
            flags.push('x');
        }
        if blocked {
            flags.push('b');
        }
        if flags.is_empty() {
            flags.push('N');
        }
        flags
    }
}

impl ClientInfo {
    pub(crate) fn new(id: u64, addr: SocketAddr, local_addr: SocketAddr) -> ClientInfo {
        ClientInfo {
            id,
            addr,
            local_addr,
            created: Instant::now(),
            db: AtomicU32::new(0),
            resp: AtomicU32::new(2),
            names: Mutex::new(Names::default()),
            killed: AtomicBool::new(false),
            blocked: AtomicBool::new(false),
            state: Mutex::new(ClientState::default()),
        }
    }

    /// Marks this client's connection for closing (CLIENT KILL); `Gateway::wake_sessions` then makes it look.
    pub(crate) fn kill(&self) {
        self.killed.store(true, Ordering::Release);
    }

    pub(crate) fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }

    fn names(&self) -> std::sync::MutexGuard<'_, Names> {
        self.names.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn set_tenant(&self, tenant: &str) {
        self.names().tenant = Some(tenant.to_string());
    }

    pub(crate) fn tenant(&self) -> Option<String> {
        self.names().tenant.clone()
    }

    pub(crate) fn set_name(&self, name: Option<String>) {
        self.names().client = name;
    }

    pub(crate) fn name(&self) -> Option<String> {
        self.names().client.clone()
    }

    /// `CLIENT SETINFO`: the library's name or version, `None` to clear it.
    pub(crate) fn set_lib(&self, attribute: LibAttribute, value: Option<String>) {
        let mut names = self.names();
        match attribute {
            LibAttribute::Name => names.lib_name = value,
            LibAttribute::Version => names.lib_ver = value,
        }
    }

    /// Records the client's transaction and subscription state (on the commands that change it, never per
    /// command).
    pub(crate) fn set_state(&self, state: ClientState) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = state;
    }

    /// Whether the client waits in a blocking command.
    pub(crate) fn is_blocked(&self) -> bool {
        self.blocked.load(Ordering::Acquire)
    }

    /// One line in the format of Redis' CLIENT LIST (fields the gateway does not track are given Redis'
    /// idle values): Redis 7.0's fields, then Redis 7.2's `lib-name` and `lib-ver` (empty when unset).
    pub(crate) fn describe(&self, current_command: &str) -> String {
        let names = self.names().clone();
        let state = *self.state.lock().unwrap_or_else(|e| e.into_inner());
        let multi = state
            .multi
            .map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
        let mut line = String::new();
        let _ = write!(
            line,
            "id={} addr={} laddr={} fd=-1 name={} age={} idle=0 flags={} db={} sub={} psub={} ssub={} multi={} \
             qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={} \
             user={} redir=-1 resp={} lib-name={} lib-ver={}",
            self.id,
            self.addr,
            self.local_addr,
            names.client.unwrap_or_default(),
            self.created.elapsed().as_secs(),
            state.flags(self.is_blocked()),
            self.db.load(Ordering::Relaxed),
            state.channels,
            state.patterns,
            state.shard_channels,
            multi,
            current_command,
            names.tenant.unwrap_or_else(|| "default".to_string()),
            self.resp.load(Ordering::Relaxed),
            names.lib_name.unwrap_or_default(),
            names.lib_ver.unwrap_or_default(),
        );
        line
    }
}

/// A client's blocking command, counted as blocked (CLIENT LIST's `b`, INFO's `blocked_clients`) from when
/// [`Blocked::reached`] says its node has it until the guard is dropped (its reply came, or its connection went).
/// Clients and test suites wait for a client to show as blocked before they act on what it waits for (push to the
/// list, delete the stream): counted any earlier, their command could reach the node first.
pub(crate) struct Blocked {
    client: Arc<ClientInfo>,
    metrics: Arc<Metrics>,
    counted: bool,
}

impl Blocked {
    pub(crate) fn new(client: Arc<ClientInfo>, metrics: Arc<Metrics>) -> Blocked {
        Blocked {
            client,
            metrics,
            counted: false,
        }
    }

    /// The command has been written to its node in full.
    pub(crate) fn reached(&mut self) {
        if !self.counted {
            self.counted = true;
            self.metrics.blocked_clients.fetch_add(1, Ordering::Relaxed);
            self.client.blocked.store(true, Ordering::Release);
        }
    }
}

impl Drop for Blocked {
    fn drop(&mut self) {
        if self.counted {
            self.metrics.blocked_clients.fetch_sub(1, Ordering::Relaxed);
            self.client.blocked.store(false, Ordering::Release);
        }
    }
}

#[derive(Default)]
pub(crate) struct Clients {
    by_id: Mutex<BTreeMap<u64, Arc<ClientInfo>>>,
}

impl Clients {
    pub(crate) fn add(&self, client: Arc<ClientInfo>) {
        self.lock().insert(client.id, client);
    }

    pub(crate) fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Every client of `tenant` (a tenant never sees another tenant's clients).
    pub(crate) fn of_tenant(&self, tenant: &str) -> Vec<Arc<ClientInfo>> {
        self.lock()
            .values()
            .filter(|c| c.tenant().as_deref() == Some(tenant))
            .cloned()
            .collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<ClientInfo>>> {
        self.by_id.lock().unwrap_or_else(|e| e.into_inner())
    }
}
