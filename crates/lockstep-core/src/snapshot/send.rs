//! Sending a snapshot: compressed once, chunked, within a window that
//! grows while chunks are acknowledged, lost ones sent again.

use super::*;

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
pub(super) const FULL_ROUNDS: u32 = 3;

/// Chunks sent before the receiver acknowledges any: a receiver that never
/// asked (its address forged) gets a few datagrams, not a window of them.
/// Each chunk acknowledged grows the window by one, up to the configured
/// one: it doubles every round trip.
pub(super) const INITIAL_WINDOW: u32 = 4;

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
