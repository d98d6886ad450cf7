//! Faults a test can inject into a debug build of the gateway started with `SWITCHYARD_TEST_FAULTS=1`; none of
//! this is compiled into release builds. A request injects one by naming its key as its first argument.

use std::sync::OnceLock;

use crate::resp::{Frame, RequestDecoder};

pub(super) enum Fault {
    /// The request's reply slot is dropped unanswered, as a bug would (see `reply::REPLY_LOST`).
    DropReply,
    /// The session's task panics.
    Panic,
}

/// The fault `frame` asks for, if any.
pub(super) fn injected(decoder: &RequestDecoder, frame: &Frame) -> Option<Fault> {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    if !*ENABLED
        .get_or_init(|| std::env::var_os("SWITCHYARD_TEST_FAULTS").is_some_and(|v| v == "1"))
    {
        return None;
    }
    match decoder.arg(frame, 1)? {
        b"switchyard:test:drop-reply" => Some(Fault::DropReply),
        b"switchyard:test:panic" => Some(Fault::Panic),
        _ => None,
    }
}
