//! The namespaced variant of the comparison: the compared tenant (`t`, namespace `a:`) shares its backend
//! database with a second tenant (`u`, namespace `b:`), which runs every command of the sequence right after it,
//! on the same key names, and is compared with a reference of its own. Each must answer as if it had its Redis
//! alone.

use serde_json::{Value, json};

use super::{Comparison, Setup, Topology, Transport, show, sorted_elements, without_client_id};
use crate::{RawClient, RedisServer};

/// Runs `sequence` as [`each_topology`](super::each_topology) does, for a tenant with a key namespace whose database a second namespaced
/// tenant shares (see `neighbour`): on one Redis in RESP2 and RESP3, and on a Redis Cluster in RESP2.
pub fn each_namespaced(mut sequence: impl FnMut(&mut Comparison)) {
    for (topology, protocol) in [
        (Topology::Single, 2),
        (Topology::Single, 3),
        (Topology::Cluster, 2),
    ] {
        let mut comparison = Comparison::launch(
            Setup {
                topology,
                transport: Transport::Plain,
            },
            true,
        );
        if protocol == 3 {
            comparison.hello(3);
        }
        sequence(&mut comparison);
    }
}

/// A command that waits for a cluster's slot map and answers the same on an empty Redis: `DBSIZE`, refused in a
/// key namespace, where a whole `SCAN` does it.
pub(super) fn ready_command(namespaced: bool) -> &'static [&'static [u8]] {
    match namespaced {
        true => &[b"SCAN", b"0", b"COUNT", b"1000"],
        false => &[b"DBSIZE"],
    }
}

/// The tenants of a namespaced comparison: both admins (the families use `KEYS`), each with its namespace, on
/// the same route (so the same database of the same backends).
pub(super) fn routes(route: &Value) -> Value {
    json!({"tenants": [
        {"name": "t", "passwords": ["pt"], "allow_admin": true, "namespace": "a:", "route": route},
        {"name": "u", "passwords": ["pu"], "allow_admin": true, "namespace": "b:", "route": route}
    ]})
}

/// Authenticates a gateway client as tenant `name` (whose password is `p` + its name).
pub(super) fn log_in(gateway: &mut RawClient, name: &str) {
    let password = format!("p{name}");
    let reply = gateway.request(&[b"AUTH", name.as_bytes(), password.as_bytes()]);
    assert_eq!(show(&reply), "+OK\\r\\n", "AUTH as {name}");
}

/// The second tenant: its own reference redis-server, and a client of it and of the gateway.
pub(super) struct Neighbour {
    pub reference: RawClient,
    pub gateway: RawClient,
    pub _server: RedisServer,
}

impl Neighbour {
    fn both(&mut self, args: &[&[u8]]) -> (Vec<u8>, Vec<u8>) {
        (self.reference.request(args), self.gateway.request(args))
    }

    /// The neighbour's replies to `args` must be Redis' (`unordered`: as multisets of elements).
    pub(super) fn same(&mut self, setup: Setup, args: &[&[u8]], unordered: bool) {
        let (mut reference, mut gateway) = self.both(args);
        if args
            .first()
            .is_some_and(|name| name.eq_ignore_ascii_case(b"hello"))
        {
            (reference, gateway) = (without_client_id(&reference), without_client_id(&gateway));
        }
        let (reference, gateway) = match unordered {
            true => (sorted_elements(&reference), sorted_elements(&gateway)),
            false => (vec![show(&reference)], vec![show(&gateway)]),
        };
        assert_eq!(
            gateway,
            reference,
            "[{setup}, neighbour tenant] {:?}: the gateway's reply (left) differs from Redis' (right)",
            shown_args(args)
        );
    }

    /// The neighbour's gateway must answer `args` with `expected`, as the compared tenant's does.
    pub(super) fn differs(&mut self, setup: Setup, args: &[&[u8]], expected: &[u8]) {
        let (_, gateway) = self.both(args);
        assert_eq!(
            show(&gateway),
            show(expected),
            "[{setup}, neighbour tenant] {:?}",
            shown_args(args)
        );
    }
}

fn shown_args(args: &[&[u8]]) -> Vec<String> {
    args.iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}
