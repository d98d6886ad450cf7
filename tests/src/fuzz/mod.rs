//! The hostile isolation fuzzer (issue 37): tenants by database and by key namespace on one real `redis-server`,
//! none with `allow_admin`, behind a gateway; cases drawn for every command of the backend's own command table
//! from a hostile grammar, each sent through the gateway as one attacker tenant on a connection of its own, and
//! after each the backend itself is checked: no keyspace event on a key the attacker does not own, no other
//! tenant's canary in its replies, Redis alive and answering within 2 s; after each window of cases (and on
//! replay, after each case) every other space's data byte for byte, a full read of every value, and the
//! server-wide state. A failing case is replayed from a fresh backend, alone and then with the earlier case it
//! needs, and reported as a `redis-cli` snippet with the seed and case number to run it again.
//!
//! `tests/tests/isolation_fuzz.rs` runs it; `scripts/fuzz-isolation` runs long ones (docs/operations.md,
//! "Tenant isolation").

mod case;
mod draw;
mod eavesdrop;
mod grammar;
mod oracle;
mod payload;
mod platform;

use std::collections::BTreeMap;
use std::fmt;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use case::{Case, Wrap};
use draw::{Drawer, WINDOW};
use oracle::{DEADLINE, Digest, Event, Health, Notifications, ServerState};
use platform::{ADMIN_SCRIPT, Platform, Policy, SEEDED_KEYS, TENANTS, Tenant, owner};

/// A reply larger than this is not read further (its start is checked for canaries).
const REPLY_CAP: usize = 4 << 20;
/// Past this many distinct failures, or this much time spent replaying them, later ones are counted but not
/// replayed to find their minimal form: a gateway with many holes still gets its report in minutes.
const MINIMISED_AT_MOST: usize = 60;
const MINIMISING_BUDGET: Duration = Duration::from_secs(150);

/// What to run: cases `first .. first + cases` of the run seeded `seed`.
pub struct FuzzConfig {
    pub seed: u64,
    pub cases: u64,
    pub first: u64,
    /// Print every case and its reply (`SWITCHYARD_FUZZ_VERBOSE=1`).
    pub verbose: bool,
}

impl FuzzConfig {
    /// From `SWITCHYARD_FUZZ_SEED` (default 37), `SWITCHYARD_FUZZ_CASES` (default `default_cases`) and
    /// `SWITCHYARD_FUZZ_FIRST` (default 0).
    pub fn from_env(default_cases: u64) -> FuzzConfig {
        let var = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .map(|v| {
                    v.parse()
                        .unwrap_or_else(|_| panic!("{name}={v} is not a number"))
                })
                .unwrap_or(default)
        };
        FuzzConfig {
            seed: var("SWITCHYARD_FUZZ_SEED", 37),
            cases: var("SWITCHYARD_FUZZ_CASES", default_cases),
            first: var("SWITCHYARD_FUZZ_FIRST", 0),
            verbose: var("SWITCHYARD_FUZZ_VERBOSE", 0) != 0,
        }
    }
}

/// Runs the fuzzer and reports what it found.
pub fn run(config: &FuzzConfig) -> Result<Report> {
    let started = Instant::now();
    let mut runner = Runner::start(config.seed)?;
    let end = config.first + config.cases;
    // The first case since the backend last held only seeded data (outside the current attacker's space).
    let mut since = config.first;
    for number in config.first..end {
        if number > config.first && number.is_multiple_of(WINDOW) {
            runner.end_window(since, number)?;
            since = number;
        }
        let case = runner.drawer.case(config.seed, number);
        let outcome = runner.execute(&case)?;
        if config.verbose {
            eprintln!(
                "case #{number}:\n{}\n-> {}",
                case.redis_cli(),
                oracle::show(&outcome.reply)
            );
        }
        let findings = runner.check_case(&case, &outcome)?;
        if !findings.is_empty() {
            runner.record(&case, findings, since)?;
            since = number + 1;
        }
        if (number + 1 - config.first).is_multiple_of(2000) {
            eprintln!(
                "isolation fuzz: {}/{} cases, {} failing, {:.0} s",
                number + 1 - config.first,
                config.cases,
                runner.failures.values().map(|f| f.count).sum::<u32>(),
                started.elapsed().as_secs_f64()
            );
        }
    }
    runner.end_window(since, end)?;
    Ok(Report {
        seed: config.seed,
        first: config.first,
        cases: config.cases,
        commands: runner.drawer.commands(),
        elapsed: started.elapsed(),
        backend_restarts: runner.platform.backend_restarts,
        gateway_restarts: runner.platform.gateway_restarts,
        blocked: runner.blocked,
        failures: runner.failures.into_values().collect(),
    })
}

/// What kind of boundary a case broke.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Kind {
    ReadLeak,
    WriteOutside,
    ReadOutside,
    PolicyBypassed,
    DataChanged,
    ForeignData,
    StateChanged,
    BackendDied,
    BackendFroze,
    GatewayDown,
    OracleCut,
}

impl Kind {
    /// Whether recovering from it needs a new backend process (else the data is seeded again in place).
    fn needs_restart(self) -> bool {
        matches!(
            self,
            Kind::StateChanged
                | Kind::BackendDied
                | Kind::BackendFroze
                | Kind::GatewayDown
                | Kind::OracleCut
        )
    }

    fn label(self) -> &'static str {
        match self {
            Kind::ReadLeak => "another tenant's data in the attacker's reply",
            Kind::WriteOutside => "keyspace events on keys the attacker does not own",
            Kind::ReadOutside => "reads of keys the attacker does not own (keymiss events)",
            Kind::PolicyBypassed => {
                "a tenant that may not write wrote (read_only or commands.deny)"
            }
            Kind::DataChanged => "another space's data changed",
            Kind::ForeignData => "another tenant's data copied into the attacker's keys",
            Kind::StateChanged => "server-wide state changed",
            Kind::BackendDied => "the shared Redis died",
            Kind::BackendFroze => "the shared Redis froze (no answer within 2 s)",
            Kind::GatewayDown => "the gateway stopped accepting connections",
            Kind::OracleCut => "the fuzzer's own backend connection was closed",
        }
    }
}

struct Finding {
    kind: Kind,
    detail: String,
}

/// What the attacker got back.
struct Outcome {
    reply: Vec<u8>,
    /// The gateway closed the connection after `QUIT` within the deadline.
    complete: bool,
    gateway_down: bool,
}

/// How a failure replays from a fresh backend.
#[derive(Clone)]
enum Replay {
    Alone,
    After(u64),
    NotReproduced,
    NotTried,
}

struct Failure {
    kind: Kind,
    signature: String,
    count: u32,
    first: u64,
    attacker: String,
    detail: String,
    repro: String,
    replay: Replay,
    needs_repro: Option<String>,
    /// Other cases' signatures of the same failure.
    also: Vec<String>,
}

struct Runner {
    platform: Platform,
    drawer: Drawer,
    notifications: Notifications,
    admin: redis::Connection,
    seeded: Digest,
    baseline: ServerState,
    admin_script_sha: String,
    seed: u64,
    barrier: u64,
    blocked: Vec<u64>,
    failures: BTreeMap<(Kind, String), Failure>,
    /// Time spent replaying failures so far (bounded by [`MINIMISING_BUDGET`]).
    minimising: Duration,
}

impl Runner {
    fn start(seed: u64) -> Result<Runner> {
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
        Ok(Runner {
            platform,
            drawer,
            notifications,
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
    fn fresh(&mut self) -> Result<()> {
        if !self.platform.gateway_alive() {
            self.platform.restart_gateway()?;
        }
        self.platform.restart_backend()?;
        self.reconnect()?;
        self.baseline = ServerState::take(&mut self.admin, &self.admin_script_sha)?;
        self.seeded = Digest::take(&self.platform)?;
        Ok(())
    }

    fn reconnect(&mut self) -> Result<()> {
        self.admin = self.platform.admin(0, DEADLINE)?;
        self.notifications = Notifications::connect(self.platform.backend_port())?;
        Ok(())
    }

    /// Sends the case on a connection of its own and reads until the gateway closes it (after `QUIT`), for at
    /// most [`DEADLINE`].
    fn execute(&mut self, case: &Case) -> Result<Outcome> {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.platform.gateway_port())) else {
            return Ok(Outcome {
                reply: Vec::new(),
                complete: false,
                gateway_down: true,
            });
        };
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(DEADLINE))?;
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
    fn check_case(&mut self, case: &Case, outcome: &Outcome) -> Result<Vec<Finding>> {
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
        if !outcome.complete && findings.is_empty() {
            self.blocked.push(case.number);
        }
        Ok(findings)
    }

    /// The backend did not answer the oracle: dead, frozen, or only the oracle's connection was closed.
    fn diagnose(&mut self, error: &anyhow::Error) -> Result<Vec<Finding>> {
        let timed_out = error
            .downcast_ref::<redis::RedisError>()
            .is_some_and(redis::RedisError::is_timeout);
        let finding = match oracle::health(&self.platform) {
            Health::Dead => Finding {
                kind: Kind::BackendDied,
                detail: format!("connection refused after the case ({error})"),
            },
            Health::Frozen => {
                let froze = Instant::now();
                let thawed =
                    (0..10).any(|_| matches!(oracle::health(&self.platform), Health::Alive));
                Finding {
                    kind: Kind::BackendFroze,
                    detail: match thawed {
                        true => format!(
                            "answered again after {:.1} s",
                            froze.elapsed().as_secs_f64() + DEADLINE.as_secs_f64()
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
    fn check_window(&mut self, attacker: &Tenant) -> Result<Vec<Finding>> {
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
        Ok(findings)
    }

    /// Checks the window `since .. end` (one attacker's); on a finding, finds the case that caused it.
    fn end_window(&mut self, since: u64, end: u64) -> Result<()> {
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
    fn eavesdrop(&mut self, number: u64, attacker: &'static Tenant) -> Result<()> {
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
    fn drain(&mut self) -> Result<()> {
        self.barrier += 1;
        oracle::publish_barrier(&mut self.admin, self.barrier)?;
        self.notifications.until_barrier(self.barrier)?;
        Ok(())
    }

    /// Runs `case` with every check (those after a case and those after a window).
    fn run_checked(&mut self, case: &Case) -> Result<Vec<Finding>> {
        let outcome = self.execute(case)?;
        let mut findings = self.check_case(case, &outcome)?;
        if findings.is_empty() {
            findings = self.check_window(case.attacker)?;
        }
        Ok(findings)
    }

    /// Runs `before` without checks (events drained), then `case` with every check, from the seeded data (in a
    /// new backend process when `restart`).
    fn replay(&mut self, before: std::ops::Range<u64>, case: &Case, restart: bool) -> Result<bool> {
        self.reset(restart)?;
        for number in before {
            let earlier = self.drawer.case(self.seed, number);
            self.execute(&earlier)?;
            if self.drain().is_err() {
                self.reconnect()?;
            }
        }
        Ok(!self.run_checked(case)?.is_empty())
    }

    /// Records `case`'s findings; a new kind of failure is replayed to see whether it needs an earlier case of
    /// its window (from `since`). Leaves the backend with only the seeded data.
    fn record(&mut self, case: &Case, findings: Vec<Finding>, since: u64) -> Result<()> {
        let restart = findings.iter().any(|f| f.kind.needs_restart());
        let classes: Vec<(Kind, String)> =
            findings.iter().map(|f| (f.kind, class(f, case))).collect();
        let new = classes.iter().any(|c| !self.failures.contains_key(c));
        let minimise =
            new && self.failures.len() < MINIMISED_AT_MOST && self.minimising < MINIMISING_BUDGET;
        let (replay, needs_repro) = match minimise {
            true => {
                let started = Instant::now();
                let found = self.minimise(case, since, restart)?;
                self.minimising += started.elapsed();
                found
            }
            false => (Replay::NotTried, None),
        };
        for (finding, key) in findings.into_iter().zip(classes) {
            if let Some(failure) = self.failures.get_mut(&key) {
                failure.count += 1;
                let signature = case.signature();
                if failure.signature != signature
                    && !failure.also.contains(&signature)
                    && failure.also.len() < 5
                {
                    failure.also.push(signature);
                }
                continue;
            }
            eprintln!(
                "isolation fuzz: case {}: {} ({}): {}",
                case.number,
                finding.kind.label(),
                case.signature(),
                finding.detail.lines().next().unwrap_or_default()
            );
            self.failures.insert(
                key,
                Failure {
                    kind: finding.kind,
                    signature: case.signature(),
                    count: 1,
                    first: case.number,
                    attacker: case.attacker.describe(),
                    detail: finding.detail,
                    repro: case.redis_cli(),
                    replay: replay.clone(),
                    needs_repro: needs_repro.clone(),
                    also: Vec::new(),
                },
            );
        }
        self.reset(restart)
    }

    /// Back to the seeded data: a new backend process, or the data seeded again in place.
    fn reset(&mut self, restart: bool) -> Result<()> {
        if restart || !self.platform.gateway_alive() {
            return self.fresh();
        }
        self.platform.reseed()?;
        self.drain()?;
        self.seeded = Digest::take(&self.platform)?;
        Ok(())
    }

    /// Whether `case` fails alone from a fresh backend, or after which earlier case of `since .. case`.
    fn minimise(
        &mut self,
        case: &Case,
        since: u64,
        restart: bool,
    ) -> Result<(Replay, Option<String>)> {
        if self.replay(case.number..case.number, case, restart)? {
            return Ok((Replay::Alone, None));
        }
        if since >= case.number {
            return Ok((Replay::NotReproduced, None));
        }
        // Bisect for the one earlier case it needs (assuming one: a state an earlier case left behind).
        if !self.replay(since..case.number, case, restart)? {
            return Ok((Replay::NotReproduced, None));
        }
        let (mut low, mut high) = (since, case.number);
        while high - low > 1 {
            let middle = low + (high - low) / 2;
            if self.replay(middle..high, case, restart)? {
                low = middle;
            } else {
                high = middle;
            }
        }
        if self.replay(low..low + 1, case, restart)? {
            let earlier = self.drawer.case(self.seed, low);
            return Ok((Replay::After(low), Some(earlier.redis_cli())));
        }
        Ok((Replay::NotReproduced, None))
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

/// The events on keys `attacker` does not own, as findings, reads (key misses) apart from the rest; and writes to
/// its own keys when its policy forbids them.
fn foreign_events(events: &[Event], attacker: &Tenant) -> Vec<Finding> {
    let line = |e: &&Event| {
        format!(
            "db {} key {} ({}'s): {}",
            e.db,
            oracle::show(&e.key),
            owner(e.db, &e.key),
            e.event
        )
    };
    let mut writes = Vec::new();
    let mut reads = Vec::new();
    let mut bypassed = Vec::new();
    for event in events {
        let read = event.event == "keymiss";
        match (owner(event.db, &event.key) == attacker.name, read) {
            (false, false) => writes.push(line(&event)),
            (false, true) => reads.push(line(&event)),
            (true, false) if attacker.policy != Policy::Full => bypassed.push(line(&event)),
            (true, _) => {}
        }
    }
    [
        (Kind::WriteOutside, writes),
        (Kind::ReadOutside, reads),
        (Kind::PolicyBypassed, bypassed),
    ]
    .into_iter()
    .filter(|(_, lines)| !lines.is_empty())
    .map(|(kind, lines)| Finding {
        kind,
        detail: summary(&lines),
    })
    .collect()
}

/// What makes two findings one failure: server-wide ones by what changed (any command of a case that follows a
/// state-changing one shows it), writes of a tenant that may not write inside scripts by the wrap, the others by
/// the case's commands and wrap.
fn class(finding: &Finding, case: &Case) -> String {
    match finding.kind {
        Kind::StateChanged | Kind::BackendFroze | Kind::OracleCut | Kind::GatewayDown => finding
            .detail
            .lines()
            .next()
            .unwrap_or_default()
            .replace(|c: char| c.is_ascii_digit(), "#"),
        // A policy that stops at the script boundary lets every write command through it: one failure per wrap.
        Kind::PolicyBypassed
            if matches!(case.wrap, Wrap::EvalKeys | Wrap::EvalArgv | Wrap::Fcall) =>
        {
            format!("any write {}", case.wrap.label())
        }
        _ => case.signature(),
    }
}

/// The first few lines of a list, and how many more.
fn summary(lines: &[String]) -> String {
    let mut text = lines.iter().take(6).cloned().collect::<Vec<_>>().join("\n");
    if lines.len() > 6 {
        text.push_str(&format!("\n... and {} more", lines.len() - 6));
    }
    text
}

/// What a run found, printed as the fuzzer's report.
pub struct Report {
    seed: u64,
    first: u64,
    cases: u64,
    commands: usize,
    elapsed: Duration,
    backend_restarts: u32,
    gateway_restarts: u32,
    blocked: Vec<u64>,
    failures: Vec<Failure>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let end = self.first + self.cases;
        writeln!(
            f,
            "isolation fuzz: seed {}, cases {}..{end}, {} commands from the backend's COMMAND DOCS, {:.1} s",
            self.seed,
            self.first,
            self.commands,
            self.elapsed.as_secs_f64()
        )?;
        let tenants: Vec<String> = TENANTS.iter().map(Tenant::describe).collect();
        writeln!(
            f,
            "tenants (password <name>-password, none with allow_admin): {}",
            tenants.join("; ")
        )?;
        writeln!(
            f,
            "backend restarts: {}, gateway restarts: {}, cases still waiting after 2 s while Redis answered \
             (blocking commands, not failures): {}",
            self.backend_restarts,
            self.gateway_restarts,
            self.blocked.len()
        )?;
        let mut failures: Vec<&Failure> = self.failures.iter().collect();
        failures.sort_by_key(|failure| (failure.kind, failure.first));
        let failing: u32 = failures.iter().map(|failure| failure.count).sum();
        for (i, failure) in failures.iter().enumerate() {
            writeln!(
                f,
                "\n{}. {} -- {} -- {} case(s), first #{} by {}",
                i + 1,
                failure.kind.label(),
                failure.signature,
                failure.count,
                failure.first,
                failure.attacker
            )?;
            for line in failure.detail.lines() {
                writeln!(f, "   {line}")?;
            }
            if !failure.also.is_empty() {
                writeln!(f, "   also seen with: {}", failure.also.join("; "))?;
            }
            match failure.replay {
                Replay::Alone => writeln!(f, "   fails alone from a fresh backend:")?,
                Replay::After(n) => {
                    writeln!(
                        f,
                        "   fails from a fresh backend after case #{n}, which is:"
                    )?;
                    for line in failure.needs_repro.iter().flat_map(|r| r.lines()) {
                        writeln!(f, "   {line}")?;
                    }
                    writeln!(f, "   and then:")?;
                }
                Replay::NotReproduced => writeln!(
                    f,
                    "   not reproduced from a fresh backend (depends on earlier cases of its window):"
                )?,
                Replay::NotTried => writeln!(f, "   (not replayed: too many distinct failures)")?,
            }
            for line in failure.repro.lines() {
                writeln!(f, "   {line}")?;
            }
            writeln!(
                f,
                "   rerun: scripts/fuzz-isolation --seed {} --first {} --cases 1",
                self.seed, failure.first
            )?;
        }
        match failures.is_empty() {
            true => write!(
                f,
                "\nisolation fuzz: PASS (seed {}, {} cases)",
                self.seed, self.cases
            ),
            false => write!(
                f,
                "\nisolation fuzz: FAIL ({} distinct failures in {failing} failing cases; seed {}, cases {}..{end})",
                failures.len(),
                self.seed,
                self.first
            ),
        }
    }
}
