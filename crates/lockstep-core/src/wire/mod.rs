//! The binary wire format, protocol v9.
//!
//! Every datagram starts with a five-byte header, then one or more
//! messages:
//!
//! ```text
//! +------+------+---------+-------------+------+------+-----+------+------+
//! | 0x4C | 0x4B | version | base tick   | type | body | ... | type | body |
//! +------+------+---------+-------------+------+------+-----+------+------+
//!   magic "LK"    u8        u16 LE        u8
//! ```
//!
//! `base` is the low 16 bits of the sender's position (its next tick); the
//! receiver expands it to the full tick nearest its own position (see
//! [`expand_tick`]), and every tick inside the messages is a small signed
//! distance from it. Integers are LEB128 varints unless stated; hashes are
//! 8 bytes little-endian.
//!
//! Decoders take untrusted bytes and return a [`WireError`] on anything
//! malformed: they never panic, and every count read from the wire is
//! checked against a fixed bound and against the bytes that remain before
//! anything is allocated for it. The repository's `docs/protocol.md` gives
//! every message's layout.

mod chain;
mod checks;
pub(crate) mod codec;
mod control;
mod envelope;
mod frame;
mod handshake;
mod list;
mod message;
mod play;
mod roster;
mod transfer;

pub use chain::{
    ChainWriter, decode_chain, decode_chain_after, decode_chain_into, xor_delta, xor_undelta,
};
pub use checks::Checkpoint;
pub use codec::{MAX_TICK_DELTA, expand_tick};
pub use control::{Abandon, Endorsement};
pub(crate) use envelope::reuse;
pub use envelope::{Datagram, DatagramWriter, Decoder, peek_anchor, peek_version};
pub use frame::{FrameRef, decode_frames_body, encode_frame, encode_frames_body};
pub use handshake::{ByeReason, ErrorCode, Hello, InputCodec, RejectReason, ResumeToken, Welcome};
pub use list::{Iter as ListIter, List, ListItem};
pub use message::{
    HEADER_LEN, MAX_CHAIN_QUESTIONS, MAX_CHUNKS, MAX_CONTACT, MAX_COOKIE, MAX_DELAY_CHANGES,
    MAX_FRAMES, MAX_MESSAGES, MAX_NAME, MAX_ROOM, MAX_RUN, MAX_SNAPSHOT, MAX_TEXT, MAX_TICKET,
    MIN_HELLO_DATAGRAM, Message, message_type,
};
pub use play::{
    Frames, HeldInput, InputRun, Inputs, MAX_INPUT_BACK, MAX_REFERENCE_BACK, Status,
    reference_check,
};
pub use roster::{Holder, Member, Start};
pub use transfer::{SnapshotAck, SnapshotChunk};

use crate::input::InputDecodeError;

/// The two bytes every datagram of this protocol starts with.
pub const MAGIC: [u8; 2] = *b"LK";

/// The protocol version this build speaks.
pub const VERSION: u8 = 11;

/// The most seats a session may have in this protocol version.
pub const MAX_SEATS: usize = 256;

/// The largest encoded input, in bytes.
pub const MAX_INPUT_LEN: usize = 1024;

/// The largest input delay, in ticks, a Welcome or a `DelayChanged` may carry.
pub const MAX_DELAY: u32 = 1024;

/// The largest datagram a decoder accepts.
pub const MAX_DATAGRAM_LEN: usize = 65_507;

/// Why a datagram could not be decoded.
///
/// All of these mean the remote sent something this build cannot use; none
/// is a bug in the caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The datagram ended in the middle of a field.
    #[error("datagram truncated")]
    Truncated,
    /// The datagram does not start with [`MAGIC`]: not ours at all.
    #[error("not a lockstep datagram (bad magic)")]
    BadMagic,
    /// The remote speaks another protocol version.
    #[error("protocol version mismatch: we run {ours}, the remote runs {theirs}")]
    UnsupportedVersion {
        /// [`VERSION`].
        ours: u8,
        /// The version byte received.
        theirs: u8,
    },
    /// The message type byte names no message this version knows.
    #[error("unknown message type {0:#04x}")]
    UnknownMessage(u8),
    /// A tick field lies too far from the datagram's base tick, or outside
    /// `u32`.
    #[error("tick far outside the window")]
    TickOutOfWindow,
    /// A string field is not UTF-8.
    #[error("{0} is not UTF-8")]
    BadUtf8(&'static str),
    /// (Encoding) the message does not fit in what is left of the datagram;
    /// start another.
    #[error("a {len}-byte message does not fit in the {remaining} bytes left")]
    DoesNotFit {
        /// The message's size.
        len: usize,
        /// Bytes left in the datagram.
        remaining: usize,
    },
    /// (Encoding) the message is larger than any datagram may be; split it.
    #[error("a {len}-byte message exceeds the {budget}-byte datagram budget")]
    MessageTooLarge {
        /// The message's size.
        len: usize,
        /// The datagram budget.
        budget: usize,
    },
    /// A varint ran past 10 bytes or past the integer it should fit.
    #[error("varint overflows its integer type")]
    VarintOverflow,
    /// A count or length exceeds its protocol bound.
    #[error("{what} count {len} exceeds the limit of {max}")]
    TooLong {
        /// Which field.
        what: &'static str,
        /// The value received.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// The datagram is larger than [`MAX_DATAGRAM_LEN`].
    #[error("datagram of {0} bytes is over the size limit")]
    Oversized(usize),
    /// A field holds a value outside its domain (an unknown tag, a run of
    /// ticks that would pass `u32::MAX`, ...).
    #[error("invalid field: {0}")]
    Invalid(&'static str),
    /// Bytes were left over after the message.
    #[error("{0} trailing bytes after the message")]
    TrailingBytes(usize),
    /// An input inside the message did not decode as the game's input type.
    #[error("input does not decode: {0}")]
    Input(#[from] InputDecodeError),
}
