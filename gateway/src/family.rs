//! Command families: the few kinds of command whose latencies differ by nature (a blocking command waits, a
//! script runs as long as it runs), which the gateway's latency histogram is labelled with. Which family a
//! command is in is the command table's to say (`CommandSpec::family`).

/// A command's family, from its flags and ACL categories: the first that applies, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Family {
    /// `EVAL`, `FCALL`, `SCRIPT`, `FUNCTION` (`@scripting`).
    Script,
    /// Commands that may wait for data (`@blocking`: `BLPOP`, `XREAD BLOCK`, `WAIT`...).
    Blocking,
    /// `PUBLISH`, `SUBSCRIBE` and the other `@pubsub` commands.
    PubSub,
    /// `MULTI`, `EXEC`, `WATCH`... (`@transaction`).
    Transaction,
    /// Commands that write (`write` flag).
    Write,
    /// Commands that only read (`readonly` flag).
    Read,
    /// Everything else: connection, server and introspection commands (`PING`, `AUTH`, `CLIENT`, `INFO`...),
    /// and replies the gateway makes before it knows the command.
    #[default]
    Other,
}

impl Family {
    pub(crate) const ALL: [Family; 7] = [
        Family::Script,
        Family::Blocking,
        Family::PubSub,
        Family::Transaction,
        Family::Write,
        Family::Read,
        Family::Other,
    ];

    /// The `family` label's value.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Family::Script => "script",
            Family::Blocking => "blocking",
            Family::PubSub => "pubsub",
            Family::Transaction => "transaction",
            Family::Write => "write",
            Family::Read => "read",
            Family::Other => "other",
        }
    }

    /// Its place in `ALL`.
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}
