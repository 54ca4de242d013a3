//! Reading a replay, as far as it reads.

use super::*;

/// A replay read from its bytes: as much as reads, and why it stopped if
/// it stopped before the end record.
///
/// Its frames stay compressed, as in the file: [`frames`](Self::frames)
/// decodes them a chunk at a time, so that reading, verifying and playing
/// back a replay hold at most a chunk's frames (1,024) decoded, whatever
/// the match's length, and a small file cannot claim a lot of memory. A
/// state's bytes likewise are decompressed when asked
/// ([`state_bytes`](Self::state_bytes)).
#[non_exhaustive]
pub struct Replay<I> {
    /// The header, unless it did not read.
    pub header: Option<Header>,
    /// Every checkpoint of the whole chunks read, in the file's order (a
    /// divergence found late adds the hashes of ticks before).
    pub checkpoints: Vec<ReplayCheckpoint>,
    /// Every state the file holds (keyframes, resyncs, rejoins), in order.
    pub states: Vec<State>,
    /// The end record, if the file has one.
    pub end: Option<End>,
    /// Why reading stopped before the end record, if something in the file
    /// stopped it (`None` and no `end`: every byte read, and the file ends
    /// at a chunk's end, as one still being written or cut there does).
    pub stopped: Option<ReplayError>,
    /// Bytes of the file that read: the header and the whole records.
    pub valid_len: usize,
    /// The bytes that read.
    file: Vec<u8>,
    /// Where each whole chunk with frames is, in order.
    chunks: Vec<ChunkAt>,
    /// Frames in those chunks.
    frames: usize,
    seats: usize,
    input: core::marker::PhantomData<fn() -> I>,
}

/// A chunk of frames in the file.
#[derive(Debug, Clone, Copy)]
struct ChunkAt {
    /// Its stored bytes: `file[at..at + len]`.
    at: usize,
    len: usize,
    raw_len: usize,
    /// The index of its first frame among the replay's, and its tick.
    first: usize,
    start: Tick,
    count: usize,
    /// The stream hash through it.
    stream: u64,
}

impl<I> core::fmt::Debug for Replay<I> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Replay")
            .field("header", &self.header)
            .field("frames", &self.frames)
            .field("checkpoints", &self.checkpoints.len())
            .field("states", &self.states)
            .field("end", &self.end)
            .field("stopped", &self.stopped)
            .field("valid_len", &self.valid_len)
            .finish()
    }
}

impl<I: Input> Replay<I> {
    /// Reads a replay from its bytes, never panicking: every whole,
    /// unaltered record up to the first that is not (a file cut off by a
    /// crash reads up to its last whole chunk), and why it stopped. Each
    /// chunk is decoded once, to check it, and kept compressed.
    pub fn read(bytes: &[u8]) -> Self {
        let mut replay = Self {
            header: None,
            checkpoints: Vec::new(),
            states: Vec::new(),
            end: None,
            stopped: None,
            valid_len: 0,
            file: Vec::new(),
            chunks: Vec::new(),
            frames: 0,
            seats: 0,
            input: core::marker::PhantomData,
        };
        if let Err(e) = replay.read_all(bytes) {
            replay.stopped = Some(e);
        }
        replay.file = bytes[..replay.valid_len].to_vec();
        replay
    }

    /// Whether the file is whole: every byte read, and its end record.
    pub fn is_whole(&self) -> bool {
        self.stopped.is_none() && self.end.is_some()
    }

    /// How many frames it holds.
    pub fn frame_count(&self) -> usize {
        self.frames
    }

    /// Its frames, in order, decoded a chunk at a time.
    pub fn frames(&self) -> Frames<'_, I> {
        self.frames_from(0)
    }

    /// Its frames from the `index`th on.
    pub fn frames_from(&self, index: usize) -> Frames<'_, I> {
        let chunk = self.chunks.partition_point(|c| c.first + c.count <= index);
        Frames {
            replay: self,
            chunk,
            skip: index.saturating_sub(self.chunks.get(chunk).map_or(index, |c| c.first)),
            held: std::collections::VecDeque::new(),
        }
    }

    /// The tick of its `index`th frame.
    pub fn tick_of(&self, index: usize) -> Option<Tick> {
        let c = self.chunks[self.chunks.partition_point(|c| c.first + c.count <= index)..]
            .first()
            .filter(|c| index >= c.first)?;
        Some(c.start.saturating_add((index - c.first) as u32))
    }

    /// How many of its frames have a tick at or before `tick`.
    pub fn frames_through(&self, tick: Tick) -> usize {
        let k = self.chunks.partition_point(|c| c.start <= tick);
        match k.checked_sub(1).map(|k| self.chunks[k]) {
            None => 0,
            Some(c) => c.first + (tick.since(c.start) as usize + 1).min(c.count),
        }
    }

    /// The stream hash through the chunk that ends with frame `frames - 1`
    /// (that of no chunk for 0), if a chunk ends there.
    pub(super) fn stream_through(&self, frames: usize) -> Option<u64> {
        if frames == 0 {
            return Some(Chain::new().value());
        }
        self.chunks
            .iter()
            .find(|c| c.first + c.count == frames)
            .map(|c| c.stream)
    }

    /// A state's bytes (the game's snapshot), decompressed from the file.
    pub fn state_bytes(&self, state: &State) -> Vec<u8> {
        let mut raw = Vec::new();
        let stored = self
            .file
            .get(state.stored.0..state.stored.0 + state.stored.1);
        let decoded = stored
            .and_then(|s| decompress(s, state.stored.2, &mut raw, 0).ok())
            .and_then(|()| decode_state(&raw).ok());
        decoded.map(|(_, bytes)| bytes).unwrap_or_default()
    }

    /// Chunk `k`'s frames (it decoded when the file was read).
    fn decode(&self, k: usize) -> Vec<Frame<I>> {
        let Some(c) = self.chunks.get(k) else {
            return Vec::new();
        };
        let mut raw = Vec::new();
        self.file
            .get(c.at..c.at + c.len)
            .and_then(|s| decompress(s, c.raw_len, &mut raw, 0).ok())
            .and_then(|()| decode_chunk::<I>(&raw, self.seats).ok())
            .map(|(frames, ..)| frames)
            .unwrap_or_default()
    }

    fn read_all(&mut self, bytes: &[u8]) -> Result<(), ReplayError> {
        if bytes.len() < 5 {
            return Err(if MAGIC.starts_with(bytes) {
                ReplayError::Truncated { record: 0 }
            } else {
                ReplayError::NotAReplay
            });
        }
        if bytes[..4] != MAGIC {
            return Err(ReplayError::NotAReplay);
        }
        if bytes[4] != FORMAT {
            return Err(ReplayError::UnsupportedFormat { found: bytes[4] });
        }
        let head = bytes
            .get(5..17)
            .ok_or(ReplayError::Truncated { record: 0 })?;
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if len > MAX_HEADER_LEN {
            return Err(ReplayError::TooLarge {
                record: 0,
                len,
                max: MAX_HEADER_LEN,
            });
        }
        let mut sum = [0u8; 8];
        sum.copy_from_slice(&head[4..12]);
        let body = bytes
            .get(17..17 + len)
            .ok_or(ReplayError::Truncated { record: 0 })?;
        if xxhash_rust::xxh3::xxh3_64(body) != u64::from_le_bytes(sum) {
            return Err(ReplayError::BadHeader(WireError::Invalid(
                "the header fails its checksum",
            )));
        }
        let header = Header::decode(body).map_err(ReplayError::BadHeader)?;
        self.seats = usize::from(header.seats);
        // The next frame's tick: 2^32 once tick u32::MAX is read.
        let mut next = u64::from(header.first_tick.get());
        let mut hash = Chain::new();
        self.header = Some(header);
        let mut at = 17 + len;
        self.valid_len = at;
        let mut record = 0u64;
        let mut raw = Vec::new();
        let mut last_frame = None;
        while at < bytes.len() {
            record += 1;
            let (tag, stored, raw_len, end) = read_record(bytes, at, record)?;
            let inconsistent = |what| ReplayError::Inconsistent { record, what };
            match tag {
                TAG_CHUNK => {
                    decompress(stored, raw_len, &mut raw, record)?;
                    let (frames, checkpoints, stream, head) =
                        decode_chunk::<I>(&raw, self.seats)
                            .map_err(|error| ReplayError::Malformed { record, error })?;
                    let start = chunk_start(&raw)
                        .map_err(|error| ReplayError::Malformed { record, error })?;
                    // An empty chunk names the next tick too (the last if
                    // none can follow).
                    let expected = u32::try_from(next).unwrap_or(u32::MAX);
                    if start.get() != expected || (!frames.is_empty() && next > u64::from(u32::MAX))
                    {
                        return Err(inconsistent("its frames do not follow the ones before"));
                    }
                    hash.chunk(&raw[..head], frames.len());
                    if hash.value() != stream {
                        return Err(inconsistent("its stream hash does not match the frames"));
                    }
                    if let Some(f) = frames.last() {
                        next = u64::from(f.tick.get()) + 1;
                        last_frame = Some(f.tick);
                        self.chunks.push(ChunkAt {
                            at: at + RECORD_HEAD,
                            len: stored.len(),
                            raw_len,
                            first: self.frames,
                            start,
                            count: frames.len(),
                            stream,
                        });
                        self.frames += frames.len();
                    }
                    self.checkpoints.extend(checkpoints);
                }
                TAG_STATE => {
                    decompress(stored, raw_len, &mut raw, record)?;
                    let (mut state, _) = decode_state(&raw)
                        .map_err(|error| ReplayError::Malformed { record, error })?;
                    let after = u64::from(state.tick.get()) + 1;
                    let follows = if state.kind.may_skip() {
                        after >= next
                    } else {
                        after == next
                    };
                    if !follows {
                        return Err(inconsistent(
                            "a state that does not follow the frames before",
                        ));
                    }
                    next = after;
                    state.at = self.frames;
                    state.stored = (at + RECORD_HEAD, stored.len(), raw_len);
                    self.states.push(state);
                }
                TAG_END => {
                    if raw_len != stored.len() {
                        return Err(ReplayError::Malformed {
                            record,
                            error: WireError::Invalid("an end record of another length"),
                        });
                    }
                    let end = decode_end(stored)
                        .map_err(|error| ReplayError::Malformed { record, error })?;
                    if end.frames != hash.frames()
                        || end.stream_hash != hash.value()
                        || end.last_tick != last_frame
                    {
                        return Err(inconsistent("the end does not match the frames"));
                    }
                    self.end = Some(end);
                    self.valid_len = end_at(at, stored.len());
                    return Ok(());
                }
                _ => {
                    return Err(ReplayError::Malformed {
                        record,
                        error: WireError::Invalid("an unknown record"),
                    });
                }
            }
            at = end;
            self.valid_len = at;
        }
        Ok(())
    }
}

/// A replay's frames, decoded a chunk at a time (see [`Replay::frames`]).
#[derive(Debug)]
pub struct Frames<'r, I> {
    replay: &'r Replay<I>,
    /// The next chunk to decode.
    chunk: usize,
    /// Frames of it to skip.
    skip: usize,
    held: std::collections::VecDeque<Frame<I>>,
}

impl<I: Input> Iterator for Frames<'_, I> {
    type Item = Frame<I>;

    fn next(&mut self) -> Option<Frame<I>> {
        while self.held.is_empty() {
            if self.chunk >= self.replay.chunks.len() {
                return None;
            }
            let mut frames = self.replay.decode(self.chunk);
            self.chunk += 1;
            frames.drain(..self.skip.min(frames.len()));
            self.skip = 0;
            self.held = frames.into();
        }
        self.held.pop_front()
    }
}

/// A chunk's first tick, as its raw bytes begin.
fn chunk_start(raw: &[u8]) -> Result<Tick, WireError> {
    Reader::new(raw).tick()
}

fn end_at(at: usize, stored: usize) -> usize {
    at + RECORD_HEAD + stored
}

/// The record at `at`: its tag, its stored bytes (checksum verified), its
/// raw length and where it ends.
pub(super) fn read_record(
    bytes: &[u8],
    at: usize,
    record: u64,
) -> Result<(u8, &[u8], usize, usize), ReplayError> {
    let head = bytes
        .get(at..at + RECORD_HEAD)
        .ok_or(ReplayError::Truncated { record })?;
    let tag = head[0];
    let stored = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
    let raw = u32::from_le_bytes([head[5], head[6], head[7], head[8]]) as usize;
    // A state holds a snapshot; every other record, a chunk's worth.
    let (max_stored, max_raw) = record_limits(tag);
    for (len, max) in [(stored, max_stored), (raw, max_raw)] {
        if len > max {
            return Err(ReplayError::TooLarge { record, len, max });
        }
    }
    let mut sum = [0u8; 8];
    sum.copy_from_slice(&head[9..17]);
    let end = end_at(at, stored);
    let body = bytes
        .get(at + RECORD_HEAD..end)
        .ok_or(ReplayError::Truncated { record })?;
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&head[..9]);
    h.update(body);
    if h.digest() != u64::from_le_bytes(sum) {
        return Err(ReplayError::Checksum { record });
    }
    Ok((tag, body, raw, end))
}

/// A chunk's frames, checkpoints, stream hash, and where its frames end
/// in its raw bytes.
type Chunk<I> = (Vec<Frame<I>>, Vec<ReplayCheckpoint>, u64, usize);

/// A chunk's frames. Opaque inputs are read as a relay holds them (see
/// [`crate::input::relay`]), as a client of a relay's room reads them: a
/// relay's recording holds its bytes, a game's its values, which read as
/// bytes the same; an input that does not decode as `I` is the neutral
/// input, as every client of the match ran it.
fn frames_body<I: Input>(
    start: Tick,
    count: usize,
    seats: usize,
    body: &[u8],
) -> Result<Vec<Frame<I>>, WireError> {
    if I::CODEC != wire::InputCodec::Opaque {
        return wire::decode_frames_body::<I>(start, count, seats, None, body);
    }
    let neutral = crate::input::relay::neutral::<I>();
    let bytes = wire::decode_frames_body::<Vec<u8>>(start, count, seats, None, body)?;
    Ok(bytes
        .into_iter()
        .map(|f| crate::input::relay::frame_of(&f, &neutral, |_, _| {}))
        .collect())
}

fn decode_chunk<I: Input>(raw: &[u8], seats: usize) -> Result<Chunk<I>, WireError> {
    let mut r = Reader::new(raw);
    let start = r.tick()?;
    let count = r.len("frames", wire::MAX_FRAMES)?;
    let body = r.byte_string("frames", MAX_CHUNK_LEN)?;
    let frames = frames_body::<I>(start, count, seats, body)?;
    let head = raw.len() - r.remaining();
    let n = r.count("checkpoint", MAX_CHECKPOINTS, 9)?;
    let checkpoints = (0..n)
        .map(|_| {
            Ok(ReplayCheckpoint {
                tick: r.tick()?,
                value: r.u64_le()?,
            })
        })
        .collect::<Result<_, WireError>>()?;
    let stream = r.u64_le()?;
    r.finish()?;
    Ok((frames, checkpoints, stream, head))
}

/// Decompresses a record's stored bytes into `raw`, which must come to
/// its raw length exactly.
pub(super) fn decompress(
    stored: &[u8],
    raw_len: usize,
    raw: &mut Vec<u8>,
    record: u64,
) -> Result<(), ReplayError> {
    raw.clear();
    raw.resize(raw_len, 0);
    let bad = |what| ReplayError::Malformed {
        record,
        error: WireError::Invalid(what),
    };
    let n = lz4_flex::block::decompress_into(stored, raw)
        .map_err(|_| bad("a record that does not decompress"))?;
    if n != raw_len {
        return Err(bad("a record of another length"));
    }
    Ok(())
}

/// A state record's fields, and its bytes.
pub(super) fn decode_state(raw: &[u8]) -> Result<(State, Vec<u8>), WireError> {
    let mut r = Reader::new(raw);
    let tick = r.tick()?;
    let kind = StateKind::from_byte(r.u8()?)?;
    let hash = r.u64_le()?;
    let bytes = r.byte_string("state", wire::MAX_SNAPSHOT)?.to_vec();
    r.finish()?;
    Ok((
        State {
            kind,
            tick,
            hash,
            at: 0,
            stored: (0, 0, 0),
        },
        bytes,
    ))
}

fn decode_end(stored: &[u8]) -> Result<End, WireError> {
    let mut r = Reader::new(stored);
    let frames = r.varint()?;
    let last_tick = match r.u8()? {
        0 => None,
        1 => Some(r.tick()?),
        _ => return Err(WireError::Invalid("unknown end flag")),
    };
    let stream_hash = r.u64_le()?;
    r.finish()?;
    Ok(End {
        frames,
        last_tick,
        stream_hash,
    })
}
