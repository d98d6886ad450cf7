//! A namespaced tenant's requests on the direct path: written straight into the run's buffer with their keys
//! under the prefix, when the argument count alone tells where the keys are, and placed by the key as stored.

use bytes::BytesMut;
use switchyard_schemas::policy::MAX_NAMESPACE_LEN;

use super::Namespace;
use crate::cmd::CommandSpec;
use crate::cmd::spec::{BeginSearch, FindKeys, KeySpec, key_flag};
use crate::resp::{Frame, RequestDecoder};

/// Where the keys of a request are, by argument index: `first`, then every `step`-th up to `last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DirectKeys {
    first: usize,
    last: usize,
    step: usize,
}

impl DirectKeys {
    /// The keys of `spec` with `argc` arguments, when the count alone tells where they are (`GET`, `SET`,
    /// `MGET`, `MSET`, `HSET`...), as `key_indices` finds them: commands with one plain key spec, a fixed start
    /// and a range without a limit, and those whose one key is the first argument. `None`: the request takes
    /// the dispatch path (keyless, movable keys, or a reply to rewrite).
    pub(crate) fn of(spec: &CommandSpec, argc: usize) -> Option<DirectKeys> {
        if spec.key_is_first_argument() {
            return (argc > 1).then_some(DirectKeys {
                first: 1,
                last: 1,
                step: 1,
            });
        }
        let [
            KeySpec {
                flags,
                begin: BeginSearch::Index(first),
                find:
                    FindKeys::Range {
                        lastkey,
                        keystep,
                        limit: 0,
                    },
            },
        ] = spec.key_specs
        else {
            return None;
        };
        let plain =
            flags & (key_flag::NOT_KEY | key_flag::INCOMPLETE | key_flag::VARIABLE_FLAGS) == 0;
        let argc = i64::try_from(argc).ok()?;
        let (first, lastkey) = (i64::from(*first), i64::from(*lastkey));
        let last = if lastkey >= 0 {
            first + lastkey
        } else {
            argc + lastkey
        };
        let valid = plain && *keystep > 0 && first >= 1 && first <= last && last < argc;
        valid.then(|| DirectKeys {
            first: first as usize,
            last: last as usize,
            step: usize::try_from(*keystep).unwrap_or(1),
        })
    }

    pub(super) fn indices(self) -> impl Iterator<Item = usize> {
        (self.first..=self.last).step_by(self.step)
    }
}

impl Namespace {
    /// `frame` (the request `decoder` decoded last) with the keys at `keys` under the prefix. Everything
    /// between two keys is copied as the client sent it, in one piece.
    ///
    /// The frame is written into the worker thread's [`SCRATCH`] buffer and split off it, so that successive
    /// frames are adjacent in one allocation: a run joins them without copying, as it joins the frames of the
    /// input buffer, and no request allocates (one allocation per [`SCRATCH_BLOCK`] bytes of requests).
    pub(crate) fn direct_frame(
        &self,
        decoder: &RequestDecoder,
        frame: &Frame,
        keys: DirectKeys,
    ) -> Frame {
        let raw = &frame.0[..];
        // Each key grows by the prefix, and its length by as many digits as the prefix's length has at most.
        let count = (keys.last - keys.first) / keys.step + 1;
        let size = raw.len() + count * (self.prefix.len() + decimal_digits(self.prefix.len()));
        SCRATCH.with_borrow_mut(|out| {
            // Room for the prefix's block copy (see `key_header`), which writes a whole block past the prefix.
            let room = size + MAX_NAMESPACE_LEN;
            if out.capacity() < room {
                out.reserve(room.max(SCRATCH_BLOCK));
            }
            out.resize(room, 0);
            let (mut at, mut copied) = (0, 0);
            // The end of the last key written, and its index: the next key's line starts 2 bytes (CRLF) after
            // the end of the argument before it.
            let mut last_key: Option<(usize, usize)> = None;
            for index in keys.indices() {
                let before = match last_key {
                    Some((at, end)) if at + 1 == index => Some(end),
                    _ => decoder
                        .arg(frame, index - 1)
                        .map(|previous| offset(raw, previous) + previous.len()),
                };
                let (Some(before), Some(key)) = (before, decoder.arg(frame, index)) else {
                    break; // not reached: `DirectKeys::of` keeps every index below the argument count
                };
                at = put(out, at, &raw[copied..before + 2]);
                at = self.key_header(key.len(), out, at);
                copied = offset(raw, key);
                last_key = Some((index, copied + key.len()));
            }
            at = put(out, at, &raw[copied..]);
            out.truncate(at);
            Frame(out.split())
        })
    }

    /// Writes a key's bulk string header for its stored length, then the prefix, into `out` at `at`; returns
    /// where they end. The parts are a few bytes each: the length's digits are written one by one and the prefix
    /// is copied as its fixed-size block (the excess overwritten by what follows), where a copy call per part
    /// would cost more than the bytes.
    fn key_header(&self, key_len: usize, out: &mut [u8], at: usize) -> usize {
        out[at] = b'$';
        let digits = write_decimal(out, at + 1, self.prefix.len() + key_len);
        out[at + digits + 1] = b'\r';
        out[at + digits + 2] = b'\n';
        let start = at + digits + 3;
        match out.get_mut(start..start + MAX_NAMESPACE_LEN) {
            Some(block) if self.prefix.len() <= MAX_NAMESPACE_LEN => {
                block.copy_from_slice(&self.block)
            }
            _ => {
                put(out, start, &self.prefix);
            }
        }
        start + self.prefix.len()
    }
}

/// Writes `part` into `out` at `at`; returns where it ends.
fn put(out: &mut [u8], at: usize, part: &[u8]) -> usize {
    let end = at + part.len();
    out[at..end].copy_from_slice(part);
    end
}

/// Writes `n` in decimal into `out` at `at`; returns how many digits it took. Keys are mostly shorter than 100
/// bytes: their lengths take no loop.
fn write_decimal(out: &mut [u8], at: usize, n: usize) -> usize {
    match n {
        0..10 => {
            out[at] = b'0' + n as u8;
            1
        }
        10..100 => {
            out[at] = b'0' + (n / 10) as u8;
            out[at + 1] = b'0' + (n % 10) as u8;
            2
        }
        _ => {
            let digits = decimal_digits(n);
            let mut rest = n;
            for i in (at..at + digits).rev() {
                out[i] = b'0' + (rest % 10) as u8;
                rest /= 10;
            }
            digits
        }
    }
}

/// How many decimal digits `n` has (a `usize` has 20 at most).
fn decimal_digits(mut n: usize) -> usize {
    let mut digits = 1;
    while n >= 10 {
        n /= 10;
        digits += 1;
    }
    digits
}

/// How much the scratch buffer allocates at a time.
const SCRATCH_BLOCK: usize = 64 * 1024;

thread_local! {
    /// Where a worker writes its namespaced tenants' direct-path frames (see `Namespace::direct_frame`).
    static SCRATCH: std::cell::RefCell<BytesMut> = std::cell::RefCell::new(BytesMut::new());
}

/// Where `part`, a slice of `raw`, starts in it.
fn offset(raw: &[u8], part: &[u8]) -> usize {
    part.as_ptr() as usize - raw.as_ptr() as usize
}
