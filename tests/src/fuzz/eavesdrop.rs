//! Listening where another tenant's activity could be heard: at the end of each window the attacker subscribes to
//! hostile channels and patterns (every keyspace event, every channel, other tenants' channel prefixes), then every
//! other tenant writes a key and publishes on a channel whose names carry its canary, through the gateway; any of
//! those names reaching the attacker is a leak. Nothing else happens on the platform meanwhile, so a case alone
//! could never show it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use anyhow::{Result, bail};
use fastrand::Rng;

use super::case::encode;
use super::oracle::DEADLINE;
use super::platform::{Policy, TENANTS, Tenant};

/// What an attacker listens to: each entry one request.
const LISTENS: &[&[&str]] = &[
    &["PSUBSCRIBE", "*"],
    &["PSUBSCRIBE", "__key*__:*"],
    &["PSUBSCRIBE", "__keyspace@*__:*"],
    &["PSUBSCRIBE", "__keyevent@*__:*"],
    &["PSUBSCRIBE", "__keyspace@5__:*", "__keyspace@0__:*"],
    &[
        "SUBSCRIBE",
        "__keyevent@0__:set",
        "__keyevent@5__:set",
        "__keyevent@1__:del",
    ],
    &["PSUBSCRIBE", "d0:*", "n1:*", "[dnrw]*", "*:*"],
    &["PSUBSCRIBE", "\\*", "?*", "[^x]*"],
];

/// The requests the attacker of `window` listens with.
pub(crate) fn listens(seed: u64, window: u64) -> Vec<Vec<Vec<u8>>> {
    let mut rng = Rng::with_seed(seed ^ window.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0x00ea_5d50);
    let mut chosen: Vec<Vec<Vec<u8>>> = Vec::new();
    for _ in 0..rng.usize(1..=3) {
        let listen = LISTENS[rng.usize(..LISTENS.len())];
        let request: Vec<Vec<u8>> = listen.iter().map(|w| w.as_bytes().to_vec()).collect();
        if !chosen.contains(&request) {
            chosen.push(request);
        }
    }
    chosen
}

/// The attacker's listening connection.
pub(crate) struct Eavesdropper {
    stream: TcpStream,
    heard: Vec<u8>,
}

impl Eavesdropper {
    /// Subscribes as `attacker` and waits until the subscriptions are in place (a `PING` answered after them).
    pub(crate) fn listen(
        gateway_port: u16,
        attacker: &Tenant,
        requests: &[Vec<Vec<u8>>],
    ) -> Result<Eavesdropper> {
        let mut stream = TcpStream::connect(("127.0.0.1", gateway_port))?;
        stream.set_nodelay(true)?;
        let mut wire = Vec::new();
        encode(
            &[
                b"AUTH".to_vec(),
                attacker.name.as_bytes().to_vec(),
                attacker.password().into_bytes(),
            ],
            &mut wire,
        );
        for request in requests {
            encode(request, &mut wire);
        }
        stream.write_all(&wire)?;
        let mut eavesdropper = Eavesdropper {
            stream,
            heard: Vec::new(),
        };
        eavesdropper.ping()?;
        Ok(eavesdropper)
    }

    /// Sends `PING` and reads until its answer (`pong` on a subscribed connection, `PONG` where every subscription
    /// was refused), so that whatever was sent to it before has arrived.
    fn ping(&mut self) -> Result<()> {
        let pongs = |heard: &[u8]| count(heard, b"pong") + count(heard, b"PONG");
        let before = pongs(&self.heard);
        self.stream.write_all(b"*1\r\n$4\r\nPING\r\n")?;
        let deadline = Instant::now() + DEADLINE;
        let mut buffer = [0u8; 16 * 1024];
        while pongs(&self.heard) == before {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!("no answer to PING on the listening connection within {DEADLINE:?}");
            }
            self.stream.set_read_timeout(Some(left))?;
            match self.stream.read(&mut buffer) {
                Ok(0) => bail!("the gateway closed the listening connection"),
                Ok(n) => self.heard.extend_from_slice(&buffer[..n]),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Everything the connection got, once the others' activity is over.
    pub(crate) fn heard(mut self) -> Result<Vec<u8>> {
        self.ping()?;
        Ok(self.heard)
    }
}

/// Every tenant but `attacker` writes and deletes a key and publishes on a channel, all named with its canary,
/// through the gateway (one that may not write reads the key instead).
pub(crate) fn others_act(gateway_port: u16, attacker: &Tenant) -> Result<()> {
    for tenant in TENANTS.iter().filter(|t| t.name != attacker.name) {
        let key = format!("CANARY:{}:activity", tenant.name).into_bytes();
        let channel = format!("CANARY:{}:news", tenant.name).into_bytes();
        let mut wire = Vec::new();
        let auth = [
            b"AUTH".to_vec(),
            tenant.name.as_bytes().to_vec(),
            tenant.password().into_bytes(),
        ];
        encode(&auth, &mut wire);
        match tenant.policy {
            Policy::Full => {
                encode(&[b"SET".to_vec(), key.clone(), b"1".to_vec()], &mut wire);
                encode(&[b"DEL".to_vec(), key], &mut wire);
            }
            Policy::ReadOnly | Policy::DenyWrites => encode(&[b"GET".to_vec(), key], &mut wire),
        }
        encode(&[b"PUBLISH".to_vec(), channel, b"x".to_vec()], &mut wire);
        encode(&[b"QUIT".to_vec()], &mut wire);
        let mut stream = TcpStream::connect(("127.0.0.1", gateway_port))?;
        stream.set_read_timeout(Some(DEADLINE))?;
        stream.write_all(&wire)?;
        let mut sink = Vec::new();
        stream.read_to_end(&mut sink)?;
    }
    Ok(())
}

fn count(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle)
        .count()
}
