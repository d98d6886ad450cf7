//! A tenant's command counters: by command, without a lock or a string comparison per command.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::Stat;

/// Counters keyed by a command's static name, in a fixed lock-free open-addressing table: the key is the
/// address of the name in the command table, so counting never hashes or compares strings. The table (64 KB) is
/// made at the tenant's first command: a tenant that never sends one costs a pointer, which is what lets a
/// gateway hold many idle tenants.
#[derive(Default)]
pub(crate) struct CommandCounters {
    table: OnceLock<Box<Table>>,
}

struct Table {
    keys: Box<[AtomicUsize]>,
    names: Box<[OnceLock<&'static str>]>,
    counts: Box<[CommandCount]>,
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

const COMMAND_SLOTS: usize = 1024;

impl Table {
    fn new() -> Table {
        Table {
            keys: (0..COMMAND_SLOTS).map(|_| AtomicUsize::new(0)).collect(),
            names: (0..COMMAND_SLOTS).map(|_| OnceLock::new()).collect(),
            counts: (0..COMMAND_SLOTS)
                .map(|_| CommandCount::default())
                .collect(),
        }
    }
}

impl CommandCounters {
    /// Counts `count` more `name` commands.
    #[inline]
    pub(crate) fn add(&self, name: &'static str, count: u64) {
        if let Some(counts) = self.table().of(name) {
            counts.calls.add(count);
        }
    }

    /// Counts a `name` command the gateway refused before running it (also counted by `add`).
    pub(crate) fn reject(&self, name: &'static str) {
        if let Some(counts) = self.table().of(name) {
            counts.rejected.add(1);
        }
    }

    #[inline]
    fn table(&self) -> &Table {
        self.table.get_or_init(|| Box::new(Table::new()))
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

    fn named(&self) -> impl Iterator<Item = (&'static str, &CommandCount)> {
        self.table.get().into_iter().flat_map(|table| {
            table
                .names
                .iter()
                .zip(table.counts.iter())
                .filter_map(|(name, count)| Some((*name.get()?, count)))
        })
    }

    pub(super) fn reset(&self) {
        for (_, count) in self.named() {
            count.calls.reset();
            count.rejected.reset();
        }
    }
}

impl Table {
    /// The counters of `name`, given a slot the first time.
    #[inline]
    fn of(&self, name: &'static str) -> Option<&CommandCount> {
        let key = name.as_ptr() as usize;
        let mut slot = (key >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15) % COMMAND_SLOTS;
        for _ in 0..COMMAND_SLOTS {
            let current = self.keys[slot].load(Ordering::Relaxed);
            if current == key
                || (current == 0
                    && match self.keys[slot].compare_exchange(
                        0,
                        key,
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => true,
                        Err(other) => other == key,
                    })
            {
                let _ = self.names[slot].set(name);
                return Some(&self.counts[slot]);
            }
            slot = (slot + 1) % COMMAND_SLOTS;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tenant that never sends a command holds no table: what lets a gateway keep many idle tenants.
    #[test]
    fn the_table_is_made_by_the_first_command() {
        // One name, as the command table holds it: the counters key a command by its name's address.
        static GET: &str = "get";
        let counters = CommandCounters::default();
        assert_eq!(counters.counts().count(), 0);
        counters.reset();
        assert!(counters.table.get().is_none());
        counters.add(GET, 2);
        counters.reject(GET);
        assert!(counters.table.get().is_some());
        let stats = counters.since_reset();
        assert_eq!(
            (stats[0].name, stats[0].calls, stats[0].rejected),
            ("get", 2, 1)
        );
    }
}
