//! What a link's traffic shows: datagrams and bytes each way, their rates,
//! and the loss each way from the counts pongs carry.

use super::Rtt;
use crate::Instant;
use crate::shared::Rate;
use crate::wire::Message;
use core::time::Duration;
use std::collections::VecDeque;

/// What one connection's traffic shows: datagrams and bytes each way, the
/// bytes per second each way, and the share of datagrams lost each way.
///
/// Loss comes from counts the other end reports in its `Pong`: how many
/// datagrams it has received from us, and sent us, so far (wrapping u32).
/// Between two pongs, the datagrams it received against those we had sent
/// by each one's ping (which reaches it when the pong leaves) give the loss
/// on the way there; those we received against those it sent, the loss on
/// the way back. Each is smoothed with a gain of 1/4. A peer lying in its
/// counts changes only these figures.
///
/// Up to [`PINGS`] pings are outstanding at once, so a round trip longer
/// than the time between pings is still measured, and a lost ping or pong
/// costs one sample, not the next ones: a pong counts only for a ping still
/// outstanding, once, and retires the pings sent before it (their pongs,
/// overtaken, would be out of order). A peer can only answer late, which
/// it can do anyway.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LinkMeter {
    sent: u32,
    received: u32,
    bytes_up: Rate,
    bytes_down: Rate,
    /// The pings awaiting their pong, oldest first: each one's stamp, and
    /// our datagrams sent with it.
    pings: VecDeque<(u32, u32)>,
    /// The previous pong's counts: ours sent by its ping, theirs received,
    /// theirs sent, ours received when it came.
    last: Option<[u32; 4]>,
    loss_up: Option<f64>,
    loss_down: Option<f64>,
    /// Our datagrams lost and sent, over the last half minute or so (each
    /// pong's counts added, the sums decayed by `SLOW_DECAY`).
    slow_up: Option<(f64, f64)>,
    /// Our datagrams the last pong counted as not come, less those it
    /// counted as come that the one before had taken as lost (negative
    /// when more of those came): summed over pongs, what was really lost.
    net_lost_up: i64,
}

/// What the sums of the slow loss figure keep at each pong: with a pong a
/// second, about the last 32 seconds count.
const SLOW_DECAY: f64 = 31.0 / 32.0;

/// Most pings awaiting their pong at once.
pub(crate) const PINGS: usize = 4;

impl LinkMeter {
    /// A datagram of `len` bytes went to the other end.
    pub(crate) fn sent(&mut self, now: Instant, len: usize) {
        self.sent = self.sent.wrapping_add(1);
        self.bytes_up.add(now, len as u64);
    }

    /// A datagram of `len` bytes came from the other end.
    pub(crate) fn received(&mut self, now: Instant, len: usize) {
        self.received = self.received.wrapping_add(1);
        self.bytes_down.add(now, len as u64);
    }

    /// The counts a `Pong` about to go out carries: datagrams received from
    /// the other end, and sent to it with this one.
    pub(crate) fn counts(&self) -> (u32, u32) {
        (self.received, self.sent.wrapping_add(1))
    }

    /// The `Pong` answering a ping stamped `stamp` that arrived at `at`,
    /// about to go out at `now` with our counts.
    pub(crate) fn pong_to(&self, stamp: u32, at: Instant, now: Instant) -> Message<'static> {
        let held_ms = u32::try_from((now - at).as_millis()).unwrap_or(u32::MAX);
        let (received, sent) = self.counts();
        Message::Pong {
            stamp,
            held_ms,
            received,
            sent,
        }
    }

    /// Whether a ping may go at `now`: fewer than [`PINGS`] are awaiting
    /// their pong, not counting those sent `lost_after` or longer ago
    /// (taken as lost).
    pub(crate) fn ping_room(&self, now: Instant, lost_after: Duration) -> bool {
        let fresh = self
            .pings
            .iter()
            .filter(|(stamp, _)| !Self::ping_lost(*stamp, now, lost_after))
            .count();
        fresh < PINGS
    }

    fn ping_lost(stamp: u32, now: Instant, lost_after: Duration) -> bool {
        u128::from(Rtt::stamp(now).wrapping_sub(stamp)) >= lost_after.as_millis()
    }

    /// A ping stamped at `now` is about to go out: it awaits its pong (the
    /// pings sent `lost_after` or longer ago, or the oldest when
    /// [`PINGS`] are awaited, no longer do).
    pub(crate) fn pinged(&mut self, now: Instant, lost_after: Duration) {
        self.pings
            .retain(|(stamp, _)| !Self::ping_lost(*stamp, now, lost_after));
        if self.pings.len() >= PINGS {
            self.pings.pop_front();
        }
        self.pings
            .push_back((Rtt::stamp(now), self.sent.wrapping_add(1)));
    }

    /// The pong for ping `stamp` came at `now`, held `held_ms` by the other
    /// end, with its counts: the round trip goes to `rtt` if the ping is
    /// awaited. Returns the datagrams lost each way (there, back) since the
    /// previous pong.
    pub(crate) fn pong_came(
        &mut self,
        rtt: &mut Rtt,
        now: Instant,
        (stamp, held_ms, received, sent): (u32, u32, u32, u32),
    ) -> (u64, u64) {
        if self.pings.iter().any(|(s, _)| *s == stamp) {
            rtt.pong(now, stamp, held_ms);
        }
        self.pong(stamp, received, sent)
    }

    /// The pong for ping `stamp` came, with the other end's counts. Returns
    /// the datagrams lost each way (there, back) since the previous pong.
    pub(crate) fn pong(&mut self, stamp: u32, received: u32, sent: u32) -> (u64, u64) {
        let Some(k) = self.pings.iter().position(|(s, _)| *s == stamp) else {
            return (0, 0);
        };
        let (_, ours) = self.pings[k];
        self.pings.drain(..=k);
        let now = [ours, received, sent, self.received];
        let Some(last) = self.last.replace(now) else {
            return (0, 0);
        };
        let judge = |went: u32, came: u32, loss: &mut Option<f64>| {
            // Nothing went, or counts from before a restart (the other
            // end's counts went backwards, so a difference wraps).
            if went == 0 || went > 1 << 24 || came > went.saturating_mul(2).saturating_add(16) {
                return None;
            }
            let came = came.min(went);
            let lost = went - came;
            let sample = f64::from(lost) / f64::from(went);
            *loss = Some(loss.map_or(sample, |l| l + (sample - l) / 4.0));
            Some(lost)
        };
        let (went, came) = (now[0].wrapping_sub(last[0]), now[1].wrapping_sub(last[1]));
        let up = judge(went, came, &mut self.loss_up);
        self.net_lost_up = 0;
        if up.is_some() {
            self.net_lost_up = i64::from(went) - i64::from(came.min(went.saturating_mul(2)));
            // Unclamped: what one interval counts as lost (still on the
            // way when the pong left) the next counts as come.
            let (l, w) = self.slow_up.unwrap_or((0.0, 0.0));
            self.slow_up = Some((
                l * SLOW_DECAY + f64::from(went) - f64::from(came.min(went.saturating_mul(2))),
                w * SLOW_DECAY + f64::from(went),
            ));
        }
        // What the other end claims it sent is believed up to four times
        // what arrived (and a few more): a lying peer skews its own
        // figure, not totals built from it.
        let came = now[3].wrapping_sub(last[3]);
        let down = judge(
            now[2]
                .wrapping_sub(last[2])
                .min(came.saturating_mul(4).saturating_add(16)),
            came,
            &mut self.loss_down,
        );
        (up.map_or(0, u64::from), down.map_or(0, u64::from))
    }
}

impl LinkMeter {
    /// What the last pong showed of our datagrams lost on the way, net of
    /// those the pong before counted lost that were only late (see
    /// `net_lost_up`): summed over pongs, the loss.
    pub(crate) fn net_lost_up(&self) -> i64 {
        self.net_lost_up
    }

    /// The share of our datagrams lost on the way over the last half
    /// minute or so: steadier than [`Traffic::loss_up`], for choosing how
    /// hard to repeat what goes.
    pub(crate) fn slow_loss_up(&self) -> Option<f64> {
        self.slow_up
            .filter(|(_, sent)| *sent > 0.0)
            .map(|(lost, sent)| (lost / sent).clamp(0.0, 1.0))
    }
}

/// What a connection's traffic shows, for HUDs and logs.
///
/// `up` is from us to the other end, `down` back. Loss needs two pongs
/// (two pings, a second apart by default), rates a second of traffic.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct Traffic {
    /// The share of our datagrams lost on the way (0 to 1), smoothed.
    pub loss_up: Option<f64>,
    /// The share of the other end's datagrams lost on the way to us.
    pub loss_down: Option<f64>,
    /// Bytes per second we sent, over the last second.
    pub up_per_sec: Option<f64>,
    /// Bytes per second we received, over the last second.
    pub down_per_sec: Option<f64>,
}

impl LinkMeter {
    /// The figures as of `now`.
    pub(crate) fn traffic(&self, now: Instant) -> Traffic {
        Traffic {
            loss_up: self.loss_up,
            loss_down: self.loss_down,
            up_per_sec: self.bytes_up.per_sec(now),
            down_per_sec: self.bytes_down.per_sec(now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn loss_each_way_comes_from_the_counts_in_pongs() {
        let mut m = LinkMeter::default();
        let now = Instant::ZERO;
        // Round one: 1 datagram out (the ping), the other end got it and
        // sent 1 back (the pong).
        m.pinged(Instant::from_millis(1), SECOND);
        m.sent(now, 100);
        m.received(now, 100);
        assert_eq!(m.pong(1, 1, 1), (0, 0));
        assert_eq!(m.traffic(now).loss_up, None);
        // 100 out, of which the other end got 90; it sent 50, we got 40.
        for _ in 0..99 {
            m.sent(now, 100);
        }
        m.pinged(Instant::from_millis(2), SECOND);
        m.sent(now, 100);
        for _ in 0..40 {
            m.received(now, 100);
        }
        assert_eq!(m.pong(2, 91, 51), (10, 10));
        assert_eq!(m.traffic(now).loss_up, Some(0.1));
        assert_eq!(m.traffic(now).loss_down, Some(0.2));
        // A pong for no ping, or a repeat, changes nothing.
        assert_eq!(m.pong(2, 1_000, 1_000), (0, 0));
        assert_eq!(m.pong(9, 0, 0), (0, 0));
        assert_eq!(m.traffic(now).loss_up, Some(0.1));
        // Duplicates (more came than went) are no loss, not a gain.
        m.pinged(Instant::from_millis(3), SECOND);
        m.sent(now, 100);
        for _ in 0..3 {
            m.received(now, 100);
        }
        assert_eq!(m.pong(3, 93, 52), (0, 0));
        let up = m.traffic(now).loss_up.expect("measured");
        assert!((up - 0.075).abs() < 1e-9, "{up}");
    }

    #[test]
    fn the_slow_figure_counts_datagrams_on_the_way_as_late_not_lost() {
        let mut m = LinkMeter::default();
        let now = Instant::ZERO;
        let (mut sent, mut got) = (0u32, 0u32);
        for round in 0..40u32 {
            // 30 datagrams a round, none lost, but the pong leaves before
            // the last 3 arrive (every other round; they come after).
            for _ in 0..30 {
                m.sent(now, 100);
                sent += 1;
            }
            m.pinged(Instant::from_millis(u64::from(round)), SECOND);
            let on_the_way = if round % 2 == 0 { 3 } else { 0 };
            got = sent - on_the_way;
            m.pong(round, got, 1);
        }
        assert_eq!(got, sent);
        assert!(
            m.traffic(now).loss_up.expect("measured") > 0.0,
            "the quick figure is fooled"
        );
        assert!(
            m.slow_loss_up().expect("measured") < 1e-9,
            "{:?}",
            m.slow_loss_up()
        );
    }
}
