//! Writing a replay as the frames run.

use super::*;

/// Records a match's frames into a replay file: feed it every frame the
/// game runs, in order, and the checkpoints of its state hash chain; it
/// writes a chunk every [`chunk_frames`](Self::set_chunk_frames) frames
/// (300 by default: 10 s at 30 Hz), so it holds at most that many in
/// memory, and [`finish`](Self::finish) writes the last one and the end.
pub struct Recorder<I: Input, W: Write> {
    out: W,
    seats: usize,
    next: Tick,
    frames: Vec<Frame<I>>,
    checkpoints: Vec<ReplayCheckpoint>,
    hash: StreamHash,
    chunk_frames: usize,
    /// Scratch for a chunk's body and its compressed form.
    body: Vec<u8>,
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
    pub fn new(header: Header, mut out: W) -> Result<Self, ReplayError> {
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
            next: header.first_tick,
            frames: Vec::new(),
            checkpoints: Vec::new(),
            hash: StreamHash::new(),
            chunk_frames: 300,
            body: Vec::new(),
            record: Vec::new(),
            written: head.len() as u64,
            failed: false,
        })
    }

    /// Frames per chunk (1 to [`MAX_CHUNK_FRAMES`]): fewer lose less to a
    /// crash and seek closer, more compress better.
    pub fn set_chunk_frames(&mut self, n: u32) {
        self.chunk_frames = n.clamp(1, MAX_CHUNK_FRAMES) as usize;
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
        if frame.tick != self.next {
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
        self.frames.push(frame.clone());
        self.next = frame.tick.saturating_add(1);
        if self.frames.len() >= self.chunk_frames {
            self.flush_chunk()?;
        }
        Ok(())
    }

    /// Records the game's state hash right after `tick` (see
    /// [`ReplayCheckpoint`]), for [`verify`].
    pub fn checkpoint(&mut self, tick: Tick, value: u64) {
        if self.checkpoints.len() < MAX_CHECKPOINTS {
            self.checkpoints.push(ReplayCheckpoint { tick, value });
        }
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
        for f in &self.frames {
            self.hash.push(f);
        }
        self.body.clear();
        let start = self.frames.first().map_or(self.next, |f| f.tick);
        put_tick(&mut self.body, start);
        put_varint(&mut self.body, self.frames.len() as u64);
        let mut frames = Vec::new();
        wire::encode_frames_body(&self.frames, self.seats, None, &mut frames);
        put_bytes(&mut self.body, &frames);
        put_varint(&mut self.body, self.checkpoints.len() as u64);
        for c in &self.checkpoints {
            put_tick(&mut self.body, c.tick);
            put_u64_le(&mut self.body, c.value);
        }
        put_u64_le(&mut self.body, self.hash.value());
        let packed = lz4_flex::block::compress(&self.body);
        self.write_record(TAG_CHUNK, packed)?;
        self.frames.clear();
        self.checkpoints.clear();
        Ok(())
    }

    /// Writes the last chunk and the end record, and hands the writer back.
    pub fn finish(mut self) -> Result<W, ReplayError> {
        self.flush_chunk()?;
        let mut body = Vec::new();
        put_varint(&mut body, self.hash.frames());
        match self.next.get().checked_sub(1).map(Tick::new) {
            Some(t) if self.hash.frames() > 0 => {
                body.push(1);
                put_tick(&mut body, t);
            }
            _ => body.push(0),
        }
        put_u64_le(&mut body, self.hash.value());
        self.write_record(TAG_END, body)?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn write_record(&mut self, tag: u8, stored: Vec<u8>) -> Result<(), ReplayError> {
        let raw = if tag == TAG_CHUNK {
            self.body.len()
        } else {
            stored.len()
        };
        self.record.clear();
        self.record.push(tag);
        self.record
            .extend_from_slice(&(stored.len() as u32).to_le_bytes());
        self.record.extend_from_slice(&(raw as u32).to_le_bytes());
        // The checksum covers the record's head too: no byte of it goes
        // unchecked.
        let mut sum = xxhash_rust::xxh3::Xxh3::new();
        sum.update(&self.record);
        sum.update(&stored);
        self.record.extend_from_slice(&sum.digest().to_le_bytes());
        self.record.extend_from_slice(&stored);
        if let Err(e) = self.out.write_all(&self.record) {
            self.failed = true;
            return Err(e.into());
        }
        self.written += self.record.len() as u64;
        Ok(())
    }
}
