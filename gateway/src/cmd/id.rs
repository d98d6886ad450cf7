//! A command's identity, `Command` (generated with the table): from a `Command`, or the number it was recorded
//! as, back to the command's spec.

use std::sync::LazyLock;

use super::lookup::{NEWER_SUBCOMMANDS, commands};
use super::spec::CommandSpec;
use super::table::Command;

/// Every command and subcommand, the newer ones included, by `Command` (see [`by_index`]).
static BY_ID: LazyLock<Vec<&'static CommandSpec>> = LazyLock::new(|| {
    let mut all: Vec<&'static CommandSpec> = every().collect();
    all.sort_unstable_by_key(|spec| spec.id);
    all
});

/// The table's commands and subcommands, then the newer subcommands `lookup` serves.
fn every() -> impl Iterator<Item = &'static CommandSpec> {
    commands()
        .iter()
        .flat_map(|spec| std::iter::once(spec).chain(spec.subcommands))
        .chain(NEWER_SUBCOMMANDS)
}

/// The command whose `Command` is `index` (`Command as usize`): how what was recorded as a number (the last
/// command of a client, a counter's place) is named again.
pub fn by_index(index: usize) -> Option<&'static CommandSpec> {
    BY_ID.get(index).copied()
}

impl Command {
    /// The command's spec. Every `Command` has one (`every_command_has_the_id_its_name_says`).
    pub fn spec(self) -> &'static CommandSpec {
        BY_ID[self as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `Command` is its name in CamelCase (`config|resetstat` is `ConfigResetstat`), every command has its
    /// own, and `by_index` finds each command by its `Command`.
    #[test]
    fn every_command_has_the_id_its_name_says() {
        let camel = |name: &str| -> String {
            name.split(['|', '_', '-'])
                .map(|part| {
                    let mut chars = part.chars();
                    chars.next().map_or(String::new(), |first| {
                        first.to_ascii_uppercase().to_string() + chars.as_str()
                    })
                })
                .collect()
        };
        let all: Vec<&CommandSpec> = every().collect();
        assert_eq!(all.len(), Command::COUNT);
        for spec in &all {
            assert_eq!(format!("{:?}", spec.id), camel(spec.name), "{}", spec.name);
            assert_eq!(by_index(spec.id as usize).map(|s| s.name), Some(spec.name));
            assert_eq!(spec.id.spec().id, spec.id);
            let container = spec.name.split_once('|').map(|(container, _)| container);
            assert_eq!(
                spec.id
                    .container()
                    .map(|id| by_index(id as usize).map(|s| s.name)),
                container.map(Some),
                "{}",
                spec.name
            );
        }
        assert!(by_index(Command::COUNT).is_none());
    }
}
