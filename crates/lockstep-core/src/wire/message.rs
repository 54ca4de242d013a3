//! Protocol v9 messages: the type bytes, the [`Message`] enum, and the
//! dispatch of each message's bounds, encoder and decoder to the family
//! file that holds them (`handshake`, `play`, `checks`, `control`,
//! `transfer`, `roster`).

use super::codec::Reader;
use super::handshake::{self, within};
use super::{MAX_DATAGRAM_LEN, WireError, checks, control, play, roster, transfer};
use crate::{PlayerId, Tick};

use super::checks::Checkpoint;
use super::control::Abandon;
use super::handshake::{ByeReason, ErrorCode, Hello, RejectReason, ResumeToken, Welcome};
use super::play::{Frames, Inputs, Status};
use super::roster::{Member, Start};
use super::transfer::{SnapshotAck, SnapshotChunk};

/// Most messages one datagram may carry.
pub const MAX_MESSAGES: usize = 64;
/// Most inputs in one run.
pub const MAX_RUN: usize = 1024;
/// Most frames in one `Frames` message.
pub const MAX_FRAMES: usize = 1024;
/// Most ticks one `ChainQuery` asks about (and one `ChainAnswer` answers).
pub const MAX_CHAIN_QUESTIONS: usize = 8;
/// Most changes one `DelayWants` message carries.
pub const MAX_DELAY_CHANGES: usize = 16;
/// Longest room name, in bytes.
pub const MAX_ROOM: usize = 64;
/// Longest player name, in bytes.
pub const MAX_NAME: usize = 32;
/// Longest join ticket, in bytes.
pub const MAX_TICKET: usize = 512;
/// Longest human-readable text, in bytes.
pub const MAX_TEXT: usize = 256;
/// Largest snapshot, in bytes.
pub const MAX_SNAPSHOT: usize = 64 << 20;
/// Most chunks in one snapshot.
pub const MAX_CHUNKS: usize = 65_535;
/// The size of the datagram header.
pub const HEADER_LEN: usize = 5;
/// Longest address-validation cookie, in bytes.
pub const MAX_COOKIE: usize = 64;
/// Longest contact (how players reach each other, see [`Member`]), in
/// bytes.
pub const MAX_CONTACT: usize = 64;
/// The smallest datagram that may carry a [`Hello`]: a sender pads a
/// shorter one with [`Message::Padding`]. An answer to an address that has
/// not proven it receives there is never larger than what came from it, so
/// this is the room a server has for a challenge.
pub const MIN_HELLO_DATAGRAM: usize = 128;

/// Message type bytes.
pub mod message_type {
    /// [`Hello`](super::Hello).
    pub const HELLO: u8 = 0x01;
    /// [`Welcome`](super::Welcome).
    pub const WELCOME: u8 = 0x02;
    /// [`Reject`](super::RejectReason).
    pub const REJECT: u8 = 0x03;
    /// [`Inputs`](super::Inputs).
    pub const INPUTS: u8 = 0x04;
    /// [`Frames`](super::Frames).
    pub const FRAMES: u8 = 0x05;
    /// [`Checkpoint`](super::Checkpoint).
    pub const CHECKPOINT: u8 = 0x06;
    /// Pause.
    pub const PAUSE: u8 = 0x07;
    /// Resume.
    pub const RESUME: u8 = 0x08;
    /// [`Abandon`](super::Abandon).
    pub const ABANDON: u8 = 0x09;
    /// Ping.
    pub const PING: u8 = 0x0A;
    /// Pong.
    pub const PONG: u8 = 0x0B;
    /// [`SnapshotChunk`](super::SnapshotChunk).
    pub const SNAPSHOT_CHUNK: u8 = 0x0C;
    /// Error.
    pub const ERROR: u8 = 0x0D;
    /// Bye.
    pub const BYE: u8 = 0x0E;
    /// [`Status`](super::Status).
    pub const STATUS: u8 = 0x0F;
    /// Challenge.
    pub const CHALLENGE: u8 = 0x10;
    /// Padding.
    pub const PADDING: u8 = 0x11;
    /// SnapshotRequest.
    pub const SNAPSHOT_REQUEST: u8 = 0x12;
    /// [`SnapshotAck`](super::SnapshotAck).
    pub const SNAPSHOT_ACK: u8 = 0x13;
    /// CaughtUp.
    pub const CAUGHT_UP: u8 = 0x14;
    /// ChainQuery.
    pub const CHAIN_QUERY: u8 = 0x15;
    /// ChainAnswer.
    pub const CHAIN_ANSWER: u8 = 0x16;
    /// CheckpointAck.
    pub const CHECKPOINT_ACK: u8 = 0x17;
    /// Resync.
    pub const RESYNC: u8 = 0x18;
    /// Member.
    pub const MEMBER: u8 = 0x19;
    /// MemberAck.
    pub const MEMBER_ACK: u8 = 0x1A;
    /// Takeover.
    pub const TAKEOVER: u8 = 0x1B;
    /// TakeoverAck.
    pub const TAKEOVER_ACK: u8 = 0x1C;
    /// DelayWanted.
    pub const DELAY_WANTED: u8 = 0x1D;
    /// DelayWants.
    pub const DELAY_WANTS: u8 = 0x1E;
    /// Lobby.
    pub const LOBBY: u8 = 0x1F;
    /// Ready.
    pub const READY: u8 = 0x20;
}
use message_type as ty;

/// One message of the protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Message<'a> {
    /// Opening a connection.
    Hello(Hello<'a>),
    /// Connection accepted.
    Welcome(Welcome),
    /// Connection refused.
    Reject(RejectReason<'a>),
    /// Inputs and acknowledgements.
    Inputs(Inputs<'a>),
    /// Confirmed frames.
    Frames(Frames<'a>),
    /// A checkpoint of the sender's state-hash chain.
    Checkpoint(Checkpoint),
    /// From the sequencer: the recipient's state differs from the
    /// majority's; a snapshot follows, which replaces it (the recipient
    /// waits for it as a joiner does). Repeated until the snapshot's first
    /// chunk arrives; `id` tells a repeat from a new resync.
    Resync {
        /// This resync's id.
        id: u32,
        /// The verdict the recipient's checkpoint differed from (its `ack`
        /// is not sent): the recipient compares it, as if it came alone,
        /// before its state is replaced.
        verdict: Checkpoint,
    },
    /// A full checkpoint of the recipient's the sender received, when no
    /// checkpoint of its own carries the acknowledgement.
    CheckpointAck {
        /// The checkpoint's tick.
        tick: Tick,
    },
    /// Asks for the recipient's chain through each of `ticks`: a round of the search for the first divergent tick.
    ChainQuery {
        /// Chosen by the asker; the answer carries it back.
        id: u32,
        /// Ascending ticks, at most [`MAX_CHAIN_QUESTIONS`].
        ticks: Vec<Tick>,
    },
    /// The answer to a [`ChainQuery`](Message::ChainQuery): the chain through
    /// each tick asked about that the sender holds, and the state hash after
    /// it (a tick left out is not held, or its block is not complete).
    ChainAnswer {
        /// The query's id.
        id: u32,
        /// Ascending `(tick, chain, hash)`, at most [`MAX_CHAIN_QUESTIONS`].
        entries: Vec<(Tick, u64, u64)>,
    },
    /// A pause freezing on `frame`.
    Pause {
        /// The freeze frame.
        frame: Tick,
    },
    /// The highest pause frame the sender has lifted.
    Resume {
        /// The lifted frame.
        lifted: Tick,
    },
    /// Abandonment state.
    Abandon(Abandon),
    /// Round-trip probe: the sender's clock in milliseconds.
    Ping {
        /// The sender's clock.
        stamp: u32,
    },
    /// Answer to a ping.
    Pong {
        /// The ping's stamp.
        stamp: u32,
        /// How long the ping was held before this answer left.
        held_ms: u32,
        /// Datagrams the sender has received from the recipient on this
        /// connection so far (wrapping): with `sent`, how the recipient
        /// measures the loss each way.
        received: u32,
        /// Datagrams the sender has sent the recipient on this connection
        /// so far, this one included (wrapping).
        sent: u32,
    },
    /// Part of a snapshot.
    SnapshotChunk(SnapshotChunk<'a>),
    /// Asks the recipient for its game state right after `tick`, as
    /// snapshot `id`.
    SnapshotRequest {
        /// The id the snapshot's chunks will carry.
        id: u32,
        /// The tick the state must follow.
        tick: Tick,
    },
    /// Which chunks of a snapshot the sender has.
    SnapshotAck(SnapshotAck),
    /// From a client that joined from a snapshot: it has run the frames up
    /// to (not including) `tick` and is ready to play.
    CaughtUp {
        /// Its next frame.
        tick: Tick,
    },
    /// The sender refused something the recipient sent.
    Error {
        /// What went wrong.
        code: ErrorCode,
        /// Details, for logs.
        text: &'a str,
    },
    /// The connection ends.
    Bye {
        /// Why.
        reason: ByeReason,
        /// Details, for logs.
        text: &'a str,
    },
    /// A sequencer's view, for one client.
    Status(Status),
    /// Prove you receive at your address: send a `Hello` again with this
    /// cookie. The answer to a `Hello` from an address not validated yet.
    Challenge {
        /// Opaque to the client; checked by the server that made it.
        cookie: &'a [u8],
        /// The server's X25519 public key for this handshake, when the
        /// client offered one.
        key: Option<[u8; 32]>,
    },
    /// Zero bytes that carry nothing, so a datagram reaches a minimum size
    /// (see [`MIN_HELLO_DATAGRAM`]).
    Padding {
        /// How many zero bytes follow.
        len: usize,
    },
    /// From the sequencer: one seat's roster entry. Repeated until
    /// acknowledged.
    Member(Member<'a>),
    /// From the sequencer, in every datagram while the room's match has
    /// not started: its lobby is open, and the match starts as this says.
    /// The first datagram without it (that carries a `Status`) says the
    /// match started; a lobby never opens again.
    Lobby(Start),
    /// From a seated player's client in a room whose match starts once its
    /// players are ready: whether this one is. Sent in every datagram
    /// until the roster shows it.
    Ready {
        /// Ready to start.
        ready: bool,
    },
    /// Acknowledges a [`Member`](Message::Member) entry.
    MemberAck {
        /// The seat.
        seat: PlayerId,
        /// The entry's version.
        version: u32,
    },
    /// Host mode, the host gone: a survivor to the player it expects to
    /// take over, repeated until answered. The same datagram carries the
    /// survivor's inputs for the ticks it has not run (`Inputs`).
    Takeover {
        /// The takeover's number (one more than the host changes so far).
        epoch: u32,
        /// The survivor's seat.
        seat: PlayerId,
        /// Its resume token: it must match the roster's commitment for the
        /// seat.
        token: ResumeToken,
        /// The first frame it lacks.
        lacks: Tick,
    },
    /// The answer to a [`Takeover`](Message::Takeover).
    TakeoverAck {
        /// The takeover's number.
        epoch: u32,
        /// The new host is ready: take the seat back on it
        /// (a `Hello` with the resume proof).
        ready: bool,
        /// Send the frames held from this tick on (`Frames`).
        want: Option<Tick>,
        /// The match went on without the reporter's seat: it reported too
        /// late, and can only join again as a new player.
        late: bool,
        /// The sender still hears the host: it takes no part in a takeover.
        alive: bool,
        /// With `alive`: the seat of the host the sender follows, when it
        /// knows it (a reporter whose candidate already took over, but
        /// whose answers were lost, goes back to it).
        host: Option<PlayerId>,
    },
    /// A player's client to the sequencer of a room whose input delay
    /// adapts: the delay that would keep its stalls at the target rate
    /// (see [`DelayTracker`](crate::DelayTracker)). Sent in every
    /// datagram; the room's delay is the largest any player wants.
    DelayWanted {
        /// Ticks, at most [`MAX_DELAY`](super::MAX_DELAY).
        delay: u32,
    },
    /// A mesh peer's wanted input delay, stamped in a seat's input stream:
    /// from the seat's input for each change's tick on, it wants that
    /// delay. Sent with every run of the seat's input that reaches a
    /// change's tick, so whoever holds an input holds the want that goes
    /// with it, and every peer works the session's delay out of the same
    /// stream.
    DelayWants {
        /// The seat the wants belong to.
        seat: PlayerId,
        /// `(tick, delay)` in ascending tick order, at most
        /// [`MAX_DELAY_CHANGES`]; delays from 1 to
        /// [`MAX_DELAY`](super::MAX_DELAY).
        changes: Vec<(Tick, u32)>,
    },
}

impl Message<'_> {
    /// The message's type byte.
    pub fn kind(&self) -> u8 {
        match self {
            Self::Hello(_) => ty::HELLO,
            Self::Welcome(_) => ty::WELCOME,
            Self::Reject(_) => ty::REJECT,
            Self::Inputs(_) => ty::INPUTS,
            Self::Frames(_) => ty::FRAMES,
            Self::Checkpoint(_) => ty::CHECKPOINT,
            Self::CheckpointAck { .. } => ty::CHECKPOINT_ACK,
            Self::Resync { .. } => ty::RESYNC,
            Self::ChainQuery { .. } => ty::CHAIN_QUERY,
            Self::ChainAnswer { .. } => ty::CHAIN_ANSWER,
            Self::Pause { .. } => ty::PAUSE,
            Self::Resume { .. } => ty::RESUME,
            Self::Abandon(_) => ty::ABANDON,
            Self::Ping { .. } => ty::PING,
            Self::Pong { .. } => ty::PONG,
            Self::SnapshotChunk(_) => ty::SNAPSHOT_CHUNK,
            Self::Error { .. } => ty::ERROR,
            Self::Bye { .. } => ty::BYE,
            Self::Status(_) => ty::STATUS,
            Self::Challenge { .. } => ty::CHALLENGE,
            Self::Padding { .. } => ty::PADDING,
            Self::SnapshotRequest { .. } => ty::SNAPSHOT_REQUEST,
            Self::SnapshotAck(_) => ty::SNAPSHOT_ACK,
            Self::CaughtUp { .. } => ty::CAUGHT_UP,
            Self::Member(_) => ty::MEMBER,
            Self::MemberAck { .. } => ty::MEMBER_ACK,
            Self::Takeover { .. } => ty::TAKEOVER,
            Self::TakeoverAck { .. } => ty::TAKEOVER_ACK,
            Self::DelayWanted { .. } => ty::DELAY_WANTED,
            Self::DelayWants { .. } => ty::DELAY_WANTS,
            Self::Lobby(_) => ty::LOBBY,
            Self::Ready { .. } => ty::READY,
        }
    }

    /// Checks the fields the decoder bounds, so nothing is ever sent that
    /// the other side must refuse.
    pub fn check_bounds(&self) -> Result<(), WireError> {
        match self {
            Self::Hello(h) => handshake::check_hello(h),
            Self::Welcome(w) => handshake::check_welcome(w),
            Self::Reject(RejectReason::Other(t))
            | Self::Error { text: t, .. }
            | Self::Bye { text: t, .. } => within("text", t.len(), MAX_TEXT),
            Self::Challenge { cookie, .. } => within("cookie", cookie.len(), MAX_COOKIE),
            Self::Padding { len } => within("padding", *len, MAX_DATAGRAM_LEN),
            Self::Inputs(i) => play::check_inputs(i),
            Self::Frames(f) => play::check_frames(f),
            Self::Status(st) => within("waiting seat", st.waiting.len(), super::MAX_SEATS),
            Self::DelayWanted { delay } => play::check_delay_wanted(*delay),
            Self::DelayWants { seat, changes } => play::check_delay_wants(*seat, changes),
            Self::Checkpoint(c) => checks::check_checkpoint(c),
            Self::ChainQuery { ticks, .. } => checks::check_chain_query(ticks),
            Self::ChainAnswer { entries, .. } => checks::check_chain_answer(entries),
            Self::Abandon(a) => control::check_abandon(a),
            Self::SnapshotChunk(c) => transfer::check_chunk(c),
            Self::Member(m) => roster::check_member(m),
            Self::Lobby(s) => roster::check_start(*s),
            Self::MemberAck { seat, .. } | Self::Takeover { seat, .. } => roster::check_seat(*seat),
            _ => Ok(()),
        }
    }

    /// Appends the message (type byte and body); tick fields are written as
    /// distances from `base`, the datagram's base tick.
    pub fn encode(&self, base: Tick, out: &mut Vec<u8>) {
        use super::codec::{put_tick_delta, put_varint};
        out.push(self.kind());
        match self {
            Self::Hello(h) => handshake::put_hello(out, h),
            Self::Welcome(w) => handshake::put_welcome(out, w),
            Self::Reject(r) => handshake::put_reject(out, r),
            Self::Error { code, text } => handshake::put_error(out, *code, text),
            Self::Bye { reason, text } => handshake::put_bye(out, *reason, text),
            Self::Challenge { cookie, key } => handshake::put_challenge(out, cookie, key.as_ref()),
            Self::Padding { len } => handshake::put_padding(out, *len),
            Self::Inputs(m) => play::put_inputs(out, base, m),
            Self::Frames(f) => play::put_frames(out, base, f),
            Self::Status(st) => play::put_status(out, base, st),
            Self::DelayWanted { delay } => put_varint(out, u64::from(*delay)),
            Self::DelayWants { seat, changes } => play::put_delay_wants(out, base, *seat, changes),
            Self::Checkpoint(c) => checks::put_checkpoint(out, base, c),
            Self::CheckpointAck { tick } => put_tick_delta(out, base, *tick),
            Self::Resync { id, verdict } => checks::put_resync(out, base, *id, verdict),
            Self::ChainQuery { id, ticks } => checks::put_chain_query(out, base, *id, ticks),
            Self::ChainAnswer { id, entries } => checks::put_chain_answer(out, base, *id, entries),
            Self::Pause { frame } => put_tick_delta(out, base, *frame),
            Self::Resume { lifted } => put_tick_delta(out, base, *lifted),
            Self::Abandon(a) => control::put_abandon(out, base, a),
            Self::Ping { stamp } => put_varint(out, u64::from(*stamp)),
            Self::Pong {
                stamp,
                held_ms,
                received,
                sent,
            } => control::put_pong(out, [*stamp, *held_ms, *received, *sent]),
            Self::SnapshotChunk(c) => transfer::put_chunk(out, c),
            Self::SnapshotRequest { id, tick } => transfer::put_snapshot_request(out, *id, *tick),
            Self::SnapshotAck(a) => transfer::put_snapshot_ack(out, a),
            Self::CaughtUp { tick } => transfer::put_caught_up(out, base, *tick),
            Self::Member(m) => roster::put_member(out, m),
            Self::MemberAck { seat, version } => roster::put_member_ack(out, *seat, *version),
            Self::Lobby(s) => roster::put_lobby(out, *s),
            Self::Ready { ready } => out.push(u8::from(*ready)),
            Self::Takeover {
                epoch,
                seat,
                token,
                lacks,
            } => roster::put_takeover(out, *epoch, *seat, token, *lacks),
            Self::TakeoverAck {
                epoch,
                ready,
                want,
                late,
                alive,
                host,
            } => roster::put_takeover_ack(
                out,
                &roster::TakeoverAckFields {
                    epoch: *epoch,
                    ready: *ready,
                    want: *want,
                    late: *late,
                    alive: *alive,
                    host: *host,
                },
            ),
        }
    }
}

/// Reads one message (type byte and body) whose tick fields are distances
/// from `base`.
#[inline]
pub(super) fn read_message<'a>(r: &mut Reader<'a>, base: Tick) -> Result<Message<'a>, WireError> {
    match r.u8()? {
        ty::HELLO => handshake::read_hello(r),
        ty::WELCOME => handshake::read_welcome(r),
        ty::REJECT => handshake::read_reject(r),
        ty::ERROR => handshake::read_error(r),
        ty::BYE => handshake::read_bye(r),
        ty::CHALLENGE => handshake::read_challenge(r),
        ty::PADDING => handshake::read_padding(r),
        ty::INPUTS => play::read_inputs(r, base),
        ty::FRAMES => play::read_frames(r, base),
        ty::STATUS => play::read_status(r, base),
        ty::DELAY_WANTED => play::read_delay_wanted(r),
        ty::DELAY_WANTS => play::read_delay_wants(r, base),
        ty::CHECKPOINT => checks::read_checkpoint(r, base),
        ty::CHECKPOINT_ACK => Ok(Message::CheckpointAck {
            tick: r.tick_delta(base)?,
        }),
        ty::RESYNC => checks::read_resync(r, base),
        ty::CHAIN_QUERY => checks::read_chain_query(r, base),
        ty::CHAIN_ANSWER => checks::read_chain_answer(r, base),
        ty::PAUSE => control::read_pause(r, base),
        ty::RESUME => control::read_resume(r, base),
        ty::ABANDON => control::read_abandon(r, base),
        ty::PING => control::read_ping(r),
        ty::PONG => control::read_pong(r),
        ty::SNAPSHOT_CHUNK => transfer::read_chunk(r),
        ty::SNAPSHOT_REQUEST => transfer::read_snapshot_request(r),
        ty::SNAPSHOT_ACK => transfer::read_snapshot_ack(r),
        ty::CAUGHT_UP => transfer::read_caught_up(r, base),
        ty::MEMBER => roster::read_member(r),
        ty::MEMBER_ACK => roster::read_member_ack(r),
        ty::LOBBY => roster::read_lobby(r),
        ty::READY => roster::read_ready(r),
        ty::TAKEOVER => roster::read_takeover(r),
        ty::TAKEOVER_ACK => roster::read_takeover_ack(r),
        other => Err(WireError::UnknownMessage(other)),
    }
}
