//! Exponential backoff between attempts (reconnects, retries): each wait twice the one before, up to a maximum,
//! and back to the first after a success.

use std::time::Duration;

pub(crate) struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub(crate) const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            next: first,
        }
    }

    /// How long to wait before the next attempt; the wait after it doubles.
    pub(crate) fn next(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(self.max);
        wait
    }

    /// An attempt succeeded: the next failure waits the first wait again.
    pub(crate) fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_maximum_and_starts_over_after_a_success() {
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_millis(300));
        let waits: Vec<u128> = (0..5).map(|_| backoff.next().as_millis()).collect();
        assert_eq!(waits, [50, 100, 200, 300, 300]);
        backoff.reset();
        assert_eq!(backoff.next(), Duration::from_millis(50));
    }
}
