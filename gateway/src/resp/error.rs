//! Protocol errors, worded exactly as Redis words them.

/// A client broke the protocol. Like Redis, the gateway answers with this text and closes the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ProtocolError {
    #[error("Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    #[error("Protocol error: invalid bulk length")]
    InvalidBulkLength,
    #[error("Protocol error: expected '$', got '{}'", char::from(*.0))]
    ExpectedDollar(u8),
    #[error("Protocol error: unauthenticated multibulk length")]
    UnauthenticatedMultibulkLength,
    #[error("Protocol error: unauthenticated bulk length")]
    UnauthenticatedBulkLength,
    #[error("Protocol error: too big mbulk count string")]
    TooBigMultibulkCount,
    #[error("Protocol error: too big bulk count string")]
    TooBigBulkCount,
    #[error("Protocol error: too big inline request")]
    TooBigInline,
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    /// A backend sent something that is not RESP. Never shown to clients as is.
    #[error("invalid reply from backend: {0}")]
    BadReply(&'static str),
}
