//! Replaying a failing case from a fresh backend: alone, or after the one earlier case of its window it needs;
//! and recording failures, one per class.

use std::time::{Duration, Instant};

use anyhow::Result;

use super::case::Case;
use super::finding::{Failure, Finding, Kind, Replay, class};
use super::oracle::Digest;
use super::runner::Runner;

/// Past this many distinct failures, or this much time spent replaying them, later ones are counted but not
/// replayed to find their minimal form: a gateway with many holes still gets its report in minutes.
const MINIMISED_AT_MOST: usize = 60;
const MINIMISING_BUDGET: Duration = Duration::from_secs(150);

impl Runner {
    /// Runs `before` without checks (events drained), then `case` with every check, from the seeded data (in a
    /// new backend process when `restart`).
    pub(super) fn replay(
        &mut self,
        before: std::ops::Range<u64>,
        case: &Case,
        restart: bool,
    ) -> Result<bool> {
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
    pub(super) fn record(&mut self, case: &Case, findings: Vec<Finding>, since: u64) -> Result<()> {
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
    pub(super) fn reset(&mut self, restart: bool) -> Result<()> {
        if restart || !self.platform.gateway_alive() {
            return self.fresh();
        }
        self.platform.reseed()?;
        self.drain()?;
        self.seeded = Digest::take(&self.platform)?;
        Ok(())
    }

    /// Whether `case` fails alone from a fresh backend, or after which earlier case of `since .. case`.
    pub(super) fn minimise(
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
