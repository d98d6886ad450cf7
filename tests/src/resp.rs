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
}
