//! The sequenced topology: a star around one sequencer.
//!
//! Clients send their inputs to the [`Sequencer`]; the sequencer decides
//! which tick each input runs on and sends every sealed tick to every
//! client, empty ones included. The sequencer is a relay server's room, or
//! runs inside one player's process ([`HostSession`]).
//!
//! ```text
//!   ClientSession ──Inputs──▶ ┌───────────┐ ──Frames──▶ ClientSession
//!   ClientSession ──Inputs──▶ │ Sequencer │ ──Frames──▶ ClientSession
//!   (spectator)  ◀──Frames─── └───────────┘
//! ```
//!
//! Two policies, chosen per sequencer ([`Policy`]):
//!
//! - `WaitForAll`: tick `t` is sealed once every seated player's input for
//!   `t` is in (strict lockstep); a player silent for `abandon_after` is
//!   abandoned, and the game goes on without it.
//! - `Deadline`: ticks are sealed on the sequencer's clock. An input that
//!   misses its tick runs on the next open one, and its sender is told how
//!   late it was so it can stamp later inputs further ahead. A slow player
//!   never stalls anybody.
//!
//! Identity is the connection: a sequencer never believes the seat a client
//! names, and a client sending for another seat is dropped.

mod client;
mod host;
mod hosted;
mod sequencer;

pub use crate::wire::Start;
pub use client::{
    ClientConfig, ClientSession, ClientStats, GOODBYES, Lobby, MAX_REDIRECTS, SeatInfo,
};
pub use host::{HOST_PEER, HostSession};
pub use hosted::{HostedConfig, HostedSession, Ignored};
pub use sequencer::{
    Handover, Sequencer, SequencerConfig, SequencerError, SequencerStats, Simulation, Survivor,
};

use crate::wire::{ByeReason, ErrorCode, RejectReason};
use crate::{PeerId, PlayerId, Tick};
use core::fmt;
use core::time::Duration;

/// When a sequencer seals a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Policy {
    /// Seal a tick once every seated player's input for it is in; abandon a
    /// player silent for `abandon_after` while the game waits on it.
    WaitForAll {
        /// Silence after which a player holding up the game is abandoned.
        abandon_after: Duration,
    },
    /// Seal ticks on the sequencer's clock at the tick rate; late input runs
    /// on the next open tick.
    Deadline {
        /// What a player whose input has not arrived gets for a tick.
        missing: MissingInput,
    },
}

/// What `Deadline` puts in the seat of a player whose input is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MissingInput {
    /// The neutral input: no buttons, no commands. Right for command lists,
    /// where repeating would run a command twice.
    #[default]
    Neutral,
    /// The player's previous input: right for held controls (sticks,
    /// buttons), where a late packet should not stop the ship.
    RepeatLast,
}

/// A refusal, owned, for events.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejection {
    /// Different protocol versions.
    ProtocolMismatch {
        /// The sequencer's.
        server: u8,
        /// Ours.
        client: u8,
    },
    /// Different game builds.
    GameMismatch {
        /// The sequencer's fingerprint.
        server: u64,
        /// Ours.
        client: u64,
    },
    /// Every seat is taken.
    RoomFull,
    /// The server is full.
    ServerFull,
    /// The join ticket is missing, forged or expired.
    BadTicket,
    /// No such room.
    NoSuchRoom,
    /// The resume token matches no seat held for it (expired or used).
    BadToken,
    /// The resume token's seat is still played by a live connection.
    SeatBusy,
    /// The room is served by another relay, at this address; a client
    /// closes with it only when it could not follow it (see
    /// [`ClientSession::redirect`](crate::sequenced::ClientSession::redirect)).
    Moved(std::net::SocketAddr),
    /// Anything else.
    Other(String),
}

impl From<RejectReason<'_>> for Rejection {
    fn from(r: RejectReason<'_>) -> Self {
        match r {
            RejectReason::ProtocolMismatch { server, client } => {
                Self::ProtocolMismatch { server, client }
            }
            RejectReason::GameMismatch { server, client } => Self::GameMismatch { server, client },
            RejectReason::RoomFull => Self::RoomFull,
            RejectReason::ServerFull => Self::ServerFull,
            RejectReason::BadTicket => Self::BadTicket,
            RejectReason::NoSuchRoom => Self::NoSuchRoom,
            RejectReason::BadToken => Self::BadToken,
            RejectReason::SeatBusy => Self::SeatBusy,
            RejectReason::Moved(at) => Self::Moved(at),
            RejectReason::Other(s) => Self::Other(s.to_owned()),
        }
    }
}

impl Rejection {
    /// The wire form.
    pub fn as_reason(&self) -> RejectReason<'_> {
        match self {
            Self::ProtocolMismatch { server, client } => RejectReason::ProtocolMismatch {
                server: *server,
                client: *client,
            },
            Self::GameMismatch { server, client } => RejectReason::GameMismatch {
                server: *server,
                client: *client,
            },
            Self::RoomFull => RejectReason::RoomFull,
            Self::ServerFull => RejectReason::ServerFull,
            Self::BadTicket => RejectReason::BadTicket,
            Self::NoSuchRoom => RejectReason::NoSuchRoom,
            Self::BadToken => RejectReason::BadToken,
            Self::SeatBusy => RejectReason::SeatBusy,
            Self::Moved(at) => RejectReason::Moved(*at),
            Self::Other(s) => RejectReason::Other(s),
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_reason().fmt(f)
    }
}

/// Why a connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloseReason {
    /// The other side refused the connection.
    Rejected(Rejection),
    /// The other side said goodbye.
    Bye(ByeReason, String),
    /// The other side reported an error in what we sent, and closed.
    Error(ErrorCode, String),
    /// Nothing was heard for too long.
    TimedOut,
    /// We left.
    Left,
    /// The connection was lost and not taken back: the caller stopped
    /// trying ([`ClientSession::give_up`](crate::sequenced::ClientSession::give_up)).
    GaveUp,
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Rejected(r) => write!(f, "refused: {r}"),
            Self::Bye(r, text) if text.is_empty() => write!(f, "closed by the server ({r})"),
            Self::Bye(r, text) => write!(f, "closed by the server ({r}): {text}"),
            Self::Error(code, text) => write!(f, "dropped by the server ({code}): {text}"),
            Self::TimedOut => f.write_str("the server stopped answering"),
            Self::Left => f.write_str("left"),
            Self::GaveUp => f.write_str("lost the connection, and gave up taking the seat back"),
        }
    }
}

/// Something that happened at a sequencer, for logs and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SequencerEvent {
    /// A connection was accepted.
    Joined {
        /// The connection.
        peer: PeerId,
        /// Its seat (none for a spectator).
        seat: Option<PlayerId>,
        /// The tick it joins at.
        tick: Tick,
        /// The name it gave.
        name: String,
    },
    /// The room's lobby closed: the match starts at `tick`.
    MatchStarted {
        /// The first tick of the match.
        tick: Tick,
        /// Players seated.
        players: usize,
    },
    /// A silent seat was taken back with its resume token, on a new
    /// connection; forget the old one's address.
    Resumed {
        /// The new connection.
        peer: PeerId,
        /// The connection that held the seat until now, unless it had
        /// been dropped already.
        previous: Option<PeerId>,
        /// The seat.
        seat: Option<PlayerId>,
    },
    /// A connection was refused.
    Rejected {
        /// The connection.
        peer: PeerId,
        /// Why.
        reason: Rejection,
    },
    /// A connection ended; forget its address.
    Closed {
        /// The connection.
        peer: PeerId,
        /// Its seat, now empty from `tick` on (or, when the connection was
        /// [`Lost`](DropReason::Lost), held for its player's resume token).
        seat: Option<PlayerId>,
        /// The first tick the seat is empty.
        tick: Tick,
        /// Why.
        reason: DropReason,
    },
    /// A client's state checksum differs from the one a majority of the
    /// seated players reported for the same tick.
    Desync {
        /// The tick.
        tick: Tick,
        /// The client that differs.
        peer: PeerId,
        /// The majority's checksum.
        expected: u64,
        /// This client's.
        got: u64,
    },
    /// A snapshot for joiners was asked of `donor`, as the state after
    /// `tick`.
    SnapshotAsked {
        /// The client asked.
        donor: PeerId,
        /// The tick the state follows.
        tick: Tick,
        /// The id its chunks must carry.
        id: u32,
    },
    /// A donor's snapshot was refused (it failed its checks, or is for
    /// another tick) or never came: another donor is asked.
    SnapshotFailed {
        /// The client that was asked.
        donor: PeerId,
        /// What went wrong.
        reason: String,
    },
    /// A snapshot reached the sequencer and goes out to `joiners` joiners.
    SnapshotReady {
        /// The tick the state follows.
        tick: Tick,
        /// Its size, uncompressed.
        bytes: usize,
        /// How many joiners it serves.
        joiners: usize,
    },
    /// A seat held for a dropped player was given up: nobody took it back
    /// within the grace (it is `Left`).
    SeatReleased {
        /// The seat, empty from `tick` on.
        seat: PlayerId,
        /// The first tick the seat is empty.
        tick: Tick,
    },
    /// A client that joined from a snapshot caught up; a player's inputs
    /// count from `tick` plus the delay.
    CaughtUp {
        /// The client.
        peer: PeerId,
        /// Its seat, if it plays.
        seat: Option<PlayerId>,
        /// The tick it went live at.
        tick: Tick,
    },
    /// Every seated player reported a checksum for `tick` and no hash has a
    /// majority (two players who disagree, say): the game diverged, and
    /// nobody can tell who is right. Each client in it is told another's
    /// checkpoint that differs from its own (it raises
    /// [`Event::Desync`](crate::Event::Desync) and searches), and nobody is
    /// resynced.
    ChecksumSplit {
        /// The tick.
        tick: Tick,
        /// How many reports there were.
        hashes: usize,
    },
    /// A client found diverged is being resynced from a snapshot (see
    /// [`SequencerConfig::max_resyncs`]).
    Resync {
        /// The client.
        peer: PeerId,
        /// Its seat, if it plays.
        seat: Option<PlayerId>,
        /// How many times the seat has been resynced, this one included.
        count: u32,
    },
}

/// Why a sequencer closed a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DropReason {
    /// The client said goodbye.
    Left,
    /// Nothing was heard from it for the timeout.
    TimedOut,
    /// The game waited on its input for `abandon_after` (`WaitForAll`): its
    /// seat is `Abandoned`.
    Abandoned,
    /// A player's connection went silent for the timeout: its seat is held
    /// for its resume token for `seat_grace`, then released.
    Lost,
    /// It broke a rule and was told so with an `Error`.
    Violation(ErrorCode, String),
    /// It fell further behind than the history the sequencer keeps.
    FellBehind,
    /// The host or server removed it ([`Sequencer::kick`]).
    Kicked,
    /// The sequencer is shutting down.
    Shutdown,
}
