//! The size limits a client's requests are held to (`Limits`), with Redis' stricter ones before `AUTH`.

use super::ProtocolError;

/// Size limits, checked before anything is allocated for the data they bound.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Longest bulk string (Redis' `proto-max-bulk-len`).
    pub max_bulk_len: usize,
    /// Most arguments in one command.
    pub max_args: usize,
    /// Longest inline command line (and longest `*`/`$` header line).
    pub max_inline_len: usize,
    /// Before AUTH, Redis accepts at most 10 arguments of at most 16 KB each, so that a client without a password
    /// cannot make the server buffer large requests. The gateway does the same.
    pub unauthenticated: bool,
}

impl Limits {
    const UNAUTHENTICATED_ARGS: u64 = 10;
    const UNAUTHENTICATED_BULK: u64 = 16384;

    /// These limits with Redis' stricter bounds for a client that has not authenticated yet.
    pub fn unauthenticated(self) -> Limits {
        Limits {
            unauthenticated: true,
            ..self
        }
    }

    pub(super) fn check_args(&self, count: u64) -> Result<(), ProtocolError> {
        if count > self.max_args as u64 {
            Err(ProtocolError::InvalidMultibulkLength)
        } else if self.unauthenticated && count > Self::UNAUTHENTICATED_ARGS {
            Err(ProtocolError::UnauthenticatedMultibulkLength)
        } else {
            Ok(())
        }
    }

    pub(super) fn check_bulk(&self, len: i64) -> Result<(), ProtocolError> {
        if len < 0 || len as u64 > self.max_bulk_len as u64 {
            Err(ProtocolError::InvalidBulkLength)
        } else if self.unauthenticated && len as u64 > Self::UNAUTHENTICATED_BULK {
            Err(ProtocolError::UnauthenticatedBulkLength)
        } else {
            Ok(())
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk_len: 512 * 1024 * 1024,
            max_args: 1024 * 1024,
            max_inline_len: 64 * 1024,
            unauthenticated: false,
        }
    }
}
