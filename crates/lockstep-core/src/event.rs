//! Things a game may want to show or log.

use crate::desync::FirstDifference;
use crate::error::Incompatibility;
use crate::sequenced::{CloseReason, Rejection};
use crate::{PeerId, PlayerId, Tick};
use core::time::Duration;

/// Something that happened in a session, drained with `poll_event`.
///
/// Most events are information, and a game may ignore them. A few ask
/// something of the game, and a session that uses what they belong to
/// waits until the game acts: [`SnapshotRequested`](Event::SnapshotRequested)
/// (hand the state over) and [`Snapshot`](Event::Snapshot) (take it) with
/// late joiners, observers or resyncs, and
/// [`Reconnected { kept: false }`](Event::Reconnected) (reset the game).
/// Everything the simulation must run is in the frame stream.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A runner's recording stopped before it was asked to: its writer
    /// failed (a full disk, a disk that fell behind) or a frame or state
    /// could not be recorded. The game plays on unrecorded;
    /// `Runner::recording_error` keeps the error. Raised by the runner,
    /// never by a session.
    RecordingStopped {
        /// Why, in words.
        reason: String,
    },
    /// A seat's input in the room's frames does not decode as this game's
    /// input type: it runs as the neutral input, as on every client of
    /// this build, which stay in step. Another build of the game plays in
    /// the room (give each build its own `ClientConfig::fingerprint`: the
    /// room then refuses it), or a client sends bytes no build reads (a
    /// relay knows no input type). Told once per seat; each such input is
    /// counted in `ClientStats::inputs_undecodable`.
    InputUndecodable {
        /// Whose input.
        player: PlayerId,
        /// The first tick it did not decode at.
        tick: Tick,
        /// The decoder's words.
        reason: String,
    },
    /// Nothing has arrived from this peer for a while. Ended by
    /// [`Recovered`](Event::Recovered) when it is heard again, or, for a
    /// relay client that took its seat back on a new connection, by
    /// [`Reconnected`](Event::Reconnected) (no `Recovered` follows).
    Interrupted {
        /// The silent peer.
        peer: PeerId,
        /// The seat it plays, if any.
        player: Option<PlayerId>,
        /// How long it has been silent.
        silent_for: Duration,
    },
    /// An interrupted peer was heard from again.
    Recovered {
        /// The peer.
        peer: PeerId,
        /// The seat it plays, if any.
        player: Option<PlayerId>,
    },
    /// The sequencer accepted us (sequenced topology).
    Connected {
        /// Our seat (none when spectating).
        seat: Option<PlayerId>,
        /// The tick we join at.
        tick: Tick,
    },
    /// The sequencer took us back on a new connection
    /// ([`reconnect`](crate::sequenced::ClientSession::reconnect)).
    Reconnected {
        /// Our seat.
        seat: Option<PlayerId>,
        /// The next frame the game will be handed.
        tick: Tick,
        /// Whether the game's state stands. `true`: frames go on from where
        /// they stopped. `false`: the session starts over as a new one
        /// would after [`Connected`](Event::Connected): the game resets its
        /// state, then restores the [`Snapshot`](Event::Snapshot) that
        /// follows (or, in a room without snapshots, runs every frame from
        /// `tick`, the room's first).
        kept: bool,
    },
    /// The game's state is wanted for someone joining the game under way,
    /// or for a machine whose state diverged from the majority's.
    ///
    /// Sequenced: the sequencer asks for the state right after `tick`, for
    /// a joining or reconnecting player, or for a client it resyncs; once
    /// the game has run frame `tick` (or now, if it just did), it hands
    /// that state to
    /// [`ClientSession::provide_snapshot`](crate::sequenced::ClientSession::provide_snapshot).
    ///
    /// Mesh: an observer fell behind the frames kept for it, or joined
    /// late, or (with [`MeshConfig::resync`](crate::MeshConfig::resync)) a
    /// player diverged; any state from `tick` on will do, so the game hands
    /// its current one to
    /// [`MeshSession::provide_snapshot`](crate::MeshSession::provide_snapshot)
    /// at once.
    SnapshotRequested {
        /// The tick the state must follow.
        tick: Tick,
    },
    /// The game's state after `tick` arrived (we joined a game under way,
    /// fell too far behind as a mesh observer, or are being resynced after
    /// [`Resyncing`](Event::Resyncing)): take it with the
    /// session's `take_snapshot`
    /// ([sequenced](crate::sequenced::ClientSession::take_snapshot),
    /// [mesh](crate::MeshSession::take_snapshot)), replace the game's state
    /// with it, then run frames from `tick + 1` as they come.
    Snapshot {
        /// The tick the state follows.
        tick: Tick,
    },
    /// We joined a game under way and caught up with it: our inputs count
    /// from now on.
    CaughtUp {
        /// The tick our seat went live at (its inputs are due from this
        /// tick plus the delay).
        tick: Tick,
    },
    /// The relay said our room is served by another relay, at `to`: the
    /// session waits for its caller to open a transport there and call
    /// [`ClientSession::follow_redirect`](crate::sequenced::ClientSession::follow_redirect)
    /// (`RelayClient` does it by itself).
    Redirected {
        /// The other relay's address, for the transport the Hello went on.
        to: std::net::SocketAddr,
    },
    /// The sequencer refused us; the session is over.
    Rejected {
        /// Why, in words a player can read.
        reason: Rejection,
    },
    /// The connection to the sequencer ended; the session is over.
    Closed {
        /// Why.
        reason: CloseReason,
    },
    /// A peer cannot play with us: nothing it sends is taken (its seat, if
    /// any, stalls until it is abandoned).
    Incompatible {
        /// The peer.
        peer: PeerId,
        /// Why, in words a player can read.
        reason: Incompatibility,
    },
    /// A peer said goodbye; if it played, its seat is being abandoned.
    PeerLeft {
        /// The peer.
        peer: PeerId,
        /// Its seat, if any.
        player: Option<PlayerId>,
    },
    /// A pause was called (here or by a peer); commits stop and the
    /// simulation will rest on `frame`. Repeated when an earlier proposal
    /// moves the frame.
    Paused {
        /// The freeze frame.
        frame: Tick,
    },
    /// The pause was lifted.
    Resumed {
        /// The frame the pause was to freeze on.
        frame: Tick,
    },
    /// Someone asked for this player to be abandoned; its inputs are no
    /// longer accepted and a decision follows.
    AbandonRequested {
        /// The seat.
        player: PlayerId,
    },
    /// The player was abandoned, or left: its seat is empty from `from` on,
    /// in every peer's frame stream (where a
    /// [`SystemEvent::Abandoned`](crate::SystemEvent::Abandoned), or
    /// [`SystemEvent::Left`](crate::SystemEvent::Left) for a mesh player
    /// that said goodbye, marks the tick).
    Abandoned {
        /// The seat.
        player: PlayerId,
        /// The first empty tick.
        from: Tick,
    },
    /// This session was abandoned by the other players from a tick it had
    /// already run past, on input of its own that never reached them: its
    /// stream differs from theirs from `received` on.
    AbandonConflict {
        /// The seat.
        player: PlayerId,
        /// The tick this session holds.
        kept: Tick,
        /// The tick received.
        received: Tick,
    },
    /// `peer` stands in the way of abandoning `player`: it endorses another
    /// decision, or holds other input for the player, or (as the deciding
    /// peer) proposed a tick this session already ran. The abandonment
    /// waits; one of the two is faulty or dishonest. Reported once per
    /// player and peer.
    AbandonDisputed {
        /// The seat being abandoned.
        player: PlayerId,
        /// The peer that disagrees.
        peer: PeerId,
    },
    /// A peer's checkpoint differs from ours: the two simulations diverged
    /// at or before `tick`, since the last checkpoint they agreed on.
    /// Reported once per peer, until our state is replaced or the peer
    /// agrees again ([`DesyncEnded`](Event::DesyncEnded)); the search for
    /// the first divergent tick follows, and ends with
    /// [`DesyncLocated`](Event::DesyncLocated). In the sequenced topology
    /// the peer is the sequencer, whose reference is the majority's (or its
    /// own simulation's) checkpoint; where no value has a majority (two
    /// players who differ), another player's.
    Desync {
        /// The checkpoint's tick.
        tick: Tick,
        /// The peer that differs.
        peer: PeerId,
        /// Our checkpoint value (16 bits of the hash chain, or all 64 for
        /// the checkpoint closing a block).
        local: u64,
        /// Theirs.
        remote: u64,
    },
    /// Our state diverged from the majority's: a snapshot of a majority
    /// machine's state follows ([`Snapshot`](Event::Snapshot)), which
    /// replaces the game's. Meanwhile the game gets frames only up to the
    /// snapshot's tick (so it holds its own state there, to compare with
    /// the one it receives).
    ///
    /// Sequenced: the sequencer found it (by the seated majority's verdict,
    /// or its own simulation's); the game runs on from the snapshot as a
    /// joiner does until [`CaughtUp`](Event::CaughtUp), its commits refused
    /// meanwhile.
    ///
    /// Mesh: a strict majority of the live players (us counted) sent one
    /// checkpoint value and ours differs; one of them hands its state
    /// over. Commits go on, and frames after the snapshot's tick run once
    /// it is taken. If no donor delivers a state (three are tried, each for
    /// `interrupt_after` without a new chunk), or the game does not take
    /// the state within 10 `interrupt_after` of its `Snapshot`, the resync
    /// is given up: while we still differ, the next one starts at once with
    /// another `Resyncing` (each counts towards `max_resyncs`).
    Resyncing,
    /// Mesh: our state diverged from the majority's once more after
    /// `max_resyncs` resyncs within 1,024 ticks. The session leaves (as
    /// [`leave`](crate::MeshSession::leave) does): the other players abandon
    /// our seat.
    DivergedTooOften {
        /// Resyncs before this divergence.
        resyncs: u32,
    },
    /// The search that follows a [`Desync`](Event::Desync) ended.
    DesyncLocated {
        /// The peer compared with.
        peer: PeerId,
        /// The checkpoint that differed.
        checkpoint: Tick,
        /// The first tick whose state differs, with both hashes after it;
        /// `None` when it cannot be told (the ticks needed are no longer
        /// held on one side, the peer stopped answering, or 12 rounds did
        /// not settle it).
        first: Option<FirstDifference>,
    },
    /// A peer we differed from agrees again: a full checkpoint of a later
    /// block than the one that differed matches ours (its state, or ours,
    /// was replaced). Checkpoints are compared afresh from `from` on, and a
    /// new divergence raises a new [`Desync`](Event::Desync). Until this
    /// event, a peer that diverged once is not reported again (every
    /// checkpoint of its differs). Not raised on the machine that restored
    /// a snapshot: restoring ends its mismatches.
    DesyncEnded {
        /// The peer.
        peer: PeerId,
        /// The first tick of the block compared afresh.
        from: Tick,
    },
}
