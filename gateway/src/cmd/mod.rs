//! Redis commands as the gateway knows them: the command table generated from redis-server (`table`) and its
//! types (`spec`), lookup and arity (`lookup`), key extraction (`keys`, `keys_proc`), and the commands the gateway
//! answers itself (`command`, ...).
//!
//! Per request the session calls `lookup(&args)` (no allocation): an error is answered with
//! `CommandError::write_reply` and the connection keeps serving, as Redis does. The spec's `flags` say how to
//! route (`flag::WRITE`, `flag::BLOCKING`, `flag::PUBSUB`, `flag::NO_KEYS`, ...), and `key_indices` says which
//! arguments are keys, exactly as `COMMAND GETKEYS` would.

pub mod command;
pub mod glob;
mod id;
mod keys;
mod keys_proc;
mod lookup;
pub mod policy;
pub mod spec;
mod table;

pub use id::by_index;
pub use lookup::{CommandError, LookupCache, commands, lookup, lookup_by_name, resolve};
pub use policy::Policy;
pub use spec::{
    ACL_CATEGORY_NAMES, BeginSearch, CommandSpec, FLAG_NAMES, FindKeys, KEY_FLAG_NAMES, KeySpec,
    KeysProc, acl, flag, key_flag,
};
pub use table::{Command, REDIS_VERSION};

/// A request's arguments from words, for tests.
#[cfg(test)]
pub(crate) fn words(words: &[&str]) -> Vec<bytes::Bytes> {
    words
        .iter()
        .map(|w| bytes::Bytes::copy_from_slice(w.as_bytes()))
        .collect()
}
