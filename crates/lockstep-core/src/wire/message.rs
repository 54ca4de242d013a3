//! Protocol v4 messages and the datagram envelope.

use super::chain::decode_chain;
use super::codec::{
    Reader, expand_tick, put_bytes, put_str, put_tick, put_tick_delta, put_u64_le, put_varint,
};
use super::frame::{decode_frames_body, read_player};
use super::{MAGIC, MAX_DATAGRAM_LEN, MAX_SEATS, VERSION, WireError};
use crate::{Frame, Input, PlayerId, Tick};
use core::fmt;

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
}
use message_type as ty;

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

/// How inputs are delta-coded on the wire (see [`Input::encode_delta`]).
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
            Self::Other(s) => f.write_str(s),
        }
    }
}

/// Consecutive inputs of one seat, as a delta chain (see
/// [`ChainWriter`](super::ChainWriter)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputRun<'a> {
    /// Whose inputs.
    pub seat: PlayerId,
    /// The tick of the first input.
    pub start: Tick,
    /// How many inputs (at least 1).
    pub count: u32,
    /// The encoded chain.
    pub chain: &'a [u8],
}

impl InputRun<'_> {
    /// The inputs, decoded as `I`.
    pub fn decode<I: Input>(&self) -> Result<Vec<I>, WireError> {
        decode_chain(self.chain, self.count as usize)
    }
}

/// Inputs with acknowledgements.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Inputs<'a> {
    /// For each listed seat, the lowest tick of its input the sender still
    /// lacks: where the recipient should resend from.
    pub acks: Vec<(PlayerId, Tick)>,
    /// Input runs.
    pub runs: Vec<InputRun<'a>>,
}

/// Confirmed frames for consecutive ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frames<'a> {
    /// The first tick.
    pub start: Tick,
    /// How many frames (at least 1).
    pub count: u32,
    /// Seats in each frame.
    pub seats: u32,
    /// The encoded frames (see [`encode_frames_body`](super::encode_frames_body)).
    pub body: &'a [u8],
}

impl Frames<'_> {
    /// The frames, decoded as `I`.
    pub fn decode<I: Input>(&self) -> Result<Vec<Frame<I>>, WireError> {
        decode_frames_body(
            self.start,
            self.count as usize,
            self.seats as usize,
            self.body,
        )
    }
}

/// A checkpoint of the sender's state-hash chain (see
/// [`HashChain`](crate::desync::HashChain)): the chain through `tick`, the
/// last tick the sender reported in its checkpoint interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Checkpoint {
    /// The tick the chain runs through.
    pub tick: Tick,
    /// Whether the checkpoint closes a block and carries all 64 bits;
    /// otherwise only the low 16.
    pub full: bool,
    /// The chain, or its low 16 bits.
    pub value: u64,
    /// A full checkpoint of the recipient's the sender received (each
    /// full one is acknowledged on its own).
    pub ack: Option<Tick>,
}

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

/// One piece of a state snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotChunk<'a> {
    /// Which snapshot (chunks of different snapshots never mix).
    pub id: u32,
    /// The tick the snapshot was taken after.
    pub tick: Tick,
    /// The snapshot's size, uncompressed.
    pub raw_len: u32,
    /// The snapshot's size compressed (LZ4 block format): what the chunks
    /// carry, every one `ceil(packed_len / count)` bytes but the last.
    pub packed_len: u32,
    /// xxh3-64 of the uncompressed snapshot, checked after reassembly.
    pub hash: u64,
    /// This chunk's position, `0..count`.
    pub index: u32,
    /// How many chunks make the snapshot.
    pub count: u32,
    /// The low 32 bits of xxh3-64 over this chunk's bytes.
    pub checksum: u32,
    /// This chunk's bytes.
    pub data: &'a [u8],
}

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

/// Which chunks of a snapshot arrived: all before `next`, and of the 64
/// after it those whose bit is set (bit `i` is chunk `next + 1 + i`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SnapshotAck {
    /// The snapshot.
    pub id: u32,
    /// The first chunk missing.
    pub next: u32,
    /// Chunks received beyond it.
    pub bits: u64,
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

/// One message of protocol v4.
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
    /// From a sequencer that shares its roster: one seat's entry.
    /// Repeated until acknowledged.
    Member(Member<'a>),
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

/// What a sequencer tells each client besides frames.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Status {
    /// The next tick the sequencer will seal.
    pub open: Tick,
    /// How many ticks early (positive) or late (negative) this client's
    /// latest input arrived for the tick it was stamped for.
    pub slack: i32,
    /// The seats the open tick is waiting on (empty unless stalled).
    pub waiting: Vec<PlayerId>,
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
        }
    }

    /// Checks the fields the decoder bounds, so nothing is ever sent that
    /// the other side must refuse.
    pub fn check_bounds(&self) -> Result<(), WireError> {
        let over = |what: &'static str, len: usize, max: usize| {
            if len > max {
                Err(WireError::TooLong { what, len, max })
            } else {
                Ok(())
            }
        };
        match self {
            Self::Hello(h) => {
                over("room", h.room.len(), MAX_ROOM)?;
                over("name", h.name.len(), MAX_NAME)?;
                over("ticket", h.ticket.len(), MAX_TICKET)?;
                over("cookie", h.cookie.map_or(0, <[u8]>::len), MAX_COOKIE)
            }
            Self::Challenge { cookie, .. } => over("cookie", cookie.len(), MAX_COOKIE),
            Self::Member(m) => {
                over("seat", m.seat.index(), MAX_SEATS - 1)?;
                over(
                    "contact",
                    m.holder.map_or(0, |h| h.contact.len()),
                    MAX_CONTACT,
                )
            }
            Self::MemberAck { seat, .. } | Self::Takeover { seat, .. } => {
                over("seat", seat.index(), MAX_SEATS - 1)
            }
            Self::Padding { len } => over("padding", *len, MAX_DATAGRAM_LEN),
            Self::DelayWanted { delay: 0 } => Err(WireError::Invalid("a delay of 0 ticks")),
            Self::DelayWanted { delay } => over("delay", *delay as usize, 1024),
            Self::DelayWants { seat, changes } => {
                over("seat", seat.index(), MAX_SEATS - 1)?;
                over("delay change", changes.len(), MAX_DELAY_CHANGES)?;
                if changes.windows(2).any(|w| w[0].0 >= w[1].0) {
                    return Err(WireError::Invalid("delay changes out of order"));
                }
                match changes
                    .iter()
                    .find(|(_, d)| !(1..=super::MAX_DELAY).contains(d))
                {
                    Some(_) => Err(WireError::Invalid("delay not 1 to 1024 ticks")),
                    None => Ok(()),
                }
            }
            Self::Welcome(w) => {
                over("seat", w.seats as usize, MAX_SEATS)?;
                over("tick rate", w.tick_rate as usize, 1000)?;
                over("delay", w.delay as usize, 1024)
            }
            Self::Reject(RejectReason::Other(t))
            | Self::Error { text: t, .. }
            | Self::Bye { text: t, .. } => over("text", t.len(), MAX_TEXT),
            Self::Inputs(i) => {
                over("ack", i.acks.len(), MAX_SEATS)?;
                over("input run", i.runs.len(), MAX_SEATS)?;
                for r in &i.runs {
                    over("run input", r.count as usize, MAX_RUN)?;
                    if r.count == 0 || r.start.checked_add(r.count - 1).is_none() {
                        return Err(WireError::Invalid("input run passes the last tick"));
                    }
                }
                Ok(())
            }
            Self::Frames(f) => {
                over("frame", f.count as usize, MAX_FRAMES)?;
                over("seat", f.seats as usize, MAX_SEATS)
            }
            Self::Checkpoint(c) if !c.full && c.value > 0xFFFF => {
                Err(WireError::Invalid("short checkpoint wider than 16 bits"))
            }
            Self::ChainQuery { ticks, .. } => {
                over("chain question", ticks.len(), MAX_CHAIN_QUESTIONS)
            }
            Self::ChainAnswer { entries, .. } => {
                over("chain answer", entries.len(), MAX_CHAIN_QUESTIONS)
            }
            Self::Abandon(a) => {
                over("vote", a.votes.len(), MAX_SEATS)?;
                over("frozen seat", a.frozen.len(), MAX_SEATS)?;
                over("endorsement", a.endorsements.len(), MAX_SEATS)
            }
            Self::Status(st) => over("waiting seat", st.waiting.len(), MAX_SEATS),
            Self::SnapshotChunk(c) => {
                over("snapshot", c.raw_len as usize, MAX_SNAPSHOT)?;
                over("compressed snapshot", c.packed_len as usize, MAX_SNAPSHOT)?;
                over("snapshot chunk", c.count as usize, MAX_CHUNKS)
            }
            _ => Ok(()),
        }
    }

    /// Appends the message (type byte and body); tick fields are written as
    /// distances from `base`, the datagram's base tick.
    pub fn encode(&self, base: Tick, out: &mut Vec<u8>) {
        out.push(self.kind());
        match self {
            Self::Hello(h) => {
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
            Self::Welcome(w) => {
                match w.seat {
                    Some(s) => put_varint(out, u64::from(s.0) + 1),
                    None => out.push(0),
                }
                out.push(u8::from(w.deadline) | (u8::from(w.snapshot) << 1));
                put_tick(out, w.start);
                put_tick(out, w.tick);
                put_varint(out, u64::from(w.tick_rate));
                put_varint(out, u64::from(w.delay));
                put_varint(out, u64::from(w.seats));
                out.extend_from_slice(&w.token.0);
            }
            Self::Reject(r) => match *r {
                RejectReason::ProtocolMismatch { server, client } => {
                    out.extend([1, server, client])
                }
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
                RejectReason::Other(text) => {
                    out.push(0xFF);
                    put_str(out, text);
                }
            },
            Self::Inputs(m) => {
                put_seat_ticks(out, base, &m.acks);
                put_varint(out, m.runs.len() as u64);
                for run in &m.runs {
                    put_varint(out, u64::from(run.seat.0));
                    put_tick_delta(out, base, run.start);
                    put_varint(out, u64::from(run.count));
                    put_bytes(out, run.chain);
                }
            }
            Self::Frames(f) => {
                put_tick_delta(out, base, f.start);
                put_varint(out, u64::from(f.count));
                put_varint(out, u64::from(f.seats));
                put_bytes(out, f.body);
            }
            Self::Checkpoint(c) => {
                put_tick_delta(out, base, c.tick);
                out.push(u8::from(c.full) | u8::from(c.ack.is_some()) << 1);
                if c.full {
                    put_u64_le(out, c.value);
                } else {
                    out.extend_from_slice(&(c.value as u16).to_le_bytes());
                }
                if let Some(a) = c.ack {
                    put_tick_delta(out, base, a);
                }
            }
            Self::CheckpointAck { tick } => put_tick_delta(out, base, *tick),
            Self::Resync { id, verdict } => {
                put_varint(out, u64::from(*id));
                put_tick_delta(out, base, verdict.tick);
                out.push(u8::from(verdict.full));
                if verdict.full {
                    put_u64_le(out, verdict.value);
                } else {
                    out.extend_from_slice(&(verdict.value as u16).to_le_bytes());
                }
            }
            Self::ChainQuery { id, ticks } => {
                put_varint(out, u64::from(*id));
                put_varint(out, ticks.len() as u64);
                for t in ticks {
                    put_tick_delta(out, base, *t);
                }
            }
            Self::ChainAnswer { id, entries } => {
                put_varint(out, u64::from(*id));
                put_varint(out, entries.len() as u64);
                for (t, chain, hash) in entries {
                    put_tick_delta(out, base, *t);
                    put_u64_le(out, *chain);
                    put_u64_le(out, *hash);
                }
            }
            Self::Pause { frame } => put_tick_delta(out, base, *frame),
            Self::Resume { lifted } => put_tick_delta(out, base, *lifted),
            Self::Abandon(a) => {
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
            Self::Ping { stamp } => put_varint(out, u64::from(*stamp)),
            Self::Pong {
                stamp,
                held_ms,
                received,
                sent,
            } => {
                put_varint(out, u64::from(*stamp));
                put_varint(out, u64::from(*held_ms));
                put_varint(out, u64::from(*received));
                put_varint(out, u64::from(*sent));
            }
            Self::SnapshotChunk(c) => {
                put_varint(out, u64::from(c.id));
                put_tick(out, c.tick);
                put_varint(out, u64::from(c.raw_len));
                put_varint(out, u64::from(c.packed_len));
                put_u64_le(out, c.hash);
                put_varint(out, u64::from(c.index));
                put_varint(out, u64::from(c.count));
                out.extend_from_slice(&c.checksum.to_le_bytes());
                put_bytes(out, c.data);
            }
            Self::Error { code, text } => {
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
            Self::Bye { reason, text } => {
                out.push(match reason {
                    ByeReason::Leaving => 1,
                    ByeReason::Shutdown => 2,
                    ByeReason::Kicked => 3,
                    ByeReason::Timeout => 4,
                });
                put_str(out, text);
            }
            Self::Status(st) => {
                put_tick_delta(out, base, st.open);
                let z = (i64::from(st.slack) << 1) ^ (i64::from(st.slack) >> 63);
                put_varint(out, z as u64);
                put_varint(out, st.waiting.len() as u64);
                for p in &st.waiting {
                    put_varint(out, u64::from(p.0));
                }
            }
            Self::Challenge { cookie, key } => {
                put_bytes(out, cookie);
                out.push(u8::from(key.is_some()));
                if let Some(k) = key {
                    out.extend_from_slice(k);
                }
            }
            Self::Padding { len } => {
                put_varint(out, *len as u64);
                out.resize(out.len() + len, 0);
            }
            Self::SnapshotRequest { id, tick } => {
                put_varint(out, u64::from(*id));
                put_tick(out, *tick);
            }
            Self::SnapshotAck(a) => {
                put_varint(out, u64::from(a.id));
                put_varint(out, u64::from(a.next));
                put_u64_le(out, a.bits);
            }
            Self::CaughtUp { tick } => put_tick_delta(out, base, *tick),
            Self::Member(m) => {
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
            Self::MemberAck { seat, version } => {
                put_varint(out, u64::from(seat.0));
                put_varint(out, u64::from(*version));
            }
            Self::Takeover {
                epoch,
                seat,
                token,
                lacks,
            } => {
                put_varint(out, u64::from(*epoch));
                put_varint(out, u64::from(seat.0));
                out.extend_from_slice(&token.0);
                put_tick(out, *lacks);
            }
            Self::TakeoverAck {
                epoch,
                ready,
                want,
                late,
                alive,
                host,
            } => {
                put_varint(out, u64::from(*epoch));
                out.push(
                    u8::from(*ready)
                        | u8::from(want.is_some()) << 1
                        | u8::from(*late) << 2
                        | u8::from(*alive) << 3
                        | u8::from(host.is_some()) << 4,
                );
                if let Some(t) = want {
                    put_tick(out, *t);
                }
                if let Some(h) = host {
                    put_varint(out, u64::from(h.0));
                }
            }
            Self::DelayWanted { delay } => put_varint(out, u64::from(*delay)),
            Self::DelayWants { seat, changes } => {
                put_varint(out, u64::from(seat.0));
                put_varint(out, changes.len() as u64);
                for (t, d) in changes {
                    put_tick_delta(out, base, *t);
                    put_varint(out, u64::from(*d));
                }
            }
        }
    }
}

fn put_seat_ticks(out: &mut Vec<u8>, base: Tick, list: &[(PlayerId, Tick)]) {
    put_varint(out, list.len() as u64);
    for (p, t) in list {
        put_varint(out, u64::from(p.0));
        put_tick_delta(out, base, *t);
    }
}

fn read_seat_ticks(
    r: &mut Reader<'_>,
    base: Tick,
    what: &'static str,
) -> Result<Vec<(PlayerId, Tick)>, WireError> {
    let n = r.count(what, MAX_SEATS, 2)?;
    (0..n)
        .map(|_| Ok((read_player(r)?, r.tick_delta(base)?)))
        .collect()
}

fn read_message<'a>(r: &mut Reader<'a>, base: Tick) -> Result<Message<'a>, WireError> {
    let kind = r.u8()?;
    Ok(match kind {
        ty::HELLO => {
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
            Message::Hello(Hello {
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
            })
        }
        ty::WELCOME => {
            let seat = match r.varint()? {
                0 => None,
                n if n <= MAX_SEATS as u64 => Some(PlayerId((n - 1) as u16)),
                _ => return Err(WireError::Invalid("seat out of range")),
            };
            let flags = r.u8()?;
            if flags & !0b11 != 0 {
                return Err(WireError::Invalid("unknown welcome flags"));
            }
            let (deadline, snapshot) = (flags & 1 != 0, flags & 2 != 0);
            let start = r.tick()?;
            let tick = r.tick()?;
            let tick_rate = r.varint_u32()?;
            let delay = r.varint_u32()?;
            let seats = r.varint_u32()?;
            if tick_rate > 1000 || delay > 1024 || seats as usize > MAX_SEATS {
                return Err(WireError::Invalid("welcome parameters out of range"));
            }
            Message::Welcome(Welcome {
                seat,
                start,
                tick,
                deadline,
                tick_rate,
                delay,
                seats,
                token: ResumeToken(r.array()?),
                snapshot,
            })
        }
        ty::REJECT => Message::Reject(match r.u8()? {
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
            0xFF => RejectReason::Other(r.str("reject text", MAX_TEXT)?),
            _ => return Err(WireError::Invalid("unknown reject reason")),
        }),
        ty::INPUTS => {
            let acks = read_seat_ticks(r, base, "ack")?;
            let n = r.count("input run", MAX_SEATS, 4)?;
            let mut runs = Vec::with_capacity(n);
            for _ in 0..n {
                let seat = read_player(r)?;
                let start = r.tick_delta(base)?;
                let count = r.len("run input", MAX_RUN)?;
                if count == 0 {
                    return Err(WireError::Invalid("empty input run"));
                }
                if start.checked_add(count as u32 - 1).is_none() {
                    return Err(WireError::Invalid("input run passes the last tick"));
                }
                let chain = r.byte_string("chain", MAX_DATAGRAM_LEN)?;
                runs.push(InputRun {
                    seat,
                    start,
                    count: count as u32,
                    chain,
                });
            }
            Message::Inputs(Inputs { acks, runs })
        }
        ty::FRAMES => {
            let start = r.tick_delta(base)?;
            let count = r.len("frame", MAX_FRAMES)?;
            if count == 0 {
                return Err(WireError::Invalid("empty frame list"));
            }
            if start.checked_add(count as u32 - 1).is_none() {
                return Err(WireError::Invalid("frames pass the last tick"));
            }
            let seats = r.len("seat", MAX_SEATS)?;
            let body = r.byte_string("frames", MAX_DATAGRAM_LEN)?;
            Message::Frames(Frames {
                start,
                count: count as u32,
                seats: seats as u32,
                body,
            })
        }
        ty::CHECKPOINT => {
            let tick = r.tick_delta(base)?;
            let flags = r.u8()?;
            if flags > 3 {
                return Err(WireError::Invalid("unknown checkpoint flags"));
            }
            let full = flags & 1 != 0;
            let value = if full {
                r.u64_le()?
            } else {
                u64::from(r.u16_le()?)
            };
            let ack = if flags & 2 != 0 {
                Some(r.tick_delta(base)?)
            } else {
                None
            };
            Message::Checkpoint(Checkpoint {
                tick,
                full,
                value,
                ack,
            })
        }
        ty::CHECKPOINT_ACK => Message::CheckpointAck {
            tick: r.tick_delta(base)?,
        },
        ty::RESYNC => {
            let id = r.varint_u32()?;
            let tick = r.tick_delta(base)?;
            let full = match r.u8()? {
                0 => false,
                1 => true,
                _ => return Err(WireError::Invalid("unknown resync flags")),
            };
            let value = if full {
                r.u64_le()?
            } else {
                u64::from(r.u16_le()?)
            };
            Message::Resync {
                id,
                verdict: Checkpoint {
                    tick,
                    full,
                    value,
                    ack: None,
                },
            }
        }
        ty::CHAIN_QUERY => {
            let id = r.varint_u32()?;
            let n = r.count("chain question", MAX_CHAIN_QUESTIONS, 1)?;
            let ticks = (0..n)
                .map(|_| r.tick_delta(base))
                .collect::<Result<_, WireError>>()?;
            Message::ChainQuery { id, ticks }
        }
        ty::CHAIN_ANSWER => {
            let id = r.varint_u32()?;
            let n = r.count("chain answer", MAX_CHAIN_QUESTIONS, 17)?;
            let entries = (0..n)
                .map(|_| Ok((r.tick_delta(base)?, r.u64_le()?, r.u64_le()?)))
                .collect::<Result<_, WireError>>()?;
            Message::ChainAnswer { id, entries }
        }
        ty::PAUSE => Message::Pause {
            frame: r.tick_delta(base)?,
        },
        ty::RESUME => Message::Resume {
            lifted: r.tick_delta(base)?,
        },
        ty::ABANDON => {
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
            Message::Abandon(Abandon {
                votes,
                frozen,
                endorsements,
            })
        }
        ty::PING => Message::Ping {
            stamp: r.varint_u32()?,
        },
        ty::PONG => Message::Pong {
            stamp: r.varint_u32()?,
            held_ms: r.varint_u32()?,
            received: r.varint_u32()?,
            sent: r.varint_u32()?,
        },
        ty::SNAPSHOT_CHUNK => {
            let id = r.varint_u32()?;
            let tick = r.tick()?;
            let raw_len = r.len("snapshot", MAX_SNAPSHOT)? as u32;
            let packed_len = r.len("compressed snapshot", MAX_SNAPSHOT)? as u32;
            let hash = r.u64_le()?;
            let index = r.varint_u32()?;
            let count = r.len("snapshot chunk", MAX_CHUNKS)? as u32;
            if index >= count {
                return Err(WireError::Invalid("chunk index past the chunk count"));
            }
            let checksum = r.u32_le()?;
            let data = r.byte_string("chunk", MAX_DATAGRAM_LEN)?;
            if data.len() > packed_len as usize {
                return Err(WireError::Invalid("chunk larger than its snapshot"));
            }
            Message::SnapshotChunk(SnapshotChunk {
                id,
                tick,
                raw_len,
                packed_len,
                hash,
                index,
                count,
                checksum,
                data,
            })
        }
        ty::ERROR => {
            let code = match r.u8()? {
                1 => ErrorCode::Malformed,
                2 => ErrorCode::Violation,
                3 => ErrorCode::RateLimited,
                4 => ErrorCode::TooLarge,
                5 => ErrorCode::Unauthorized,
                6 => ErrorCode::Internal,
                _ => return Err(WireError::Invalid("unknown error code")),
            };
            Message::Error {
                code,
                text: r.str("error text", MAX_TEXT)?,
            }
        }
        ty::BYE => {
            let reason = match r.u8()? {
                1 => ByeReason::Leaving,
                2 => ByeReason::Shutdown,
                3 => ByeReason::Kicked,
                4 => ByeReason::Timeout,
                _ => return Err(WireError::Invalid("unknown bye reason")),
            };
            Message::Bye {
                reason,
                text: r.str("bye text", MAX_TEXT)?,
            }
        }
        ty::STATUS => {
            let open = r.tick_delta(base)?;
            let z = r.varint()?;
            let slack = ((z >> 1) as i64) ^ -((z & 1) as i64);
            let slack =
                i32::try_from(slack).map_err(|_| WireError::Invalid("slack out of range"))?;
            let n = r.count("waiting seat", MAX_SEATS, 1)?;
            let waiting = (0..n).map(|_| read_player(r)).collect::<Result<_, _>>()?;
            Message::Status(Status {
                open,
                slack,
                waiting,
            })
        }
        ty::CHALLENGE => {
            let cookie = r.byte_string("cookie", MAX_COOKIE)?;
            let key = match r.u8()? {
                0 => None,
                1 => Some(r.array()?),
                _ => return Err(WireError::Invalid("unknown challenge flags")),
            };
            Message::Challenge { cookie, key }
        }
        ty::PADDING => {
            let len = r.len("padding", MAX_DATAGRAM_LEN)?;
            let zeros = r.bytes(len)?;
            if zeros.iter().any(|b| *b != 0) {
                return Err(WireError::Invalid("padding that is not zero"));
            }
            Message::Padding { len }
        }
        ty::SNAPSHOT_REQUEST => Message::SnapshotRequest {
            id: r.varint_u32()?,
            tick: r.tick()?,
        },
        ty::SNAPSHOT_ACK => Message::SnapshotAck(SnapshotAck {
            id: r.varint_u32()?,
            next: r.varint_u32()?,
            bits: r.u64_le()?,
        }),
        ty::CAUGHT_UP => Message::CaughtUp {
            tick: r.tick_delta(base)?,
        },
        ty::MEMBER => {
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
            Message::Member(Member {
                seat,
                version,
                holder,
            })
        }
        ty::MEMBER_ACK => Message::MemberAck {
            seat: read_player(r)?,
            version: r.varint_u32()?,
        },
        ty::TAKEOVER => Message::Takeover {
            epoch: r.varint_u32()?,
            seat: read_player(r)?,
            token: ResumeToken(r.array()?),
            lacks: r.tick()?,
        },
        ty::TAKEOVER_ACK => {
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
            Message::TakeoverAck {
                epoch,
                ready: flags & 1 != 0,
                want,
                late: flags & 4 != 0,
                alive: flags & 8 != 0,
                host,
            }
        }
        ty::DELAY_WANTED => match r.varint_u32()? {
            delay if (1..=super::MAX_DELAY).contains(&delay) => Message::DelayWanted { delay },
            _ => return Err(WireError::Invalid("delay not 1 to 1024 ticks")),
        },
        ty::DELAY_WANTS => {
            let seat = read_player(r)?;
            let n = r.count("delay change", MAX_DELAY_CHANGES, 2)?;
            let mut changes: Vec<(Tick, u32)> = Vec::with_capacity(n);
            for _ in 0..n {
                let tick = r.tick_delta(base)?;
                let delay = r.varint_u32()?;
                if !(1..=super::MAX_DELAY).contains(&delay) {
                    return Err(WireError::Invalid("delay not 1 to 1024 ticks"));
                }
                if changes.last().is_some_and(|(t, _)| *t >= tick) {
                    return Err(WireError::Invalid("delay changes out of order"));
                }
                changes.push((tick, delay));
            }
            Message::DelayWants { seat, changes }
        }
        other => return Err(WireError::UnknownMessage(other)),
    })
}

/// A decoded datagram: its base tick and its messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// The sender's base tick (its next tick to run), expanded to 32 bits.
    pub base: Tick,
    /// The messages, in order.
    pub messages: Vec<Message<'a>>,
}

impl<'a> Datagram<'a> {
    /// Decodes a datagram. `reference` is the receiver's own position: the
    /// 16-bit base tick on the wire is expanded to the full tick nearest to
    /// it.
    ///
    /// ```
    /// use lockstep_core::Tick;
    /// use lockstep_core::wire::{Datagram, DatagramWriter, Message};
    ///
    /// let mut buf = Vec::new();
    /// let mut w = DatagramWriter::new(&mut buf, Tick::new(70_000), 1200);
    /// w.push(&Message::Pause { frame: Tick::new(70_004) })?;
    /// w.finish();
    /// let d = Datagram::decode(&buf, Tick::new(69_990))?;
    /// assert_eq!(d.base, Tick::new(70_000));
    /// assert_eq!(d.messages, vec![Message::Pause { frame: Tick::new(70_004) }]);
    /// # Ok::<(), lockstep_core::wire::WireError>(())
    /// ```
    pub fn decode(bytes: &'a [u8], reference: Tick) -> Result<Self, WireError> {
        if bytes.len() > MAX_DATAGRAM_LEN {
            return Err(WireError::Oversized(bytes.len()));
        }
        let mut r = Reader::new(bytes);
        let magic = [r.u8()?, r.u8()?];
        if magic != MAGIC {
            return Err(WireError::BadMagic);
        }
        let version = r.u8()?;
        if version != VERSION {
            return Err(WireError::UnsupportedVersion {
                ours: VERSION,
                theirs: version,
            });
        }
        let base = expand_tick(r.u16_le()?, reference);
        let mut messages = Vec::new();
        while !r.is_empty() {
            if messages.len() == MAX_MESSAGES {
                return Err(WireError::TooLong {
                    what: "message",
                    len: MAX_MESSAGES + 1,
                    max: MAX_MESSAGES,
                });
            }
            messages.push(read_message(&mut r, base)?);
        }
        // A datagram of the header alone is a keepalive: it still says where
        // the sender is.
        Ok(Self { base, messages })
    }
}

/// The protocol version a datagram claims, if it is one of ours at all.
/// Lets an endpoint refuse another version with a reason instead of
/// silence.
pub fn peek_version(bytes: &[u8]) -> Option<u8> {
    match bytes {
        [m0, m1, v, ..] if [*m0, *m1] == MAGIC => Some(*v),
        _ => None,
    }
}

/// A mesh peer's full next tick, when the datagram opens with one: the
/// `resume_from` of a Hello or the `tick` of a Welcome, before any message
/// whose ticks are read against the header's. A receiver reads the 16-bit
/// header tick against it instead of its own guess, so a peer far behind
/// (an observer joining late) or jumping ahead (one restored from a
/// snapshot) is read right.
///
/// ```
/// use lockstep_core::Tick;
/// use lockstep_core::wire::{Datagram, DatagramWriter, Hello, Message, peek_anchor};
///
/// let mut buf = Vec::new();
/// let mut w = DatagramWriter::new(&mut buf, Tick::new(70_005), 1200);
/// w.push(&Message::Hello(Hello { resume_from: Some(Tick::new(70_005)), ..Hello::default() }))?;
/// w.push(&Message::Pause { frame: Tick::new(70_010) })?;
/// w.finish();
/// // Read against tick 0, the header alone would say 4 469.
/// assert_eq!(Datagram::decode(&buf, Tick::ZERO)?.base, Tick::new(4_469));
/// assert_eq!(peek_anchor(&buf), Some(Tick::new(70_005)));
/// # Ok::<(), lockstep_core::wire::WireError>(())
/// ```
pub fn peek_anchor(bytes: &[u8]) -> Option<Tick> {
    if bytes.len() > MAX_DATAGRAM_LEN || peek_version(bytes) != Some(VERSION) {
        return None;
    }
    let mut r = Reader::new(bytes.get(HEADER_LEN..)?);
    while !r.is_empty() {
        // A message of the opening sort carries no tick read against the
        // header's, so any base will do.
        match read_message(&mut r, Tick::ZERO).ok()? {
            Message::Hello(h) => return h.resume_from,
            Message::Welcome(w) => return Some(w.tick),
            Message::Bye { .. } | Message::Padding { .. } => {}
            _ => return None,
        }
    }
    None
}

/// Writes messages into one datagram without exceeding a size budget.
///
/// ```
/// use lockstep_core::Tick;
/// use lockstep_core::wire::{DatagramWriter, Message, WireError};
///
/// use lockstep_core::wire::ByeReason::Leaving;
///
/// let mut buf = Vec::new();
/// let mut w = DatagramWriter::new(&mut buf, Tick::ZERO, 16);
/// w.push(&Message::Ping { stamp: 1 })?; // 5-byte header + 2
/// // 11 bytes would fit an empty datagram, not this one: start another.
/// let bye = Message::Bye { reason: Leaving, text: "8 bytes." };
/// assert!(matches!(w.push(&bye), Err(WireError::DoesNotFit { len: 11, remaining: 9 })));
/// // Too big for any datagram of this budget: split it or give up.
/// let huge = Message::Bye { reason: Leaving, text: "far too long for sixteen bytes" };
/// assert!(matches!(w.push(&huge), Err(WireError::MessageTooLarge { .. })));
/// assert_eq!(w.messages(), 1);
/// assert_eq!(w.finish(), 7);
/// # Ok::<(), WireError>(())
/// ```
#[derive(Debug)]
pub struct DatagramWriter<'b> {
    out: &'b mut Vec<u8>,
    start: usize,
    base: Tick,
    budget: usize,
    messages: usize,
}

impl<'b> DatagramWriter<'b> {
    /// Starts a datagram at the end of `out` whose tick fields are relative
    /// to `base` (the sender's next tick) and which may not grow past
    /// `budget` bytes.
    pub fn new(out: &'b mut Vec<u8>, base: Tick, budget: usize) -> Self {
        let start = out.len();
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&(base.get() as u16).to_le_bytes());
        Self {
            out,
            start,
            base,
            budget,
            messages: 0,
        }
    }

    /// The base tick.
    pub fn base(&self) -> Tick {
        self.base
    }

    /// The datagram's size so far.
    pub fn len(&self) -> usize {
        self.out.len() - self.start
    }

    /// Whether no message has been written.
    pub fn is_empty(&self) -> bool {
        self.messages == 0
    }

    /// Messages written.
    pub fn messages(&self) -> usize {
        self.messages
    }

    /// Bytes left in the budget.
    pub fn remaining(&self) -> usize {
        self.budget.saturating_sub(self.len())
    }

    /// Appends a control message (a hello, an ack, a ping: bounded far
    /// below any datagram budget). Should one ever not fit, it is left out
    /// and the datagram stays valid; the sender's next datagram carries it.
    pub fn put(&mut self, m: Message<'_>) {
        let _ = self.push(&m);
    }

    /// Appends `m` if it fits. A field over its protocol bound is
    /// [`WireError::TooLong`]. A message too big for what is left is
    /// [`WireError::DoesNotFit`] (start another datagram); one too big for
    /// any datagram is [`WireError::MessageTooLarge`]. Nothing is ever
    /// truncated.
    pub fn push(&mut self, m: &Message<'_>) -> Result<(), WireError> {
        m.check_bounds()?;
        let at = self.out.len();
        m.encode(self.base, self.out);
        let len = self.out.len() - at;
        if self.len() > self.budget || self.messages == MAX_MESSAGES {
            self.out.truncate(at);
            if len + HEADER_LEN > self.budget {
                return Err(WireError::MessageTooLarge {
                    len,
                    budget: self.budget,
                });
            }
            return Err(WireError::DoesNotFit {
                len,
                remaining: self.remaining(),
            });
        }
        self.messages += 1;
        Ok(())
    }

    /// Appends a [`Message::Padding`] that brings the datagram to at least
    /// `min` bytes (exactly, unless one byte short), within the budget;
    /// nothing when it is that long already.
    pub fn pad_to(&mut self, min: usize) {
        let Some(gap) = min.min(self.budget).checked_sub(self.len()) else {
            return;
        };
        if gap == 0 {
            return;
        }
        // The type byte and a length varint of one, two or three bytes.
        let len = match gap.saturating_sub(2) {
            n if n < 1 << 7 => n,
            _ if gap - 3 < 1 << 14 => gap - 3,
            _ => gap.saturating_sub(4),
        };
        let _ = self.push(&Message::Padding { len });
    }

    /// Ends the datagram; returns its length.
    pub fn finish(self) -> usize {
        self.len()
    }
}
