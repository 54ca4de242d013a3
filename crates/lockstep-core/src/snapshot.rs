//! Moving a game state over the network: compressed, cut into chunks that
//! each carry a checksum, acknowledged and resent on loss, paced, and
//! bounded on both sides.
//!
//! A [`Snapshot`] is the game's state right after a confirmed tick, as bytes
//! only the game understands. The engine moves it: a [`SnapshotSender`]
//! compresses it (LZ4) and hands out chunks as datagram space allows; a
//! [`SnapshotReceiver`] checks every chunk, reassembles, checks the whole
//! and gives the snapshot back. Between them, [`SnapshotAck`]s say which
//! chunks arrived. Both are sans-IO: the session that owns them decides
//! which datagram a chunk rides in.
//!
//! ```
//! use lockstep_core::snapshot::{Snapshot, SnapshotReceiver, SnapshotSender, SnapshotLimits};
//! use lockstep_core::{Instant, Tick};
//!
//! let state = Snapshot::new(Tick::new(90), vec![7; 5_000]);
//! let limits = SnapshotLimits::default();
//! let mut tx = SnapshotSender::new(1, &state, 1_000, &limits)?;
//! let mut rx = SnapshotReceiver::new(limits);
//! let now = Instant::ZERO;
//! let mut done = None;
//! while done.is_none() {
//!     while let Some(chunk) = tx.next_chunk(now) {
//!         done = rx.take(&chunk.as_message())?;
//!     }
//!     if let Some(ack) = rx.ack() {
//!         tx.take_ack(&ack, now);
//!     }
//! }
//! assert_eq!(done, Some(state));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::wire::{DatagramWriter, Message, SnapshotAck, SnapshotChunk};
use crate::{Instant, Tick};
use core::time::Duration;
use std::sync::Arc;
use xxhash_rust::xxh3::xxh3_64;

/// The game's state right after `tick` ran, as bytes the game produced and
/// alone can restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The last tick the state includes.
    pub tick: Tick,
    /// The state.
    pub bytes: Vec<u8>,
}

impl Snapshot {
    /// A snapshot of the state after `tick`.
    pub fn new(tick: Tick, bytes: Vec<u8>) -> Self {
        Self { tick, bytes }
    }

    /// xxh3-64 of the bytes: what the whole is checked against.
    pub fn hash(&self) -> u64 {
        xxh3_64(&self.bytes)
    }
}

/// Bounds on snapshots, the same for sending and receiving.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotLimits {
    /// The largest snapshot (uncompressed) sent or taken.
    pub max_len: usize,
    /// Chunks sent and not yet acknowledged, at most.
    pub window: u32,
    /// How long an unacknowledged chunk waits before it is sent again.
    pub resend_after: Duration,
}

impl Default for SnapshotLimits {
    fn default() -> Self {
        Self {
            max_len: 16 << 20,
            window: 64,
            resend_after: Duration::from_millis(200),
        }
    }
}

/// Why a snapshot could not be sent or was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The snapshot is larger than the configured cap.
    #[error("snapshot of {len} bytes over the {max}-byte cap")]
    TooLarge {
        /// Its size (uncompressed).
        len: u64,
        /// The cap.
        max: usize,
    },
    /// No room for a chunk of at least 64 bytes in a datagram.
    #[error("chunks of {0} bytes are too small")]
    ChunkTooSmall(usize),
    /// A chunk's bytes do not match its checksum.
    #[error("snapshot {id} chunk {index}: checksum mismatch")]
    BadChunk {
        /// The snapshot.
        id: u32,
        /// The chunk.
        index: u32,
    },
    /// A chunk disagrees with the snapshot's earlier chunks (size, count,
    /// tick or hash), or its length does not fit its position.
    #[error("snapshot {id} chunk {index}: {what}")]
    Inconsistent {
        /// The snapshot.
        id: u32,
        /// The chunk.
        index: u32,
        /// What does not fit.
        what: &'static str,
    },
    /// Every chunk arrived, but the whole does not decompress to its size
    /// or does not match its hash.
    #[error("snapshot {id}: the reassembled state does not match its hash")]
    BadWhole {
        /// The snapshot.
        id: u32,
    },
}

/// A chunk to send, borrowed from its [`SnapshotSender`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutgoingChunk<'a> {
    msg: SnapshotChunk<'a>,
}

impl<'a> OutgoingChunk<'a> {
    /// The wire message carrying it.
    pub fn as_message(&self) -> SnapshotChunk<'a> {
        self.msg
    }
}

/// The checksum of one chunk: the low 32 bits of xxh3-64 over its bytes.
pub fn chunk_checksum(data: &[u8]) -> u32 {
    xxh3_64(data) as u32
}

/// Sends one snapshot: compresses it once, then hands out chunks, new ones
/// while fewer than `window` are unacknowledged, lost ones again after
/// `resend_after`.
#[derive(Debug, Clone)]
pub struct SnapshotSender {
    id: u32,
    tick: Tick,
    raw_len: u32,
    hash: u64,
    /// Shared by every sender of the same snapshot.
    packed: Arc<[u8]>,
    chunk_len: usize,
    count: u32,
    /// Per chunk: acknowledged.
    acked: Vec<bool>,
    /// Per chunk: when it was last sent.
    sent: Vec<Option<Instant>>,
    acked_count: u32,
    /// The lowest chunk not acknowledged.
    base: u32,
    limits: SnapshotLimits,
    /// Where the search for the next chunk to send starts.
    cursor: u32,
    /// When an acknowledgement last covered a new chunk (or the first chunk
    /// went out).
    progress: Option<Instant>,
    /// Resend rounds since the last progress. After three, only the first
    /// missing chunk goes again, eight times slower: a receiver that stops
    /// acknowledging is not sent the window again and again.
    rounds: u32,
    /// When the last resend round began.
    resent_at: Option<Instant>,
    /// Chunks allowed unacknowledged now: the configured window, halved by
    /// every resend round that follows another without progress and grown
    /// back by every chunk acknowledged, so a receiver that acknowledges
    /// slowly is sent little.
    cwnd: u32,
    /// When the first chunk went out.
    started: Option<Instant>,
}

/// Full resend rounds without progress before the sender only probes.
const FULL_ROUNDS: u32 = 3;

/// Chunks sent before the receiver acknowledges any: a receiver that never
/// asked (its address forged) gets a few datagrams, not a window of them.
/// Each chunk acknowledged grows the window by one, up to the configured
/// one: it doubles every round trip.
const INITIAL_WINDOW: u32 = 4;

impl SnapshotSender {
    /// Prepares `snapshot` as snapshot `id`, in chunks of at most
    /// `chunk_len` bytes (what a datagram has room for).
    ///
    /// Compression makes even an empty state a few bytes, so a snapshot
    /// always has at least one non-empty chunk.
    pub fn new(
        id: u32,
        snapshot: &Snapshot,
        chunk_len: usize,
        limits: &SnapshotLimits,
    ) -> Result<Self, SnapshotError> {
        let max = limits.max_len.min(crate::wire::MAX_SNAPSHOT);
        if snapshot.bytes.len() > max {
            return Err(SnapshotError::TooLarge {
                len: snapshot.bytes.len() as u64,
                max,
            });
        }
        if chunk_len < 64 {
            return Err(SnapshotError::ChunkTooSmall(chunk_len));
        }
        let packed = lz4_flex::block::compress(&snapshot.bytes);
        // Equal chunks but the last: as many as `chunk_len` needs, then as
        // even as they go (the receiver derives the size from the count).
        let count = packed.len().div_ceil(chunk_len).max(1);
        let chunk_len = packed.len().div_ceil(count);
        if count > crate::wire::MAX_CHUNKS {
            return Err(SnapshotError::TooLarge {
                len: snapshot.bytes.len() as u64,
                max: crate::wire::MAX_CHUNKS * chunk_len,
            });
        }
        Ok(Self {
            id,
            tick: snapshot.tick,
            raw_len: snapshot.bytes.len() as u32,
            hash: snapshot.hash(),
            packed: packed.into(),
            chunk_len,
            count: count as u32,
            acked: vec![false; count],
            sent: vec![None; count],
            acked_count: 0,
            base: 0,
            limits: limits.clone(),
            cursor: 0,
            progress: None,
            rounds: 0,
            resent_at: None,
            cwnd: limits.window.clamp(1, INITIAL_WINDOW),
            started: None,
        })
    }

    /// The same snapshot for another receiver, as snapshot `id`: the
    /// compressed bytes are shared, not copied or compressed again.
    pub fn for_another(&self, id: u32) -> Self {
        let count = self.count as usize;
        Self {
            id,
            acked: vec![false; count],
            sent: vec![None; count],
            acked_count: 0,
            base: 0,
            cursor: 0,
            progress: None,
            rounds: 0,
            resent_at: None,
            cwnd: self.limits.window.clamp(1, INITIAL_WINDOW),
            started: None,
            ..self.clone()
        }
    }

    /// The snapshot's id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The tick the snapshot follows.
    pub fn tick(&self) -> Tick {
        self.tick
    }

    /// Bytes on the wire for the whole snapshot (compressed).
    pub fn packed_len(&self) -> usize {
        self.packed.len()
    }

    /// Chunks in all.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Whether the receiver has every chunk.
    pub fn done(&self) -> bool {
        self.acked_count == self.count
    }

    /// The next chunk due at `now`, if any: a lost one (unacknowledged for
    /// `resend_after`), else a new one within the window. Call again for
    /// more; each call marks the chunk sent.
    pub fn next_chunk(&mut self, now: Instant) -> Option<OutgoingChunk<'_>> {
        let index = self.due(now)?;
        if self.sent[index as usize].is_some() && self.resent_at != Some(now) {
            self.resent_at = Some(now);
            self.rounds = self.rounds.saturating_add(1);
            // A second round with nothing acknowledged since the first: the
            // receiver is not keeping up (or not trying), so send it less.
            if self.rounds >= 2 {
                self.cwnd = (self.cwnd / 2).max(1);
            }
        }
        self.started.get_or_insert(now);
        self.sent[index as usize] = Some(now);
        self.progress.get_or_insert(now);
        self.cursor = index + 1;
        let start = index as usize * self.chunk_len;
        let end = (start + self.chunk_len).min(self.packed.len());
        let data = &self.packed[start..end];
        Some(OutgoingChunk {
            msg: SnapshotChunk {
                id: self.id,
                tick: self.tick,
                raw_len: self.raw_len,
                packed_len: self.packed.len() as u32,
                hash: self.hash,
                index,
                count: self.count,
                checksum: chunk_checksum(data),
                data,
            },
        })
    }

    fn due(&self, now: Instant) -> Option<u32> {
        let window_end = self.base.saturating_add(self.cwnd.max(1)).min(self.count);
        // Lost first: the receiver cannot finish without them.
        let from = self.cursor.clamp(self.base, window_end);
        let wait = self.limits.resend_after;
        let lost = |i: u32| {
            !self.acked[i as usize] && self.sent[i as usize].is_some_and(|t| now - t >= wait)
        };
        let round_open = match self.resent_at {
            None => true,
            // The round under way (one call, one instant) goes on.
            Some(t) if t == now => true,
            Some(t) => now - t >= self.round_gap(),
        };
        if round_open {
            // Past the full rounds, a probe: the first missing chunk alone.
            let end = if self.rounds >= FULL_ROUNDS {
                (self.base + 1).min(window_end)
            } else {
                window_end
            };
            if let Some(i) = (self.base..end).find(|&i| lost(i)) {
                return Some(i);
            }
        }
        (from..window_end)
            .chain(self.base..from)
            .find(|&i| self.sent[i as usize].is_none())
    }

    /// Writes as many due chunks as `w` has room for, after whatever it
    /// holds already; returns whether it wrote any. A datagram with no room
    /// for one is no reason to send another at once: the next one will not
    /// have more.
    pub fn write_due(&mut self, w: &mut DatagramWriter<'_>, now: Instant) -> bool {
        let mut carried = false;
        while w.remaining() > self.chunk_room() {
            let Some(chunk) = self.next_chunk(now) else {
                break;
            };
            if w.push(&Message::SnapshotChunk(chunk.as_message())).is_err() {
                break;
            }
            carried = true;
        }
        carried
    }

    /// Whether a chunk is due at `now` (see [`next_chunk`](Self::next_chunk)).
    pub fn has_due(&self, now: Instant) -> bool {
        self.due(now).is_some()
    }

    /// The most bytes one chunk's message takes on the wire.
    pub fn chunk_room(&self) -> usize {
        self.chunk_len + 48
    }

    /// The least time between two resend rounds.
    fn round_gap(&self) -> Duration {
        if self.rounds >= FULL_ROUNDS {
            self.limits.resend_after * 8
        } else {
            self.limits.resend_after
        }
    }

    /// When a chunk next falls due by time alone (a resend), if any.
    pub fn next_resend(&self) -> Option<Instant> {
        let window_end = self.base.saturating_add(self.cwnd.max(1)).min(self.count);
        // Past the full rounds only the first missing chunk is probed: a
        // later one sent long ago is not due (the same rule as `due`).
        let end = if self.rounds >= FULL_ROUNDS {
            (self.base + 1).min(window_end)
        } else {
            window_end
        };
        (self.base..end)
            .filter(|&i| !self.acked[i as usize])
            .filter_map(|i| self.sent[i as usize])
            .min()
            .map(|t| {
                let due = t + self.limits.resend_after;
                self.resent_at
                    .map_or(due, |r| due.max(r + self.round_gap()))
            })
    }

    /// When the receiver last acknowledged a chunk it had not before (or
    /// the first chunk went out): a receiver that stops acknowledging stops
    /// this.
    pub fn last_progress(&self) -> Option<Instant> {
        self.progress
    }

    /// Takes the receiver's acknowledgement at `now`. Acks for another
    /// snapshot, or naming chunks that do not exist, change nothing.
    pub fn take_ack(&mut self, ack: &SnapshotAck, now: Instant) {
        if ack.id != self.id {
            return;
        }
        let before = self.acked_count;
        let next = ack.next.min(self.count);
        for i in 0..next {
            self.mark(i);
        }
        for bit in 0..64u32 {
            if ack.bits & (1 << bit) != 0 {
                let i = ack.next.saturating_add(1).saturating_add(bit);
                if i < self.count {
                    self.mark(i);
                }
            }
        }
        while self.base < self.count && self.acked[self.base as usize] {
            self.base += 1;
        }
        if self.acked_count > before {
            self.progress = Some(now);
        }
    }

    fn mark_progress(&mut self) {
        self.rounds = 0;
        self.resent_at = None;
    }

    fn mark(&mut self, i: u32) {
        let a = &mut self.acked[i as usize];
        if !*a {
            *a = true;
            self.acked_count += 1;
            self.cwnd = (self.cwnd + 1).min(self.limits.window.max(1));
            self.mark_progress();
        }
    }

    /// When the first chunk went out, if one has.
    pub fn started(&self) -> Option<Instant> {
        self.started
    }
}

/// Reassembles one snapshot at a time from chunks, checking each.
#[derive(Debug, Clone)]
pub struct SnapshotReceiver {
    limits: SnapshotLimits,
    current: Option<Assembly>,
    /// The last snapshot completed, and its chunk count: its late chunks
    /// are ignored, and it is acknowledged whole.
    finished: Option<(u32, u32)>,
}

#[derive(Debug, Clone)]
struct Assembly {
    id: u32,
    tick: Tick,
    raw_len: u32,
    packed_len: u32,
    hash: u64,
    count: u32,
    chunk_len: usize,
    packed: Vec<u8>,
    have: Vec<bool>,
    received: u32,
    /// A chunk arrived since the last acknowledgement.
    news: bool,
}

impl SnapshotReceiver {
    /// A receiver holding nothing.
    pub fn new(limits: SnapshotLimits) -> Self {
        Self {
            limits,
            current: None,
            finished: None,
        }
    }

    /// The snapshot being received: its id, tick, and how many of its
    /// chunks are in, of how many.
    pub fn progress(&self) -> Option<(u32, Tick, u32, u32)> {
        self.current
            .as_ref()
            .map(|a| (a.id, a.tick, a.received, a.count))
    }

    /// Forgets the snapshot being received (its sender is gone, or another
    /// one replaces it).
    pub fn reset(&mut self) {
        self.current = None;
    }

    /// Takes a chunk; returns the snapshot once it is whole and checked. A
    /// chunk of a different snapshot id replaces the one in progress (the
    /// sender restarted, or another took over). An error leaves what was
    /// received so far untouched.
    pub fn take(&mut self, c: &SnapshotChunk<'_>) -> Result<Option<Snapshot>, SnapshotError> {
        if self.finished.is_some_and(|(id, _)| id == c.id) {
            return Ok(None);
        }
        let bad = |what| SnapshotError::Inconsistent {
            id: c.id,
            index: c.index,
            what,
        };
        let max = self.limits.max_len.min(crate::wire::MAX_SNAPSHOT);
        if c.raw_len as usize > max {
            return Err(SnapshotError::TooLarge {
                len: u64::from(c.raw_len),
                max,
            });
        }
        // LZ4 never grows its input by more than this.
        if c.packed_len as usize > lz4_flex::block::get_maximum_output_size(c.raw_len as usize) {
            return Err(bad("compressed size impossible for its size"));
        }
        if c.count == 0 || c.index >= c.count {
            return Err(bad("index past the chunk count"));
        }
        if chunk_checksum(c.data) != c.checksum {
            return Err(SnapshotError::BadChunk {
                id: c.id,
                index: c.index,
            });
        }
        // Every chunk but the last is `ceil(packed_len / count)` bytes, and
        // the last is not empty.
        let chunk_len = (c.packed_len as usize).div_ceil(c.count as usize);
        let before_last = u64::from(c.count - 1) * chunk_len as u64;
        if c.packed_len == 0 || before_last >= u64::from(c.packed_len) {
            return Err(bad("chunk count does not fit the sizes"));
        }
        let fresh = self.current.as_ref().is_none_or(|a| a.id != c.id);
        if fresh {
            self.current = Some(Assembly {
                id: c.id,
                tick: c.tick,
                raw_len: c.raw_len,
                packed_len: c.packed_len,
                hash: c.hash,
                count: c.count,
                chunk_len,
                packed: Vec::new(),
                have: vec![false; c.count as usize],
                received: 0,
                news: false,
            });
        }
        let Some(a) = self.current.as_mut() else {
            return Ok(None);
        };
        if (a.tick, a.raw_len, a.packed_len, a.hash, a.count)
            != (c.tick, c.raw_len, c.packed_len, c.hash, c.count)
        {
            return Err(bad("disagrees with the snapshot's other chunks"));
        }
        let start = c.index as usize * a.chunk_len;
        let end = (start + a.chunk_len).min(a.packed_len as usize);
        if start >= a.packed_len as usize || c.data.len() != end - start {
            return Err(bad("length does not fit its position"));
        }
        a.news = true;
        if a.have[c.index as usize] {
            return Ok(None);
        }
        if a.packed.is_empty() {
            a.packed = vec![0; a.packed_len as usize];
        }
        a.packed[start..end].copy_from_slice(c.data);
        a.have[c.index as usize] = true;
        a.received += 1;
        if a.received < a.count {
            return Ok(None);
        }
        let id = a.id;
        let whole = lz4_flex::block::decompress(&a.packed, a.raw_len as usize)
            .ok()
            .filter(|raw| raw.len() == a.raw_len as usize && xxh3_64(raw) == a.hash);
        let (tick, count) = (a.tick, a.count);
        self.current = None;
        match whole {
            Some(bytes) => {
                self.finished = Some((id, count));
                Ok(Some(Snapshot { tick, bytes }))
            }
            None => Err(SnapshotError::BadWhole { id }),
        }
    }

    /// What to tell the sender, if a chunk arrived since the last call: the
    /// first chunk missing and which of the 64 after it are in.
    pub fn ack(&mut self) -> Option<SnapshotAck> {
        let a = self.current.as_mut()?;
        if !a.news {
            return None;
        }
        a.news = false;
        Some(Self::ack_of(a))
    }

    /// The acknowledgement of the snapshot in progress (or of the last one
    /// completed, whole), whether or not anything arrived since the last
    /// one: to repeat it on a timer.
    pub fn current_ack(&self) -> Option<SnapshotAck> {
        match (&self.current, self.finished) {
            (Some(a), _) => Some(Self::ack_of(a)),
            (None, Some((id, count))) => Some(SnapshotAck {
                id,
                next: count,
                bits: 0,
            }),
            (None, None) => None,
        }
    }

    fn ack_of(a: &Assembly) -> SnapshotAck {
        let next = a.have.iter().position(|h| !h).unwrap_or(a.have.len()) as u32;
        let mut bits = 0u64;
        for bit in 0..64u32 {
            let i = next as usize + 1 + bit as usize;
            if a.have.get(i).copied().unwrap_or(false) {
                bits |= 1 << bit;
            }
        }
        SnapshotAck {
            id: a.id,
            next,
            bits,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::SimRng;

    fn pseudo_state(rng: &mut SimRng, len: usize) -> Vec<u8> {
        // Compressible like a game state: runs and repeats, some noise.
        let mut v = Vec::with_capacity(len);
        while v.len() < len {
            let b = rng.next_u64() as u8;
            let run = 1 + rng.below(12) as usize;
            v.extend(std::iter::repeat_n(b, run));
        }
        v.truncate(len);
        v
    }

    /// Sends `state` through a lossy, duplicating, reordering channel;
    /// returns the snapshot received and the chunks sent.
    fn transfer(seed: u64, state: &Snapshot, loss: f64) -> (Snapshot, usize) {
        let limits = SnapshotLimits::default();
        let mut tx = SnapshotSender::new(9, state, 1_100, &limits).unwrap();
        let mut rx = SnapshotReceiver::new(limits);
        let mut rng = SimRng::new(seed);
        let mut now = Instant::ZERO;
        let mut sent = 0;
        let mut in_flight: Vec<Vec<u8>> = Vec::new();
        for _ in 0..100_000 {
            now += Duration::from_millis(10);
            while let Some(c) = tx.next_chunk(now) {
                sent += 1;
                let mut buf = Vec::new();
                let mut w = DatagramWriter::new(&mut buf, Tick::ZERO, 1_200);
                w.push(&Message::SnapshotChunk(c.as_message())).unwrap();
                w.finish();
                if !rng.chance(loss) {
                    in_flight.push(buf.clone());
                }
                if rng.chance(0.1) {
                    in_flight.push(buf);
                }
            }
            // Deliver in a shuffled order.
            while !in_flight.is_empty() {
                let i = rng.below(in_flight.len() as u64) as usize;
                let buf = in_flight.swap_remove(i);
                let d = crate::wire::Datagram::decode(&buf, Tick::ZERO).unwrap();
                for m in &d.messages {
                    if let Message::SnapshotChunk(c) = m
                        && let Some(done) = rx.take(c).unwrap()
                    {
                        return (done, sent);
                    }
                }
            }
            if !rng.chance(loss)
                && let Some(a) = rx.ack()
            {
                tx.take_ack(&a, now);
            }
        }
        panic!("transfer did not finish");
    }

    #[test]
    fn a_snapshot_crosses_loss_duplication_and_reordering_intact() {
        for seed in 0..40u64 {
            let mut rng = SimRng::new(seed);
            let len = rng.below(300_000) as usize;
            let state = Snapshot::new(Tick::new(seed as u32 * 7), pseudo_state(&mut rng, len));
            let loss = (seed % 5) as f64 * 0.1;
            let (got, _) = transfer(seed, &state, loss);
            assert_eq!(got, state, "seed {seed}");
        }
    }

    #[test]
    fn an_empty_state_still_travels() {
        let state = Snapshot::new(Tick::new(1), Vec::new());
        let (got, sent) = transfer(1, &state, 0.0);
        assert_eq!(got, state);
        assert_eq!(sent, 1);
    }

    #[test]
    fn without_loss_each_chunk_goes_once() {
        let mut rng = SimRng::new(3);
        let state = Snapshot::new(Tick::new(5), pseudo_state(&mut rng, 200_000));
        let tx = SnapshotSender::new(1, &state, 1_100, &SnapshotLimits::default()).unwrap();
        let count = tx.count() as usize;
        assert!(tx.packed_len() < 200_000, "compressed: {}", tx.packed_len());
        let (got, sent) = transfer(3, &state, 0.0);
        assert_eq!(got, state);
        // Duplicates in the channel do not make the sender repeat itself.
        assert_eq!(sent, count);
    }

    #[test]
    fn a_receiver_that_never_acknowledges_gets_four_chunks_then_probes() {
        let mut rng = SimRng::new(4);
        let state = Snapshot::new(Tick::new(5), pseudo_state(&mut rng, 200_000));
        let mut tx = SnapshotSender::new(1, &state, 1_100, &SnapshotLimits::default()).unwrap();
        let mut sent = 0;
        let mut now = Instant::ZERO;
        // A minute of silence from the receiver (its address forged, say).
        for _ in 0..600 {
            while tx.next_chunk(now).is_some() {
                sent += 1;
            }
            now += Duration::from_millis(100);
        }
        // Four at first, resent in three rounds of a halving window (4, 2,
        // 1), then one probe every 1.6 s: 48 chunks of 1.1 KB in a minute.
        assert!(
            sent <= 4 + 4 + 2 + 1 + 60 / 2 * 10 / 8 + 1,
            "{sent} chunks for no acknowledgement"
        );
        assert!(sent >= 4);
    }

    /// A chunk held with its own bytes.
    struct Owned {
        meta: SnapshotChunk<'static>,
        data: Vec<u8>,
    }

    impl Owned {
        fn view(&self) -> SnapshotChunk<'_> {
            SnapshotChunk {
                data: &self.data,
                ..self.meta
            }
        }
    }

    fn chunks_of(state: &Snapshot) -> Vec<Owned> {
        let mut tx = SnapshotSender::new(4, state, 100, &SnapshotLimits::default()).unwrap();
        let mut out = Vec::new();
        while !tx.done() {
            while let Some(c) = tx.next_chunk(Instant::ZERO) {
                let m = c.as_message();
                out.push(Owned {
                    meta: SnapshotChunk { data: &[], ..m },
                    data: m.data.to_vec(),
                });
            }
            // Acknowledged, the window opens on the next chunks.
            let next = out.len() as u32;
            tx.take_ack(
                &SnapshotAck {
                    id: 4,
                    next,
                    bits: 0,
                },
                Instant::ZERO,
            );
        }
        out
    }

    #[test]
    fn bad_chunks_get_typed_errors_and_change_nothing() {
        let mut rng = SimRng::new(8);
        let state = Snapshot::new(
            Tick::new(40),
            (0..2_000).map(|_| rng.next_u64() as u8).collect(),
        );
        let chunks = chunks_of(&state);
        assert!(chunks.len() > 3);
        let mut rx = SnapshotReceiver::new(SnapshotLimits::default());
        assert_eq!(rx.take(&chunks[0].view()), Ok(None));
        // A flipped byte: the chunk checksum catches it.
        let mut flipped = chunks[1].data.clone();
        flipped[0] ^= 1;
        let bad = SnapshotChunk {
            data: &flipped,
            ..chunks[1].view()
        };
        assert_eq!(
            rx.take(&bad),
            Err(SnapshotError::BadChunk { id: 4, index: 1 })
        );
        // A chunk claiming another tick for the same snapshot.
        let other_tick = SnapshotChunk {
            tick: Tick::new(41),
            ..chunks[1].view()
        };
        assert!(matches!(
            rx.take(&other_tick),
            Err(SnapshotError::Inconsistent { .. })
        ));
        // Over the cap.
        let mut small = SnapshotReceiver::new(SnapshotLimits {
            max_len: 1_000,
            ..SnapshotLimits::default()
        });
        assert!(matches!(
            small.take(&chunks[0].view()),
            Err(SnapshotError::TooLarge { len: 2_000, .. })
        ));
        // A consistent set whose whole does not match its hash.
        let mut liar = SnapshotReceiver::new(SnapshotLimits::default());
        let mut last = Err(SnapshotError::BadWhole { id: 0 });
        for c in &chunks {
            last = liar.take(&SnapshotChunk {
                hash: c.meta.hash ^ 1,
                ..c.view()
            });
        }
        assert_eq!(last, Err(SnapshotError::BadWhole { id: 4 }));
        // The good receiver still completes with the rest.
        let mut done = None;
        for c in &chunks[1..] {
            done = rx.take(&c.view()).unwrap().or(done);
        }
        assert_eq!(done, Some(state.clone()));
        // Sending over the cap is refused before any work.
        let big = Snapshot::new(Tick::ZERO, vec![0; 2_000]);
        let limits = SnapshotLimits {
            max_len: 1_000,
            ..SnapshotLimits::default()
        };
        assert!(matches!(
            SnapshotSender::new(1, &big, 1_000, &limits),
            Err(SnapshotError::TooLarge { .. })
        ));
    }
}
