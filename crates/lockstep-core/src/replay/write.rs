//! Writing a replay as the frames run.

use super::*;

/// How a [`Recorder`] records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordConfig {
    /// Frames per chunk (1 to [`MAX_CHUNK_FRAMES`]; 300 by default, 10 s
    /// at 30 Hz): fewer lose less to a crash, more compress better.
    pub chunk_frames: u32,
    /// A checkpoint (the game's state hash) goes into the file every this
    /// many ticks (30 by default; at least 1): how closely a replay that
    /// differs is located without a divergence seen live. The hashes of the
    /// last [`RECENT_HASHES`] ticks are held as well, and written when the
    /// match finds a divergence ([`keep_recent_hashes`](Recorder::keep_recent_hashes)):
    /// its first tick is then named exactly.
    pub hash_every: u32,
    /// A keyframe (the game's state) every this many ticks, so that
    /// playback seeks without running the match from its start (0, none,
    /// by default: keyframes cost a state each; `lockstep replay index`
    /// builds them beside the file instead).
    pub keyframe_every: u32,
}

impl Default for RecordConfig {
    fn default() -> Self {
        Self {
            chunk_frames: 300,
            hash_every: 30,
            keyframe_every: 0,
        }
    }
}

/// The per-tick state hashes a [`Recorder`] holds, to write when a
/// divergence is found.
pub const RECENT_HASHES: usize = 512;

/// Records a match's frames into a replay file: feed it every frame the
/// game runs, in order, and the game's state hash after it when it asks
/// ([`wants_hash`](Self::wants_hash)); it writes a chunk every
/// [`chunk_frames`](RecordConfig::chunk_frames) frames, so it holds at most
/// that many in memory, and [`finish`](Self::finish) writes the last one
/// and the end. A state the game takes from elsewhere (a resync, a
/// reconnect) goes in with [`state`](Self::state).
pub struct Recorder<I: Input, W: Write> {
    out: W,
    seats: usize,
    /// The next frame's tick (2^32 once tick u32::MAX is recorded: no
    /// frame can follow).
    next: u64,
    last_frame: Option<Tick>,
    frames: Vec<Frame<I>>,
    /// A bound on the coded size of the frames held: a chunk goes out
    /// before it could pass its limit.
    held_bytes: usize,
    checkpoints: Vec<ReplayCheckpoint>,
    hash: Chain,
    config: RecordConfig,
    /// The last ticks' state hashes (see `keep_recent_hashes`).
    recent: std::collections::VecDeque<ReplayCheckpoint>,
    /// Scratch for a chunk's body and its compressed form.
    body: Vec<u8>,
    /// Scratch for an input's encoding.
    scratch: Vec<u8>,
    /// The bound on each seat's run of inputs held, and on what a frame
    /// adds to each.
    seat_bytes: Vec<usize>,
    adds: Vec<usize>,
    record: Vec<u8>,
    written: u64,
    failed: bool,
}

impl<I: Input, W: Write> core::fmt::Debug for Recorder<I, W> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Recorder")
            .field("next", &self.next)
            .field("held", &self.frames.len())
            .field("written", &self.written)
            .finish_non_exhaustive()
    }
}

impl<I: Input, W: Write> Recorder<I, W> {
    /// Writes `header` to `out` and starts recording at its first tick.
    pub fn new(header: Header, out: W) -> Result<Self, ReplayError> {
        Self::with_config(header, out, RecordConfig::default())
    }

    /// As [`new`](Self::new), recording as `config` says.
    pub fn with_config(
        header: Header,
        mut out: W,
        mut config: RecordConfig,
    ) -> Result<Self, ReplayError> {
        config.chunk_frames = config.chunk_frames.clamp(1, MAX_CHUNK_FRAMES);
        config.hash_every = config.hash_every.max(1);
        header.check()?;
        let mut body = Vec::new();
        header.encode(&mut body);
        let mut head = Vec::with_capacity(body.len() + 17);
        head.extend_from_slice(&MAGIC);
        head.push(FORMAT);
        head.extend_from_slice(&(body.len() as u32).to_le_bytes());
        head.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(&body).to_le_bytes());
        head.extend_from_slice(&body);
        out.write_all(&head)?;
        Ok(Self {
            out,
            seats: usize::from(header.seats),
            next: u64::from(header.first_tick.get()),
            last_frame: None,
            held_bytes: 0,
            frames: Vec::new(),
            checkpoints: Vec::new(),
            hash: Chain::new(),
            config,
            recent: std::collections::VecDeque::new(),
            body: Vec::new(),
            scratch: Vec::new(),
            seat_bytes: Vec::new(),
            adds: Vec::new(),
            record: Vec::new(),
            written: head.len() as u64,
            failed: false,
        })
    }

    /// Frames per chunk (1 to [`MAX_CHUNK_FRAMES`]): fewer lose less to a
    /// crash, more compress better.
    pub fn set_chunk_frames(&mut self, n: u32) {
        self.config.chunk_frames = n.clamp(1, MAX_CHUNK_FRAMES);
    }

    /// The tick the next frame must have (`None` once tick `u32::MAX`,
    /// the last, is recorded).
    pub fn next_tick(&self) -> Option<Tick> {
        u32::try_from(self.next).ok().map(Tick::new)
    }

    /// Whether the recorder wants the game's state hash after `tick` (a
    /// checkpoint is due). Hashes offered for other ticks are held, to
    /// locate a divergence exactly.
    pub fn wants_hash(&self, tick: Tick) -> bool {
        tick.get() % self.config.hash_every == self.config.hash_every - 1
    }

    /// Whether a keyframe is due after `tick` (see
    /// [`keyframe_every`](RecordConfig::keyframe_every)): then hand the
    /// game's state to [`state`](Self::state) as a
    /// [`Keyframe`](StateKind::Keyframe).
    pub fn wants_keyframe(&self, tick: Tick) -> bool {
        let k = self.config.keyframe_every;
        k > 0 && tick.get() % k == k - 1
    }

    /// The game's state hash right after `tick`, a tick just recorded: a
    /// checkpoint goes into the file if one is due
    /// ([`wants_hash`](Self::wants_hash)), and the last
    /// [`RECENT_HASHES`] are held.
    pub fn state_hash(&mut self, tick: Tick, value: u64) {
        let c = ReplayCheckpoint { tick, value };
        if self.wants_hash(tick) {
            self.push_checkpoint(c);
        }
        if self.recent.len() >= RECENT_HASHES {
            self.recent.pop_front();
        }
        self.recent.push_back(c);
    }

    /// Writes the state hashes held (every tick's of the last
    /// [`RECENT_HASHES`] offered) into the file: call it when the match
    /// finds that this machine's state parted from the others'
    /// ([`Event::Desync`](crate::Event::Desync)), so that verifying the
    /// replay names the first tick that differs, not only the checkpoint
    /// after it.
    pub fn keep_recent_hashes(&mut self) {
        let every = self.config.hash_every;
        while let Some(c) = self.recent.pop_front() {
            // A due checkpoint is in the file already.
            if c.tick.get() % every != every - 1 {
                self.push_checkpoint(c);
            }
        }
    }

    /// Records a game state (see [`StateKind`]) right after `tick`, with
    /// its hash: a [`Keyframe`](StateKind::Keyframe) or
    /// [`Replaced`](StateKind::Replaced) state after the last frame
    /// recorded; a [`Resync`](StateKind::Resync) or
    /// [`Rejoin`](StateKind::Rejoin) state after it or later (the frames
    /// between were not run here: the next frame is then `tick + 1`).
    /// What is held is written first, so the file keeps its order.
    pub fn state(
        &mut self,
        kind: StateKind,
        tick: Tick,
        hash: u64,
        bytes: &[u8],
    ) -> Result<(), ReplayError> {
        let after = u64::from(tick.get()) + 1;
        let fits = if kind.may_skip() {
            after >= self.next
        } else {
            after == self.next
        };
        if !fits {
            return Err(ReplayError::Frame {
                tick,
                what: "a state that does not follow the frames recorded",
            });
        }
        if bytes.len() > wire::MAX_SNAPSHOT {
            return Err(ReplayError::Frame {
                tick,
                what: "a state over the snapshot limit",
            });
        }
        self.flush_chunk()?;
        let packed = encode_state(kind, tick, hash, bytes, &mut self.body);
        self.write_record(TAG_STATE, packed)?;
        self.next = after;
        Ok(())
    }

    fn push_checkpoint(&mut self, c: ReplayCheckpoint) {
        if self.checkpoints.len() >= MAX_CHECKPOINTS {
            // A chunk carries so many at most: it goes out early.
            if self.flush_chunk().is_err() {
                return;
            }
        }
        self.checkpoints.push(c);
    }

    /// Records the next frame (it must follow the last one, with the
    /// header's seats).
    pub fn record(&mut self, frame: &Frame<I>) -> Result<(), ReplayError> {
        if self.failed {
            return Err(ReplayError::Frame {
                tick: frame.tick,
                what: "the writer failed before",
            });
        }
        if u64::from(frame.tick.get()) != self.next {
            return Err(ReplayError::Frame {
                tick: frame.tick,
                what: "not the next tick",
            });
        }
        if frame.inputs.len() != self.seats {
            return Err(ReplayError::Frame {
                tick: frame.tick,
                what: "not the header's seats",
            });
        }
        // A bound on what the frame adds to the chunk's coded size (each
        // input whole, its length and mask, a bit of each bitmap, the
        // events), and to each seat's run of inputs, which a `Frames` body
        // holds to a datagram's length.
        self.adds.clear();
        for cell in &frame.inputs {
            self.scratch.clear();
            if let Some(i) = cell {
                i.encode(&mut self.scratch);
            }
            self.adds.push(self.scratch.len() + 12);
        }
        let bytes = 8 + self.adds.iter().sum::<usize>() + frame.events.len() * 16;
        let seat_full = self
            .seat_bytes
            .iter()
            .zip(&self.adds)
            .any(|(held, add)| held + add > SEAT_BYTES);
        if !self.frames.is_empty() && (self.held_bytes + bytes > CHUNK_BYTES || seat_full) {
            self.flush_chunk()?;
        }
        self.seat_bytes.resize(self.adds.len(), 0);
        for (held, add) in self.seat_bytes.iter_mut().zip(&self.adds) {
            *held += add;
        }
        self.frames.push(frame.clone());
        self.held_bytes += bytes;
        self.next = u64::from(frame.tick.get()) + 1;
        self.last_frame = Some(frame.tick);
        if self.frames.len() >= self.config.chunk_frames as usize {
            self.flush_chunk()?;
        }
        Ok(())
    }

    /// Records the game's state hash right after `tick` as a checkpoint,
    /// due or not (see [`ReplayCheckpoint`]), for [`verify`].
    pub fn checkpoint(&mut self, tick: Tick, value: u64) {
        self.push_checkpoint(ReplayCheckpoint { tick, value });
    }

    /// The writer.
    pub fn get_ref(&self) -> &W {
        &self.out
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Writes what is held as a chunk (nothing if nothing is).
    pub fn flush_chunk(&mut self) -> Result<(), ReplayError> {
        if self.frames.is_empty() && self.checkpoints.is_empty() {
            return Ok(());
        }
        self.body.clear();
        let start = self.frames.first().map_or_else(
            || self.next_tick().unwrap_or(Tick::new(u32::MAX)),
            |f| f.tick,
        );
        put_tick(&mut self.body, start);
        put_varint(&mut self.body, self.frames.len() as u64);
        let mut frames = Vec::new();
        wire::encode_frames_body(&self.frames, self.seats, None, &mut frames);
        put_bytes(&mut self.body, &frames);
        self.hash.chunk(&self.body, self.frames.len());
        put_varint(&mut self.body, self.checkpoints.len() as u64);
        for c in &self.checkpoints {
            put_tick(&mut self.body, c.tick);
            put_u64_le(&mut self.body, c.value);
        }
        put_u64_le(&mut self.body, self.hash.value());
        let packed = lz4_flex::block::compress(&self.body);
        self.write_record(TAG_CHUNK, packed)?;
        self.frames.clear();
        self.held_bytes = 0;
        self.seat_bytes.iter_mut().for_each(|b| *b = 0);
        self.checkpoints.clear();
        Ok(())
    }

    /// Writes the last chunk and the end record, and hands the writer back.
    pub fn finish(mut self) -> Result<W, ReplayError> {
        self.flush_chunk()?;
        let mut body = Vec::new();
        put_varint(&mut body, self.hash.frames());
        match self.last_frame {
            Some(t) => {
                body.push(1);
                put_tick(&mut body, t);
            }
            None => body.push(0),
        }
        put_u64_le(&mut body, self.hash.value());
        self.write_record(TAG_END, body)?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn write_record(&mut self, tag: u8, stored: Vec<u8>) -> Result<(), ReplayError> {
        if self.failed {
            return Err(ReplayError::Io(std::io::Error::other(
                "the writer failed before",
            )));
        }
        let raw = if tag != TAG_END {
            self.body.len()
        } else {
            stored.len()
        };
        // Never a record a reader refuses.
        let (max_stored, max_raw) = record_limits(tag);
        if stored.len() > max_stored || raw > max_raw {
            return Err(ReplayError::TooLarge {
                record: 0,
                len: stored.len().max(raw),
                max: max_raw,
            });
        }
        self.record.clear();
        frame_record(&mut self.record, tag, raw, &stored);
        if let Err(e) = self.out.write_all(&self.record) {
            self.failed = true;
            return Err(e.into());
        }
        self.written += self.record.len() as u64;
        Ok(())
    }
}
