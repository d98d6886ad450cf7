//! A Redis Cluster of `redis-server --cluster-enabled yes` processes, plain or TLS.
//!
//! Under TLS (`--tls-cluster yes`), Redis 7.0 answers each client with the ports of its own kind: `CLUSTER SLOTS`,
//! `CLUSTER NODES` and `MOVED`/`ASK` name the TLS ports to a client on a TLS port and the plain ports to one on a
//! plain port (`CLUSTER SHARDS` lists both). So the gateway, given TLS seeds, only ever learns TLS ports, while
//! the harness, reading over the plain ports, sees plain ports everywhere: nodes are named here by their plain
//! port, and [`RedisCluster::tls_port`] gives the other. The bus port follows the TLS port (TLS port + 10000),
//! and nodes reach each other over TLS only, so whatever names another node to a node (`redis-cli --cluster`,
//! `MIGRATE`) must use its TLS port.

use std::process::Command;

use super::{
    NodeTls, READY_TIMEOUT, connect, repl_offset, resource_url, wait_for, wait_replicated,
};
use crate::{RedisServer, allocate_port};

/// A node line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
pub struct ClusterNode {
    pub id: String,
    pub port: u16,
    pub master: bool,
    pub failed: bool,
    /// The master's id, for a replica.
    pub master_id: Option<String>,
}

/// One node: its plain port, its TLS port under TLS, and the process until it is killed.
struct Member {
    port: u16,
    tls_port: Option<u16>,
    server: Option<RedisServer>,
}

impl Member {
    /// `host:port` as the nodes know each other: the TLS port under TLS.
    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.tls_port.unwrap_or(self.port))
    }
}

/// A Redis Cluster of `redis-server --cluster-enabled yes` processes.
pub struct RedisCluster {
    nodes: Vec<Member>,
    /// The default user's password: replication, `redis-cli` and the tests' own checks use it.
    password: Option<String>,
    /// An ACL user for the gateway: the URLs use it when set.
    user: Option<(String, String)>,
    tls: Option<NodeTls>,
}

impl RedisCluster {
    /// `masters` masters with `replicas` replicas each, all slots assigned, every node agreeing.
    pub fn start(masters: usize, replicas: usize, password: Option<&str>) -> RedisCluster {
        Self::launch(masters, replicas, password, None, None)
    }

    /// Like [`RedisCluster::start`], with an ACL user `(name, password)` on every node, which the URLs use.
    pub fn start_with_user(
        masters: usize,
        replicas: usize,
        password: Option<&str>,
        user: Option<(&str, &str)>,
    ) -> RedisCluster {
        Self::launch(masters, replicas, password, user, None)
    }

    /// Like [`RedisCluster::start`], speaking TLS on every hop (see the module's doc); the URLs are
    /// `rediss-cluster` ones with the nodes' TLS ports as seeds.
    pub fn start_tls(
        masters: usize,
        replicas: usize,
        password: Option<&str>,
        tls: &NodeTls,
    ) -> RedisCluster {
        Self::launch(masters, replicas, password, None, Some(tls.clone()))
    }

    fn launch(
        masters: usize,
        replicas: usize,
        password: Option<&str>,
        user: Option<(&str, &str)>,
        tls: Option<NodeTls>,
    ) -> RedisCluster {
        let count = masters * (1 + replicas);
        let nodes: Vec<Member> = (0..count)
            .map(|_| {
                let mut builder = RedisServer::builder()
                    .arg("--cluster-enabled")
                    .arg("yes")
                    .arg("--cluster-config-file")
                    .arg("nodes.conf")
                    .arg("--cluster-node-timeout")
                    .arg("1000")
                    // Replicas take over at once when their master fails (no data-age check in tests).
                    .arg("--cluster-replica-validity-factor")
                    .arg("0");
                if let Some(password) = password {
                    builder = builder.password(password).arg("--masterauth").arg(password);
                }
                if let Some((name, secret)) = user {
                    builder = builder
                        .arg("--user")
                        .arg(name)
                        .arg("on")
                        .arg(&format!(">{secret}"));
                    builder = builder.arg("~*").arg("&*").arg("+@all");
                }
                let tls_port = tls.as_ref().map(|_| allocate_port());
                if let (Some(tls), Some(port)) = (&tls, tls_port) {
                    builder = tls.configure(builder.arg("--tls-cluster").arg("yes"), port);
                }
                let server = builder.start();
                Member {
                    port: server.port(),
                    tls_port,
                    server: Some(server),
                }
            })
            .collect();
        let cluster = RedisCluster {
            nodes,
            password: password.map(str::to_string),
            user: user.map(|(name, secret)| (name.to_string(), secret.to_string())),
            tls,
        };
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(cluster.nodes.iter().map(Member::address));
        args.extend([
            "--cluster-replicas".into(),
            replicas.to_string(),
            "--cluster-yes".into(),
        ]);
        cluster.redis_cli(&args);
        cluster.wait_healthy(count);
        cluster
    }

    /// Runs `redis-cli` (with the cluster's password, over TLS under TLS) and checks that it succeeded.
    /// Addresses in `args` are as the nodes know each other (see [`RedisCluster::address`]).
    fn redis_cli(&self, args: &[String]) {
        let mut command = Command::new("redis-cli");
        if let Some(password) = &self.password {
            command.args(["-a", password, "--no-auth-warning"]);
        }
        if let Some(tls) = &self.tls {
            command.arg("--tls").arg("--cacert").arg(&tls.ca);
        }
        let output = command
            .args(args)
            .output()
            .expect("run redis-cli (is it installed?)");
        assert!(
            output.status.success(),
            "redis-cli {args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn member(&self, port: u16) -> &Member {
        self.nodes
            .iter()
            .find(|m| m.port == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    /// `host:port` of the node at plain `port` as the nodes (and the gateway) know it: its TLS port under TLS.
    pub fn address(&self, port: u16) -> String {
        self.member(port).address()
    }

    /// The TLS port of the node at plain `port` (see [`RedisCluster::start_tls`]).
    pub fn tls_port(&self, port: u16) -> u16 {
        self.member(port)
            .tls_port
            .expect("a cluster started with TLS")
    }

    /// Moves `slots` slots from master `from` to master `to` with `redis-cli --cluster reshard`, keys and all.
    pub fn reshard(&self, from: &ClusterNode, to: &ClusterNode, slots: usize) {
        let args = [
            "--cluster",
            "reshard",
            &self.address(from.port),
            "--cluster-from",
            &from.id,
            "--cluster-to",
            &to.id,
            "--cluster-slots",
            &slots.to_string(),
            "--cluster-yes",
        ];
        self.redis_cli(&args.map(String::from));
    }

    /// `CLUSTER SETSLOT slot <how...>` on the node at `port`.
    pub fn set_slot(&self, port: u16, slot: usize, how: &[&str]) {
        let () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(how)
            .query(&mut self.client(port))
            .expect("CLUSTER SETSLOT");
    }

    /// Moves `keys` (all in one slot) from the master at `from` to `to` with MIGRATE, which reaches `to` the way
    /// the nodes reach each other (over TLS under TLS).
    pub fn migrate(&self, from: u16, to: u16, keys: &[&str]) {
        let to = self.member(to);
        let mut migrate = redis::cmd("MIGRATE");
        migrate
            .arg("127.0.0.1")
            .arg(to.tls_port.unwrap_or(to.port))
            .arg("")
            .arg(0)
            .arg(5000);
        if let Some(password) = &self.password {
            migrate.arg("AUTH").arg(password);
        }
        let () = migrate
            .arg("KEYS")
            .arg(keys)
            .query(&mut self.client(from))
            .expect("MIGRATE");
    }

    /// How many times the node at `port` answered with `error` (`MOVED`, `ASK`...), from `INFO errorstats`.
    pub fn errorstat(&self, port: u16, error: &str) -> u64 {
        let stats: String = redis::cmd("INFO")
            .arg("errorstats")
            .query(&mut self.client(port))
            .expect("INFO errorstats");
        stats
            .lines()
            .find_map(|line| line.strip_prefix(&format!("errorstat_{error}:count=")))
            .and_then(|count| count.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Waits until every live node sees `cluster_state:ok` (after a failover, a node that has not heard of the
    /// promotion yet still answers `CLUSTERDOWN` for a moment, its own slots included).
    pub fn wait_up(&self) {
        wait_for("every node to see the cluster up", READY_TIMEOUT, || {
            self.live_ports().iter().all(|&port| {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut self.client(port))
                    .unwrap_or_default();
                info.contains("cluster_state:ok")
            })
        });
    }

    /// Waits until every live node sees `cluster_state:ok`, `nodes` nodes, no failure flags, and linked replicas.
    pub fn wait_healthy(&self, nodes: usize) {
        wait_for("a healthy cluster", READY_TIMEOUT, || {
            self.live_ports().iter().all(|&port| {
                let mut client = self.client(port);
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut client)
                    .unwrap_or_default();
                let listed = self.nodes_seen_by(port);
                let replication: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut client)
                    .unwrap_or_default();
                info.contains("cluster_state:ok")
                    && listed.len() == nodes
                    && listed.iter().all(|n| !n.failed)
                    && (replication.contains("role:master")
                        || replication.contains("master_link_status:up"))
            })
        });
    }

    /// `redis-cluster://password@seeds` (`rediss-cluster://...?tlsCaFile=...` under TLS); every node is a seed.
    pub fn url(&self) -> String {
        resource_url(
            "redis-cluster",
            &self.location(),
            Vec::new(),
            self.tls.as_ref(),
        )
    }

    /// `redis-cluster-slaves://...?withMaster=...`.
    pub fn slaves_url(&self, with_master: bool) -> String {
        resource_url(
            "redis-cluster-slaves",
            &self.location(),
            vec![format!("withMaster={with_master}")],
            self.tls.as_ref(),
        )
    }

    fn location(&self) -> String {
        let seeds: Vec<String> = self.nodes.iter().map(Member::address).collect();
        let auth = match (&self.user, &self.password) {
            (Some((name, secret)), _) => format!("{name}:{secret}@"),
            (None, Some(password)) => format!("{password}@"),
            (None, None) => String::new(),
        };
        format!("{auth}{}", seeds.join(","))
    }

    /// A connection to the node at plain `port`, as the default user.
    pub fn client(&self, port: u16) -> redis::Connection {
        connect(port, None, self.password.as_deref())
    }

    /// The live nodes' plain ports.
    pub fn live_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|m| m.server.is_some())
            .map(|m| m.port)
            .collect()
    }

    /// `CLUSTER NODES` as one live node sees it.
    pub fn nodes_seen_by(&self, port: u16) -> Vec<ClusterNode> {
        let text: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut self.client(port))
            .unwrap_or_default();
        text.lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                let addr = fields.get(1)?.split('@').next()?;
                let port = addr.rsplit(':').next()?.parse().ok()?;
                let flags = fields.get(2)?;
                Some(ClusterNode {
                    id: fields.first()?.to_string(),
                    port,
                    master: flags.contains("master"),
                    failed: flags.contains("fail") || flags.contains("handshake"),
                    master_id: fields.get(3).filter(|m| **m != "-").map(|m| m.to_string()),
                })
            })
            .collect()
    }

    /// The live masters' ports, as the first live node sees them.
    pub fn masters(&self) -> Vec<ClusterNode> {
        let port = self.live_ports()[0];
        self.nodes_seen_by(port)
            .into_iter()
            .filter(|n| n.master && !n.failed)
            .collect()
    }

    /// The live replicas.
    pub fn replicas(&self) -> Vec<ClusterNode> {
        let port = self.live_ports()[0];
        self.nodes_seen_by(port)
            .into_iter()
            .filter(|n| !n.master && !n.failed)
            .collect()
    }

    /// The port of the master owning each slot (0 for an unassigned slot), per `CLUSTER SLOTS` on a live node.
    pub fn slot_owners(&self) -> Vec<u16> {
        self.slot_owners_seen_by(self.live_ports()[0])
    }

    /// [`RedisCluster::slot_owners`] as the node at `port` sees them.
    fn slot_owners_seen_by(&self, port: u16) -> Vec<u16> {
        let slots: Vec<redis::Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut self.client(port))
            .expect("CLUSTER SLOTS");
        let int = |v: &redis::Value| match v {
            redis::Value::Int(i) => *i,
            _ => panic!("unexpected CLUSTER SLOTS field {v:?}"),
        };
        let mut owners = vec![0u16; 16384];
        for range in slots {
            let redis::Value::Array(fields) = range else {
                panic!("unexpected CLUSTER SLOTS entry {range:?}");
            };
            let redis::Value::Array(master) = &fields[2] else {
                panic!("unexpected CLUSTER SLOTS node {:?}", fields[2]);
            };
            let port = int(&master[1]) as u16;
            for slot in int(&fields[0])..=int(&fields[1]) {
                owners[slot as usize] = port;
            }
        }
        owners
    }

    /// How many replicas `CLUSTER SLOTS` lists, as the node at `port` answers it. Redis leaves out replicas whose
    /// replication offset it has not yet learned (a fresh replica), so clients see them only some time later.
    pub fn replicas_in_slots(&self, port: u16) -> usize {
        let slots: Vec<redis::Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut self.client(port))
            .unwrap_or_default();
        let mut replicas: Vec<String> = Vec::new();
        for range in slots {
            if let redis::Value::Array(fields) = range {
                for node in fields.iter().skip(3) {
                    let listed = format!("{node:?}");
                    if !replicas.contains(&listed) {
                        replicas.push(listed);
                    }
                }
            }
        }
        replicas.len()
    }

    /// Waits until a failover would lose nothing written so far: every live node sees the same slot owners (a
    /// replica promoted with an older view would claim slots its master no longer has), and every replica has
    /// applied everything its master had written when this was called (its `slave_repl_offset` reaches the
    /// master's `master_repl_offset`).
    pub fn wait_in_sync(&self) {
        wait_for(
            "every node to agree on the slot owners",
            READY_TIMEOUT,
            || {
                let views: Vec<Vec<u16>> = self
                    .live_ports()
                    .into_iter()
                    .map(|port| self.slot_owners_seen_by(port))
                    .collect();
                views.windows(2).all(|pair| pair[0] == pair[1])
            },
        );
        let nodes = self.nodes_seen_by(self.live_ports()[0]);
        for master in nodes.iter().filter(|n| n.master && !n.failed) {
            let written = repl_offset(&mut self.client(master.port), "master_repl_offset")
                .unwrap_or_else(|| panic!("no master_repl_offset on {}", master.port));
            for replica in nodes
                .iter()
                .filter(|n| !n.failed && n.master_id.as_ref() == Some(&master.id))
            {
                wait_replicated(replica.port, written, || self.client(replica.port));
            }
        }
    }

    /// Stops a node (SIGSTOP): it keeps its ports open but answers nothing, neither clients nor the bus.
    pub fn freeze(&self, port: u16) {
        self.server(port).freeze();
    }

    /// Lets a frozen node go on (SIGCONT).
    pub fn thaw(&self, port: u16) {
        self.server(port).thaw();
    }

    fn server(&self, port: u16) -> &RedisServer {
        let server = self.member(port).server.as_ref();
        server.unwrap_or_else(|| panic!("the node on port {port} was killed"))
    }

    /// Kills a node (SIGKILL).
    pub fn kill(&mut self, port: u16) {
        for member in &mut self.nodes {
            if member.port == port {
                member.server.take();
            }
        }
    }
}
