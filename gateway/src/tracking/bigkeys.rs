//! A tenant's big keys on one worker: the largest requests and replies seen since the last report.

use bytes::Bytes;

/// Big keys a tenant's report names per gateway and interval (the largest ones).
const CAPACITY: usize = 32;

/// Whether the size is the request's (a large value written) or the reply's (a large value read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    Request,
    Reply,
}

#[derive(Debug, Clone)]
pub(crate) struct BigKey {
    /// As the tenant sent it (`None`: the command has no key).
    pub key: Option<Bytes>,
    pub command: &'static str,
    pub direction: Direction,
    pub bytes: usize,
    /// A collection reply's elements.
    pub elements: Option<u64>,
    /// Unix time in milliseconds.
    pub at_ms: u64,
}

#[derive(Default)]
pub(crate) struct BigKeys {
    keys: Vec<BigKey>,
}

impl BigKeys {
    /// Notes `big`: one entry per key, command and direction (the largest, and its latest time), and only the
    /// largest entries.
    pub(crate) fn add(&mut self, big: BigKey) {
        let same = self.keys.iter().position(|k| {
            k.key == big.key && std::ptr::eq(k.command, big.command) && k.direction == big.direction
        });
        if let Some(known) = same.and_then(|i| self.keys.get_mut(i)) {
            known.bytes = known.bytes.max(big.bytes);
            known.elements = known.elements.max(big.elements);
            known.at_ms = known.at_ms.max(big.at_ms);
        } else if self.keys.len() < CAPACITY {
            self.keys.push(big);
        } else if let Some(smallest) = self.keys.iter_mut().min_by_key(|k| k.bytes)
            && smallest.bytes < big.bytes
        {
            *smallest = big;
        }
    }

    pub(crate) fn merge(&mut self, other: BigKeys) {
        for big in other.keys {
            self.add(big);
        }
    }

    /// Largest first.
    pub(crate) fn largest(&self) -> Vec<BigKey> {
        let mut keys = self.keys.clone();
        keys.sort_by_key(|k| std::cmp::Reverse(k.bytes));
        keys
    }
}
