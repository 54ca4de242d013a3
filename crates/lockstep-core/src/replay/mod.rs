//! Replays: a match's confirmed frame stream in a file, with what it takes
//! to check it (format 1; the repository's `docs/replay.md` gives every
//! byte).
//!
//! A file is a [`Header`], then chunks, each a run of frames compressed
//! and checksummed on its own, with the checkpoints of the state hash
//! chain the match produced in it and the stream hash after its last
//! frame, then an end record. Appending a chunk never rewrites anything
//! written before it, so a file cut off anywhere (a crash) reads up to its
//! last whole chunk ([`Replay::read`] says where and why it stopped).
//!
//! ```
//! use lockstep_core::replay::{Header, Recorder, Replay, Topology};
//! use lockstep_core::{Frame, PlayerId, SystemEvent, Tick};
//!
//! let header = Header::new(0xfeed, "my game 1.0", 30, 2, Topology::Relay);
//! let mut file = Vec::new();
//! let mut rec = Recorder::<u8, _>::new(header, &mut file)?;
//! for t in 0..100u32 {
//!     let events = if t == 0 { vec![SystemEvent::Joined { player: PlayerId(0) }] } else { vec![] };
//!     rec.record(&Frame { tick: Tick::new(t), inputs: vec![Some(t as u8), None], events })?;
//! }
//! rec.finish()?;
//! let replay = Replay::<u8>::read(&file);
//! assert!(replay.stopped.is_none());
//! assert_eq!(replay.frames.len(), 100);
//! assert!(replay.end.is_some());
//! # Ok::<(), lockstep_core::replay::ReplayError>(())
//! ```

use crate::wire::codec::{Reader, put_bytes, put_str, put_tick, put_u64_le, put_varint};
use crate::wire::{self, WireError};
use crate::{Frame, Input, StreamHash, Tick};
use std::io::Write;

/// The four bytes a replay file starts with.
pub const MAGIC: [u8; 4] = *b"LKRP";
/// The replay format this build writes and reads.
pub const FORMAT: u8 = 1;
/// The most frames in one chunk.
pub const MAX_CHUNK_FRAMES: u32 = wire::MAX_FRAMES as u32;
/// The largest chunk, compressed or not, in bytes.
pub const MAX_CHUNK_LEN: usize = 4 << 20;
/// The largest header, its embedded snapshot included, in bytes.
pub const MAX_HEADER_LEN: usize = wire::MAX_SNAPSHOT + 64 * 1024;
/// The most checkpoints one chunk carries.
pub const MAX_CHECKPOINTS: usize = 4 * wire::MAX_FRAMES;

const TAG_CHUNK: u8 = b'C';
const TAG_END: u8 = b'E';
/// A record's tag, its stored length (u32 LE), its raw length (u32 LE) and
/// its checksum (u64 LE).
const RECORD_HEAD: usize = 1 + 4 + 4 + 8;

/// Which topology recorded the match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Topology {
    /// A mesh of peers.
    Mesh,
    /// A relay's room (recorded by a client or by the relay).
    Relay,
    /// Host mode (one player's process sequences).
    Host,
    /// Something else: a test, a tool.
    Other,
}

impl Topology {
    fn byte(self) -> u8 {
        match self {
            Self::Mesh => 0,
            Self::Relay => 1,
            Self::Host => 2,
            Self::Other => 3,
        }
    }

    fn from_byte(b: u8) -> Result<Self, WireError> {
        Ok(match b {
            0 => Self::Mesh,
            1 => Self::Relay,
            2 => Self::Host,
            3 => Self::Other,
            _ => return Err(WireError::Invalid("unknown topology")),
        })
    }
}

/// What a replay says of its match before its frames.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Header {
    /// The protocol version of the recording build ([`wire::VERSION`]).
    pub protocol: u8,
    /// The game fingerprint: a replay of another build is not this game's.
    pub fingerprint: u64,
    /// The game's name and version, for people (at most 256 bytes).
    pub game: String,
    /// Ticks per second.
    pub tick_rate: u32,
    /// Seats in every frame.
    pub seats: u16,
    /// Each seat's player's name, where known (at most 32 bytes each; as
    /// many as `seats` at most).
    pub names: Vec<String>,
    /// Which topology recorded it.
    pub topology: Topology,
    /// Who recorded it (a player's name, `relay`), for people.
    pub recorder: String,
    /// The match's id, where known (0: none).
    pub match_id: u64,
    /// The first frame's tick.
    pub first_tick: Tick,
    /// The game's state right before `first_tick`, when the recording
    /// starts mid-match (a late joiner, a reconnect): `(tick, bytes)`, the
    /// state after `tick`, which is `first_tick - 1`.
    pub snapshot: Option<(Tick, Vec<u8>)>,
}

impl Header {
    /// A header for a match from its first tick (0), with no names and no
    /// snapshot: fill the rest as known.
    pub fn new(
        fingerprint: u64,
        game: &str,
        tick_rate: u32,
        seats: u16,
        topology: Topology,
    ) -> Self {
        Self {
            protocol: wire::VERSION,
            fingerprint,
            game: game.to_owned(),
            tick_rate,
            seats,
            names: Vec::new(),
            topology,
            recorder: String::new(),
            match_id: 0,
            first_tick: Tick::ZERO,
            snapshot: None,
        }
    }

    fn check(&self) -> Result<(), ReplayError> {
        let bad = |what: &'static str| Err(ReplayError::BadHeader(WireError::Invalid(what)));
        if self.game.len() > wire::MAX_TEXT || self.recorder.len() > wire::MAX_TEXT {
            return bad("a text over 256 bytes");
        }
        if usize::from(self.seats) > wire::MAX_SEATS || self.seats == 0 {
            return bad("seats must be 1 to 256");
        }
        if self.names.len() > usize::from(self.seats)
            || self.names.iter().any(|n| n.len() > wire::MAX_NAME)
        {
            return bad("more names than seats, or a name over 32 bytes");
        }
        if self.snapshot.as_ref().is_some_and(|(t, b)| {
            b.len() > wire::MAX_SNAPSHOT || t.saturating_add(1) != self.first_tick
        }) {
            return bad("a snapshot over its limit, or not right before the first tick");
        }
        Ok(())
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.protocol);
        put_u64_le(out, self.fingerprint);
        put_str(out, &self.game);
        put_varint(out, u64::from(self.tick_rate));
        put_varint(out, u64::from(self.seats));
        put_varint(out, self.names.len() as u64);
        for n in &self.names {
            put_str(out, n);
        }
        out.push(self.topology.byte());
        put_str(out, &self.recorder);
        put_u64_le(out, self.match_id);
        put_tick(out, self.first_tick);
        match &self.snapshot {
            None => out.push(0),
            Some((t, bytes)) => {
                out.push(1);
                put_tick(out, *t);
                put_bytes(out, bytes);
            }
        }
    }

    fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(bytes);
        let protocol = r.u8()?;
        let fingerprint = r.u64_le()?;
        let game = r.str("game", wire::MAX_TEXT)?.to_owned();
        let tick_rate = r.varint_u32()?;
        let seats = u16::try_from(r.varint()?)
            .ok()
            .filter(|s| (1..=wire::MAX_SEATS).contains(&usize::from(*s)))
            .ok_or(WireError::Invalid("seats must be 1 to 256"))?;
        let n = r.count("name", usize::from(seats), 1)?;
        let names = (0..n)
            .map(|_| r.str("name", wire::MAX_NAME).map(str::to_owned))
            .collect::<Result<_, _>>()?;
        let topology = Topology::from_byte(r.u8()?)?;
        let recorder = r.str("recorder", wire::MAX_TEXT)?.to_owned();
        let match_id = r.u64_le()?;
        let first_tick = r.tick()?;
        let snapshot = match r.u8()? {
            0 => None,
            1 => {
                let t = r.tick()?;
                Some((t, r.byte_string("snapshot", wire::MAX_SNAPSHOT)?.to_vec()))
            }
            _ => return Err(WireError::Invalid("unknown snapshot flag")),
        };
        r.finish()?;
        let header = Self {
            protocol,
            fingerprint,
            game,
            tick_rate,
            seats,
            names,
            topology,
            recorder,
            match_id,
            first_tick,
            snapshot,
        };
        header.check().map_err(|e| match e {
            ReplayError::BadHeader(w) => w,
            _ => WireError::Invalid("bad header"),
        })?;
        Ok(header)
    }
}

/// A checkpoint of the recording machine's game: its state hash
/// ([`Game::hash`](crate::Game::hash)) right after `tick`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayCheckpoint {
    /// The tick.
    pub tick: Tick,
    /// The game's state hash right after it.
    pub value: u64,
}

/// What running a replay's frames through the game found (see [`verify`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verified {
    /// Every checkpoint matched: how many, over how many frames.
    Matches {
        /// Checkpoints compared.
        checkpoints: usize,
        /// Frames run.
        frames: usize,
    },
    /// The game's state after `tick` is not the one recorded: the first
    /// checkpoint that differs (the states parted at or before it).
    Differs {
        /// The checkpoint's tick.
        tick: Tick,
        /// The recorded hash.
        recorded: u64,
        /// The hash this game's run gives.
        ran: u64,
    },
    /// The snapshot the recording starts from does not restore.
    BadSnapshot(String),
}

/// Runs a replay's frames through the game (`start` is the game at the
/// match's first tick; a recording that starts mid-match restores its
/// header's snapshot instead) and compares its state hash with every
/// checkpoint recorded. The caller checks the header's fingerprint first:
/// another build's replay would differ, and say little.
///
/// ```
/// use lockstep_core::replay::{verify, Header, Recorder, Replay, Topology, Verified};
/// use lockstep_core::{Frame, Game, Tick};
/// #[derive(Default)] struct Sum(u64);
/// impl Game for Sum {
///     type Input = u8;
///     fn step(&mut self, f: &Frame<u8>) { self.0 += f.inputs.iter().flatten().map(|i| u64::from(*i)).sum::<u64>(); }
///     fn hash(&self) -> u64 { self.0 }
///     fn save(&self) -> Vec<u8> { self.0.to_le_bytes().to_vec() }
///     fn restore(b: &[u8]) -> Result<Self, String> { Ok(Sum(u64::from_le_bytes(b.try_into().map_err(|_| "8 bytes")?))) }
/// }
/// let mut rec = Recorder::<u8, _>::new(Header::new(1, "sum", 30, 1, Topology::Other), Vec::new())?;
/// let mut game = Sum::default();
/// for t in 0..90u32 {
///     let f = Frame { tick: Tick::new(t), inputs: vec![Some(3)], events: vec![] };
///     game.step(&f);
///     rec.record(&f)?;
///     rec.checkpoint(f.tick, game.hash());
/// }
/// let file = rec.finish()?;
/// let replay = Replay::<u8>::read(&file);
/// assert_eq!(verify(&replay, Sum::default()), Verified::Matches { checkpoints: 90, frames: 90 });
/// # Ok::<(), lockstep_core::replay::ReplayError>(())
/// ```
pub fn verify<G: crate::Game>(replay: &Replay<G::Input>, start: G) -> Verified {
    let mut game = match replay.header.as_ref().and_then(|h| h.snapshot.as_ref()) {
        Some((_, bytes)) => match G::restore(bytes) {
            Ok(g) => g,
            Err(e) => return Verified::BadSnapshot(e),
        },
        None => start,
    };
    let mut checks = replay.checkpoints.iter().peekable();
    let mut compared = 0;
    for frame in &replay.frames {
        game.step(frame);
        while let Some(c) = checks.next_if(|c| c.tick <= frame.tick) {
            if c.tick < frame.tick {
                continue;
            }
            compared += 1;
            let ran = game.hash();
            if ran != c.value {
                return Verified::Differs {
                    tick: c.tick,
                    recorded: c.value,
                    ran,
                };
            }
        }
    }
    Verified::Matches {
        checkpoints: compared,
        frames: replay.frames.len(),
    }
}

/// What a replay ends with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct End {
    /// Frames in the file.
    pub frames: u64,
    /// The last frame's tick, if any.
    pub last_tick: Option<Tick>,
    /// The stream hash of every frame in the file
    /// ([`StreamHash`](crate::StreamHash)).
    pub stream_hash: u64,
}

/// Why a replay could not be written, or where reading one stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// Not a replay file (its first bytes are not [`MAGIC`]).
    #[error("not a replay file")]
    NotAReplay,
    /// A format this build does not read.
    #[error("replay format {found}, this build reads format {FORMAT}")]
    UnsupportedFormat {
        /// The format byte found.
        found: u8,
    },
    /// The header is malformed, or fails its checksum.
    #[error("bad replay header: {0}")]
    BadHeader(WireError),
    /// The file ends inside record `record` (0: the header).
    #[error("the file ends inside record {record} (a file cut off: what came before it reads)")]
    Truncated {
        /// The record, counted from 1 after the header.
        record: u64,
    },
    /// Record `record` fails its checksum: a byte of it changed.
    #[error("record {record} fails its checksum")]
    Checksum {
        /// The record, counted from 1 after the header.
        record: u64,
    },
    /// Record `record` claims a length over the limits.
    #[error("record {record} claims {len} bytes, over the limit of {max}")]
    TooLarge {
        /// The record.
        record: u64,
        /// Its claimed length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Record `record` is malformed (it passed its checksum: a writer's
    /// bug, or a forgery).
    #[error("record {record} is malformed: {error}")]
    Malformed {
        /// The record.
        record: u64,
        /// What is wrong.
        error: WireError,
    },
    /// Record `record`'s frames do not follow the ones before (a gap, or
    /// the wrong width), or its stream hash does not match them.
    #[error("record {record}: {what}")]
    Inconsistent {
        /// The record.
        record: u64,
        /// What.
        what: &'static str,
    },
    /// A frame to record does not follow the last one, or has the wrong
    /// width.
    #[error("frame {tick} cannot be recorded: {what}")]
    Frame {
        /// Its tick.
        tick: Tick,
        /// Why.
        what: &'static str,
    },
    /// The writer failed (a full disk, say): nothing more is written.
    #[error("writing the replay failed: {0}")]
    Io(#[from] std::io::Error),
}

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

/// A replay read from its bytes: as much as reads, and why it stopped if
/// it stopped before the end record.
#[derive(Debug)]
#[non_exhaustive]
pub struct Replay<I> {
    /// The header, unless it did not read.
    pub header: Option<Header>,
    /// Every frame of the whole chunks read, in order.
    pub frames: Vec<Frame<I>>,
    /// Every checkpoint of those chunks.
    pub checkpoints: Vec<ReplayCheckpoint>,
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
        let mut hash = StreamHash::new();
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
                    raw.clear();
                    raw.resize(raw_len, 0);
                    let n = lz4_flex::block::decompress_into(stored, &mut raw).map_err(|_| {
                        ReplayError::Malformed {
                            record,
                            error: WireError::Invalid("a chunk that does not decompress"),
                        }
                    })?;
                    if n != raw_len {
                        return Err(ReplayError::Malformed {
                            record,
                            error: WireError::Invalid("a chunk of another length"),
                        });
                    }
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
fn read_record(
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
    for len in [stored, raw] {
        if len > MAX_CHUNK_LEN {
            return Err(ReplayError::TooLarge {
                record,
                len,
                max: MAX_CHUNK_LEN,
            });
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
