//! Which keys a `"keys": "hot"` near cache admits: a space-saving summary (Metwally et al., as
//! `tracking::hotkeys`) of the tenant's missed reads on one worker, with each counter's error kept, so that a key
//! is admitted on reads it surely had, never on the count it took over from the key it replaced. Counts are halved
//! now and then, so that a key that was hot once does not stay admitted for ever.

use bytes::Bytes;

/// Counters kept.
const CAPACITY: usize = 64;
/// Reads (surely counted) from which a key is hot.
pub(super) const HOT_READS: u32 = 4;
/// Reads counted between two halvings.
const HALF_LIFE: u32 = 4096;

#[derive(Default)]
pub(super) struct HotFilter {
    keys: Vec<Bytes>,
    /// Each counter's count, and the part of it that it took over (an upper bound of its overcount).
    counts: Vec<(u32, u32)>,
    since_halving: u32,
}

impl HotFilter {
    /// Counts a read of `key`; whether the key is hot now.
    pub(super) fn admit(&mut self, key: &[u8]) -> bool {
        self.since_halving += 1;
        if self.since_halving == HALF_LIFE {
            self.since_halving = 0;
            for (count, error) in &mut self.counts {
                *count /= 2;
                *error /= 2;
            }
        }
        if let Some(i) = self.keys.iter().position(|k| k[..] == *key)
            && let Some((count, error)) = self.counts.get_mut(i)
        {
            *count += 1;
            return *count - *error >= HOT_READS;
        }
        if self.keys.len() < CAPACITY {
            self.keys.push(Bytes::copy_from_slice(key));
            self.counts.push((1, 0));
            return HOT_READS <= 1;
        }
        let least = (0..self.counts.len()).min_by_key(|&i| self.counts[i].0);
        if let Some(i) = least {
            let taken = self.counts[i].0;
            self.keys[i] = Bytes::copy_from_slice(key);
            self.counts[i] = (taken + 1, taken);
        }
        HOT_READS <= 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_read_again_and_again_is_hot_and_rare_ones_are_not() {
        let mut filter = HotFilter::default();
        let mut hot = false;
        for i in 0..10_000u32 {
            assert!(!filter.admit(format!("rare:{i}").as_bytes()));
            if i % 10 == 0 {
                hot = filter.admit(b"hot");
            }
        }
        assert!(hot);
        let mut fresh = HotFilter::default();
        assert!(!fresh.admit(b"k") && !fresh.admit(b"k") && !fresh.admit(b"k"));
        assert!(fresh.admit(b"k"));
    }
}
