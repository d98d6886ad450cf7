//! The comparison harness: the same commands, sent as raw RESP, to a plain `redis-server` (the reference) and
//! through a gateway, with the replies compared byte for byte.
//!
//! The gateway serves one tenant (`t`, no password, `allow_admin`) over one of three [`Topology`]s: a single
//! redis-server, a ring sharded over three redis-servers, or a three-master Redis Cluster; in plain TCP or, with
//! [`Transport::Tls`], over TLS on every hop (the clients to the reference's TLS port and to the gateway's TLS
//! listener, the gateway to its backends' TLS ports as `rediss://`). A test usually runs one sequence over every
//! [`SETUPS`] entry with [`each_topology`]. Keys of multi-key commands must use hash tags (`{user}:a`) so that
//! they land together, as any application written for Redis Cluster does.
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
//!
//! [`each_namespaced`] runs a sequence for a tenant with a key namespace while a second namespaced tenant shares
//! its backend database and runs the same commands on the same key names (see `neighbour`).

mod neighbour;

use std::fmt;

use serde_json::json;

use crate::{Gateway, NodeTls, Pki, RawClient, RedisCluster, RedisServer};
pub use neighbour::each_namespaced;
use neighbour::{Neighbour, ready_command};

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

/// How the clients reach the reference and the gateway, and the gateway its backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Plain,
    /// TLS on every hop, with certificates from a private CA made for the comparison. The backends keep their
    /// plain port for a test's own checks ([`Comparison::backends`]).
    Tls,
}

/// A topology over a transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setup {
    pub topology: Topology,
    pub transport: Transport,
}

impl fmt::Display for Setup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.transport {
            Transport::Plain => write!(f, "{}", self.topology),
            Transport::Tls => write!(f, "{} over TLS", self.topology),
        }
    }
}

/// What [`each_topology`] runs: every topology in plain TCP, and one Redis over TLS. TLS changes the byte
/// streams, not what is routed where, so one shard is enough to show that replies cross it unchanged (every
/// topology can run over TLS, with [`Comparison::start_over`]).
pub const SETUPS: [Setup; 4] = [
    Setup {
        topology: Topology::Single,
        transport: Transport::Plain,
    },
    Setup {
        topology: Topology::Sharded,
        transport: Transport::Plain,
    },
    Setup {
        topology: Topology::Cluster,
        transport: Transport::Plain,
    },
    Setup {
        topology: Topology::Single,
        transport: Transport::Tls,
    },
];

/// Runs `sequence` once per setup ([`SETUPS`]) and protocol (RESP2, then RESP3 after `HELLO 3` on both clients),
/// each against a fresh reference and a fresh deployment.
pub fn each_topology(mut sequence: impl FnMut(&mut Comparison)) {
    for protocol in [2, 3] {
        for setup in SETUPS {
            let mut comparison = Comparison::start_over(setup);
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

/// A reference redis-server and a gateway over a [`Setup`], with one raw client on each.
pub struct Comparison {
    setup: Setup,
    /// What both clients speak: 2, or 3 after [`Comparison::hello`].
    protocol: u8,
    reference: RawClient,
    gateway: RawClient,
    gateway_process: Gateway,
    backends: Backends,
    reference_server: RedisServer,
    /// The CA of every certificate, over TLS.
    pki: Option<Pki>,
    /// The second tenant of a namespaced comparison.
    neighbour: Option<Neighbour>,
}

/// A raw client of a server with a plain `port`, or of its TLS port (trusting `pki`'s CA) when `pki` is given.
fn connect(pki: Option<&Pki>, port: u16, tls_port: impl FnOnce() -> u16) -> RawClient {
    match pki {
        Some(pki) => RawClient::connect_tls(tls_port(), &pki.ca_file()),
        None => RawClient::connect(port),
    }
}

impl Comparison {
    /// A comparison over `topology` in plain TCP.
    pub fn start(topology: Topology) -> Comparison {
        Comparison::start_over(Setup {
            topology,
            transport: Transport::Plain,
        })
    }

    pub fn start_over(setup: Setup) -> Comparison {
        Comparison::launch(setup, false)
    }

    /// A comparison over `setup`; `namespaced`: for tenant `t` with namespace `a:`, next to tenant `u` with
    /// namespace `b:` on the same backends (see `neighbour`).
    fn launch(setup: Setup, namespaced: bool) -> Comparison {
        let pki = (setup.transport == Transport::Tls).then(|| Pki::new("compare"));
        let redis = || match &pki {
            Some(pki) => RedisServer::builder().tls(pki, false).start(),
            None => RedisServer::start(),
        };
        let url = |server: &RedisServer| match &pki {
            Some(pki) => format!(
                "rediss://127.0.0.1:{}?tlsCaFile={}",
                server.tls_port(),
                pki.ca_file().display()
            ),
            None => server.url(),
        };
        let reference_server = redis();
        let (backends, route) = match setup.topology {
            Topology::Single => {
                let server = redis();
                let route = json!({"type": "single", "target": url(&server)});
                (Backends::Servers(vec![server]), route)
            }
            Topology::Sharded => {
                let servers: Vec<RedisServer> = (0..3).map(|_| redis()).collect();
                let shards: Vec<_> = servers
                    .iter()
                    .enumerate()
                    .map(|(i, s)| json!({"name": format!("s{i}"), "target": url(s)}))
                    .collect();
                let route =
                    json!({"type": "sharded", "hash": {"algorithm": "ring"}, "shards": shards});
                (Backends::Servers(servers), route)
            }
            Topology::Cluster => {
                let cluster = match &pki {
                    Some(pki) => {
                        let tls = NodeTls::new(pki, &["localhost", "127.0.0.1"]);
                        RedisCluster::start_tls(3, 0, None, &tls)
                    }
                    None => RedisCluster::start(3, 0, None),
                };
                let route = json!({"type": "single", "target": cluster.url()});
                (Backends::Cluster(cluster), route)
            }
        };
        let routes = match namespaced {
            true => neighbour::routes(&route),
            false => json!({"tenants": [
                {"name": "t", "passwords": [], "allow_admin": true, "route": route}
            ]}),
        };
        let mut builder = Gateway::builder();
        if let Some(pki) = &pki {
            builder = builder.tls(&pki.server("gateway", &["127.0.0.1"]), None);
        }
        let gateway_process = builder.start(&routes);
        let gateway_client = || {
            connect(pki.as_ref(), gateway_process.port(), || {
                gateway_process.tls_port()
            })
        };
        let mut gateway = gateway_client();
        let neighbour = namespaced.then(|| {
            neighbour::log_in(&mut gateway, "t");
            let server = redis();
            let mut neighbour = Neighbour {
                reference: connect(pki.as_ref(), server.port(), || server.tls_port()),
                gateway: gateway_client(),
                _server: server,
            };
            neighbour::log_in(&mut neighbour.gateway, "u");
            neighbour
        });
        // A DBSIZE (a whole SCAN in a namespace, where DBSIZE is refused) waits for the gateway worker's first
        // cluster slot map: from then on, pipelined keyed commands go straight to their masters instead of
        // through the seed's MOVED replies, which could let a pipelined fan-out overtake them.
        let empty: &[u8] = match namespaced {
            true => b"*2\r\n$1\r\n0\r\n*0\r\n",
            false => b":0\r\n",
        };
        assert_eq!(
            show(&gateway.request(ready_command(namespaced))),
            show(empty)
        );
        Comparison {
            setup,
            protocol: 2,
            reference: connect(pki.as_ref(), reference_server.port(), || {
                reference_server.tls_port()
            }),
            gateway,
            gateway_process,
            backends,
            reference_server,
            pki,
            neighbour,
        }
    }

    pub fn topology(&self) -> Topology {
        self.setup.topology
    }

    pub fn setup(&self) -> Setup {
        self.setup
    }

    /// Another client of the gateway, over the comparison's transport (not yet speaking `HELLO 3`).
    pub fn connect_gateway(&self) -> RawClient {
        let gateway = &self.gateway_process;
        connect(self.pki.as_ref(), gateway.port(), || gateway.tls_port())
    }

    /// Another client of the reference redis-server, over the comparison's transport.
    pub fn connect_reference(&self) -> RawClient {
        let reference = &self.reference_server;
        connect(self.pki.as_ref(), reference.port(), || reference.tls_port())
    }

    /// Another client of the reference and another of the gateway, each speaking the comparison's protocol:
    /// (reference, gateway).
    pub fn connect_both(&self) -> (RawClient, RawClient) {
        let speaking = |mut client: RawClient| {
            if self.protocol == 3 {
                let hello = client.request(&[b"HELLO", b"3"]);
                assert!(hello.starts_with(b"%7\r\n"), "HELLO 3: {}", show(&hello));
            }
            client
        };
        (
            speaking(self.connect_reference()),
            speaking(self.connect_gateway()),
        )
    }

    /// `HELLO version` on both clients; the replies must be the same but for the client id.
    pub fn hello(&mut self, version: u8) {
        let (reference, gateway) = self.both(&["HELLO", &version.to_string()]);
        assert_eq!(
            show(&without_client_id(&gateway)),
            show(&without_client_id(&reference)),
            "HELLO {version}: gateway (left) and Redis (right) differ"
        );
        if let Some(neighbour) = &mut self.neighbour {
            neighbour.same(
                self.setup,
                &[b"HELLO", version.to_string().as_bytes()],
                false,
            );
        }
        self.protocol = version;
        // As at start: a DBSIZE waits for the slot map of the cluster backend the new protocol uses.
        self.same(ready_command(self.neighbour.is_some()));
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
            self.setup
        );
        self.neighbour_same(args, false);
        gateway
    }

    /// In a namespaced comparison, the second tenant runs `args` too, and must get Redis' reply.
    fn neighbour_same<A: AsRef<[u8]>>(&mut self, args: &[A], unordered: bool) {
        let args: Vec<&[u8]> = args.iter().map(AsRef::as_ref).collect();
        if let Some(neighbour) = &mut self.neighbour {
            neighbour.same(self.setup, &args, unordered);
        }
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
                self.setup
            );
        }
        for args in commands {
            self.neighbour_same(args, false);
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
            self.setup
        );
    }

    /// Asserts an array reply with the same elements as Redis', in any order (gathered from several shards).
    pub fn unordered(&mut self, args: &[&str]) {
        let (reference, gateway) = self.both(args);
        assert_eq!(
            sorted_elements(&gateway),
            sorted_elements(&reference),
            "[{}] {args:?}: the gateway's elements (left) differ from Redis' (right)",
            self.setup
        );
        self.neighbour_same(args, true);
    }

    /// A deliberate difference: the gateway answers `gateway_reply` where Redis answers something else. `why`
    /// says why and names the docs section that records it.
    pub fn differs(&mut self, args: &[&str], gateway_reply: &[u8], why: &str) {
        let (reference, gateway) = self.both(args);
        assert_eq!(
            show(&gateway),
            show(gateway_reply),
            "[{}] {args:?}: expected the gateway's documented reply ({why}); Redis said {}",
            self.setup,
            show(&reference)
        );
        if let Some(neighbour) = &mut self.neighbour {
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            neighbour.differs(self.setup, &args, gateway_reply);
        }
    }

    /// Iterates `SCAN 0 <options>` to the end on both sides and asserts the same keys, each exactly once (for
    /// both tenants of a namespaced comparison).
    pub fn scan_same(&mut self, options: &[&str]) -> Vec<Vec<u8>> {
        if let Some(neighbour) = &mut self.neighbour {
            let reference = scan_all(&mut neighbour.reference, options);
            assert_eq!(
                scan_all(&mut neighbour.gateway, options),
                reference,
                "[{}, neighbour tenant] SCAN {options:?}",
                self.setup
            );
        }
        let reference = scan_all(&mut self.reference, options);
        let mut gateway = scan_all(&mut self.gateway, options);
        let total = gateway.len();
        gateway.dedup();
        assert_eq!(
            gateway.len(),
            total,
            "[{}] SCAN {options:?} returned a key twice",
            self.setup
        );
        assert_eq!(
            gateway.iter().map(|k| show(k)).collect::<Vec<_>>(),
            reference.iter().map(|k| show(k)).collect::<Vec<_>>(),
            "[{}] SCAN {options:?}: the gateway's keys (left) differ from Redis' (right)",
            self.setup
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
