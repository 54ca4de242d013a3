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
//! assert_eq!(replay.frame_count(), 100);
//! assert_eq!(replay.frames().nth(99).map(|f| f.tick), Some(Tick::new(99)));
//! assert!(replay.end.is_some());
//! # Ok::<(), lockstep_core::replay::ReplayError>(())
//! ```

use crate::wire::codec::{Reader, put_bytes, put_str, put_tick, put_u64_le, put_varint};
use crate::wire::{self, WireError};
use crate::{Frame, Input, Tick};
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

/// A bound on a chunk's frames coded, under which the chunk, compressed
/// or not, stays within [`MAX_CHUNK_LEN`] (LZ4 adds at most 1/255 and 16
/// bytes to what it cannot compress): a recorder writes a chunk early
/// rather than one a reader refuses.
const CHUNK_BYTES: usize = 2 << 20;
/// A bound on one seat's run of inputs in a chunk, under a datagram's
/// length (what a `Frames` body allows a seat's chain).
const SEAT_BYTES: usize = wire::MAX_DATAGRAM_LEN - 4096;
/// The largest state record, compressed: its raw bytes (a snapshot and
/// what goes with it) as LZ4 might leave them.
pub const MAX_STATE_LEN: usize = MAX_HEADER_LEN + MAX_HEADER_LEN / 255 + 16;

/// The most a record of `tag` may hold, stored and raw.
fn record_limits(tag: u8) -> (usize, usize) {
    if tag == TAG_STATE {
        (MAX_STATE_LEN, MAX_HEADER_LEN)
    } else {
        (MAX_CHUNK_LEN, MAX_CHUNK_LEN)
    }
}

const TAG_CHUNK: u8 = b'C';
const TAG_END: u8 = b'E';
const TAG_STATE: u8 = b'S';
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

    pub(crate) fn check(&self) -> Result<(), ReplayError> {
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

/// Why a replay holds a game state (a [`State`] record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StateKind {
    /// The recording machine's state, for seeking: playback restores the
    /// nearest one instead of running the match from its start.
    Keyframe,
    /// The recording machine's state parted from the match's and was
    /// replaced by this one, received from another machine. What it ran
    /// before was its own; what it runs after is the match's again.
    Resync,
    /// The recording machine came back without its state (a reconnect)
    /// and was sent this one: frames go on after `tick`, which may leave a
    /// gap of frames it never ran.
    Rejoin,
    /// The recording machine's own state right before a
    /// [`Resync`](Self::Resync) at the same tick replaced it: compared
    /// field by field with the match's, it shows what parted.
    Replaced,
}

impl StateKind {
    fn byte(self) -> u8 {
        match self {
            Self::Keyframe => 0,
            Self::Resync => 1,
            Self::Rejoin => 2,
            Self::Replaced => 3,
        }
    }

    fn from_byte(b: u8) -> Result<Self, WireError> {
        Ok(match b {
            0 => Self::Keyframe,
            1 => Self::Resync,
            2 => Self::Rejoin,
            3 => Self::Replaced,
            _ => return Err(WireError::Invalid("unknown state kind")),
        })
    }

    /// Whether frames may go on after a gap (the machine took the state
    /// instead of running up to it).
    fn may_skip(self) -> bool {
        matches!(self, Self::Resync | Self::Rejoin)
    }
}

/// A game state a replay holds: the state right after `tick`, why it is
/// there, and its hash ([`Game::hash`](crate::Game::hash)) as the
/// recording machine computed it. Its bytes stay compressed in the file
/// until asked for ([`Replay::state_bytes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct State {
    /// Why it is there.
    pub kind: StateKind,
    /// The tick it follows.
    pub tick: Tick,
    /// Its hash.
    pub hash: u64,
    /// How many of the replay's frames come before it: it stands between
    /// the frames `at - 1` and `at`.
    pub at: usize,
    /// Where its record's stored bytes are in the file, and its raw length.
    stored: (usize, usize, usize),
}

/// What a replay ends with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct End {
    /// Frames in the file.
    pub frames: u64,
    /// The last frame's tick, if any.
    pub last_tick: Option<Tick>,
    /// The stream hash of every chunk in the file (see `docs/replay.md`).
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

/// The stream hash a replay carries: XXH3-64 (seed 0) over each chunk's
/// raw bytes up to the end of its frames (its start, its count and its
/// `Frames` body), chunk after chunk. It chains the chunks in their order,
/// whatever game reads them: a relay holds a game's inputs as bytes and
/// cannot know how the game would read them back.
#[derive(Clone)]
pub(crate) struct Chain {
    hasher: xxhash_rust::xxh3::Xxh3,
    frames: u64,
}

impl Chain {
    pub(crate) fn new() -> Self {
        Self {
            hasher: xxhash_rust::xxh3::Xxh3::new(),
            frames: 0,
        }
    }

    /// Folds in a chunk of `frames` frames, from its raw bytes up to the
    /// end of its frames.
    pub(crate) fn chunk(&mut self, head: &[u8], frames: usize) {
        self.hasher.update(head);
        self.frames += frames as u64;
    }

    pub(crate) fn value(&self) -> u64 {
        self.hasher.digest()
    }

    pub(crate) fn frames(&self) -> u64 {
        self.frames
    }
}

/// Appends a record (its head, checksum and stored bytes) to `out`.
fn frame_record(out: &mut Vec<u8>, tag: u8, raw_len: usize, stored: &[u8]) {
    let at = out.len();
    out.push(tag);
    out.extend_from_slice(&(stored.len() as u32).to_le_bytes());
    out.extend_from_slice(&(raw_len as u32).to_le_bytes());
    // The checksum covers the record's head too: no byte of it goes
    // unchecked.
    let mut sum = xxhash_rust::xxh3::Xxh3::new();
    sum.update(&out[at..]);
    sum.update(stored);
    out.extend_from_slice(&sum.digest().to_le_bytes());
    out.extend_from_slice(stored);
}

/// A state record's body, LZ4 compressed, and its raw length.
fn encode_state(
    kind: StateKind,
    tick: Tick,
    hash: u64,
    bytes: &[u8],
    body: &mut Vec<u8>,
) -> Vec<u8> {
    body.clear();
    put_tick(body, tick);
    body.push(kind.byte());
    put_u64_le(body, hash);
    put_bytes(body, bytes);
    lz4_flex::block::compress(body)
}

mod background;
mod check;
mod index;
mod read;
mod seek;
mod write;

pub use background::Background;
pub use check::{Parted, Verification, VerifyError, verify};
pub use index::{INDEX_MAGIC, Index};
pub use read::{Frames, Replay};
pub use seek::Playback;
pub use write::{RECENT_HASHES, RecordConfig, Recorder};
