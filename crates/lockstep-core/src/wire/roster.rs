//! The roster (`Member`, `MemberAck`), the lobby (`Lobby`, `Ready`), and
//! host mode's takeover (`Takeover`, `TakeoverAck`), each encoded beside
//! its decoder.

use super::codec::{Reader, put_bytes, put_str, put_tick, put_varint};
use super::frame::read_player;
use super::handshake::{ResumeToken, within};
use super::message::{MAX_CONTACT, MAX_NAME, Message};
use super::{MAX_SEATS, WireError};
use crate::{PlayerId, Tick};

/// One seat of a room's roster: who plays it, by name, and whether they
/// are ready; in host mode also what every player needs to carry the match
/// on if the host leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member<'a> {
    /// The seat.
    pub seat: PlayerId,
    /// The roster's version when this seat's entry last changed (a later
    /// version replaces an earlier one).
    pub version: u32,
    /// Who holds the seat; `None`: it is empty.
    pub holder: Option<Holder<'a>>,
}

/// The player on a seat of a roster (see [`Member`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder<'a> {
    /// It plays (it is not catching up from a snapshot).
    pub playing: bool,
    /// It hosts the room (its process runs the sequencer).
    pub hosts: bool,
    /// A commitment to its resume token: the first 16 bytes of SHA-256 over
    /// `lockstep seat token` and the token. Whoever shows a token that
    /// matches it holds the seat.
    pub commitment: [u8; 16],
    /// How other players can reach it, as the host's application sees it
    /// (a UDP address, say), at most [`MAX_CONTACT`] bytes; empty when none
    /// is known (the host's own seat) or the room does not share contacts.
    pub contact: &'a [u8],
    /// The name its player gave in its `Hello`, at most [`MAX_NAME`]
    /// bytes: for display only (anyone may give any name).
    pub name: &'a str,
    /// Its player said it is ready to start (see [`Message::Ready`]).
    pub ready: bool,
}

/// How a room's match starts. While it has not, the room's lobby is open:
/// players take seats and say whether they are ready, the roster lists them
/// by name, and nothing is sealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Start {
    /// With the first player (no lobby): the room plays in single-player
    /// mode until others join it.
    #[default]
    AtOnce,
    /// Once this many seats are taken (1 to [`MAX_SEATS`]).
    Seated(u16),
    /// Once at least `min` players are seated (1 to [`MAX_SEATS`]) and
    /// every seated player is ready.
    Ready {
        /// The fewest players the match starts with.
        min: u16,
    },
    /// When the room's owner says so (a host pressing start).
    Manual,
}

impl Start {
    /// Whether the room opens with a lobby.
    pub fn has_lobby(self) -> bool {
        !matches!(self, Self::AtOnce)
    }
}

// ----- Member `0x19`, MemberAck `0x1A` --------------------------------------

pub(super) fn check_member(m: &Member<'_>) -> Result<(), WireError> {
    within("seat", m.seat.index(), MAX_SEATS - 1)?;
    within(
        "contact",
        m.holder.map_or(0, |h| h.contact.len()),
        MAX_CONTACT,
    )?;
    within("name", m.holder.map_or(0, |h| h.name.len()), MAX_NAME)
}

pub(super) fn put_member(out: &mut Vec<u8>, m: &Member<'_>) {
    put_varint(out, u64::from(m.seat.0));
    put_varint(out, u64::from(m.version));
    match m.holder {
        None => out.push(0),
        Some(h) => {
            out.push(
                1 | u8::from(h.playing) << 1 | u8::from(h.hosts) << 2 | u8::from(h.ready) << 3,
            );
            out.extend_from_slice(&h.commitment);
            put_bytes(out, h.contact);
            put_str(out, h.name);
        }
    }
}

pub(super) fn read_member<'a>(r: &mut Reader<'a>) -> Result<Message<'a>, WireError> {
    let seat = read_player(r)?;
    let version = r.varint_u32()?;
    let holder = match r.u8()? {
        0 => None,
        f if f & 1 != 0 && f <= 15 => Some(Holder {
            playing: f & 2 != 0,
            hosts: f & 4 != 0,
            ready: f & 8 != 0,
            commitment: r.array()?,
            contact: r.byte_string("contact", MAX_CONTACT)?,
            name: r.str("name", MAX_NAME)?,
        }),
        _ => return Err(WireError::Invalid("unknown member flags")),
    };
    Ok(Message::Member(Member {
        seat,
        version,
        holder,
    }))
}

// ----- Lobby `0x1F`, Ready `0x20` -------------------------------------------

pub(super) fn check_start(s: Start) -> Result<(), WireError> {
    match s {
        Start::Seated(n) | Start::Ready { min: n } if n == 0 || usize::from(n) > MAX_SEATS => {
            Err(WireError::Invalid("a start count out of range"))
        }
        _ => Ok(()),
    }
}

pub(super) fn put_lobby(out: &mut Vec<u8>, s: Start) {
    match s {
        Start::AtOnce => out.push(0),
        Start::Seated(n) => {
            out.push(1);
            put_varint(out, u64::from(n));
        }
        Start::Ready { min } => {
            out.push(2);
            put_varint(out, u64::from(min));
        }
        Start::Manual => out.push(3),
    }
}

pub(super) fn read_lobby<'a>(r: &mut Reader<'a>) -> Result<Message<'a>, WireError> {
    let start = match r.u8()? {
        0 => Start::AtOnce,
        1 => Start::Seated(read_count(r)?),
        2 => Start::Ready {
            min: read_count(r)?,
        },
        3 => Start::Manual,
        _ => return Err(WireError::Invalid("unknown start rule")),
    };
    Ok(Message::Lobby(start))
}

/// A start rule's count: 1 to [`MAX_SEATS`].
fn read_count(r: &mut Reader<'_>) -> Result<u16, WireError> {
    match r.varint()? {
        n @ 1..=256 => Ok(n as u16),
        _ => Err(WireError::Invalid("a start count out of range")),
    }
}

pub(super) fn read_ready<'a>(r: &mut Reader<'a>) -> Result<Message<'a>, WireError> {
    match r.u8()? {
        b @ (0 | 1) => Ok(Message::Ready { ready: b == 1 }),
        _ => Err(WireError::Invalid("a ready flag that is not 0 or 1")),
    }
}

/// A seat field of a `MemberAck` or a `Takeover`.
pub(super) fn check_seat(seat: PlayerId) -> Result<(), WireError> {
    within("seat", seat.index(), MAX_SEATS - 1)
}

pub(super) fn put_member_ack(out: &mut Vec<u8>, seat: PlayerId, version: u32) {
    put_varint(out, u64::from(seat.0));
    put_varint(out, u64::from(version));
}

pub(super) fn read_member_ack<'a>(r: &mut Reader<'a>) -> Result<Message<'a>, WireError> {
    Ok(Message::MemberAck {
        seat: read_player(r)?,
        version: r.varint_u32()?,
    })
}

// ----- Takeover `0x1B`, TakeoverAck `0x1C` ----------------------------------

pub(super) fn put_takeover(
    out: &mut Vec<u8>,
    epoch: u32,
    seat: PlayerId,
    token: &ResumeToken,
    lacks: Tick,
) {
    put_varint(out, u64::from(epoch));
    put_varint(out, u64::from(seat.0));
    out.extend_from_slice(&token.0);
    put_tick(out, lacks);
}

pub(super) fn read_takeover<'a>(r: &mut Reader<'a>) -> Result<Message<'a>, WireError> {
    Ok(Message::Takeover {
        epoch: r.varint_u32()?,
        seat: read_player(r)?,
        token: ResumeToken(r.array()?),
        lacks: r.tick()?,
    })
}

/// A `TakeoverAck`'s fields, as [`Message::TakeoverAck`] holds them.
pub(super) struct TakeoverAckFields {
    pub(super) epoch: u32,
    pub(super) ready: bool,
    pub(super) want: Option<Tick>,
    pub(super) late: bool,
    pub(super) alive: bool,
    pub(super) host: Option<PlayerId>,
}

pub(super) fn put_takeover_ack(out: &mut Vec<u8>, a: &TakeoverAckFields) {
    put_varint(out, u64::from(a.epoch));
    out.push(
        u8::from(a.ready)
            | u8::from(a.want.is_some()) << 1
            | u8::from(a.late) << 2
            | u8::from(a.alive) << 3
            | u8::from(a.host.is_some()) << 4,
    );
    if let Some(t) = a.want {
        put_tick(out, t);
    }
    if let Some(h) = a.host {
        put_varint(out, u64::from(h.0));
    }
}

pub(super) fn read_takeover_ack<'a>(r: &mut Reader<'a>) -> Result<Message<'a>, WireError> {
    let epoch = r.varint_u32()?;
    let flags = r.u8()?;
    if flags > 31 {
        return Err(WireError::Invalid("unknown takeover flags"));
    }
    let want = if flags & 2 != 0 {
        Some(r.tick()?)
    } else {
        None
    };
    let host = if flags & 16 != 0 {
        Some(read_player(r)?)
    } else {
        None
    };
    Ok(Message::TakeoverAck {
        epoch,
        ready: flags & 1 != 0,
        want,
        late: flags & 4 != 0,
        alive: flags & 8 != 0,
        host,
    })
}
