//! How many ticks of frames one datagram bundles, from the queue the round
//! trip shows: a link with room gets a datagram a tick; a link that queues
//! what it is sent gets fewer, larger datagrams and fewer copies, so it is
//! sent less, not more, when it falls behind.
//!
//! The queue is read from the round trip's trend: the least of the two
//! latest samples, against the least of the last half minute or so (the
//! link with nothing queued). Jitter moves single samples; only a queue
//! that stands raises the lesser of two. A queue is the link's answer to
//! what it is sent only while it builds (it grew at each of the last three
//! samples) or loses datagrams: a round trip that rose in one step and
//! stays there, losing nothing, is a longer route, and once it has stood
//! for [`HOLD`] on a link sending a datagram a tick, the floor moves up to
//! it. When the link's queue passes [`Pace::limit`] and is not draining (it
//! fell by less than half the limit since the last step up), the bundle
//! grows by a tick for each limit's worth of queue (at most once per
//! [`HOLD`], so the change can show); once the queue has stayed
//! under half the limit for the calm period, it shrinks by a tick. A step
//! down that the link cannot carry (the queue comes back within [`PROBE`])
//! doubles the calm period before the next, so a link at its limit is not
//! probed into its queue every few seconds. See `docs/protocol.md`,
//! "Thin links".

use crate::Instant;
use core::time::Duration;

/// Most ticks one datagram of frames bundles.
pub(crate) const MAX_BUNDLE: u32 = 4;
/// The least standing queue taken as the link being short, whatever the
/// tick rate.
const LEAST_LIMIT: Duration = Duration::from_millis(60);
/// Ticks of standing queue taken as the link being short.
const LIMIT_TICKS: u32 = 4;
/// The floor is the least round trip of this bucket and the one before.
const FLOOR_BUCKET: Duration = Duration::from_secs(15);
/// The least time between two steps: two samples at the bundled rate.
const HOLD: Duration = Duration::from_secs(2);
/// How long the queue stays low before the first step down.
const CALM: Duration = Duration::from_secs(10);
/// The longest wait before a step down, after steps that failed.
const MAX_CALM: Duration = Duration::from_secs(160);
/// Samples taken often at a link's start, before its floor is known (a
/// link too thin for a datagram a tick queues from its first seconds).
const FIRST_SAMPLES: u8 = 8;
/// A queue this soon after a step down shows the step was one too far.
const PROBE: Duration = Duration::from_secs(10);
/// Datagrams lost on the way out, while the queue stands past the limit,
/// that show it is the link's queue overflowing rather than a longer
/// route.
const OVERFLOW_LOSSES: i64 = 3;

/// The pace of one link's frames (see the [module](self)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pace {
    /// The tick period frames are sealed at.
    period: Duration,
    bundle: u32,
    /// Least round trip of the current bucket and of the one before.
    floor: [Option<Duration>; 2],
    bucket_since: Option<Instant>,
    /// The latest sample, and the one before.
    recent: [Option<Duration>; 2],
    /// When the bundle last grew, and the standing queue then.
    grew: Option<(Instant, Duration)>,
    /// When it last shrank.
    shrank: Option<Instant>,
    /// Since when every sample showed the queue low.
    calm_since: Option<Instant>,
    /// The wait before the next step down.
    calm: Duration,
    /// Samples taken, up to [`FIRST_SAMPLES`].
    samples: u8,
    /// The standing queue at the last three samples before this one.
    queues: [Duration; 3],
    /// Since when the queue has stood past the limit, and the datagrams
    /// lost on the way out since.
    over: Option<(Instant, i64)>,
}

impl Pace {
    /// A link with room, for frames sealed every `period`.
    pub(crate) fn new(period: Duration) -> Self {
        Self {
            period,
            bundle: 1,
            floor: [None; 2],
            bucket_since: None,
            recent: [None; 2],
            grew: None,
            shrank: None,
            calm_since: None,
            calm: CALM,
            samples: 0,
            queues: [Duration::ZERO; 3],
            over: None,
        }
    }

    /// Ticks of frames per datagram: 1 on a link with room.
    pub(crate) fn bundle(&self) -> u32 {
        self.bundle
    }

    /// The tick period.
    pub(crate) fn period(&self) -> Duration {
        self.period
    }

    /// The standing queue taken as the link being short.
    pub(crate) fn limit(&self) -> Duration {
        (self.period * LIMIT_TICKS).max(LEAST_LIMIT)
    }

    /// The standing queue the round trip shows: the lesser of the two
    /// latest samples over the floor. `None` until two samples came.
    pub(crate) fn queue(&self) -> Option<Duration> {
        let [Some(a), Some(b)] = self.recent else {
            return None;
        };
        Some(a.min(b).saturating_sub(self.floor()?))
    }

    /// The least round trip of this bucket and the one before.
    fn floor(&self) -> Option<Duration> {
        self.floor.iter().flatten().min().copied()
    }

    /// Whether the round trip is worth sampling more often than usual: the
    /// link is new, or bundled, or its latest sample was over the floor by
    /// half the limit.
    pub(crate) fn watching(&self) -> bool {
        let latest = self.recent[0].zip(self.floor());
        self.samples < FIRST_SAMPLES
            || self.bundle > 1
            || latest.is_some_and(|(r, f)| r.saturating_sub(f) * 2 > self.limit())
    }

    /// A round trip of `rtt` was measured at `now`, and `lost` datagrams
    /// on the way out since the one before, net of those the one before
    /// took as lost that were only late (negative when more of those
    /// came).
    pub(crate) fn sample(&mut self, now: Instant, rtt: Duration, lost: i64) {
        if self
            .bucket_since
            .is_none_or(|since| now.saturating_duration_since(since) >= FLOOR_BUCKET)
        {
            self.floor = [None, self.floor[0]];
            self.bucket_since = Some(now);
        }
        self.floor[0] = Some(self.floor[0].map_or(rtt, |f| f.min(rtt)));
        self.recent = [Some(rtt), self.recent[0]];
        self.samples = self.samples.saturating_add(1).min(FIRST_SAMPLES);
        let Some(queue) = self.queue() else {
            return;
        };
        let limit = self.limit();
        let [q1, q2, q3] = self.queues;
        self.queues = [queue, q1, q2];
        // Three rises in a row: a round trip that changed while a ping was
        // out shows one sample between the old and the new (two rises of
        // the lesser of two).
        let rise = limit / 8;
        let building = queue > q1 + rise && q1 > q2 + rise && q2 > q3 + rise;
        if queue > limit {
            self.calm_since = None;
            let over = self.over.get_or_insert((now, 0));
            let before = over.1;
            over.1 = over.1.saturating_add(lost);
            let since = over.0;
            // Counted twice: what one pong takes as lost, the next may
            // count as come.
            let overflowing = before.min(over.1) >= OVERFLOW_LOSSES;
            if !building && !overflowing {
                // A longer route, once it has stood a while on a link we
                // do not hold back: the floor moves up to it.
                if self.bundle == 1 && now.saturating_duration_since(since) >= HOLD {
                    // The lesser of the two latest samples: the queue's
                    // level, taken as the link with nothing queued.
                    self.floor = [self.recent.iter().flatten().min().copied(), None];
                    self.bucket_since = Some(now);
                    self.queues = [Duration::ZERO; 3];
                    self.over = None;
                }
                return;
            }
            let held = self.grew.is_none_or(|(at, q)| {
                now.saturating_duration_since(at) >= HOLD && queue + limit / 2 > q
            });
            let settled = self
                .shrank
                .is_none_or(|at| now.saturating_duration_since(at) >= HOLD);
            if self.bundle < MAX_BUNDLE && held && settled {
                if self
                    .shrank
                    .is_some_and(|at| now.saturating_duration_since(at) < PROBE)
                {
                    self.calm = (self.calm * 2).min(MAX_CALM);
                }
                // A tick more for each limit's worth of queue past the
                // first: a link flooded from its start drains at once.
                let over =
                    u32::try_from(queue.as_micros() / limit.as_micros().max(1)).unwrap_or(u32::MAX);
                self.bundle = self.bundle.saturating_add(over.max(1)).min(MAX_BUNDLE);
                self.grew = Some((now, queue));
            }
        } else if queue * 2 <= limit {
            self.over = None;
            let since = *self.calm_since.get_or_insert(now);
            if self.bundle > 1 && now.saturating_duration_since(since) >= self.calm {
                self.bundle -= 1;
                self.shrank = Some(now);
                self.grew = None;
                self.calm_since = Some(now);
            } else if self.bundle == 1
                && self
                    .shrank
                    .is_some_and(|at| now.saturating_duration_since(at) >= PROBE)
            {
                // Back to a datagram a tick, and it held: the next short
                // spell starts from the first calm period again.
                self.calm = CALM;
                self.shrank = None;
            }
        } else {
            self.over = None;
            self.calm_since = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const PERIOD: Duration = Duration::from_micros(33_333);

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    /// Feeds one sample a second from `from` (seconds) for `n` seconds,
    /// each from `rtt(second)`, nothing lost.
    fn feed(p: &mut Pace, from: u64, n: u64, rtt: impl Fn(u64) -> u64) {
        for s in from..from + n {
            p.sample(at(s * 1_000), MS * rtt(s) as u32, 0);
        }
    }

    /// Feeds one sample a second from `from` (seconds) of a round trip of
    /// `rtt` ms, each with the next of `lost`.
    fn feed_lost(p: &mut Pace, from: u64, rtt: u32, lost: &[i64]) {
        for (s, &l) in (from..).zip(lost) {
            p.sample(at(s * 1_000), MS * rtt, l);
        }
    }

    #[test]
    fn jitter_alone_never_bundles() {
        // Round trips anywhere from 200 to 300 ms, in a fixed pattern that
        // puts two high samples together now and then.
        let mut p = Pace::new(PERIOD);
        feed(&mut p, 0, 600, |s| 200 + (s * 37 % 101));
        assert_eq!(p.bundle(), 1);
    }

    #[test]
    fn a_standing_queue_bundles_and_a_calm_link_unbundles() {
        let mut p = Pace::new(PERIOD);
        feed(&mut p, 0, 20, |_| 250);
        assert_eq!(p.bundle(), 1);
        assert_eq!(p.queue(), Some(Duration::ZERO));
        // A queue builds, 50 ms more each second: a step once it passes
        // the limit, then one more only while it keeps growing.
        feed(&mut p, 20, 4, |s| 250 + (s - 19) * 50);
        assert_eq!(p.bundle(), 2);
        feed(&mut p, 24, 2, |s| 250 + (s - 19) * 50);
        assert_eq!(p.bundle(), 3);
        // It drains: no further step while it falls.
        feed(&mut p, 26, 5, |s| 550 - (s - 25) * 60);
        assert_eq!(p.bundle(), 3);
        // Calm: a step down after each calm period.
        feed(&mut p, 31, 10, |_| 250);
        assert_eq!(p.bundle(), 2);
        feed(&mut p, 41, 10, |_| 250);
        assert_eq!(p.bundle(), 1);
    }

    #[test]
    fn a_failed_step_down_doubles_the_wait_for_the_next() {
        let mut p = Pace::new(PERIOD);
        feed(&mut p, 0, 20, |_| 250);
        feed(&mut p, 20, 4, |s| 250 + (s - 19) * 50);
        assert_eq!(p.bundle(), 2);
        feed(&mut p, 24, 12, |_| 250);
        assert_eq!(p.bundle(), 1, "stepped down after 10 s calm");
        // The queue comes straight back: bundled again, and the next step
        // down waits 20 s.
        feed(&mut p, 36, 4, |s| 250 + (s - 35) * 50);
        assert_eq!(p.bundle(), 2);
        feed(&mut p, 40, 15, |_| 250);
        assert_eq!(p.bundle(), 2, "not yet");
        feed(&mut p, 55, 8, |_| 250);
        assert_eq!(p.bundle(), 1);
    }

    #[test]
    fn a_flood_takes_several_steps_at_once() {
        let mut p = Pace::new(PERIOD);
        feed(&mut p, 0, 20, |_| 250);
        // The queue builds 450 ms a sample: ten limits' worth by the
        // fourth.
        feed(&mut p, 20, 4, |s| 700 + (s - 20) * 450);
        assert_eq!(p.bundle(), 4);
    }

    #[test]
    fn a_longer_route_is_not_a_queue() {
        let mut p = Pace::new(PERIOD);
        feed(&mut p, 0, 20, |_| 40);
        // The round trip rises from 40 to 200 ms in one step and stays
        // (a ping out at the change comes back in between): nothing
        // bundles, and the floor moves up to the new route.
        feed(&mut p, 20, 1, |_| 120);
        feed(&mut p, 21, 10, |_| 200);
        assert_eq!(p.bundle(), 1);
        assert_eq!(p.queue(), Some(Duration::ZERO));
        // A queue that builds over the new route is still read as one.
        feed(&mut p, 31, 4, |s| 200 + (s - 30) * 60);
        assert_eq!(p.bundle(), 2);
    }

    #[test]
    fn datagrams_only_late_at_a_route_change_are_not_an_overflow() {
        let mut p = Pace::new(PERIOD);
        feed(&mut p, 0, 20, |_| 40);
        // The pong after the change counts what was on the longer way as
        // lost; the next counts it as come.
        feed_lost(&mut p, 20, 200, &[0, 6, -6, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(p.bundle(), 1);
        assert_eq!(p.queue(), Some(Duration::ZERO));
    }

    #[test]
    fn a_queue_that_overflows_bundles_even_standing_still() {
        let mut p = Pace::new(PERIOD);
        feed(&mut p, 0, 20, |_| 40);
        // The same step, but the link drops what it is sent: a full queue.
        feed_lost(&mut p, 20, 200, &[2; 4]);
        assert_eq!(p.bundle(), 2);
    }

    #[test]
    fn the_bundle_stays_within_its_bounds() {
        let mut p = Pace::new(PERIOD);
        feed(&mut p, 0, 2, |_| 100);
        feed(&mut p, 2, 60, |s| 100 + s * 200);
        assert_eq!(p.bundle(), MAX_BUNDLE);
        feed(&mut p, 62, 1_000, |_| 100);
        assert_eq!(p.bundle(), 1);
    }
}
