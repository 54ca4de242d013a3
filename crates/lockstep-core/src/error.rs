//! Errors, grouped by operation and by who is at fault.
//!
//! Errors caused by the remote (bad bytes, a misbehaving peer) are apart
//! from errors caused by the caller (API misuse, an invalid configuration),
//! so a game can drop a bad peer without confusing it with its own bug.

use crate::wire::WireError;
use crate::{PeerId, PlayerId, Tick};

/// Why two endpoints cannot play together, in words a player can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Incompatibility {
    /// They speak different protocol versions.
    #[error("the other side runs protocol {theirs}, we run {ours}")]
    Protocol {
        /// Our version.
        ours: u8,
        /// Theirs.
        theirs: u8,
    },
    /// Their game builds differ: their simulations would diverge.
    #[error("the other side runs a different game build ({theirs:016x}, ours {ours:016x})")]
    Game {
        /// Our fingerprint.
        ours: u64,
        /// Theirs.
        theirs: u64,
    },
    /// The other side refused us for another reason.
    #[error("the other side refused the connection")]
    Refused,
}

impl Incompatibility {
    /// How we describe a refusal we received.
    pub fn from_reject(r: crate::wire::RejectReason<'_>) -> Self {
        use crate::wire::RejectReason;
        match r {
            RejectReason::ProtocolMismatch { server, client } => Self::Protocol {
                ours: client,
                theirs: server,
            },
            RejectReason::GameMismatch { server, client } => Self::Game {
                ours: client,
                theirs: server,
            },
            _ => Self::Refused,
        }
    }
}

/// A session could not be created from this configuration (caller error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The local peer is not in the roster.
    #[error("the local {0} is not in the roster")]
    LocalNotInRoster(PeerId),
    /// Two roster entries share a peer id.
    #[error("{0} appears twice in the roster")]
    DuplicatePeer(PeerId),
    /// Two peers play the same seat.
    #[error("{0} is played by two peers")]
    DuplicateSeat(PlayerId),
    /// A seat number past the protocol's limit.
    #[error("{seat} is past the limit of {max} seats")]
    TooManySeats {
        /// The offending seat.
        seat: PlayerId,
        /// The limit.
        max: usize,
    },
    /// Nobody plays: a session needs at least one seat.
    #[error("the roster has no seated player")]
    NoPlayers,
    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    Invalid(&'static str),
    /// A room with a lobby starts its match with one frame carrying every
    /// seat's `Joined`, and a frame goes in one datagram: this many seats
    /// make it too large.
    #[error(
        "a lobby of {seats} seats starts its match with a {first_frame}-byte frame, more than max_datagram ({max_datagram}) holds: at most {fits} seats with a lobby, or start at once"
    )]
    LobbyTooLarge {
        /// `max_seats`.
        seats: u16,
        /// The first frame's size, with what goes beside it in its datagram.
        first_frame: usize,
        /// `max_datagram`.
        max_datagram: usize,
        /// The most seats whose first frame fits.
        fits: u16,
    },
}

impl ConfigError {
    /// `Err(Invalid(why))` when `broken` holds: one line per rule in a
    /// config's validation.
    pub(crate) fn unless(broken: bool, why: &'static str) -> Result<(), Self> {
        if broken {
            Err(Self::Invalid(why))
        } else {
            Ok(())
        }
    }
}

/// Why [`commit_local`](crate::MeshSession::commit_local) refused an input.
///
/// Refusals other than [`CommitError::InputTooLarge`] are backpressure, not
/// failures: keep the input and offer it again next frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommitError {
    /// The session is paused; commits resume with the pause.
    #[error("the session is paused (freezing on frame {frame})")]
    Paused {
        /// The freeze frame.
        frame: Tick,
    },
    /// The local peer is too far ahead of the slowest peer.
    #[error("{lead} ticks ahead of the slowest peer, limit {limit}")]
    TooFarAhead {
        /// How far the next commit would be ahead.
        lead: u32,
        /// The configured limit.
        limit: u32,
    },
    /// An observer has no seat to commit for.
    #[error("observers do not commit inputs")]
    Observer,
    /// The room's match has not started: its lobby is open (see
    /// [`ClientSession::lobby`](crate::sequenced::ClientSession::lobby)).
    #[error("the match has not started")]
    InLobby,
    /// The local seat was abandoned by the other players.
    #[error("the local seat was abandoned from tick {from}")]
    Abandoned {
        /// The first tick the seat is empty.
        from: Tick,
    },
    /// The input's encoding exceeds the configured maximum.
    #[error("input encodes to {len} bytes, limit {max}")]
    InputTooLarge {
        /// The encoded size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The local peer left the session, or it is over.
    #[error("the session was left or has ended")]
    Left,
    /// Not connected to the sequencer yet.
    #[error("not connected yet")]
    NotConnected,
    /// Joining a game under way: not caught up with it yet.
    #[error("catching up with the game")]
    CatchingUp,
    /// The tick counter reached `u32::MAX`.
    #[error("the session has run out of tick numbers")]
    TickSpaceExhausted,
}

/// Why a received datagram was rejected. The session's state is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DatagramError {
    /// The bytes are malformed or from an incompatible build (peer fault).
    #[error("malformed datagram: {0}")]
    Wire(#[from] WireError),
    /// The datagram came from a peer this session does not know.
    #[error("datagram from unknown {0}")]
    UnknownPeer(PeerId),
    /// The peer cannot play with us (a different protocol version or game
    /// build); nothing it sends is taken.
    #[error("incompatible peer: {0}")]
    Incompatible(Incompatibility),
    /// Well-formed, but breaks this session's rules (peer fault): an input
    /// larger than the configured limit, a seat that does not exist, ...
    #[error("protocol violation: {0}")]
    Violation(&'static str),
    /// Not sealed by the peer this connection agreed keys with: forged,
    /// replayed, or plain where sealed datagrams were agreed. Dropped.
    #[error("unauthenticated datagram: {0}")]
    Unauthenticated(#[from] crate::secure::SealError),
}

/// Why a [`ClientSession`](crate::sequenced::ClientSession) could not
/// reconnect.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReconnectError {
    /// It never had a seat to take back (spectators join again instead).
    #[error("no seat to take back: the session was never welcomed to one")]
    NoSeat,
    /// The session ended for a reason a new connection would not change
    /// (it left, was refused, dropped for an error or kicked).
    #[error("the session ended ({0}); only a lost connection is taken back")]
    Ended(crate::sequenced::CloseReason),
}

/// Why a pause could not be requested.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PauseError {
    /// Observers watch; they do not pause the game for the players.
    #[error("observers cannot pause")]
    Observer,
    /// The local seat was abandoned.
    #[error("the local seat was abandoned")]
    Abandoned,
}

/// Why an abandonment could not be requested.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AbandonError {
    /// No peer plays that seat.
    #[error("{0} has no player")]
    NoSuchPlayer(PlayerId),
    /// A session cannot abandon its own seat.
    #[error("cannot abandon the local seat")]
    Local,
    /// The seat is already abandoned.
    #[error("{player} was already abandoned from tick {from}")]
    AlreadyAbandoned {
        /// The seat.
        player: PlayerId,
        /// The first empty tick.
        from: Tick,
    },
    /// Observers have no say in who plays.
    #[error("observers cannot abandon players")]
    Observer,
}

/// Why a checksum report was refused (caller error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChecksumError {
    /// The tick has not been run yet.
    #[error("tick {tick} has not been run (next tick is {next})")]
    NotRun {
        /// The tick reported.
        tick: Tick,
        /// The session's next tick.
        next: Tick,
    },
    /// Checksums must be reported for ascending ticks.
    #[error("tick {tick} is not after the last reported tick {last}")]
    NotAscending {
        /// The tick reported.
        tick: Tick,
        /// The previous report.
        last: Tick,
    },
}
