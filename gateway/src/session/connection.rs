//! The connection loop of one client: reads its socket, decodes pipelined requests and hands them to its
//! session (the direct path, or the session's steps), writes every reply back in request order, coalesced into
//! as few writes as possible, and keeps the timers and bounds of the connection (AUTH deadline, failed-AUTH wait,
//! output buffer limits, write and idle timeouts, the outstanding-request bound).

use std::future::poll_fn;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::BytesMut;
use switchyard_schemas::OutputBufferLimit;

use super::direct::Direct;
#[cfg(debug_assertions)]
use super::fault;
use super::output::{Output, Socket, poll_socket};
use super::{BUFFER_SIZE, MAX_OUTSTANDING, MAX_PARKED_INPUT, MAX_UNREAD_WHILE_READING, Session};
use crate::metrics::Closed;
use crate::near_cache::Query;
use crate::net::Stream;
use crate::resp::RequestDecoder;
use crate::route::Run;

/// A client's connection: its session, and what only the loop keeps.
pub(super) struct Connection {
    session: Session,
    /// Complete requests wait in the input, read beyond `MAX_OUTSTANDING`.
    held_back: bool,
    /// When the client last sent something (for `--client-idle-timeout-s`).
    last_input: Instant,
    /// CLIENT LIST shows unparsed input of this client's (see `decode`).
    input_shown: bool,
}

impl Connection {
    pub(super) fn new(session: Session) -> Connection {
        Connection {
            session,
            held_back: false,
            last_input: Instant::now(),
            input_shown: false,
        }
    }

    pub(super) async fn run(&mut self, stream: Stream, addr: SocketAddr) -> std::io::Result<()> {
        let gateway = Arc::clone(&self.session.client.worker.gateway);
        let limits = gateway.config.limits;
        let clients = gateway.config.clients;
        let mut decoder = RequestDecoder::new(if self.session.client.tenant.is_some() {
            limits
        } else {
            limits.unauthenticated()
        });
        let mut input = BytesMut::with_capacity(BUFFER_SIZE);
        let mut output = Output::new();
        let control = self.session.client.worker.control.listen();
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
            let reading = !self.session.client.closing
                && self.session.penalty.is_none()
                && self.keeps_up(&output)
                && (self.session.stateful.parked.is_none() || input.len() < MAX_PARKED_INPUT);
            if self.session.rearm {
                self.session.rearm = false;
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
                // A subscribed client's messages arrive on their own, and so do a monitor's lines and a tracking
                // client's invalidations.
                () = self.session.client.replies.wait_ready(), if !self.session.client.replies.is_empty() || self.session.stateful.subscription.is_some() || self.session.monitor.is_some() || self.session.caching.is_on() => {
                    if self.session.monitor.as_ref().is_some_and(|m| m.overflowed()) {
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
                        Socket::Read(_) if self.session.stateful.parked.is_none() => {
                            self.decode(&mut decoder, &mut input, addr);
                        }
                        Socket::Read(_) => {}
                    }
                }
                // A new snapshot, a CLIENT KILL or the shutdown. A revoked credential or a removed tenant
                // closes idle connections too, not only busy ones.
                () = control.notified() => {
                    if self.session.client.info.is_killed() {
                        return Ok(()); // CLIENT KILL from another connection: closed at once, as Redis does
                    }
                    self.session.stateful.unblock(&self.session.client);
                    self.session.refresh_tenant();
                    if *self.session.client.worker.shutdown.borrow() {
                        self.session.client.closing = true;
                    }
                }
                () = &mut timer, if armed => {
                    let now = Instant::now();
                    // A failed AUTH's wait is over: what the client sent meanwhile is served.
                    if self.session.penalty.is_some_and(|until| until <= now) {
                        self.session.penalty = None;
                        if self.session.stateful.parked.is_none() {
                            self.decode(&mut decoder, &mut input, addr);
                        }
                    }
                    // A connection that never authenticated is closed: it holds a place.
                    if !self.session.ticket.is_authenticated() && auth_deadline <= now {
                        tracing::debug!(client = %addr, "closing a connection that did not authenticate in time");
                        return Ok(());
                    }
                    if output.timed_out(clients.write_timeout, now) {
                        return self.close(Closed::WriteTimeout, addr);
                    }
                    if self.idle_deadline(&output).is_some_and(|deadline| deadline <= now) {
                        return self.close(Closed::Idle, addr);
                    }
                    self.session.rearm = true;
                }
            }
            loop {
                let now = Instant::now();
                self.session
                    .tracking
                    .drain_replies(&self.session.client, &mut output, now);
                if !output.is_empty() {
                    output.flush(&stream, now, &self.session.client.info)?;
                    if !output.is_empty() {
                        // The client is slow to read: the bounds on what it leaves unread apply.
                        if let Err(reason) = output.check(self.output_limit(), now) {
                            return self.close(reason, addr);
                        }
                        self.session.rearm = true;
                        break;
                    }
                }
                // Requests read beyond MAX_OUTSTANDING go as earlier ones are answered and written.
                if self.held_back
                    && self.keeps_up(&output)
                    && self.session.stateful.parked.is_none()
                    && !self.session.client.closing
                {
                    self.decode(&mut decoder, &mut input, addr);
                    continue; // what the gateway answered itself is ready now: no backend wakes the session for it
                }
                if !self.session.client.replies.is_empty() {
                    break;
                }
                let transaction = self.session.stateful.transaction.is_some();
                self.session.near.release_holds(transaction);
                self.session.stateful.settle(&mut self.session.client);
                if self.session.client.closing {
                    stream.shutdown();
                    return Ok(());
                }
                // Every reply is written: a parked request goes now, then what was read after it.
                let Some(request) = self.session.stateful.parked.take() else {
                    break;
                };
                self.session.dispatch(request, Instant::now());
                if self.session.stateful.parked.is_some() {
                    break; // parked again: it waits for a subscription's confirmations, which wake the session
                }
                if !self.session.client.closing {
                    self.decode(&mut decoder, &mut input, addr);
                }
            }
        }
    }

    /// Whether the client keeps up with its replies, so that more of its requests may be read and dispatched.
    fn keeps_up(&self, output: &Output) -> bool {
        self.session.client.replies.requests() < MAX_OUTSTANDING
            && output.len() < MAX_UNREAD_WHILE_READING
            && !self.session.near.waits()
    }

    /// Dispatches every complete request in `input`, until one is parked, the connection is closing or waits
    /// after a failed AUTH.
    fn decode(&mut self, decoder: &mut RequestDecoder, input: &mut BytesMut, addr: SocketAddr) {
        self.held_back = false;
        if self.session.penalty.is_some() {
            return;
        }
        let gateway = Arc::clone(&self.session.client.worker.gateway);
        let limits = gateway.config.limits;
        let unread = input.len();
        let now = Instant::now(); // one clock read per batch: per command it shows in profiles of pipelines
        self.last_input = now;
        self.session.client.info.set_active();
        let mut run = Run::new(
            &self.session.client.replies,
            now,
            self.session.client.info.id as usize,
            input.len(),
        );
        // Requests that may join the run within MAX_OUTSTANDING: counted again when others leave (a run sent as
        // the next request goes elsewhere, a request dispatched alone).
        let mut left = self.session.client.replies.room(MAX_OUTSTANDING);
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
                            drop(self.session.client.replies.reserve(now));
                            left = self.session.client.replies.room(MAX_OUTSTANDING);
                            continue;
                        }
                        Some(fault::Fault::Panic) => panic!("a fault injected by a test"),
                        None => {}
                    }
                    match self.session.direct(decoder, &mut frame, now) {
                        Some((Direct::Run(to), spec)) => {
                            if run.push(to, spec, frame) {
                                left = self.session.client.replies.room(MAX_OUTSTANDING);
                            }
                            continue;
                        }
                        Some((Direct::Answered(reply), spec)) => {
                            if run.answer(spec, frame, reply) {
                                left = self.session.client.replies.room(MAX_OUTSTANDING);
                            }
                            continue;
                        }
                        // The next requests wait until the read has its reply.
                        Some((Direct::Wait(wait), _)) => {
                            run.send();
                            let client = &self.session.client;
                            let to = (&client.replies, client.protocol, client.info.id as usize);
                            let request = frame.0.freeze();
                            let read = (&Query::GET, &request);
                            self.session.near.wait_for_fill(*wait, read, to, now);
                            self.held_back = true;
                            break;
                        }
                        None => {}
                    }
                    run.send();
                    self.session.count_commands(); // `dispatch` may change the tenant
                    let authenticated = self.session.client.tenant.is_some();
                    self.session.dispatch(decoder.request(frame), now);
                    if self.session.client.tenant.is_some() != authenticated {
                        decoder.set_limits(if authenticated {
                            limits.unauthenticated()
                        } else {
                            limits
                        });
                    }
                    if self.session.client.closing
                        || self.session.stateful.parked.is_some()
                        || self.session.penalty.is_some()
                    {
                        break;
                    }
                    if self.session.near.waits() {
                        self.held_back = true;
                        break;
                    }
                    left = self.session.client.replies.room(MAX_OUTSTANDING);
                }
                Ok(None) => break,
                Err(e) => {
                    run.send();
                    gateway
                        .metrics
                        .protocol_errors
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(client = %addr, "protocol error: {e}");
                    self.session.client.local_error(now, &format!("ERR {e}"));
                    self.session.client.closing = true;
                    break;
                }
            }
        }
        run.send();
        self.session.count_commands();
        if let Some(view) = &self.session.client.tenant {
            view.tenant
                .runtime
                .counters
                .received_bytes
                .add(unread.saturating_sub(input.len()) as u64);
        }
        // Shown while input waits unparsed (a partial request, a pipeline held back), and once more when none does.
        if !input.is_empty() || self.input_shown {
            self.input_shown = !input.is_empty();
            self.session
                .client
                .info
                .set_input(input.len(), input.capacity());
        }
    }

    /// When the connection's timer must next fire: at the end of a failed AUTH's wait, at its AUTH deadline while
    /// it has not authenticated, when what it leaves unread breaks a bound, at the end of its idle timeout.
    fn next_deadline(&self, auth_deadline: Instant, output: &Output) -> Option<Instant> {
        let clients = &self.session.client.worker.gateway.config.clients;
        [
            self.session.penalty,
            (!self.session.ticket.is_authenticated()).then_some(auth_deadline),
            output.deadline(self.output_limit(), clients.write_timeout),
            self.idle_deadline(output),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// When the connection's idle timeout ends, if it has one running: not while a request of it is in flight or
    /// it is subscribed or monitors (as Redis' `timeout`), nor while replies wait for it to read them (the write timeout's
    /// case).
    fn idle_deadline(&self, output: &Output) -> Option<Instant> {
        let timeout = self
            .session
            .client
            .worker
            .gateway
            .config
            .clients
            .idle_timeout?;
        let busy = !self.session.client.replies.is_empty()
            || !output.is_empty()
            || self.session.stateful.subscription.is_some()
            || self.session.monitor.is_some()
            || self.session.stateful.parked.is_some();
        (!busy).then(|| self.last_input + timeout)
    }

    /// The bound on what this connection may leave unread: its tenant's, or the gateway's.
    fn output_limit(&self) -> OutputBufferLimit {
        // A monitor's lines stream to it as a subscriber's messages do.
        let streaming =
            self.session.stateful.subscription.is_some() || self.session.monitor.is_some();
        self.session.client.limit_for(streaming)
    }

    /// Ends the connection for breaking a bound (returned from `run`): counted by tenant and reason, and logged.
    fn close(&self, reason: Closed, addr: std::net::SocketAddr) -> std::io::Result<()> {
        let tenant = self.session.client.info.tenant().unwrap_or_default();
        if let Some(view) = &self.session.client.tenant {
            view.tenant.runtime.counters.closed(reason);
        }
        tracing::warn!(client = %addr, %tenant, reason = reason.label(), "closing a client connection that broke a bound");
        Ok(())
    }
}
