//! Faults a test can inject into a debug build of the gateway started with `SWITCHYARD_TEST_FAULTS=1`; none of
//! this is compiled into release builds.

use std::sync::OnceLock;

use crate::resp::{Frame, RequestDecoder};

/// A request whose first argument is this key loses its reply slot, as a bug would (see `reply::REPLY_LOST`).
const DROP_REPLY_KEY: &[u8] = b"switchyard:test:drop-reply";

/// Whether `frame` asks for its reply slot to be dropped.
pub(super) fn drops_reply(decoder: &RequestDecoder, frame: &Frame) -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| std::env::var_os("SWITCHYARD_TEST_FAULTS").is_some_and(|v| v == "1"))
        && decoder.arg(frame, 1) == Some(DROP_REPLY_KEY)
}
