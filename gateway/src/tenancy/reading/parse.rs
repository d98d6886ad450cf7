//! Parsers that read a command's arguments the way its implementation in redis-server 7.0 does (sort.c
//! `sortCommandGeneric`, geo.c `georadiusGeneric`, t_stream.c `xreadCommand`, db.c `copyCommand` and
//! `moveCommand`): which keys it touches and which arguments name a database. Options are compared as
//! `strcasecmp` compares them (up to a NUL byte).
//!
//! Where an option that names a key may be repeated and Redis keeps the last one, a request that repeats it is
//! refused ([`Ambiguity`]): keeping one and checking another is how a tenant writes past its namespace.

use bytes::Bytes;

use super::Found;
use crate::cmd::CommandSpec;
use crate::cmd::spec::c_str;

/// A parser: what a request touches, or why it is refused.
pub(crate) type Parser = fn(&[Bytes]) -> Result<Found, Ambiguity>;

/// Why a parser refuses a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ambiguity {
    /// An option that names a key appears more than once.
    Repeated(&'static str),
    /// An argument Redis would reject as a syntax error, before touching anything.
    Syntax,
}

impl Ambiguity {
    /// The error reply.
    pub(super) fn reply(self, spec: &CommandSpec) -> String {
        match self {
            Ambiguity::Repeated(option) => format!(
                "ERR {} is refused by the gateway: the {option} option is given more than once, and Redis would \
                 keep only the last; give it once",
                spec.display_name()
            ),
            Ambiguity::Syntax => "ERR syntax error".to_string(),
        }
    }
}

/// Whether `arg` is the option `word`, as `strcasecmp` sees it.
fn is(arg: &[u8], word: &str) -> bool {
    c_str(arg).eq_ignore_ascii_case(word.as_bytes())
}

/// Records the destination of a key-naming option, refusing a second one.
fn destination(
    slot: &mut Option<usize>,
    index: usize,
    option: &'static str,
) -> Result<(), Ambiguity> {
    match slot.replace(index) {
        Some(_) => Err(Ambiguity::Repeated(option)),
        None => Ok(()),
    }
}

/// `SORT key [BY pattern] [LIMIT offset count] [GET pattern ...] [ASC|DESC] [ALPHA] [STORE destination]`: the
/// key, and the destination. `BY` and `GET` patterns are not keys; a namespace rewrites them apart
/// (`Namespace::outbound`).
pub(super) fn sort(args: &[Bytes]) -> Result<Found, Ambiguity> {
    sort_options(args, true)
}

/// `SORT_RO`: `SORT` without `STORE`, which is Redis' syntax error there.
pub(super) fn sort_ro(args: &[Bytes]) -> Result<Found, Ambiguity> {
    sort_options(args, false)
}

fn sort_options(args: &[Bytes], stores: bool) -> Result<Found, Ambiguity> {
    let mut store = None;
    let mut j = 2;
    while j < args.len() {
        let left = args.len() - j - 1;
        let arg = &args[j];
        if is(arg, "asc") || is(arg, "desc") || is(arg, "alpha") {
        } else if is(arg, "limit") && left >= 2 {
            j += 2;
        } else if stores && is(arg, "store") && left >= 1 {
            destination(&mut store, j + 1, "STORE")?;
            j += 1;
        } else if (is(arg, "by") || is(arg, "get")) && left >= 1 {
            j += 1;
        } else {
            return Err(Ambiguity::Syntax);
        }
        j += 1;
    }
    Ok(Found {
        keys: std::iter::once(1).chain(store).collect(),
        databases: Vec::new(),
    })
}

/// `GEORADIUS key longitude latitude radius unit [options]`.
pub(super) fn georadius(args: &[Bytes]) -> Result<Found, Ambiguity> {
    geo_options(args, 6)
}

/// `GEORADIUSBYMEMBER key member radius unit [options]`.
pub(super) fn georadius_by_member(args: &[Bytes]) -> Result<Found, Ambiguity> {
    geo_options(args, 5)
}

/// The options of the `GEORADIUS` family from `base`: `WITHDIST`, `WITHHASH`, `WITHCOORD`, `ANY`, `ASC`,
/// `DESC`, `COUNT n`, `STORE key`, `STOREDIST key`.
fn geo_options(args: &[Bytes], base: usize) -> Result<Found, Ambiguity> {
    let mut store = None;
    let mut i = base;
    while i < args.len() {
        let more = i + 1 < args.len();
        let arg = &args[i];
        if ["withdist", "withhash", "withcoord", "any", "asc", "desc"]
            .iter()
            .any(|word| is(arg, word))
        {
        } else if is(arg, "count") && more {
            i += 1;
        } else if (is(arg, "store") || is(arg, "storedist")) && more {
            destination(&mut store, i + 1, "STORE")?;
            i += 1;
        } else {
            return Err(Ambiguity::Syntax);
        }
        i += 1;
    }
    Ok(Found {
        keys: std::iter::once(1).chain(store).collect(),
        databases: Vec::new(),
    })
}

/// `XREAD [COUNT n] [BLOCK ms] STREAMS key... id...` and `XREADGROUP GROUP group consumer [COUNT n] [BLOCK ms]
/// [NOACK] STREAMS key... id...`: options up to the first `STREAMS` that has something after it (a group or
/// consumer named `STREAMS` is not the keyword), then the keys in the first half of the rest.
pub(super) fn xread(args: &[Bytes]) -> Result<Found, Ambiguity> {
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - i - 1;
        let arg = &args[i];
        if (is(arg, "block") || is(arg, "count")) && more >= 1 {
            i += 1;
        } else if is(arg, "streams") && more >= 1 {
            let first = i + 1;
            let count = args.len() - first;
            if !count.is_multiple_of(2) {
                return Err(Ambiguity::Syntax);
            }
            return Ok(Found {
                keys: (first..first + count / 2).collect(),
                databases: Vec::new(),
            });
        } else if is(arg, "group") && more >= 2 {
            i += 2;
        } else if !is(arg, "noack") {
            return Err(Ambiguity::Syntax);
        }
        i += 1;
    }
    Err(Ambiguity::Syntax)
}

/// `COPY source destination [DB destination-db] [REPLACE]`: both keys, and every `DB` value (Redis checks each
/// and keeps the last, so every one is renumbered for the backend).
pub(super) fn copy(args: &[Bytes]) -> Result<Found, Ambiguity> {
    let mut databases = Vec::new();
    let mut j = 3;
    while j < args.len() {
        if is(&args[j], "replace") {
        } else if is(&args[j], "db") && j + 1 < args.len() {
            databases.push(j + 1);
            j += 1;
        } else {
            return Err(Ambiguity::Syntax);
        }
        j += 1;
    }
    Ok(Found {
        keys: vec![1, 2],
        databases,
    })
}

/// `MOVE key db`.
pub(super) fn moves(_args: &[Bytes]) -> Result<Found, Ambiguity> {
    Ok(Found {
        keys: vec![1],
        databases: vec![2],
    })
}

/// `SWAPDB index1 index2`.
pub(super) fn swapdb(_args: &[Bytes]) -> Result<Found, Ambiguity> {
    Ok(Found {
        keys: Vec::new(),
        databases: vec![1, 2],
    })
}
