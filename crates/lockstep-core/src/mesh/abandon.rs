//! Giving up on a silent player without two honest peers ever disagreeing,
//! whatever one dishonest peer sends.
//!
//! 1. **Votes.** A peer votes to abandon seat `c` when `c` has been silent
//!    for `abandon_after` (no datagrams, or no input while it holds everyone
//!    else's), when `c` said goodbye, or when the game calls `abandon`.
//!    Votes travel in every packet and are never withdrawn; a vote alone
//!    changes nothing.
//! 2. **Freezing.** Once a strict majority of `c`'s voters (the other
//!    players still in the game and heard from lately) vote for `c`, as far
//!    as this peer has heard, it freezes `c`: it stops taking `c`'s input
//!    from `c` itself (so how far it holds that input is fixed), forgets
//!    what it held of it past the first tick it lacks (inputs arrive in any
//!    order), and says how far in every packet (its ack for `c`). Peers forward `c`'s input to
//!    whoever holds less. Forwarded input is held and passed on but never
//!    run on the forwarder's word. A peer whose majority for `c` goes away
//!    (the votes came from a peer since voted out, or reached only it)
//!    thaws `c` again, unless it has endorsed a decision for it. Another
//!    voter's vote counts towards freezing once all its packets have
//!    carried it for `vote_hold`, and towards keeping `c` frozen until it
//!    has been gone from them that long: a packet forged in a voter's name
//!    says something only until the voter's next one, and a packet sent
//!    before a vote may arrive after one carrying it. A seat whose player
//!    said goodbye to this peer freezes on the votes as they are.
//! 3. **Proposal.** The decider, the lowest live seat (seated, neither
//!    abandoned nor frozen), waits until every other live seat reports `c`
//!    frozen, and until it holds as much of `c`'s input as the best of them.
//!    That point `T` is the first tick no peer holds `c`'s input for, so no
//!    peer can have run it. The decider endorses `(c, T)` with a digest of
//!    `c`'s input in the [`window`](MeshSession::abandon_window) before `T`.
//! 4. **Endorsement.** Every other live peer that has frozen `c`, has not run
//!    tick `T`, does not hold `c`'s own input for `T` (so cannot run it
//!    before the decision applies) and holds `c`'s input up to `T` endorses
//!    the decider's `(c, T)` (or one a live peer already applied) with the
//!    digest of the input it holds itself. An endorsement never changes.
//! 5. **Applying.** A peer applies `(c, T)` once every live seat other than
//!    `c` endorses it with one digest, those endorsers are a strict majority
//!    of `c`'s voters, and no seat still in the game (frozen ones included)
//!    endorses anything else: forwarded input before `T` becomes known,
//!    `c`'s slot is empty from `T` on, and frame `T` carries
//!    `SystemEvent::Abandoned`.
//!
//! Why one dishonest peer cannot make two honest ones differ: each applies
//! only what every live seat endorsed, the other included (or, if it froze
//! the other, what the other does not contradict), and neither ever
//! endorses two decisions for one seat, so both apply the same `T`. Equal
//! digests mean both hold the same input for every tick in the window, and
//! the window reaches back past every tick either may still hold forwarded
//! input for; anything older both ran on input straight from `c`, which is
//! only ever told how far its own input is held. No endorser can have run
//! `T` (it ran none, and holds nothing it could run, at or past `T`). A
//! dishonest peer can withhold or spoil its endorsement, which stalls the
//! abandonment (raising [`Event::AbandonDisputed`]) until the honest peers
//! vote it out in turn (its own seat's abandonment does not need its word);
//! as the decider it can also split the honest peers' endorsements, which
//! stalls that abandonment for good: the price of endorsements that never
//! change.

use super::MeshSession;
use super::members::Peer;
use super::store::Cell;
use crate::wire::Endorsement;
use crate::{Event, Input, Instant, PlayerId, Tick};
use sha2::{Digest, Sha256};

impl<I: Input> MeshSession<I> {
    /// Votes to abandon `seat` (never withdrawn).
    pub(super) fn vote(&mut self, seat: PlayerId) {
        if self.seats[seat.index()].empty_from.is_some() || !self.votes.insert(seat) {
            return;
        }
        self.push_event(Event::AbandonRequested { player: seat });
        for p in self.peers.iter_mut().filter(|p| p.seat.is_some()) {
            p.link.flush = true;
        }
    }

    /// Moves every abandonment on as far as what this peer has heard allows:
    /// freezes seats a majority voted for, proposes or endorses decisions,
    /// and applies those every live seat endorsed.
    pub(super) fn progress_abandonments(&mut self) {
        let Some(me) = self.local_seat else { return };
        if self.seats[me.index()].empty_from.is_some() || self.abandon_quiet() {
            return;
        }
        self.freeze_majorities(me);
        if self.seat_live(me) {
            let frozen: Vec<PlayerId> = self.frozen.keys().copied().collect();
            for c in frozen {
                self.endorse(me, c);
            }
        }
        self.apply_agreed(me);
    }

    /// Whether nothing is voted, frozen or endorsed anywhere: no seat to
    /// freeze, thaw or abandon (the common case, told without a pass over
    /// every seat).
    fn abandon_quiet(&self) -> bool {
        self.votes.is_empty()
            && self.frozen.is_empty()
            && self.endorsed.is_empty()
            && self
                .peers
                .iter()
                .all(|p| p.votes.is_empty() && p.endorsed.is_empty())
    }

    /// The players whose votes count on `seat`: seated, not abandoned, not
    /// `seat`, heard from lately (a peer silent past `interrupt_after`
    /// cannot vote, so two players crashing together do not leave the last
    /// one waiting for a majority it can never get) and not gone (a peer
    /// that said goodbye votes no more).
    fn voters(&self, seat: PlayerId) -> Vec<PlayerId> {
        (0..self.seats.len())
            .filter_map(super::seat_id)
            .filter(|&v| {
                let s = &self.seats[v.index()];
                v != seat
                    && s.peer.is_some()
                    && s.empty_from.is_none()
                    && (Some(v) == self.local_seat
                        || self
                            .peer_of(v)
                            .is_some_and(|p| !p.link.interrupted() && !p.left))
            })
            .collect()
    }

    /// Freezes every seat a strict majority of its voters voted for, and
    /// thaws a frozen seat whose majority is gone (its votes came from a
    /// peer since voted out, or reached only some peers) as long as this
    /// peer has endorsed nothing for it: no decision can have used it.
    ///
    /// Each voter's word is its latest datagram's, and mesh datagrams are
    /// not sealed: a datagram forged in a voter's name says something only
    /// until the voter's next one. So another voter's vote counts towards
    /// freezing once every datagram from it has carried it for
    /// `vote_hold`, and towards keeping a seat frozen until it has been
    /// gone from them that long (see [`VoteWord`](super::members::VoteWord)).
    /// Freezing on a forged vote at once let forgeries in several voters'
    /// names, each sent after the voter's every datagram, freeze an honest
    /// player everywhere long enough to decide it; thawing at once on a
    /// datagram sent before a vote but read after one carrying it let us
    /// take the player's input past the tick we reported holding, which a
    /// decision may already stand on (no peer could then ever endorse it).
    /// Our own vote counts at once, and a seat whose player said goodbye
    /// to us freezes on the votes as they are: its own word is enough.
    pub(super) fn freeze_majorities(&mut self, me: PlayerId) {
        if self.abandon_quiet() {
            return;
        }
        let (now, hold) = (self.now, self.config.vote_hold);
        for c in (0..self.seats.len()).filter_map(super::seat_id) {
            let s = &self.seats[c.index()];
            if c == me || s.peer.is_none() || s.empty_from.is_some() {
                continue;
            }
            let voters = self.voters(c);
            let said_bye = self.peer_of(c).is_some_and(|p| p.left);
            let count = |word: &dyn Fn(&Peer) -> bool| {
                voters
                    .iter()
                    .filter(|&&v| {
                        if v == me {
                            self.votes.contains(&c)
                        } else {
                            self.peer_of(v).is_some_and(word)
                        }
                    })
                    .count()
            };
            let majority = |n: usize| n * 2 > voters.len();
            let frozen = self.frozen.contains_key(&c);
            if !frozen {
                let stands = majority(count(&|p| p.vote_stands(c, now, hold)));
                if !(stands || (said_bye && majority(count(&|p| p.votes.contains(&c))))) {
                    continue;
                }
                let held = self.held_own(c);
                self.forget_own_past(c, held);
                self.frozen.insert(c, held);
                self.flush_all();
            } else if !self.endorsed.contains_key(&c)
                && !majority(count(&|p| p.vote_lingers(c, now, hold)))
            {
                // Input forwarded meanwhile stays (what we told other peers
                // we hold stays true) until the player's own replaces it:
                // the player itself is told how far we hold its own.
                self.frozen.remove(&c);
                self.flush_all();
            }
        }
    }

    /// When another voter's vote next starts or stops counting (see
    /// [`freeze_majorities`](Self::freeze_majorities)), while we play (an
    /// abandoned peer weighs no votes).
    pub(super) fn hold_due(&self) -> Option<Instant> {
        let me = self.local_seat?;
        if self.seats[me.index()].empty_from.is_some() {
            return None;
        }
        let (now, hold) = (self.now, self.config.vote_hold);
        self.peers
            .iter()
            .filter_map(|p| p.vote_word_due(now, hold))
            .min()
    }

    /// Forgets `c`'s own input for ticks from `held` on: inputs go in any
    /// order, so some may have come past a tick still missing. How far we
    /// hold `c`'s own input is then all we hold of it, as the decider takes
    /// it to be: no tick at or past a decision's can be run here (what
    /// others forward meanwhile is never run on their word), and none is
    /// counted twice. Should the seat thaw, `c` sends them again.
    fn forget_own_past(&mut self, c: PlayerId, held: Tick) {
        for (_, slot) in self.store.iter_from_mut(held) {
            if let Some(cell) = slot.cells.get_mut(c.index())
                && matches!(cell, Cell::Known(_))
            {
                *cell = Cell::Unknown;
            }
        }
    }

    /// Endorses, once and for good, a decision on the frozen seat `c`: one
    /// a live peer already applied, else the one the decider stands for
    /// (making it, when this peer decides).
    fn endorse(&mut self, me: PlayerId, c: PlayerId) {
        if self.endorsed.contains_key(&c) {
            return;
        }
        let Some(decider) = self.live_seats().next() else {
            return;
        };
        // A live peer that endorses a decision and no longer lists the seat
        // frozen has applied it: nothing else can ever complete.
        let applied = self.live_seats().filter(|&s| s != me).find_map(|s| {
            let p = self.peer_of(s)?;
            let e = p.endorsed.iter().find(|e| e.seat == c)?;
            (!p.frozen.iter().any(|(f, _)| *f == c)).then_some((e.from, e.left, p.id))
        });
        // The decider says whether the player left (it heard its goodbye)
        // or went silent; everyone else repeats its word.
        let (from, left, proposer) = if let Some((t, left, peer)) = applied {
            (t, left, Some(peer))
        } else if decider == me {
            match self.proposal(me, c) {
                Some(t) => (t, self.peer_of(c).is_some_and(|p| p.left), None),
                None => return,
            }
        } else {
            let Some(p) = self.peer_of(decider) else {
                return;
            };
            let Some(e) = p.endorsed.iter().find(|e| e.seat == c) else {
                return;
            };
            (e.from, e.left, Some(p.id))
        };
        // Never a tick we ran, or could run before the decision applies:
        // that would rewrite history here.
        let runnable = matches!(self.store.cell(from, c.index()), Some(Cell::Known(_)));
        if self.next_tick > from || runnable {
            if let Some(peer) = proposer {
                self.dispute(c, peer);
            }
            return;
        }
        // Only once every input before the tick is held.
        if self.contiguous(c) < from {
            return;
        }
        let Some(digest) = self.abandon_digest(c, from) else {
            return;
        };
        self.endorsed.insert(
            c,
            Endorsement {
                seat: c,
                from,
                digest,
                left,
            },
        );
        self.flush_all();
    }

    /// The tick the decider stands for on `c`, once every other live seat
    /// has frozen it: the one it already endorses if that is past every
    /// peer's own holding of `c`'s input when it froze, else the first tick
    /// no peer holds. (Input forwarded since cannot have run anywhere, so
    /// it never moves a proposal.)
    fn proposal(&self, me: PlayerId, c: PlayerId) -> Option<Tick> {
        let mut highest = *self.frozen.get(&c)?;
        for s in self.live_seats().filter(|&s| s != me) {
            let p = self.peer_of(s)?;
            let (_, held) = p.frozen.iter().find(|(f, _)| *f == c)?;
            highest = highest.max(*held);
        }
        if let Some(e) = self.endorsed.get(&c).filter(|e| e.from >= highest) {
            return Some(e.from);
        }
        let own = self.contiguous(c);
        (own >= highest).then_some(own)
    }

    /// Applies every decision that every live seat other than the abandoned
    /// one endorses with the same digest, when those endorsers are also a
    /// strict majority of the seat's voters and no seat still in the game
    /// (a frozen one included: it may have applied before it froze here)
    /// endorses another. A peer abandoned by the others learns its fate the
    /// same way.
    ///
    /// A decision on our own seat is taken only from endorsements that
    /// every packet of their senders has carried for `vote_hold` (unless we
    /// are leaving): one forged in each other player's name, taken at
    /// once, emptied an honest player's seat in its own eyes.
    fn apply_agreed(&mut self, me: PlayerId) {
        let now = self.now;
        let hold_own = if self.leaving {
            std::time::Duration::ZERO
        } else {
            self.config.vote_hold
        };
        let hold = |seat: PlayerId| {
            if seat == me {
                hold_own
            } else {
                std::time::Duration::ZERO
            }
        };
        // Ours, and what the lowest other live seat endorses about our own
        // seat (checked against every other live seat below).
        let mut candidates: Vec<Endorsement> = self.endorsed.values().copied().collect();
        if let Some(p) = self
            .live_seats()
            .find(|&s| s != me)
            .and_then(|s| self.peer_of(s))
        {
            candidates.extend(p.endorsement(me, now, hold_own));
        }
        for e in candidates {
            if self.seats[e.seat.index()].empty_from.is_some() {
                continue;
            }
            let mut agreed = true;
            let mut endorsers = usize::from(e.seat != me);
            let mut disputes = Vec::new();
            for s in self.live_seats().filter(|&s| s != me && s != e.seat) {
                let Some(p) = self.peer_of(s) else {
                    agreed = false;
                    continue;
                };
                match p.endorsement(e.seat, now, hold(e.seat)) {
                    Some(x) if x == e => endorsers += 1,
                    Some(_) => {
                        disputes.push(p.id);
                        agreed = false;
                    }
                    None => agreed = false,
                }
            }
            // Frozen seats: not needed, but never contradicted.
            for p in self.peers.iter().filter(|p| {
                p.seat.is_some_and(|s| {
                    s != e.seat && self.seats[s.index()].empty_from.is_none() && !self.seat_live(s)
                })
            }) {
                if p.endorsed.iter().any(|x| x.seat == e.seat && *x != e) {
                    disputes.push(p.id);
                    agreed = false;
                }
            }
            for peer in disputes {
                self.dispute(e.seat, peer);
            }
            if agreed && endorsers * 2 > self.voters(e.seat).len() {
                self.apply_decision(e.seat, e.from, e.left);
            }
        }
    }

    /// Says once that `peer` stands in the way of abandoning `seat`.
    fn dispute(&mut self, seat: PlayerId, peer: crate::PeerId) {
        if self.disputed.insert((seat, peer)) {
            self.push_event(Event::AbandonDisputed { player: seat, peer });
        }
    }

    /// The digest of `seat`'s input held for the window of ticks before
    /// `from`, or `None` while some of it is missing. See the protocol
    /// document ("Abandon") for the exact bytes.
    pub(super) fn abandon_digest(&mut self, seat: PlayerId, from: Tick) -> Option<u64> {
        let start = from.saturating_sub(self.abandon_window()).max(self.start);
        let mut h = Sha256::new();
        h.update(b"lockstep abandon v1");
        h.update(seat.0.to_le_bytes());
        h.update(from.get().to_le_bytes());
        h.update(start.get().to_le_bytes());
        let mut t = start;
        while t < from {
            match self.store.cell(t, seat.index())? {
                Cell::Unknown => return None,
                Cell::Empty => h.update([0]),
                Cell::Known(i) | Cell::Forwarded(i) => {
                    self.scratch.clear();
                    i.encode(&mut self.scratch);
                    h.update([1]);
                    h.update((self.scratch.len() as u32).to_le_bytes());
                    h.update(&self.scratch);
                }
            }
            t = t.next()?;
        }
        let out = h.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&out[..8]);
        Some(u64::from_le_bytes(first))
    }

    /// Empties `seat` from `from` on (`left`: it said goodbye, and the
    /// stream records [`SystemEvent::Left`](crate::SystemEvent::Left);
    /// otherwise `Abandoned`).
    pub(super) fn apply_decision(&mut self, seat: PlayerId, from: Tick, left: bool) {
        let i = seat.index();
        if self.seats[i].peer.is_none() || self.seats[i].empty_from.is_some() {
            return;
        }
        if from < self.next_tick {
            // Only the abandoned peer itself can be past the tick: it ran
            // ticks on input of its own that never reached anyone. Its
            // stream differs from the others' from `from` on.
            self.push_event(Event::AbandonConflict {
                player: seat,
                kept: self.next_tick,
                received: from,
            });
        }
        let effective = from.max(self.next_tick);
        self.seats[i].empty_from = Some(effective);
        self.seats[i].left = left;
        self.ignore_checksums_of(seat, from);
        self.decisions.push((seat, from));
        self.votes.remove(&seat);
        self.frozen.remove(&seat);
        for (tick, slot) in self.store.iter_from_mut(self.next_tick) {
            let cell = &mut slot.cells[i];
            if tick >= effective {
                *cell = Cell::Empty;
            } else if let Cell::Forwarded(input) = cell {
                // Every live peer holds exactly this: it is known now.
                *cell = Cell::Known(input.clone());
            }
            if tick == effective {
                slot.add_event(super::members::departure(seat, left));
            }
        }
        self.push_event(Event::Abandoned {
            player: seat,
            from: effective,
        });
        self.flush_all();
    }
}
