//! Reading a replay, as far as it reads.

use super::*;

/// A replay read from its bytes: as much as reads, and why it stopped if
/// it stopped before the end record.
#[derive(Debug)]
#[non_exhaustive]
pub struct Replay<I> {
    /// The header, unless it did not read.
    pub header: Option<Header>,
    /// Every frame of the whole chunks read, in order.
    pub frames: Vec<Frame<I>>,
    /// Every checkpoint of those chunks, in the file's order (a
    /// divergence found late adds the hashes of ticks before).
    pub checkpoints: Vec<ReplayCheckpoint>,
    /// Every state the file holds (keyframes, resyncs, rejoins), in order.
    pub states: Vec<State>,
    /// The end record, if the file has one.
    pub end: Option<End>,
    /// Why reading stopped before the end record (`None`: the file is
    /// whole).
    pub stopped: Option<ReplayError>,
    /// Bytes of the file that read: the header and the whole records.
    pub valid_len: usize,
}

impl<I: Input> Replay<I> {
    /// Reads a replay from its bytes, never panicking: the frames of every
    /// whole, unaltered record up to the first that is not (a file cut off
    /// by a crash reads up to its last whole chunk), and why it stopped.
    pub fn read(bytes: &[u8]) -> Self {
        let mut replay = Self {
            header: None,
            frames: Vec::new(),
            checkpoints: Vec::new(),
            states: Vec::new(),
            end: None,
            stopped: None,
            valid_len: 0,
        };
        if let Err(e) = replay.read_all(bytes) {
            replay.stopped = Some(e);
        }
        replay
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
        let seats = usize::from(header.seats);
        let mut next = header.first_tick;
        let mut hash = ReplayHash::new();
        self.header = Some(header);
        let mut at = 17 + len;
        self.valid_len = at;
        let mut record = 0u64;
        let mut raw = Vec::new();
        while at < bytes.len() {
            record += 1;
            let (tag, stored, raw_len, end) = read_record(bytes, at, record)?;
            match tag {
                TAG_CHUNK => {
                    decompress(stored, raw_len, &mut raw, record)?;
                    let (frames, checkpoints, stream) = decode_chunk::<I>(&raw, seats)
                        .map_err(|error| ReplayError::Malformed { record, error })?;
                    if frames.first().is_some_and(|f| f.tick != next) {
                        return Err(ReplayError::Inconsistent {
                            record,
                            what: "its frames do not follow the ones before",
                        });
                    }
                    for f in &frames {
                        hash.push(f);
                    }
                    if hash.value() != stream {
                        return Err(ReplayError::Inconsistent {
                            record,
                            what: "its stream hash does not match the frames",
                        });
                    }
                    if let Some(f) = frames.last() {
                        next = f.tick.saturating_add(1);
                    }
                    self.frames.extend(frames);
                    self.checkpoints.extend(checkpoints);
                }
                TAG_STATE => {
                    decompress(stored, raw_len, &mut raw, record)?;
                    let mut state = decode_state(&raw)
                        .map_err(|error| ReplayError::Malformed { record, error })?;
                    let follows = if state.kind.may_skip() {
                        state.tick.saturating_add(1) >= next
                    } else {
                        state.tick.saturating_add(1) == next
                    };
                    if !follows {
                        return Err(ReplayError::Inconsistent {
                            record,
                            what: "a state that does not follow the frames before",
                        });
                    }
                    next = state.tick.saturating_add(1);
                    state.at = self.frames.len();
                    self.states.push(state);
                }
                TAG_END => {
                    let end = decode_end(stored)
                        .map_err(|error| ReplayError::Malformed { record, error })?;
                    if end.frames != hash.frames() || end.stream_hash != hash.value() {
                        return Err(ReplayError::Inconsistent {
                            record,
                            what: "the end does not match the frames",
                        });
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
    let max = if tag == TAG_STATE {
        MAX_HEADER_LEN
    } else {
        MAX_CHUNK_LEN
    };
    for len in [stored, raw] {
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

type Chunk<I> = (Vec<Frame<I>>, Vec<ReplayCheckpoint>, u64);

fn decode_chunk<I: Input>(raw: &[u8], seats: usize) -> Result<Chunk<I>, WireError> {
    let mut r = Reader::new(raw);
    let start = r.tick()?;
    let count = r.len("frames", wire::MAX_FRAMES)?;
    let body = r.byte_string("frames", MAX_CHUNK_LEN)?;
    let frames = wire::decode_frames_body::<I>(start, count, seats, None, body)?;
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
    Ok((frames, checkpoints, stream))
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

pub(super) fn decode_state(raw: &[u8]) -> Result<State, WireError> {
    let mut r = Reader::new(raw);
    let tick = r.tick()?;
    let kind = StateKind::from_byte(r.u8()?)?;
    let hash = r.u64_le()?;
    let bytes = r.byte_string("state", wire::MAX_SNAPSHOT)?.to_vec();
    r.finish()?;
    Ok(State {
        kind,
        tick,
        hash,
        bytes,
        at: 0,
    })
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
