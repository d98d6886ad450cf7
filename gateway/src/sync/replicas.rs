//! The control-plane replicas a gateway may follow: the URLs it was given (`--control-plane`, comma-separated or
//! the flag repeated), each host name that resolves to several addresses taken as one replica per address, in a
//! fixed order; and which replica comes next when the followed one fails.
//!
//! Replicas are equivalent (stateless, over one database, with one global revision), so the order only decides
//! where a gateway starts and where it goes next: the first URL first, and after a failure the next one in the
//! list (wrapping around), where the gateway stays for as long as it answers.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

/// How long connecting to a replica may take before it counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long resolving a replica's name may take: a slow DNS must not hold up a failover (the name is then left to
/// the system's resolver at the next connection).
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(1);

/// Parses the `--control-plane` values as given (each may be a comma-separated list): the base URLs in order,
/// trimmed, duplicates dropped. Each must be an `http` or `https` URL with a host and without credentials (the
/// gateway token authenticates; a password in a URL would show in `/metrics` and the logs).
pub fn parse_control_plane_urls(values: &[String]) -> Result<Vec<String>, String> {
    let mut urls: Vec<String> = Vec::new();
    for url in values.iter().flat_map(|value| value.split(',')) {
        let url = url.trim().trim_end_matches('/');
        if url.is_empty() {
            return Err(format!(
                "an empty control-plane URL in '{}' (give URLs separated by commas)",
                values.join(",")
            ));
        }
        let parsed = reqwest::Url::parse(url).map_err(|e| {
            format!("'{url}' is not a control-plane URL ({e}; e.g. http://127.0.0.1:8080)")
        })?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(format!(
                "'{url}' is not a control-plane URL (http:// or https:// and a host, e.g. http://127.0.0.1:8080)"
            ));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(format!(
                "'{}' carries credentials: the gateway authenticates with --gateway-token",
                parsed.host_str().unwrap_or_default()
            ));
        }
        if !urls.iter().any(|known| known == url) {
            urls.push(url.to_string());
        }
    }
    if urls.is_empty() {
        return Err("no control-plane URL given".to_string());
    }
    Ok(urls)
}

/// One replica: a configured URL, and the address it is pinned to when its host name resolves to several (each
/// of those addresses a replica of its own, reached under the host name, so that TLS still sends and verifies
/// that name).
pub(super) struct Replica {
    /// The position of its URL in the configured list.
    rank: usize,
    pub(super) url: String,
    pub(super) address: Option<SocketAddr>,
    pub(super) client: reqwest::Client,
}

impl Replica {
    /// Where it stands in the order replicas are tried.
    fn place(&self) -> (usize, Option<SocketAddr>) {
        (self.rank, self.address)
    }

    /// How the logs name it: the URL, and the address it is pinned to.
    pub(super) fn name(&self) -> String {
        match self.address {
            Some(address) => format!("{} ({address})", self.url),
            None => self.url.clone(),
        }
    }

    /// How `/metrics` labels it: the URL, and the address it is pinned to (empty when the system resolves it).
    pub(super) fn labels(&self) -> (String, String) {
        let address = self.address.map(|a| a.to_string()).unwrap_or_default();
        (self.url.clone(), address)
    }

    /// `path` under its base URL.
    pub(super) fn endpoint(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }
}

/// The HTTP clients replicas are reached with: the same trusted CAs and timeouts for every one.
pub(super) struct Clients {
    certificates: Vec<reqwest::Certificate>,
    /// For a replica the system resolves (an address, or a name with one address).
    shared: reqwest::Client,
}

impl Clients {
    /// Clients trusting the CAs in `ca_file` instead of the system's store, when given.
    pub(super) fn new(ca_file: Option<&Path>) -> anyhow::Result<Clients> {
        let certificates = match ca_file {
            Some(ca) => crate::tls::control_plane_cas(ca)
                .map_err(|e| anyhow::anyhow!("the control plane's CA file: {e}"))?,
            None => Vec::new(),
        };
        let mut clients = Clients {
            certificates,
            shared: reqwest::Client::new(),
        };
        clients.shared = clients.build(None)?;
        Ok(clients)
    }

    /// A client that connects to `pin` (a host name and the address to reach it at) instead of resolving it.
    fn build(&self, pin: Option<(&str, SocketAddr)>) -> anyhow::Result<reqwest::Client> {
        let mut client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .tls_info(true);
        if !self.certificates.is_empty() {
            client = client.tls_built_in_root_certs(false);
            for certificate in &self.certificates {
                client = client.add_root_certificate(certificate.clone());
            }
        }
        if let Some((host, address)) = pin {
            client = client.resolve(host, address);
        }
        client.build().context("cannot build the HTTP client")
    }

    /// The replicas of `urls`, unresolved: one per URL, each resolved by the system at every connection.
    pub(super) fn unresolved(&self, urls: &[String]) -> Vec<Arc<Replica>> {
        urls.iter()
            .enumerate()
            .map(|(rank, url)| self.replica(rank, url, None))
            .collect()
    }

    /// The replicas of `urls`, in order: a URL whose host name resolves to several addresses gives one per address
    /// (sorted, so that every resolution gives the same order whatever order DNS answers in); any other URL, or
    /// one whose name does not resolve now, gives itself.
    pub(super) async fn resolve(&self, urls: &[String]) -> Vec<Arc<Replica>> {
        let mut replicas = Vec::new();
        for (rank, url) in urls.iter().enumerate() {
            let addresses = match host_name(url) {
                Some((host, port)) => {
                    let lookup = tokio::net::lookup_host((host.as_str(), port));
                    match tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
                        Ok(Ok(found)) => found.collect(),
                        Ok(Err(_)) | Err(_) => Vec::new(),
                    }
                }
                None => Vec::new(),
            };
            replicas.extend(self.replicas_of(rank, url, addresses));
        }
        replicas
    }

    /// The replicas of one URL whose host name resolved to `addresses`.
    fn replicas_of(
        &self,
        rank: usize,
        url: &str,
        mut addresses: Vec<SocketAddr>,
    ) -> Vec<Arc<Replica>> {
        addresses.sort();
        addresses.dedup();
        let host = host_name(url).map(|(host, _)| host);
        match (host, &addresses[..]) {
            (Some(host), [_, _, ..]) => addresses
                .iter()
                .map(|&address| match self.build(Some((&host, address))) {
                    Ok(client) => Arc::new(Replica {
                        rank,
                        url: url.to_string(),
                        address: Some(address),
                        client,
                    }),
                    Err(e) => {
                        tracing::warn!(control_plane = %url, "{e:#}: reaching {address} by the system's resolution");
                        self.replica(rank, url, None)
                    }
                })
                .collect(),
            _ => vec![self.replica(rank, url, None)],
        }
    }

    fn replica(&self, rank: usize, url: &str, address: Option<SocketAddr>) -> Arc<Replica> {
        Arc::new(Replica {
            rank,
            url: url.to_string(),
            address,
            client: self.shared.clone(),
        })
    }
}

/// The host name and port of `url`, when its host is a name (not an address).
fn host_name(url: &str) -> Option<(String, u16)> {
    let parsed = reqwest::Url::parse(url).ok()?;
    Some((
        parsed.domain()?.to_string(),
        parsed.port_or_known_default()?,
    ))
}

/// Which of `replicas` to follow after `failed` did not answer: the first one after it in the configured order
/// (a name's addresses in their sorted order), else the first of all.
pub(super) fn next_after(replicas: &[Arc<Replica>], failed: &Replica) -> usize {
    replicas
        .iter()
        .position(|replica| replica.place() > failed.place())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn urls(values: &[&str]) -> Result<Vec<String>, String> {
        parse_control_plane_urls(&values.iter().map(|v| v.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn urls_come_comma_separated_or_repeated_in_order_without_duplicates() {
        let expected = vec![
            "http://10.0.0.1:8080".to_string(),
            "https://cp.example".to_string(),
            "http://10.0.0.2:8080/prefix".to_string(),
        ];
        assert_eq!(
            urls(&["http://10.0.0.1:8080, https://cp.example/,http://10.0.0.2:8080/prefix"]),
            Ok(expected.clone())
        );
        assert_eq!(
            urls(&[
                "http://10.0.0.1:8080",
                "https://cp.example,http://10.0.0.2:8080/prefix/",
                "http://10.0.0.1:8080"
            ]),
            Ok(expected)
        );
        let refused = |values: &[&str], says: &str| {
            let e = urls(values).unwrap_err();
            assert!(e.contains(says), "{values:?}: {e}");
        };
        refused(&["http://a:1,,http://b:1"], "an empty control-plane URL");
        refused(&["http://a:1,"], "an empty control-plane URL");
        refused(&["127.0.0.1:8080"], "is not a control-plane URL");
        refused(&["ftp://cp.example"], "http:// or https://");
        refused(&["https://user:secret@cp.example"], "carries credentials");
        assert!(
            !urls(&["https://user:secret@cp.example"])
                .unwrap_err()
                .contains("secret")
        );
        refused(&[], "no control-plane URL");
    }

    fn names(replicas: &[Arc<Replica>]) -> Vec<String> {
        replicas.iter().map(|r| r.name()).collect()
    }

    /// A name with several addresses is a replica per address, sorted, each pinned; a name with one address, an
    /// address or a name that does not resolve is one replica the system resolves.
    #[test]
    fn a_name_with_several_addresses_is_a_replica_per_address_in_a_fixed_order() {
        let clients = Clients::new(None).unwrap();
        let address = |a: &str| a.parse::<SocketAddr>().unwrap();
        let url = "https://cp.example:8443";
        let shuffled = vec![
            address("10.0.0.3:8443"),
            address("10.0.0.1:8443"),
            address("10.0.0.3:8443"),
            address("10.0.0.2:8443"),
        ];
        let replicas = clients.replicas_of(1, url, shuffled);
        assert_eq!(
            names(&replicas),
            [
                "https://cp.example:8443 (10.0.0.1:8443)",
                "https://cp.example:8443 (10.0.0.2:8443)",
                "https://cp.example:8443 (10.0.0.3:8443)",
            ]
        );
        assert_eq!(
            replicas[0].labels(),
            (url.to_string(), "10.0.0.1:8443".to_string())
        );
        let one = clients.replicas_of(0, url, vec![address("10.0.0.1:8443")]);
        assert_eq!(names(&one), [url]);
        assert_eq!(one[0].labels(), (url.to_string(), String::new()));
        assert_eq!(names(&clients.replicas_of(0, url, Vec::new())), [url]);
        let literal = "http://10.0.0.9:8080";
        let two = vec![address("10.0.0.9:8080"), address("10.0.0.8:8080")];
        assert_eq!(names(&clients.replicas_of(0, literal, two)), [literal]);
    }

    /// After a failure the next replica in the order is followed, wrapping around; when the failed one is gone
    /// from a new resolution, the one that took its place.
    #[test]
    fn the_gateway_fails_over_to_the_next_replica_and_wraps_around() {
        let clients = Clients::new(None).unwrap();
        let address = |a: &str| a.parse::<SocketAddr>().unwrap();
        let mut replicas = clients.unresolved(&["http://10.0.0.1:1".to_string()]);
        replicas.extend(clients.replicas_of(
            1,
            "https://cp.example",
            vec![address("10.0.0.2:443"), address("10.0.0.3:443")],
        ));
        replicas.extend(clients.replicas_of(2, "http://10.0.0.4:1", Vec::new()));
        let order: Vec<usize> = (0..replicas.len())
            .map(|failed| next_after(&replicas, &replicas[failed]))
            .collect();
        assert_eq!(order, [1, 2, 3, 0]);
        // Re-resolved without the address that failed: the next one is the one after where it stood.
        let failed = Arc::clone(&replicas[1]);
        replicas.remove(1);
        assert_eq!(next_after(&replicas, &failed), 1);
        let last = Arc::clone(&replicas[2]);
        replicas.truncate(2);
        assert_eq!(next_after(&replicas, &last), 0);
    }

    /// A pinned replica is reached at its address under its host name, which itself resolves nowhere.
    #[tokio::test]
    async fn a_pinned_replica_is_reached_at_its_address_under_its_name() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut head = [0u8; 1024];
            let n = stream.read(&mut head).await.unwrap();
            let host = String::from_utf8_lossy(&head[..n])
                .lines()
                .find_map(|line| line.strip_prefix("host: ").map(str::to_string))
                .unwrap_or_default();
            let reply = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{host}",
                host.len()
            );
            stream.write_all(reply.as_bytes()).await.unwrap();
        });
        let clients = Clients::new(None).unwrap();
        let url = format!("http://cp.invalid:{}", address.port());
        let other = "127.0.0.2:1".parse().unwrap();
        let replicas = clients.replicas_of(0, &url, vec![address, other]);
        assert_eq!(replicas[0].address, Some(address));
        let response = replicas[0]
            .client
            .get(replicas[0].endpoint("/v1/snapshot"))
            .send()
            .await
            .unwrap();
        let host = response.text().await.unwrap();
        assert_eq!(host, format!("cp.invalid:{}", address.port()));
    }
}
