//! Host mode: the shared roster (`Member`, `MemberAck`) and a takeover
//! (`Takeover`, `TakeoverAck`), each encoded beside its decoder.

use super::codec::{Reader, put_bytes, put_tick, put_varint};
use super::frame::read_player;
use super::handshake::{ResumeToken, within};
use super::message::{MAX_CONTACT, Message};
use super::{MAX_SEATS, WireError};
use crate::{PlayerId, Tick};

/// One seat of a room's roster, from a sequencer that shares it (host
/// mode): what every player needs to carry the match on if the host
/// leaves.
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
    /// is known (the host's own seat).
    pub contact: &'a [u8],
}

// ----- Member `0x19`, MemberAck `0x1A` --------------------------------------

pub(super) fn check_member(m: &Member<'_>) -> Result<(), WireError> {
    within("seat", m.seat.index(), MAX_SEATS - 1)?;
    within(
        "contact",
        m.holder.map_or(0, |h| h.contact.len()),
        MAX_CONTACT,
    )
}

pub(super) fn put_member(out: &mut Vec<u8>, m: &Member<'_>) {
    put_varint(out, u64::from(m.seat.0));
    put_varint(out, u64::from(m.version));
    match m.holder {
        None => out.push(0),
        Some(h) => {
            out.push(1 | u8::from(h.playing) << 1 | u8::from(h.hosts) << 2);
            out.extend_from_slice(&h.commitment);
            put_bytes(out, h.contact);
        }
    }
}

pub(super) fn read_member<'a>(r: &mut Reader<'a>) -> Result<Message<'a>, WireError> {
    let seat = read_player(r)?;
    let version = r.varint_u32()?;
    let holder = match r.u8()? {
        0 => None,
        f @ (1 | 3 | 5 | 7) => Some(Holder {
            playing: f & 2 != 0,
            hosts: f & 4 != 0,
            commitment: r.array()?,
            contact: r.byte_string("contact", MAX_CONTACT)?,
        }),
        _ => return Err(WireError::Invalid("unknown member flags")),
    };
    Ok(Message::Member(Member {
        seat,
        version,
        holder,
    }))
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
