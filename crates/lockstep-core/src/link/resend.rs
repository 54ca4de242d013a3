//! Which of a numbered run of items (a client's frames, a seat's inputs)
//! the next datagram carries, so that what a link sends stays flat in its
//! round trip.
//!
//! Each item goes a few times, over the datagrams that follow it (as many
//! copies as the loss measured on the link and the cost of a resend call
//! for, see [`Redundancy::for_link`]), and then again only if the other end
//! has not acknowledged it a round trip after its last copy. Nothing slides out of
//! a window: an item stays until it is acknowledged, so any loss below
//! 100% delivers everything in the end. See `docs/protocol.md`,
//! "Repetition and resends".

use crate::{Instant, Tick};
use core::time::Duration;
use std::collections::VecDeque;

/// Most items tracked past the acknowledged base: items beyond wait (a
/// client that far behind is sent what it lacks first).
const TRACKED: u32 = 2048;
/// Most copies of one item before its resend timer.
pub(crate) const MAX_COPIES: u8 = 6;
/// Copies until the loss is measured (the second pong, about two seconds
/// in): an item that loses every copy then waits for a timer that assumes
/// [`UNMEASURED_RTT`], ten ticks and more, and the first frames are those
/// the adaptive delay sets itself from (with two copies, one frame in a
/// hundred lost both at 10% loss, and the delay rose to its ceiling and
/// took half a minute to come down).
const UNMEASURED_COPIES: u8 = 4;
/// Fewest copies, even on a link that lost nothing yet.
const MIN_COPIES: u8 = 2;
/// What the copy count aims at: the ticks stalled waiting for items that
/// lost every copy, per item (the chance of losing them all times the
/// resend's wait in ticks times the players a stall holds up). A lone loss is made good by the next
/// copy, within a datagram; an item that lost all of them waits about a
/// round trip, so far links get more copies (and each resend adds one, see
/// [`Resend`]).
const TARGET_STALL: f64 = 5e-4;
/// Items acknowledged without a resend that take one escalated copy away.
const SETTLE: u32 = 3_000;
/// Most copies of one item on a link that queues what it is sent (see
/// [`Redundancy::bundled`]).
const BUNDLED_COPIES: u8 = 2;
/// The round trip assumed before one is measured.
const UNMEASURED_RTT: Duration = Duration::from_millis(300);

/// How hard a link repeats what it sends, from what it measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Redundancy {
    /// Copies of each item before the timeout.
    pub(crate) copies: u8,
    /// Most copies, with those added after losses (see [`Resend`]).
    pub(crate) most: u8,
    /// Least time between two copies of an item: copies of one item in
    /// datagrams sent close together would be lost together.
    pub(crate) spacing: Duration,
    /// An item with copies left makes a datagram go this long after its
    /// last copy, if none went meanwhile.
    pub(crate) force: Duration,
    /// How long after its last copy an unacknowledged item goes again.
    pub(crate) timeout: Duration,
    /// How long after its last copy a datagram from the other end that
    /// still lacks the item shows it lost (the timeout, but for the wait
    /// for an acknowledgement to go).
    pub(crate) quick: Duration,
    /// The round trip and a margin for its jitter (see [`trip`]).
    trip: Duration,
}

impl Redundancy {
    /// The redundancy for a link that loses `loss` of what goes (unknown:
    /// the fewest copies), with round trip `rtt` and its `jitter`, whose
    /// other end acknowledges within `ack_delay`, sending every `period`,
    /// and whose stall holds up `held_up` players (itself alone when
    /// nobody waits for it, every player when the room waits for all: its
    /// input runs late for everyone).
    pub(crate) fn for_link(
        loss: Option<f64>,
        rtt: Option<Duration>,
        jitter: Option<Duration>,
        ack_delay: Duration,
        period: Duration,
        held_up: u32,
    ) -> Self {
        let trip = trip(rtt, jitter);
        let quick = trip.max(period);
        // An item that loses every copy stalls the other end for about a
        // resend's wait: the longer that is, the rarer it must be.
        let stall =
            quick.as_secs_f64() / period.as_secs_f64().max(1e-6) * f64::from(held_up.max(1));
        let copies = loss.map_or(UNMEASURED_COPIES, |p| {
            let p = p.clamp(0.0, 1.0);
            (MIN_COPIES..MAX_COPIES)
                .find(|&c| p.powi(i32::from(c)) * stall <= TARGET_STALL * (1.0 + 1e-9))
                .unwrap_or(MAX_COPIES)
        });
        Self {
            copies,
            most: MAX_COPIES,
            spacing: period / 2,
            // Past the next regular datagram, which usually carries it.
            force: period * 3,
            timeout: quick + ack_delay,
            quick,
            trip,
        }
    }

    /// The same, for items the other end says at once it lacks (a
    /// sequencer names the players it waits on as soon as it has waited a
    /// tick, and goes quiet until they are heard): a datagram from it that
    /// still lacks an item a round trip (and its jitter) after its last
    /// copy shows the copy lost, however short the round trip is against
    /// the period.
    pub(crate) fn told_at_once(self) -> Self {
        Self {
            quick: self.trip,
            ..self
        }
    }

    /// The same, for items whose next regular datagram may not come (a
    /// client sends with each input it commits, and commits nothing while
    /// the game waits for a frame, which may wait for the copy): a copy
    /// left makes a datagram go `force` after the last copy.
    pub(crate) fn forcing_after(self, force: Duration) -> Self {
        Self {
            force: force.min(self.force),
            ..self
        }
    }

    /// The same, on a link whose frames go `bundle` ticks to a datagram
    /// because it queues what it is sent (see `link::Pace`): what it loses
    /// is the queue's doing, so more copies would only lengthen it. At
    /// most two copies, each in the next bundled datagram (one every
    /// `bundle` periods), and nothing forced between them.
    pub(crate) fn bundled(self, bundle: u32, period: Duration) -> Self {
        if bundle <= 1 {
            return self;
        }
        Self {
            copies: self.copies.min(BUNDLED_COPIES),
            most: BUNDLED_COPIES,
            spacing: period * bundle - period / 2,
            force: period * (bundle + 2),
            ..self
        }
    }
}

/// How long after an item went a datagram from the other end shows
/// whether it arrived: the round trip `rtt` (or [`UNMEASURED_RTT`]) and a
/// margin for its `jitter`.
fn trip(rtt: Option<Duration>, jitter: Option<Duration>) -> Duration {
    let rtt = rtt.unwrap_or(UNMEASURED_RTT);
    let margin = jitter.map_or(rtt, |j| (j * 4).min(rtt));
    rtt + margin
}

/// One tracked item: copies still to go, and when it last went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sent {
    left: u8,
    at: Instant,
    /// It lost every copy once: the copies it goes again with each make a
    /// datagram go `spacing` after the last, not `force` (a loss that rare
    /// is made good at once, as the other end is stalled on it).
    urgent: bool,
}

impl Sent {
    fn new(left: u8, at: Instant) -> Self {
        Self {
            left,
            at,
            urgent: false,
        }
    }

    /// A copy is due: it has copies left, and the last went at least
    /// `spacing` ago.
    fn copy_due(self, now: Instant, r: Redundancy) -> bool {
        self.left > 0 && now >= self.at + r.spacing
    }

    /// Every copy went and none was acknowledged in time.
    fn lost(self, now: Instant, r: Redundancy) -> bool {
        self.left == 0 && now >= self.at + r.timeout
    }

    /// When it makes a datagram go by itself.
    fn forces(self, r: Redundancy) -> Instant {
        self.at
            + if self.left == 0 {
                r.timeout
            } else if self.urgent {
                r.spacing
            } else {
                r.force
            }
    }
}

/// The items a datagram is to carry (see [`Resend::due`]): those sent
/// before that are due again, from `repeat`, then those never sent, from
/// `fresh`, both up to `end`. The two meet: `repeat..fresh` and
/// `fresh..end`, except for `skip`: items after the first run of due ones
/// that are not due (they went recently, and wait for their
/// acknowledgement), up to the next due one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Due {
    pub(crate) repeat: Option<Tick>,
    pub(crate) fresh: Tick,
    pub(crate) end: Tick,
    pub(crate) skip: Option<(Tick, Tick)>,
}

impl Due {
    /// The first item due.
    pub(crate) fn from(&self) -> Tick {
        self.repeat.unwrap_or(self.fresh)
    }

    /// Whether nothing is due.
    pub(crate) fn is_empty(&self) -> bool {
        self.repeat.is_none() && self.fresh >= self.end
    }

    /// The stretches a datagram carries, each at most `most` items: the
    /// first run of due items, then those from the next due one to the
    /// end (the ones between only wait for their acknowledgement).
    /// Without such a gap and more than `most` due, the oldest due and the
    /// first never sent, so that an end far behind still gets new items
    /// with every datagram.
    pub(crate) fn runs(&self, most: u32) -> [Option<(Tick, Tick)>; 2] {
        if self.is_empty() {
            return [None, None];
        }
        let from = self.from();
        let upto = |a: Tick, b: Tick| (a, b.min(a.saturating_add(most)));
        if let Some((skip, after)) = self.skip {
            [
                Some(upto(from, skip)),
                (after < self.end).then(|| upto(after, self.end)),
            ]
        } else if self.end.since(from) <= most {
            [Some((from, self.end)), None]
        } else {
            [
                (from < self.fresh).then(|| upto(from, self.fresh)),
                (self.fresh < self.end).then(|| upto(self.fresh, self.end)),
            ]
        }
    }
}

/// The send record of one numbered run of items for one link (see the
/// [module](self)): from the first the other end has not acknowledged.
///
/// The loss measured can fall short of what items meet (duplicated
/// datagrams hide losses from the counts, a burst comes between two
/// pongs): each resend timer that runs out adds a copy, and every
/// `SETTLE` items acknowledged without one take one away.
///
/// Resends narrow down. Items taken as lost go again (a *round*), and
/// until the other end acknowledges everything the rounds resent, only
/// the base goes again, once a timeout: an end that stops acknowledging
/// (a dead downlink, or a peer that holds its acknowledgement back on
/// purpose) is sent each item its copies and then its base once a round
/// trip or so, not every item it lacks in every datagram, and one that
/// moves its acknowledgement a tick at a time gains nothing by it. The
/// timers do not grow: an honest end that lost a round under heavy loss
/// would stall past a room's patience (a room that waits for all gives a
/// silent player up after `abandon_after`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resend {
    /// The first item not acknowledged.
    base: Tick,
    /// Items `base..`, in order, that went at least once.
    sent: VecDeque<Sent>,
    /// Copies added to what the measured loss asks for.
    extra: u8,
    /// Items acknowledged since the last escalation or settling.
    clean: u32,
    /// When the other end was last heard lacking the base.
    heard: Option<Instant>,
    /// The end of what the rounds of resends went to, while the base has
    /// not passed it: until then only the base goes again.
    recover: Option<Tick>,
}

impl Resend {
    /// Nothing sent yet, nothing acknowledged before `base`.
    pub(crate) fn new(base: Tick) -> Self {
        Self {
            base,
            sent: VecDeque::new(),
            extra: 0,
            clean: 0,
            heard: None,
            recover: None,
        }
    }

    /// The copies each item gets on this link: what the measured loss asks
    /// for, and those added after items lost every copy.
    pub(crate) fn copies(&self, r: Redundancy) -> u8 {
        r.copies.saturating_add(self.extra).min(r.most)
    }

    /// The first item not acknowledged.
    pub(crate) fn base(&self) -> Tick {
        self.base
    }

    /// Whether every item before `end` is acknowledged: nothing is or
    /// will be due until more come.
    pub(crate) fn is_clear(&self, end: Tick) -> bool {
        self.base >= end && self.sent.is_empty()
    }

    /// The other end now lacks items from `next` on: ahead of the base,
    /// the items before are acknowledged; behind it (it went back, to a
    /// snapshot), everything is to go again from there.
    pub(crate) fn lacks_from(&mut self, next: Tick) {
        if next < self.base || self.recover.is_some_and(|r| next >= r) {
            self.recover = None;
        }
        if next < self.base {
            self.sent.clear();
        } else {
            let n = next.since(self.base);
            self.sent.drain(..(n as usize).min(self.sent.len()));
            self.clean = self.clean.saturating_add(n);
            if self.clean >= SETTLE {
                self.clean = 0;
                self.extra = self.extra.saturating_sub(1);
            }
        }
        self.base = next;
    }

    /// A datagram from the other end came at `now`, lacking items from the
    /// base on (after [`lacks_from`](Self::lacks_from)).
    pub(crate) fn heard(&mut self, now: Instant) {
        self.heard = Some(now);
    }

    /// Whether item `k` (from the base) is lost: every copy went and none
    /// was acknowledged in time, or the base was, and the other end said it
    /// still lacked it a round trip after its last copy. While a round is
    /// unacknowledged, only the base.
    fn lost(&self, k: usize, now: Instant, r: Redundancy) -> bool {
        self.sent
            .get(k)
            .is_some_and(|s| self.lost_item(k, *s, self.recover.is_some(), now, r))
    }

    /// [`lost`](Self::lost) for item `k` as `s`, `narrowed` while a round
    /// is unacknowledged.
    fn lost_item(&self, k: usize, s: Sent, narrowed: bool, now: Instant, r: Redundancy) -> bool {
        (k == 0 || !narrowed)
            && (s.lost(now, r)
                || k == 0 && s.left == 0 && self.heard.is_some_and(|h| h >= s.at + r.quick))
    }

    /// The first item never sent.
    fn fresh(&self) -> Tick {
        self.base.saturating_add(self.sent.len() as u32)
    }

    /// What a datagram going at `now` carries of the items before `end`.
    pub(crate) fn due(&self, now: Instant, end: Tick, r: Redundancy) -> Due {
        let is_due = |k: usize| self.sent[k].copy_due(now, r) || self.lost(k, now, r);
        let n = self.sent.len();
        let first = (0..n).find(|&k| is_due(k));
        // A lost item goes again alone, not with every item after it that
        // is only waiting for its acknowledgement.
        let skip = first.and_then(|k0| {
            let k1 = (k0..n).find(|&k| !is_due(k))?;
            let k2 = (k1..n).find(|&k| is_due(k)).unwrap_or(n);
            Some((
                self.base.saturating_add(k1 as u32),
                self.base.saturating_add(k2 as u32),
            ))
        });
        let fresh = self.fresh();
        Due {
            repeat: first.map(|k| self.base.saturating_add(k as u32)),
            fresh,
            end: end.min(self.base.saturating_add(TRACKED)).max(fresh),
            skip,
        }
    }

    /// Items `from..to` went at `now`: a copy each, and an item whose
    /// resend timer ran out starts its copies again.
    pub(crate) fn sent(&mut self, from: Tick, to: Tick, now: Instant, r: Redundancy) {
        let from = from.max(self.base);
        let to = to.min(self.base.saturating_add(TRACKED));
        let first = from.since(self.base) as usize;
        let last = (to.since(self.base) as usize).min(self.sent.len());
        // Which items are lost is judged as things stood before this round.
        let narrowed = self.recover.is_some();
        if let Some(k) = (first..last).rev().find(|&k| self.lost(k, now, r)) {
            let end = self.base.saturating_add(k as u32 + 1);
            if !narrowed {
                self.extra = self.extra.saturating_add(1).min(MAX_COPIES);
                self.clean = 0;
            }
            // Until what the rounds resent is acknowledged: only the base.
            self.recover = Some(self.recover.map_or(end, |r| r.max(end)));
        }
        let copies = self.copies(r);
        for k in first..last {
            let lost = self.lost_item(k, self.sent[k], narrowed, now, r);
            let s = &mut self.sent[k];
            if lost {
                s.left = copies;
                s.urgent = true;
            }
            s.left = s.left.saturating_sub(1);
            s.at = now;
        }
        // Items go in order: those never sent follow the last sent.
        if first <= self.sent.len() {
            for _ in self.sent.len()..to.since(self.base) as usize {
                self.sent
                    .push_back(Sent::new(copies.saturating_sub(1), now));
            }
        }
    }

    /// When the items before `end` next make a datagram go by themselves:
    /// at once for one never sent, after `force` for one with copies left
    /// (`spacing` for a resend's), on its timeout for one only waiting for
    /// its acknowledgement. `None` when nothing is unacknowledged.
    ///
    /// While a round is unacknowledged only the base can be lost, and the items
    /// with copies left are the newest: the walk stops at the first from
    /// the end without, so an end that acknowledges nothing does not make
    /// every call walk all it lacks.
    /// When the items before `end` make a datagram go by themselves, never
    /// sooner than a copy's spacing after the link's `last_sent` datagram;
    /// `None` when none waits. The redundancy is worked out only then.
    pub(crate) fn next_send(
        &self,
        now: Instant,
        end: Tick,
        redundancy: impl FnOnce() -> Redundancy,
        last_sent: Option<Instant>,
    ) -> Option<Instant> {
        if self.is_clear(end) {
            return None;
        }
        let r = redundancy();
        let at = self.next_due(now, end, r)?;
        Some(last_sent.map_or(at, |last| at.max(last + r.spacing)))
    }

    pub(crate) fn next_due(&self, now: Instant, end: Tick, r: Redundancy) -> Option<Instant> {
        let fresh = self.fresh() < end.min(self.base.saturating_add(TRACKED));
        if fresh || self.lost(0, now, r) {
            return Some(now);
        }
        if self.recover.is_none() {
            return self.sent.iter().map(|s| s.forces(r)).min();
        }
        let base = self.sent.front().map(|s| s.forces(r));
        let copies = self
            .sent
            .iter()
            .skip(1)
            .rev()
            .take_while(|s| s.left > 0)
            .map(|s| s.forces(r));
        base.into_iter().chain(copies).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    fn t(n: u32) -> Tick {
        Tick::new(n)
    }

    const MS: Duration = Duration::from_millis(1);

    fn red(copies: u8) -> Redundancy {
        Redundancy {
            copies,
            most: MAX_COPIES,
            spacing: MS * 16,
            force: MS * 50,
            timeout: MS * 200,
            quick: MS * 150,
            trip: MS * 150,
        }
    }

    #[test]
    fn copies_follow_the_measured_loss_and_what_a_total_loss_costs() {
        // Near: a resend comes within a tick; a stall holds up nobody else.
        let near = |loss| Redundancy::for_link(loss, Some(MS), Some(MS), MS, MS * 33, 1).copies;
        assert_eq!(near(None), UNMEASURED_COPIES);
        assert_eq!(near(Some(0.0)), 2);
        assert_eq!(near(Some(0.022)), 2);
        assert_eq!(near(Some(0.03)), 3);
        assert_eq!(near(Some(0.07)), 3);
        assert_eq!(near(Some(0.1)), 4);
        assert_eq!(near(Some(0.2)), 5);
        assert_eq!(near(Some(0.3)), 6);
        assert_eq!(near(Some(f64::NAN)), 6, "nonsense counts as the worst");
        // 250 ms away, a total loss stalls about ten ticks: one more copy.
        let far = |loss, held_up| {
            Redundancy::for_link(
                Some(loss),
                Some(MS * 250),
                Some(MS * 25),
                MS * 40,
                MS * 33,
                held_up,
            )
            .copies
        };
        assert_eq!(far(0.0, 1), 2);
        assert_eq!(far(0.005, 1), 2);
        assert_eq!(far(0.01, 1), 3);
        assert_eq!(far(0.1, 1), 5);
        // 100 ms away in a room of 8 that waits for all: a total loss
        // stalls everyone, so one copy more than for a spectator.
        let room = |held_up| {
            Redundancy::for_link(
                Some(0.01),
                Some(MS * 100),
                Some(MS * 10),
                MS * 40,
                MS * 33,
                held_up,
            )
            .copies
        };
        assert_eq!((room(1), room(8)), (2, 3));
    }

    #[test]
    fn the_timeout_is_a_round_trip_with_margin_and_the_acknowledgement() {
        let r = Redundancy::for_link(
            Some(0.0),
            Some(MS * 100),
            Some(MS * 10),
            MS * 33,
            MS * 33,
            1,
        );
        assert_eq!(r.timeout, MS * 173);
        let r = Redundancy::for_link(
            Some(0.0),
            Some(MS * 100),
            Some(MS * 60),
            MS * 33,
            MS * 33,
            1,
        );
        assert_eq!(r.timeout, MS * 233, "the margin is at most a round trip");
        assert_eq!((r.spacing, r.force), (MS * 33 / 2, MS * 99));
    }

    #[test]
    fn a_lost_item_goes_again_without_those_waiting_for_their_ack() {
        let r = red(2);
        let mut s = Resend::new(t(0));
        // Items 0 to 5 went twice; 0 times out first.
        s.sent(t(0), t(1), at(0), r);
        s.sent(t(0), t(1), at(20), r);
        s.sent(t(1), t(6), at(100), r);
        s.sent(t(1), t(6), at(120), r);
        let d = s.due(at(220), t(6), r);
        assert_eq!(d.from(), t(0));
        assert_eq!(d.skip, Some((t(1), t(6))), "1 to 5 only wait");
        // With one new item: 0, then 6; 1 to 5 are left out.
        let d = s.due(at(220), t(7), r);
        assert_eq!(
            (d.from(), d.skip, d.fresh, d.end),
            (t(0), Some((t(1), t(6))), t(6), t(7))
        );
        // Everything due: no gap.
        let d = s.due(at(400), t(7), r);
        assert_eq!((d.from(), d.skip), (t(0), None));
    }

    #[test]
    fn each_item_goes_its_copies_then_waits_for_its_timeout() {
        let r = red(3);
        let mut s = Resend::new(t(10));
        let d = s.due(at(0), t(12), r);
        assert_eq!((d.repeat, d.fresh, d.end), (None, t(10), t(12)));
        s.sent(t(10), t(12), at(0), r);
        // Too soon for a second copy.
        assert!(s.due(at(10), t(12), r).is_empty());
        assert_eq!(s.next_due(at(10), t(12), r), Some(at(50)));
        // A new item comes: it is fresh, the others are due again.
        let d = s.due(at(20), t(13), r);
        assert_eq!((d.repeat, d.fresh, d.end), (Some(t(10)), t(12), t(13)));
        s.sent(t(10), t(13), at(20), r);
        s.sent(t(10), t(13), at(40), r);
        // 10 and 11 went three times; 12 has one copy left.
        let d = s.due(at(60), t(13), r);
        assert_eq!((d.repeat, d.fresh), (Some(t(12)), t(13)));
        s.sent(t(12), t(13), at(60), r);
        assert!(s.due(at(100), t(13), r).is_empty());
        assert_eq!(s.next_due(at(100), t(13), r), Some(at(240)));
        // Their timeouts run out: everything unacknowledged goes again,
        // with its copies.
        let d = s.due(at(240), t(13), r);
        assert_eq!(d.from(), t(10));
        s.sent(t(10), t(13), at(240), r);
        // Their copies start again, each making a datagram go a spacing
        // after the last.
        assert!(s.due(at(241), t(13), r).is_empty());
        assert_eq!(s.next_due(at(241), t(13), r), Some(at(256)));
        assert_eq!(s.due(at(256), t(13), r).from(), t(10));
        s.lacks_from(t(13));
        assert!(s.due(at(257), t(13), r).is_empty());
    }

    #[test]
    fn acknowledgement_drops_what_it_covers_and_a_step_back_forgets_all() {
        let r = red(2);
        let mut s = Resend::new(t(0));
        s.sent(t(0), t(5), at(0), r);
        s.lacks_from(t(3));
        assert_eq!(s.base(), t(3));
        let d = s.due(at(20), t(6), r);
        assert_eq!((d.repeat, d.fresh), (Some(t(3)), t(5)));
        // Past all it sent.
        s.lacks_from(t(9));
        assert_eq!(s.due(at(20), t(12), r).from(), t(9));
        s.sent(t(9), t(12), at(20), r);
        // Back to a snapshot at 4: all of it goes again.
        s.lacks_from(t(4));
        let d = s.due(at(21), t(12), r);
        assert_eq!((d.repeat, d.fresh), (None, t(4)));
        assert_eq!(s.next_due(at(21), t(12), r), Some(at(21)));
    }

    #[test]
    fn a_lost_item_adds_a_copy_until_enough_go_through_without() {
        let r = red(2);
        let mut s = Resend::new(t(0));
        s.sent(t(0), t(1), at(0), r);
        s.sent(t(0), t(1), at(20), r);
        assert_eq!(s.copies(r), 2);
        // Both copies lost: the resend adds one, for it and what follows.
        s.sent(t(0), t(2), at(220), r);
        assert_eq!(s.copies(r), 3);
        assert_eq!(s.sent[1].left, 2);
        assert_eq!(s.sent[0].left, 2, "the resend's copies too");
        s.lacks_from(t(SETTLE - 1));
        assert_eq!(s.copies(r), 3);
        s.lacks_from(t(SETTLE + 1));
        assert_eq!(s.copies(r), 2);
        assert_eq!(s.copies(red(MAX_COPIES)), MAX_COPIES, "never past the most");
    }

    #[test]
    fn the_other_end_lacking_the_base_a_round_trip_after_its_last_copy_loses_it() {
        let r = red(2);
        let mut s = Resend::new(t(0));
        s.sent(t(0), t(2), at(0), r);
        s.sent(t(0), t(2), at(20), r);
        s.heard(at(100));
        assert!(s.due(at(100), t(2), r).is_empty(), "too soon to tell");
        s.heard(at(20) + r.quick);
        let d = s.due(at(20) + r.quick, t(2), r);
        assert_eq!(d.from(), t(0));
        assert_eq!(
            s.next_due(at(20) + r.quick, t(2), r),
            Some(at(20) + r.quick)
        );
        // Only the base: the other end may hold what follows it.
        let mut s = Resend::new(t(0));
        s.sent(t(0), t(1), at(0), r);
        s.sent(t(0), t(2), at(20), r);
        s.sent(t(1), t(2), at(40), r);
        s.heard(at(40) + r.quick);
        assert_eq!(s.due(at(40) + r.quick, t(2), r).from(), t(0));
        s.sent(t(0), t(1), at(40) + r.quick, r);
        assert_eq!(s.copies(r), 3, "a loss adds a copy");
        assert!(s.due(at(41) + r.quick, t(2), r).is_empty());
        assert_eq!(
            s.next_due(at(41) + r.quick, t(2), r),
            Some(at(40) + r.quick + r.spacing),
            "a resend's copies make datagrams go a spacing apart"
        );
    }

    #[test]
    fn resends_narrow_to_the_base_until_the_other_end_acknowledges_them() {
        let r = red(1);
        let mut s = Resend::new(t(0));
        s.sent(t(0), t(3), at(0), r);
        // The first round: everything lost goes again.
        assert_eq!(s.due(at(200), t(3), r).from(), t(0));
        assert_eq!(s.due(at(200), t(3), r).skip, None);
        s.sent(t(0), t(3), at(200), r);
        // A loss adds a copy: the resent items have one more to go.
        assert_eq!(s.due(at(216), t(3), r).from(), t(0));
        s.sent(t(0), t(3), at(216), r);
        // None of it acknowledged: the next round, a timeout on, is the
        // base alone.
        assert!(s.due(at(415), t(3), r).is_empty());
        assert_eq!(s.next_due(at(217), t(3), r), Some(at(416)));
        let d = s.due(at(416), t(3), r);
        assert_eq!((d.from(), d.skip), (t(0), Some((t(1), t(3)))));
        // And so on, a timeout after each round's last copy, never more
        // than the base.
        for _ in 0..16 {
            let at_k = s.next_due(at(0), t(3), r).expect("the base waits");
            let d = s.due(at_k, t(3), r);
            assert_eq!((d.from(), d.skip), (t(0), Some((t(1), t(3)))));
            s.sent(t(0), t(1), at_k, r);
        }
        let last = s.sent[0].at;
        // Moving the acknowledgement a tick on is not enough: what the
        // rounds resent (0 to 2) is not all acknowledged. The new base,
        // long waiting, goes at once, alone.
        s.lacks_from(t(1));
        let now = last + MS;
        let d = s.due(now, t(3), r);
        assert_eq!((d.from(), d.skip), (t(1), Some((t(2), t(3)))));
        // All of it: every item lost goes in a round again.
        s.lacks_from(t(3));
        s.sent(t(3), t(5), at(10_000), r);
        s.sent(t(3), t(5), at(10_016), r);
        let d = s.due(at(10_216), t(5), r);
        assert_eq!((d.from(), d.skip), (t(3), None));
    }

    #[test]
    fn nothing_is_tracked_beyond_the_bound() {
        let r = red(2);
        let mut s = Resend::new(t(0));
        let far = t(10 * TRACKED);
        assert_eq!(s.due(at(0), far, r).end, t(TRACKED));
        s.sent(t(0), far, at(0), r);
        assert_eq!(s.sent.len(), TRACKED as usize);
        assert!(s.due(at(1), far, r).is_empty());
        // Out of order (a gap) is never recorded.
        let mut s = Resend::new(t(0));
        s.sent(t(3), t(5), at(0), r);
        assert!(s.sent.is_empty());
    }
}
