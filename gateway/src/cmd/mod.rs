//! TEMPORARY stand-in for the generated command table (replaced when the cmd-table branch lands).

use bytes::Bytes;

pub mod flag {
    pub const NONDETERMINISTIC: u32 = 32;
    pub const WRITE: u32 = 1;
    pub const READONLY: u32 = 2;
    pub const ADMIN: u32 = 4;
    pub const BLOCKING: u32 = 8;
    pub const PUBSUB: u32 = 16;
}

pub struct CommandSpec {
    pub name: &'static str,
    pub arity: i32,
    pub flags: u32,
}

impl CommandSpec {
    pub fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }

    pub fn key_indices(&self, args: &[Bytes], out: &mut Vec<usize>) -> Result<(), CommandError> {
        out.extend((1..args.len()).take(1));
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("ERR unknown command '{0}', with args beginning with: ")]
    Unknown(String),
}

static TABLE: &[CommandSpec] = &[
    CommandSpec {
        name: "get",
        arity: 2,
        flags: flag::READONLY,
    },
    CommandSpec {
        name: "set",
        arity: -3,
        flags: flag::WRITE,
    },
    CommandSpec {
        name: "incr",
        arity: 2,
        flags: flag::WRITE,
    },
    CommandSpec {
        name: "ping",
        arity: -1,
        flags: 0,
    },
    CommandSpec {
        name: "auth",
        arity: -2,
        flags: 0,
    },
    CommandSpec {
        name: "quit",
        arity: -1,
        flags: 0,
    },
];

pub fn lookup(args: &[Bytes]) -> Result<&'static CommandSpec, CommandError> {
    let name = String::from_utf8_lossy(&args[0]).to_lowercase();
    TABLE
        .iter()
        .find(|c| c.name == name)
        .ok_or(CommandError::Unknown(name))
}

pub mod info;
pub mod command {
    pub fn reply(_args: &[bytes::Bytes], out: &mut bytes::BytesMut) {
        crate::resp::error(out, "ERR COMMAND pending");
    }
}
