//! The comparison harness: the same commands, sent as raw RESP, to a plain `redis-server` (the reference) and
//! through a gateway, with the replies compared byte for byte.
//!
//! The gateway serves one tenant (`t`, no password, `allow_admin`) over one of three [`Topology`]s: a single
//! redis-server, a ring sharded over three redis-servers, or a three-master Redis Cluster. A test usually runs
//! one sequence over all three with [`each_topology`]. Keys of multi-key commands must use hash tags (`{user}:a`)
//! so that they land together, as any application written for Redis Cluster does.
//!
//! Every check says what it expects:
//! - [`Comparison::same`]: byte-identical replies (the default, and what the issue asks for);
//! - [`Comparison::unordered`]: an array whose elements may come in another order, because the gateway gathers
//!   them from several shards (KEYS, a whole SCAN); the elements must still be the same multiset;
//! - [`Comparison::differs`]: a deliberate difference. The gateway's reply is given exactly, together with the
//!   reason, which names the docs section that records the difference; the reference's reply is still printed on
//!   failure. Nothing else may differ.
//!
//! [`Comparison::topology`] lets a sequence branch where only some routes differ (SELECT on a cluster).

use std::fmt;

use serde_json::json;

use crate::{Gateway, RawClient, RedisCluster, RedisServer};

/// What the gateway routes the tenant to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// One redis-server.
    Single,
    /// Three redis-servers, consistent-hash ring.
    Sharded,
    /// A Redis Cluster of three masters, no replicas.
    Cluster,
}

impl Topology {
    pub const ALL: [Topology; 3] = [Topology::Single, Topology::Sharded, Topology::Cluster];
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Runs `sequence` once per topology and protocol (RESP2, then RESP3 after `HELLO 3` on both clients), each
/// against a fresh reference and a fresh deployment.
pub fn each_topology(mut sequence: impl FnMut(&mut Comparison)) {
    for protocol in [2, 3] {
        for topology in Topology::ALL {
            let mut comparison = Comparison::start(topology);
            if protocol == 3 {
                comparison.hello(3);
            }
            sequence(&mut comparison);
        }
    }
}

/// A `HELLO` reply with its client id (which differs between any two servers) replaced by 0.
pub fn without_client_id(reply: &[u8]) -> Vec<u8> {
    let Some(start) = reply
        .windows(5)
        .position(|w| w == b"id\r\n:")
        .map(|i| i + 4)
    else {
        return reply.to_vec();
    };
    let end = reply[start..]
        .iter()
        .position(|&b| b == b'\r')
        .map_or(reply.len(), |i| start + i);
    [&reply[..start], b":0", &reply[end..]].concat()
}

/// The backends a gateway routes to; kept alive as long as the comparison.
pub enum Backends {
    Servers(Vec<RedisServer>),
    Cluster(RedisCluster),
}

/// A reference redis-server and a gateway over `topology`, with one raw client on each.
pub struct Comparison {
    topology: Topology,
    /// What both clients speak: 2, or 3 after [`Comparison::hello`].
    protocol: u8,
    reference: RawClient,
    gateway: RawClient,
    gateway_process: Gateway,
    backends: Backends,
    _reference_server: RedisServer,
}

impl Comparison {
    pub fn start(topology: Topology) -> Comparison {
        let reference_server = RedisServer::start();
        let (backends, route) = match topology {
            Topology::Single => {
                let server = RedisServer::start();
                let route = json!({"type": "single", "target": server.url()});
                (Backends::Servers(vec![server]), route)
            }
            Topology::Sharded => {
                let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
                let shards: Vec<_> = servers
                    .iter()
                    .enumerate()
                    .map(|(i, s)| json!({"name": format!("s{i}"), "target": s.url()}))
                    .collect();
                let route =
                    json!({"type": "sharded", "hash": {"algorithm": "ring"}, "shards": shards});
                (Backends::Servers(servers), route)
            }
            Topology::Cluster => {
                let cluster = RedisCluster::start(3, 0, None);
                let route = json!({"type": "single", "target": cluster.url()});
                (Backends::Cluster(cluster), route)
            }
        };
        let routes = json!({"tenants": [
            {"name": "t", "passwords": [], "allow_admin": true, "route": route}
        ]});
        let gateway_process = Gateway::start(&routes);
        let mut gateway = RawClient::connect(gateway_process.port());
        // A DBSIZE waits for the gateway worker's first cluster slot map: from then on, pipelined keyed commands
        // go straight to their masters instead of through the seed's MOVED replies, which could let a pipelined
        // fan-out overtake them.
        assert_eq!(gateway.request(&[b"DBSIZE"]), b":0\r\n");
        Comparison {
            topology,
            protocol: 2,
            reference: RawClient::connect(reference_server.port()),
            gateway,
            gateway_process,
            backends,
            _reference_server: reference_server,
        }
    }

    pub fn topology(&self) -> Topology {
        self.topology
    }

    /// `HELLO version` on both clients; the replies must be the same but for the client id.
    pub fn hello(&mut self, version: u8) {
        let (reference, gateway) = self.both(&["HELLO", &version.to_string()]);
        assert_eq!(
            show(&without_client_id(&gateway)),
            show(&without_client_id(&reference)),
            "HELLO {version}: gateway (left) and Redis (right) differ"
        );
        self.protocol = version;
        // As at start: a DBSIZE waits for the slot map of the cluster backend the new protocol uses.
        self.same(&["DBSIZE"]);
    }

    /// The protocol both clients speak (2 or 3).
    pub fn protocol(&self) -> u8 {
        self.protocol
    }

    pub fn gateway(&self) -> &Gateway {
        &self.gateway_process
    }

    pub fn backends(&self) -> &Backends {
        &self.backends
    }

    /// Both replies to `args` (strings or bytes): (reference, gateway).
    pub fn both<A: AsRef<[u8]> + fmt::Debug>(&mut self, args: &[A]) -> (Vec<u8>, Vec<u8>) {
        let args: Vec<&[u8]> = args.iter().map(AsRef::as_ref).collect();
        (self.reference.request(&args), self.gateway.request(&args))
    }

    /// Asserts that the gateway answers `args` exactly as Redis does; returns the reply.
    pub fn same<A: AsRef<[u8]> + fmt::Debug>(&mut self, args: &[A]) -> Vec<u8> {
        let (reference, gateway) = self.both(args);
        assert_eq!(
            show(&gateway),
            show(&reference),
            "[{}] {args:?}: the gateway's reply (left) differs from Redis' (right)",
            self.topology
        );
        gateway
    }

    /// [`Comparison::same`] for each command in turn.
    pub fn all_same(&mut self, commands: &[&[&str]]) {
        for args in commands {
            self.same(args);
        }
    }

    /// Sends every command before reading any reply (one pipeline) on both sides, and compares the replies.
    pub fn pipeline_same(&mut self, commands: &[&[&str]]) {
        for args in commands {
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            self.reference.send_command(&args);
            self.gateway.send_command(&args);
        }
        for args in commands {
            let reference = self.reference.read_reply();
            let gateway = self.gateway.read_reply();
            assert_eq!(
                show(&gateway),
                show(&reference),
                "[{}] pipelined {args:?}: the gateway's reply (left) differs from Redis' (right)",
                self.topology
            );
        }
    }

    /// Sends every command, then `PING`, as one pipeline on both sides, and compares everything each side answers up
    /// to the `PONG`: for commands whose replies are left out (`CLIENT REPLY`), where replies cannot be paired
    /// with commands.
    pub fn pipeline_up_to_ping_same(&mut self, commands: &[&[&str]]) {
        let answers = |client: &mut RawClient| {
            for args in commands.iter().chain([&&["PING"][..]]) {
                let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
                client.send_command(&args);
            }
            let mut replies = Vec::new();
            loop {
                let reply = client.read_reply();
                if reply == b"+PONG\r\n" {
                    return replies;
                }
                replies.push(show(&reply));
            }
        };
        let reference = answers(&mut self.reference);
        let gateway = answers(&mut self.gateway);
        assert_eq!(
            gateway, reference,
            "[{}] pipelined {commands:?}: the gateway's replies (left) differ from Redis' (right)",
            self.topology
        );
    }

    /// Asserts an array reply with the same elements as Redis', in any order (gathered from several shards).
    pub fn unordered(&mut self, args: &[&str]) {
        let (reference, gateway) = self.both(args);
        assert_eq!(
            sorted_elements(&gateway),
            sorted_elements(&reference),
            "[{}] {args:?}: the gateway's elements (left) differ from Redis' (right)",
            self.topology
        );
    }

    /// A deliberate difference: the gateway answers `gateway_reply` where Redis answers something else. `why`
    /// says why and names the docs section that records it.
    pub fn differs(&mut self, args: &[&str], gateway_reply: &[u8], why: &str) {
        let (reference, gateway) = self.both(args);
        assert_eq!(
            show(&gateway),
            show(gateway_reply),
            "[{}] {args:?}: expected the gateway's documented reply ({why}); Redis said {}",
            self.topology,
            show(&reference)
        );
    }

    /// Iterates `SCAN 0 <options>` to the end on both sides and asserts the same keys, each exactly once.
    pub fn scan_same(&mut self, options: &[&str]) -> Vec<Vec<u8>> {
        let reference = scan_all(&mut self.reference, options);
        let mut gateway = scan_all(&mut self.gateway, options);
        let total = gateway.len();
        gateway.dedup();
        assert_eq!(
            gateway.len(),
            total,
            "[{}] SCAN {options:?} returned a key twice",
            self.topology
        );
        assert_eq!(
            gateway.iter().map(|k| show(k)).collect::<Vec<_>>(),
            reference.iter().map(|k| show(k)).collect::<Vec<_>>(),
            "[{}] SCAN {options:?}: the gateway's keys (left) differ from Redis' (right)",
            self.topology
        );
        gateway
    }
}

/// Every key of a full SCAN, sorted.
fn scan_all(client: &mut RawClient, options: &[&str]) -> Vec<Vec<u8>> {
    let mut cursor = b"0".to_vec();
    let mut keys = Vec::new();
    for _ in 0..100_000 {
        let mut args: Vec<&[u8]> = vec![b"SCAN", &cursor];
        args.extend(options.iter().map(|o| o.as_bytes()));
        let reply = client.request(&args);
        let [next, batch] = <[Vec<u8>; 2]>::try_from(elements(&reply))
            .unwrap_or_else(|_| panic!("not a SCAN reply: {}", show(&reply)));
        keys.extend(elements(&batch).into_iter().map(|k| bulk_body(&k)));
        cursor = bulk_body(&next);
        if cursor == b"0" {
            keys.sort();
            return keys;
        }
    }
    panic!("SCAN {options:?} never finished");
}

/// The raw elements of an array reply (nested aggregates stay whole).
pub fn elements(reply: &[u8]) -> Vec<Vec<u8>> {
    let (count, mut rest) = line(reply);
    let count: i64 = count
        .get(1..)
        .and_then(|n| std::str::from_utf8(n).ok()?.parse().ok())
        .unwrap_or_else(|| panic!("not an array reply: {}", show(reply)));
    let mut out = Vec::new();
    for _ in 0..count.max(0) {
        let len = reply_len(rest);
        out.push(rest[..len].to_vec());
        rest = &rest[len..];
    }
    out
}

fn sorted_elements(reply: &[u8]) -> Vec<String> {
    if reply.first() != Some(&b'*') {
        return vec![show(reply)];
    }
    let mut elements: Vec<String> = elements(reply).iter().map(|e| show(e)).collect();
    elements.sort();
    elements
}

/// The first line of `reply` (without CRLF), and what follows it.
fn line(reply: &[u8]) -> (&[u8], &[u8]) {
    let end = reply
        .windows(2)
        .position(|w| w == b"\r\n")
        .unwrap_or_else(|| panic!("no CRLF in {}", show(reply)));
    (&reply[..end], &reply[end + 2..])
}

/// The length of the one complete reply at the start of `reply`.
fn reply_len(reply: &[u8]) -> usize {
    let (first, rest) = line(reply);
    let header = first.len() + 2;
    let number = || -> i64 {
        std::str::from_utf8(&first[1..])
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("bad length line in {}", show(reply)))
    };
    match first.first() {
        Some(b'$' | b'!' | b'=') => match number() {
            n if n < 0 => header,
            n => header + n as usize + 2,
        },
        Some(b'*' | b'~' | b'>' | b'%' | b'|') => {
            let per = if matches!(first[0], b'%' | b'|') {
                2
            } else {
                1
            };
            let mut offset = 0;
            for _ in 0..number().max(0) * per {
                offset += reply_len(&rest[offset..]);
            }
            header + offset
        }
        _ => header,
    }
}

/// The body of a bulk string reply.
fn bulk_body(reply: &[u8]) -> Vec<u8> {
    let (_, rest) = line(reply);
    rest.strip_suffix(b"\r\n").unwrap_or(rest).to_vec()
}

/// A reply as readable text for assertion messages (CRLF shown as-is escaped).
pub fn show(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply)
        .replace('\r', "\\r")
        .replace('\n', "\\n")
}
