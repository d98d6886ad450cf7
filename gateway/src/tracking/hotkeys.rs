//! A tenant's most frequently sampled keys on one worker: a space-saving summary (Metwally et al.) of a few
//! dozen counters, which finds every key sampled more often than 1/CAPACITY of the time, with a count that
//! overestimates by at most the smallest counter.

use bytes::Bytes;

/// Counters a summary keeps: well over the keys a report names, so that the reported ones are counted right.
const CAPACITY: usize = 64;

#[derive(Default)]
pub(crate) struct HotKeys {
    counters: Vec<(Bytes, u64)>,
}

impl HotKeys {
    /// Counts `key` `count` times.
    pub(crate) fn add(&mut self, key: &[u8], count: u64) {
        let key = &key[..key.len().min(super::MAX_KEY_BYTES)];
        if let Some(counter) = self.counters.iter_mut().find(|(k, _)| k[..] == *key) {
            counter.1 += count;
        } else if self.counters.len() < CAPACITY {
            self.counters.push((super::kept_key(key), count));
        } else if let Some(least) = self.counters.iter_mut().min_by_key(|(_, c)| *c) {
            // The newcomer takes the smallest counter over, and its count as an upper bound of its own.
            *least = (super::kept_key(key), least.1 + count);
        }
    }

    pub(crate) fn merge(&mut self, other: &HotKeys) {
        for (key, count) in &other.counters {
            self.add(key, *count);
        }
    }

    /// The `n` most counted keys, most counted first.
    pub(crate) fn top(&self, n: usize) -> Vec<(Bytes, u64)> {
        let mut top = self.counters.clone();
        top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        top.truncate(n);
        top
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
