//! Time passing: every timer the room keeps, named in one table
//! ([`Timer`]), the earliest of which is [`Sequencer::poll_timeout`], and
//! what [`Sequencer::handle_timeout`] does when they come.

use super::*;
use crate::time::TimerTable;

/// A timer of the room: what it is for, and whose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// A datagram is due to the connection (a resend, a keepalive, a ping).
    Send(PeerId),
    /// The connection is dropped once silent this long (`timeout`).
    Silence(PeerId),
    /// A dropped player's seat is released (`seat_grace`).
    SeatGrace(PlayerId),
    /// The next tick is sealed (`Deadline`; a room that plays by itself).
    Seal,
    /// A pause ends by itself (`max_pause`).
    PauseEnds,
    /// Joiners stop waiting for others to share a snapshot with.
    JoinWait,
    /// The donor asked for a snapshot is given up.
    Donor,
    /// A joiner's snapshot chunks are due again.
    Chunks(PeerId),
    /// A joiner that stopped acknowledging its snapshot is dropped.
    Receiver(PeerId),
    /// The room says whom it waits on (`WaitForAll`).
    Blocked,
    /// A seat holding the open tick up is abandoned (`abandon_after`).
    Abandon(PlayerId),
}

impl<I: Input> Sequencer<I> {
    /// Lets timers fire: seals due ticks, drops silent connections, resends.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        let now = self.now;
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            if c.closing.is_none() && c.link.silent_for(now) >= self.config.timeout {
                let reason = self.silence_reason(i);
                self.close(i, Closing::Bye(ByeReason::Timeout, String::new()), reason);
            }
        }
        // A player handed over that is not back within `abandon_after`
        // holds nobody up any more (its seat is held as any dropped one).
        if let Policy::WaitForAll { abandon_after } = self.config.policy {
            for s in self.seats.iter_mut().flatten() {
                if s.handed_over && s.lost.is_some_and(|t| now - t >= abandon_after) {
                    s.handed_over = false;
                }
            }
        }
        for k in 0..self.seats.len() {
            let expired = self.seats[k]
                .as_ref()
                .and_then(|s| s.lost)
                .is_some_and(|t| now - t >= self.config.seat_grace);
            if expired {
                let seat = PlayerId(k as u16);
                self.release_seat(seat, SystemEvent::Left { player: seat });
                self.push_event(SequencerEvent::SeatReleased {
                    seat,
                    tick: self.open,
                });
            }
        }
        if self
            .paused_at
            .is_some_and(|at| now - at >= self.config.max_pause)
        {
            self.resume();
        }
        self.seal_due();
        self.progress_joins();
        self.refresh_roster();
        for i in 0..self.conns.len() {
            let chunk_due = !self.conns[i].link.chunk_starved
                && matches!(&self.conns[i].join, Some(Join::Receiving(tx)) if tx.has_due(now));
            if self.send_due(i) <= now || chunk_due {
                self.conns[i].link.flush = true;
            }
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) next needs calling.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_timer().map(|(at, _)| at)
    }
}

impl<I: Input> TimerTable for Sequencer<I> {
    type Timer = Timer;

    /// Every timer the room keeps, with when it comes. Each is worked out
    /// from the state it serves, so none outlives it.
    fn each_timer(&self, mut timer: impl FnMut(Timer, Instant)) {
        for (i, c) in self.conns.iter().enumerate() {
            timer(Timer::Send(c.peer), self.send_due(i));
            timer(
                Timer::Silence(c.peer),
                c.link.heard_or_since() + self.config.timeout,
            );
        }
        for (k, seat) in self.seats.iter().enumerate() {
            if let Some(t) = seat.as_ref().and_then(|s| s.lost) {
                timer(
                    Timer::SeatGrace(PlayerId(k as u16)),
                    t + self.config.seat_grace,
                );
            }
        }
        if let Some(t) = self.next_seal_at() {
            timer(Timer::Seal, t);
        }
        if let Some(t) = self.solo_seal_at() {
            timer(Timer::Seal, t);
        }
        if let Some(t) = self.ready_wait_ends() {
            timer(Timer::Seal, t);
        }
        if let Some(at) = self.paused_at {
            timer(Timer::PauseEnds, at + self.config.max_pause);
        }
        if let Some(t) = self.join_due() {
            timer(Timer::JoinWait, t);
        }
        if let Some(f) = &self.fetch {
            timer(Timer::Donor, f.clock.deadline(self.config.donor_timeout));
        }
        for c in &self.conns {
            if let Some(Join::Receiving(tx)) = &c.join {
                if let Some(t) = tx.next_resend().filter(|_| !c.link.chunk_starved) {
                    timer(Timer::Chunks(c.peer), t);
                }
                if let Some(t) = donor::receiver_deadline(tx, self.config.donor_timeout) {
                    timer(Timer::Receiver(c.peer), t);
                }
            }
        }
        // Nothing is sealed in a pause, nor anyone abandoned for holding a
        // tick up: those timers wait for the resume (a deadline that
        // passed meanwhile is acted on then).
        if let (Policy::WaitForAll { abandon_after }, false) = (self.config.policy, self.paused()) {
            // Saying whom the room waits on, once it has waited a tick (a
            // time already past is still due: a datagram may have moved
            // the clock past it before any call saw to it).
            if let Some(t) = self.waits.names_at() {
                timer(Timer::Blocked, t);
            }
            for s in self.waits.named() {
                if let Some(seat) = &self.seats[s.index()] {
                    let since = seat.waited_since.unwrap_or(self.now);
                    timer(
                        Timer::Abandon(*s),
                        seat.last_input.max(since) + abandon_after,
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_room_keeps_no_timer_until_it_is_paused() {
        let now = Instant::from_millis(5);
        let mut s = Sequencer::<u8>::new(SequencerConfig::default(), now).unwrap();
        assert_eq!(s.next_timer(), None);
        s.pause();
        let end = now + s.config.max_pause;
        assert_eq!(s.next_timer(), Some((end, Timer::PauseEnds)));
        assert_eq!(s.poll_timeout(), Some(end));
        s.resume();
        assert_eq!(s.next_timer(), None);
    }
}
