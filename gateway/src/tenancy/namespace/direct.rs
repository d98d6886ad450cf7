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

    /// The indices of the keys, in order. (`step_by` would cost a fifth of `write_keys`' loop.)
    pub(super) fn indices(self) -> impl Iterator<Item = usize> {
        let DirectKeys { first, last, step } = self;
        std::iter::successors(Some(first), move |index| Some(index + step))
            .take_while(move |&index| index <= last)
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
            let end = self.write_keys(out, raw, decoder.arg_ranges(), keys);
            out.truncate(end);
            Frame(out.split())
        })
    }

    /// Writes `raw`, whose arguments lie at `ranges`, into `out` with the keys at `keys` under the prefix;
    /// returns where it ends. Not inlined into the session's decoding loop, so that its own loop keeps its state
    /// in registers.
    #[inline(never)]
    fn write_keys(
        &self,
        out: &mut [u8],
        raw: &[u8],
        ranges: &[(usize, usize)],
        keys: DirectKeys,
    ) -> usize {
        // What of `raw` is written so far, and where the output ends.
        let (mut copied, mut at) = (0, 0);
        for index in keys.indices() {
            // A key's `$` line starts 2 bytes (CRLF) after the end of the argument before it.
            let (Some(&(_, before)), Some(&(start, end))) =
                (ranges.get(index - 1), ranges.get(index))
            else {
                break; // not reached: `DirectKeys::of` keeps every index below the argument count
            };
            at = put(out, at, &raw[copied..before + 2]);
            at = self.key_header(end - start, out, at);
            copied = start;
        }
        put(out, at, &raw[copied..])
    }

    /// Writes a key's bulk string header for its stored length, then the prefix, into `out` at `at`; returns
    /// where they end. The parts are a few bytes each: a stored length of two digits (most keys) is written with
    /// the prefix's fixed-size block (the excess overwritten by what follows) into one checked piece of `out`,
    /// where a copy call or a bounds check per part would cost more than the bytes.
    fn key_header(&self, key_len: usize, out: &mut [u8], at: usize) -> usize {
        let stored = self.prefix.len() + key_len;
        const HEADER: usize = b"$nn\r\n".len();
        if (10..100).contains(&stored)
            && self.prefix.len() <= MAX_NAMESPACE_LEN
            && let Some(piece) = out.get_mut(at..at + HEADER + MAX_NAMESPACE_LEN)
        {
            let (header, block) = piece.split_at_mut(HEADER);
            header.copy_from_slice(&[
                b'$',
                b'0' + (stored / 10) as u8,
                b'0' + (stored % 10) as u8,
                b'\r',
                b'\n',
            ]);
            block.copy_from_slice(&self.block);
            return at + HEADER + self.prefix.len();
        }
        let mut header = itoa::Buffer::new();
        let at = put(out, at, b"$");
        let at = put(out, at, header.format(stored).as_bytes());
        let at = put(out, at, b"\r\n");
        put(out, at, &self.prefix)
    }
}

/// Writes `part` into `out` at `at`; returns where it ends.
fn put(out: &mut [u8], at: usize, part: &[u8]) -> usize {
    let end = at + part.len();
    out[at..end].copy_from_slice(part);
    end
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
