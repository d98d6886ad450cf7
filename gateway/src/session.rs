//! One client connection: reads pipelined requests, answers the few the gateway owns, forwards the rest, and
//! writes every reply back in request order, coalesced into as few writes as possible.

use std::cell::Cell;
use std::future::poll_fn;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::BytesMut;
use tokio::net::TcpStream;

use crate::admission::{MAX_CLIENTS, Ticket};
use crate::clients::ClientInfo;
use crate::cmd::{self, Command};
use crate::metrics::Closed;
use crate::net::Stream;
use crate::proxy_protocol::client_address;
use crate::reply::ReplyQueue;
use crate::resp::{Protocol, RequestDecoder};
use crate::route::{DirectRoute, Place, ResolvedRoute, Run, Tenant};
use crate::tenant::Lease;
use crate::worker::Worker;
use auth::{preset_tenant, tenant_place};
use output::{Output, Replying, Socket, poll_socket};

mod auth;
mod client;
mod direct;
#[cfg(debug_assertions)]
mod fault;
mod info;
mod local;
mod monitor;
mod narrow;
mod output;
mod policies;
mod pubsub;
mod readiness;
mod stateful;
mod steps;
#[cfg(test)]
mod tests;
mod tracking;
mod transaction;

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

/// The tenant a session is authenticated as, resolved against one snapshot generation.
struct TenantView {
    tenant: Arc<Tenant>,
    generation: u64,
    /// The tenant's route on this worker, for the session's database.
    route: ResolvedRoute,
    /// The route's resources, when it is a direct route (see `Session::direct`).
    direct: Option<DirectRoute>,
    /// Digest of the credential the client authenticated with (none for the tenant without passwords): when a
    /// snapshot no longer has it, the connection is closed.
    credential: Option<String>,
    /// The connection's place among the tenant's `max_connections`.
    place: Lease,
}

pub(crate) struct Session {
    worker: Rc<Worker>,
    info: Arc<ClientInfo>,
    tenant: Option<TenantView>,
    db: u32,
    /// What the client speaks (`HELLO`): its replies, and the backend connections that serve it.
    protocol: Protocol,
    replies: Rc<ReplyQueue>,
    /// Set by QUIT or a protocol error: answer what was read, then close.
    closing: bool,
    /// Key positions of the current command, and where each goes (reused: no allocation per command).
    keys: Vec<usize>,
    places: Vec<Place>,
    /// State of the random read-resource choice.
    random: Cell<u64>,
    commands: cmd::LookupCache,
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
    /// Complete requests wait in the input, read beyond `MAX_OUTSTANDING`.
    held_back: bool,
    /// When the client last sent something (for `--client-idle-timeout-s`).
    last_input: Instant,
    /// Which replies the client wants written (`CLIENT REPLY`).
    replying: Replying,
    /// CLIENT LIST shows unparsed input of this client's (see `decode`).
    input_shown: bool,
    /// Set in MONITOR mode.
    monitor: Option<monitor::Monitoring>,
    /// The hot-key sample's countdown and the thresholds (see `tracking`).
    tracking: tracking::SessionTracking,
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
        addr,
        local_addr,
        stream.as_raw_fd(),
    ));
    gateway.clients.add(Arc::clone(&info));
    metrics.connections_open.fetch_add(1, Ordering::Relaxed);
    let mut session = Session {
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
        uncounted: Cell::new((None, 0)),
        random: Cell::new(0x9E37_79B9_7F4A_7C15 ^ info_id),
        stateful: stateful::Stateful::default(),
        ticket,
        penalty: None,
        rearm: false,
        held_back: false,
        last_input: Instant::now(),
        replying: Replying::On,
        input_shown: false,
        monitor: None,
        tracking: tracking::SessionTracking::new(gateway.config.tracking),
    };
    session
        .replies
        .keep_requests(gateway.config.tracking.keeps_requests);
    if let (Some((tenant, credential)), Some(Some(place))) = (preset, open_place) {
        session.enter_tenant(tenant, credential, place);
    }
    if let Err(e) = session.run(stream, addr).await {
        tracing::debug!(client = %addr, "client connection ended: {e}");
    }
}

impl Drop for Session {
    /// Whether the session ended or its task panicked: the client leaves the registry and the counts, and replies
    /// that still come for it are dropped.
    fn drop(&mut self) {
        let gateway = &self.worker.gateway;
        self.replies.close();
        gateway.clients.remove(self.info.id);
        gateway
            .metrics
            .connections_open
            .fetch_sub(1, Ordering::Relaxed);
    }
}

impl Session {
    async fn run(&mut self, stream: Stream, addr: SocketAddr) -> std::io::Result<()> {
        let gateway = Arc::clone(&self.worker.gateway);
        let limits = gateway.config.limits;
        let clients = gateway.config.clients;
        let mut decoder = RequestDecoder::new(if self.tenant.is_some() {
            limits
        } else {
            limits.unauthenticated()
        });
        let mut input = BytesMut::with_capacity(BUFFER_SIZE);
        let mut output = Output::new();
        let control = self.worker.control.listen();
        // One timer, made once and re-armed in place (a timer made per loop costs every request), for what a
        // connection may wait for: its AUTH deadline, the end of a failed AUTH's wait (see `admission`), and the
        // bounds on replies it does not read and on its silence.
        let auth_deadline = Instant::now() + gateway.config.auth_timeout;
        let timer = tokio::time::sleep(gateway.config.auth_timeout);
        tokio::pin!(timer);
        let mut armed = true;
        loop {
            // A client is read from while it reads its replies (backpressure): a pipeline is slowed, never
            // buffered without end.
            let reading = !self.closing
                && self.penalty.is_none()
                && self.keeps_up(&output)
                && (self.stateful.parked.is_none() || input.len() < MAX_PARKED_INPUT);
            if self.rearm {
                self.rearm = false;
                let deadline = self.next_deadline(auth_deadline, &output);
                armed = deadline.is_some();
                if let Some(deadline) = deadline {
                    timer.as_mut().reset(deadline.into());
                }
            }
            let wanted = decoder.bytes_wanted(input.len());
            if input.capacity() - input.len() < 1024 || wanted > input.capacity() - input.len() {
                if input.len() >= clients.max_query_buffer {
                    return self.close(Closed::QueryBuffer, addr);
                }
                // Grow geometrically, and never by more than the client has already sent.
                input.reserve(wanted.clamp(BUFFER_SIZE, input.len().max(BUFFER_SIZE)));
            }
            tokio::select! {
                biased;
                // A subscribed client's messages arrive on their own, and so do a monitor's lines.
                () = self.replies.wait_ready(), if !self.replies.is_empty() || self.stateful.subscription.is_some() || self.monitor.is_some() => {
                    if self.monitor.as_ref().is_some_and(|m| m.overflowed()) {
                        return self.close(Closed::OutputHard, addr);
                    }
                }
                // One branch for the socket, through its own waker slots (`readable()` would queue a waiter per
                // wait): writable when replies wait for it, or input read.
                socket = poll_fn(|cx| poll_socket(&stream, cx, &mut input, reading, !output.is_empty())),
                    if reading || !output.is_empty() => {
                    match socket? {
                        Socket::Writable => {}
                        // The client hung up; replies still pending have no one to go to.
                        Socket::Read(0) => return Ok(()),
                        Socket::Read(_) if self.stateful.parked.is_none() => {
                            self.decode(&mut decoder, &mut input, addr);
                        }
                        Socket::Read(_) => {}
                    }
                }
                // A new snapshot, a CLIENT KILL or the shutdown. A revoked credential or a removed tenant
                // closes idle connections too, not only busy ones.
                () = control.notified() => {
                    if self.info.is_killed() {
                        return Ok(()); // CLIENT KILL from another connection: closed at once, as Redis does
                    }
                    self.unblock();
                    self.refresh_tenant();
                    if *self.worker.shutdown.borrow() {
                        self.closing = true;
                    }
                }
                () = &mut timer, if armed => {
                    let now = Instant::now();
                    // A failed AUTH's wait is over: what the client sent meanwhile is served.
                    if self.penalty.is_some_and(|until| until <= now) {
                        self.penalty = None;
                        if self.stateful.parked.is_none() {
                            self.decode(&mut decoder, &mut input, addr);
                        }
                    }
                    // A connection that never authenticated is closed: it holds a place.
                    if !self.ticket.is_authenticated() && auth_deadline <= now {
                        tracing::debug!(client = %addr, "closing a connection that did not authenticate in time");
                        return Ok(());
                    }
                    if output.timed_out(clients.write_timeout, now) {
                        return self.close(Closed::WriteTimeout, addr);
                    }
                    if self.idle_deadline(&output).is_some_and(|deadline| deadline <= now) {
                        return self.close(Closed::Idle, addr);
                    }
                    self.rearm = true;
                }
            }
            loop {
                let now = Instant::now();
                self.drain_replies(&mut output, now);
                if !output.is_empty() {
                    output.flush(&stream, now, &self.info)?;
                    if !output.is_empty() {
                        // The client is slow to read: the bounds on what it leaves unread apply.
                        if let Err(reason) = output.check(self.output_limit(), now) {
                            return self.close(reason, addr);
                        }
                        self.rearm = true;
                        break;
                    }
                }
                // Requests read beyond MAX_OUTSTANDING go as earlier ones are answered and written.
                if self.held_back
                    && self.keeps_up(&output)
                    && self.stateful.parked.is_none()
                    && !self.closing
                {
                    self.decode(&mut decoder, &mut input, addr);
                    continue; // what the gateway answered itself is ready now: no backend wakes the session for it
                }
                if !self.replies.is_empty() {
                    break;
                }
                self.settle();
                if self.closing {
                    stream.shutdown();
                    return Ok(());
                }
                // Every reply is written: a parked request goes now, then what was read after it.
                let Some(request) = self.stateful.parked.take() else {
                    break;
                };
                self.dispatch(request, Instant::now());
                if self.stateful.parked.is_some() {
                    break; // parked again: it waits for a subscription's confirmations, which wake the session
                }
                if !self.closing {
                    self.decode(&mut decoder, &mut input, addr);
                }
            }
        }
    }

    /// Whether the client keeps up with its replies, so that more of its requests may be read and dispatched.
    fn keeps_up(&self, output: &Output) -> bool {
        self.replies.requests() < MAX_OUTSTANDING && output.len() < MAX_UNREAD_WHILE_READING
    }

    /// Dispatches every complete request in `input`, until one is parked, the connection is closing or waits
    /// after a failed AUTH.
    fn decode(&mut self, decoder: &mut RequestDecoder, input: &mut BytesMut, addr: SocketAddr) {
        self.held_back = false;
        if self.penalty.is_some() {
            return;
        }
        let gateway = Arc::clone(&self.worker.gateway);
        let limits = gateway.config.limits;
        let unread = input.len();
        let now = Instant::now(); // one clock read per batch: per command it shows in profiles of pipelines
        self.last_input = now;
        self.info.set_active();
        let mut run = Run::new(&self.replies, now, self.info.id as usize, input.len());
        // Requests that may join the run within MAX_OUTSTANDING: counted again when others leave (a run sent as
        // the next request goes elsewhere, a request dispatched alone).
        let mut left = self.replies.room(MAX_OUTSTANDING);
        loop {
            if run.len() >= left {
                self.held_back = true;
                break;
            }
            match decoder.decode(input) {
                Ok(Some(mut frame)) => {
                    #[cfg(debug_assertions)]
                    match fault::injected(decoder, &frame) {
                        Some(fault::Fault::DropReply) => {
                            run.send();
                            drop(self.replies.reserve(now));
                            left = self.replies.room(MAX_OUTSTANDING);
                            continue;
                        }
                        Some(fault::Fault::Panic) => panic!("a fault injected by a test"),
                        None => {}
                    }
                    if let Some((to, spec)) = self.direct(decoder, &mut frame) {
                        if run.push(to, spec, frame) {
                            left = self.replies.room(MAX_OUTSTANDING);
                        }
                        continue;
                    }
                    run.send();
                    self.count_commands(); // `dispatch` may change the tenant
                    let authenticated = self.tenant.is_some();
                    self.dispatch(decoder.request(frame), now);
                    if self.tenant.is_some() != authenticated {
                        decoder.set_limits(if authenticated {
                            limits.unauthenticated()
                        } else {
                            limits
                        });
                    }
                    if self.closing || self.stateful.parked.is_some() || self.penalty.is_some() {
                        break;
                    }
                    left = self.replies.room(MAX_OUTSTANDING);
                }
                Ok(None) => break,
                Err(e) => {
                    run.send();
                    gateway
                        .metrics
                        .protocol_errors
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(client = %addr, "protocol error: {e}");
                    self.local_error(now, &format!("ERR {e}"));
                    self.closing = true;
                    break;
                }
            }
        }
        run.send();
        self.count_commands();
        if let Some(view) = &self.tenant {
            view.tenant
                .runtime
                .counters
                .received_bytes
                .add(unread.saturating_sub(input.len()) as u64);
        }
        // Shown while input waits unparsed (a partial request, a pipeline held back), and once more when none does.
        if !input.is_empty() || self.input_shown {
            self.input_shown = !input.is_empty();
            self.info.set_input(input.len(), input.capacity());
        }
    }
}
