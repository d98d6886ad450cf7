//! A list sorted by name, held in chunks that successive versions share: the version after a delta rebuilds
//! only the chunks the delta's names fall in and shares every other one, so that making it touches a few
//! hundred entries and pointers at 100,000 entries, not every entry (copying every `Arc` would touch every
//! entry's memory, tens of milliseconds of cache misses at 100,000).

use std::iter::Peekable;
use std::sync::Arc;

/// Entries a chunk holds when built; a chunk that grows past twice this is split.
const CHUNK: usize = 256;

/// What a list entry is sorted and found by.
pub(crate) trait Named {
    fn name(&self) -> &str;
}

pub(crate) struct ByName<T> {
    /// Never empty.
    chunks: Vec<Arc<[T]>>,
    /// The index of each chunk's first entry in the whole list.
    starts: Vec<usize>,
    len: usize,
}

/// A list after [`ByName::patched`], and where its entries came from.
pub(crate) struct Patched<T> {
    pub list: ByName<T>,
    /// For each entry of the old list, its index in `list`; `None` when it was replaced or removed.
    pub moved: Vec<Option<u32>>,
    /// The indices in `list` of the entries that came in.
    pub added: Vec<usize>,
}

impl<T> Default for ByName<T> {
    fn default() -> Self {
        ByName {
            chunks: Vec::new(),
            starts: Vec::new(),
            len: 0,
        }
    }
}

impl<T: Named + Clone> ByName<T> {
    /// A list of `items`, sorted by name.
    pub(crate) fn from_sorted(items: Vec<T>) -> ByName<T> {
        let mut chunks = Vec::with_capacity(items.len() / CHUNK + 1);
        push_chunks(&mut chunks, items);
        ByName::from_chunks(chunks)
    }

    fn from_chunks(chunks: Vec<Arc<[T]>>) -> ByName<T> {
        let mut starts = Vec::with_capacity(chunks.len());
        let mut len = 0;
        for chunk in &chunks {
            starts.push(len);
            len += chunk.len();
        }
        ByName {
            chunks,
            starts,
            len,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flat_map(|chunk| chunk.iter())
    }

    /// The entry at `index` in the whole list.
    pub(crate) fn get(&self, index: usize) -> Option<&T> {
        let chunk = self
            .starts
            .partition_point(|&start| start <= index)
            .checked_sub(1)?;
        let start = self.starts.get(chunk)?;
        self.chunks.get(chunk)?.get(index - start)
    }

    /// The entry named `name`.
    pub(crate) fn find(&self, name: &str) -> Option<&T> {
        let chunk = self.chunks.get(self.chunk_of(name))?;
        let found = chunk
            .binary_search_by(|entry| entry.name().cmp(name))
            .ok()?;
        chunk.get(found)
    }

    /// The chunk where `name` is or would go: the last whose first entry is not after it (the first one for a
    /// name before every entry).
    fn chunk_of(&self, name: &str) -> usize {
        self.chunks
            .partition_point(|chunk| chunk.first().is_some_and(|first| first.name() <= name))
            .saturating_sub(1)
    }

    /// This list with `upserts` (sorted by name, each name once) put in, each replacing the entry of its name,
    /// and the entries named in `removed` (sorted) taken out; the chunks neither touches are shared.
    pub(crate) fn patched(&self, upserts: Vec<T>, removed: &[&str]) -> Patched<T> {
        let mut patched = Patched {
            list: ByName::default(),
            moved: Vec::with_capacity(self.len),
            added: Vec::with_capacity(upserts.len()),
        };
        let mut chunks = Vec::with_capacity(self.chunks.len() + 1);
        let mut upserts = upserts.into_iter().peekable();
        let mut removed = removed.iter().copied().peekable();
        let mut next = 0; // where the chunk being made starts in the new list
        for (c, chunk) in self.chunks.iter().enumerate() {
            // This chunk's share: the names before the next chunk's first (the last chunk takes the rest).
            let end = self.chunks.get(c + 1).and_then(|next| next.first());
            let mine = |name: &str| end.is_none_or(|end| name < end.name());
            let mut upserted = take_while_peek(&mut upserts, |u| mine(u.name())).peekable();
            let mut gone = take_while_peek(&mut removed, |r| mine(r)).peekable();
            if upserted.peek().is_none() && gone.peek().is_none() {
                patched
                    .moved
                    .extend((next..next + chunk.len()).map(|i| u32::try_from(i).ok()));
                next += chunk.len();
                chunks.push(Arc::clone(chunk));
                continue;
            }
            let mut items = Vec::with_capacity(chunk.len() + 1);
            for entry in chunk.iter() {
                let mut replaced = false;
                while let Some(new) = upserted.next_if(|new| new.name() <= entry.name()) {
                    // Names are unique, so only the last one taken can be the entry's.
                    replaced = new.name() == entry.name();
                    patched.added.push(next + items.len());
                    items.push(new);
                }
                while gone.next_if(|name| *name < entry.name()).is_some() {}
                let removed_here = gone.next_if(|name| *name == entry.name()).is_some();
                if replaced || removed_here {
                    patched.moved.push(None);
                } else {
                    patched.moved.push(u32::try_from(next + items.len()).ok());
                    items.push(entry.clone());
                }
            }
            for new in upserted {
                patched.added.push(next + items.len());
                items.push(new);
            }
            // Names removed that the list does not have: none left for the next chunk.
            gone.for_each(drop);
            next += items.len();
            push_chunks(&mut chunks, items);
        }
        // Into an empty list, everything is new.
        let rest: Vec<T> = upserts.collect();
        patched.added.extend(next..next + rest.len());
        push_chunks(&mut chunks, rest);
        patched.list = ByName::from_chunks(chunks);
        patched
    }
}

/// Takes from `items` while `take` holds.
fn take_while_peek<'a, I: Iterator>(
    items: &'a mut Peekable<I>,
    take: impl Fn(&I::Item) -> bool + 'a,
) -> impl Iterator<Item = I::Item> + 'a {
    std::iter::from_fn(move || items.next_if(&take))
}

/// Appends `items` (sorted, and after every entry of `chunks`) as chunks: joined to the last chunk when they are
/// few (so that removals leave no trail of tiny chunks), split evenly when they are many.
fn push_chunks<T: Clone>(chunks: &mut Vec<Arc<[T]>>, mut items: Vec<T>) {
    if items.is_empty() {
        return;
    }
    if items.len() < CHUNK / 2
        && let Some(last) = chunks.last()
        && last.len() + items.len() <= 2 * CHUNK
    {
        items = last.iter().cloned().chain(items).collect();
        chunks.pop();
    }
    if items.len() <= 2 * CHUNK {
        return chunks.push(Arc::from(items));
    }
    // Pieces of equal size (at most CHUNK), so that a split leaves no tiny chunk behind.
    let size = items.len().div_ceil(items.len().div_ceil(CHUNK));
    let mut items = items.into_iter();
    loop {
        let chunk: Vec<T> = items.by_ref().take(size).collect();
        if chunk.is_empty() {
            return;
        }
        chunks.push(Arc::from(chunk));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Named for String {
        fn name(&self) -> &str {
            self
        }
    }

    /// Random patches of a list of a few thousand names agree with a plain sorted list, entry by entry, and
    /// report where every old entry went and where the new ones are.
    #[test]
    fn patches_agree_with_a_plain_sorted_list() {
        let mut state = 7u64;
        let mut random = |n: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % n
        };
        let mut plain: Vec<String> = (0..3000).map(|i| format!("n{:05}", i * 3)).collect();
        let mut list = ByName::from_sorted(plain.clone());
        for round in 0..200 {
            let mut upserts: Vec<String> = (0..random(20))
                .map(|_| format!("n{:05}", random(10_000)))
                .collect();
            upserts.sort();
            upserts.dedup();
            let removed: Vec<String> = match round % 10 {
                // Whole stretches removed now and then, to shrink chunks to nothing.
                0 => plain
                    .iter()
                    .skip(usize::try_from(random(2000)).unwrap())
                    .take(600)
                    .cloned()
                    .collect(),
                _ => (0..random(20))
                    .map(|_| format!("n{:05}", random(10_000)))
                    .collect(),
            };
            let mut removed: Vec<&str> = removed
                .iter()
                .map(String::as_str)
                .filter(|name| upserts.binary_search_by(|u| u.as_str().cmp(name)).is_err())
                .collect();
            removed.sort();
            removed.dedup();
            let patched = list.patched(upserts.clone(), &removed);
            let mut expected: Vec<String> = plain
                .iter()
                .filter(|name| {
                    removed.binary_search(&name.as_str()).is_err()
                        && upserts.binary_search(name).is_err()
                })
                .cloned()
                .chain(upserts.iter().cloned())
                .collect();
            expected.sort();
            let got: Vec<String> = patched.list.iter().cloned().collect();
            assert_eq!(got, expected, "round {round}");
            assert_eq!(patched.list.len(), expected.len());
            for (i, name) in expected.iter().enumerate() {
                assert_eq!(patched.list.get(i), Some(name));
                assert_eq!(patched.list.find(name), Some(name));
            }
            assert_eq!(patched.list.get(expected.len()), None);
            assert_eq!(patched.list.find("zzz"), None);
            for (old, moved) in plain.iter().zip(&patched.moved) {
                let at = moved.map(|i| &expected[usize::try_from(i).unwrap()]);
                let kept = removed.binary_search(&old.as_str()).is_err()
                    && upserts.binary_search(old).is_err();
                assert_eq!(at, kept.then_some(old), "round {round}");
            }
            let added: Vec<&String> = patched.added.iter().map(|&i| &expected[i]).collect();
            assert_eq!(added, upserts.iter().collect::<Vec<_>>(), "round {round}");
            assert!(
                patched
                    .list
                    .chunks
                    .iter()
                    .all(|c| !c.is_empty() && c.len() <= 2 * CHUNK)
            );
            plain = expected;
            list = patched.list;
        }
    }
}
