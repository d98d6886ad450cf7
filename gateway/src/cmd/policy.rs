//! What the gateway does with each command: the one decision, made once from the command's spec, that every path
//! takes. `Session::dispatch` answers `Local` commands, serves `Stateful` ones on the connection's state
//! (`session::stateful`) when they touch it, and looks at `Checked` ones (tenancy rules, scripts' identity,
//! rewritten replies) before `route::Dispatch` forwards them; the direct path (`session::direct`) forwards only
//! `Verbatim` commands, untouched.
//!
//! [`Policy::of`] decides from what the command table says; the tenancy rules (`tenancy::policy`) check some
//! commands it leaves `Verbatim`, for reasons of their own.

use super::spec::{CommandSpec, acl};
pub use super::spec::{SCRIPT_COMMANDS, is_script};
use super::table::Command;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Answered by the gateway itself (`PING`, `SELECT`, `COMMAND`, `CLIENT`, ...), or refused to everyone
    /// (`CLUSTER`, `ACL SETUSER`, `SLOWLOG`, ...).
    Local,
    /// May open, use or change the connection's state (transactions, subscriptions, blocking commands, `RESET`),
    /// or must keep its order with commands that do (`PUBLISH`).
    Stateful,
    /// Forwarded once the gateway has looked at it: it may be refused to a tenant without admin rights, name
    /// databases or channels the gateway renames, run as another user (scripts), get its reply rewritten (`INFO`,
    /// `CONFIG GET`), or reach past a tenant's own database on some routes (`FLUSHALL`).
    Checked,
    /// Forwarded untouched to wherever its keys go.
    Verbatim,
}

impl Policy {
    /// The policy the command table gives `spec`: subcommands, scripts and [`CHECKED`] are looked at.
    pub fn of(spec: &CommandSpec) -> Policy {
        if answered_locally(spec) {
            Policy::Local
        } else if may_be_stateful(spec) {
            Policy::Stateful
        } else if spec.id.container().is_some() || is_script(spec) || CHECKED.contains(&spec.id) {
            Policy::Checked
        } else {
            Policy::Verbatim
        }
    }
}

/// Commands forwarded with a check or a rewrite that neither their flags nor the tenancy rules tell.
const CHECKED: &[Command] = &[Command::Info, Command::Flushall];

/// Whether a command may touch the connection's state, or must keep its order with those that do: a test of its
/// categories, so that ordinary commands skip the checks by name.
pub fn may_be_stateful(spec: &CommandSpec) -> bool {
    const CATEGORIES: u32 = acl::TRANSACTION | acl::PUBSUB | acl::BLOCKING | acl::CONNECTION;
    spec.acl_categories & CATEGORIES != 0
}

/// The commands the session answers itself (`session/local.rs`).
fn answered_locally(spec: &CommandSpec) -> bool {
    match spec.id.container() {
        None => matches!(
            spec.id,
            Command::Ping
                | Command::Echo
                | Command::Monitor
                | Command::Quit
                | Command::Auth
                | Command::Hello
                | Command::Select
                | Command::Command
                | Command::Readonly
                | Command::Readwrite
                | Command::Asking
        ),
        Some(Command::Command) => matches!(
            spec.id,
            Command::CommandCount
                | Command::CommandInfo
                | Command::CommandDocs
                | Command::CommandList
                | Command::CommandGetkeys
                | Command::CommandGetkeysandflags
        ),
        Some(Command::Acl) => !matches!(
            spec.id,
            Command::AclCat | Command::AclGenpass | Command::AclHelp
        ),
        Some(container) => matches!(
            container,
            Command::Client | Command::Cluster | Command::Slowlog | Command::Latency
        ),
    }
}
