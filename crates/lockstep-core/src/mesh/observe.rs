//! Observers catching up from a snapshot.
//!
//! An observer that fell further behind than the frames kept for it, or
//! that joined a mesh already under way, cannot be fed frame by frame. The
//! feeder (the lowest live seat, which feeds observers their frames) asks
//! its game for its state ([`Event::SnapshotRequested`]), wraps it with the
//! mesh's own membership, and sends it in chunks, once every live player has
//! run its tick: the rule frames to observers follow, so an abandonment can
//! never undo it. The observer checks and reassembles it, hands the game its
//! bytes ([`Event::Snapshot`]) and runs frames from the tick after it.
//!
//! The membership travels with the game's bytes because an observer that
//! skips frames skips the [`SystemEvent::Abandoned`](crate::SystemEvent)s
//! they carried. The envelope is
//!
//! ```text
//! u8     version (1)
//! u16le  count of empty seats
//! count × { u16le seat, u32le first empty tick }   ascending seats, ticks <= the snapshot's
//! ...    the game's bytes
//! ```

use super::{MeshSession, Peer, resync};
use crate::snapshot::{Snapshot, SnapshotError, SnapshotLimits, SnapshotReceiver, SnapshotSender};
use crate::wire::{DatagramWriter, SnapshotAck, SnapshotChunk};
use crate::{Event, Input, Instant, PeerId, PlayerId, Tick};

/// The version of the envelope a mesh snapshot's game bytes travel in.
const ENVELOPE_VERSION: u8 = 1;

/// Bytes a chunk message takes besides its data, with room to spare for
/// the other messages of the datagram it rides in.
const CHUNK_ROOM: usize = 160;

/// The feeder's side: the state asked of the game, and the latest one it
/// handed over.
#[derive(Debug, Default)]
pub(super) struct Donor {
    /// From which tick on a state will do, and when the game was asked.
    asked: Option<(Tick, Instant)>,
    /// The latest state handed over, compressed once and copied for each
    /// observer that needs it.
    ready: Option<Box<SnapshotSender>>,
    /// The id of the next snapshot.
    next_id: u32,
}

impl Donor {
    /// Forgets the state held and the one asked for (ids go on counting).
    pub(super) fn forget(&mut self) {
        self.asked = None;
        self.ready = None;
    }
}

/// How many `interrupt_after` a donor has the transfer to itself, however
/// it progresses, before another donor's chunks may take over.
const EXCLUSIVE_FOR: u32 = 30;

/// The observer's side: a snapshot arriving (from one donor at a time),
/// arrived and not yet taken, or taken and still acknowledged.
#[derive(Debug, Default)]
pub(super) struct Incoming {
    /// The transfer chunks are taken from now.
    current: Option<Transfer>,
    /// The one before, kept: switching back to its donor loses nothing.
    parked: Option<Transfer>,
    /// A donor whose snapshot failed its checks, refused until then.
    barred: Option<(PeerId, Instant)>,
    /// The snapshot, whole and checked, with the seats empty by its tick,
    /// until the game takes it.
    ready: Option<(Snapshot, Vec<(PlayerId, Tick)>)>,
    /// When the game took it: its donor is told it is whole a while longer.
    taken: Option<Instant>,
}

/// One donor's transfer to an observer.
#[derive(Debug)]
struct Transfer {
    from: PeerId,
    receiver: SnapshotReceiver,
    /// When it began (or was switched to), and when a chunk not held
    /// before last arrived.
    began: Instant,
    progress: Instant,
}

impl Transfer {
    fn new(from: PeerId, limits: &SnapshotLimits, now: Instant) -> Self {
        Self {
            from,
            receiver: SnapshotReceiver::new(limits.clone()),
            began: now,
            progress: now,
        }
    }
}

/// Why a reassembled snapshot's envelope was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BadEnvelope;

/// Wraps the game's `bytes` with the seats empty by the snapshot's tick.
fn wrap_envelope(empty: &[(PlayerId, Tick)], bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(3 + empty.len() * 6 + bytes.len());
    out.push(ENVELOPE_VERSION);
    out.extend_from_slice(&(empty.len() as u16).to_le_bytes());
    for (seat, from) in empty {
        out.extend_from_slice(&seat.0.to_le_bytes());
        out.extend_from_slice(&from.get().to_le_bytes());
    }
    out.extend_from_slice(bytes);
    out
}

/// Splits a snapshot into the seats empty by its tick and the game's bytes,
/// checking every seat is one of the session's `width` and every tick is at
/// or before the snapshot's.
fn open_envelope(
    mut s: Snapshot,
    width: usize,
) -> Result<(Snapshot, Vec<(PlayerId, Tick)>), BadEnvelope> {
    let b = &s.bytes;
    if b.first() != Some(&ENVELOPE_VERSION) || b.len() < 3 {
        return Err(BadEnvelope);
    }
    let count = u16::from_le_bytes([b[1], b[2]]) as usize;
    let end = 3 + count * 6;
    if count > width || b.len() < end {
        return Err(BadEnvelope);
    }
    let mut empty: Vec<(PlayerId, Tick)> = Vec::with_capacity(count);
    for e in b[3..end].chunks_exact(6) {
        let seat = PlayerId(u16::from_le_bytes([e[0], e[1]]));
        let from = Tick::new(u32::from_le_bytes([e[2], e[3], e[4], e[5]]));
        let ascending = empty.last().is_none_or(|(last, _)| *last < seat);
        if seat.index() >= width || from > s.tick || !ascending {
            return Err(BadEnvelope);
        }
        empty.push((seat, from));
    }
    s.bytes.drain(..end);
    Ok((s, empty))
}

/// What a chunk did to the snapshot it is part of.
pub(super) enum Taken {
    /// More chunks are to come.
    Partial,
    /// The snapshot, whole and checked, with the seats empty by its tick.
    Whole(Snapshot, Vec<(PlayerId, Tick)>),
    /// The whole failed its checks (hash, envelope): its sender's fault.
    Bad,
    /// This chunk failed its checks: the link's, or a stray's.
    Refused,
}

/// Takes chunk `c` into `rx`, for a session of `width` seats: whether it
/// was a chunk not held before (or the last one), and what came of it.
pub(super) fn take_into(
    rx: &mut SnapshotReceiver,
    c: &SnapshotChunk<'_>,
    width: usize,
) -> (bool, Taken) {
    let before = rx.progress();
    let taken = rx.take(c);
    let gained = match (before, rx.progress()) {
        (Some((a, _, had, _)), Some((b, _, has, _))) => a == b && has > had,
        (None, Some(_)) => true,
        (_, None) => matches!(taken, Ok(Some(_))),
    };
    let taken = match taken {
        Ok(None) => Taken::Partial,
        Ok(Some(s)) => match open_envelope(s, width) {
            Ok((s, empty)) => Taken::Whole(s, empty),
            Err(BadEnvelope) => Taken::Bad,
        },
        Err(SnapshotError::BadWhole { .. }) => Taken::Bad,
        Err(_) => Taken::Refused,
    };
    (gained, taken)
}

impl<I: Input> MeshSession<I> {
    /// Answers [`Event::SnapshotRequested`]: the game's state right after
    /// `tick`, the last frame it ran. Any tick from the one requested on
    /// will do, so the current state always does: hand it over as soon as
    /// the event is seen. A state when none is wanted, or from before the
    /// tick asked, or after the last frame run, is dropped with
    /// [`SnapshotError::NotAsked`].
    ///
    /// The state goes to every observer that needs it (one that fell behind
    /// the frames kept for it, or joined late), in chunks, once every live
    /// player has run `tick`; and to a player whose state diverged and
    /// asked for ours (see [`MeshConfig::resync`](super::MeshConfig::resync)),
    /// at once.
    pub fn provide_snapshot(&mut self, tick: Tick, bytes: Vec<u8>) -> Result<(), SnapshotError> {
        self.stir();
        let Some((asked, _)) = self.donor.asked else {
            return Err(SnapshotError::NotAsked { tick, asked: None });
        };
        if tick < asked || tick >= self.next_tick || tick.saturating_add(1) < self.store.base() {
            return Err(SnapshotError::NotAsked {
                tick,
                asked: Some(asked),
            });
        }
        let empty: Vec<(PlayerId, Tick)> = (0..self.seats.len())
            .filter_map(super::seat_id)
            .filter_map(|s| {
                let seat = &self.seats[s.index()];
                let from = seat.empty_from.filter(|f| *f <= tick)?;
                seat.peer.is_some().then_some((s, from))
            })
            .collect();
        let state = Snapshot::new(tick, wrap_envelope(&empty, &bytes));
        let chunk = self.config.max_datagram.saturating_sub(CHUNK_ROOM);
        let id = self.donor.next_id;
        let tx = SnapshotSender::new(id, &state, chunk, &self.config.snapshot)?;
        self.donor.next_id = id.wrapping_add(1);
        self.donor.asked = None;
        self.donor.ready = Some(Box::new(tx));
        self.plan_snapshots();
        Ok(())
    }

    /// The snapshot [`Event::Snapshot`] announced, once (an observer that
    /// fell behind, or joined late; a player resyncing after
    /// [`Event::Resyncing`], once it has run every frame up to the
    /// snapshot's tick): replace the game's state with it, then run frames
    /// as usual; they go on from the tick after it. Its bytes are exactly
    /// those the donor's game handed to
    /// [`provide_snapshot`](Self::provide_snapshot). Frames wait until it is
    /// taken.
    pub fn take_snapshot(&mut self) -> Option<Snapshot> {
        self.stir();
        if self.local_seat.is_some() {
            return self.take_resync();
        }
        let inc = self.incoming.as_mut()?;
        let (snapshot, empty) = inc.ready.take()?;
        // Its donor is told a while longer that it is whole.
        inc.taken = Some(self.now);
        let next = snapshot.tick.next()?;
        // Frames from elsewhere took us past it meanwhile: not needed.
        if next <= self.next_tick {
            self.incoming = None;
            return None;
        }
        for (seat, from) in empty {
            let s = &mut self.seats[seat.index()];
            if s.peer.is_some() && s.empty_from.is_none() {
                s.empty_from = Some(from);
                self.decisions.push((seat, from));
                self.ignore_checksums_of(seat, from);
            }
        }
        // A pause whose frame the state is past was lifted: the players
        // ran on.
        if self.pause.frame().is_some_and(|f| f <= snapshot.tick) {
            let change = self.pause.resume();
            self.note_pause_change(change);
        }
        self.store.prune_below(next);
        self.next_tick = next;
        self.next_commit = self.next_commit.max(next);
        // Our new position, far from the old one, is news: every peer gets
        // a Hello again, whose full tick anchors how it reads ours.
        for p in &mut self.peers {
            p.welcomed = false;
        }
        self.flush_all();
        Some(snapshot)
    }

    /// While a snapshot arrives (an observer catching up): chunks in, of
    /// how many, for a progress bar.
    pub fn snapshot_progress(&self) -> Option<(u32, u32)> {
        let inc = self.incoming.as_ref()?;
        if inc.ready.is_some() || inc.taken.is_some() {
            return None;
        }
        let (_, _, have, of) = inc.current.as_ref()?.receiver.progress()?;
        Some((have, of))
    }

    /// Whether a snapshot is in hand that the game has not taken yet:
    /// frames wait for it.
    pub(super) fn snapshot_waiting(&self) -> bool {
        self.incoming.as_ref().is_some_and(|i| i.ready.is_some())
    }

    /// Forgets a snapshot arriving for a tick frames have since taken us
    /// past (its donor went back to feeding frames), and one taken a while
    /// ago (its donor has been told it is whole).
    pub(super) fn drop_passed_snapshot(&mut self) {
        let (next, now, quiet) = (self.next_tick, self.now, self.config.interrupt_after);
        let Some(inc) = self.incoming.as_ref() else {
            return;
        };
        let passed = inc.ready.is_none()
            && inc.taken.is_none()
            && inc
                .current
                .as_ref()
                .and_then(|t| t.receiver.progress())
                .is_some_and(|(_, t, _, _)| t < next);
        let told = inc.taken.is_some_and(|t| now >= t + quiet);
        if passed || told {
            self.incoming = None;
        }
    }

    /// Whether `p` is an observer the feeder can no longer feed frame by
    /// frame: it is behind every frame held, and alive.
    fn needs_snapshot(&self, p: &Peer) -> bool {
        p.seat.is_none()
            && p.greeted
            && !p.left
            && !p.link.interrupted()
            && p.incompatible.is_none()
            && p.next_tick < self.store.base()
    }

    /// The donor's bookkeeping, after anything that may have moved an
    /// observer, the frames held, who feeds or a request for our state:
    /// drops transfers that are done with, starts one for every observer
    /// that needs it (as the feeder) and every player that diverged and
    /// asked for it, and asks the game for its state when none held will
    /// do.
    pub(super) fn plan_snapshots(&mut self) {
        // Called after every frame: a mesh without observers or requests
        // has nothing to plan, once nothing is left to forget (a state
        // held or asked for an observer since removed, whose timer would
        // else stay due).
        let idle = self.donor.ready.is_none() && self.donor.asked.is_none();
        if idle
            && self
                .peers
                .iter()
                .all(|p| p.seat.is_some() && p.giving.is_none())
        {
            return;
        }
        // A player whose own state is being replaced hands none to
        // observers.
        let feeds = self.is_feeder() && self.resync.is_none();
        let base = self.store.base();
        // A snapshot from a tick whose next frames are gone is no use.
        let useful = |tx: &SnapshotSender| tx.tick().saturating_add(1) >= base;
        // A transfer ends once the receiver has every chunk and is past its
        // tick, or said goodbye. Until then it pauses while an observer
        // does not need it (it can be fed frames, it went quiet): an
        // observer that flips its position back and forth and acknowledges
        // nothing gets each chunk once and then probes, never a fresh
        // window of chunks per flip. A player's ends with its request
        // (replaced by another, or the player no longer live).
        for i in 0..self.peers.len() {
            let live = self.peers[i].seat.is_some_and(|s| self.seat_live(s));
            let p = &mut self.peers[i];
            let Some(tx) = p.outgoing.as_deref() else {
                continue;
            };
            let passed = tx.done() && p.next_tick > tx.tick();
            let end = match (p.seat, p.giving) {
                (None, _) => !feeds || p.left || !useful(tx) || passed,
                (Some(_), Some(g)) if g.id == tx.id() => {
                    // Past the state's tick, it took it or never will (it
                    // took another donor's, or gave up).
                    let over = passed || p.next_tick > tx.tick().saturating_add(1);
                    if over {
                        p.giving = Some(resync::Giving { done: true, ..g });
                    }
                    p.left || !live || over
                }
                (Some(_), _) => true,
            };
            if end {
                p.outgoing = None;
                p.link.chunk_starved = false;
            }
        }
        // Who needs a state, from which tick on, under which id (an
        // observer's is ours to pick).
        let needy: Vec<(usize, Tick, Option<u32>)> = (0..self.peers.len())
            .filter(|&i| self.peers[i].outgoing.is_none())
            .filter_map(|i| {
                let p = &self.peers[i];
                if p.seat.is_none() {
                    return (feeds && self.needs_snapshot(p)).then_some((i, Tick::ZERO, None));
                }
                let g = p.giving.filter(|g| !g.done && !p.left)?;
                let live = p.seat.is_some_and(|s| self.seat_live(s));
                (live && self.resync.is_none()).then_some((i, g.after, Some(g.id)))
            })
            .collect();
        let mut wanted: Option<Tick> = None;
        for (i, from, id) in needy {
            let fits = |tx: &&SnapshotSender| tx.tick() >= from && useful(tx);
            match self.donor.ready.as_deref().filter(fits) {
                Some(template) => {
                    let id = id.unwrap_or_else(|| {
                        let n = self.donor.next_id;
                        self.donor.next_id = n.wrapping_add(1);
                        n
                    });
                    self.peers[i].outgoing = Some(Box::new(template.for_another(id)));
                    self.peers[i].link.flush = true;
                }
                None => wanted = Some(wanted.map_or(from, |w| w.max(from))),
            }
        }
        let Some(from) = wanted else {
            self.donor.asked = None;
            if self.donor.ready.as_deref().is_some_and(|tx| !useful(tx)) {
                self.donor.ready = None;
            }
            return;
        };
        // Asked already: a game that let the request pass (it was busy
        // running frames) is asked again after a while. A state from a
        // tick not run yet is asked for once it has run (this is called
        // after every frame).
        let now = self.now;
        let stale = |at: Instant| now - at >= self.config.interrupt_after;
        if self.next_tick <= self.start {
            return;
        }
        let last = self.next_tick.saturating_sub(1);
        if last < from {
            return;
        }
        if self.donor.asked.is_none_or(|(t, at)| t < from || stale(at)) {
            self.donor.asked = Some((last, now));
            self.push_event(Event::SnapshotRequested { tick: last });
        }
    }

    /// Marks every peer with chunks due for a datagram.
    pub(super) fn flush_chunks(&mut self) {
        for i in 0..self.peers.len() {
            if !self.peers[i].link.chunk_starved && self.chunks_due(i) {
                self.peers[i].link.flush = true;
            }
        }
    }

    /// When the feeder next has something to do for snapshots by time
    /// alone: a lost chunk to send again, a request to repeat.
    pub(super) fn snapshot_timeout(&self) -> Option<Instant> {
        let resend = self
            .peers
            .iter()
            .filter(|p| !p.link.chunk_starved && self.sending(p))
            .filter_map(|p| p.outgoing.as_ref()?.next_resend())
            .min();
        let ask = self
            .donor
            .asked
            .map(|(_, at)| at + self.config.interrupt_after);
        // A state taken is forgotten once its donor was told long enough.
        let told = self
            .incoming
            .as_ref()
            .and_then(|i| i.taken)
            .map(|at| at + self.config.interrupt_after);
        resend.into_iter().chain(ask).chain(told).min()
    }

    /// Whether peer `i` has snapshot chunks to send now: its snapshot's
    /// tick has been run by every live player, and a chunk is due.
    pub(super) fn chunks_due(&self, i: usize) -> bool {
        let p = &self.peers[i];
        self.sending(p) && p.outgoing.as_ref().is_some_and(|tx| tx.has_due(self.now))
    }

    /// Whether the snapshot we hold for `p` may go now: an observer's once
    /// every live player has run its tick (a snapshot whose tick not every
    /// live player has run waits for their datagrams, not for a timer); a
    /// player's for the request it is the answer to, while the player is
    /// live and heard from. (A player that asked ran every frame before
    /// the tick it asked from, and holds every input after it: no
    /// abandonment can undo a tick we ran.)
    fn sending(&self, p: &Peer) -> bool {
        let Some(tx) = p.outgoing.as_deref() else {
            return false;
        };
        match p.seat {
            None => self.needs_snapshot(p) && tx.tick() < self.min_live_next(),
            Some(s) => {
                self.seat_live(s)
                    && !p.left
                    && !p.link.interrupted()
                    && p.giving.is_some_and(|g| g.id == tx.id() && !g.done)
            }
        }
    }

    /// Puts as many due chunks of peer `i`'s snapshot as fit; returns
    /// whether more are due (another datagram should follow at once).
    pub(super) fn put_chunks(&mut self, w: &mut DatagramWriter<'_>, i: usize) -> bool {
        if !self.chunks_due(i) {
            return false;
        }
        let now = self.now;
        let p = &mut self.peers[i];
        let Some(tx) = p.outgoing.as_mut() else {
            return false;
        };
        let carried = tx.write_due(w, now);
        // Another datagram at once only if this one made room for a chunk
        // (else the next one would not either).
        p.link.chunk_starved = !carried;
        carried && tx.has_due(now)
    }

    /// The acknowledgement to send peer `i`, if it is sending us a
    /// snapshot.
    pub(super) fn snapshot_ack_for(&self, i: usize) -> Option<SnapshotAck> {
        if self.local_seat.is_some() {
            return self.resync_ack(self.peers[i].id);
        }
        let t = self.incoming.as_ref()?.current.as_ref()?;
        if t.from != self.peers[i].id {
            return None;
        }
        t.receiver.current_ack()
    }

    /// An acknowledgement from peer `i` of the snapshot we send it.
    pub(super) fn take_snapshot_ack(&mut self, i: usize, ack: &SnapshotAck) {
        let now = self.now;
        if let Some(tx) = self.peers[i].outgoing.as_mut() {
            tx.take_ack(ack, now);
        }
    }

    /// A chunk from peer `i`, for an observer: a state ahead of ours, from
    /// a player, one donor at a time.
    ///
    /// The donor keeps the transfer while it progresses (a chunk not held
    /// before at least every `interrupt_after`), for up to `EXCLUSIVE_FOR`
    /// of them; another's chunks take over only then, so neither a stray
    /// chunk nor a player sending chunks of its own can hold the feeder's
    /// off for long. The transfer switched from is kept, so switching back
    /// loses nothing. A donor whose snapshot fails its checks is refused
    /// for `EXCLUSIVE_FOR` of `interrupt_after`.
    pub(super) fn take_chunk(&mut self, i: usize, c: &SnapshotChunk<'_>) {
        if self.local_seat.is_some() {
            self.take_resync_chunk(i, c);
            return;
        }
        let (now, from) = (self.now, self.peers[i].id);
        let Some(seat) = self.peers[i].seat else {
            return;
        };
        if c.tick < self.next_tick
            // A seat known to be empty feeds nobody.
            || self.seats[seat.index()].empty_from.is_some()
            || !self.plausible(i, c.tick)
        {
            return;
        }
        self.drop_passed_snapshot();
        let quiet = self.config.interrupt_after;
        let exclusive = quiet * EXCLUSIVE_FOR;
        let limits = &self.config.snapshot;
        let inc = self.incoming.get_or_insert_with(Box::default);
        if inc.ready.is_some()
            || inc.taken.is_some()
            || inc
                .barred
                .is_some_and(|(b, until)| b == from && now < until)
        {
            return;
        }
        match inc.current.as_ref() {
            Some(t) if t.from == from => {}
            Some(t) if now - t.progress < quiet && now - t.began < exclusive => return,
            _ => {
                let mut next = match inc.parked.take() {
                    Some(p) if p.from == from => p,
                    other => {
                        inc.parked = other;
                        Transfer::new(from, limits, now)
                    }
                };
                (next.began, next.progress) = (now, now);
                if let Some(old) = inc.current.replace(next) {
                    inc.parked = Some(old);
                }
            }
        }
        let Some(t) = inc.current.as_mut() else {
            return;
        };
        self.peers[i].link.flush = true;
        let (gained, taken) = take_into(&mut t.receiver, c, self.seats.len());
        if gained {
            t.progress = now;
        }
        match taken {
            Taken::Partial => {}
            Taken::Refused => self.stats.snapshot_errors += 1,
            Taken::Whole(snapshot, empty) => {
                let tick = snapshot.tick;
                inc.ready = Some((snapshot, empty));
                self.restart_checks();
                self.push_event(Event::Snapshot { tick });
            }
            Taken::Bad => {
                self.stats.snapshot_errors += 1;
                inc.barred = Some((from, now + exclusive));
                inc.current = inc.parked.take();
            }
        }
    }

    /// Whether a snapshot of `tick` from peer `i` could be the feeder's:
    /// every live player ran its tick before it was sent, so it is below
    /// the sender's position and not far past the other players' (those
    /// heard lately; a position told to us lags a little).
    fn plausible(&self, i: usize, tick: Tick) -> bool {
        let quiet = self.config.interrupt_after;
        let others = self
            .peers
            .iter()
            .enumerate()
            .filter(|&(k, p)| {
                k != i
                    && p.seat
                        .is_some_and(|s| self.seats[s.index()].empty_from.is_none())
                    && p.link.last_heard().is_some_and(|t| self.now - t < quiet)
            })
            .map(|(_, p)| p.next_tick)
            .max();
        tick < self.peers[i].next_tick
            && others.is_none_or(|o| tick < o.saturating_add(self.config.observer_window))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_round_trips_and_refuses_what_does_not_fit() {
        let empty = [(PlayerId(1), Tick::new(40)), (PlayerId(3), Tick::new(90))];
        let bytes = wrap_envelope(&empty, b"state");
        let (s, got) = open_envelope(Snapshot::new(Tick::new(90), bytes.clone()), 4).unwrap();
        assert_eq!(s.bytes, b"state");
        assert_eq!(got, empty);
        // A tick after the snapshot's, a seat past the width, a truncated
        // list, another version.
        assert!(open_envelope(Snapshot::new(Tick::new(89), bytes.clone()), 4).is_err());
        assert!(open_envelope(Snapshot::new(Tick::new(90), bytes.clone()), 3).is_err());
        assert!(open_envelope(Snapshot::new(Tick::new(90), bytes[..10].to_vec()), 4).is_err());
        let mut v2 = bytes;
        v2[0] = 2;
        assert!(open_envelope(Snapshot::new(Tick::new(90), v2), 4).is_err());
        // Seats out of order.
        let swapped = wrap_envelope(&[empty[1], empty[0]], b"");
        assert!(open_envelope(Snapshot::new(Tick::new(90), swapped), 4).is_err());
    }

    /// A state the observer took is forgotten once its donor was told for
    /// `interrupt_after`, at the instant `poll_timeout` says: a loop that
    /// sleeps until it forgets it then, not at the next keepalive after.
    #[test]
    fn a_taken_state_is_forgotten_when_poll_timeout_says() {
        use crate::mesh::{MeshConfig, Roster};
        use core::time::Duration;
        let config = MeshConfig {
            interrupt_after: Duration::from_secs(5),
            keepalive_interval: Duration::from_millis(300),
            abandon_after: None,
            ..MeshConfig::default()
        };
        let roster = Roster::new()
            .player(PeerId(0), PlayerId(0))
            .player(PeerId(1), PlayerId(1))
            .observer(PeerId(2));
        let at = Instant::from_millis;
        let mut s = MeshSession::<u16>::new(config, roster, PeerId(2), at(0)).unwrap();
        let mut buf = Vec::new();
        s.handle_timeout(at(0));
        while s.poll_transmit(&mut buf).is_some() {}
        s.incoming = Some(Box::new(Incoming {
            taken: Some(at(100)),
            ..Default::default()
        }));
        let mut forgotten = None;
        while let Some(t) = s.poll_timeout().filter(|t| *t < at(10_000)) {
            s.handle_timeout(t);
            while s.poll_transmit(&mut buf).is_some() {}
            if s.incoming.is_none() {
                forgotten = Some(t);
                break;
            }
        }
        assert_eq!(forgotten, Some(at(5_100)));
    }
}
