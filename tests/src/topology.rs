//! Multi-process Redis deployments for end-to-end tests: a Redis Cluster (masters + replicas, built with
//! `redis-cli --cluster create`) and a sentinel group (a master, replicas and `redis-server --sentinel`
//! processes). Everything runs on allocated loopback ports, readiness is polled, and processes die with the guard.

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::process::{Process, ScratchDir, wait_until_answering};
use crate::{RedisServer, allocate_port};

const READY_TIMEOUT: Duration = Duration::from_secs(30);

fn connect(port: u16, user: Option<&str>, password: Option<&str>) -> redis::Connection {
    let url = match (user, password) {
        (Some(user), Some(password)) => format!("redis://{user}:{password}@127.0.0.1:{port}"),
        (None, Some(password)) => format!("redis://:{password}@127.0.0.1:{port}"),
        _ => format!("redis://127.0.0.1:{port}"),
    };
    redis::Client::open(url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
        .unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"))
}

/// Polls `check` every 50 ms until it holds, panicking with `what` after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// [`wait_for`] for async tests: polls without holding up a runtime thread, so that the tasks the condition
/// watches keep running.
pub async fn wait_for_async(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A number field (`name:value`) of an `INFO` reply.
fn info_field(info: &str, name: &str) -> Option<u64> {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|value| value.trim().parse().ok())
}

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

/// A Redis Cluster of `redis-server --cluster-enabled yes` processes.
pub struct RedisCluster {
    nodes: Vec<(u16, Option<RedisServer>)>,
    /// The default user's password: replication, `redis-cli` and the tests' own checks use it.
    password: Option<String>,
    /// An ACL user for the gateway: the URLs use it when set.
    user: Option<(String, String)>,
}

impl RedisCluster {
    /// `masters` masters with `replicas` replicas each, all slots assigned, every node agreeing.
    pub fn start(masters: usize, replicas: usize, password: Option<&str>) -> RedisCluster {
        Self::start_with_user(masters, replicas, password, None)
    }

    /// Like [`RedisCluster::start`], with an ACL user `(name, password)` on every node, which the URLs use.
    pub fn start_with_user(
        masters: usize,
        replicas: usize,
        password: Option<&str>,
        user: Option<(&str, &str)>,
    ) -> RedisCluster {
        let count = masters * (1 + replicas);
        let nodes: Vec<(u16, Option<RedisServer>)> = (0..count)
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
                let server = builder.start();
                (server.port(), Some(server))
            })
            .collect();
        let cluster = RedisCluster {
            nodes,
            password: password.map(str::to_string),
            user: user.map(|(name, secret)| (name.to_string(), secret.to_string())),
        };
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(cluster.nodes.iter().map(|(p, _)| format!("127.0.0.1:{p}")));
        args.extend([
            "--cluster-replicas".into(),
            replicas.to_string(),
            "--cluster-yes".into(),
        ]);
        let output = cluster.redis_cli(&args);
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed:\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        cluster.wait_healthy(count);
        cluster
    }

    /// Runs `redis-cli` (with the cluster's password) and returns its output.
    pub fn redis_cli(&self, args: &[String]) -> std::process::Output {
        let mut command = Command::new("redis-cli");
        if let Some(password) = &self.password {
            command.args(["-a", password, "--no-auth-warning"]);
        }
        command
            .args(args)
            .output()
            .expect("run redis-cli (is it installed?)")
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

    /// `redis-cluster://password@seeds`; every node is a seed.
    pub fn url(&self) -> String {
        format!("redis-cluster://{}", self.location())
    }

    /// `redis-cluster-slaves://...?withMaster=...`.
    pub fn slaves_url(&self, with_master: bool) -> String {
        format!(
            "redis-cluster-slaves://{}?withMaster={with_master}",
            self.location()
        )
    }

    fn location(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|(p, _)| format!("127.0.0.1:{p}"))
            .collect();
        let auth = match (&self.user, &self.password) {
            (Some((name, secret)), _) => format!("{name}:{secret}@"),
            (None, Some(password)) => format!("{password}@"),
            (None, None) => String::new(),
        };
        format!("{auth}{}", seeds.join(","))
    }

    pub fn client(&self, port: u16) -> redis::Connection {
        connect(port, None, self.password.as_deref())
    }

    pub fn live_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|(_, server)| server.is_some())
            .map(|(port, _)| *port)
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
        let offset = |port: u16, field: &str| {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut self.client(port))
                .unwrap_or_default();
            info_field(&info, field)
        };
        for master in nodes.iter().filter(|n| n.master && !n.failed) {
            let written = offset(master.port, "master_repl_offset")
                .unwrap_or_else(|| panic!("no master_repl_offset on {}", master.port));
            for replica in nodes
                .iter()
                .filter(|n| !n.failed && n.master_id.as_ref() == Some(&master.id))
            {
                wait_for(
                    &format!(
                        "replica {} to reach offset {written} of master {}",
                        replica.port, master.port
                    ),
                    READY_TIMEOUT,
                    || offset(replica.port, "slave_repl_offset").is_some_and(|o| o >= written),
                );
            }
        }
    }

    /// Kills a node (SIGKILL).
    pub fn kill(&mut self, port: u16) {
        for (p, server) in &mut self.nodes {
            if *p == port {
                server.take();
            }
        }
    }
}

/// A sentinel-managed master with replicas and sentinels. The data nodes have a default-user password (used for
/// replication and by the sentinels) and an ACL user for the gateway.
pub struct SentinelGroup {
    pub master_name: String,
    data: Vec<(u16, Option<RedisServer>)>,
    sentinels: Vec<(u16, Process, ScratchDir)>,
    password: String,
    sentinel_password: String,
    user: (String, String),
}

impl SentinelGroup {
    pub fn start(replicas: usize, sentinels: usize) -> SentinelGroup {
        let password = "datapass".to_string();
        let user = ("gateway".to_string(), "gwpass".to_string());
        let sentinel_password = "sentinelpass".to_string();
        let master = Self::data_node(allocate_port(), &password, &user, None);
        let master_port = master.port();
        let mut data = vec![(master_port, Some(master))];
        for _ in 0..replicas {
            let replica = Self::data_node(allocate_port(), &password, &user, Some(master_port));
            data.push((replica.port(), Some(replica)));
        }
        // Sentinels read a replica's link state when they first see it, then only every 10 s: start them once
        // the replicas are in sync, so that they report them as usable at once.
        for (port, _) in &data[1..] {
            wait_for("a replica in sync", READY_TIMEOUT, || {
                redis::cmd("INFO")
                    .arg("replication")
                    .query::<String>(&mut connect(*port, None, Some(&password)))
                    .is_ok_and(|info| info.contains("master_link_status:up"))
            });
        }
        let master_name = "mymaster".to_string();
        let sentinels = (0..sentinels)
            .map(|_| {
                let port = allocate_port();
                let dir = ScratchDir::new("sentinel", port);
                let conf = dir.0.join("sentinel.conf");
                std::fs::write(
                    &conf,
                    format!(
                        "port {port}\nbind 127.0.0.1\ndir {}\n\
                         sentinel monitor {master_name} 127.0.0.1 {master_port} 2\n\
                         sentinel down-after-milliseconds {master_name} 1000\n\
                         sentinel failover-timeout {master_name} 5000\n\
                         sentinel auth-pass {master_name} {password}\n\
                         requirepass {sentinel_password}\n\
                         sentinel sentinel-pass {sentinel_password}\n",
                        dir.0.display()
                    ),
                )
                .expect("write sentinel.conf");
                let log = dir.0.join("sentinel.log");
                let mut command = Command::new("redis-server");
                command.arg(&conf).arg("--sentinel");
                let mut process = Process::spawn(&mut command, &log);
                wait_until_answering(port, &mut process, &log);
                (port, process, dir)
            })
            .collect();
        let group = SentinelGroup {
            master_name,
            data,
            sentinels,
            password,
            sentinel_password,
            user,
        };
        let expected_sentinels = group.sentinels.len() - 1;
        wait_for(
            "sentinels that know each other and every replica",
            READY_TIMEOUT,
            || {
                group.sentinel_ports().iter().all(|&port| {
                    let mut client = group.sentinel_client(port);
                    let replicas: Vec<HashMap<String, String>> = redis::cmd("SENTINEL")
                        .arg("replicas")
                        .arg(&group.master_name)
                        .query(&mut client)
                        .unwrap_or_default();
                    let others: Vec<redis::Value> = redis::cmd("SENTINEL")
                        .arg("sentinels")
                        .arg(&group.master_name)
                        .query(&mut client)
                        .unwrap_or_default();
                    let linked = replicas
                        .iter()
                        .filter(|r| r.get("master-link-status").is_some_and(|s| s == "ok"))
                        .count();
                    linked == group.data.len() - 1 && others.len() == expected_sentinels
                })
            },
        );
        group
    }

    fn data_node(
        port: u16,
        password: &str,
        user: &(String, String),
        replica_of: Option<u16>,
    ) -> RedisServer {
        let mut builder = RedisServer::builder()
            .password(password)
            .arg("--masterauth")
            .arg(password)
            .arg("--user")
            .arg(&user.0)
            .arg("on")
            .arg(&format!(">{}", user.1))
            .arg("~*")
            .arg("&*")
            .arg("+@all");
        if let Some(master) = replica_of {
            builder = builder
                .arg("--replicaof")
                .arg("127.0.0.1")
                .arg(&master.to_string());
        }
        builder.start_on(port)
    }

    fn location(&self) -> String {
        let sentinels: Vec<String> = self
            .sentinels
            .iter()
            .map(|(p, _, _)| format!("127.0.0.1:{p}"))
            .collect();
        format!(
            "{}:{}@{}/{}",
            self.user.0,
            self.user.1,
            sentinels.join(","),
            self.master_name
        )
    }

    /// `redis-sentinel://gateway:pass@sentinels/mymaster?sentinelPassword=...`.
    pub fn url(&self) -> String {
        format!(
            "redis-sentinel://{}?sentinelPassword={}",
            self.location(),
            self.sentinel_password
        )
    }

    pub fn slaves_url(&self, with_master: bool) -> String {
        format!(
            "redis-sentinel-slaves://{}?withMaster={with_master}&sentinelPassword={}",
            self.location(),
            self.sentinel_password
        )
    }

    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|(p, _, _)| *p).collect()
    }

    pub fn sentinel_client(&self, port: u16) -> redis::Connection {
        connect(port, None, Some(&self.sentinel_password))
    }

    /// A data node, as the default user.
    pub fn client(&self, port: u16) -> redis::Connection {
        connect(port, None, Some(&self.password))
    }

    pub fn data_ports(&self) -> Vec<u16> {
        self.data
            .iter()
            .filter(|(_, s)| s.is_some())
            .map(|(p, _)| *p)
            .collect()
    }

    /// The master's port, as the first sentinel says.
    pub fn master_port(&self) -> u16 {
        let addr: Vec<String> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.master_name)
            .query(&mut self.sentinel_client(self.sentinel_ports()[0]))
            .expect("SENTINEL get-master-addr-by-name");
        addr[1].parse().expect("port")
    }

    /// `SENTINEL FAILOVER` on the first sentinel.
    pub fn failover(&self) {
        let _: () = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(&self.master_name)
            .query(&mut self.sentinel_client(self.sentinel_ports()[0]))
            .expect("SENTINEL FAILOVER");
    }

    pub fn kill(&mut self, port: u16) {
        for (p, server) in &mut self.data {
            if *p == port {
                server.take();
            }
        }
    }

    /// Starts a killed data node again on its port, as a replica of `master`.
    pub fn restart_as_replica(&mut self, port: u16, master: u16) {
        let mut server = Some(Self::data_node(
            port,
            &self.password,
            &self.user,
            Some(master),
        ));
        for (p, slot) in &mut self.data {
            if *p == port {
                *slot = server.take();
            }
        }
    }
}
