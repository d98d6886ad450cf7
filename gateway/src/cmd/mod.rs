//! Redis commands as the gateway knows them: the command table generated from redis-server (`table`), lookup,
//! arity and key extraction over it (`spec`), and the commands the gateway answers itself (`command`, ...).

pub mod command;
pub mod spec;
mod table;

pub use spec::{
    ACL_CATEGORY_NAMES, BeginSearch, CommandError, CommandSpec, FLAG_NAMES, FindKeys,
    KEY_FLAG_NAMES, KeySpec, KeysProc, acl, commands, flag, key_flag, lookup, lookup_by_name,
    resolve,
};
pub use table::REDIS_VERSION;
