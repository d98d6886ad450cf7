//! The Redis deployments a migration reads and writes, reached the way the gateway reaches them.
//!
//! A key goes to the target its route table's placement picks (`switchyard_schemas::placement`), and within a Redis
//! Cluster to the master owning its hash slot (CRC16 of its hash tag).

use std::collections::HashMap;
use std::io;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{RedisConnectionInfo, Value};
use switchyard_schemas::placement::{TablePlacement, crc16, hash_tag};
use switchyard_schemas::resource::TlsOptions;
use switchyard_schemas::{Credentials, Node, ResourceKind, ResourceUrl, RouteTable};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::migration::error::{TaskError, TaskResult};

const SLOTS: usize = 16384;
/// The longest a connection may take to open: TCP, TLS handshake, AUTH and SELECT.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// One Redis server, connected.
#[derive(Clone)]
pub(crate) struct Server {
    /// `host:port`, for logs and errors.
    pub(crate) addr: String,
    pub(crate) conn: MultiplexedConnection,
}

/// A resource of a route: one server, or a cluster's masters with the slot map.
pub(crate) enum Resource {
    Server(Server),
    Cluster {
        masters: Vec<Server>,
        /// Index into `masters` of each slot's owner.
        owners: Vec<usize>,
    },
}

/// Opens a connection to `node` (over TLS with `tls`'s options), authenticates and selects `db`.
async fn connect(
    node: &Node,
    auth: Option<&Credentials>,
    db: u32,
    tls: Option<&TlsOptions>,
) -> TaskResult<Server> {
    let addr = node.to_string();
    let info = RedisConnectionInfo {
        db: i64::from(db),
        username: auth.and_then(|a| a.username.clone()),
        password: auth.map(|a| a.password.clone()),
        ..RedisConnectionInfo::default()
    };
    let opened = async {
        let tcp = TcpStream::connect((node.host.as_str(), node.port))
            .await
            .map_err(|cause| TaskError::Connect {
                server: addr.clone(),
                cause,
            })?;
        let _ = tcp.set_nodelay(true);
        let conn = match tls {
            None => start(&info, tcp).await,
            Some(options) => {
                let stream = crate::tls::connect_backend(tcp, &node.host, options)
                    .await
                    .map_err(|cause| TaskError::Tls {
                        server: addr.clone(),
                        cause,
                    })?;
                start(&info, stream).await
            }
        };
        conn.map_err(|cause| TaskError::redis("connecting", &addr, cause))
    };
    let conn = tokio::time::timeout(CONNECT_TIMEOUT, opened)
        .await
        .map_err(|_| TaskError::Connect {
            server: addr.clone(),
            cause: io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no connection within {CONNECT_TIMEOUT:?}"),
            ),
        })??;
    Ok(Server { addr, conn })
}

/// Authenticates on an open stream and runs its reader in a task of its own, which ends with the last clone
/// of the connection.
async fn start<S>(
    info: &RedisConnectionInfo,
    stream: S,
) -> redis::RedisResult<MultiplexedConnection>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (conn, driver) = MultiplexedConnection::new(info, stream).await?;
    tokio::spawn(driver);
    Ok(conn)
}

impl Resource {
    /// Connects to the resource at `url` (its masters, for a cluster; the current master, for sentinel).
    pub(crate) async fn connect(url: &str) -> TaskResult<Resource> {
        let parsed = ResourceUrl::parse(url)
            .map_err(|e| TaskError::Unusable(format!("bad resource URL: {e}")))?;
        let auth = parsed.auth.as_ref();
        let tls = parsed.tls.as_ref();
        match &parsed.kind {
            ResourceKind::Standalone { node, db } => {
                Ok(Resource::Server(connect(node, auth, *db, tls).await?))
            }
            ResourceKind::Sentinel {
                sentinels,
                master_name,
                db,
                sentinel_auth,
                sentinel_tls,
                ..
            } => {
                let mut last = TaskError::Unusable("no sentinel given".to_string());
                for sentinel in sentinels {
                    let found = async {
                        let mut server =
                            connect(sentinel, sentinel_auth.as_ref(), 0, sentinel_tls.as_ref())
                                .await?;
                        let (host, port): (String, u16) = redis::cmd("SENTINEL")
                            .arg("get-master-addr-by-name")
                            .arg(master_name)
                            .query_async(&mut server.conn)
                            .await
                            .map_err(|e| {
                                TaskError::redis(
                                    "SENTINEL get-master-addr-by-name",
                                    &server.addr,
                                    e,
                                )
                            })?;
                        connect(&Node { host, port }, auth, *db, tls).await
                    };
                    match found.await {
                        Ok(server) => return Ok(Resource::Server(server)),
                        Err(e) => last = e,
                    }
                }
                Err(last)
            }
            ResourceKind::Cluster { seeds, .. } => {
                let mut last = TaskError::Unusable("no seed given".to_string());
                for seed in seeds {
                    match Resource::cluster(seed, auth, tls).await {
                        Ok(cluster) => return Ok(cluster),
                        Err(e) => last = e,
                    }
                }
                Err(last)
            }
        }
    }

    /// One server of the resource at `url`, to ask about the deployment rather than its data: a cluster's first
    /// seed that answers (no slot map), the current master of a sentinel-managed one.
    pub(crate) async fn one_server(url: &str) -> TaskResult<Server> {
        let parsed = ResourceUrl::parse(url)
            .map_err(|e| TaskError::Unusable(format!("bad resource URL: {e}")))?;
        let ResourceKind::Cluster { seeds, .. } = &parsed.kind else {
            return match Resource::connect(url).await? {
                Resource::Server(server) => Ok(server),
                Resource::Cluster { masters, .. } => masters
                    .into_iter()
                    .next()
                    .ok_or_else(|| TaskError::Unusable("a cluster without masters".to_string())),
            };
        };
        let mut last = TaskError::Unusable("no seed given".to_string());
        for seed in seeds {
            match connect(seed, parsed.auth.as_ref(), 0, parsed.tls.as_ref()).await {
                Ok(server) => return Ok(server),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// The cluster's masters and slot map, as `seed` sees them.
    async fn cluster(
        seed: &Node,
        auth: Option<&Credentials>,
        tls: Option<&TlsOptions>,
    ) -> TaskResult<Resource> {
        let mut server = connect(seed, auth, 0, tls).await?;
        let addr = server.addr.clone();
        let failed = |cause| TaskError::redis("CLUSTER SLOTS", &addr, cause);
        let unexpected = |problem: String| TaskError::unexpected(&addr, problem);
        let ranges: Vec<Vec<Value>> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut server.conn)
            .await
            .map_err(failed)?;
        let mut masters: Vec<Server> = Vec::new();
        let mut by_addr: HashMap<String, usize> = HashMap::new();
        let mut owners = vec![usize::MAX; SLOTS];
        for range in ranges {
            let (first, last, master) = match range.as_slice() {
                [first, last, master, ..] => (first, last, master),
                _ => return Err(unexpected("unexpected CLUSTER SLOTS reply".to_string())),
            };
            let first: usize = redis::from_redis_value(first).map_err(failed)?;
            let last: usize = redis::from_redis_value(last).map_err(failed)?;
            let (host, port): (String, u16) = match master {
                Value::Array(parts) if parts.len() >= 2 => (
                    redis::from_redis_value(&parts[0]).map_err(failed)?,
                    redis::from_redis_value(&parts[1]).map_err(failed)?,
                ),
                _ => return Err(unexpected("unexpected CLUSTER SLOTS reply".to_string())),
            };
            // An empty host means "the node you asked".
            let host = if host.is_empty() {
                seed.host.clone()
            } else {
                host
            };
            let node = Node { host, port };
            let index = match by_addr.get(&node.to_string()) {
                Some(&index) => index,
                None => {
                    masters.push(connect(&node, auth, 0, tls).await?);
                    by_addr.insert(node.to_string(), masters.len() - 1);
                    masters.len() - 1
                }
            };
            if first > last || last >= SLOTS {
                return Err(unexpected(format!("bad slot range {first}-{last}")));
            }
            owners[first..=last].fill(index);
        }
        if let Some(slot) = owners.iter().position(|&o| o == usize::MAX) {
            return Err(unexpected(format!(
                "slot {slot} has no master (the cluster is not healthy)"
            )));
        }
        Ok(Resource::Cluster { masters, owners })
    }

    /// The servers holding the resource's data, each once.
    pub(crate) fn masters(&self) -> Vec<Server> {
        match self {
            Resource::Server(server) => vec![server.clone()],
            Resource::Cluster { masters, .. } => masters.clone(),
        }
    }

    /// The server that holds `key`.
    pub(crate) fn server_for(&self, key: &[u8]) -> &Server {
        match self {
            Resource::Server(server) => server,
            Resource::Cluster { masters, owners } => {
                let slot = usize::from(crc16(hash_tag(key))) % SLOTS;
                &masters[owners[slot]]
            }
        }
    }
}

/// One side of a migration: a route table, with every resource it writes to connected.
pub(crate) struct Side {
    route: RouteTable,
    /// Connected resources by URL.
    resources: HashMap<String, Resource>,
}

impl Side {
    /// Connects to every write resource of `route` (names already inlined to URLs); `side` names it in errors.
    pub(crate) async fn connect(side: &'static str, route: RouteTable) -> TaskResult<Side> {
        let mut resources = HashMap::new();
        for target in route.targets() {
            for url in target.write_resources() {
                if !resources.contains_key(url) {
                    let resource = Resource::connect(url).await.map_err(|cause| {
                        TaskError::resource(side, crate::redact::url(url), cause)
                    })?;
                    resources.insert(url.clone(), resource);
                }
            }
        }
        Ok(Side { route, resources })
    }

    pub(crate) fn placement(&self) -> TablePlacement<'_> {
        TablePlacement::new(&self.route)
    }

    /// Every server that holds data of this side: the masters of each target's primary write resource, in a
    /// stable order (a persisted cursor names a server by its position here).
    pub(crate) fn servers(&self) -> Vec<Server> {
        let mut seen = std::collections::HashSet::new();
        let mut servers = Vec::new();
        for target in self.route.targets() {
            let Some(resource) = target
                .write_resources()
                .first()
                .and_then(|url| self.resources.get(url))
            else {
                continue;
            };
            for server in resource.masters() {
                if seen.insert(server.addr.clone()) {
                    servers.push(server);
                }
            }
        }
        servers
    }

    /// Where `key` lives: every write resource of its target, the primary first (a target that double-writes
    /// keeps its copies in step), each narrowed to the server holding the key.
    pub(crate) fn servers_for<'s>(
        &'s self,
        placement: &TablePlacement<'_>,
        key: &[u8],
    ) -> impl Iterator<Item = &'s Server> {
        let resources = placement
            .target_of(key)
            .map(|(_, target)| target.write_resources())
            .unwrap_or_default();
        resources
            .iter()
            .filter_map(|url| self.resources.get(url))
            .map(move |resource| resource.server_for(key))
    }
}
