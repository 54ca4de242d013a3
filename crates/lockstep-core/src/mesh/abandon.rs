//! Giving up on a silent player without two peers ever disagreeing.
//!
//! 1. Someone wants seat `c` abandoned (the game called `abandon`, or `c` was
//!    silent for `abandon_after`). Wanting spreads: every packet lists the
//!    wanted seats, and a peer that hears of one wants it too.
//! 2. A peer that wants `c` stops taking `c`'s input from `c` itself, so how
//!    far it holds `c`'s input is frozen, and says how far in every packet
//!    (its ack for `c`). Peers forward `c`'s input to whoever holds less.
//! 3. The decider, the lowest seat neither abandoned nor wanted, waits until
//!    every other live seat has reported, and until it holds as much of
//!    `c`'s input as the best of them. That point `T` is the first tick no
//!    peer holds `c`'s input for, so no peer can have run it.
//! 4. The decision `(c, T)` travels in every packet until every peer is past
//!    `T`; each peer empties `c`'s slot from `T` on, whatever it held, and
//!    marks frame `T` with `SystemEvent::Abandoned`.
//!
//! The one case this cannot make safe is the decider itself failing after
//! some peers received its decision and before others did, while another
//! player is also being abandoned: a later decider may then pick another
//! tick. A peer that receives a decision contradicting one it applied says
//! so with `Event::AbandonConflict`.

use super::MeshSession;
use super::store::Cell;
use crate::frame::SystemEvent;
use crate::{Event, Input, PlayerId, Tick};

impl<I: Input> MeshSession<I> {
    pub(super) fn want(&mut self, seat: PlayerId) {
        if self.seats[seat.index()].empty_from.is_some() || !self.wanted.insert(seat) {
            return;
        }
        self.push_event(Event::AbandonRequested { player: seat });
        for p in self.peers.iter_mut().filter(|p| p.seat.is_some()) {
            p.flush = true;
        }
    }

    /// If this peer decides for a wanted seat and every live peer has
    /// reported, declares the seat empty from the first tick nobody holds.
    pub(super) fn try_decide(&mut self) {
        let Some(me) = self.local_seat else { return };
        if !self.seat_live(me) {
            return;
        }
        let targets: Vec<PlayerId> = self.wanted.iter().copied().filter(|&c| c != me).collect();
        for c in targets {
            if self.live_seats().next() != Some(me) {
                return;
            }
            let mut highest = Tick::ZERO;
            let mut ready = true;
            for s in self.live_seats().filter(|&s| s != me) {
                let report = self
                    .peers
                    .iter()
                    .find(|p| p.seat == Some(s))
                    .filter(|p| p.wanted.contains(&c))
                    .and_then(|p| p.acks[c.index()]);
                match report {
                    Some(t) => highest = highest.max(t),
                    None => {
                        ready = false;
                        break;
                    }
                }
            }
            let own = self.contiguous(c);
            if ready && own >= highest {
                self.apply_decision(c, own);
            }
        }
    }

    pub(super) fn apply_decision(&mut self, seat: PlayerId, from: Tick) {
        let i = seat.index();
        if self.seats[i].peer.is_none() {
            return;
        }
        if let Some(kept) = self.seats[i].empty_from {
            if kept != from {
                self.push_event(Event::AbandonConflict {
                    player: seat,
                    kept,
                    received: from,
                });
            }
            return;
        }
        if from < self.next_tick {
            // We already ran past the tick: only possible if the decider
            // failed mid-decision. Apply from here on and say so.
            self.push_event(Event::AbandonConflict {
                player: seat,
                kept: self.next_tick,
                received: from,
            });
        }
        let effective = from.max(self.next_tick);
        self.seats[i].empty_from = Some(effective);
        self.ignore_checksums_of(seat, from);
        self.decisions.push((seat, from));
        self.wanted.remove(&seat);
        for (tick, slot) in self.store.iter_from_mut(effective) {
            slot.cells[i] = Cell::Empty;
            if tick == effective {
                slot.add_event(SystemEvent::Abandoned { player: seat });
            }
        }
        self.push_event(Event::Abandoned {
            player: seat,
            from: effective,
        });
        self.flush_all();
    }
}
