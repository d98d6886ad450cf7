//! The PROXY protocol (haproxy's, v1 text and v2 binary) on the client listeners, with `--proxy-protocol`: a
//! gateway behind an L4 load balancer learns each client's address from the header the balancer sends before
//! anything else (before TLS), for the tenants' `ip_allow`/`ip_deny`, `CLIENT LIST` and the logs.
//!
//! The header is read exactly, never a byte past it, since what follows is the client's (a TLS handshake or
//! RESP). A connection without a valid header is closed: with the flag on, every connection comes through the
//! balancer. The address the header gives is the one whose share of the unauthenticated places the connection
//! takes (see `admission`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::Ordering;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::admission::{MAX_CLIENTS, Ticket};
use crate::state::Gateway;

/// The v2 header's first 12 bytes.
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// A v1 header is at most 107 bytes, CRLF included.
const V1_MAX: usize = 107;

/// Why a connection's PROXY header was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProxyHeaderError {
    #[error("reading the PROXY protocol header: {0}")]
    Io(#[from] std::io::Error),
    #[error("no PROXY protocol header (the connection did not come through the load balancer)")]
    Missing,
    #[error("malformed PROXY protocol header: {0}")]
    Malformed(&'static str),
}

/// The address of the client behind `peer` (the load balancer), from the PROXY header `tcp` starts with, read
/// within the AUTH timeout; the connection's place (`ticket`) counts against that address from then on. `None`
/// when the connection must close: no header, a malformed one, too slow, or the address holds its share of the
/// places (then refused as Redis refuses a client over `maxclients`, unless TLS is to follow: it is refused
/// before a handshake it could stall).
pub(crate) async fn client_address(
    tcp: &mut TcpStream,
    peer: SocketAddr,
    gateway: &Gateway,
    ticket: &mut Option<Ticket>,
    tls: bool,
) -> Option<SocketAddr> {
    let timeout = gateway.config.auth_timeout;
    let client = match tokio::time::timeout(timeout, read_header(tcp)).await {
        Ok(Ok(client)) => client.unwrap_or(peer),
        Ok(Err(e)) => {
            tracing::debug!(peer = %peer, "closing a connection: {e}");
            return None;
        }
        Err(_) => {
            tracing::debug!(peer = %peer, "closing a connection whose PROXY protocol header did not come in time");
            return None;
        }
    };
    if ticket.as_mut().is_none_or(|t| t.count_against(client.ip())) {
        return Some(client);
    }
    gateway
        .metrics
        .connections_rejected
        .fetch_add(1, Ordering::Relaxed);
    if !tls {
        let _ = tokio::time::timeout(timeout, tcp.write_all(MAX_CLIENTS.as_bytes())).await;
    }
    None
}

/// Reads the PROXY header at the start of `stream`: the client's address it gives, or `None` when it gives none
/// (v2 `LOCAL`, a balancer's own health check; v1 `UNKNOWN`; a v2 family other than TCP over IPv4/IPv6), in
/// which case the socket's peer is the client.
pub(crate) async fn read_header<R: AsyncRead + Unpin>(
    stream: &mut R,
) -> Result<Option<SocketAddr>, ProxyHeaderError> {
    // Both versions start with 6 bytes the other never starts with, and each header is longer.
    let mut start = [0u8; 6];
    stream.read_exact(&mut start).await?;
    if &start == b"PROXY " {
        return read_v1(stream).await;
    }
    if start[..] == V2_SIGNATURE[..6] {
        return read_v2(stream).await;
    }
    Err(ProxyHeaderError::Missing)
}

/// `PROXY TCP4|TCP6 <source> <destination> <source port> <destination port>\r\n`, or `PROXY UNKNOWN ...\r\n`;
/// "PROXY " is read.
async fn read_v1<R: AsyncRead + Unpin>(
    stream: &mut R,
) -> Result<Option<SocketAddr>, ProxyHeaderError> {
    // Byte by byte, up to the CRLF: nothing after it may be taken from the socket.
    let mut line = Vec::with_capacity(V1_MAX);
    while !line.ends_with(b"\r\n") {
        if line.len() + 6 >= V1_MAX {
            return Err(ProxyHeaderError::Malformed(
                "a v1 header longer than 107 bytes",
            ));
        }
        line.push(stream.read_u8().await?);
    }
    parse_v1(&line[..line.len() - 2])
}

/// A v1 header's fields after "PROXY ", without the CRLF.
fn parse_v1(fields: &[u8]) -> Result<Option<SocketAddr>, ProxyHeaderError> {
    let malformed = ProxyHeaderError::Malformed;
    let text = std::str::from_utf8(fields).map_err(|_| malformed("v1 header is not ASCII"))?;
    let mut fields = text.split(' ');
    let v6 = match fields.next() {
        Some("UNKNOWN") => return Ok(None),
        Some("TCP4") => false,
        Some("TCP6") => true,
        _ => return Err(malformed("v1 protocol is not TCP4, TCP6 or UNKNOWN")),
    };
    let (Some(source), Some(_destination), Some(port), Some(_), None) = (
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
    ) else {
        return Err(malformed("v1 header does not have 6 fields"));
    };
    let source: IpAddr = source
        .parse()
        .map_err(|_| malformed("v1 source is not an IP address"))?;
    if source.is_ipv6() != v6 {
        return Err(malformed(
            "v1 source address is not of the protocol's family",
        ));
    }
    let port: u16 = port
        .parse()
        .map_err(|_| malformed("v1 source port is not a port"))?;
    Ok(Some(SocketAddr::new(source, port)))
}

/// The binary header; its first 6 bytes are read.
async fn read_v2<R: AsyncRead + Unpin>(
    stream: &mut R,
) -> Result<Option<SocketAddr>, ProxyHeaderError> {
    let mut rest = [0u8; 10];
    stream.read_exact(&mut rest).await?;
    if rest[..6] != V2_SIGNATURE[6..] {
        return Err(ProxyHeaderError::Missing);
    }
    let (version_command, family) = (rest[6], rest[7]);
    let length = usize::from(u16::from_be_bytes([rest[8], rest[9]]));
    // The addresses, then TLVs the gateway has no use for: read all, so that the client's bytes come next.
    let mut addresses = vec![0u8; length];
    stream.read_exact(&mut addresses).await?;
    parse_v2(version_command, family, &addresses)
}

/// A v2 header's command, family and address block.
fn parse_v2(
    version_command: u8,
    family: u8,
    addresses: &[u8],
) -> Result<Option<SocketAddr>, ProxyHeaderError> {
    let malformed = ProxyHeaderError::Malformed;
    if version_command >> 4 != 2 {
        return Err(malformed("v2 version is not 2"));
    }
    match version_command & 0x0f {
        0 => return Ok(None), // LOCAL: the balancer's own connection
        1 => {}
        _ => return Err(malformed("v2 command is neither LOCAL nor PROXY")),
    }
    let port = |at: usize| u16::from_be_bytes([addresses[at], addresses[at + 1]]);
    match family {
        // TCP over IPv4: source, destination, source port, destination port.
        0x11 if addresses.len() >= 12 => {
            let source: [u8; 4] = addresses[..4].try_into().unwrap_or_default();
            Ok(Some(SocketAddr::new(
                Ipv4Addr::from(source).into(),
                port(8),
            )))
        }
        0x21 if addresses.len() >= 36 => {
            let source: [u8; 16] = addresses[..16].try_into().unwrap_or_default();
            Ok(Some(SocketAddr::new(
                Ipv6Addr::from(source).into(),
                port(32),
            )))
        }
        0x11 | 0x21 => Err(malformed("v2 address block too short for its family")),
        // UNSPEC, UDP, UNIX sockets: the specification has the receiver use the connection's own address.
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn header(bytes: &[u8]) -> (Result<Option<SocketAddr>, String>, usize) {
        let mut reader = bytes;
        let result = read_header(&mut reader).await.map_err(|e| e.to_string());
        (result, reader.len())
    }

    fn v2(command: u8, family: u8, addresses: &[u8]) -> Vec<u8> {
        let mut bytes = V2_SIGNATURE.to_vec();
        bytes.extend([0x20 | command, family]);
        bytes.extend((addresses.len() as u16).to_be_bytes());
        bytes.extend(addresses);
        bytes
    }

    #[tokio::test]
    async fn v1_headers() {
        let (found, left) = header(b"PROXY TCP4 10.1.2.3 10.0.0.1 5000 6379\r\nPING\r\n").await;
        assert_eq!(found, Ok(Some("10.1.2.3:5000".parse().unwrap())));
        assert_eq!(left, 6, "the client's bytes are left unread");
        let (found, _) = header(b"PROXY TCP6 2001:db8::7 ::1 65535 6379\r\n").await;
        assert_eq!(found, Ok(Some("[2001:db8::7]:65535".parse().unwrap())));
        assert_eq!(header(b"PROXY UNKNOWN\r\n").await.0, Ok(None));
        assert_eq!(header(b"PROXY UNKNOWN ::1 ::1 1 2\r\n").await.0, Ok(None));
        for bad in [
            &b"PROXY TCP4 10.1.2.3 10.0.0.1 5000\r\n"[..],
            b"PROXY TCP4 ::1 ::1 5000 6379\r\n",
            b"PROXY TCP4 10.1.2.3 10.0.0.1 70000 6379\r\n",
            b"PROXY UDP4 10.1.2.3 10.0.0.1 1 2\r\n",
            b"PROXY TCP4 10.1.2.3  10.0.0.1 1 2\r\n",
        ] {
            let (found, _) = header(bad).await;
            assert!(found.is_err_and(|e| e.contains("malformed")), "{bad:?}");
        }
        let long = format!("PROXY TCP4 {}\r\n", "1".repeat(120));
        assert!(header(long.as_bytes()).await.0.is_err());
        // Cut short: the connection ends before the header does.
        assert!(header(b"PROXY TCP4 10.1.2.3").await.0.is_err());
    }

    #[tokio::test]
    async fn v2_headers() {
        let mut ipv4 = vec![203, 0, 113, 7, 10, 0, 0, 1];
        ipv4.extend(4242u16.to_be_bytes());
        ipv4.extend(6379u16.to_be_bytes());
        let mut bytes = v2(1, 0x11, &ipv4);
        bytes.extend(b"*1\r\n");
        let (found, left) = header(&bytes).await;
        assert_eq!(found, Ok(Some("203.0.113.7:4242".parse().unwrap())));
        assert_eq!(left, 4);
        let mut ipv6 = vec![0u8; 36];
        ipv6[..16].copy_from_slice(&"2001:db8::9".parse::<Ipv6Addr>().unwrap().octets());
        ipv6[32..34].copy_from_slice(&80u16.to_be_bytes());
        // TLVs after the addresses are skipped.
        ipv6.extend([0x04, 0, 1, 0xff]);
        let (found, left) = header(&v2(1, 0x21, &ipv6)).await;
        assert_eq!(found, Ok(Some("[2001:db8::9]:80".parse().unwrap())));
        assert_eq!(left, 0);
        assert_eq!(header(&v2(0, 0x00, &[])).await.0, Ok(None), "LOCAL");
        assert_eq!(header(&v2(1, 0x31, &[0; 216])).await.0, Ok(None), "UNIX");
        assert!(header(&v2(1, 0x11, &[1, 2, 3])).await.0.is_err());
        assert!(header(&v2(2, 0x11, &ipv4)).await.0.is_err());
        let mut version_one = v2(1, 0x11, &ipv4);
        version_one[12] = 0x11;
        assert!(header(&version_one).await.0.is_err());
    }

    #[tokio::test]
    async fn connections_without_a_header() {
        assert!(
            header(b"*1\r\n$4\r\nPING\r\n")
                .await
                .0
                .is_err_and(|e| e.contains("no PROXY"))
        );
        assert!(header(b"\r\n\r\n\0\rNOTQUIT\n....").await.0.is_err());
        assert!(header(b"PING").await.0.is_err());
    }
}
