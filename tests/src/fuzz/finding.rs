//! What a case broke: the kinds of findings, how findings of many cases make one failure, and the events that
//! betray a write or a read outside the attacker's space.

use super::case::{Case, Wrap};
use super::oracle::{self, Event};
use super::platform::{Policy, Tenant, owner};

/// What kind of boundary a case broke.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(super) enum Kind {
    ReadLeak,
    WriteOutside,
    ReadOutside,
    PolicyBypassed,
    DataChanged,
    ForeignData,
    StateChanged,
    MemoryGrew,
    BackendDied,
    BackendFroze,
    BackendHeld,
    GatewayDown,
    OracleCut,
}

impl Kind {
    /// Whether recovering from it needs a new backend process (else the data is seeded again in place).
    pub(super) fn needs_restart(self) -> bool {
        matches!(
            self,
            Kind::StateChanged
                | Kind::MemoryGrew
                | Kind::BackendDied
                | Kind::BackendFroze
                | Kind::GatewayDown
                | Kind::OracleCut
        )
    }

    pub(super) fn label(self) -> &'static str {
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
            Kind::MemoryGrew => {
                "the shared Redis grew past 64 MB (a request made it build far more than it carried)"
            }
            Kind::BackendDied => "the shared Redis died",
            Kind::BackendFroze => "the shared Redis froze (no answer within 2 s)",
            Kind::BackendHeld => {
                "the shared Redis was held past a tenant's script limit (no PONG for longer than 1.5 s)"
            }
            Kind::GatewayDown => "the gateway stopped accepting connections",
            Kind::OracleCut => "the fuzzer's own backend connection was closed",
        }
    }
}

pub(super) struct Finding {
    pub(super) kind: Kind,
    pub(super) detail: String,
}

/// How a failure replays from a fresh backend.
#[derive(Clone)]
pub(super) enum Replay {
    Alone,
    After(u64),
    NotReproduced,
    NotTried,
}

pub(super) struct Failure {
    pub(super) kind: Kind,
    pub(super) signature: String,
    pub(super) count: u32,
    pub(super) first: u64,
    pub(super) attacker: String,
    pub(super) detail: String,
    pub(super) repro: String,
    pub(super) replay: Replay,
    pub(super) needs_repro: Option<String>,
    /// Other cases' signatures of the same failure.
    pub(super) also: Vec<String>,
}

/// The events on keys `attacker` does not own, as findings, reads (key misses) apart from the rest; and writes to
/// its own keys when its policy forbids them.
pub(super) fn foreign_events(events: &[Event], attacker: &Tenant) -> Vec<Finding> {
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
pub(super) fn class(finding: &Finding, case: &Case) -> String {
    match finding.kind {
        Kind::StateChanged
        | Kind::MemoryGrew
        | Kind::BackendFroze
        | Kind::OracleCut
        | Kind::GatewayDown => finding
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
pub(super) fn summary(lines: &[String]) -> String {
    let mut text = lines.iter().take(6).cloned().collect::<Vec<_>>().join("\n");
    if lines.len() > 6 {
        text.push_str(&format!("\n... and {} more", lines.len() - 6));
    }
    text
}
