//! The fuzzer's report: what ran, and each failure with its replay and a `redis-cli` snippet.

use std::fmt;
use std::time::Duration;

use super::finding::{Failure, Replay};
use super::platform::{TENANTS, Tenant};

/// What a run found, printed as the fuzzer's report.
pub struct Report {
    pub(super) seed: u64,
    pub(super) first: u64,
    pub(super) cases: u64,
    pub(super) commands: usize,
    pub(super) elapsed: Duration,
    pub(super) backend_restarts: u32,
    pub(super) gateway_restarts: u32,
    pub(super) blocked: Vec<u64>,
    pub(super) failures: Vec<Failure>,
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
