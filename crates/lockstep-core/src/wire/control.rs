//! Session control: `Pause`, `Resume`, `Ping`, `Pong` and a mesh's
//! `Abandon`, each encoded beside its decoder.

use super::codec::{Reader, put_tick_delta, put_u64_le, put_varint};
use super::frame::read_player;
use super::handshake::within;
use super::message::Message;
use super::play::{put_seat_ticks, read_seat_ticks};
use super::{MAX_SEATS, WireError};
use crate::{PlayerId, Tick};

/// A mesh peer's part in giving up on silent players: its votes, the seats
/// it has frozen, and the decisions it endorses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Abandon {
    /// Seats the sender votes to abandon.
    pub votes: Vec<PlayerId>,
    /// Seats a majority voted for, whose own input the sender no longer
    /// takes, each with the first tick of its input the sender did not hold
    /// from the player itself when it froze the seat.
    pub frozen: Vec<(PlayerId, Tick)>,
    /// Decisions the sender endorses: the seat is empty from the tick on,
    /// and the sender holds the seat's input before it as the digest says.
    pub endorsements: Vec<Endorsement>,
}

/// One endorsed abandonment decision (see [`Abandon`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endorsement {
    /// The seat given up.
    pub seat: PlayerId,
    /// The first tick the seat is empty.
    pub from: Tick,
    /// Digest of the seat's inputs the sender holds for the ticks just
    /// before `from` (see the protocol document for the exact window).
    pub digest: u64,
    /// The player said goodbye (the stream records `Left`), rather than
    /// going silent (`Abandoned`): the deciding peer's word, which every
    /// endorser repeats.
    pub left: bool,
}

// ----- Pause `0x07`, Resume `0x08` ------------------------------------------

pub(super) fn read_pause<'a>(r: &mut Reader<'a>, base: Tick) -> Result<Message<'a>, WireError> {
    Ok(Message::Pause {
        frame: r.tick_delta(base)?,
    })
}

pub(super) fn read_resume<'a>(r: &mut Reader<'a>, base: Tick) -> Result<Message<'a>, WireError> {
    Ok(Message::Resume {
        lifted: r.tick_delta(base)?,
    })
}

// ----- Abandon `0x09` -------------------------------------------------------

pub(super) fn check_abandon(a: &Abandon) -> Result<(), WireError> {
    within("vote", a.votes.len(), MAX_SEATS)?;
    within("frozen seat", a.frozen.len(), MAX_SEATS)?;
    within("endorsement", a.endorsements.len(), MAX_SEATS)
}

pub(super) fn put_abandon(out: &mut Vec<u8>, base: Tick, a: &Abandon) {
    put_varint(out, a.votes.len() as u64);
    for p in &a.votes {
        put_varint(out, u64::from(p.0));
    }
    put_seat_ticks(out, base, &a.frozen);
    put_varint(out, a.endorsements.len() as u64);
    for e in &a.endorsements {
        put_varint(out, u64::from(e.seat.0));
        put_tick_delta(out, base, e.from);
        put_u64_le(out, e.digest);
        out.push(u8::from(e.left));
    }
}

pub(super) fn read_abandon<'a>(r: &mut Reader<'a>, base: Tick) -> Result<Message<'a>, WireError> {
    let n = r.count("vote", MAX_SEATS, 1)?;
    let votes = (0..n).map(|_| read_player(r)).collect::<Result<_, _>>()?;
    let frozen = read_seat_ticks(r, base, "frozen seat")?;
    let n = r.count("endorsement", MAX_SEATS, 11)?;
    let endorsements = (0..n)
        .map(|_| {
            Ok(Endorsement {
                seat: read_player(r)?,
                from: r.tick_delta(base)?,
                digest: r.u64_le()?,
                left: match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(WireError::Invalid("endorsement kind")),
                },
            })
        })
        .collect::<Result<_, WireError>>()?;
    Ok(Message::Abandon(Abandon {
        votes,
        frozen,
        endorsements,
    }))
}

// ----- Ping `0x0A`, Pong `0x0B` ---------------------------------------------

pub(super) fn put_pong(out: &mut Vec<u8>, [stamp, held_ms, received, sent]: [u32; 4]) {
    for v in [stamp, held_ms, received, sent] {
        put_varint(out, u64::from(v));
    }
}

pub(super) fn read_ping<'a>(r: &mut Reader<'a>) -> Result<Message<'a>, WireError> {
    Ok(Message::Ping {
        stamp: r.varint_u32()?,
    })
}

pub(super) fn read_pong<'a>(r: &mut Reader<'a>) -> Result<Message<'a>, WireError> {
    Ok(Message::Pong {
        stamp: r.varint_u32()?,
        held_ms: r.varint_u32()?,
        received: r.varint_u32()?,
        sent: r.varint_u32()?,
    })
}
