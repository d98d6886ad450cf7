//! One client connection: reads pipelined requests, answers the few the gateway owns, forwards the rest, and
//! writes every reply back in request order, coalesced into as few writes as possible.

use std::cell::Cell;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::net::TcpStream;

use crate::admission::{MAX_CLIENTS, Ticket};
use crate::clients::ClientInfo;
use crate::cmd::{self, Command};
use crate::net::Stream;
use crate::proxy_protocol::client_address;
use crate::reply::ReplyQueue;
use crate::resp::Protocol;
use crate::worker::Worker;
use auth::{preset_tenant, tenant_place};
use client::Client;
use client::Replying;
use connection::Connection;

mod auth;
mod client;
mod client_tracking;
mod connection;
mod direct;
#[cfg(debug_assertions)]
mod fault;
mod info;
mod local;
mod monitor;
mod narrow;
mod near;
mod output;
mod readiness;
mod stateful;
mod steps;
mod tenant_view;
#[cfg(test)]
mod tests;
mod tracking;

/// Requests of one client in flight or with replies not yet written: beyond them the gateway dispatches nothing
/// more of that client's, and reads nothing more from it. Deep enough for any pipeline to run at full speed; small
/// enough that replies a client does not read cannot pile up (a 100 KB value each: 13 MB at most, before the
/// output buffer limits).
const MAX_OUTSTANDING: usize = 128;

/// Replies a client has not taken from its socket beyond which the gateway stops reading from it.
const MAX_UNREAD_WHILE_READING: usize = 1024 * 1024;

/// Input a client may send while a request of it is parked (see `stateful`): reading goes on, so that a client
/// that hangs up while blocked is noticed, but only this far.
const MAX_PARKED_INPUT: usize = 64 * 1024;

/// Initial size of a client's input and output buffers: small, so that idle connections cost little; they grow
/// geometrically for pipelines and large values.
const BUFFER_SIZE: usize = 4096;

const CLUSTER_DISABLED: &str = "ERR This instance has cluster support disabled";
const NOAUTH: &str = "NOAUTH Authentication required.";
const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

/// One client's session: the client (`client`), the states a command may open on it (transactions,
/// subscriptions, blocking commands: `stateful`; `MONITOR`), its side of tracking, and its place among the
/// gateway's connections. Its methods are the steps every request takes (`steps`), the direct path (`direct`),
/// authentication and the tenant it gives (`auth`), and the commands that change several of these at once.
pub(crate) struct Session {
    client: Client,
    /// Commands forwarded on the direct path and not yet added to the tenant's counters, all of one command: a
    /// pipeline of one command updates the shared counter once per read, not once per command.
    uncounted: Cell<(Option<Command>, u64)>,
    /// Dedicated connections and the state they serve (blocking commands, transactions, subscriptions).
    stateful: stateful::Stateful,
    /// The connection's place among the gateway's clients (see `admission`).
    ticket: Ticket,
    /// Set after a failed AUTH from an address that fails too often: nothing more is read or dispatched before.
    penalty: Option<Instant>,
    /// The connection's timer must be set again (see `next_deadline`).
    rearm: bool,
    /// Set in MONITOR mode.
    monitor: Option<monitor::Monitoring>,
    /// The hot-key sample's countdown and the thresholds (see `tracking`).
    tracking: tracking::SessionTracking,
    /// Its side of its tenant's near cache (see `near`).
    near: near::NearState,
    /// The client's `CLIENT TRACKING` (see `client_tracking`).
    caching: client_tracking::ClientCaching,
}

/// Serves a client connection accepted on the plain listener, or on the TLS one (`tls`).
pub(crate) async fn serve(worker: Rc<Worker>, stream: std::net::TcpStream, tls: bool) {
    let gateway = Arc::clone(&worker.gateway);
    let metrics = &gateway.metrics;
    let tcp = match stream
        .set_nonblocking(true)
        .and_then(|()| TcpStream::from_std(stream))
    {
        Ok(tcp) => tcp,
        Err(e) => return tracing::warn!("cannot adopt a client socket: {e}"),
    };
    let _ = tcp.set_nodelay(true);
    if let Some(idle) = gateway.config.clients.tcp_keepalive {
        let keepalive = socket2::TcpKeepalive::new().with_time(idle);
        let _ = socket2::SockRef::from(&tcp).set_tcp_keepalive(&keepalive);
    }
    let (Ok(addr), Ok(local_addr)) = (tcp.peer_addr(), tcp.local_addr()) else {
        return;
    };
    // A PROXY header or a TLS handshake holds a place of a connection that has not authenticated: slow ones are
    // capped and timed out like connections that never AUTH.
    let mut handshaking = None;
    if gateway.config.proxy_protocol || (tls && gateway.listener_tls.is_some()) {
        let Some(ticket) = gateway.admission.admit(false, addr.ip()) else {
            metrics.connections_rejected.fetch_add(1, Ordering::Relaxed);
            return;
        };
        handshaking = Some(ticket);
    }
    let mut tcp = tcp;
    let addr = match gateway.config.proxy_protocol {
        true => match client_address(&mut tcp, addr, &gateway, &mut handshaking, tls).await {
            Some(client) => client,
            None => return,
        },
        false => addr,
    };
    let stream = match (tls, &gateway.listener_tls) {
        (true, Some(listener)) => match listener.accept(tcp, gateway.config.auth_timeout).await {
            Ok(tls) => Stream::Tls(Box::new(tls)),
            Err(e) => {
                metrics
                    .tls_handshake_failures
                    .fetch_add(1, Ordering::Relaxed);
                return tracing::debug!(client = %addr, "{e}");
            }
        },
        _ => Stream::Plain(tcp),
    };
    metrics.connections_total.fetch_add(1, Ordering::Relaxed);
    let preset = preset_tenant(&stream, &gateway.snapshot(), addr.ip());
    let open_place = preset.as_ref().map(|(tenant, _)| tenant_place(tenant));
    let admitted = match (&open_place, handshaking) {
        (Some(None), _) => None, // the tenant's max_connections are taken
        (_, None) => gateway.admission.admit(preset.is_some(), addr.ip()),
        (_, Some(mut ticket)) => (preset.is_none() || ticket.authenticate()).then_some(ticket),
    };
    let Some(ticket) = admitted else {
        metrics.connections_rejected.fetch_add(1, Ordering::Relaxed);
        let _ = stream.write_all(MAX_CLIENTS.as_bytes()).await;
        return;
    };
    let info_id = gateway.next_client_id();
    let info = Arc::new(ClientInfo::new(
        info_id,
        (addr, local_addr, stream.as_raw_fd()),
        worker.client_tracking.mailbox(),
    ));
    gateway.clients.add(Arc::clone(&info));
    metrics.connections_open.fetch_add(1, Ordering::Relaxed);
    let client = Client {
        worker,
        info,
        tenant: None,
        db: 0,
        protocol: Protocol::Resp2,
        replies: Rc::new(ReplyQueue::default()),
        closing: false,
        keys: Vec::with_capacity(8),
        places: Vec::with_capacity(8),
        commands: cmd::LookupCache::new(crate::tenancy::policy),
        random: Cell::new(0x9E37_79B9_7F4A_7C15 ^ info_id),
        replying: Replying::On,
    };
    client
        .worker
        .client_tracking
        .open_port(&client.info, &client.replies);
    let mut session = Session {
        client,
        uncounted: Cell::new((None, 0)),
        stateful: stateful::Stateful::default(),
        ticket,
        penalty: None,
        rearm: false,
        monitor: None,
        tracking: tracking::SessionTracking::new(gateway.config.tracking),
        near: near::NearState::default(),
        caching: client_tracking::ClientCaching::default(),
    };
    session
        .client
        .replies
        .keep_requests(gateway.config.tracking.keeps_requests);
    if let (Some((tenant, credential)), Some(Some(place))) = (preset, open_place) {
        session.enter_tenant(tenant, credential, place);
    }
    if let Err(e) = Connection::new(session).run(stream, addr).await {
        tracing::debug!(client = %addr, "client connection ended: {e}");
    }
}
