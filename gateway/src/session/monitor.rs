//! A session's side of MONITOR (see `crate::monitor`): monitoring a tenant, what a monitor may still run, its
//! lines into its output, and showing the session's own commands to its tenant's monitors.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use super::client::Client;
use crate::cmd::{self, Command, CommandSpec, flag};
use crate::monitor::{self, Monitor};
use crate::reply::ReplyQueue;
use crate::resp::Request;

/// Most bytes of lines that wait for a monitor's session when its output buffer limits set no bound.
const MAX_MONITOR_BACKLOG: usize = 64 * 1024 * 1024;

/// A client in monitor mode: a task of its worker moves the lines of its [`Monitor`] into its reply queue, as
/// messages (written between replies, like a subscriber's), so the session waits on nothing more than before.
pub(super) struct Monitoring {
    relay: tokio::task::JoinHandle<()>,
    /// Set when the lines overflowed their bound: the session closes.
    overflowed: Rc<Cell<bool>>,
}

impl Monitoring {
    pub(super) fn overflowed(&self) -> bool {
        self.overflowed.get()
    }
}

impl Drop for Monitoring {
    fn drop(&mut self) {
        self.relay.abort(); // which drops the Monitor: the tenant's monitors forget it
    }
}

async fn relay(monitor: Monitor, queue: Rc<ReplyQueue>, overflowed: Rc<Cell<bool>>) {
    let mut lines = BytesMut::new();
    loop {
        monitor.ready().await;
        if monitor.take(&mut lines).is_err() {
            overflowed.set(true);
            return queue.push_message(Bytes::new()); // wakes the session
        }
        if !lines.is_empty() {
            queue.push_monitor_lines(lines.split().freeze());
        }
    }
}

/// Whether a command reads or writes keys, which a client in monitor mode may not do.
fn touches_keys(spec: &CommandSpec) -> bool {
    spec.flags & (flag::WRITE | flag::READONLY | flag::MAY_REPLICATE) != 0
}

impl Monitoring {
    /// Monitors the client's tenant, if it has one (after `MONITOR`, or an `AUTH` in monitor mode: a monitor sees
    /// the tenant it is authenticated as).
    pub(super) fn start(client: &Client) -> Option<Monitoring> {
        let view = client.tenant.as_ref()?;
        let limit = client.limit_for(true);
        let bound = [limit.hard_bytes, limit.soft_bytes]
            .into_iter()
            .find(|&bytes| bytes > 0)
            .map_or(MAX_MONITOR_BACKLOG, |bytes| {
                usize::try_from(bytes).unwrap_or(usize::MAX)
            });
        let monitor = Monitor::start(&view.tenant.runtime.monitors, bound);
        let overflowed = Rc::new(Cell::new(false));
        let queue = Rc::clone(&client.replies);
        Some(Monitoring {
            relay: tokio::task::spawn_local(relay(monitor, queue, Rc::clone(&overflowed))),
            overflowed,
        })
    }
}

impl Client {
    /// What a client in monitor mode may run, as in Redis 7.0: nothing that reads or writes keys (`-ERR Replica
    /// can't interact with the keyspace`), and `MONITOR` again is ignored (no reply). Returns whether `spec` was
    /// answered here.
    pub(super) fn monitor_mode(&self, spec: &CommandSpec, started: Instant) -> bool {
        if spec.id == Command::Monitor {
            return true;
        }
        if touches_keys(spec) {
            self.local_error(started, "ERR Replica can't interact with the keyspace");
            return true;
        }
        false
    }

    /// The arguments to show the tenant's monitors once the command ran, if it may have any: those of a
    /// tenant with monitors, and those of a client with no tenant yet (its `AUTH` may give it one).
    pub(super) fn monitor_args(&self, request: &Request) -> Option<Vec<Bytes>> {
        match &self.tenant {
            Some(view) if !view.tenant.runtime.monitors.active() => None,
            _ => Some(request.args().to_vec()),
        }
    }

    /// Shows a command that ran to the tenant's monitors, as Redis does: with the database it leaves the client
    /// in, and only a known command with a valid number of arguments (`monitoring`: the client is a monitor
    /// itself, which runs no command that touches keys).
    pub(super) fn show_to_monitors(&self, args: &[Bytes], monitoring: bool) {
        let Some(view) = &self.tenant else { return };
        let monitors = &view.tenant.runtime.monitors;
        let refused = |spec| monitoring && touches_keys(spec);
        match cmd::lookup(args) {
            Ok(spec) if monitors.active() && monitor::shows(spec) && !refused(spec) => {
                monitors.feed(&monitor::line(spec, args, self.db, self.info.addr));
            }
            _ => {}
        }
    }
}
