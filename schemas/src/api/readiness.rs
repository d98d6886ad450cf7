//! Migration readiness: what gateways count of a tenant's live commands that would fail (or change meaning) on
//! the destination of its migration, and the control plane's view of it (docs/migration.md#readiness).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How many examples a gateway's report, and the control plane's answer, give at most.
pub const MAX_READINESS_EXAMPLES: usize = 20;

/// What kind of command would fail, or change meaning, on the destination.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ReadinessKind {
    /// A multi-key command whose keys are in different slots (or shards) there: `CROSSSLOT`.
    CrossSlot,
    /// A `MULTI` ... `EXEC` whose keys are in different slots there: `CROSSSLOT`, then `EXECABORT`.
    Transaction,
    /// `EVAL`/`EVALSHA`/`FCALL` whose keys are in different slots there: `CROSSSLOT`.
    Script,
    /// MGET, MSET, DEL, UNLINK, EXISTS, TOUCH across slots: the gateway splits them, so they still work
    /// through it, but no longer atomically (and they fail for a client that talks to the destination directly).
    Split,
    /// A command the destination does not know (an older Redis, a command renamed or disabled there, a module it
    /// lacks): `ERR unknown command`. Found by the control plane, which asks the destination (`COMMAND INFO`).
    Unsupported,
}

impl ReadinessKind {
    /// Whether commands of this kind fail there (so that `cutover` is refused until forced).
    pub fn fails(self) -> bool {
        !matches!(self, ReadinessKind::Split)
    }
}

/// Counts by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadinessCounts {
    #[serde(default)]
    pub cross_slot: u64,
    #[serde(default)]
    pub transactions: u64,
    #[serde(default)]
    pub scripts: u64,
    #[serde(default)]
    pub split: u64,
    /// Calls of commands the destination does not know.
    #[serde(default)]
    pub unsupported: u64,
}

impl ReadinessCounts {
    pub fn get_mut(&mut self, kind: ReadinessKind) -> &mut u64 {
        match kind {
            ReadinessKind::CrossSlot => &mut self.cross_slot,
            ReadinessKind::Transaction => &mut self.transactions,
            ReadinessKind::Script => &mut self.scripts,
            ReadinessKind::Split => &mut self.split,
            ReadinessKind::Unsupported => &mut self.unsupported,
        }
    }

    /// Commands that would fail on the destination (every kind but `split`).
    pub fn failing(&self) -> u64 {
        self.cross_slot + self.transactions + self.scripts + self.unsupported
    }

    pub fn add(&mut self, other: &ReadinessCounts) {
        self.cross_slot += other.cross_slot;
        self.transactions += other.transactions;
        self.scripts += other.scripts;
        self.split += other.split;
        self.unsupported += other.unsupported;
    }
}

/// One kind of offending command: its name and its keys as patterns (runs of digits shown as `#`, no values).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadinessExample {
    pub kind: ReadinessKind,
    /// The command (for a transaction, the queued command whose key left the transaction's slot).
    pub command: String,
    /// Patterns of the keys in different slots (for a transaction: the first key's, then the other's); none for
    /// an `unsupported` command.
    pub keys: Vec<String>,
    /// How many commands matched this example.
    pub count: u64,
}

/// One tenant's part of a gateway's report: what it counted since its last report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantReadiness {
    pub tenant: String,
    /// Commands checked against the destination.
    pub checked: u64,
    pub counts: ReadinessCounts,
    /// The most frequent offending commands, most first.
    #[serde(default)]
    pub examples: Vec<ReadinessExample>,
    /// The commands the tenant ran (those the gateway forwards), by name as Redis names them (`get`,
    /// `config|get`), with their calls: the control plane asks the destination which it knows.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub commands: BTreeMap<String, u64>,
    /// Counted against the tenant's readiness probe, not a migration's destination.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub probe: bool,
}

/// Most distinct command names a report, and the sums the control plane keeps, hold: more than the command table
/// has (with subcommands), so only a broken reporter reaches it.
pub const MAX_READINESS_COMMANDS: usize = 1024;

/// Adds the calls of `more` to `commands`, up to `MAX_READINESS_COMMANDS` names.
pub fn merge_commands(commands: &mut BTreeMap<String, u64>, more: &BTreeMap<String, u64>) {
    for (name, calls) in more {
        if let Some(known) = commands.get_mut(name) {
            *known = known.saturating_add(*calls);
        } else if commands.len() < MAX_READINESS_COMMANDS {
            commands.insert(name.clone(), *calls);
        }
    }
}

/// Adds `more` to `examples` (the same kind, command and keys counted together), keeping the
/// `MAX_READINESS_EXAMPLES` most frequent, most first.
pub fn merge_examples(examples: &mut Vec<ReadinessExample>, more: &[ReadinessExample]) {
    for example in more {
        let same = examples.iter_mut().find(|known| {
            (known.kind, &known.command, &known.keys)
                == (example.kind, &example.command, &example.keys)
        });
        match same {
            Some(known) => known.count += example.count,
            None => examples.push(example.clone()),
        }
    }
    examples.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| (a.kind, &a.command, &a.keys).cmp(&(b.kind, &b.command, &b.keys)))
    });
    examples.truncate(MAX_READINESS_EXAMPLES);
}

/// `GET /v1/tenants/{tenant}/migrations/{id}/readiness`: every gateway's counts for the migration, summed over
/// its `double_write` to `verified` states.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MigrationReadiness {
    /// No command counted would fail on the destination (`split` ones do not count against it).
    pub ready: bool,
    /// Commands the gateways checked against the destination. 0 with a destination that is one plain Redis
    /// (nothing there fails for slot reasons, so gateways check nothing) or before any traffic.
    pub checked: u64,
    pub counts: ReadinessCounts,
    pub examples: Vec<ReadinessExample>,
    /// Whether the commands the tenant ran were checked against the destination's command table (`unsupported`).
    /// False when the destination could not be asked (unreachable, `COMMAND` refused by its ACL...): the
    /// answer then says nothing of them, and does not hold them against readiness.
    pub commands_checked: bool,
    /// Why `commands_checked` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commands_unchecked: Option<String>,
    /// The gateways that reported counts for this migration.
    pub gateways: Vec<String>,
    /// When the last report arrived (none before the first).
    pub updated_at: Option<String>,
}

/// `PUT /v1/tenants/{tenant}/readiness-probe`: would the tenant's traffic work on `to`? Gateways check it against
/// that destination's placement as they do for a migration, without a migration, until the probe is deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadinessProbeSet {
    /// The destination, as a migration names it: a resource, a target or a whole route table.
    pub to: super::MigrationDestination,
}

/// `GET /v1/tenants/{tenant}/readiness-probe`: the probe's destination and its readiness, in a migration's
/// readiness' shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ReadinessProbe {
    /// The destination, as set (resource names as given).
    pub to: crate::RouteTable,
    /// Who set it, and when: the counts start there.
    pub author: String,
    pub created_at: String,
    #[serde(flatten)]
    pub readiness: MigrationReadiness,
}
