//! An input delay that follows the network.
//!
//! Every tick of input delay is a tick the player feels; every tick too few
//! is a stall. A [`DelayTracker`] watches how early each frame arrives
//! before the game runs it, and asks for the smallest delay that keeps
//! stalls under a target rate: it asks for more as soon as frames come
//! late too often, and for less only after a long run of frames that all
//! arrived with a tick to spare.

use crate::error::ConfigError;
use crate::{Instant, Tick};
use core::time::Duration;
use std::collections::VecDeque;

/// Spare time is counted in whole ticks up to this many.
const SPARE_BUCKETS: usize = 8;
/// Windows of frames the stall rate is judged over for rising. Over one
/// window of 300 frames at a target of 0.5%, two stalls raised the delay:
/// a rate well under the target (0.15%) gives two in 300 frames one window
/// in thirteen, and each such rise cost ticks of latency until the next
/// fall. Four in 600 is one window in eighty; a network that really got
/// worse stalls that often within a second or so.
const RISE_WINDOWS: usize = 2;
/// The most ticks the delay falls at once: as many as the spare time is
/// counted in. A window of frames that all came with `k` ticks to spare is
/// the same evidence for any `k`; capped at 3, a delay sent up by a burst
/// of loss at the start of a match took half a minute to come back down.
const MAX_FALL: usize = SPARE_BUCKETS - 1;

/// How an adaptive input delay moves (see [`DelayTracker`]).
///
/// ```
/// use lockstep_core::AdaptiveDelay;
/// let adaptive = AdaptiveDelay { min: 2, max: 10, ..AdaptiveDelay::default() };
/// assert_eq!(adaptive.target_stall_rate, 0.005);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveDelay {
    /// The smallest delay, in ticks (at least 1).
    pub min: u32,
    /// The largest delay, in ticks (at most 1024).
    pub max: u32,
    /// The share of frames that may come late (the game waits on them)
    /// before the delay rises: 0.005 is one in 200.
    pub target_stall_rate: f64,
    /// Frames that must all have arrived `k` ticks or more before they ran
    /// (but for the target's share) before the delay falls by `k` (up to
    /// 7); the stall rate that raises it is judged over twice as many.
    pub window: u32,
}

// `target_stall_rate` is never NaN (`validate` refuses it), so equality
// is an equivalence: configurations holding this compare as `Eq`.
impl Eq for AdaptiveDelay {}

impl Default for AdaptiveDelay {
    fn default() -> Self {
        Self {
            min: 1,
            max: 16,
            target_stall_rate: 0.005,
            window: 300,
        }
    }
}

impl AdaptiveDelay {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let bad = ConfigError::unless;
        bad(self.min == 0, "adaptive delay: min must be at least 1")?;
        bad(
            self.max < self.min || self.max > crate::wire::MAX_DELAY,
            "adaptive delay: max must be from min to 1024",
        )?;
        bad(
            !(0.0..1.0).contains(&self.target_stall_rate),
            "adaptive delay: target_stall_rate must be from 0 to 1",
        )?;
        bad(
            !(16..=100_000).contains(&self.window),
            "adaptive delay: window must be 16 to 100,000 frames",
        )
    }

    /// [`validate`](Self::validate), and `delay`, the one to start from,
    /// within `min..=max`.
    pub(crate) fn validate_from(&self, delay: u32) -> Result<(), ConfigError> {
        self.validate()?;
        ConfigError::unless(
            delay < self.min || delay > self.max,
            "delay must be within the adaptive delay's min..=max",
        )
    }

    /// `delay` kept within `min..=max`.
    pub fn clamp(&self, delay: u32) -> u32 {
        delay.clamp(self.min, self.max)
    }
}

/// Watches this player's inputs go out and their frames come back, and
/// says which input delay would keep stalls at the target rate.
///
/// Feed it [`committed`](Self::committed) when the game commits an input
/// and [`arrived`](Self::arrived) when a frame comes in (in any order);
/// read [`wanted`](Self::wanted). An input committed at `c` under delay
/// `d` is due to run at `c + d` ticks: a game running ticks on a steady
/// clock runs its frame then. The frame is *late* when it arrives after
/// that, and it *needs* the delay that would have covered the time from
/// commit to arrival. Late frames that come together after a gap, each
/// less late than the one before, are one stall.
///
/// - Rising: once the last `2 x window` frames hold more stalls than
///   `target_stall_rate` allows, the tracker wants the least delay that
///   would have left no more than that many (the `n + 1`-th largest need,
///   `n` the stalls allowed).
/// - Falling: every `window` frames committed under the delay in force, it
///   counts the stalls above and those frames that arrived less than `k`
///   ticks before they were due (they would have come late with `k` ticks less delay),
///   and wants the delay less the largest `k` (up to 7) whose count stays
///   within the target.
///
/// How the game runs its frames does not matter: only when inputs were
/// committed and when their frames came. The sessions run one for the
/// local player; the delay they agree on is the largest any player wants,
/// so that nobody waits on anyone.
///
/// ```
/// use lockstep_core::{AdaptiveDelay, DelayTracker, Instant, Tick};
/// use std::time::Duration;
///
/// let mut t = DelayTracker::new(AdaptiveDelay::default(), 30, 6);
/// let period = Duration::from_micros(33_333);
/// // Each frame comes back 80 ms after its input went out: 6 ticks
/// // (200 ms) is more than it needs, and after a window it falls to the
/// // 3 ticks (100 ms) that cover it.
/// let mut now = Instant::ZERO;
/// for k in 0..400u32 {
///     t.committed(Tick::new(k), now);
///     t.arrived(Tick::new(k), now + Duration::from_millis(80));
///     now += period;
/// }
/// assert_eq!(t.wanted(), 3);
/// ```
#[derive(Debug, Clone)]
pub struct DelayTracker {
    config: AdaptiveDelay,
    period: Duration,
    /// The delay in force.
    delay: u32,
    wanted: u32,
    /// Inputs whose frame has not come yet: tick, when committed, under
    /// which delay (bounded by `window`).
    commits: VecDeque<(Tick, Instant, u32)>,
    /// For the last `window` frames judged: the delay each stall (a run of
    /// late frames, at its first) needed, `None` for the rest.
    recent: VecDeque<Option<u32>>,
    /// Stalls among them.
    late: u32,
    /// The latest frame, if it was late, and by how many microseconds.
    last_late: Option<(Tick, u128)>,
    /// Frames committed under the delay in force, since it changed or
    /// was last judged for falling.
    spare_run: u32,
    /// Those frames, by whole ticks they arrived before they were due.
    spare: [u32; SPARE_BUCKETS],
    /// Tick periods frames arrived before they were due, smoothed.
    slack: Option<f64>,
}

impl DelayTracker {
    /// A tracker at `tick_rate` ticks per second, with `delay` in force.
    pub fn new(config: AdaptiveDelay, tick_rate: u32, delay: u32) -> Self {
        Self {
            period: Duration::from_secs(1) / tick_rate.max(1),
            wanted: config.clamp(delay),
            delay,
            commits: VecDeque::new(),
            recent: VecDeque::new(),
            late: 0,
            last_late: None,
            spare_run: 0,
            spare: [0; SPARE_BUCKETS],
            slack: None,
            config,
        }
    }

    /// The delay in force changed (to one agreed with the other players):
    /// the count towards falling starts over.
    pub fn set_delay(&mut self, delay: u32) {
        if delay != self.delay {
            self.delay = delay;
            self.spare_run = 0;
            self.spare = [0; SPARE_BUCKETS];
        }
    }

    /// The delay in force.
    pub fn delay(&self) -> u32 {
        self.delay
    }

    /// The delay this player wants.
    pub fn wanted(&self) -> u32 {
        self.wanted
    }

    /// How many tick periods before they were due frames arrived,
    /// smoothed with a gain of 1/8 (negative: they come late). The input
    /// slack a HUD or a log shows.
    pub fn slack(&self) -> Option<f64> {
        self.slack
    }

    /// Stalls (runs of late frames) per frame, over the last `window`
    /// frames judged.
    pub fn late_rate(&self) -> f64 {
        if self.recent.is_empty() {
            0.0
        } else {
            f64::from(self.late) / self.recent.len() as f64
        }
    }

    /// The configuration.
    pub fn config(&self) -> &AdaptiveDelay {
        &self.config
    }

    /// The game committed its input for `tick` at `now`, under the delay
    /// in force.
    pub fn committed(&mut self, tick: Tick, now: Instant) {
        // Stamping started over lower (a resync, a fresh start): what was
        // committed before will not run as stamped.
        if self.commits.back().is_some_and(|(t, _, _)| *t >= tick) {
            self.commits.clear();
        }
        if self.commits.len() >= self.config.window as usize {
            self.commits.pop_front();
        }
        self.commits.push_back((tick, now, self.delay));
    }

    /// The frame for `tick` arrived at `now`; true if it came late.
    pub fn arrived(&mut self, tick: Tick, now: Instant) -> bool {
        // Commits come in tick order: a binary search, every frame.
        let Ok(i) = self.commits.binary_search_by_key(&tick, |(t, _, _)| *t) else {
            return false;
        };
        let (_, at, delay) = self.commits[i];
        // Frames come in order but for loss: the inputs of earlier ticks
        // are answered, or never will be.
        self.commits.drain(..=i);
        let period = self.period.as_micros().max(1);
        let took = (now - at).as_micros();
        let due = u128::from(delay) * period;
        let late = took > due;
        let early = (due as f64 - took as f64) / period as f64;
        self.slack = Some(self.slack.map_or(early, |s| s + (early - s) / 8.0));
        // Late frames that came together after a gap, each less late than
        // the one before, are one stall (the picture stopped once), which
        // needs the most any of them needed. A frame as late as the one
        // before or later stops the picture again.
        let needed = u32::try_from(took.div_ceil(period)).unwrap_or(u32::MAX);
        let lateness = took.saturating_sub(due);
        let goes_on = late
            && self
                .last_late
                .is_some_and(|(t, l)| t.saturating_add(1) == tick && lateness < l);
        self.last_late = late.then_some((tick, lateness));
        if self.recent.len() >= RISE_WINDOWS * self.config.window as usize
            && self.recent.pop_front().is_some_and(|s| s.is_some())
        {
            self.late -= 1;
        }
        if goes_on {
            self.recent.push_back(None);
            if let Some(need) = self.recent.iter_mut().rev().find_map(Option::as_mut) {
                *need = (*need).max(needed);
            }
        } else {
            self.recent.push_back(late.then_some(needed));
            self.late += u32::from(late);
        }
        if late {
            let judged = RISE_WINDOWS as u32 * self.config.window;
            let allowed = self.config.target_stall_rate * f64::from(judged);
            // Past the target: the least delay that would have left no
            // more stalls in the window than the target allows.
            if f64::from(self.late) > allowed {
                let mut needs: Vec<u32> = self.recent.iter().flatten().copied().collect();
                needs.sort_unstable_by(|a, b| b.cmp(a));
                let keep = allowed as usize;
                let up = self
                    .config
                    .clamp(needs.get(keep).or(needs.last()).copied().unwrap_or(needed));
                if up > self.wanted {
                    self.wanted = up;
                    // Judged afresh at the new delay.
                    self.recent.clear();
                    self.late = 0;
                }
            }
            return true;
        }
        if delay != self.delay {
            return false;
        }
        // Falling: over a window of frames, how many arrived less than 1,
        // 2, ... ticks before they were due. Those short of `k` would have
        // come late with `k` ticks less delay: with the stalls judged for
        // rising, fall by the largest `k` for which they stay within the
        // target (at most `MAX_FALL` at once).
        let spare = (due - took) / period;
        let bucket = usize::try_from(spare)
            .unwrap_or(usize::MAX)
            .min(SPARE_BUCKETS - 1);
        self.spare[bucket] += 1;
        self.spare_run += 1;
        if self.spare_run >= self.config.window {
            let allowed = self.config.target_stall_rate * f64::from(self.config.window);
            let mut tight = self.late;
            let mut fall = 0;
            for k in 0..MAX_FALL {
                tight += self.spare[k];
                if f64::from(tight) > allowed {
                    break;
                }
                fall = k as u32 + 1;
            }
            let enough = self.config.clamp(self.delay.saturating_sub(fall));
            self.wanted = self.wanted.min(enough);
            self.spare_run = 0;
            self.spare = [0; SPARE_BUCKETS];
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_micros(33_333);

    /// Commits tick after tick, each frame back after `took`.
    fn feed(t: &mut DelayTracker, from: u32, n: u32, took: impl Fn(u32) -> Duration) {
        for k in from..from + n {
            let at = Instant::ZERO + TICK * k;
            t.committed(Tick::new(k), at);
            t.arrived(Tick::new(k), at + took(k));
        }
    }

    #[test]
    fn one_late_frame_in_a_window_is_within_the_target() {
        let mut t = DelayTracker::new(AdaptiveDelay::default(), 30, 3);
        feed(&mut t, 0, 200, |k| if k == 50 { TICK * 5 } else { TICK });
        assert_eq!(t.wanted(), 3);
        assert!(t.late_rate() > 0.0);
    }

    #[test]
    fn a_fourth_stall_asks_for_the_delay_that_leaves_three() {
        let mut t = DelayTracker::new(AdaptiveDelay::default(), 30, 3);
        let stalls = |k| match k {
            50 => TICK * 5,
            90 => TICK * 7 + Duration::from_millis(1),
            130 => TICK * 6,
            170 => TICK * 9 + Duration::from_millis(1),
            _ => TICK,
        };
        // Three stalls in 600 frames are within 0.5%.
        feed(&mut t, 0, 150, stalls);
        assert_eq!(t.wanted(), 3);
        // A fourth is not: five ticks would have left three (the fourth
        // largest need is the first stall's).
        feed(&mut t, 150, 50, stalls);
        assert_eq!(t.wanted(), 5);
    }

    #[test]
    fn frames_that_come_together_after_a_gap_are_one_stall() {
        let mut t = DelayTracker::new(AdaptiveDelay::default(), 30, 3);
        // Frames 100 to 109 all arrive together, 9 ticks after 100 went
        // out: the picture stopped once.
        feed(&mut t, 0, 200, |k| {
            if (100..110).contains(&k) {
                TICK * (109 - k) + TICK * 9 / 10 * 10
            } else {
                TICK
            }
        });
        assert_eq!(t.wanted(), 3);
        assert!(t.late_rate() < 0.01);
    }

    #[test]
    fn a_network_slower_than_the_delay_raises_it() {
        // Every frame back 4.5 ticks after its input: late by as much each
        // time, the picture stops at every one.
        let mut t = DelayTracker::new(AdaptiveDelay::default(), 30, 3);
        feed(&mut t, 0, 20, |_| TICK * 9 / 2);
        assert_eq!(t.wanted(), 5);
    }

    #[test]
    fn the_delay_falls_only_with_ticks_to_spare_for_nearly_every_frame() {
        let config = AdaptiveDelay {
            window: 100,
            ..AdaptiveDelay::default()
        };
        // Every frame back in 1.5 ticks, but one in fifty takes 4.5: at
        // delay 6 the tight ones would come late at 4 or less.
        let mut t = DelayTracker::new(config.clone(), 30, 6);
        feed(&mut t, 0, 100, |k| {
            if k % 50 == 0 {
                TICK * 9 / 2
            } else {
                TICK * 3 / 2
            }
        });
        assert_eq!(t.wanted(), 5);
        // Without them it falls at once to what covers 1.5 ticks: with 4.5
        // ticks to spare, by 4.
        let mut t = DelayTracker::new(config.clone(), 30, 6);
        feed(&mut t, 0, 100, |_| TICK * 3 / 2);
        assert_eq!(t.wanted(), 2);
        // From 12, by at most 7 at once, then the rest.
        let mut t = DelayTracker::new(config, 30, 12);
        feed(&mut t, 0, 100, |_| TICK * 3 / 2);
        assert_eq!(t.wanted(), 5);
        t.set_delay(5);
        feed(&mut t, 100, 100, |_| TICK * 3 / 2);
        assert_eq!(t.wanted(), 2, "2.5 ticks spare at 5: 2 covers 1.5");
    }

    #[test]
    fn bounds_hold_and_memory_is_bounded() {
        let config = AdaptiveDelay {
            min: 2,
            max: 5,
            window: 16,
            ..AdaptiveDelay::default()
        };
        let mut t = DelayTracker::new(config, 30, 2);
        // Inputs whose frames never come: kept at most a window of them.
        for k in 0..10_000 {
            t.committed(Tick::new(k), Instant::ZERO + TICK * k);
        }
        assert!(t.commits.len() <= 16);
        feed(&mut t, 20_000, 40, |_| TICK * 30);
        assert_eq!(t.wanted(), 5);
        t.set_delay(5);
        feed(&mut t, 30_000, 200, |_| Duration::ZERO);
        assert_eq!(t.wanted(), 2);
    }

    #[test]
    fn bad_settings_are_refused() {
        let bad = |a: AdaptiveDelay| a.validate().is_err();
        assert!(bad(AdaptiveDelay {
            min: 0,
            ..AdaptiveDelay::default()
        }));
        assert!(bad(AdaptiveDelay {
            min: 5,
            max: 4,
            ..AdaptiveDelay::default()
        }));
        assert!(bad(AdaptiveDelay {
            max: 2000,
            ..AdaptiveDelay::default()
        }));
        assert!(bad(AdaptiveDelay {
            target_stall_rate: f64::NAN,
            ..AdaptiveDelay::default()
        }));
        assert!(bad(AdaptiveDelay {
            window: 1,
            ..AdaptiveDelay::default()
        }));
        assert!(!bad(AdaptiveDelay::default()));
    }
}
