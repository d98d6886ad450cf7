//! How to reach and set up one backend node: its address, credentials, database, the role the connect handshake
//! checks, the script user, the protocol and TLS.

use std::sync::Arc;

use crate::resp::Protocol;
use crate::tls::BackendTls;

/// How to reach and set up one backend node.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct NodeSpec {
    /// `host:port`, as shown in errors and metrics.
    pub addr: String,
    pub username: Option<String>,
    pub password: Option<String>,
    pub db: u32,
    /// What the connect handshake checks or sets beyond AUTH and SELECT.
    pub role: NodeRole,
    /// An operator-provisioned user (name, password) that tenants' scripts run as; `None`: the gateway creates
    /// its own users (see `identity`).
    pub script_user: Option<(String, String)>,
    /// What the connection speaks once connected (`HELLO 3` ends the handshake of a RESP3 one).
    pub protocol: Protocol,
    /// TLS to the node, with the resource's settings; `None`: plain TCP.
    pub tls: Option<Arc<BackendTls>>,
}

/// The role a node is used in, as far as the connect handshake is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) enum NodeRole {
    /// Whatever the node is (standalone resources, cluster masters: a cluster redirects misplaced writes).
    #[default]
    Any,
    /// A sentinel-managed master: `ROLE` must say `master`, so that a demoted master that came back as a replica
    /// never gets a write. A node that fails the check is down until it passes it.
    Master,
    /// A cluster replica serving reads: `READONLY` on connect.
    ClusterReplica,
    /// A sentinel process: no database, no ACL users of the gateway's (see `identity`).
    Sentinel,
}

impl NodeSpec {
    /// A sentinel without a password, for tests: its handshake is a bare `PING`.
    #[cfg(test)]
    pub(crate) fn bare_sentinel(addr: String) -> NodeSpec {
        NodeSpec {
            addr,
            username: None,
            password: None,
            db: 0,
            role: NodeRole::Sentinel,
            script_user: None,
            protocol: Protocol::Resp2,
            tls: None,
        }
    }

    /// The same node, spoken to in `protocol` (the gateway's own queries parse RESP2 replies).
    pub(crate) fn speaking(mut self, protocol: Protocol) -> NodeSpec {
        self.protocol = protocol;
        self
    }
}

impl std::fmt::Debug for NodeSpec {
    // Never print the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeSpec")
            .field("addr", &self.addr)
            .field("username", &self.username)
            .field("db", &self.db)
            .field("role", &self.role)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}
