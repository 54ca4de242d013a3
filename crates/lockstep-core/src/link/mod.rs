//! The per-connection engine every topology holds once per remote end: a
//! mesh peer for each other peer, the sequencer for each client, a client
//! for its sequencer. It owns what every link does alike: when the other
//! end was last heard and whether it went quiet (interrupt, recover), the
//! send schedule (resend while there is news, keepalive otherwise), ping
//! and pong with the round-trip estimate ([`Rtt`]) and the traffic meter
//! ([`LinkMeter`]), and whether snapshot chunks were starved of room.
//!
//! A session decides what goes in its datagrams; the link decides when one
//! is due and writes the two messages every datagram may carry for it, the
//! `Pong` owed and the `Ping` due.

mod inputs;
mod meter;
mod pace;
mod resend;
mod rtt;
mod stall;
mod taken;

pub(crate) use inputs::{AckWatch, Recent, Reference, readable, reference};
pub(crate) use meter::LinkMeter;
pub use meter::Traffic;
pub(crate) use pace::Pace;
pub(crate) use resend::{Redundancy, Resend};
pub(crate) use rtt::Rtt;
pub(crate) use stall::StallMeter;
pub(crate) use taken::Taken;

use crate::Instant;
use crate::wire::Message;
use core::time::Duration;

/// The longest a ping's pong is awaited: a round trip longer than this is
/// not measured (the link counts the ping lost).
pub(crate) const MAX_PONG_WAIT: Duration = Duration::from_secs(4);

/// One remote end's link (see the [module](self)).
#[derive(Debug, Clone)]
pub(crate) struct Link {
    /// When it was last heard from.
    heard: Option<Instant>,
    /// When the link began: silence counts from then until it is heard.
    since: Instant,
    last_sent: Option<Instant>,
    /// A datagram is to go out at the next `poll_transmit`.
    pub(crate) flush: bool,
    /// A ping to answer: its stamp and when it arrived.
    pong_owed: Option<(u32, Instant)>,
    ping_due: Instant,
    rtt: Rtt,
    meter: LinkMeter,
    /// It went quiet for longer than the session allows.
    interrupted: bool,
    /// The last datagram had no room for a chunk that was due: chunks wait
    /// for the next regular datagram instead of forcing one.
    pub(crate) chunk_starved: bool,
    /// How many ticks of frames a datagram bundles, from the queue the
    /// round trip shows: on a link that sends frames by the tick (see
    /// [`paced`](Self::paced)).
    pace: Option<Pace>,
}

impl Link {
    /// A link that begins at `now`: its first ping is due at once.
    pub(crate) fn new(now: Instant) -> Self {
        Self {
            heard: None,
            since: now,
            last_sent: None,
            flush: false,
            pong_owed: None,
            ping_due: now,
            rtt: Rtt::default(),
            meter: LinkMeter::default(),
            interrupted: false,
            chunk_starved: false,
            pace: None,
        }
    }

    /// A link that begins at `now` with a datagram to go at once (a
    /// connection just opened, which answers or says hello).
    pub(crate) fn ready(now: Instant) -> Self {
        Self {
            flush: true,
            ..Self::new(now)
        }
    }

    /// The same link, sending frames sealed every `period`: its bundle
    /// follows the queue the round trip shows (see [`Pace`]).
    pub(crate) fn paced(self, period: Duration) -> Self {
        Self {
            pace: Some(Pace::new(period)),
            ..self
        }
    }

    // ----- what came ---------------------------------------------------------

    /// A datagram of `len` bytes came (whether or not it is taken).
    pub(crate) fn received(&mut self, now: Instant, len: usize) {
        self.meter.received(now, len);
    }

    /// A datagram from the other end was taken at `now`. Returns whether
    /// this ends an interruption (the session tells the game it recovered).
    pub(crate) fn heard(&mut self, now: Instant) -> bool {
        self.heard = Some(now);
        core::mem::take(&mut self.interrupted)
    }

    /// A ping stamped `stamp` came at `now`: the next datagram answers it.
    pub(crate) fn pinged_by(&mut self, stamp: u32, now: Instant) {
        self.pong_owed = Some((stamp, now));
    }

    /// The pong for our ping came at `now`: the round trip and the counts
    /// it carries are taken. Returns the datagrams lost each way (there,
    /// back) since the previous pong.
    pub(crate) fn ponged(&mut self, now: Instant, pong: (u32, u32, u32, u32)) -> (u64, u64) {
        let before = self.rtt.latest().map(|(_, n)| n);
        let lost = self.meter.pong_came(&mut self.rtt, now, pong);
        if let Some((sample, n)) = self.rtt.latest()
            && before != Some(n)
            && let Some(p) = self.pace.as_mut()
        {
            p.sample(now, sample, self.meter.net_lost_up());
        }
        lost
    }

    /// The link's own messages as they come: a `Ping` is owed its pong, a
    /// `Pong`'s round trip and counts are taken. Returns the datagrams lost
    /// each way since the previous pong (none for anything else).
    pub(crate) fn take_message(&mut self, m: &Message<'_>, now: Instant) -> (u64, u64) {
        match *m {
            Message::Ping { stamp } => {
                self.pinged_by(stamp, now);
                (0, 0)
            }
            Message::Pong {
                stamp,
                held_ms,
                received,
                sent,
            } => self.ponged(now, (stamp, held_ms, received, sent)),
            _ => (0, 0),
        }
    }

    // ----- what goes ---------------------------------------------------------

    /// The `Pong` the next datagram owes, as of `now`.
    pub(crate) fn pong(&self, now: Instant) -> Option<Message<'static>> {
        self.pong_owed
            .map(|(stamp, at)| self.meter.pong_to(stamp, at, now))
    }

    /// The `Ping` due by `now`, if one is, with pings every `interval`.
    pub(crate) fn ping(&self, now: Instant, interval: Duration) -> Option<Message<'static>> {
        self.ping_goes(now, interval).then(|| Message::Ping {
            stamp: Rtt::stamp(now),
        })
    }

    /// Whether a datagram going at `now` carries a ping: one is due, and
    /// fewer than [`meter::PINGS`] await their pong (a round trip longer
    /// than the time between pings is still measured: pings are not
    /// replaced before their pong can come).
    fn ping_goes(&self, now: Instant, interval: Duration) -> bool {
        self.ping_due <= now && self.meter.ping_room(now, self.ping_lost_after(interval))
    }

    /// How long a ping's pong is awaited, with pings every `interval`:
    /// twice the round trip and the interval (the other end answers with
    /// its next datagram), and at most [`MAX_PONG_WAIT`]: the round trip
    /// is the remote's to make, and one that answers each ping a little
    /// later than the last would otherwise grow it without end.
    fn ping_lost_after(&self, interval: Duration) -> Duration {
        ((interval + self.rtt().unwrap_or_default()) * 2).min(MAX_PONG_WAIT)
    }

    /// A datagram of `len` bytes went out at `now`: the pong is paid, a
    /// ping that was due went with it (the next is due `ping_interval`
    /// later; `timed`: its round trip is measured, else it only moves the
    /// schedule on).
    pub(crate) fn sent(&mut self, now: Instant, len: usize, ping_interval: Duration, timed: bool) {
        self.pong_owed = None;
        if self.ping_goes(now, ping_interval) {
            // A link that may be short is timed four times as often, so
            // its queue shows within a second.
            let watching = self.pace.as_ref().is_some_and(Pace::watching);
            self.ping_due = now
                + if watching {
                    ping_interval / 4
                } else {
                    ping_interval
                };
            if timed {
                let lost_after = self.ping_lost_after(ping_interval);
                self.meter.pinged(now, lost_after);
            }
        }
        self.meter.sent(now, len);
        self.last_sent = Some(now);
    }

    /// When the next datagram is due: at `first` if none went out yet, else
    /// `interval` after the last (a session's resend interval while it has
    /// news for the other end, its keepalive otherwise).
    pub(crate) fn send_due(&self, first: Instant, interval: Duration) -> Instant {
        self.last_sent.map_or(first, |t| t + interval)
    }

    /// Whether anything went out yet.
    pub(crate) fn sent_any(&self) -> bool {
        self.last_sent.is_some()
    }

    // ----- silence -----------------------------------------------------------

    /// When it was last heard from.
    pub(crate) fn last_heard(&self) -> Option<Instant> {
        self.heard
    }

    /// When it was last heard from, or when the link began.
    pub(crate) fn heard_or_since(&self) -> Instant {
        self.heard.unwrap_or(self.since)
    }

    /// How long it has been silent at `now` (since the link began, if
    /// never heard).
    pub(crate) fn silent_for(&self, now: Instant) -> Duration {
        now - self.heard_or_since()
    }

    /// Whether it is interrupted (quiet for longer than allowed).
    pub(crate) fn interrupted(&self) -> bool {
        self.interrupted
    }

    /// It interrupts once it has been silent for `after` (with `unheard`
    /// false, only once heard at all): returns how long it was silent when
    /// it does, once per silence.
    pub(crate) fn interrupt(
        &mut self,
        now: Instant,
        after: Duration,
        unheard: bool,
    ) -> Option<Duration> {
        let silent = self.silent_for(now);
        let due = !self.interrupted && silent >= after && (unheard || self.heard.is_some());
        if due {
            self.interrupted = true;
        }
        due.then_some(silent)
    }

    /// When [`interrupt`](Self::interrupt) would next fire.
    pub(crate) fn interrupt_due(&self, after: Duration, unheard: bool) -> Option<Instant> {
        (!self.interrupted && (unheard || self.heard.is_some()))
            .then(|| self.heard_or_since() + after)
    }

    // ----- figures -----------------------------------------------------------

    /// The smoothed round trip, once measured.
    pub(crate) fn rtt(&self) -> Option<Duration> {
        self.rtt.get()
    }

    /// The round trip's jitter, once measured.
    pub(crate) fn jitter(&self) -> Option<Duration> {
        self.rtt.jitter()
    }

    /// How hard to repeat what goes to the other end, from the loss (over
    /// the last half minute) and the round trip measured, when a stall of
    /// the other end holds up `held_up` players (see
    /// [`Redundancy::for_link`]).
    /// How hard a player's own inputs are repeated on this link, sent
    /// every tick `period`, whose other end (a sequencer, or a mesh peer)
    /// acknowledges with its next datagram, within the session's
    /// `resend_interval`, and whose late input holds up `held_up` players.
    /// Both kinds of other end say what they lack as soon as it holds them
    /// up (a sequencer names whom the room waits on; a peer acknowledges in
    /// every datagram), and a player commits nothing while its game waits
    /// on a frame that may wait on that input: see
    /// [`Redundancy::told_at_once`] and [`Redundancy::forcing_after`].
    pub(crate) fn input_redundancy(
        &self,
        resend_interval: Duration,
        period: Duration,
        held_up: u32,
    ) -> Redundancy {
        let ack_delay = resend_interval.max(period);
        self.redundancy(ack_delay, period, held_up)
            .told_at_once()
            .forcing_after(ack_delay)
    }

    pub(crate) fn redundancy(
        &self,
        ack_delay: Duration,
        period: Duration,
        held_up: u32,
    ) -> Redundancy {
        // On a link that shows a queue, a round trip that just grew is
        // waited out before anything is taken as lost.
        let watching = self.pace.as_ref().is_some_and(Pace::watching);
        let rtt = self.rtt().map(|r| match self.rtt.latest() {
            Some((l, _)) if watching => r.max(l),
            _ => r,
        });
        let r = Redundancy::for_link(
            self.meter.slow_loss_up(),
            rtt,
            self.jitter(),
            ack_delay,
            period,
            held_up,
        );
        match &self.pace {
            Some(p) => r.bundled(p.bundle(), period),
            None => r,
        }
    }

    /// Ticks of frames a datagram bundles: 1 on a link with room, more on
    /// one that queues (see [`Pace`]).
    pub(crate) fn bundle(&self) -> u32 {
        self.pace.as_ref().map_or(1, Pace::bundle)
    }

    /// When the last datagram went, if any did.
    pub(crate) fn last_sent(&self) -> Option<Instant> {
        self.last_sent
    }

    /// The traffic figures as of `now`.
    pub(crate) fn traffic(&self, now: Instant) -> Traffic {
        self.meter.traffic(now)
    }

    /// Begins the link again at `now`, to another connection of the same
    /// other end (a client reconnecting): nothing heard or sent yet, no pong
    /// owed, a ping due at once and a datagram to go, the round trip to be
    /// measured again. The traffic meter counts on.
    pub(crate) fn restart(&mut self, now: Instant) {
        *self = Self {
            meter: core::mem::take(&mut self.meter),
            pace: self.pace.as_ref().map(|p| Pace::new(p.period())),
            ..Self::ready(now)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn a_ping_goes_out_when_due_and_its_pong_times_the_round_trip() {
        let mut l = Link::new(at(0));
        assert!(matches!(
            l.ping(at(0), Duration::from_secs(1)),
            Some(Message::Ping { stamp: 0 })
        ));
        l.sent(at(0), 40, Duration::from_secs(1), true);
        // The other end answers 80 ms later, having held it 10 ms.
        assert!(!l.heard(at(80)));
        l.ponged(at(80), (0, 10, 1, 1));
        assert_eq!(l.rtt(), Some(Duration::from_millis(70)));
        assert_eq!(l.ping(at(999), Duration::from_secs(1)), None);
        assert!(l.ping(at(1_000), Duration::from_secs(1)).is_some());
    }

    #[test]
    fn a_round_trip_longer_than_the_ping_interval_is_still_measured() {
        let second = Duration::from_secs(1);
        let mut l = Link::new(at(0));
        l.sent(at(0), 40, second, true);
        l.ponged(at(100), (0, 0, 1, 1));
        // A queue builds: pongs take 1.6 s, and pings keep going each
        // second meanwhile; each pong is still matched to its ping.
        l.sent(at(1_000), 40, second, true);
        assert!(l.ping(at(2_000), second).is_some());
        l.sent(at(2_000), 40, second, true);
        l.ponged(at(2_600), (1_000, 0, 2, 2));
        assert_eq!(
            l.rtt.latest().map(|(r, _)| r),
            Some(Duration::from_millis(1_600))
        );
        l.ponged(at(3_600), (2_000, 0, 3, 3));
        assert_eq!(
            l.rtt.latest().map(|(r, n)| (r.as_millis(), n)),
            Some((1_600, 3))
        );
        // The same pong again, or one for a ping never sent: nothing.
        l.ponged(at(3_700), (2_000, 0, 3, 3));
        l.ponged(at(3_700), (2_500, 0, 3, 3));
        assert_eq!(l.rtt.latest().map(|(_, n)| n), Some(3));
    }

    #[test]
    fn pings_without_pongs_hold_the_next_back_only_so_long() {
        let second = Duration::from_secs(1);
        let four = |l: &mut Link| {
            for k in 0..4 {
                l.ping_due = at(0);
                l.sent(at(k * 250), 40, second, true);
            }
            l.ping_due = at(0);
        };
        // Four await their pong: the fifth waits until the first is taken
        // as lost, twice the interval (and round trip) after it went.
        let mut l = Link::new(at(0));
        four(&mut l);
        assert_eq!(l.ping(at(1_999), second), None);
        assert!(l.ping(at(2_000), second).is_some());
        // A pong retires its ping and those before it.
        let mut l = Link::new(at(0));
        four(&mut l);
        l.ponged(at(1_200), (500, 0, 3, 3));
        assert!(l.ping(at(1_200), second).is_some());
    }

    #[test]
    fn an_untimed_ping_moves_the_schedule_and_measures_nothing() {
        let mut l = Link::new(at(0));
        l.sent(at(0), 40, Duration::from_secs(1), false);
        assert_eq!(l.ping(at(500), Duration::from_secs(1)), None);
        l.ponged(at(80), (0, 0, 1, 1));
        assert_eq!(l.rtt(), None);
    }

    #[test]
    fn a_pong_is_owed_once_and_paid_by_the_next_datagram() {
        let mut l = Link::new(at(0));
        assert_eq!(l.pong(at(5)), None);
        l.pinged_by(77, at(10));
        let Some(Message::Pong { stamp, held_ms, .. }) = l.pong(at(25)) else {
            panic!("a pong owed");
        };
        assert_eq!((stamp, held_ms), (77, 15));
        l.sent(at(25), 40, Duration::from_secs(1), true);
        assert_eq!(l.pong(at(30)), None);
    }

    #[test]
    fn sends_are_due_on_the_interval_after_the_last() {
        let mut l = Link::new(at(0));
        assert_eq!(l.send_due(at(3), Duration::from_millis(40)), at(3));
        l.sent(at(100), 40, Duration::from_secs(1), true);
        assert_eq!(l.send_due(at(3), Duration::from_millis(40)), at(140));
        assert_eq!(l.send_due(at(3), Duration::from_millis(250)), at(350));
    }

    #[test]
    fn silence_interrupts_once_and_a_datagram_recovers() {
        let mut l = Link::new(at(0));
        let after = Duration::from_secs(1);
        // Never heard: counts from the start only when told to.
        assert_eq!(l.interrupt(at(1_000), after, false), None);
        assert_eq!(l.interrupt_due(after, false), None);
        assert_eq!(l.interrupt_due(after, true), Some(at(1_000)));
        assert_eq!(l.interrupt(at(1_000), after, true), Some(after));
        assert_eq!(l.interrupt(at(2_000), after, true), None, "once");
        assert!(l.heard(at(2_100)), "recovered");
        assert!(!l.heard(at(2_200)));
        assert_eq!(l.interrupt_due(after, false), Some(at(3_200)));
        assert_eq!(l.interrupt(at(3_199), after, false), None);
        assert_eq!(
            l.interrupt(at(3_300), after, false),
            Some(Duration::from_millis(1_100))
        );
    }
}
