//! The session's side of `CLIENT TRACKING` (see `client_tracking`): the `CLIENT` subcommands of tracking, the
//! keys each read of a tracking client names (noted before it is sent, or answered from the near cache), and
//! the client's tracking following it into its tenant as each snapshot has it.

use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;

use super::client::Client;
use crate::client_tracking::{Info, Switch, Tracker, caching, parse};
use crate::cmd::{Command, CommandSpec, flag};
use crate::family::Family;
use crate::resp;

/// Why a tenant without a key namespace gets no `BCAST`.
const BCAST_WITHOUT_NAMESPACE: &str = "ERR CLIENT TRACKING BCAST is not supported by the gateway for a tenant without a key namespace: Redis broadcasts the changes of every database of a node, which may hold other tenants' keys";

/// Whether `command` is one of the `CLIENT` subcommands served here.
pub(super) fn is_tracking_command(command: Command) -> bool {
    matches!(
        command,
        Command::ClientTracking
            | Command::ClientCaching
            | Command::ClientGetredir
            | Command::ClientTrackinginfo
    )
}

/// A session's tracking: set while its client tracks the keys it reads (`CLIENT TRACKING on`).
#[derive(Default)]
pub(super) struct ClientCaching {
    tracker: Option<Rc<Tracker>>,
}

impl ClientCaching {
    pub(super) fn is_on(&self) -> bool {
        self.tracker.is_some()
    }

    /// Tracking off (`CLIENT TRACKING off`, `RESET`).
    pub(super) fn off(&mut self) {
        self.tracker = None;
    }

    /// `CLIENT TRACKING`, `CLIENT CACHING`, `CLIENT GETREDIR`, `CLIENT TRACKINGINFO`.
    pub(super) fn command(
        &mut self,
        client: &Client,
        started: Instant,
        command: Command,
        args: &[Bytes],
    ) {
        match command {
            Command::ClientTracking => self.tracking(client, started, args),
            Command::ClientCaching => {
                let options = self.tracker.as_ref().map(|t| t.options().clone());
                let arg = args.get(2).map_or(&b""[..], |arg| &arg[..]);
                match caching(arg, options.as_ref()) {
                    Ok(()) => {
                        if let Some(tracker) = &self.tracker {
                            tracker.set_caching();
                        }
                        client.local_ok(started);
                    }
                    Err(text) => client.local_error(started, text),
                }
            }
            Command::ClientGetredir => {
                let options = self.tracker.as_ref().map(|t| t.options().clone());
                let info = Info {
                    options: options.as_ref(),
                    caching: false,
                    broken: false,
                };
                client.local_reply(started, |out| resp::integer(out, info.redirect()));
            }
            _ => {
                let reply = match &self.tracker {
                    Some(tracker) => tracker.tracking_info(client.protocol),
                    None => Info {
                        options: None,
                        caching: false,
                        broken: false,
                    }
                    .reply(client.protocol),
                };
                client.replies.push_ready(reply, started);
            }
        }
    }

    /// `CLIENT TRACKING on|off [...]`: the `+OK` of the first `on` comes once the tenant's watch is up.
    fn tracking(&mut self, client: &Client, started: Instant, args: &[Bytes]) {
        let Some(view) = &client.tenant else {
            return client.local_error(started, "ERR no tenant");
        };
        let tracking = &client.worker.client_tracking;
        let name = &view.tenant.name;
        let current = self.tracker.as_ref().map(|t| t.options().clone());
        let options = match parse(args, current.as_ref(), |id| tracking.has_client(id, name)) {
            Ok(Switch::On(options)) => options,
            Ok(Switch::Off) => {
                self.tracker = None;
                return client.local_ok(started);
            }
            Err(text) => return client.local_error(started, &text),
        };
        if options.bcast && view.tenant.namespace().is_none() {
            return client.local_error(started, BCAST_WITHOUT_NAMESPACE);
        }
        let upstreams = match view.route.read_upstreams() {
            Ok(upstreams) => upstreams,
            Err(text) => return client.local_error(started, text),
        };
        if let Some(tracker) = &self.tracker {
            tracker.set_options(options);
            return client.local_ok(started);
        }
        let watch = tracking.for_tenant(&view.tenant);
        let tracker = Tracker::new(&client.replies, client.protocol, options, watch);
        tracker.start(&upstreams, client.replies.reserve(started));
        self.tracker = Some(tracker);
    }

    /// A tracking client's command, about to be answered: the keys it reads (a read-only command's, or the
    /// keys a script is given, which it may read) are tracked as stored, under the tenant's namespace.
    pub(super) fn note_reads(
        &self,
        client: &mut Client,
        spec: &CommandSpec,
        args: &[Bytes],
        in_transaction: bool,
    ) {
        let (Some(tracker), Some(view)) = (&self.tracker, &client.tenant) else {
            return;
        };
        if matches!(spec.id, Command::Exec | Command::Discard) {
            tracker.transaction_ends(spec.id == Command::Exec);
        }
        let client_command = spec.id.container() == Some(Command::Client);
        let reads = spec.has(flag::READONLY) || spec.family() == Family::Script;
        if !reads || spec.key_indices(args, &mut client.keys).is_err() {
            tracker.read(std::iter::empty(), client_command, in_transaction);
            return;
        }
        let prefix = view.tenant.namespace().map(|n| &n.prefix()[..]);
        let keys = client
            .keys
            .iter()
            .filter_map(|&i| args.get(i))
            .map(|key| match prefix {
                Some(prefix) => Bytes::from([prefix, &key[..]].concat()),
                None => key.clone(),
            });
        tracker.read(keys, client_command, in_transaction);
    }

    /// The client entered its tenant (again: a new snapshot, database or protocol): its tracking watches the
    /// nodes of its route now.
    pub(super) fn follow(&self, client: &Client) {
        let (Some(tracker), Some(view)) = (&self.tracker, &client.tenant) else {
            return;
        };
        let watch = client.worker.client_tracking.for_tenant(&view.tenant);
        // A route that reads from replicas now: the nodes it still knows are watched (see `read_upstreams`).
        let upstreams = view.route.read_upstreams().unwrap_or_default();
        tracker.follow(watch, &upstreams, client.protocol);
    }
}
