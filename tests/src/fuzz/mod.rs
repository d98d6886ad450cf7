//! The hostile isolation fuzzer: tenants by database and by key namespace on one real `redis-server`,
//! none with `allow_admin`, behind a gateway; cases drawn for every command of the backend's own command table
//! from a hostile grammar, each sent through the gateway as one attacker tenant on a connection of its own, and
//! after each the backend itself is checked: no keyspace event on a key the attacker does not own, no other
//! tenant's canary in its replies, Redis alive and answering within 2 s and never held for longer than three
//! times a tenant's script limit while the case ran (`held`); after each window of cases (and on replay, after
//! each case) every other space's data byte for byte, a full read of every value, the server-wide state, and the
//! server's memory (a request must not make it build more than a request may carry). A failing case is replayed
//! from a fresh backend, alone and then with the earlier case it needs, and reported as a `redis-cli` snippet
//! with the seed and case number to run it again.
//!
//! `tests/tests/isolation_fuzz.rs` runs it; `scripts/fuzz-isolation` runs long ones (docs/operations.md,
//! "Tenant isolation").

mod case;
mod draw;
mod eavesdrop;
mod finding;
mod grammar;
mod held;
mod oracle;
mod payload;
mod platform;
mod replay;
mod report;
mod runner;
mod vocabulary;

use std::time::Instant;

use anyhow::Result;

use draw::WINDOW;
pub use report::Report;
use runner::Runner;

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
