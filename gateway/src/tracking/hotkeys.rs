//! A tenant's most frequently sampled keys on one worker: a space-saving summary (Metwally et al.) of a few
//! dozen counters, which finds every key sampled more often than 1/CAPACITY of the time, with a count that
//! overestimates by at most the smallest counter. A sample compares fingerprints, not keys, and a replaced
//! counter reuses its key's buffer: counting a key allocates nothing once the summary is full.

use std::hash::Hasher;

use bytes::Bytes;

/// Counters a summary keeps: well over the keys a report names, so that the reported ones are counted right.
const CAPACITY: usize = 64;

/// The counters, each in three arrays (its key's fingerprint, its key, its count): a sample scans the
/// fingerprints, a new key the counts.
#[derive(Default)]
pub(crate) struct HotKeys {
    fingerprints: Vec<u64>,
    keys: Vec<Vec<u8>>,
    counts: Vec<u64>,
}

impl HotKeys {
    /// Counts `key` `count` times.
    pub(crate) fn add(&mut self, key: &[u8], count: u64) {
        let key = &key[..key.len().min(super::MAX_KEY_BYTES)];
        let fingerprint = fingerprint(key);
        let known = self
            .fingerprints
            .iter()
            .zip(&self.keys)
            .position(|(&f, k)| f == fingerprint && k == key);
        if let Some(counted) = known.and_then(|i| self.counts.get_mut(i)) {
            *counted += count;
        } else if self.fingerprints.len() < CAPACITY {
            self.fingerprints.push(fingerprint);
            self.keys.push(key.to_vec());
            self.counts.push(count);
        } else if let Some((least, _)) = self.counts.iter().enumerate().min_by_key(|(_, c)| **c) {
            // The newcomer takes the smallest counter over, and its count as an upper bound of its own.
            self.fingerprints[least] = fingerprint;
            self.keys[least].clear();
            self.keys[least].extend_from_slice(key);
            self.counts[least] += count;
        }
    }

    pub(crate) fn merge(&mut self, other: &HotKeys) {
        for (key, &count) in other.keys.iter().zip(&other.counts) {
            self.add(key, count);
        }
    }

    /// The `n` most counted keys, most counted first.
    pub(crate) fn top(&self, n: usize) -> Vec<(Bytes, u64)> {
        let mut top: Vec<_> = self
            .keys
            .iter()
            .zip(&self.counts)
            .map(|(key, &count)| (Bytes::copy_from_slice(key), count))
            .collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        top.truncate(n);
        top
    }
}

fn fingerprint(key: &[u8]) -> u64 {
    let mut hasher = FastHasher::default();
    hasher.write(key);
    hasher.finish()
}

/// A multiply-rotate hash (as rustc's FxHash), for short keys that are not an attacker's choice of collisions
/// to worry about: a collision only costs a key comparison, and tenant names are the operator's.
#[derive(Default)]
pub(crate) struct FastHasher(u64);

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0; 8];
            word.copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(SEED);
        }
        for &b in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(SEED);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frequent_key_stays_on_top_among_many_rare_ones() {
        let mut hot = HotKeys::default();
        for i in 0..10_000u32 {
            hot.add(format!("rare:{i}").as_bytes(), 1);
            if i % 10 == 0 {
                hot.add(b"hot", 1);
            }
        }
        let top = hot.top(3);
        assert_eq!(&top[0].0[..], b"hot");
        assert!(top[0].1 >= 1000);
        let mut other = HotKeys::default();
        other.add(b"hot", 5);
        hot.merge(&other);
        assert!(hot.top(1)[0].1 >= 1005);
    }
}
