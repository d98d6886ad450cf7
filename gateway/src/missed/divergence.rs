//! The estimate of how far each double-write secondary is from its primary: the share of sampled keys whose
//! copies differed (see `repair::sample`), per tenant and secondary resource, over a sliding window of the last
//! [`WINDOW_SAMPLES`] samples no older than [`WINDOW_AGE`]. Shared by the sampler that fills it and the admin
//! port and the tracking report that read it.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most samples an estimate counts: about ±1.3 points at 2% (one standard deviation, sqrt(p(1-p)/n)).
pub(crate) const WINDOW_SAMPLES: usize = 1000;

/// Samples older than this leave the window even when fewer were taken since (a secondary that stopped
/// answering is not reported as it was long ago).
pub(crate) const WINDOW_AGE: Duration = Duration::from_secs(600);

/// The last samples of one tenant on one secondary: when each was taken (in seconds since the book's epoch) and
/// whether its copies differed, in 4 bytes a sample (`seconds << 1 | differed`), so that a window takes 4 KiB.
#[derive(Default)]
pub(crate) struct Window {
    samples: VecDeque<u32>,
    differing: usize,
    /// Every sample ever taken.
    total: u64,
}

impl Window {
    /// Adds a sample taken at second `at`, the oldest leaving past [`WINDOW_SAMPLES`].
    pub(crate) fn push(&mut self, at: u32, differs: bool) {
        self.samples
            .push_back((at.min(u32::MAX >> 1) << 1) | u32::from(differs));
        self.differing += usize::from(differs);
        self.total += 1;
        while self.samples.len() > WINDOW_SAMPLES {
            self.pop();
        }
    }

    /// Lets the samples older than [`WINDOW_AGE`] before second `now` go.
    pub(crate) fn expire(&mut self, now: u32) {
        let age = WINDOW_AGE.as_secs() as u32;
        while self
            .samples
            .front()
            .is_some_and(|sample| now.saturating_sub(sample >> 1) > age)
        {
            self.pop();
        }
    }

    fn pop(&mut self) {
        if let Some(sample) = self.samples.pop_front() {
            self.differing -= (sample & 1) as usize;
        }
    }

    /// Samples in the window, and those of them that differed.
    pub(crate) fn counts(&self) -> (usize, usize) {
        (self.samples.len(), self.differing)
    }

    /// The estimated share of differing keys; none without a sample.
    pub(crate) fn ratio(&self) -> Option<f64> {
        let (samples, differing) = self.counts();
        (samples > 0).then(|| differing as f64 / samples as f64)
    }
}

/// One tenant's estimate on one secondary, for `/metrics` and the tracking report.
pub(crate) struct DivergenceFigures {
    pub tenant: String,
    pub resource: String,
    /// Samples in the window, and those that differed.
    pub samples: usize,
    pub differing: usize,
    pub ratio: Option<f64>,
    /// Every sample taken since the gateway started.
    pub sampled: u64,
}

/// Every tenant's and secondary's window, by tenant and resource.
pub(crate) struct Divergence {
    book: Mutex<BTreeMap<(String, String), Window>>,
    /// What the windows' seconds count from.
    epoch: Instant,
}

impl Default for Divergence {
    fn default() -> Divergence {
        Divergence {
            book: Mutex::default(),
            epoch: Instant::now(),
        }
    }
}

impl Divergence {
    /// Seconds since the epoch.
    fn now(&self) -> u32 {
        u32::try_from(self.epoch.elapsed().as_secs()).unwrap_or(u32::MAX)
    }

    fn book(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), Window>> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes one sample of `tenant`'s keys on the secondary `resource`.
    pub(crate) fn note(&self, tenant: &str, resource: &str, differs: bool) {
        self.book()
            .entry((tenant.to_string(), resource.to_string()))
            .or_default()
            .push(self.now(), differs);
    }

    /// Forgets the pairs the routes no longer double-write, and the samples past [`WINDOW_AGE`].
    pub(crate) fn retain(&self, sampled: &HashSet<(String, String)>) {
        let now = self.now();
        self.book().retain(|pair, window| {
            window.expire(now);
            sampled.contains(pair)
        });
    }

    /// Every pair's figures, in tenant and resource order.
    pub(crate) fn figures(&self) -> Vec<DivergenceFigures> {
        self.book()
            .iter()
            .map(|((tenant, resource), window)| {
                let (samples, differing) = window.counts();
                DivergenceFigures {
                    tenant: tenant.clone(),
                    resource: resource.clone(),
                    samples,
                    differing,
                    ratio: window.ratio(),
                    sampled: window.total,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_keeps_the_last_samples_and_their_differing_share() {
        let mut window = Window::default();
        assert_eq!(window.ratio(), None);
        let start = 7;
        for i in 0..WINDOW_SAMPLES {
            window.push(start, i % 4 == 0);
        }
        assert_eq!(window.counts(), (WINDOW_SAMPLES, WINDOW_SAMPLES / 4));
        assert_eq!(window.ratio(), Some(0.25));
        // Equal samples push the differing ones out, one for one.
        for _ in 0..WINDOW_SAMPLES / 2 {
            window.push(start, false);
        }
        assert_eq!(window.counts(), (WINDOW_SAMPLES, WINDOW_SAMPLES / 8));
        for _ in 0..WINDOW_SAMPLES / 2 {
            window.push(start, false);
        }
        assert_eq!(window.ratio(), Some(0.0));
        assert_eq!(window.total, 2 * WINDOW_SAMPLES as u64);
    }

    #[test]
    fn samples_past_the_age_leave_the_window() {
        let mut window = Window::default();
        let (start, age) = (7, WINDOW_AGE.as_secs() as u32);
        window.push(start, true);
        window.push(start + age, false);
        window.expire(start + age);
        assert_eq!(window.counts(), (2, 1));
        window.expire(start + age + 1);
        assert_eq!(window.counts(), (1, 0));
        window.expire(start + 3 * age);
        assert_eq!((window.counts(), window.ratio()), ((0, 0), None));
        assert_eq!(window.total, 2, "the count of every sample stays");
    }

    #[test]
    fn pairs_no_longer_routed_are_forgotten() {
        let divergence = Divergence::default();
        divergence.note("a", "r1", true);
        divergence.note("a", "r2", false);
        let kept: HashSet<(String, String)> = [("a".to_string(), "r2".to_string())].into();
        divergence.retain(&kept);
        let figures = divergence.figures();
        assert_eq!(figures.len(), 1);
        assert_eq!(
            (figures[0].resource.as_str(), figures[0].ratio),
            ("r2", Some(0.0))
        );
    }
}
