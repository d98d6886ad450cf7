//! One tracking client: its options, the keys it read since it was last told of them, and how it is told (a
//! push on its own connection in RESP3, or on the connection it redirects to).

use std::cell::{Cell, Ref, RefCell};
use std::collections::HashSet;
use std::rc::{Rc, Weak};

use bytes::{Bytes, BytesMut};

use super::TenantWatch;
use super::options::{Info, Options};
use crate::backend::Upstream;
use crate::reply::{ReplyHandle, ReplyQueue};
use crate::resp::{self, Protocol};

/// Keys a client may have tracked at once: beyond, it is told to drop everything and tracking starts over (as
/// Redis' `tracking-table-max-keys` makes Redis invalidate keys to make room).
const MAX_TRACKED_KEYS: usize = 100_000;

/// A client that tracks (`CLIENT TRACKING on`).
pub(crate) struct Tracker {
    queue: Weak<ReplyQueue>,
    protocol: Cell<Protocol>,
    options: RefCell<Options>,
    /// `CLIENT CACHING` was given for the next command.
    caching: Cell<bool>,
    /// The client it redirects to went away.
    broken: Cell<bool>,
    /// Keys read since last told (default mode), as stored: under the tenant's namespace.
    keys: RefCell<HashSet<Bytes>>,
    /// Keys read by the commands queued in `MULTI`: tracked when `EXEC` is sent, which is when they are read
    /// (tracked at queue time, an invalidation written before `EXEC`'s reply would forget them).
    queued: RefCell<Vec<Bytes>>,
    /// A read was sent while a watch was not up: it is told to drop everything once all are.
    unsure: Cell<bool>,
    watch: RefCell<Rc<TenantWatch>>,
}

impl Tracker {
    /// A client whose replies go to `queue` tracks with `options`, in `watch` (see `TenantWatch::join`).
    pub(crate) fn new(
        queue: &Rc<ReplyQueue>,
        protocol: Protocol,
        options: Options,
        watch: Rc<TenantWatch>,
    ) -> Rc<Tracker> {
        Rc::new(Tracker {
            queue: Rc::downgrade(queue),
            protocol: Cell::new(protocol),
            options: RefCell::new(options),
            caching: Cell::new(false),
            broken: Cell::new(false),
            keys: RefCell::new(HashSet::new()),
            queued: RefCell::new(Vec::new()),
            unsure: Cell::new(false),
            watch: RefCell::new(watch),
        })
    }

    /// Starts watching: the `+OK` of `CLIENT TRACKING on` goes to `reply` once the watch is up.
    pub(crate) fn start(self: &Rc<Self>, upstreams: &[Upstream], reply: ReplyHandle) {
        let watch = Rc::clone(&self.watch.borrow());
        watch.join(self, upstreams, Some(reply));
    }

    pub(crate) fn options(&self) -> Ref<'_, Options> {
        self.options.borrow()
    }

    /// `CLIENT TRACKING on` again: new options (the redirect is whole again).
    pub(crate) fn set_options(&self, options: Options) {
        *self.options.borrow_mut() = options;
        self.broken.set(false);
    }

    /// `CLIENT CACHING yes|no`, checked: the next command is the exception to the mode.
    pub(crate) fn set_caching(&self) {
        self.caching.set(true);
    }

    /// The client, into its tenant (again) with a route that reads from `upstreams`, in `protocol`: a new watch
    /// (the tenant compiled anew: its route may have changed) tells it to drop everything.
    pub(crate) fn follow(
        self: &Rc<Self>,
        watch: Rc<TenantWatch>,
        upstreams: &[Upstream],
        protocol: Protocol,
    ) {
        self.protocol.set(protocol);
        let moved = !Rc::ptr_eq(&self.watch.borrow(), &watch);
        if moved {
            *self.watch.borrow_mut() = Rc::clone(&watch);
        }
        watch.join(self, upstreams, None);
        if moved {
            self.changed(None, &watch);
        }
    }

    /// A command is about to be sent that reads `keys` (as stored). `client_command`: a `CLIENT` subcommand,
    /// which leaves `CLIENT CACHING` for the next command; `in_transaction`: so does a command queued in
    /// `MULTI` (the choice holds for the transaction), whose keys are tracked when `EXEC` is sent.
    pub(crate) fn read(
        &self,
        keys: impl Iterator<Item = Bytes>,
        client_command: bool,
        in_transaction: bool,
    ) {
        let caching = self.caching.get();
        if !client_command && !in_transaction {
            self.caching.set(false);
        }
        let options = self.options.borrow();
        if options.bcast || (options.optin && !caching) || (options.optout && caching) {
            return;
        }
        drop(options);
        match in_transaction {
            true => self.queued.borrow_mut().extend(keys),
            false => self.track(keys),
        }
    }

    /// The transaction ends: `EXEC` is about to be sent (`executed`), or `DISCARD`.
    pub(crate) fn transaction_ends(&self, executed: bool) {
        let queued = std::mem::take(&mut *self.queued.borrow_mut());
        if executed {
            self.track(queued.into_iter());
        }
    }

    fn track(&self, keys: impl Iterator<Item = Bytes>) {
        let watch = Rc::clone(&self.watch.borrow());
        let mut tracked = self.keys.borrow_mut();
        let before = tracked.len();
        tracked.extend(keys);
        if tracked.len() == before {
            return;
        }
        if !watch.all_up() {
            self.unsure.set(true);
        }
        if tracked.len() > MAX_TRACKED_KEYS {
            drop(tracked);
            self.changed(None, &watch);
        }
    }

    /// Every watch is up, or a heartbeat passed with one down: a client that read while one was not drops
    /// everything.
    pub(super) fn watched(&self) {
        if self.unsure.get() {
            let watch = Rc::clone(&self.watch.borrow());
            self.changed(None, &watch);
        }
    }

    /// Redis says these keys (as stored) changed (`None`: every key): the client is told of those it tracks.
    pub(super) fn changed(&self, keys: Option<&[Bytes]>, watch: &TenantWatch) {
        let Some(keys) = keys else {
            self.keys.borrow_mut().clear();
            self.unsure.set(false);
            return self.tell(None, watch);
        };
        let options = self.options.borrow();
        let mut tracked = self.keys.borrow_mut();
        let mut told: Vec<&[u8]> = Vec::new();
        for key in keys {
            // Never a key outside the tenant's namespace, whatever the node says.
            let Some(own) = key.strip_prefix(&watch.prefix()[..]) else {
                continue;
            };
            let tells = match options.bcast {
                true => {
                    options.prefixes.is_empty()
                        || options.prefixes.iter().any(|p| own.starts_with(p))
                }
                false => tracked.remove(&key[..]),
            };
            if tells {
                told.push(own);
            }
        }
        drop((options, tracked));
        if !told.is_empty() {
            self.tell(Some(&told), watch);
        }
    }

    /// Tells the client that `keys` (its own names; `None`: every key) changed, as Redis would: a push on its
    /// connection in RESP3, or on the connection it redirects to (a push in RESP3, a `__redis__:invalidate`
    /// message to a RESP2 subscriber); a RESP3 client whose redirect is gone gets `tracking-redir-broken`.
    fn tell(&self, keys: Option<&[&[u8]]>, watch: &TenantWatch) {
        let mut body = BytesMut::new();
        match keys {
            Some(keys) => {
                resp::array_header(&mut body, keys.len());
                for key in keys {
                    resp::bulk(&mut body, key);
                }
            }
            // The null of the tracking client's protocol, wherever it goes (as Redis 7.0 sends it).
            None => resp::null(&mut body, self.protocol.get()),
        }
        let redirect = self.options.borrow().redirect;
        if redirect == 0 {
            if let (Protocol::Resp3, Some(queue)) = (self.protocol.get(), self.queue.upgrade()) {
                queue.push_after_sent(invalidate(&body));
            }
            return;
        }
        match watch.ports.get(redirect, &watch.name) {
            Some((target, info)) => {
                let message = if info.resp.load(std::sync::atomic::Ordering::Relaxed) == 3 {
                    invalidate(&body)
                } else if info.is_subscribed() {
                    let head = b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n";
                    [&head[..], &body].concat().into()
                } else {
                    return;
                };
                target.send(redirect, message);
            }
            None => {
                self.broken.set(true);
                if let (Protocol::Resp3, Some(queue)) = (self.protocol.get(), self.queue.upgrade())
                {
                    let mut push = BytesMut::from(&b">2\r\n$21\r\ntracking-redir-broken\r\n"[..]);
                    resp::integer(&mut push, i64::try_from(redirect).unwrap_or(i64::MAX));
                    queue.push_after_sent(push.freeze());
                }
            }
        }
    }
}

/// An `invalidate` push of `body` (the keys, or a null).
fn invalidate(body: &[u8]) -> Bytes {
    [&b">2\r\n$10\r\ninvalidate\r\n"[..], body].concat().into()
}

impl Tracker {
    /// `CLIENT TRACKINGINFO` of this client, in `protocol`.
    pub(crate) fn tracking_info(&self, protocol: Protocol) -> Bytes {
        Info {
            options: Some(&self.options.borrow()),
            caching: self.caching.get(),
            broken: self.broken.get(),
        }
        .reply(protocol)
    }
}
