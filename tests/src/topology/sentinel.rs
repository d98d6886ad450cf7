//! A sentinel-managed master with replicas and sentinels, plain or TLS.
//!
//! Under TLS, the replicas replicate from the master's TLS port and announce their own TLS port
//! (`tls-replication yes`), and the sentinels monitor the TLS ports, reach each other on theirs and announce them:
//! every address a sentinel gives (`get-master-addr-by-name`, `SENTINEL replicas`, `+switch-master`) names a TLS
//! port. Data nodes are named here by that port, the one the sentinels name; the harness reaches them on their
//! plain ports.

use std::collections::HashMap;
use std::process::Command;

use super::{
    NodeTls, READY_TIMEOUT, connect, node_url, repl_offset, resource_url, wait_for, wait_replicated,
};
use crate::process::{Process, ScratchDir, wait_until_answering};
use crate::{RedisServer, allocate_port};

/// A data node: the port the sentinels name it by, the plain port the harness uses (the same without TLS), and
/// the process until it is killed.
struct DataNode {
    port: u16,
    plain_port: u16,
    server: Option<RedisServer>,
}

/// A sentinel: its plain port (the harness's), its TLS port under TLS, and the process.
struct Sentinel {
    port: u16,
    tls_port: Option<u16>,
    _process: Process,
    _dir: ScratchDir,
}

/// A sentinel-managed master with replicas and sentinels. The data nodes have a default-user password (used for
/// replication and by the sentinels) and an ACL user for the gateway.
pub struct SentinelGroup {
    pub master_name: String,
    data: Vec<DataNode>,
    sentinels: Vec<Sentinel>,
    password: String,
    sentinel_password: String,
    user: (String, String),
    tls: Option<NodeTls>,
}

impl SentinelGroup {
    pub fn start(replicas: usize, sentinels: usize) -> SentinelGroup {
        Self::launch(replicas, sentinels, None)
    }

    /// Like [`SentinelGroup::start`], speaking TLS on every hop (see the module's doc); the URLs are
    /// `rediss-sentinel` ones with `sentinelSSL=true`.
    pub fn start_tls(replicas: usize, sentinels: usize, tls: &NodeTls) -> SentinelGroup {
        Self::launch(replicas, sentinels, Some(tls.clone()))
    }

    fn launch(replicas: usize, sentinels: usize, tls: Option<NodeTls>) -> SentinelGroup {
        let master_name = "mymaster".to_string();
        let mut group = SentinelGroup {
            master_name,
            data: Vec::new(),
            sentinels: Vec::new(),
            password: "datapass".to_string(),
            sentinel_password: "sentinelpass".to_string(),
            user: ("gateway".to_string(), "gwpass".to_string()),
            tls,
        };
        let master = group.data_node(allocate_port(), None, None);
        let master_port = master.port;
        group.data.push(master);
        for _ in 0..replicas {
            let replica = group.data_node(allocate_port(), None, Some(master_port));
            group.data.push(replica);
        }
        // Sentinels read a replica's link state when they first see it, then only every 10 s: start them once
        // the replicas are in sync, so that they report them as usable at once.
        for replica in &group.data[1..] {
            wait_for("a replica in sync", READY_TIMEOUT, || {
                redis::cmd("INFO")
                    .arg("replication")
                    .query::<String>(&mut group.client(replica.port))
                    .is_ok_and(|info| info.contains("master_link_status:up"))
            });
        }
        group.sentinels = (0..sentinels)
            .map(|_| group.sentinel(master_port))
            .collect();
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

    /// A sentinel monitoring the master at `master_port` (as the sentinels name it).
    fn sentinel(&self, master_port: u16) -> Sentinel {
        let port = allocate_port();
        let dir = ScratchDir::new("sentinel", port);
        let conf = dir.0.join("sentinel.conf");
        let (name, password) = (&self.master_name, &self.password);
        let (sentinel_password, path) = (&self.sentinel_password, dir.0.display());
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {path}\n\
                 sentinel monitor {name} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {name} 1000\n\
                 sentinel failover-timeout {name} 5000\n\
                 sentinel auth-pass {name} {password}\n\
                 requirepass {sentinel_password}\n\
                 sentinel sentinel-pass {sentinel_password}\n"
            ),
        )
        .expect("write sentinel.conf");
        let log = dir.0.join("sentinel.log");
        let mut command = Command::new("redis-server");
        command.arg(&conf).arg("--sentinel");
        let tls_port = self.tls.as_ref().map(|tls| {
            let tls_port = allocate_port();
            command.args(tls.server_args(tls_port));
            tls_port
        });
        let mut process = Process::spawn(&mut command, &log);
        wait_until_answering(port, &mut process, &log);
        Sentinel {
            port,
            tls_port,
            _process: process,
            _dir: dir,
        }
    }

    /// A data node on plain port `plain_port` and, under TLS, on TLS port `tls_port` (a new one when `None`); a
    /// replica of `replica_of` (as the sentinels name it) when given.
    fn data_node(
        &self,
        plain_port: u16,
        tls_port: Option<u16>,
        replica_of: Option<u16>,
    ) -> DataNode {
        let user = &self.user;
        let mut builder = RedisServer::builder()
            .password(&self.password)
            .arg("--masterauth")
            .arg(&self.password)
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
        let tls_port = self
            .tls
            .as_ref()
            .map(|_| tls_port.unwrap_or_else(allocate_port));
        if let (Some(tls), Some(port)) = (&self.tls, tls_port) {
            builder = tls.configure(builder, port);
        }
        DataNode {
            port: tls_port.unwrap_or(plain_port),
            plain_port,
            server: Some(builder.start_on(plain_port)),
        }
    }

    fn location(&self) -> String {
        let sentinels: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.tls_port.unwrap_or(s.port)))
            .collect();
        format!(
            "{}:{}@{}/{}",
            self.user.0,
            self.user.1,
            sentinels.join(","),
            self.master_name
        )
    }

    /// The URL parameters besides TLS ones: the sentinels' password, and TLS to them under TLS.
    fn sentinel_params(&self) -> Vec<String> {
        let mut params = vec![format!("sentinelPassword={}", self.sentinel_password)];
        if self.tls.is_some() {
            params.push("sentinelSSL=true".to_string());
        }
        params
    }

    /// `redis-sentinel://gateway:pass@sentinels/mymaster?sentinelPassword=...` (`rediss-sentinel://...` with
    /// `sentinelSSL=true` and `tlsCaFile` under TLS).
    pub fn url(&self) -> String {
        resource_url(
            "redis-sentinel",
            &self.location(),
            self.sentinel_params(),
            self.tls.as_ref(),
        )
    }

    pub fn slaves_url(&self, with_master: bool) -> String {
        let mut params = vec![format!("withMaster={with_master}")];
        params.extend(self.sentinel_params());
        resource_url(
            "redis-sentinel-slaves",
            &self.location(),
            params,
            self.tls.as_ref(),
        )
    }

    /// The sentinels' plain ports.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|s| s.port).collect()
    }

    /// A connection to the sentinel at plain `port`.
    pub fn sentinel_client(&self, port: u16) -> redis::Connection {
        connect(port, None, Some(&self.sentinel_password))
    }

    /// The URL of the sentinel at plain `port` (for an async client).
    pub fn sentinel_url(&self, port: u16) -> String {
        node_url(port, None, Some(&self.sentinel_password))
    }

    fn node(&self, port: u16) -> &DataNode {
        self.data
            .iter()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no data node on port {port}"))
    }

    /// A data node (named as the sentinels name it), as the default user, on its plain port.
    pub fn client(&self, port: u16) -> redis::Connection {
        connect(self.node(port).plain_port, None, Some(&self.password))
    }

    /// The URL of a data node (named as the sentinels name it), as the default user, on its plain port (for an
    /// async client).
    pub fn client_url(&self, port: u16) -> String {
        node_url(self.node(port).plain_port, None, Some(&self.password))
    }

    /// The plain port of the data node the sentinels name `port` (the same without TLS).
    pub fn plain_port(&self, port: u16) -> u16 {
        self.node(port).plain_port
    }

    /// The live data nodes, as the sentinels name them.
    pub fn data_ports(&self) -> Vec<u16> {
        self.data
            .iter()
            .filter(|n| n.server.is_some())
            .map(|n| n.port)
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

    /// Waits until every live replica has applied everything the master had written when this was called.
    pub fn wait_in_sync(&self) {
        let master = self.master_port();
        let written = repl_offset(&mut self.client(master), "master_repl_offset")
            .expect("the master's offset");
        for port in self.data_ports().into_iter().filter(|&p| p != master) {
            wait_replicated(port, written, || self.client(port));
        }
    }

    /// `SENTINEL FAILOVER` on the first sentinel.
    pub fn failover(&self) {
        let _: () = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(&self.master_name)
            .query(&mut self.sentinel_client(self.sentinel_ports()[0]))
            .expect("SENTINEL FAILOVER");
    }

    /// `SENTINEL FAILOVER`, then waits until the sentinels name a master other than `old`: returns its port.
    pub fn fail_over_from(&self, old: u16) -> u16 {
        self.failover();
        let mut new = old;
        super::wait_for(
            "the sentinels to switch masters",
            std::time::Duration::from_secs(20),
            || {
                new = self.master_port();
                new != old
            },
        );
        new
    }

    pub fn kill(&mut self, port: u16) {
        for node in &mut self.data {
            if node.port == port {
                node.server.take();
            }
        }
    }

    /// Starts a killed data node again on its ports, as a replica of `master`.
    pub fn restart_as_replica(&mut self, port: u16, master: u16) {
        let old = self.node(port);
        let restarted = self.data_node(old.plain_port, Some(old.port), Some(master));
        let index = self
            .data
            .iter()
            .position(|n| n.port == port)
            .expect("a known data node");
        self.data[index] = restarted;
    }
}
