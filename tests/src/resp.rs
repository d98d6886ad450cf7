//! A raw RESP client for tests that check exact reply bytes, over plain TCP or TLS.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

pub struct RawClient {
    stream: Stream,
}

/// The client's connection: what it reads and writes is the same RESP either way.
enum Stream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(tcp) => tcp.read(buf),
            Stream::Tls(tls) => tls.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(tcp) => tcp.write(buf),
            Stream::Tls(tls) => tls.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(tcp) => tcp.flush(),
            Stream::Tls(tls) => tls.flush(),
        }
    }
}

fn tcp(port: u16) -> TcpStream {
    configured(TcpStream::connect(("127.0.0.1", port)).expect("connect"))
}

fn configured(stream: TcpStream) -> TcpStream {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("set timeout");
    stream.set_nodelay(true).expect("nodelay");
    stream
}

impl RawClient {
    pub fn connect(port: u16) -> RawClient {
        RawClient {
            stream: Stream::Plain(tcp(port)),
        }
    }

    /// Connects from `source`, as a client on another host would: any address of 127/8 is the local host's on
    /// Linux, and the server sees the connection come from it.
    pub fn connect_from(source: Ipv4Addr, port: u16) -> RawClient {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("a socket");
        socket
            .bind(&SocketAddr::from((source, 0)).into())
            .expect("bind the source address");
        socket
            .connect(&SocketAddr::from((Ipv4Addr::LOCALHOST, port)).into())
            .expect("connect");
        RawClient {
            stream: Stream::Plain(configured(socket.into())),
        }
    }

    /// Connects over TLS to a server whose certificate for 127.0.0.1 is signed by the CA in `ca_file` (PEM). The
    /// handshake runs with the first request, as with any TLS client that writes at once.
    pub fn connect_tls(port: u16, ca_file: &Path) -> RawClient {
        let mut roots = RootCertStore::empty();
        for certificate in CertificateDer::pem_file_iter(ca_file).expect("read the CA file") {
            roots
                .add(certificate.expect("a CA certificate"))
                .expect("trust the CA");
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = ServerName::try_from("127.0.0.1").expect("a server name");
        let connection = ClientConnection::new(Arc::new(config), name).expect("a TLS client");
        RawClient {
            stream: Stream::Tls(Box::new(StreamOwned::new(connection, tcp(port)))),
        }
    }

    /// Connects speaking `protocol`: 2 as a connection starts, or 3 after `HELLO 3` (whose reply, a map in
    /// RESP3, is checked).
    pub fn connect_speaking(port: u16, protocol: u8) -> RawClient {
        let mut client = RawClient::connect(port);
        match protocol {
            2 => {}
            3 => {
                let hello = client.request(&[b"HELLO", b"3"]);
                assert!(
                    hello.starts_with(b"%7\r\n"),
                    "HELLO 3: {}",
                    String::from_utf8_lossy(&hello)
                );
            }
            _ => panic!("no protocol {protocol}"),
        }
        client
    }

    /// A second handle on the same connection, so that one thread can write while another reads (plain TCP
    /// only: a TLS session's state cannot be shared by two handles).
    pub fn try_clone(&self) -> RawClient {
        let Stream::Plain(tcp) = &self.stream else {
            panic!("a TLS RawClient cannot be cloned");
        };
        RawClient {
            stream: Stream::Plain(tcp.try_clone().expect("clone the client's socket")),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    /// Reads exactly as many bytes as `expected` has and asserts they are equal.
    pub fn expect(&mut self, expected: &[u8]) {
        let mut got = vec![0u8; expected.len()];
        let mut filled = 0;
        while filled < got.len() {
            match self.stream.read(&mut got[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) => panic!(
                    "reading reply: {e}; got so far {:?}, expected {:?}",
                    String::from_utf8_lossy(&got[..filled]),
                    String::from_utf8_lossy(expected)
                ),
            }
        }
        got.truncate(filled);
        // What differs is shown whole to the end of its line: an error reply cut to the expected length would
        // hide its cause.
        if got != expected && !got.is_empty() && !got.ends_with(b"\n") {
            got.extend(self.read_line());
        }
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(expected),
            "reply bytes differ"
        );
    }

    /// Reads up to and including the next `\n` (one simple reply line).
    pub fn read_line(&mut self) -> Vec<u8> {
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while line.last() != Some(&b'\n') {
            match self.stream.read(&mut byte) {
                Ok(1) => line.push(byte[0]),
                Ok(_) => break,
                Err(e) => panic!(
                    "reading a reply line: {e}; got so far {:?}",
                    String::from_utf8_lossy(&line)
                ),
            }
        }
        line
    }

    /// Sends `request` and expects exactly `reply`.
    pub fn roundtrip(&mut self, request: &[u8], reply: &[u8]) {
        self.send(request);
        self.expect(reply);
    }

    /// Asserts the server closes the connection without sending anything more.
    pub fn expect_closed(&mut self) {
        let mut byte = [0u8; 1];
        match self.stream.read(&mut byte) {
            Ok(0) => {}
            Ok(_) => panic!(
                "expected the connection to be closed, got more bytes: {:?}",
                byte[0] as char
            ),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            // A TLS peer that closed the socket without `close_notify`.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
            Err(e) => panic!("expected the connection to be closed, got {e}"),
        }
    }

    /// Sends `args` as one RESP multibulk request.
    pub fn send_command(&mut self, args: &[&[u8]]) {
        let mut request = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            request.extend_from_slice(arg);
            request.extend_from_slice(b"\r\n");
        }
        self.send(&request);
    }

    /// Sends `args` and returns the raw bytes of the one reply.
    pub fn request(&mut self, args: &[&[u8]]) -> Vec<u8> {
        self.send_command(args);
        self.read_reply()
    }

    /// Reads one line, CRLF included. Byte by byte, so nothing after the line is consumed.
    pub fn read_reply_line(&mut self) -> Vec<u8> {
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while !line.ends_with(b"\r\n") {
            self.stream.read_exact(&mut byte).unwrap_or_else(|e| {
                panic!(
                    "reading a reply line: {e}; got {:?}",
                    String::from_utf8_lossy(&line)
                )
            });
            line.push(byte[0]);
        }
        line
    }

    /// Reads the raw bytes of one complete RESP2 or RESP3 reply (aggregates included).
    pub fn read_reply(&mut self) -> Vec<u8> {
        let mut reply = Vec::new();
        self.read_reply_into(&mut reply);
        reply
    }

    fn read_reply_into(&mut self, reply: &mut Vec<u8>) {
        let line = self.read_reply_line();
        reply.extend_from_slice(&line);
        let length = || -> i64 {
            std::str::from_utf8(&line[1..line.len() - 2])
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("bad length line {:?}", String::from_utf8_lossy(&line)))
        };
        let elements = match line[0] {
            b'$' | b'!' | b'=' => {
                let len = length();
                if len >= 0 {
                    let mut body = vec![0u8; len as usize + 2];
                    self.stream.read_exact(&mut body).expect("read bulk body");
                    reply.extend_from_slice(&body);
                }
                0
            }
            b'*' | b'~' | b'>' => length().max(0),
            b'%' | b'|' => 2 * length().max(0),
            _ => 0,
        };
        for _ in 0..elements {
            self.read_reply_into(reply);
        }
    }
}
