//! Opening and closing a connection: `Hello`, `Welcome`, `Reject`,
//! `Challenge`, `Padding`, `Error` and `Bye`, each encoded beside its
//! decoder.

use super::codec::{Reader, put_bytes, put_str, put_tick, put_u64_le, put_varint};
use super::message::{MAX_COOKIE, MAX_NAME, MAX_ROOM, MAX_TEXT, MAX_TICKET, Message};
use super::{MAX_DATAGRAM_LEN, MAX_SEATS, WireError};
use crate::{PlayerId, Tick};
use core::fmt;
use std::net::{IpAddr, SocketAddr};

/// A connection's opening message: who it is and what it runs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Hello<'a> {
    /// A hash of the game's build and content, supplied by the game. Peers
    /// with different fingerprints would simulate differently and are
    /// refused.
    pub fingerprint: u64,
    /// Whether the connection only watches.
    pub spectator: bool,
    /// The room to join (sequenced topology); empty in a mesh.
    pub room: &'a str,
    /// A display name.
    pub name: &'a str,
    /// A join ticket from a matchmaker, if the server requires one.
    pub ticket: &'a [u8],
    /// The token from an earlier `Welcome`, to take the same seat back.
    pub resume: Option<ResumeToken>,
    /// How the connection's inputs are delta-coded, so a relay that knows
    /// nothing of the game can still read them.
    pub codec: InputCodec,
    /// The cookie of the server's latest [`Message::Challenge`], echoed to
    /// prove the sender receives at its address.
    pub cookie: Option<&'a [u8]>,
    /// The sender's X25519 public key: it asks for sealed datagrams (see
    /// [`secure`](crate::secure)).
    pub key: Option<[u8; 32]>,
    /// With `resume`: the first frame the sender lacks, when it kept the
    /// frames before it (a session reconnecting by itself). The rest come
    /// from the sequencer's history if it still holds them, instead of the
    /// game from its start or a snapshot.
    pub resume_from: Option<Tick>,
}

/// A secret that lets its holder take a seat back (see
/// [`Welcome::token`]): 128 bits from the server's keyed generator, so it
/// cannot be guessed. Compared in constant time; its `Debug` shows only a
/// prefix.
#[derive(Clone, Copy, Default, Eq)]
pub struct ResumeToken(pub [u8; 16]);

impl PartialEq for ResumeToken {
    fn eq(&self, other: &Self) -> bool {
        self.0
            .iter()
            .zip(other.0.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

impl fmt::Debug for ResumeToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ResumeToken({:02x}{:02x}..)", self.0[0], self.0[1])
    }
}

/// How inputs are delta-coded on the wire (see [`Input::encode_delta`](crate::Input::encode_delta)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum InputCodec {
    /// Any input: the XOR of the encodings (the default `encode_delta`).
    #[default]
    Opaque,
    /// [`PlayerInputs`](crate::PlayerInputs)' field mask.
    PlayerInputs,
}

/// The answer to an accepted [`Hello`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Welcome {
    /// The seat the connection plays, if any.
    pub seat: Option<PlayerId>,
    /// The first frame the connection will be sent: it runs the stream from
    /// there.
    pub start: Tick,
    /// The tick the seat joins at: its inputs are due from `tick + delay`.
    pub tick: Tick,
    /// Whether the sequencer seals ticks on its own clock (an input that
    /// misses its tick runs on the next one) rather than waiting for all.
    pub deadline: bool,
    /// Simulation ticks per second (0: not stated, as in a mesh).
    pub tick_rate: u32,
    /// Input delay in ticks.
    pub delay: u32,
    /// Seats in each frame.
    pub seats: u32,
    /// A token to present in a later `Hello` to resume this seat (none for
    /// a spectator, and in a mesh).
    pub token: ResumeToken,
    /// The game is under way: the connection first receives a snapshot of
    /// its state (its tick says where the frames start), catches up, and
    /// only then plays (`start` is not used).
    pub snapshot: bool,
    /// The room's match has not started: its lobby is open (see
    /// [`Message::Lobby`]). Nothing is sealed until it starts, and the
    /// connection commits no input before.
    pub lobby: bool,
    /// The match's id: a room whose last player left ends its match, and
    /// the next client under the same name starts a new one, with a new id
    /// (a replay or a game's records tell matches apart by it).
    pub match_id: u64,
}

/// Why a connection was refused, in words a player can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RejectReason<'a> {
    /// Different protocol versions.
    ProtocolMismatch {
        /// The version the refusing side runs.
        server: u8,
        /// The version the refused side runs.
        client: u8,
    },
    /// Different game builds: their simulations would diverge.
    GameMismatch {
        /// The refusing side's fingerprint.
        server: u64,
        /// The refused side's fingerprint.
        client: u64,
    },
    /// Every seat is taken.
    RoomFull,
    /// The server has no room for another room or connection.
    ServerFull,
    /// The join ticket is missing, forged or expired.
    BadTicket,
    /// No such room, and rooms are not created on demand.
    NoSuchRoom,
    /// The resume token matches no seat held for it: the seat's grace
    /// expired, the token was already used, or it was never issued.
    BadToken,
    /// The resume token's seat is still played by a connection heard in
    /// the last `resume_after_silence`: try again (a reconnecting client
    /// repeats its Hello until the old connection has gone quiet).
    SeatBusy,
    /// The room is served by another relay of the fleet, at this address
    /// (for the transport the Hello came on: UDP or WebSocket): connect
    /// there instead. A client that asked for sealing takes it only sealed
    /// under its handshake's keys, so nobody else can send it elsewhere.
    Moved(SocketAddr),
    /// Anything else.
    Other(&'a str),
}

impl fmt::Display for RejectReason<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ProtocolMismatch { server, client } => {
                write!(f, "server runs protocol {server}, you run {client}")
            }
            Self::GameMismatch { server, client } => write!(
                f,
                "game build differs from the server's (server {server:016x}, you {client:016x})"
            ),
            Self::RoomFull => f.write_str("the room is full"),
            Self::ServerFull => f.write_str("the server is full"),
            Self::BadTicket => f.write_str("the join ticket is missing, invalid or expired"),
            Self::NoSuchRoom => f.write_str("no such room"),
            Self::BadToken => {
                f.write_str("no seat is held for that resume token (expired or already used)")
            }
            Self::SeatBusy => f.write_str("that seat's connection is still alive"),
            Self::Moved(at) => write!(f, "the room is on another relay, at {at}"),
            Self::Other(s) => f.write_str(s),
        }
    }
}

/// What went wrong, for an `Error` message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorCode {
    /// A datagram did not decode.
    Malformed,
    /// Well-formed, but against the rules (a spoofed seat, say).
    Violation,
    /// Too many messages or inputs too fast.
    RateLimited,
    /// A message over the size limit.
    TooLarge,
    /// Not allowed without a valid ticket.
    Unauthorized,
    /// The server failed.
    Internal,
}

/// Why a connection ends, for a `Bye` message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ByeReason {
    /// The sender is leaving.
    Leaving,
    /// The server is shutting down.
    Shutdown,
    /// The recipient was removed.
    Kicked,
    /// Nothing was heard for too long.
    Timeout,
}

impl fmt::Display for ByeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Leaving => "leaving",
            Self::Shutdown => "shutting down",
            Self::Kicked => "removed",
            Self::Timeout => "timed out",
        })
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Malformed => "malformed datagram",
            Self::Violation => "rule broken",
            Self::RateLimited => "rate limited",
            Self::TooLarge => "too large",
            Self::Unauthorized => "unauthorized",
            Self::Internal => "server error",
        })
    }
}

/// Whether `len` is within `max`, for `what`.
pub(super) fn within(what: &'static str, len: usize, max: usize) -> Result<(), WireError> {
    if len > max {
        Err(WireError::TooLong { what, len, max })
    } else {
        Ok(())
    }
}

// ----- Hello `0x01` ---------------------------------------------------------

pub(super) fn check_hello(h: &Hello<'_>) -> Result<(), WireError> {
    within("room", h.room.len(), MAX_ROOM)?;
    within("name", h.name.len(), MAX_NAME)?;
    within("ticket", h.ticket.len(), MAX_TICKET)?;
    within("cookie", h.cookie.map_or(0, <[u8]>::len), MAX_COOKIE)
}

pub(super) fn put_hello(out: &mut Vec<u8>, h: &Hello<'_>) {
    let codec = match h.codec {
        InputCodec::Opaque => 0,
        InputCodec::PlayerInputs => 1,
    };
    out.push(
        u8::from(h.spectator)
            | u8::from(h.resume.is_some()) << 1
            | codec << 2
            | u8::from(h.cookie.is_some()) << 3
            | u8::from(h.key.is_some()) << 4
            | u8::from(h.resume_from.is_some()) << 5,
    );
    put_u64_le(out, h.fingerprint);
    put_str(out, h.room);
    put_str(out, h.name);
    put_bytes(out, h.ticket);
    if let Some(t) = h.resume {
        out.extend_from_slice(&t.0);
    }
    if let Some(c) = h.cookie {
        put_bytes(out, c);
    }
    if let Some(k) = h.key {
        out.extend_from_slice(&k);
    }
    if let Some(t) = h.resume_from {
        out.extend_from_slice(&t.get().to_le_bytes());
    }
}

pub(super) fn read_hello<'a>(r: &mut Reader<'a>) -> Result<Message<'a>, WireError> {
    let flags = r.u8()?;
    if flags & !0b11_1111 != 0 {
        return Err(WireError::Invalid("unknown hello flags"));
    }
    let codec = if flags & 4 != 0 {
        InputCodec::PlayerInputs
    } else {
        InputCodec::Opaque
    };
    let fingerprint = r.u64_le()?;
    let room = r.str("room", MAX_ROOM)?;
    let name = r.str("name", MAX_NAME)?;
    let ticket = r.byte_string("ticket", MAX_TICKET)?;
    let resume = if flags & 2 != 0 {
        Some(ResumeToken(r.array()?))
    } else {
        None
    };
    let cookie = if flags & 8 != 0 {
        Some(r.byte_string("cookie", MAX_COOKIE)?)
    } else {
        None
    };
    let key = if flags & 16 != 0 {
        Some(r.array()?)
    } else {
        None
    };
    let resume_from = if flags & 32 != 0 {
        Some(Tick::new(r.u32_le()?))
    } else {
        None
    };
    Ok(Message::Hello(Hello {
        fingerprint,
        spectator: flags & 1 != 0,
        room,
        name,
        ticket,
        resume,
        codec,
        cookie,
        key,
        resume_from,
    }))
}

// ----- Welcome `0x02` -------------------------------------------------------

pub(super) fn check_welcome(w: &Welcome) -> Result<(), WireError> {
    within("seat", w.seats as usize, MAX_SEATS)?;
    within("tick rate", w.tick_rate as usize, 1000)?;
    within("delay", w.delay as usize, 1024)
}

pub(super) fn put_welcome(out: &mut Vec<u8>, w: &Welcome) {
    match w.seat {
        Some(s) => put_varint(out, u64::from(s.0) + 1),
        None => out.push(0),
    }
    out.push(u8::from(w.deadline) | (u8::from(w.snapshot) << 1) | (u8::from(w.lobby) << 2));
    put_tick(out, w.start);
    put_tick(out, w.tick);
    put_varint(out, u64::from(w.tick_rate));
    put_varint(out, u64::from(w.delay));
    put_varint(out, u64::from(w.seats));
    out.extend_from_slice(&w.token.0);
    put_u64_le(out, w.match_id);
}

pub(super) fn read_welcome<'a>(r: &mut Reader<'a>) -> Result<Message<'a>, WireError> {
    let seat = match r.varint()? {
        0 => None,
        n if n <= MAX_SEATS as u64 => Some(PlayerId((n - 1) as u16)),
        _ => return Err(WireError::Invalid("seat out of range")),
    };
    let flags = r.u8()?;
    if flags & !0b111 != 0 {
        return Err(WireError::Invalid("unknown welcome flags"));
    }
    let (deadline, snapshot, lobby) = (flags & 1 != 0, flags & 2 != 0, flags & 4 != 0);
    let start = r.tick()?;
    let tick = r.tick()?;
    let tick_rate = r.varint_u32()?;
    let delay = r.varint_u32()?;
    let seats = r.varint_u32()?;
    if tick_rate > 1000 || delay > 1024 || seats as usize > MAX_SEATS {
        return Err(WireError::Invalid("welcome parameters out of range"));
    }
    Ok(Message::Welcome(Welcome {
        seat,
        start,
        tick,
        deadline,
        tick_rate,
        delay,
        seats,
        token: ResumeToken(r.array()?),
        snapshot,
        lobby,
        match_id: r.u64_le()?,
    }))
}

// ----- Reject `0x03` --------------------------------------------------------

pub(super) fn put_reject(out: &mut Vec<u8>, r: &RejectReason<'_>) {
    match *r {
        RejectReason::ProtocolMismatch { server, client } => out.extend([1, server, client]),
        RejectReason::GameMismatch { server, client } => {
            out.push(2);
            put_u64_le(out, server);
            put_u64_le(out, client);
        }
        RejectReason::RoomFull => out.push(3),
        RejectReason::ServerFull => out.push(4),
        RejectReason::BadTicket => out.push(5),
        RejectReason::NoSuchRoom => out.push(6),
        RejectReason::BadToken => out.push(7),
        RejectReason::SeatBusy => out.push(8),
        RejectReason::Moved(at) => {
            out.push(9);
            match at.ip() {
                IpAddr::V4(ip) => {
                    out.push(4);
                    out.extend(ip.octets());
                }
                IpAddr::V6(ip) => {
                    out.push(6);
                    out.extend(ip.octets());
                }
            }
            out.extend(at.port().to_le_bytes());
        }
        RejectReason::Other(text) => {
            out.push(0xFF);
            put_str(out, text);
        }
    }
}

pub(super) fn read_reject<'a>(r: &mut Reader<'a>) -> Result<Message<'a>, WireError> {
    Ok(Message::Reject(match r.u8()? {
        1 => RejectReason::ProtocolMismatch {
            server: r.u8()?,
            client: r.u8()?,
        },
        2 => RejectReason::GameMismatch {
            server: r.u64_le()?,
            client: r.u64_le()?,
        },
        3 => RejectReason::RoomFull,
        4 => RejectReason::ServerFull,
        5 => RejectReason::BadTicket,
        6 => RejectReason::NoSuchRoom,
        7 => RejectReason::BadToken,
        8 => RejectReason::SeatBusy,
        9 => {
            let ip = match r.u8()? {
                4 => {
                    let mut a = [0u8; 4];
                    a.copy_from_slice(r.bytes(4)?);
                    IpAddr::from(a)
                }
                6 => {
                    let mut a = [0u8; 16];
                    a.copy_from_slice(r.bytes(16)?);
                    IpAddr::from(a)
                }
                _ => return Err(WireError::Invalid("unknown address family")),
            };
            RejectReason::Moved(SocketAddr::new(ip, r.u16_le()?))
        }
        0xFF => RejectReason::Other(r.str("reject text", MAX_TEXT)?),
        _ => return Err(WireError::Invalid("unknown reject reason")),
    }))
}

// ----- Error `0x0D`, Bye `0x0E` ---------------------------------------------

pub(super) fn put_error(out: &mut Vec<u8>, code: ErrorCode, text: &str) {
    out.push(match code {
        ErrorCode::Malformed => 1,
        ErrorCode::Violation => 2,
        ErrorCode::RateLimited => 3,
        ErrorCode::TooLarge => 4,
        ErrorCode::Unauthorized => 5,
        ErrorCode::Internal => 6,
    });
    put_str(out, text);
}

pub(super) fn read_error<'a>(r: &mut Reader<'a>) -> Result<Message<'a>, WireError> {
    let code = match r.u8()? {
        1 => ErrorCode::Malformed,
        2 => ErrorCode::Violation,
        3 => ErrorCode::RateLimited,
        4 => ErrorCode::TooLarge,
        5 => ErrorCode::Unauthorized,
        6 => ErrorCode::Internal,
        _ => return Err(WireError::Invalid("unknown error code")),
    };
    Ok(Message::Error {
        code,
        text: r.str("error text", MAX_TEXT)?,
    })
}

pub(super) fn put_bye(out: &mut Vec<u8>, reason: ByeReason, text: &str) {
    out.push(match reason {
        ByeReason::Leaving => 1,
        ByeReason::Shutdown => 2,
        ByeReason::Kicked => 3,
        ByeReason::Timeout => 4,
    });
    put_str(out, text);
}

pub(super) fn read_bye<'a>(r: &mut Reader<'a>) -> Result<Message<'a>, WireError> {
    let reason = match r.u8()? {
        1 => ByeReason::Leaving,
        2 => ByeReason::Shutdown,
        3 => ByeReason::Kicked,
        4 => ByeReason::Timeout,
        _ => return Err(WireError::Invalid("unknown bye reason")),
    };
    Ok(Message::Bye {
        reason,
        text: r.str("bye text", MAX_TEXT)?,
    })
}

// ----- Challenge `0x10`, Padding `0x11` -------------------------------------

pub(super) fn put_challenge(out: &mut Vec<u8>, cookie: &[u8], key: Option<&[u8; 32]>) {
    put_bytes(out, cookie);
    out.push(u8::from(key.is_some()));
    if let Some(k) = key {
        out.extend_from_slice(k);
    }
}

pub(super) fn read_challenge<'a>(r: &mut Reader<'a>) -> Result<Message<'a>, WireError> {
    let cookie = r.byte_string("cookie", MAX_COOKIE)?;
    let key = match r.u8()? {
        0 => None,
        1 => Some(r.array()?),
        _ => return Err(WireError::Invalid("unknown challenge flags")),
    };
    Ok(Message::Challenge { cookie, key })
}

pub(super) fn put_padding(out: &mut Vec<u8>, len: usize) {
    put_varint(out, len as u64);
    out.resize(out.len() + len, 0);
}

pub(super) fn read_padding<'a>(r: &mut Reader<'a>) -> Result<Message<'a>, WireError> {
    let len = r.len("padding", MAX_DATAGRAM_LEN)?;
    let zeros = r.bytes(len)?;
    if zeros.iter().any(|b| *b != 0) {
        return Err(WireError::Invalid("padding that is not zero"));
    }
    Ok(Message::Padding { len })
}
