//! The binary wire format.
//!
//! Every datagram starts with a four-byte header:
//!
//! ```text
//! +------+------+---------+------+----------------
//! | 0x4C | 0x4B | version | type | message body ...
//! +------+------+---------+------+----------------
//!   magic "LK"
//! ```
//!
//! Integers are unsigned LEB128 varints unless stated otherwise; checksums
//! are 8 bytes little-endian. Decoders take untrusted bytes and return a
//! [`WireError`] on anything malformed: they never panic, and every count
//! read from the wire is checked against a fixed bound and against the bytes
//! that remain before anything is allocated for it.
//!
//! The per-message layouts are documented on each message type, starting
//! with [`MeshPacket`].

pub(crate) mod codec;
mod frame;
mod mesh;

pub use frame::{FrameRef, encode_frame};
pub use mesh::{Echo, InputRun, MeshPacket};

use crate::input::InputDecodeError;

/// The two bytes every datagram of this protocol starts with.
pub const MAGIC: [u8; 2] = *b"LK";

/// The protocol version this build speaks.
pub const VERSION: u8 = 1;

/// The most seats a session may have in this protocol version.
pub const MAX_SEATS: usize = 256;

/// The largest encoded input, in bytes.
pub const MAX_INPUT_LEN: usize = 1024;

/// The largest datagram a decoder accepts.
pub const MAX_DATAGRAM_LEN: usize = 65_507;

/// Message type bytes (the fourth byte of every datagram).
pub mod message_type {
    /// A mesh peer's packet: see [`MeshPacket`](super::MeshPacket).
    pub const MESH: u8 = 0x01;
}

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
    /// A message of a known type that this endpoint does not accept.
    #[error("unexpected message type {0:#04x} for this endpoint")]
    UnexpectedMessage(u8),
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

/// Appends the datagram header for a message of type `ty`.
pub fn put_header(out: &mut Vec<u8>, ty: u8) {
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.push(ty);
}

/// Checks the header and returns the message type and the body.
///
/// ```
/// use lockstep_core::wire::{self, WireError};
/// let mut d = Vec::new();
/// wire::put_header(&mut d, wire::message_type::MESH);
/// d.push(0xAA);
/// assert_eq!(wire::split_header(&d), Ok((wire::message_type::MESH, &[0xAA][..])));
/// assert_eq!(wire::split_header(b"GET / HTTP/1.1"), Err(WireError::BadMagic));
/// ```
pub fn split_header(datagram: &[u8]) -> Result<(u8, &[u8]), WireError> {
    if datagram.len() > MAX_DATAGRAM_LEN {
        return Err(WireError::Oversized(datagram.len()));
    }
    let [m0, m1, rest @ ..] = datagram else {
        return Err(WireError::Truncated);
    };
    if [*m0, *m1] != MAGIC {
        return Err(WireError::BadMagic);
    }
    let [version, ty, body @ ..] = rest else {
        return Err(WireError::Truncated);
    };
    if *version != VERSION {
        return Err(WireError::UnsupportedVersion {
            ours: VERSION,
            theirs: *version,
        });
    }
    Ok((*ty, body))
}
