//! A raw RESP client for tests that check exact reply bytes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

pub struct RawClient {
    stream: TcpStream,
}

impl RawClient {
    pub fn connect(port: u16) -> RawClient {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("set timeout");
        stream.set_nodelay(true).expect("nodelay");
        RawClient { stream }
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

    /// A second handle on the same connection, so that one thread can write while another reads.
    pub fn try_clone(&self) -> RawClient {
        RawClient {
            stream: self.stream.try_clone().expect("clone the client's socket"),
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
        assert_eq!(
            String::from_utf8_lossy(&got[..filled]),
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
