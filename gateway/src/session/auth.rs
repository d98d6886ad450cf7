//! Who a client is: `AUTH` and `HELLO`, the tenant it is served as (its place among the tenant's connections and
//! its route resolved on this worker), and following the tenant across route changes.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use super::local::valid_name;
use super::{MAX_CLIENTS, Session, WRONGPASS};
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
    let place = tenant.runtime.lease_connection(max, tenant.fleet_limits);
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
            _ => return self.client.local_error(started, "ERR syntax error"),
        };
        match self.try_auth(user, password) {
            AuthOutcome::Ok => self
                .client
                .local_reply(started, |out| resp::simple(out, b"OK")),
            failure => self.auth_failed(started, failure),
        }
    }

    /// Authenticates as `user` (`None`, or `default`: whichever tenant the password selects) with `password`.
    pub(super) fn try_auth(&mut self, user: Option<&[u8]>, password: &[u8]) -> AuthOutcome {
        let snapshot = self.client.worker.gateway.snapshot();
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
        if !found.admits(self.client.info.addr.ip()) {
            tracing::debug!(client = %self.client.info.addr, tenant = %found.name, "AUTH refused to the client's address (ip_allow/ip_deny)");
            return AuthOutcome::AddressRefused;
        }
        let already_here = self
            .client
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
            self.client.db = 0;
            self.client.info.db.store(0, Ordering::Relaxed);
            self.stateful.watching = None;
            self.client.info.set_name(None);
        }
        let kept = self.client.leave_tenant();
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
        let gateway = &self.client.worker.gateway;
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
        let ip = self.client.info.addr.ip();
        let penalty = gateway.admission.failed(ip, now);
        if let Some(suppressed) = gateway.admission.log_failure(now) {
            tracing::warn!(
                client = %self.client.info.addr,
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
                self.client
                    .local_error(started, MAX_CLIENTS.trim_start_matches('-').trim_end());
                self.client.closing = true;
            }
            AuthOutcome::AddressRefused => {
                let text = address_refused(self.client.info.addr.ip());
                self.client.local_error(started, &text);
            }
            AuthOutcome::Ok | AuthOutcome::WrongPassword => self.client.local_error(
                started,
                &wrong_password(&self.client.worker.gateway.snapshot()),
            ),
        }
    }

    /// `HELLO [protover [AUTH user pass] [SETNAME name]]`: RESP2 or RESP3, for the rest of the connection or
    /// until the next `HELLO`.
    pub(super) fn hello(&mut self, started: Instant, args: &[Bytes]) {
        let protocol = match args.get(1).map(|version| hello_protocol(version)) {
            None => self.client.protocol,
            Some(Ok(protocol)) => protocol,
            Some(Err(text)) => return self.client.local_error(started, text),
        };
        if protocol != self.client.protocol && self.stateful.subscribed() {
            // Its node's connection speaks the protocol it was opened with (see `session::stateful::pubsub`).
            return self.client.local_error(
                started,
                "ERR the gateway does not switch the protocol of a subscribed connection; unsubscribe first",
            );
        }
        let options = match HelloOptions::parse(args.get(2..).unwrap_or_default()) {
            Ok(options) => options,
            Err(text) => return self.client.local_error(started, &text),
        };
        if let Some((user, password)) = options.credentials {
            match self.try_auth(Some(user), password) {
                AuthOutcome::Ok => {}
                failure => return self.auth_failed(started, failure),
            }
        }
        if self.client.tenant.is_none() {
            return self.client.local_error(started, "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
        }
        if let Some(name) = options.setname {
            self.client.set_name(name);
        }
        self.set_protocol(protocol);
        let id = self.client.info.id;
        self.client
            .local_reply(started, |out| hello_reply(out, protocol, id));
    }

    /// Enters `tenant`, authenticated with `credential` (see `Client::enter_tenant`): the place is counted as the
    /// credential's, which was used now.
    pub(super) fn enter_tenant(
        &mut self,
        tenant: Arc<Tenant>,
        credential: Option<String>,
        place: Lease,
    ) {
        let place = place.authenticated(credential.as_deref());
        self.client.enter_tenant(tenant, credential, place);
        self.entered();
    }

    /// Follows the tenant into the current snapshot (see `Client::refresh_tenant`).
    pub(super) fn refresh_tenant(&mut self) {
        if self.client.refresh_tenant() {
            self.entered();
        }
    }

    /// Switches the session to database `db` (see `Client::set_db`).
    pub(super) fn set_db(&mut self, db: u32) {
        if self.client.set_db(db) {
            self.entered();
        }
    }

    /// Switches the session to `protocol` (see `Client::set_protocol`).
    pub(super) fn set_protocol(&mut self, protocol: Protocol) {
        if self.client.set_protocol(protocol) {
            self.entered();
        }
    }

    /// The session's side of a tenant the client entered, or entered again (another route, database or
    /// protocol): the tenant's tracking thresholds, its monitors for a client in monitor mode, and the timers
    /// (the AUTH deadline is over, an idle timeout may start).
    fn entered(&mut self) {
        self.caching.follow(&self.client);
        if let Some(view) = &self.client.tenant {
            self.tracking
                .track_tenant(&self.client, &view.tenant.tracking);
        }
        if self.monitor.is_some() {
            self.monitor_tenant();
        }
        self.rearm = true;
    }
}

/// The protocol `HELLO protover` asks for, or Redis' error.
fn hello_protocol(version: &[u8]) -> Result<Protocol, &'static str> {
    match resp::parse_int(version) {
        Some(2) => Ok(Protocol::Resp2),
        Some(3) => Ok(Protocol::Resp3),
        Some(_) => Err("NOPROTO unsupported protocol version"),
        None => Err("ERR Protocol version is not an integer or out of range"),
    }
}

/// `HELLO`'s options after the protocol version, read as Redis reads them: every option (and a name) is checked
/// before the credentials are tried, and the name is set once the connection is authenticated.
#[derive(Debug, Default, PartialEq)]
struct HelloOptions<'a> {
    credentials: Option<(&'a [u8], &'a [u8])>,
    setname: Option<&'a [u8]>,
}

impl<'a> HelloOptions<'a> {
    fn parse(options: &'a [Bytes]) -> Result<HelloOptions<'a>, String> {
        let mut parsed = HelloOptions::default();
        let mut rest = options;
        while let Some((option, after)) = rest.split_first() {
            match (&option.to_ascii_lowercase()[..], after) {
                (b"auth", [user, password, ..]) => {
                    parsed.credentials = Some((user, password));
                    rest = &after[2..];
                }
                (b"setname", [name, ..]) => {
                    valid_name(name).map_err(str::to_string)?;
                    parsed.setname = Some(name);
                    rest = &after[1..];
                }
                _ => {
                    let option = String::from_utf8_lossy(option);
                    return Err(format!("ERR Syntax error in HELLO option '{option}'"));
                }
            }
        }
        Ok(parsed)
    }
}

/// `HELLO`'s reply: the gateway as the one standalone Redis its clients see.
fn hello_reply(out: &mut BytesMut, protocol: Protocol, id: u64) {
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
}

/// The error of an AUTH with the right password from an address the tenant's `ip_allow`/`ip_deny` refuse.
pub(super) fn address_refused(address: std::net::IpAddr) -> String {
    format!("ERR client address {address} may not authenticate as this tenant (ip_allow/ip_deny)")
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

/// The error of an `AUTH` with a wrong password, in Redis' words.
fn wrong_password(snapshot: &Snapshot) -> String {
    if !snapshot.requires_auth() && snapshot.tenants().len() == 1 {
        // Exactly what Redis says when no password is configured at all.
        "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?".to_string()
    } else {
        WRONGPASS.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(args: &[&str]) -> Result<HelloOptions<'static>, String> {
        let args: Vec<Bytes> = args.iter().map(|a| Bytes::from(a.to_string())).collect();
        let args: &'static [Bytes] = Box::leak(args.into_boxed_slice());
        HelloOptions::parse(args)
    }

    #[test]
    fn hello_reads_its_options_as_redis_does() {
        assert_eq!(options(&[]), Ok(HelloOptions::default()));
        let parsed = options(&["auth", "u", "p", "SETNAME", "n"]).unwrap();
        assert_eq!(parsed.credentials, Some((&b"u"[..], &b"p"[..])));
        assert_eq!(parsed.setname, Some(&b"n"[..]));
        // The last of a repeated option wins, as in Redis.
        let parsed = options(&["SETNAME", "a", "setname", "b"]).unwrap();
        assert_eq!(parsed.setname, Some(&b"b"[..]));
        // A name is checked before any credentials are tried; a short option is a syntax error.
        assert_eq!(
            options(&["AUTH", "u", "p", "SETNAME", "a b"]).unwrap_err(),
            "ERR Client names cannot contain spaces, newlines or special characters."
        );
        assert_eq!(
            options(&["AUTH", "u"]).unwrap_err(),
            "ERR Syntax error in HELLO option 'AUTH'"
        );
        assert_eq!(
            options(&["SETNAME"]).unwrap_err(),
            "ERR Syntax error in HELLO option 'SETNAME'"
        );
        assert_eq!(hello_protocol(b"3"), Ok(Protocol::Resp3));
        assert_eq!(
            hello_protocol(b"4"),
            Err("NOPROTO unsupported protocol version")
        );
        assert_eq!(
            hello_protocol(b"x"),
            Err("ERR Protocol version is not an integer or out of range")
        );
    }
}
