//! Time passing: every timer the client keeps, named in one table
//! ([`Timer`]), the earliest of which is [`ClientSession::poll_timeout`],
//! and what [`ClientSession::handle_timeout`] does when they come.

use super::*;
use crate::time::TimerTable;

/// A timer of the client: what it is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// A datagram is due (the Hello until answered, a resend, a
    /// keepalive, a ping, a goodbye repeated).
    Send,
    /// The connection is given up once the server is silent this long
    /// (`timeout`).
    Silence,
    /// The chunks of the snapshot we donate are due again.
    Chunks,
    /// The server is reported interrupted (`interrupt_after`).
    Interrupt,
    /// A question about the hash chain is due again, or the search gives
    /// up.
    Question,
    /// A resync whose snapshot never started is given up.
    ResyncWait,
    /// The game has waited two tick periods for its next frame: a stall
    /// begins (counted, and `stalled()` holds, whatever the loop asks).
    Stall,
}

impl<I: Input> ClientSession<I> {
    /// Lets timers fire: the Hello until answered, resends, keepalives and
    /// the connection timeout.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        let now = self.now;
        if matches!(self.state, State::Closed(_)) {
            if self.saying_goodbye() && self.send_due() <= now {
                self.link.flush = true;
            }
            return;
        }
        if self.link.silent_for(now) >= self.config.timeout {
            // A redirect nobody followed is what kept us from the room.
            self.close(match self.redirect {
                Some(to) => CloseReason::Rejected(Rejection::Moved(to)),
                None => CloseReason::TimedOut,
            });
            return;
        }
        if let Some(silent) = self.link.interrupt(now, self.config.interrupt_after, false) {
            self.push_event(Event::Interrupted {
                peer: self.server,
                player: None,
                silent_for: silent,
            });
        }
        let chunk_due = !self.link.chunk_starved
            && self
                .donation
                .as_ref()
                .and_then(|d| d.sender.as_ref())
                .is_some_and(|tx| tx.has_due(now));
        if let Some(o) = self.server_checks.progress(now) {
            self.check_outcome(o);
        }
        // A resync whose snapshot never started is given up.
        if let Some(j) = &self.joining
            && j.tick.is_none()
            && let Some((since, previous)) = j.resync_wait
            && now >= since + RESYNC_WAIT
        {
            self.joining = None;
            self.resynced = previous;
        }
        let question_due = self.server_checks.question_due().is_some_and(|d| d <= now);
        if self.send_due() <= now || chunk_due || question_due {
            self.link.flush = true;
        }
        if self.stall_due().is_some_and(|at| at <= now) {
            self.note_stall();
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) next needs calling.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_timer().map(|(at, _)| at)
    }
}

impl<I: Input> TimerTable for ClientSession<I> {
    type Timer = Timer;

    /// Every timer the client keeps, with when it comes. Each is worked
    /// out from the state it serves, so none outlives it.
    fn each_timer(&self, mut timer: impl FnMut(Timer, Instant)) {
        if matches!(self.state, State::Closed(_)) {
            if self.saying_goodbye() {
                timer(Timer::Send, self.send_due());
            }
            return;
        }
        if self.redirect.is_none() {
            timer(Timer::Send, self.send_due());
        }
        timer(
            Timer::Silence,
            self.link.heard_or_since() + self.config.timeout,
        );
        if let Some(r) = self
            .donation
            .as_ref()
            .and_then(|d| d.sender.as_ref())
            .filter(|_| !self.link.chunk_starved)
            .and_then(|tx| tx.next_resend())
        {
            timer(Timer::Chunks, r);
        }
        if let Some(i) = self.link.interrupt_due(self.config.interrupt_after, false) {
            timer(Timer::Interrupt, i);
        }
        if let Some(q) = self.server_checks.question_due() {
            timer(Timer::Question, q);
        }
        if let Some((since, _)) = self
            .joining
            .as_ref()
            .filter(|j| j.tick.is_none())
            .and_then(|j| j.resync_wait)
        {
            timer(Timer::ResyncWait, since + RESYNC_WAIT);
        }
        if let Some(at) = self.stall_due() {
            timer(Timer::Stall, at);
        }
    }
}
