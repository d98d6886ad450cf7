//! The fuzzer's runner: the platform, the drawer and the oracle's connections, and the checks after each case
//! and after each window of one attacker's cases.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::case::{self, Case};
use super::draw::{self, Drawer, WINDOW};
use super::eavesdrop;
use super::finding::{Failure, Finding, Kind, Replay, foreign_events, summary};
use super::grammar;
use super::held::{HELD_BOUND, Watch};
use super::oracle::{self, DEADLINE, Digest, Health, Notifications, ServerState};
use super::payload;
use super::platform::{ADMIN_SCRIPT, Platform, SEEDED_KEYS, TENANTS, Tenant};

/// A reply larger than this is not read further (its start is checked for canaries).
const REPLY_CAP: usize = 4 << 20;

/// What the attacker got back.
pub(super) struct Outcome {
    pub(super) reply: Vec<u8>,
    /// The gateway closed the connection after `QUIT` within the deadline.
    pub(super) complete: bool,
    pub(super) gateway_down: bool,
}

pub(super) struct Runner {
    pub(super) platform: Platform,
    pub(super) drawer: Drawer,
    pub(super) notifications: Notifications,
    /// How long each case kept the backend from answering `PING`.
    pub(super) watch: Watch,
    pub(super) admin: redis::Connection,
    pub(super) seeded: Digest,
    pub(super) baseline: ServerState,
    pub(super) admin_script_sha: String,
    pub(super) seed: u64,
    pub(super) barrier: u64,
    pub(super) blocked: Vec<u64>,
    pub(super) failures: BTreeMap<(Kind, String), Failure>,
    /// Time spent replaying failures so far (bounded by `replay::MINIMISING_BUDGET`).
    pub(super) minimising: Duration,
}

impl Runner {
    pub(super) fn start(seed: u64) -> Result<Runner> {
        let platform = Platform::start().context("start the backend and the gateway")?;
        let mut admin = platform.admin(0, DEADLINE)?;
        let docs: redis::Value = redis::cmd("COMMAND")
            .arg("DOCS")
            .query(&mut admin)
            .context("COMMAND DOCS")?;
        let commands = grammar::command_table(&docs);
        let admin_script_sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(ADMIN_SCRIPT)
            .query(&mut admin)?;
        let payloads = own_payloads(&platform).context("DUMP the tenants' keys")?;
        let ports = [platform.backend_port(), platform.gateway_port()];
        let drawer = Drawer::new(commands, payloads, ports, admin_script_sha.clone());
        let notifications = Notifications::connect(platform.backend_port())
            .context("subscribe to the backend's keyspace events")?;
        let baseline = ServerState::take(&mut admin, &admin_script_sha)
            .context("read the backend's server-wide state")?;
        let seeded = Digest::take(&platform).context("digest the seeded data")?;
        let watch = Watch::start(platform.backend_port());
        Ok(Runner {
            platform,
            drawer,
            notifications,
            watch,
            admin,
            seeded,
            baseline,
            admin_script_sha,
            seed,
            barrier: 0,
            blocked: Vec::new(),
            failures: BTreeMap::new(),
            minimising: Duration::ZERO,
        })
    }

    /// A new backend with the seeded data only, and the oracle's connections and references taken again.
    pub(super) fn fresh(&mut self) -> Result<()> {
        if !self.platform.gateway_alive() {
            self.platform.restart_gateway()?;
        }
        self.platform.restart_backend()?;
        self.reconnect()?;
        self.baseline = ServerState::take(&mut self.admin, &self.admin_script_sha)?;
        self.seeded = Digest::take(&self.platform)?;
        Ok(())
    }

    pub(super) fn reconnect(&mut self) -> Result<()> {
        self.admin = self.platform.admin(0, DEADLINE)?;
        self.notifications = Notifications::connect(self.platform.backend_port())?;
        Ok(())
    }

    /// Sends the case on a connection of its own and reads until the gateway closes it (after `QUIT`), for at
    /// most [`DEADLINE`].
    pub(super) fn execute(&mut self, case: &Case) -> Result<Outcome> {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.platform.gateway_port())) else {
            return Ok(Outcome {
                reply: Vec::new(),
                complete: false,
                gateway_down: true,
            });
        };
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(DEADLINE))?;
        self.watch.reset();
        let deadline = Instant::now() + DEADLINE;
        let mut reply = Vec::new();
        if stream.write_all(&case.wire()).is_err() {
            return Ok(Outcome {
                reply,
                complete: true,
                gateway_down: false,
            });
        }
        let mut buffer = [0u8; 64 * 1024];
        let complete = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || reply.len() > REPLY_CAP {
                break false;
            }
            stream.set_read_timeout(Some(left))?;
            match stream.read(&mut buffer) {
                Ok(0) => break true,
                Ok(n) => reply.extend_from_slice(&buffer[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
                Err(_) => break false,
            }
        };
        Ok(Outcome {
            reply,
            complete,
            gateway_down: false,
        })
    }

    /// The checks after every case: canaries in the reply, the case's keyspace events, Redis' health.
    pub(super) fn check_case(&mut self, case: &Case, outcome: &Outcome) -> Result<Vec<Finding>> {
        let attacker = case.attacker.name;
        let mut findings = Vec::new();
        if outcome.gateway_down || !self.platform.gateway_alive() {
            findings.push(Finding {
                kind: Kind::GatewayDown,
                detail: "connection refused".into(),
            });
        }
        for other in oracle::canary_owners(&outcome.reply) {
            if other != attacker {
                findings.push(Finding {
                    kind: Kind::ReadLeak,
                    detail: format!(
                        "{other}'s canary in the reply: ...{}...",
                        oracle::excerpt(&outcome.reply, &other)
                    ),
                });
            }
        }
        if !outcome.complete && !outcome.gateway_down {
            // A case still waiting (a blocking command) holds the rest of its pipeline in the gateway: cut it now,
            // so that what the gateway still sends for it lands before this case's barrier, not in a later case.
            // (A frozen or dead backend fails this; the barrier below then tells which.)
            if self.platform.cut_gateway_connections().is_ok() {
                self.platform.wait_for_no_clients();
                if let Ok(admin) = self.platform.admin(0, DEADLINE) {
                    self.admin = admin;
                }
            }
        }
        self.barrier += 1;
        let barrier = self.barrier;
        match oracle::publish_barrier(&mut self.admin, barrier) {
            Ok(()) => match self.notifications.until_barrier(barrier) {
                Ok(events) => findings.extend(foreign_events(&events, case.attacker)),
                Err(e) => {
                    findings.push(Finding {
                        kind: Kind::OracleCut,
                        detail: format!("the keyspace event subscriber: {e}"),
                    });
                    self.reconnect()?;
                }
            },
            Err(e) => findings.extend(self.diagnose(&e)?),
        }
        // (A backend that froze or died, or a gateway that is down, says more.)
        let held = self.watch.longest();
        let worse = |f: &Finding| {
            matches!(
                f.kind,
                Kind::BackendFroze | Kind::BackendDied | Kind::GatewayDown
            )
        };
        if held > HELD_BOUND && !findings.iter().any(worse) {
            findings.push(Finding {
                kind: Kind::BackendHeld,
                detail: format!("no PONG for {:.1} s while the case ran", held.as_secs_f64()),
            });
        }
        if !outcome.complete && findings.is_empty() {
            self.blocked.push(case.number);
        }
        Ok(findings)
    }

    /// The backend did not answer the oracle: dead, frozen, or only the oracle's connection was closed.
    pub(super) fn diagnose(&mut self, error: &anyhow::Error) -> Result<Vec<Finding>> {
        let timed_out = error
            .downcast_ref::<redis::RedisError>()
            .is_some_and(redis::RedisError::is_timeout);
        // When the request that failed was sent, if it waited for its whole deadline.
        let asked = Instant::now() - if timed_out { DEADLINE } else { Duration::ZERO };
        let finding = match oracle::health(&self.platform) {
            Health::Dead => Finding {
                kind: Kind::BackendDied,
                detail: format!("connection refused after the case ({error})"),
            },
            Health::Frozen => {
                let thawed =
                    (0..10).any(|_| matches!(oracle::health(&self.platform), Health::Alive));
                Finding {
                    kind: Kind::BackendFroze,
                    detail: match thawed {
                        true => format!(
                            "answered again {:.1} s after it was asked",
                            asked.elapsed().as_secs_f64()
                        ),
                        false => "still frozen 20 s later".into(),
                    },
                }
            }
            Health::Alive if timed_out => {
                self.reconnect()?;
                Finding {
                    kind: Kind::BackendFroze,
                    detail: "no answer within 2 s, then answered again".into(),
                }
            }
            Health::Alive => {
                self.reconnect()?;
                Finding {
                    kind: Kind::OracleCut,
                    detail: format!("the fuzzer's admin connection: {error}"),
                }
            }
        };
        Ok(vec![finding])
    }

    /// The checks after a window of one attacker's cases: every value read, other spaces' data, server state.
    pub(super) fn check_window(&mut self, attacker: &Tenant) -> Result<Vec<Finding>> {
        let mut findings = Vec::new();
        if let Err(e) = oracle::read_everything(&self.platform) {
            let mut found = self.diagnose(&e)?;
            for finding in &mut found {
                finding.detail = format!(
                    "{} (while DEBUG DIGEST read every value: a value the attacker stored takes Redis down)",
                    finding.detail
                );
            }
            return Ok(found);
        }
        let digest = Digest::take(&self.platform)?;
        let (foreign, changed): (Vec<String>, Vec<String>) = digest
            .problems(&self.seeded, attacker.name)
            .into_iter()
            .partition(|p| p.contains("the attacker's key holds"));
        for (kind, problems) in [(Kind::DataChanged, changed), (Kind::ForeignData, foreign)] {
            if !problems.is_empty() {
                findings.push(Finding {
                    kind,
                    detail: summary(&problems),
                });
            }
        }
        let state = ServerState::take(&mut self.admin, &self.admin_script_sha)?;
        let changes = state.changes(&self.baseline);
        if !changes.is_empty() {
            findings.push(Finding {
                kind: Kind::StateChanged,
                detail: summary(&changes),
            });
        }
        let used = oracle::used_memory(&mut self.admin)?;
        if used > oracle::MEMORY_BOUND {
            findings.push(Finding {
                kind: Kind::MemoryGrew,
                detail: format!("used_memory {used} bytes"),
            });
        }
        Ok(findings)
    }

    /// Checks the window `since .. end` (one attacker's); on a finding, finds the case that caused it.
    pub(super) fn end_window(&mut self, since: u64, end: u64) -> Result<()> {
        if since >= end {
            return Ok(());
        }
        let attacker = &TENANTS[draw::attacker(self.seed, since)];
        let findings = self.check_window(attacker)?;
        if findings.is_empty() {
            self.platform.restore_space(attacker)?;
            // Each window starts on new gateway connections, so a state one left on them shows in its own window.
            // (The fuzzer's own admin connection goes too.)
            self.platform.cut_gateway_connections()?;
            self.admin = self.platform.admin(0, DEADLINE)?;
            self.eavesdrop(since, attacker)?;
            self.drain()?;
            self.seeded = Digest::take(&self.platform)?;
            return Ok(());
        }
        // Replay the window from a fresh backend with every check after each case.
        self.fresh()?;
        for number in since..end {
            let case = self.drawer.case(self.seed, number);
            let found = self.run_checked(&case)?;
            if !found.is_empty() {
                return self.record(&case, found, since);
            }
        }
        let case = self.drawer.case(self.seed, since);
        let failure = Failure {
            kind: findings[0].kind,
            signature: format!("window of cases {since}..{end}"),
            count: 1,
            first: since,
            attacker: attacker.describe(),
            detail: findings
                .iter()
                .map(|f| format!("{}: {}", f.kind.label(), f.detail))
                .collect::<Vec<_>>()
                .join("\n"),
            repro: case.redis_cli(),
            replay: Replay::NotReproduced,
            needs_repro: None,
            also: Vec::new(),
        };
        self.failures
            .insert((failure.kind, failure.signature.clone()), failure);
        self.fresh()
    }

    /// The attacker of the window of case `number` listens while every other tenant writes and publishes.
    pub(super) fn eavesdrop(&mut self, number: u64, attacker: &'static Tenant) -> Result<()> {
        let requests = eavesdrop::listens(self.seed, number / WINDOW);
        let port = self.platform.gateway_port();
        let heard =
            eavesdrop::Eavesdropper::listen(port, attacker, &requests).and_then(|listener| {
                eavesdrop::others_act(port, attacker)?;
                listener.heard()
            });
        let heard = match heard {
            Ok(heard) => heard,
            Err(e) => {
                eprintln!("isolation fuzz: window of case {number}: listening failed: {e}");
                return Ok(());
            }
        };
        for other in oracle::canary_owners(&heard) {
            if other == attacker.name {
                continue;
            }
            let lines: Vec<String> = requests
                .iter()
                .map(|r| {
                    r.iter()
                        .map(|w| case::quote(w))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .collect();
            let signature = format!("listening with {}", lines.join(" + "));
            let key = (Kind::ReadLeak, signature.clone());
            if let Some(failure) = self.failures.get_mut(&key) {
                failure.count += 1;
                continue;
            }
            eprintln!(
                "isolation fuzz: window of case {number}: {} ({signature})",
                Kind::ReadLeak.label()
            );
            let repro = format!(
                "redis-cli -p $GATEWAY_PORT --user {} --pass {} --no-auth-warning <<'EOF'\n{}\nEOF\n\
                 (then, as {other}: SET CANARY:{other}:activity 1, DEL it, PUBLISH CANARY:{other}:news x)",
                attacker.name,
                attacker.password(),
                lines.join("\n")
            );
            self.failures.insert(
                key,
                Failure {
                    kind: Kind::ReadLeak,
                    signature,
                    count: 1,
                    first: number,
                    attacker: attacker.describe(),
                    detail: format!(
                        "{other}'s activity heard: ...{}...",
                        oracle::excerpt(&heard, &other)
                    ),
                    repro,
                    replay: Replay::NotTried,
                    needs_repro: None,
                    also: Vec::new(),
                },
            );
        }
        Ok(())
    }

    /// Reads the events of the oracle's own writes (seeding a space again) up to a barrier.
    pub(super) fn drain(&mut self) -> Result<()> {
        self.barrier += 1;
        oracle::publish_barrier(&mut self.admin, self.barrier)?;
        self.notifications.until_barrier(self.barrier)?;
        Ok(())
    }

    /// Runs `case` with every check (those after a case and those after a window).
    pub(super) fn run_checked(&mut self, case: &Case) -> Result<Vec<Finding>> {
        let outcome = self.execute(case)?;
        let mut findings = self.check_case(case, &outcome)?;
        if findings.is_empty() {
            findings = self.check_window(case.attacker)?;
        }
        Ok(findings)
    }
}

/// Each tenant's `DUMP`s of its own seeded keys, and forged variants of its hash's: what it can `RESTORE`.
fn own_payloads(platform: &Platform) -> Result<Vec<Vec<Vec<u8>>>> {
    let mut all = Vec::new();
    for tenant in TENANTS {
        let (db, prefix) = tenant.spaces()[0];
        let mut con = platform.admin(db, Duration::from_secs(5))?;
        let mut payloads = Vec::new();
        for name in SEEDED_KEYS {
            let dump: Vec<u8> = redis::cmd("DUMP")
                .arg(format!("{prefix}{name}"))
                .query(&mut con)
                .context("DUMP a seeded key")?;
            if *name == "hash" {
                payloads.extend(payload::forged_hash_payloads(&dump));
            }
            payloads.push(dump);
        }
        payloads.push(b"\x00\x01x\x0a\x00garbage!".to_vec());
        all.push(payloads);
    }
    Ok(all)
}
