//! Rate limits on what a peer sends.

use crate::Instant;

/// Micro-tokens per token: the bucket refills by `per_sec` of them every
/// microsecond, so the arithmetic stays in integers without drift.
const SCALE: u64 = 1_000_000;

/// A token bucket: refills at `per_sec` tokens a second and holds at most a
/// second's worth, so no burst can exceed `per_sec` and a steady sender at
/// or under the rate is never refused, however its traffic lines up with
/// the clock. (A counter reset every second would let twice the limit
/// through across a reset.)
///
/// ```
/// use lockstep_core::{Instant, TokenBucket};
/// let mut b = TokenBucket::full(10, Instant::ZERO);
/// assert!(b.take(10, Instant::ZERO));
/// assert!(!b.take(1, Instant::ZERO)); // empty: refused, nothing taken
/// assert!(b.take(1, Instant::from_millis(100))); // a tenth of a second refills one
/// ```
#[derive(Debug, Clone)]
pub struct TokenBucket {
    per_sec: u32,
    level: u64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket for `per_sec` tokens a second.
    pub fn full(per_sec: u32, now: Instant) -> Self {
        Self {
            per_sec,
            level: u64::from(per_sec) * SCALE,
            at: now,
        }
    }

    /// Takes `n` tokens at `now`; if the bucket holds fewer, takes none and
    /// returns `false`.
    pub fn take(&mut self, n: u32, now: Instant) -> bool {
        self.level = self.level_at(now);
        self.at = self.at.max(now);
        let cost = u64::from(n) * SCALE;
        if self.level < cost {
            return false;
        }
        self.level -= cost;
        true
    }

    /// Whether [`take`](Self::take) of `n` at `now` would succeed, taking
    /// nothing: work that costs tokens is weighed before it is done.
    ///
    /// ```
    /// use lockstep_core::{Instant, TokenBucket};
    /// let b = TokenBucket::full(10, Instant::ZERO);
    /// assert!(b.holds(10, Instant::ZERO));
    /// assert!(!b.holds(11, Instant::ZERO));
    /// ```
    pub fn holds(&self, n: u32, now: Instant) -> bool {
        self.level_at(now) >= u64::from(n) * SCALE
    }

    /// The level at `now`, refilled since the last take.
    fn level_at(&self, now: Instant) -> u64 {
        let cap = u64::from(self.per_sec) * SCALE;
        let elapsed = now.saturating_duration_since(self.at).as_micros();
        let refill = u64::try_from(elapsed)
            .unwrap_or(u64::MAX)
            .saturating_mul(u64::from(self.per_sec));
        self.level.saturating_add(refill).min(cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_capped_at_one_seconds_worth() {
        let mut b = TokenBucket::full(400, Instant::ZERO);
        let taken = (0..500).filter(|_| b.take(1, Instant::ZERO)).count();
        assert_eq!(taken, 400);
    }

    #[test]
    fn a_steady_sender_at_the_rate_is_never_refused() {
        let mut b = TokenBucket::full(30, Instant::ZERO);
        for k in 0..10_000u64 {
            assert!(b.take(1, Instant::from_micros(k * 33_334)), "tick {k}");
        }
    }

    #[test]
    fn twice_the_rate_is_refused_within_two_seconds() {
        let mut b = TokenBucket::full(100, Instant::ZERO);
        let refused = (0..400u64).position(|k| !b.take(1, Instant::from_micros(k * 5_000)));
        assert!(refused.is_some_and(|k| k <= 200), "{refused:?}");
    }

    #[test]
    fn time_going_backwards_refills_nothing() {
        let mut b = TokenBucket::full(1, Instant::from_millis(5_000));
        assert!(b.take(1, Instant::from_millis(5_000)));
        assert!(!b.take(1, Instant::ZERO));
        assert!(!b.take(1, Instant::from_millis(5_500)));
        assert!(b.take(1, Instant::from_millis(6_000)));
    }
}
