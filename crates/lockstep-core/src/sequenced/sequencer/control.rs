//! What a server asks of its room: pause and resume it, kick or let go
//! of a connection, say goodbye to everyone.

use super::*;

impl<I: Input> Sequencer<I> {
    /// Stops sealing ticks until [`resume`](Self::resume).
    pub fn pause(&mut self) {
        if self.paused() {
            return;
        }
        if let PauseChange::Began(_) = self.pause.request(self.open) {
            self.paused_at = Some(self.now);
            self.flush_all();
        }
    }

    /// Starts sealing again; the `Deadline` clock restarts from now, so no
    /// burst of ticks catches up the pause.
    pub fn resume(&mut self) {
        if let PauseChange::Lifted(_) = self.pause.resume() {
            self.paused_at = None;
            if self.clock.is_some() {
                self.clock = Some((self.now, self.open));
            }
            if self.solo_pace.is_some() {
                self.solo_pace = Some((self.now, self.open));
            }
            self.flush_all();
        }
    }

    /// Closes `peer` with a goodbye (kicked), freeing its seat: the stream
    /// records it as `Abandoned` (it did not choose to leave).
    pub fn kick(&mut self, peer: PeerId, text: &str) {
        if let Some(i) = self.conn_index(peer) {
            self.close(
                i,
                Closing::Bye(ByeReason::Kicked, text.to_owned()),
                DropReason::Kicked,
            );
        }
    }

    /// Sends `peer` its Welcome again (its Hello was repeated where the
    /// server cannot hand the datagram itself to the room, such as a plain
    /// Hello for a sealed connection). Changes nothing else: not even when
    /// `peer` was last heard from.
    pub fn resend_welcome(&mut self, peer: PeerId) {
        if let Some(i) = self.conn_index(peer) {
            let c = &mut self.conns[i];
            c.welcome_pending = true;
            c.link.flush = true;
        }
    }

    /// Ends `peer`'s connection because its transport closed (a WebSocket
    /// closed, say), as if it had timed out, without waiting for the
    /// silence: a player's seat is held for `seat_grace` from its last
    /// datagram (or emptied at once when the grace holds none).
    pub fn disconnect(&mut self, peer: PeerId) {
        if let Some(i) = self.conn_index(peer) {
            let reason = self.silence_reason(i);
            self.close(
                i,
                Closing::Bye(ByeReason::Timeout, "connection closed".into()),
                reason,
            );
        }
    }

    /// Says goodbye to everybody (the server is shutting down).
    pub fn shutdown(&mut self, text: &str) {
        for i in 0..self.conns.len() {
            if self.conns[i].closing.is_none() {
                self.close(
                    i,
                    Closing::Bye(ByeReason::Shutdown, text.to_owned()),
                    DropReason::Shutdown,
                );
            }
        }
    }

    /// Closes connection `i`: it is sent `closing` once, and its seat is
    /// empty from the open tick.
    pub(super) fn close(&mut self, i: usize, closing: Closing, reason: DropReason) {
        let c = &mut self.conns[i];
        if c.closing.is_some() {
            return;
        }
        c.closing = Some(closing);
        c.link.flush = true;
        let (peer, seat, last_heard) = (c.peer, c.seat, c.link.heard_or_since());
        if let Some(s) = seat {
            if reason == DropReason::Lost
                && let Some(held) = self.seats[s.index()].as_mut()
            {
                held.conn = None;
                held.lost = Some(last_heard);
            } else {
                let ev = match reason {
                    DropReason::Left => SystemEvent::Left { player: s },
                    _ => SystemEvent::Abandoned { player: s },
                };
                self.release_seat(s, ev);
            }
        }
        if let DropReason::Violation(..) = reason {
            self.stats.violations += 1;
        }
        self.push_event(SequencerEvent::Closed {
            peer,
            seat,
            tick: self.open,
            reason,
        });
    }

    /// Empties `seat` from the open tick on, saying so with `ev`.
    pub(super) fn release_seat(&mut self, seat: PlayerId, ev: SystemEvent) {
        self.seats[seat.index()] = None;
        // A newcomer on the seat starts with a clean record.
        self.resyncs.remove(&seat);
        self.add_tick_event(self.open, ev);
        self.waits.forget(seat);
    }

    pub(super) fn violation(&mut self, i: usize, code: ErrorCode, text: String) -> SequencerError {
        let peer = self.conns[i].peer;
        self.close(
            i,
            Closing::Error(code, text.clone()),
            DropReason::Violation(code, text.clone()),
        );
        SequencerError::Dropped { peer, code, text }
    }
}
