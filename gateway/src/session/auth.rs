//! Who a client is: `AUTH` and `HELLO`, the tenant it is served as (its place among the tenant's connections and
//! its route resolved on this worker), and following the tenant across route changes.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::Bytes;

use super::local::valid_name;
use super::{MAX_CLIENTS, Session, TenantView, WRONGPASS};
use crate::net::Stream;
use crate::resp::{self, Protocol};
use crate::route::{Snapshot, Tenant};
use crate::tenant::Lease;

pub(super) enum AuthOutcome {
    Ok,
    WrongPassword,
    TooManyClients,
    /// The password is right, but the tenant's `ip_allow`/`ip_deny` refuse the client's address: no failed
    /// password, so no penalty.
    AddressRefused,
}

/// A place among `tenant`'s client connections, or `None` when its `max_connections` are taken; counted as a
/// connection the tenant received, or rejected (INFO's stats).
pub(super) fn tenant_place(tenant: &Tenant) -> Option<Lease> {
    let max = tenant.limits.max_connections.map(i64::from);
    let place = tenant.runtime.lease_connection(max);
    match place {
        Some(_) => tenant.runtime.counters.connections_received.add(1),
        None => tenant.runtime.counters.connections_rejected.add(1),
    }
    place
}

impl Session {
    /// `AUTH password` or `AUTH tenant password`. The tenant name `default` (what clients send when they only
    /// know a password) matches any tenant.
    pub(super) fn auth(&mut self, started: Instant, args: &[Bytes]) {
        let (user, password) = match args {
            [_, password] => (None, password),
            [_, user, password] => (Some(&user[..]), password),
            _ => return self.local_error(started, "ERR syntax error"),
        };
        match self.try_auth(user, password) {
            AuthOutcome::Ok => self.local_reply(started, |out| resp::simple(out, b"OK")),
            failure => self.auth_failed(started, failure),
        }
    }

    /// Authenticates as `user` (`None`, or `default`: whichever tenant the password selects) with `password`.
    pub(super) fn try_auth(&mut self, user: Option<&[u8]>, password: &[u8]) -> AuthOutcome {
        let snapshot = self.worker.gateway.snapshot();
        let tenant = user.filter(|u| *u != b"default");
        let (found, digest) = match snapshot.authenticate(tenant, password) {
            Some((found, digest)) => (found, Some(digest)),
            None => match snapshot.open_tenant() {
                // The open tenant (no password) is Redis' `default` user without a password (`nopass`): named,
                // it accepts any password, as Redis does.
                Some(open) if user == Some(b"default") => (open, None),
                _ => {
                    self.note_auth_failure(&snapshot, tenant);
                    return AuthOutcome::WrongPassword;
                }
            },
        };
        if !found.admits(self.info.addr.ip()) {
            tracing::debug!(client = %self.info.addr, tenant = %found.name, "AUTH refused to the client's address (ip_allow/ip_deny)");
            return AuthOutcome::AddressRefused;
        }
        let already_here = self
            .tenant
            .as_ref()
            .is_some_and(|v| Arc::ptr_eq(&v.tenant, found));
        let place = match already_here {
            true => None,
            false => match tenant_place(found) {
                Some(place) => Some(place),
                None => return AuthOutcome::TooManyClients,
            },
        };
        if !self.ticket.authenticate() {
            return AuthOutcome::TooManyClients;
        }
        let found = Arc::clone(found);
        if !already_here {
            // Nothing of the previous tenant's carries over: its database, watched keys, client name.
            self.db = 0;
            self.info.db.store(0, Ordering::Relaxed);
            self.stateful.watching = None;
            self.info.set_name(None);
        }
        let kept = self.leave_tenant();
        if let Some(place) = place.or(kept) {
            self.enter_tenant(found, digest, place);
        }
        AuthOutcome::Ok
    }

    /// Counts a failed AUTH for the tenant it named, logs it (at a bounded rate) and slows the connection when
    /// its address fails too often (see `admission`).
    pub(super) fn note_auth_failure(
        &mut self,
        snapshot: &crate::route::Snapshot,
        tenant: Option<&[u8]>,
    ) {
        let gateway = &self.worker.gateway;
        let named = tenant
            .and_then(|name| std::str::from_utf8(name).ok())
            .and_then(|name| snapshot.tenant_by_name(name));
        match named {
            Some(tenant) => tenant
                .runtime
                .counters
                .auth_failures
                .fetch_add(1, Ordering::Relaxed),
            None => gateway
                .metrics
                .auth_failures_unknown
                .fetch_add(1, Ordering::Relaxed),
        };
        let now = Instant::now();
        let ip = self.info.addr.ip();
        let penalty = gateway.admission.failed(ip, now);
        if let Some(suppressed) = gateway.admission.log_failure(now) {
            tracing::warn!(
                client = %self.info.addr,
                tenant = named.map_or("-", |t| t.name.as_str()),
                slowed_ms = penalty.map_or(0, |p| p.as_millis()),
                suppressed,
                "failed AUTH"
            );
        }
        self.penalty = penalty.map(|wait| now + wait);
        self.rearm |= self.penalty.is_some();
    }

    pub(super) fn auth_failed(&mut self, started: Instant, outcome: AuthOutcome) {
        match outcome {
            AuthOutcome::TooManyClients => {
                self.local_error(started, MAX_CLIENTS.trim_start_matches('-').trim_end());
                self.closing = true;
            }
            AuthOutcome::AddressRefused => {
                let text = address_refused(self.info.addr.ip());
                self.local_error(started, &text);
            }
            AuthOutcome::Ok | AuthOutcome::WrongPassword => {
                self.local_error(started, &self.auth_failure())
            }
        }
    }

    pub(super) fn auth_failure(&self) -> String {
        let snapshot = self.worker.gateway.snapshot();
        if !snapshot.requires_auth() && snapshot.tenants().len() == 1 {
            // Exactly what Redis says when no password is configured at all.
            "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?".to_string()
        } else {
            WRONGPASS.to_string()
        }
    }

    /// `HELLO [protover [AUTH user pass] [SETNAME name]]`: RESP2 or RESP3, for the rest of the connection or
    /// until the next `HELLO`.
    pub(super) fn hello(&mut self, started: Instant, args: &[Bytes]) {
        let mut protocol = self.protocol;
        if let Some(version) = args.get(1) {
            match resp::parse_int(version) {
                Some(2) => protocol = Protocol::Resp2,
                Some(3) => protocol = Protocol::Resp3,
                Some(_) => {
                    return self.local_error(started, "NOPROTO unsupported protocol version");
                }
                _ => {
                    return self.local_error(
                        started,
                        "ERR Protocol version is not an integer or out of range",
                    );
                }
            }
        }
        if protocol != self.protocol && self.subscribed() {
            // Its node's connection speaks the protocol it was opened with (see `session::pubsub`).
            return self.local_error(
                started,
                "ERR the gateway does not switch the protocol of a subscribed connection; unsubscribe first",
            );
        }
        // As Redis: every option is read (and a name checked) before the credentials are tried, and the name is set
        // once the connection is authenticated.
        let mut i = 2;
        let mut credentials = None;
        let mut setname = None;
        while i < args.len() {
            let option = args[i].to_ascii_lowercase();
            match (&option[..], args.len() - i - 1) {
                (b"auth", 2..) => {
                    credentials = Some((&args[i + 1], &args[i + 2]));
                    i += 3;
                }
                (b"setname", 1..) => {
                    if let Err(e) = valid_name(&args[i + 1]) {
                        return self.local_error(started, e);
                    }
                    setname = Some(&args[i + 1]);
                    i += 2;
                }
                _ => {
                    let option = String::from_utf8_lossy(&args[i]);
                    return self.local_error(
                        started,
                        &format!("ERR Syntax error in HELLO option '{option}'"),
                    );
                }
            }
        }
        if let Some((user, password)) = credentials {
            match self.try_auth(Some(user), password) {
                AuthOutcome::Ok => {}
                failure => return self.auth_failed(started, failure),
            }
        }
        if self.tenant.is_none() {
            return self.local_error(started, "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
        }
        if let Some(name) = setname {
            self.set_name(name);
        }
        self.set_protocol(protocol);
        let id = self.info.id;
        self.local_reply(started, |out| {
            resp::map_header(out, 7, protocol);
            for (key, value) in [("server", "redis"), ("version", crate::REDIS_VERSION)] {
                resp::bulk(out, key.as_bytes());
                resp::bulk(out, value.as_bytes());
            }
            resp::bulk(out, b"proto");
            resp::integer(out, if protocol == Protocol::Resp3 { 3 } else { 2 });
            resp::bulk(out, b"id");
            resp::integer(out, id as i64);
            for (key, value) in [("mode", "standalone"), ("role", "master")] {
                resp::bulk(out, key.as_bytes());
                resp::bulk(out, value.as_bytes());
            }
            resp::bulk(out, b"modules");
            resp::array_header(out, 0);
        });
    }

    /// Picks up a new snapshot at the first command after it was published.
    pub(super) fn refresh_tenant(&mut self) {
        let generation = self.worker.gateway.generation();
        let Some(view) = &self.tenant else { return };
        if view.generation == generation {
            return;
        }
        let snapshot = self.worker.gateway.snapshot();
        let credential = view.credential.clone();
        let current = snapshot
            .tenant_by_name(&view.tenant.name)
            .filter(|tenant| match &credential {
                Some(digest) => tenant.credentials.contains(digest),
                None => tenant.credentials.is_empty(),
            })
            .cloned();
        // A delta carries unchanged tenants over as they are: the route resolved for this one still holds.
        if let (Some(tenant), Some(view)) = (&current, &mut self.tenant)
            && Arc::ptr_eq(tenant, &view.tenant)
        {
            view.generation = generation;
            return;
        }
        let address = self.info.addr.ip();
        if current
            .as_ref()
            .is_some_and(|tenant| !tenant.admits(address))
        {
            tracing::info!(client = %self.info.addr, "closing a connection whose address the tenant no longer admits (ip_allow/ip_deny)");
            self.leave_tenant();
            self.closing = true;
            return;
        }
        let place = self.leave_tenant();
        match (current, place) {
            (Some(tenant), Some(place)) if tenant.databases().contains(&i64::from(self.db)) => {
                self.enter_tenant(tenant, credential, place)
            }
            // Moving the client to another database behind its back could send its writes anywhere.
            (Some(_), _) => {
                tracing::info!(client = %self.info.addr, db = self.db, "closing a connection whose database the tenant no longer owns");
                self.closing = true;
            }
            (None, _) => {
                tracing::info!(client = %self.info.addr, "closing a connection whose tenant or credential was removed");
                self.closing = true;
            }
        }
    }

    pub(super) fn enter_tenant(
        &mut self,
        tenant: Arc<Tenant>,
        credential: Option<String>,
        place: Lease,
    ) {
        let generation = self.worker.gateway.generation();
        let route = self.worker.resolve(&tenant, self.db, self.protocol);
        // Requests a policy may refuse or rewrite are each looked at: they never take the direct path.
        let direct = route.direct().filter(|_| {
            !tenant
                .policies
                .as_ref()
                .is_some_and(|p| p.checks_commands())
        });
        self.info.set_tenant(&tenant.name);
        self.track_tenant(&tenant.tracking);
        self.tenant = Some(TenantView {
            tenant,
            generation,
            route,
            direct,
            credential,
            place,
        });
        if self.monitor.is_some() {
            self.monitor_tenant();
        }
        self.rearm = true; // the AUTH deadline is over, an idle timeout may start
    }

    /// Leaves the tenant; its place among the tenant's connections is returned, to keep or to drop.
    pub(super) fn leave_tenant(&mut self) -> Option<Lease> {
        self.tenant.take().map(|view| view.place)
    }
}

/// The error of an AUTH with the right password from an address the tenant's `ip_allow`/`ip_deny` refuse.
pub(super) fn address_refused(address: std::net::IpAddr) -> String {
    format!("ERR client address {address} may not authenticate as this tenant (ip_allow/ip_deny)")
}

impl Session {
    /// Switches the session to database `db`, re-resolving its route there.
    pub(super) fn set_db(&mut self, db: u32) {
        if db == self.db {
            return;
        }
        self.db = db;
        self.info.db.store(self.db, Ordering::Relaxed);
        self.reresolve();
    }

    /// Switches the session to `protocol`: its route is resolved again, to backend connections that speak it.
    pub(super) fn set_protocol(&mut self, protocol: Protocol) {
        if protocol != self.protocol {
            self.protocol = protocol;
            let resp = if protocol == Protocol::Resp3 { 3 } else { 2 };
            self.info.resp.store(resp, Ordering::Relaxed);
            self.reresolve();
        }
    }

    /// Resolves the tenant's route again, for the session's database and protocol.
    pub(super) fn reresolve(&mut self) {
        if let Some((tenant, credential)) = self
            .tenant
            .as_ref()
            .map(|v| (Arc::clone(&v.tenant), v.credential.clone()))
            && let Some(place) = self.leave_tenant()
        {
            self.enter_tenant(tenant, credential, place);
        }
    }
}

/// The tenant a connection has before any AUTH, with its credential's digest: its client certificate's, else the
/// open tenant. A tenant that does not admit the client's `address` leaves it unauthenticated: it may still AUTH
/// as another.
pub(super) fn preset_tenant(
    stream: &Stream,
    snapshot: &Snapshot,
    address: std::net::IpAddr,
) -> Option<(Arc<Tenant>, Option<String>)> {
    match certified(stream, snapshot) {
        Some((tenant, digest)) => Some((Arc::clone(tenant), Some(digest))),
        None => snapshot
            .open_tenant()
            .map(|tenant| (Arc::clone(tenant), None)),
    }
    .filter(|(tenant, _)| tenant.admits(address))
}

/// The tenant a TLS client's certificate authenticates (see `switchyard_schemas::ClientCertificate`), with the
/// credential's digest.
fn certified<'a>(stream: &Stream, snapshot: &'a Snapshot) -> Option<(&'a Arc<Tenant>, String)> {
    let Stream::Tls(tls) = stream else {
        return None;
    };
    let leaf = tls.peer_leaf()?;
    snapshot.authenticate_certificate(switchyard_runtime::x509::subject_public_key_info(&leaf)?)
}
