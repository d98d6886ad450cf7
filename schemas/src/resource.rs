//! Resource URLs: how a route names a backend deployment.
//!
//! Accepted forms (camellia-redis-proxy's are a subset, so its route tables can be pasted in unchanged):
//!
//! ```text
//! redis://[[user]:pass@]host:port[/db][?db=N]          rediss:// for TLS
//! redis://pass@host:port       (no colon: a password, as camellia reads it)
//! redis://@host:port?db=1      (camellia's empty credentials)
//! redis-sentinel://[[user]:pass@]s1:p1,s2:p2/masterName[?db=N&sentinelUserName=u&sentinelPassword=p]
//! redis-sentinel-slaves://...same.../masterName?withMaster=true|false
//! redis-cluster://[[user]:pass@]h1:p1,h2:p2,...
//! redis-cluster-slaves://...same...?withMaster=true|false
//! ```
//!
//! Each has a `rediss` form for TLS to its data nodes, whose parameters are in [`tls`].
//!
//! Credentials are taken literally (no percent-decoding), like camellia; the last `@` ends them, so a password
//! may itself contain `@`.

use std::fmt;

use crate::policy::ScriptsPolicy;

mod tls;

pub use tls::{TlsOptions, TlsVerify};

/// A parsed resource URL.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ResourceUrl {
    pub kind: ResourceKind,
    /// TLS to the data nodes (the `rediss` schemes).
    pub tls: Option<TlsOptions>,
    /// Credentials for the data nodes.
    pub auth: Option<Credentials>,
    /// An operator-provisioned ACL user that tenants' scripts run as (`scriptUserName`, `scriptPassword`), for
    /// services where the gateway may not create its own users; `auth` is then the gateway's user, which must
    /// not be allowed to run scripts.
    pub script_auth: Option<Credentials>,
    /// What the scripts of the tenants routed here may do when a tenant has no `scripts` policy of its own
    /// (`scripts=allow|read_only|deny`): the operator's default for a shared Redis.
    pub scripts: Option<ScriptsPolicy>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Credentials {
    /// `None` authenticates as the default user (`AUTH password`).
    pub username: Option<String>,
    pub password: String,
}

impl fmt::Debug for Credentials {
    // Never print a password, not even in a debug log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Node {
    pub host: String,
    pub port: u16,
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Reads from replicas, as the `-slaves` URL types ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReplicaMode {
    /// Whether the master is part of the read pool.
    pub with_master: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ResourceKind {
    Standalone {
        node: Node,
        db: u32,
    },
    Sentinel {
        sentinels: Vec<Node>,
        master_name: String,
        db: u32,
        sentinel_auth: Option<Credentials>,
        /// TLS to the sentinels (`sentinelSSL=true`), with the resource's TLS options.
        sentinel_tls: Option<TlsOptions>,
        replicas: Option<ReplicaMode>,
    },
    Cluster {
        seeds: Vec<Node>,
        replicas: Option<ReplicaMode>,
    },
}

/// Where a resource URL points, without any secret: `host:port/db` for a standalone node, else its hosts and
/// path (a query may hold a script user's or the sentinels' password). Gateways name resources this way in
/// errors, metrics and their reachability reports, so the control plane finds a registered resource's reports
/// by its URL's location.
pub fn resource_location(url: &str) -> String {
    match ResourceUrl::parse(url) {
        Ok(ResourceUrl {
            kind: ResourceKind::Standalone { node, db },
            ..
        }) => format!("{node}/{db}"),
        _ => {
            let location = url.rsplit('@').next().unwrap_or(url);
            location.split('?').next().unwrap_or(location).to_string()
        }
    }
}

impl ResourceUrl {
    /// Whether this resource only serves reads (the `-slaves` types).
    pub fn read_only(&self) -> bool {
        matches!(
            self.kind,
            ResourceKind::Sentinel {
                replicas: Some(_),
                ..
            } | ResourceKind::Cluster {
                replicas: Some(_),
                ..
            }
        )
    }

    /// Parses one resource URL.
    pub fn parse(url: &str) -> Result<ResourceUrl, ResourceUrlError> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or(ResourceUrlError::MissingScheme)?;
        let (family, tls, slaves) = match scheme {
            "redis" => (Family::Standalone, false, false),
            "rediss" => (Family::Standalone, true, false),
            "redis-sentinel" => (Family::Sentinel, false, false),
            "rediss-sentinel" => (Family::Sentinel, true, false),
            "redis-sentinel-slaves" => (Family::Sentinel, false, true),
            "rediss-sentinel-slaves" => (Family::Sentinel, true, true),
            "redis-cluster" => (Family::Cluster, false, false),
            "rediss-cluster" => (Family::Cluster, true, false),
            "redis-cluster-slaves" => (Family::Cluster, false, true),
            "rediss-cluster-slaves" => (Family::Cluster, true, true),
            other => return Err(ResourceUrlError::UnknownScheme(other.to_string())),
        };
        let (userinfo, after_auth) = match rest.rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        let auth = userinfo.and_then(parse_credentials);
        let (location, query) = match after_auth.split_once('?') {
            Some((location, query)) => (location, Some(query)),
            None => (after_auth, None),
        };
        let (hosts, path) = match location.split_once('/') {
            Some((hosts, path)) => (hosts, Some(path)),
            None => (location, None),
        };
        let params = Query::parse(query.unwrap_or(""))?;
        let script_auth = match (params.get("scriptUserName"), params.get("scriptPassword")) {
            (Some(user), Some(password)) => Some(Credentials {
                username: Some(user.to_string()),
                password: password.to_string(),
            }),
            (None, None) => None,
            (Some(_), None) => return Err(ResourceUrlError::BadParameter("scriptPassword".into())),
            (None, Some(_)) => return Err(ResourceUrlError::BadParameter("scriptUserName".into())),
        };
        let scripts = match params.get(SCRIPTS) {
            None => None,
            Some(text) => Some(
                ScriptsPolicy::parse(text)
                    .ok_or_else(|| ResourceUrlError::BadParameter(SCRIPTS.into()))?,
            ),
        };
        let default_port = if family == Family::Sentinel {
            26379
        } else {
            6379
        };
        let nodes = hosts
            .split(',')
            .map(|host| parse_node(host, default_port))
            .collect::<Result<Vec<_>, _>>()?;

        let sentinel_tls = family == Family::Sentinel && tls::sentinel_tls(&params)?;
        let tls_options = TlsOptions::parse(&params, tls || sentinel_tls)?;
        let data_tls = if tls { tls_options.clone() } else { None };
        let kind = match family {
            Family::Standalone => {
                params.reject_unknown(
                    &["db", SCRIPT_USER, SCRIPT_PASSWORD, SCRIPTS],
                    tls::PARAMETERS,
                )?;
                let [node] =
                    <[Node; 1]>::try_from(nodes).map_err(|_| ResourceUrlError::OneHostOnly)?;
                ResourceKind::Standalone {
                    node,
                    db: parse_db(path, &params)?,
                }
            }
            Family::Sentinel => {
                let mut allowed = vec![
                    "db",
                    "sentinelUserName",
                    "sentinelPassword",
                    SCRIPT_USER,
                    SCRIPT_PASSWORD,
                    SCRIPTS,
                    tls::SENTINEL_TLS,
                ];
                if slaves {
                    allowed.push("withMaster");
                }
                params.reject_unknown(&allowed, tls::PARAMETERS)?;
                let master_name = path
                    .filter(|name| !name.is_empty())
                    .ok_or(ResourceUrlError::MissingMasterName)?;
                let sentinel_auth = params.get("sentinelPassword").map(|password| Credentials {
                    username: params.get("sentinelUserName").map(str::to_string),
                    password: password.to_string(),
                });
                ResourceKind::Sentinel {
                    sentinels: nodes,
                    master_name: master_name.to_string(),
                    db: parse_db(None, &params)?,
                    sentinel_auth,
                    sentinel_tls: if sentinel_tls { tls_options } else { None },
                    replicas: replica_mode(slaves, &params)?,
                }
            }
            Family::Cluster => {
                params.reject_unknown(
                    if slaves {
                        &["withMaster", SCRIPT_USER, SCRIPT_PASSWORD, SCRIPTS]
                    } else {
                        &[SCRIPT_USER, SCRIPT_PASSWORD, SCRIPTS]
                    },
                    tls::PARAMETERS,
                )?;
                if path.is_some_and(|p| !p.is_empty() && p != "0") {
                    return Err(ResourceUrlError::ClusterDb);
                }
                ResourceKind::Cluster {
                    seeds: nodes,
                    replicas: replica_mode(slaves, &params)?,
                }
            }
        };
        Ok(ResourceUrl {
            kind,
            tls: data_tls,
            auth,
            script_auth,
            scripts,
        })
    }
}

impl fmt::Debug for ResourceUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResourceUrl")
            .field("kind", &self.kind)
            .field("tls", &self.tls)
            .field("auth", &self.auth)
            .field("script_auth", &self.script_auth)
            .field("scripts", &self.scripts)
            .finish()
    }
}

/// The parameters that name an operator-provisioned script user (see [`ResourceUrl::script_auth`]).
const SCRIPT_USER: &str = "scriptUserName";
const SCRIPT_PASSWORD: &str = "scriptPassword";

/// The parameter that sets the scripts policy of the tenants routed to a resource (see [`ResourceUrl::scripts`]).
const SCRIPTS: &str = "scripts";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    Standalone,
    Sentinel,
    Cluster,
}

fn parse_credentials(userinfo: &str) -> Option<Credentials> {
    match userinfo.split_once(':') {
        Some((user, password)) => Some(Credentials {
            username: (!user.is_empty()).then(|| user.to_string()),
            password: password.to_string(),
        }),
        None if userinfo.is_empty() => None,
        None => Some(Credentials {
            username: None,
            password: userinfo.to_string(),
        }),
    }
}

fn parse_node(text: &str, default_port: u16) -> Result<Node, ResourceUrlError> {
    let bad = || ResourceUrlError::BadHost(text.to_string());
    let (host, port) = if let Some(bracketed) = text.strip_prefix('[') {
        let (host, after) = bracketed.split_once(']').ok_or_else(bad)?;
        match after {
            "" => (host, None),
            _ => (host, Some(after.strip_prefix(':').ok_or_else(bad)?)),
        }
    } else {
        match text.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return Err(bad());
    }
    let port = match port {
        None => default_port,
        Some(port) => port.parse().ok().filter(|&p| p != 0).ok_or_else(bad)?,
    };
    Ok(Node {
        host: host.to_string(),
        port,
    })
}

fn parse_db(path: Option<&str>, params: &Query<'_>) -> Result<u32, ResourceUrlError> {
    let from_path = path.filter(|p| !p.is_empty());
    match (from_path, params.get("db")) {
        (Some(_), Some(_)) => Err(ResourceUrlError::BadDb("given twice".to_string())),
        (Some(db), None) | (None, Some(db)) => db
            .parse()
            .map_err(|_| ResourceUrlError::BadDb(db.to_string())),
        (None, None) => Ok(0),
    }
}

fn replica_mode(slaves: bool, params: &Query<'_>) -> Result<Option<ReplicaMode>, ResourceUrlError> {
    if !slaves {
        return Ok(None);
    }
    let with_master = match params.get("withMaster") {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => return Err(ResourceUrlError::BadWithMaster(other.to_string())),
    };
    Ok(Some(ReplicaMode { with_master }))
}

struct Query<'a>(Vec<(&'a str, &'a str)>);

impl<'a> Query<'a> {
    fn parse(query: &'a str) -> Result<Self, ResourceUrlError> {
        query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .map(|pair| {
                pair.split_once('=')
                    .ok_or_else(|| ResourceUrlError::BadParameter(pair.to_string()))
            })
            .collect::<Result<_, _>>()
            .map(Query)
    }

    fn get(&self, name: &str) -> Option<&'a str> {
        self.0.iter().find(|(k, _)| *k == name).map(|(_, v)| *v)
    }

    fn reject_unknown(&self, allowed: &[&str], tls: &[&str]) -> Result<(), ResourceUrlError> {
        match self
            .0
            .iter()
            .find(|(k, _)| !allowed.contains(k) && !tls.contains(k))
        {
            Some((k, _)) => Err(ResourceUrlError::BadParameter((*k).to_string())),
            None => Ok(()),
        }
    }
}

/// Why a resource URL was rejected. Messages never include credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceUrlError {
    #[error("missing scheme (expected redis://, redis-sentinel://, redis-cluster://, ...)")]
    MissingScheme,
    #[error("unknown scheme '{0}://'")]
    UnknownScheme(String),
    #[error("bad host '{0}' (expected host:port)")]
    BadHost(String),
    #[error("a redis:// resource names exactly one host:port")]
    OneHostOnly,
    #[error("bad db '{0}'")]
    BadDb(String),
    #[error("a Redis Cluster has only db 0")]
    ClusterDb,
    #[error(
        "a sentinel URL needs the master name as its path: redis-sentinel://host:port/masterName"
    )]
    MissingMasterName,
    #[error("unsupported or malformed parameter '{0}'")]
    BadParameter(String),
    #[error("withMaster must be true or false, not '{0}'")]
    BadWithMaster(String),
    #[error("tlsVerify must be full, ca or none, not '{0}'")]
    BadTlsVerify(String),
    #[error("TLS parameters need TLS: a rediss:// scheme (or sentinelSSL=true for the sentinels)")]
    TlsOff,
}

#[cfg(test)]
mod tests;
