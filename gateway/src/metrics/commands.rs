//! A tenant's command counters: by command, without a lock, a hash or a string comparison per command.

use std::sync::OnceLock;

use super::Stat;
use crate::cmd::{self, Command};

/// Counters by command, one place per `Command`, so counting is an index. The places are made at the tenant's
/// first command: a tenant that never sends one costs a pointer, which is what lets a gateway hold many idle
/// tenants.
#[derive(Default)]
pub(crate) struct CommandCounters {
    table: OnceLock<Box<[CommandCount]>>,
}

/// One command's calls, and those of them the gateway refused before running (INFO's `rejected_calls`).
#[derive(Default)]
struct CommandCount {
    calls: Stat,
    rejected: Stat,
}

/// One command's figures since the tenant's last `CONFIG RESETSTAT` (INFO's `cmdstat_<name>`).
pub(crate) struct CommandStats {
    pub name: &'static str,
    pub calls: u64,
    pub rejected: u64,
}

impl CommandCounters {
    /// Counts `count` more `command`s.
    #[inline]
    pub(crate) fn add(&self, command: Command, count: u64) {
        if let Some(counts) = self.of(command) {
            counts.calls.add(count);
        }
    }

    /// Counts a `command` the gateway refused before running it (also counted by `add`).
    pub(crate) fn reject(&self, command: Command) {
        if let Some(counts) = self.of(command) {
            counts.rejected.add(1);
        }
    }

    #[inline]
    fn of(&self, command: Command) -> Option<&CommandCount> {
        self.table
            .get_or_init(|| {
                (0..Command::COUNT)
                    .map(|_| CommandCount::default())
                    .collect()
            })
            .get(command as usize)
    }

    /// Every command's calls so far (never reset), by `Command as usize`; empty before the tenant's first command.
    pub(crate) fn calls(&self) -> Vec<u64> {
        self.table.get().map_or_else(Vec::new, |table| {
            table.iter().map(|count| count.calls.total()).collect()
        })
    }

    /// Every command counted, refused ones included.
    pub(crate) fn total(&self) -> u64 {
        self.named().map(|(_, count)| count.calls.total()).sum()
    }

    /// (command, count) for every command counted so far, sorted by name.
    pub(crate) fn counts(&self) -> impl Iterator<Item = (&'static str, i64)> {
        let mut rows: Vec<(&'static str, i64)> = self
            .named()
            .map(|(name, count)| (name, count.calls.total() as i64))
            .collect();
        rows.sort_unstable();
        rows.into_iter()
    }

    /// Every command's figures since the last reset, sorted by name; those without any left out, as Redis does.
    pub(crate) fn since_reset(&self) -> Vec<CommandStats> {
        let mut rows: Vec<CommandStats> = self
            .named()
            .map(|(name, count)| CommandStats {
                name,
                calls: count.calls.since_reset(),
                rejected: count.rejected.since_reset(),
            })
            .filter(|row| row.calls > 0 || row.rejected > 0)
            .collect();
        rows.sort_unstable_by_key(|row| row.name);
        rows
    }

    /// The commands counted at least once (calls or refusals), by name.
    fn named(&self) -> impl Iterator<Item = (&'static str, &CommandCount)> {
        self.table.get().into_iter().flat_map(|table| {
            table
                .iter()
                .enumerate()
                .filter(|(_, count)| count.calls.total() > 0 || count.rejected.total() > 0)
                .filter_map(|(index, count)| Some((cmd::by_index(index)?.name, count)))
        })
    }

    pub(super) fn reset(&self) {
        for (_, count) in self.named() {
            count.calls.reset();
            count.rejected.reset();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tenant that never sends a command holds no table: what lets a gateway keep many idle tenants.
    #[test]
    fn the_table_is_made_by_the_first_command() {
        let counters = CommandCounters::default();
        assert_eq!(counters.counts().count(), 0);
        counters.reset();
        assert!(counters.table.get().is_none());
        counters.add(Command::Get, 2);
        counters.reject(Command::Get);
        assert!(counters.table.get().is_some());
        let stats = counters.since_reset();
        assert_eq!(
            (stats[0].name, stats[0].calls, stats[0].rejected),
            ("get", 2, 1)
        );
    }
}
