//! Requests whose cost to a shared server is set by a number in their arguments, not by the data the tenant
//! stored or sent: a 40-byte `SETBIT` that makes Redis allocate 512 MB, an `SRANDMEMBER` with a negative count
//! that makes it build a reply of two billion elements (and hold every other client meanwhile). The gateway's
//! own size limits bound what a request may carry; these commands are held to the same limits for what they make
//! Redis build:
//!
//! - a string a request makes longer by an offset (`SETRANGE`, `SETBIT`, `BITFIELD`): at most `--max-bulk-len`
//!   bytes, the bound Redis itself applies with its `proto-max-bulk-len`, with Redis' own error text;
//! - a reply whose length is its count alone (`SRANDMEMBER`, `ZRANDMEMBER`, `HRANDFIELD` with a negative count):
//!   at most `--max-args` elements, as many as a request may carry.
//!
//! Scripts are not read by the gateway: a script may call these commands with any argument. On a Redis shared
//! with tenants that are not trusted, their `scripts` policy is the bound (docs/operations.md).

use bytes::Bytes;

use crate::cmd::{Command, CommandSpec};
use crate::resp::Limits;

/// Commands some of whose requests these rules refuse: never forwarded without a look at their arguments.
pub(crate) fn is_bounded(id: Command) -> bool {
    matches!(
        id,
        Command::Setrange
            | Command::Setbit
            | Command::Bitfield
            | Command::BitfieldRo
            | Command::Srandmember
            | Command::Zrandmember
            | Command::Hrandfield
    )
}

/// Redis' reply to a string that would grow past `proto-max-bulk-len`.
const STRING_TOO_LONG: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";

/// Redis' reply to a bit offset past `proto-max-bulk-len` bytes.
const BIT_OFFSET: &str = "ERR bit offset is not an integer or out of range";

/// Why the request (`args`, a request for `spec`) may not run: what it would make Redis build is larger than
/// `limits` allow a request to carry. `None` when it may, or when Redis refuses it itself (an argument that is
/// not a number, a syntax error): Redis then answers with its own words.
pub(crate) fn refusal(spec: &CommandSpec, args: &[Bytes], limits: &Limits) -> Option<String> {
    let longest = limits.max_bulk_len as u128;
    match spec.id {
        // SETRANGE key offset value: an empty value changes nothing.
        Command::Setrange => {
            let offset = number(args.get(2)?)?;
            let value = args.get(3)?;
            (offset >= 0 && !value.is_empty() && offset as u128 + value.len() as u128 > longest)
                .then(|| STRING_TOO_LONG.to_string())
        }
        // SETBIT key offset value
        Command::Setbit => {
            let offset = number(args.get(2)?)?;
            (offset >= 0 && (offset as u128 >> 3) >= longest).then(|| BIT_OFFSET.to_string())
        }
        Command::Bitfield | Command::BitfieldRo => bitfield_offsets(&args[2..])
            .any(|offset| offset >> 3 >= longest)
            .then(|| BIT_OFFSET.to_string()),
        Command::Srandmember | Command::Zrandmember | Command::Hrandfield => {
            let count = number(args.get(2)?)?;
            let elements = count.unsigned_abs();
            (count < 0 && elements > limits.max_args as u64).then(|| {
                format!(
                    "ERR {} is refused by the gateway: a negative count asks for {elements} elements whatever the \
                     key holds, more than the {} a request may carry (--max-args)",
                    spec.display_name(),
                    limits.max_args
                )
            })
        }
        _ => None,
    }
}

/// An integer argument as Redis reads one; `None` when Redis would refuse it.
fn number(arg: &Bytes) -> Option<i64> {
    std::str::from_utf8(arg).ok()?.parse().ok()
}

/// The bit offsets of `BITFIELD`'s subcommands (`GET type offset`, `SET type offset value`, `INCRBY type offset
/// increment`, `OVERFLOW mode`), `#N` multiplied by the type's width as Redis does; the reading stops where
/// Redis would answer a syntax error.
fn bitfield_offsets(args: &[Bytes]) -> impl Iterator<Item = u128> + '_ {
    let mut rest = args;
    std::iter::from_fn(move || {
        loop {
            let operands = match &rest.first()?.to_ascii_lowercase()[..] {
                b"get" => 2,
                b"set" | b"incrby" => 3,
                b"overflow" => 1,
                _ => return None,
            };
            let (sub, after) = rest.split_at_checked(1 + operands)?;
            rest = after;
            if operands == 1 {
                continue;
            }
            let width: u128 = std::str::from_utf8(sub[1].get(1..)?).ok()?.parse().ok()?;
            let offset = &sub[2];
            let (multiple, digits) = match offset.strip_prefix(b"#") {
                Some(digits) => (width, digits),
                None => (1, &offset[..]),
            };
            let offset: u128 = std::str::from_utf8(digits).ok()?.parse().ok()?;
            return Some(offset.saturating_mul(multiple));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(args: &[&str]) -> Option<String> {
        let limits = Limits {
            max_bulk_len: 1024,
            max_args: 100,
            ..Limits::default()
        };
        let args = crate::cmd::words(args);
        let spec = crate::cmd::lookup(&args).expect("a command of the table");
        refusal(spec, &args, &limits)
    }

    #[test]
    fn strings_grow_by_offset_only_as_far_as_a_request_may_carry() {
        assert_eq!(refused(&["SETRANGE", "k", "1020", "abcd"]), None);
        assert_eq!(
            refused(&["SETRANGE", "k", "1021", "abcd"]).as_deref(),
            Some(STRING_TOO_LONG)
        );
        assert_eq!(refused(&["SETRANGE", "k", "999999", ""]), None);
        assert_eq!(refused(&["SETRANGE", "k", "-1", "x"]), None); // Redis' own error
        assert_eq!(refused(&["SETRANGE", "k", "x", "x"]), None);
        assert_eq!(refused(&["SETBIT", "k", "8191", "1"]), None);
        assert_eq!(
            refused(&["SETBIT", "k", "8192", "1"]).as_deref(),
            Some(BIT_OFFSET)
        );
        assert_eq!(
            refused(&["SETBIT", "k", "99999999999999999999999", "1"]),
            None
        );
    }

    #[test]
    fn bitfield_offsets_are_read_as_redis_reads_them() {
        assert_eq!(refused(&["BITFIELD", "k", "SET", "u8", "8184", "1"]), None);
        assert_eq!(
            refused(&["BITFIELD", "k", "GET", "u8", "0", "SET", "u8", "#1024", "1"]).as_deref(),
            Some(BIT_OFFSET)
        );
        assert_eq!(
            refused(&[
                "BITFIELD", "k", "OVERFLOW", "SAT", "INCRBY", "i5", "9000", "1"
            ])
            .as_deref(),
            Some(BIT_OFFSET)
        );
        assert_eq!(
            refused(&[
                "BITFIELD_RO",
                "k",
                "GET",
                "u8",
                "#1023",
                "GET",
                "u8",
                "8192"
            ])
            .as_deref(),
            Some(BIT_OFFSET)
        );
        // A syntax error before the offset: Redis answers it.
        assert_eq!(
            refused(&["BITFIELD", "k", "NOPE", "SET", "u8", "#99999", "1"]),
            None
        );
    }

    #[test]
    fn counts_that_ask_for_more_elements_than_a_request_carries_are_refused() {
        assert_eq!(refused(&["SRANDMEMBER", "k", "-100"]), None);
        assert_eq!(refused(&["SRANDMEMBER", "k", "100000"]), None); // at most the set's members
        let refusal = refused(&["ZRANDMEMBER", "k", "-101", "WITHSCORES"]).unwrap_or_default();
        assert!(refusal.starts_with(
            "ERR ZRANDMEMBER is refused by the gateway: a negative count asks for 101"
        ));
        assert!(refused(&["HRANDFIELD", "k", "-9223372036854775808"]).is_some());
    }
}
