//! The registry of connected clients, for CLIENT LIST / CLIENT INFO and INFO's clients section.
//!
//! Touched on connect, disconnect and the rare commands that change what CLIENT LIST shows (AUTH, SETNAME,
//! SELECT): never per command.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub struct ClientInfo {
    pub id: u64,
    pub addr: SocketAddr,
    pub local_addr: SocketAddr,
    pub created: Instant,
    pub db: AtomicU32,
    /// Tenant name and client name.
    names: Mutex<(Option<String>, Option<String>)>,
    /// Set off by CLIENT KILL from another connection (any worker); the session closes at once.
    kill: tokio::sync::Notify,
}

impl ClientInfo {
    pub fn new(id: u64, addr: SocketAddr, local_addr: SocketAddr) -> ClientInfo {
        ClientInfo {
            id,
            addr,
            local_addr,
            created: Instant::now(),
            db: AtomicU32::new(0),
            names: Mutex::new((None, None)),
            kill: tokio::sync::Notify::new(),
        }
    }

    /// Closes this client's connection (CLIENT KILL).
    pub fn kill(&self) {
        self.kill.notify_one();
    }

    /// Completes once the client was killed (even if that happened before the first poll).
    pub async fn killed(&self) {
        self.kill.notified().await;
    }

    fn names(&self) -> std::sync::MutexGuard<'_, (Option<String>, Option<String>)> {
        self.names.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set_tenant(&self, tenant: &str) {
        self.names().0 = Some(tenant.to_string());
    }

    pub fn tenant(&self) -> Option<String> {
        self.names().0.clone()
    }

    pub fn set_name(&self, name: Option<String>) {
        self.names().1 = name;
    }

    pub fn name(&self) -> Option<String> {
        self.names().1.clone()
    }

    /// One line in the format of Redis' CLIENT LIST (fields the gateway does not track are given Redis'
    /// idle values).
    pub fn describe(&self, current_command: &str) -> String {
        let (tenant, name) = self.names().clone();
        let mut line = String::new();
        let _ = write!(
            line,
            "id={} addr={} laddr={} fd=-1 name={} age={} idle=0 flags=N db={} sub=0 psub=0 ssub=0 multi=-1 \
             qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={} \
             user={} redir=-1 resp=2",
            self.id,
            self.addr,
            self.local_addr,
            name.unwrap_or_default(),
            self.created.elapsed().as_secs(),
            self.db.load(Ordering::Relaxed),
            current_command,
            tenant.unwrap_or_else(|| "default".to_string()),
        );
        line
    }
}

#[derive(Default)]
pub struct Clients {
    by_id: Mutex<BTreeMap<u64, Arc<ClientInfo>>>,
}

impl Clients {
    pub fn add(&self, client: Arc<ClientInfo>) {
        self.lock().insert(client.id, client);
    }

    pub fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Every client of `tenant` (a tenant never sees another tenant's clients).
    pub fn of_tenant(&self, tenant: &str) -> Vec<Arc<ClientInfo>> {
        self.lock()
            .values()
            .filter(|c| c.tenant().as_deref() == Some(tenant))
            .cloned()
            .collect()
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<ClientInfo>>> {
        self.by_id.lock().unwrap_or_else(|e| e.into_inner())
    }
}
