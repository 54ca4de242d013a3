//! The round-trip estimate a link keeps from its pings.

use crate::Instant;
use core::time::Duration;

/// Round-trip time from ping stamps, smoothed with a gain of 1/8 (TCP's
/// SRTT), and its jitter, the mean deviation with a gain of 1/4 (TCP's
/// RTTVAR). Which pongs count is the [`LinkMeter`](super::LinkMeter)'s
/// call: only one for a ping still outstanding, once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Rtt {
    smoothed: Option<Duration>,
    deviation: Duration,
    /// The latest sample, and how many came (wrapping).
    latest: Option<Duration>,
    samples: u32,
}

impl Rtt {
    /// The stamp a ping carries at `now`: milliseconds, wrapping.
    pub(crate) fn stamp(now: Instant) -> u32 {
        now.as_millis() as u32
    }

    /// Takes the pong, at `now`, for a ping stamped `stamp` that the other
    /// side held `held_ms` before it answered. A sample of a minute or more
    /// (or one that wrapped) is nonsense, and ignored.
    pub(crate) fn pong(&mut self, now: Instant, stamp: u32, held_ms: u32) {
        let ms = Self::stamp(now).wrapping_sub(stamp).wrapping_sub(held_ms);
        if ms < 60_000 {
            let sample = Duration::from_millis(u64::from(ms));
            self.deviation = match self.smoothed {
                None => sample / 2,
                Some(old) => (self.deviation * 3 + old.abs_diff(sample)) / 4,
            };
            self.smoothed = Some(self.smoothed.map_or(sample, |old| (old * 7 + sample) / 8));
            self.latest = Some(sample);
            self.samples = self.samples.wrapping_add(1);
        }
    }

    /// The estimate, once measured.
    pub(crate) fn get(self) -> Option<Duration> {
        self.smoothed
    }

    /// The latest sample, unsmoothed, and how many there were (wrapping):
    /// a new count is a new sample.
    pub(crate) fn latest(self) -> Option<(Duration, u32)> {
        self.latest.map(|l| (l, self.samples))
    }

    /// Its jitter (mean deviation), once measured.
    pub(crate) fn jitter(self) -> Option<Duration> {
        self.smoothed.map(|_| self.deviation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rtt_smooths_and_ignores_nonsense() {
        let mut r = Rtt::default();
        let sent = Instant::from_millis(1_000);
        r.pong(Instant::from_millis(1_080), Rtt::stamp(sent), 0);
        assert_eq!(r.get(), Some(Duration::from_millis(80)));
        let again = Instant::from_millis(2_000);
        r.pong(Instant::from_millis(2_140), Rtt::stamp(again), 40);
        assert_eq!(r.get(), Some(Duration::from_micros(82_500)));
        // A pong from the future (it wraps), or held longer than it took.
        r.pong(
            Instant::from_millis(3_000),
            Rtt::stamp(Instant::from_millis(5_000)),
            0,
        );
        r.pong(Instant::from_millis(3_000), Rtt::stamp(again), 2_000);
        assert_eq!(r.get(), Some(Duration::from_micros(82_500)));
        assert_eq!(r.latest(), Some((Duration::from_millis(100), 2)));
    }

    #[test]
    fn jitter_is_the_mean_deviation_of_the_round_trip() {
        let mut r = Rtt::default();
        assert_eq!(r.jitter(), None);
        // Round trips of 100 and 60 ms in turn.
        for k in 0..40u64 {
            let at = Instant::from_millis(1_000 * k);
            let took = if k % 2 == 0 { 100 } else { 60 };
            r.pong(at + Duration::from_millis(took), Rtt::stamp(at), 0);
        }
        let rtt = r.get().expect("measured").as_millis();
        let jitter = r.jitter().expect("measured").as_millis();
        assert!((75..=85).contains(&rtt), "{rtt}");
        assert!((15..=25).contains(&jitter), "{jitter}");
    }
}
