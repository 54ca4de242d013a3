//! Time passing: resends and keepalives, silence, automatic
//! abandonment. Every timer the session keeps is named in one table
//! ([`Timer`]); the earliest is [`MeshSession::poll_timeout`].

use super::*;
use crate::time::TimerTable;

/// A timer of the session: what it is for, and whose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// A datagram is due to the peer (a resend, a keepalive, a ping).
    Send(PeerId),
    /// The peer is reported interrupted (`interrupt_after`).
    Interrupt(PeerId),
    /// A seat silent, or sending no input, for `abandon_after` is voted
    /// out.
    Abandon(PlayerId),
    /// Another voter's vote starts (or stops) counting towards freezing a
    /// seat (or keeping it frozen), having stood (or been gone) for
    /// `vote_hold`.
    Hold,
    /// A lost chunk of a snapshot for an observer is due again, or a
    /// request for one is repeated.
    Snapshot,
    /// A resync's donor is given up, or its end comes.
    Resync,
    /// A question about the hash chain is due again, or the search gives
    /// up.
    Question(PeerId),
    /// Whom our next tick waits on becomes worth naming.
    Waits,
    /// The game has waited two tick periods for its next frame: a stall
    /// begins (counted, whatever the loop asks).
    Stall,
}

impl<I: Input> MeshSession<I> {
    /// Lets due timers fire: resends, keepalives, silence detection and
    /// automatic abandonment.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        let now = self.now;
        // Only time has passed since the last call that did work, and no
        // timer has come: every step below would find what it found then.
        // (A game loop calls this far more often than anything happens.)
        if self.quiet_until.is_some_and(|q| now < q) {
            // Every timer's instant follows from state alone, so none can
            // have come sooner than the last call saw.
            debug_assert!(
                self.poll_timeout().is_none_or(|t| t > now),
                "a timer came sooner than foreseen"
            );
            return;
        }
        // Worked out at the end, unless a step below leaves work for the
        // next call (and clears it).
        self.quiet_until = Some(Instant::ZERO);
        self.may_flush = true;
        self.note_waiting();
        let mut silent_seats = Vec::new();
        for i in 0..self.peers.len() {
            if self.send_due(i) <= now {
                self.peers[i].link.flush = true;
            }
            let (id, seat) = (self.peers[i].id, self.peers[i].seat);
            let quiet = self.config.interrupt_after;
            // A peer that said goodbye is gone, not interrupted.
            if let Some(silent) = self.peers[i].link.interrupt(now, quiet, true)
                && !self.peers[i].left
            {
                self.push_event(Event::Interrupted {
                    peer: id,
                    player: seat,
                    silent_for: silent,
                });
            }
            let silent = self.peers[i].link.silent_for(now);
            if let (Some(after), Some(seat)) = (self.config.abandon_after, seat)
                && (silent >= after || self.input_silent_until(i, after).is_some_and(|t| t <= now))
                && self.can_auto_abandon(seat)
            {
                silent_seats.push(seat);
            }
        }
        for seat in silent_seats {
            self.vote(seat);
        }
        self.progress_searches();
        self.plan_resync();
        self.progress_abandonments();
        self.plan_snapshots();
        self.flush_chunks();
        self.drop_passed_snapshot();
        self.note_arrivals();
        if self.stall_due().is_some_and(|at| at <= now) {
            self.note_stall();
        }
        if self.quiet_until.is_some() {
            let next = self.poll_timeout();
            self.quiet_until = Some(next.unwrap_or(Instant::from_micros(u64::MAX)));
        }
    }

    /// Something besides time passing may have changed the session: the
    /// next [`handle_timeout`](Self::handle_timeout) does its work.
    pub(super) fn stir(&mut self) {
        self.quiet_until = None;
        self.may_flush = true;
    }

    /// When [`handle_timeout`](Self::handle_timeout) next needs calling:
    /// at once when something besides time changed the session since it
    /// last did its work (a datagram came, the game committed or ran a
    /// frame), as what that changed is worked out there (whom our next
    /// tick waits on, searches, snapshots); else at the next timer.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.quiet_until.is_none() {
            return Some(self.now);
        }
        self.next_timer().map(|(at, _)| at)
    }

    /// Marks since when our next tick has waited on a remote seat whose own
    /// datagrams say it waits on nobody but itself: it holds every other
    /// seat's input and sends none of its own. A seat stalled behind someone
    /// else (no peer commits far past the slowest) says so and is never
    /// blamed; a silent connection is caught by datagram silence anyway.
    ///
    /// Also names whom our next tick waits on once it has waited a tick
    /// period and their links' jitter (see [`wait`]): the peers it names,
    /// or names no more, hear it at once.
    pub(super) fn note_waiting(&mut self) {
        let now = self.now;
        let mut missing = core::mem::take(&mut self.missing);
        self.awaiting_into(&mut missing);
        self.note_waiting_on(&missing, now);
        self.missing = missing;
    }

    fn note_waiting_on(&mut self, missing: &[PlayerId], now: Instant) {
        // Nothing awaited, named or blamed: nothing changes.
        if missing.is_empty()
            && self.waits.0.idle()
            && self.peers.iter().all(|p| p.waited_since.is_none())
        {
            self.waits.1 = self.next_tick;
            return;
        }
        let jitter = self
            .peers
            .iter()
            .filter(|p| p.seat.is_some_and(|s| missing.contains(&s)))
            .filter_map(|p| p.link.jitter())
            .max()
            .unwrap_or_default();
        let after = wait::worth_naming_after(self.period(), jitter);
        let (waits, tick) = &mut self.waits;
        if *tick != self.next_tick {
            waits.clear();
            *tick = self.next_tick;
        }
        if let Some(old) = waits.update(missing, now, after) {
            let named = waits.named();
            for p in &mut self.peers {
                if p.seat
                    .is_some_and(|s| old.contains(&s) != named.contains(&s))
                {
                    p.link.flush = true;
                }
            }
        }
        let local = self.local_seat;
        // Only while our own input is in: a tick we have not committed for
        // waits on us too.
        let ours_in = local.is_some_and(|me| !missing.contains(&me));
        for p in &mut self.peers {
            let blamed = ours_in
                && p.waits_on_itself
                && p.seat
                    .is_some_and(|x| Some(x) != local && missing.contains(&x));
            if blamed {
                p.waited_since.get_or_insert(now);
            } else {
                p.waited_since = None;
            }
        }
    }

    /// When peer `i` counts as silent for want of input: `after` past the
    /// later of its last new input and when we began waiting on it.
    pub(super) fn input_silent_until(&self, i: usize, after: Duration) -> Option<Instant> {
        let p = &self.peers[i];
        let since = p.waited_since?;
        Some(p.last_input.map_or(since, |t| t.max(since)) + after)
    }

    pub(super) fn send_due(&self, i: usize) -> Instant {
        let p = &self.peers[i];
        let resend = p.link.send_due(self.started, self.config.resend_interval);
        let keepalive = p
            .link
            .send_due(self.started, self.config.keepalive_interval);
        if !p.link.sent_any() {
            return keepalive;
        }
        // Our inputs make a datagram go by themselves (see `inputs_due`),
        // whatever else is due.
        let inputs = self.inputs_due(i);
        let or_inputs = |at: Instant| inputs.map_or(at, |i| i.min(at));
        if self.has_news(p) {
            return or_inputs(resend);
        }
        // Time alone makes a full checkpoint it has not acknowledged news.
        or_inputs(
            p.checks
                .news_at(&self.checks)
                .map_or(keepalive, |at| keepalive.min(at.max(resend))),
        )
    }

    /// Whether `p` may lack something only we can tell it.
    pub(super) fn has_news(&self, p: &Peer) -> bool {
        if p.incompatible.is_some() {
            return p.refused.is_some();
        }
        // Our progress is news: a peer held back by the lead limit waits
        // for it.
        if p.ack_pending
            || p.checks.has_news(&self.checks, self.now)
            || !p.welcomed
            || p.owe_welcome
            || self.leaving
            || p.told_next < self.next_tick
            || self.pause.frame().is_some()
            || self.resync_request(p.id).is_some()
        {
            return true;
        }
        if self.local_seat.is_none() {
            return false;
        }
        if self.pause.lifted() > p.lifted_known {
            return true;
        }
        if p.seat.is_none() {
            // One behind every frame held is fed a snapshot instead.
            return self.is_feeder()
                && p.next_tick >= self.store.base()
                && p.next_tick < self.min_live_next();
        }
        // (Our own inputs go on their own schedule: see `inputs_due`.)
        !self.frozen.is_empty() || self.endorsed.values().any(|e| e.from >= p.next_tick)
    }
}

impl<I: Input> TimerTable for MeshSession<I> {
    type Timer = Timer;

    /// Every timer the session keeps, with when it comes. Each is worked
    /// out from the state it serves, so none outlives it.
    fn each_timer(&self, mut timer: impl FnMut(Timer, Instant)) {
        for i in 0..self.peers.len() {
            let p = &self.peers[i];
            timer(Timer::Send(p.id), self.send_due(i));
            let heard = p.link.heard_or_since();
            if let Some(t) = p.link.interrupt_due(self.config.interrupt_after, true) {
                timer(Timer::Interrupt(p.id), t);
            }
            if let (Some(after), Some(seat)) = (self.config.abandon_after, p.seat)
                && self.can_auto_abandon(seat)
            {
                timer(Timer::Abandon(seat), heard + after);
                if let Some(t) = self.input_silent_until(i, after) {
                    timer(Timer::Abandon(seat), t);
                }
            }
        }
        if let Some(t) = self.hold_due() {
            timer(Timer::Hold, t);
        }
        if let Some(t) = self.snapshot_timeout() {
            timer(Timer::Snapshot, t);
        }
        if let Some(t) = self.resync_timeout() {
            timer(Timer::Resync, t);
        }
        for p in &self.peers {
            if let Some(t) = p.checks.question_due() {
                timer(Timer::Question(p.id), t);
            }
        }
        if let Some(t) = self.waits.0.names_at() {
            timer(Timer::Waits, t);
        }
        if let Some(t) = self.stall_due() {
            timer(Timer::Stall, t);
        }
    }
}
