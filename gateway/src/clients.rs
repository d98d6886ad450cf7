//! The registry of connected clients, for CLIENT LIST / CLIENT INFO and INFO's clients section.
//!
//! Sessions run on several worker threads; another session's fields are read from its [`ClientInfo`]. What changes
//! per command (the command, when the client was last active, its input and unread output) is one relaxed atomic
//! store each, per read batch; names and the stateful-command state (subscriptions, MULTI, blocking) sit behind
//! locks taken only by the commands that change them and by CLIENT LIST.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::cmd;

use crate::metrics::Metrics;

pub(crate) struct ClientInfo {
    pub id: u64,
    pub addr: SocketAddr,
    pub local_addr: SocketAddr,
    /// The gateway's socket of the client.
    pub fd: i32,
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
    /// Set by CLIENT UNBLOCK from another connection: how the session answers its blocked command when woken.
    unblock: AtomicU8,
    state: Mutex<ClientState>,
    /// The last command the client ran: its `Command` plus one, 0 before the first.
    command: AtomicUsize,
    /// `clock()` when the client last sent something.
    active: AtomicU32,
    /// As of the client's last read: bytes read and not parsed yet (low half) and the room left in its input
    /// buffer (high half).
    input: AtomicU64,
    /// Reply bytes the client has not read (nonzero only while its socket does not take them).
    unread: AtomicU64,
    /// `NO_EVICT`, `MONITOR`.
    flags: AtomicU8,
    /// Where invalidations redirected to this client from another worker go (see `client_tracking`).
    pub mailbox: Mailbox,
}

/// A worker's inbox, as the clients of other workers reach it: an invalidation redirected to one of its clients,
/// with the client's id (see `client_tracking`).
pub(crate) type Mailbox = tokio::sync::mpsc::UnboundedSender<(u64, Bytes)>;

const NO_EVICT: u8 = 1;
const MONITOR: u8 = 2;

/// How CLIENT UNBLOCK wants a blocked command answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unblock {
    /// As if its timeout had passed.
    Timeout = 1,
    /// `-UNBLOCKED client unblocked via CLIENT UNBLOCK`.
    Error = 2,
}

/// Seconds since the gateway's clock started (`start_clock`), as of its last tick: what a session records per
/// read batch costs one load, as Redis' cached `server.unixtime` does.
pub(crate) fn clock() -> u32 {
    CLOCK.load(Ordering::Relaxed)
}

static CLOCK: AtomicU32 = AtomicU32::new(0);

/// Starts advancing `clock()` ten times a second, once per process, on a thread of its own: a tick is a sleep
/// and a store, where a runtime's timer would wake a worker.
pub(crate) fn start_clock() -> std::io::Result<()> {
    static STARTED: OnceLock<bool> = OnceLock::new();
    let started = STARTED.get_or_init(|| {
        let epoch = Instant::now();
        std::thread::Builder::new()
            .name("switchyard-clock".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(Duration::from_millis(100));
                    let seconds = u32::try_from(epoch.elapsed().as_secs()).unwrap_or(u32::MAX);
                    CLOCK.store(seconds, Ordering::Relaxed);
                }
            })
            .is_ok()
    });
    match started {
        true => Ok(()),
        false => Err(std::io::Error::other("cannot start the clock thread")),
    }
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
    /// Bytes of the commands queued.
    pub multi_mem: usize,
    /// Bytes of the arguments of the blocking command the client waits in, while it waits.
    pub blocking_argv: Option<usize>,
}

impl ClientState {
    /// CLIENT LIST's `flags` in Redis' order (O monitor, P subscribed, x in MULTI, b blocked, e no-evict; N for
    /// none).
    fn flags(&self, info: u8, blocked: bool) -> String {
        let mut flags = String::new();
        if info & MONITOR != 0 {
            flags.push('O');
        }
        if self.channels + self.patterns + self.shard_channels > 0 {
            flags.push('P');
        }
        if self.multi.is_some() {
            flags.push('x');
        }
        if blocked {
            flags.push('b');
        }
        if info & NO_EVICT != 0 {
            flags.push('e');
        }
        if flags.is_empty() {
            flags.push('N');
        }
        flags
    }
}

impl ClientInfo {
    pub(crate) fn new(
        id: u64,
        (addr, local_addr, fd): (SocketAddr, SocketAddr, i32),
        mailbox: Mailbox,
    ) -> ClientInfo {
        ClientInfo {
            id,
            addr,
            local_addr,
            fd,
            created: Instant::now(),
            db: AtomicU32::new(0),
            resp: AtomicU32::new(2),
            names: Mutex::new(Names::default()),
            killed: AtomicBool::new(false),
            blocked: AtomicBool::new(false),
            unblock: AtomicU8::new(0),
            state: Mutex::new(ClientState::default()),
            command: AtomicUsize::new(0),
            active: AtomicU32::new(clock()),
            input: AtomicU64::new(0),
            unread: AtomicU64::new(0),
            flags: AtomicU8::new(0),
            mailbox,
        }
    }

    /// Records the command the client runs (per command on the slow path, per read batch on the direct path).
    #[inline]
    pub(crate) fn set_command(&self, command: cmd::Command) {
        self.command.store(command as usize + 1, Ordering::Relaxed);
    }

    /// The last command the client ran.
    pub(crate) fn command(&self) -> Option<&'static cmd::CommandSpec> {
        let recorded = self.command.load(Ordering::Relaxed);
        cmd::by_index(recorded.checked_sub(1)?)
    }

    /// Records that the client sent something now.
    #[inline]
    pub(crate) fn set_active(&self) {
        self.active.store(clock(), Ordering::Relaxed);
    }

    /// Records the client's input buffer after a read batch: `len` bytes not parsed yet, `capacity` in all.
    #[inline]
    pub(crate) fn set_input(&self, len: usize, capacity: usize) {
        let free = capacity.saturating_sub(len).min(u32::MAX as usize) as u64;
        let len = len.min(u32::MAX as usize) as u64;
        self.input.store(free << 32 | len, Ordering::Relaxed);
    }

    /// Records the reply bytes the client has not read.
    pub(crate) fn set_unread(&self, bytes: usize) {
        self.unread.store(bytes as u64, Ordering::Relaxed);
    }

    fn set_flag(&self, flag: u8, on: bool) {
        if on {
            self.flags.fetch_or(flag, Ordering::Relaxed);
        } else {
            self.flags.fetch_and(!flag, Ordering::Relaxed);
        }
    }

    /// `CLIENT NO-EVICT ON|OFF`.
    pub(crate) fn set_no_evict(&self, on: bool) {
        self.set_flag(NO_EVICT, on);
    }

    /// Whether the client is in MONITOR mode.
    pub(crate) fn set_monitor(&self, on: bool) {
        self.set_flag(MONITOR, on);
    }

    /// Asks the client's session to answer its blocked command now (CLIENT UNBLOCK from another connection);
    /// `Gateway::wake_sessions` then makes it look.
    pub(crate) fn unblock(&self, how: Unblock) {
        self.unblock.store(how as u8, Ordering::Release);
    }

    /// How CLIENT UNBLOCK asked for the blocked command to be answered, once.
    pub(crate) fn take_unblock(&self) -> Option<Unblock> {
        match self.unblock.swap(0, Ordering::AcqRel) {
            1 => Some(Unblock::Timeout),
            2 => Some(Unblock::Error),
            _ => None,
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

    /// Whether the client is subscribed to a channel or pattern (Redis' `CLIENT_PUBSUB`).
    pub(crate) fn is_subscribed(&self) -> bool {
        let state = self.state();
        state.channels + state.patterns + state.shard_channels > 0
    }

    fn state(&self) -> ClientState {
        *self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One line in the format of Redis' CLIENT LIST: Redis 7.0's fields, then Redis 7.2's `lib-name` and
    /// `lib-ver` (empty when unset). `running`: the arguments of the command the client runs now, when it is the
    /// one asking (`argv-mem`). The gateway's output is one buffer, without Redis' reply buffer and list: `rbs`,
    /// `rbp` and `obl` are 0, `oll` is 1 while replies wait unread and `omem` their bytes.
    pub(crate) fn describe(&self, running: Option<&[Bytes]>) -> String {
        let names = self.names().clone();
        let state = self.state();
        let multi = state
            .multi
            .map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
        let input = self.input.load(Ordering::Relaxed);
        let (qbuf, qbuf_free) = (input & u64::from(u32::MAX), input >> 32);
        let argv_mem = running.map_or(state.blocking_argv.unwrap_or(0), |args| {
            args.iter().map(Bytes::len).sum()
        }) as u64;
        let omem = self.unread.load(Ordering::Relaxed);
        let idle = clock().saturating_sub(self.active.load(Ordering::Relaxed));
        let command = self.command().map_or("NULL", |spec| spec.name);
        let mut line = String::new();
        let _ = write!(
            line,
            "id={} addr={} laddr={} fd={} name={} age={} idle={idle} flags={} db={} sub={} psub={} ssub={} \
             multi={multi} qbuf={qbuf} qbuf-free={qbuf_free} argv-mem={argv_mem} multi-mem={} rbs=0 rbp=0 obl=0 \
             oll={} omem={omem} tot-mem={} events={} cmd={command} user={} redir=-1 resp={} lib-name={} lib-ver={}",
            self.id,
            self.addr,
            self.local_addr,
            self.fd,
            names.client.unwrap_or_default(),
            self.created.elapsed().as_secs(),
            state.flags(self.flags.load(Ordering::Relaxed), self.is_blocked()),
            self.db.load(Ordering::Relaxed),
            state.channels,
            state.patterns,
            state.shard_channels,
            state.multi_mem,
            u8::from(omem > 0),
            qbuf + qbuf_free + argv_mem + state.multi_mem as u64 + omem,
            if omem > 0 { "rw" } else { "r" },
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

    /// CLIENT KILL of another connection: takes `client` out of the registry at once, as Redis frees a killed
    /// client before it replies (the kill's reply never precedes a `CLIENT LIST` that still shows it), and marks
    /// it for closing. False when it was gone already (killed by an earlier kill, or closed), so that each client
    /// is counted by one kill only.
    pub(crate) fn kill(&self, client: &ClientInfo) -> bool {
        let removed = self.lock().remove(&client.id).is_some();
        if removed {
            client.kill();
        }
        removed
    }

    /// The client `id`, on whichever worker.
    pub(crate) fn get(&self, id: u64) -> Option<Arc<ClientInfo>> {
        self.lock().get(&id).cloned()
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
