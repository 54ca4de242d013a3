//! Healing a player whose game state diverged, from a majority peer's.
//!
//! A player holds the odd state out when a strict majority of the live
//! seats (itself counted among them) sent the same checkpoint for one tick,
//! and its own differs. (When no state has a majority, say three players
//! on three different states, nobody resyncs: there is no state to trust.)
//! Once it has made its own checkpoint for the latest tick they differed
//! at, it asks one of the peers it differs from for its state
//! ([`SnapshotRequest`](crate::wire::Message::SnapshotRequest), repeated
//! with that checkpoint until the first chunk arrives, so the donor sees
//! the difference for itself however many checkpoints were lost) after the
//! last tick it ran, and runs no frame past that tick meanwhile. The donor's game hands over its state
//! from that tick or a later one; the player runs its own frames up to the
//! state's tick (so its game holds its own state there, to compare), then
//! replaces its state with the donor's and runs on. No frame is skipped or
//! run twice, and its inputs flow all along: the other players wait only if
//! the transfer outlasts their lead.
//!
//! A donor hands its state only to a live player whose checkpoints it found
//! different from its own, while it is not itself the odd one out, and at
//! most `max_resyncs` times to the same player. The player asks another
//! donor when one sends nothing new for `interrupt_after`, delivers nothing
//! whole within ten of them (the donor rule of `snapshot::donor`, which a
//! sequencer keeps too), or sends a state that fails its checks, prefers a donor other than the one whose state left it
//! diverged before, and gives the resync up after [`DONORS`] donors. Past
//! `max_resyncs` resyncs it leaves the session instead
//! ([`Event::DivergedTooOften`]).
//!
//! All of it only with [`MeshConfig::resync`](super::MeshConfig::resync):
//! the games must hand their state over and take one.

use super::observe::{Taken, take_into};
use super::{MeshSession, Peer};
use crate::snapshot::donor::{DONOR_TIME, DonorClock};
use crate::snapshot::{Snapshot, SnapshotReceiver};
use crate::wire::{Checkpoint, Message, SnapshotAck, SnapshotChunk};
use crate::{Event, Input, Instant, PeerId, Tick};
use core::time::Duration;
use std::collections::{BTreeMap, VecDeque};

/// How many donors one resync asks before it is given up.
pub(super) const DONORS: usize = 3;
/// Ticks over which resyncs (and states handed to one player) count
/// towards `max_resyncs`: a game that keeps diverging runs out of them
/// within a few blocks; one glitch now and then never does.
pub(crate) const MEMORY: u32 = 16 * crate::desync::BLOCK;

/// The resync this player asked for, from its request until a while after
/// its state was replaced.
#[derive(Debug)]
pub(super) struct Asking {
    /// The request's id (a new one for each donor asked).
    id: u32,
    donor: PeerId,
    /// The last tick run when the resync began: no later frame runs until
    /// the donor's state (from this tick on) arrives.
    after: Tick,
    /// When the donor was asked, and last sent a chunk not held before.
    clock: DonorClock,
    /// Whether a chunk arrived: the request stops.
    started: bool,
    /// Our latest checkpoint, sent with the request: the donor compares it
    /// with its own.
    proof: Checkpoint,
    receiver: SnapshotReceiver,
    /// The donor's state, whole and checked, until the game takes it.
    ready: Option<Snapshot>,
    /// When the game was told ([`Event::Snapshot`]): every frame up to the
    /// state's tick has run.
    announced: Option<Instant>,
    /// When the game took it: the donor is told a while longer that it
    /// arrived whole.
    taken: Option<Instant>,
    /// Donors asked before this one.
    tried: Vec<PeerId>,
}

/// A request for our state from a player that diverged, accepted.
#[derive(Debug, Clone, Copy)]
pub(super) struct Giving {
    pub(super) id: u32,
    /// Our state from this tick on will do.
    pub(super) after: Tick,
    /// The transfer ended (it has it whole, and ran past it).
    pub(super) done: bool,
}

impl<I: Input> MeshSession<I> {
    /// Whether our state is the odd one out: a strict majority of the live
    /// seats (ours counted) sent one checkpoint value, not ours.
    pub(super) fn odd_one_out(&self) -> bool {
        !self.majority_against().is_empty()
    }

    /// The live players that sent, for one checkpoint tick, the same value
    /// different from ours, when they are a strict majority of the live
    /// seats (ours counted); none otherwise. Three states all different
    /// have no majority: nobody's is the odd one out, and nobody resyncs.
    ///
    /// One pass over what each live player sent lately (16 checkpoints
    /// each): cheap enough for every datagram while a split lasts.
    fn majority_against(&self) -> Vec<PeerId> {
        let live = self.live_seats().count();
        if !self.local_seat.is_some_and(|s| self.seat_live(s)) || self.differing().next().is_none()
        {
            return Vec::new();
        }
        let players = || {
            self.peers
                .iter()
                .filter(|p| p.seat.is_some_and(|s| self.seat_live(s)))
        };
        // How many players sent each differing (tick, width, value).
        let mut counts: BTreeMap<(Tick, bool, u64), usize> = BTreeMap::new();
        for p in players() {
            for c in p.checks.recent().filter(|c| c.differs) {
                *counts.entry((c.tick, c.full, c.value)).or_default() += 1;
            }
        }
        // A value that many, sent by a player we still differ from, at or
        // after the tick we began to.
        let found = players().find_map(|p| {
            let m = p.checks.mismatch?;
            p.checks
                .recent()
                .filter(|c| c.differs && c.tick >= m.tick)
                .find(|c| {
                    counts
                        .get(&(c.tick, c.full, c.value))
                        .is_some_and(|n| n * 2 > live)
                })
                .copied()
        });
        let Some(c) = found else {
            return Vec::new();
        };
        players()
            .filter(|q| q.checks.sent(&c))
            .map(|q| q.id)
            .collect()
    }

    /// The live players whose checkpoints differ from ours.
    fn differing(&self) -> impl Iterator<Item = &Peer> + '_ {
        self.peers
            .iter()
            .filter(|p| p.seat.is_some_and(|s| self.seat_live(s)) && p.checks.mismatch.is_some())
    }

    /// Starts a resync when our state is the odd one out, and moves one on:
    /// another donor for one that went quiet, the end of one whose state
    /// the game took a while ago.
    pub(super) fn plan_resync(&mut self) {
        if self.resync.is_some() {
            self.progress_resync();
            return;
        }
        if self.leaving || !self.config.resync || self.incoming.is_some() || !self.odd_one_out() {
            return;
        }
        let since = self.next_tick.saturating_sub(MEMORY);
        forget_before(&mut self.resynced, since);
        if self.resynced.len() >= self.config.max_resyncs as usize {
            let resyncs = self.resynced.len() as u32;
            self.push_event(Event::DivergedTooOften { resyncs });
            self.leave();
            return;
        }
        // The last tick run (none: nothing to compare yet).
        if self.next_tick <= self.start {
            return;
        }
        let after = self.next_tick.saturating_sub(1);
        // Our own checkpoint where we differ, for the donor to compare.
        let differ = self
            .differing()
            .filter_map(|p| p.checks.mismatch.map(|m| m.tick))
            .max();
        let Some(proof) = self
            .checks
            .last_made()
            .filter(|c| differ.is_some_and(|d| c.tick >= d))
        else {
            return;
        };
        let Some(donor) = self.pick_donor(&[]) else {
            return;
        };
        self.resynced.push_back(self.next_tick);
        // A state of ours, held or asked of the game, is the diverged one:
        // nobody gets it.
        self.forget_state();
        let id = self.next_resync_id;
        self.next_resync_id = id.wrapping_add(1);
        self.resync = Some(Box::new(Asking {
            id,
            donor,
            after,
            clock: DonorClock::asked(self.now),
            started: false,
            proof,
            receiver: SnapshotReceiver::new(self.config.snapshot.clone()),
            ready: None,
            announced: None,
            taken: None,
            tried: Vec::new(),
        }));
        self.stats.resyncs += 1;
        self.push_event(Event::Resyncing);
        self.flush_peer(donor);
    }

    /// A donor for our state: a live player of the majority whose
    /// checkpoints differ from ours (any whose checkpoints differ, when
    /// that majority is no longer in view), heard from lately, not asked
    /// yet in this resync; the one whose state left us diverged last time
    /// only when nobody else can; the nearest first.
    fn pick_donor(&self, tried: &[PeerId]) -> Option<PeerId> {
        let majority = self.majority_against();
        self.peers
            .iter()
            .filter(|p| {
                p.seat.is_some_and(|s| self.seat_live(s))
                    && p.checks.mismatch.is_some()
                    && (majority.is_empty() || majority.contains(&p.id))
                    && p.greeted
                    && !p.left
                    && !p.link.interrupted()
                    && p.incompatible.is_none()
                    && !tried.contains(&p.id)
            })
            .min_by_key(|p| {
                (
                    self.failed_donors.iter().any(|(_, d)| *d == p.id),
                    Some(p.id) == self.last_donor,
                    p.link.rtt().unwrap_or(Duration::MAX),
                    p.seat,
                )
            })
            .map(|p| p.id)
    }

    /// A resync under way: another donor after a quiet one (or the resync
    /// given up after [`DONORS`] of them), and the end of one whose state
    /// the game took a while ago.
    fn progress_resync(&mut self) {
        let now = self.now;
        let Some(r) = self.resync.as_deref() else {
            return;
        };
        match (r.taken, r.announced) {
            (Some(at), _) if now >= at + self.config.interrupt_after => {
                self.resync = None;
                self.stir();
            }
            (Some(_), _) => {}
            // A game that never takes the state it was told of holds every
            // frame (and, once their lead runs out, everyone): given up,
            // as for a donor that never delivers.
            (None, Some(at)) if now >= at + self.config.interrupt_after * DONOR_TIME => {
                self.resync = None;
                // The next timeout may start another.
                self.stir();
            }
            (None, Some(_)) => {}
            (None, None) if self.resync_timeout().is_some_and(|t| now >= t) => self.next_donor(),
            (None, None) => {}
        }
    }

    /// The donor failed us: another is asked, under a new id, or the
    /// resync is given up (frames run on; the state stays diverged, and a
    /// later checkpoint may start another).
    fn next_donor(&mut self) {
        let Some(r) = self.resync.as_deref() else {
            return;
        };
        let mut tried = r.tried.clone();
        tried.push(r.donor);
        // Asked after everyone else next time too: three near peers that
        // never deliver must not use up every try of every resync.
        let since = self.next_tick.saturating_sub(MEMORY);
        // (One entry per peer at most.)
        self.failed_donors
            .retain(|(t, d)| *t >= since && *d != r.donor);
        self.failed_donors.push_back((self.next_tick, r.donor));
        let donor = if tried.len() < DONORS {
            self.pick_donor(&tried)
        } else {
            None
        };
        let Some(donor) = donor else {
            self.resync = None;
            // The next timeout may start another.
            self.stir();
            return;
        };
        let id = self.next_resync_id;
        self.next_resync_id = id.wrapping_add(1);
        let now = self.now;
        if let Some(r) = self.resync.as_deref_mut() {
            r.id = id;
            r.donor = donor;
            r.clock = DonorClock::asked(now);
            r.started = false;
            r.receiver.reset();
            r.ready = None;
            r.tried = tried;
        }
        self.flush_peer(donor);
    }

    /// The last tick whose frame may run while a resync waits for its
    /// state (and, once it arrived, for the frames up to the state's tick),
    /// with whether the game was told it arrived.
    pub(super) fn resync_limit(&self) -> Option<Tick> {
        let r = self.resync.as_deref().filter(|r| r.taken.is_none())?;
        Some(r.ready.as_ref().map_or(r.after, |s| s.tick))
    }

    /// When a resync next needs the clock: its donor's time is up, or the
    /// donor has been told long enough that its state arrived.
    pub(super) fn resync_timeout(&self) -> Option<Instant> {
        let r = self.resync.as_deref()?;
        let quiet = self.config.interrupt_after;
        match (r.taken, r.announced) {
            (Some(at), _) => Some(at + quiet),
            (None, Some(at)) => Some(at + quiet * DONOR_TIME),
            (None, None) => Some(r.clock.deadline(quiet)),
        }
    }

    /// Tells the game the donor's state arrived once every frame up to its
    /// tick has run.
    pub(super) fn announce_resync(&mut self) {
        let next = self.next_tick;
        let Some(r) = self.resync.as_deref_mut() else {
            return;
        };
        let Some(tick) = r.ready.as_ref().map(|s| s.tick) else {
            return;
        };
        if r.announced.is_none() && next > tick {
            r.announced = Some(self.now);
            self.push_event(Event::Snapshot { tick });
        }
    }

    /// The donor's state, once announced: our chain starts over with it.
    pub(super) fn take_resync(&mut self) -> Option<Snapshot> {
        let now = self.now;
        let r = self
            .resync
            .as_deref_mut()
            .filter(|r| r.announced.is_some() && r.taken.is_none())?;
        let s = r.ready.take()?;
        r.taken = Some(now);
        self.last_donor = Some(r.donor);
        self.restart_checks();
        self.forget_state();
        Some(s)
    }

    /// The request to put in a datagram for `peer`, with our checkpoint:
    /// ours, until its first chunk arrives.
    pub(super) fn resync_request(&self, peer: PeerId) -> Option<[Message<'static>; 2]> {
        let r = self.resync.as_deref()?;
        (r.donor == peer && !r.started && r.taken.is_none()).then_some([
            Message::Checkpoint(r.proof),
            Message::SnapshotRequest {
                id: r.id,
                tick: r.after,
            },
        ])
    }

    /// The acknowledgement for `peer`, our donor.
    pub(super) fn resync_ack(&self, peer: PeerId) -> Option<SnapshotAck> {
        let r = self.resync.as_deref().filter(|r| r.donor == peer)?;
        r.receiver.current_ack()
    }

    /// A chunk from peer `i`: taken only from our donor, for our request,
    /// of a state from the tick asked on and not past what the donor can
    /// have run.
    pub(super) fn take_resync_chunk(&mut self, i: usize, c: &SnapshotChunk<'_>) {
        let (now, from, horizon, width) =
            (self.now, self.peers[i].id, self.horizon(), self.seats.len());
        let Some(r) = self.resync.as_deref_mut() else {
            return;
        };
        if r.donor != from
            || c.id != r.id
            || r.ready.is_some()
            || r.taken.is_some()
            || c.tick < r.after
            || c.tick >= horizon
        {
            return;
        }
        r.started = true;
        self.peers[i].link.flush = true;
        let (gained, taken) = take_into(&mut r.receiver, c, width);
        if gained {
            r.clock.progressed(now);
        }
        match taken {
            Taken::Partial => {}
            Taken::Refused => self.stats.snapshot_errors += 1,
            Taken::Whole(snapshot, _) => {
                r.ready = Some(snapshot);
                self.announce_resync();
            }
            // The donor's state fails its checks: another is asked.
            Taken::Bad => {
                self.stats.snapshot_errors += 1;
                self.next_donor();
            }
        }
    }

    /// A request for our state from peer `i`, a player whose state it
    /// says diverged: taken if we found it so too (and are not the odd one
    /// out ourselves), for a tick it may have run, at most `max_resyncs`
    /// times for the same player.
    pub(super) fn take_resync_request(&mut self, i: usize, id: u32, after: Tick) {
        let since = self.next_tick.saturating_sub(MEMORY);
        let p = &mut self.peers[i];
        // Ids count up: one not newer than the latest is a repeat, a
        // replay or a late copy.
        if p.last_request
            .is_some_and(|l| id.wrapping_sub(l) as i32 <= 0)
        {
            return;
        }
        forget_before(&mut p.donated, since);
        let p = &self.peers[i];
        let consent = self.config.resync
            && self.local_seat.is_some()
            && p.seat.is_some_and(|s| self.seat_live(s))
            && p.checks.mismatch.is_some()
            && p.donated.len() < self.config.max_resyncs as usize
            && after < self.horizon()
            && !self.leaving
            && self.resync.is_none()
            && !self.odd_one_out();
        if !consent {
            self.stats.resyncs_refused += 1;
            return;
        }
        let next = self.next_tick;
        let p = &mut self.peers[i];
        p.last_request = Some(id);
        p.donated.push_back(next);
        p.giving = Some(Giving {
            id,
            after,
            done: false,
        });
        p.outgoing = None;
        p.link.chunk_starved = false;
        self.stats.resyncs_given += 1;
        self.plan_snapshots();
    }

    /// Drops the state we hold for others and the one asked of the game
    /// (and the transfers of it to observers): ours is about to be, or was
    /// just, replaced.
    fn forget_state(&mut self) {
        self.donor.forget();
        for p in &mut self.peers {
            p.outgoing = None;
            p.link.chunk_starved = false;
        }
    }

    fn flush_peer(&mut self, peer: PeerId) {
        if let Some(p) = self.peers.iter_mut().find(|p| p.id == peer) {
            p.link.flush = true;
        }
    }
}

/// Drops the ticks before `since` from `ticks` (ascending).
fn forget_before(ticks: &mut VecDeque<Tick>, since: Tick) {
    while ticks.front().is_some_and(|t| *t < since) {
        ticks.pop_front();
    }
}
