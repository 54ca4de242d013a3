//! How a mesh session plays ([`MeshConfig`]), who takes part
//! ([`Roster`]), and what it reports ([`MeshStats`], [`PeerStats`]).

use super::*;

/// Tuning for a [`MeshSession`]. Every peer of a session must use the same
/// `delay`, `max_lead`, `adaptive` and `tick_rate`.
///
/// ```
/// use lockstep_core::MeshConfig;
/// use std::time::Duration;
/// let config = MeshConfig {
///     delay: 3,
///     abandon_after: Some(Duration::from_secs(5)),
///     ..MeshConfig::default()
/// };
/// assert_eq!(config.max_datagram, 1200);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeshConfig {
    /// Input delay in ticks: input committed now runs `delay` ticks later,
    /// which is the time the network has to deliver it. The first `delay`
    /// ticks run on neutral input so play starts at once.
    pub delay: u32,
    /// Let the delay follow the network: each player's
    /// [`DelayTracker`](crate::DelayTracker) says what it wants, the wants
    /// travel in the input streams, and every peer works the delay out of
    /// the same stream (the largest want, rising at once and falling a
    /// tick at a time once it stayed lower for `tick_rate` ticks), so a
    /// change happens at the same
    /// tick everywhere and its frame carries
    /// [`SystemEvent::DelayChanged`]. `delay` is the delay to start with,
    /// within `min..=max`. Games commit by
    /// [`input_due`](MeshSession::input_due). `None`: `delay` for good.
    pub adaptive: Option<AdaptiveDelay>,
    /// The rate the game runs ticks at, per second: with `adaptive`, how
    /// lateness is measured (in tick periods) and how long the wants must
    /// stay lower before the delay falls a tick (`tick_rate` ticks); and
    /// how long a tick waits on a peer's input before peers are told whom
    /// it waits on (a tick period).
    pub tick_rate: u32,
    /// How many ticks a peer may commit beyond `delay` ahead of the slowest
    /// peer before [`MeshSession::commit_local`] refuses. Bounds every
    /// buffer; at least 1.
    pub max_lead: u32,
    /// The largest datagram to send, in bytes. 1200 fits the path MTU of
    /// practically every internet route.
    pub max_datagram: usize,
    /// The largest encoded input accepted, from the game or from a peer.
    pub max_input_len: usize,
    /// How long after the last packet to a peer unacknowledged data (or an
    /// acknowledgement it is owed) is sent again. Every commit sends anyway,
    /// carrying everything unacknowledged, so this timer only matters while
    /// the game is not committing (stalled, paused, blocked by the lead
    /// limit). Set it a little above the tick period to avoid sending twice
    /// per tick.
    pub resend_interval: Duration,
    /// How often an idle peer is sent a packet anyway, so it knows we live.
    /// Also how long an unacknowledged full checkpoint, and a question
    /// about the hash chain left unanswered, wait before they go again.
    pub keepalive_interval: Duration,
    /// Silence after which [`Event::Interrupted`] is raised.
    pub interrupt_after: Duration,
    /// Silence after which a player is abandoned automatically; `None`
    /// leaves it to the game to call [`MeshSession::abandon`].
    pub abandon_after: Option<Duration>,
    /// How long another player's vote to abandon a seat must have been in
    /// every datagram from that player before it counts towards freezing
    /// the seat, and how long it must have been gone from them before it
    /// stops counting towards keeping the seat frozen (abandonment:
    /// `docs/mesh.md`). Each voter's word is its latest datagram's, and
    /// mesh datagrams are not sealed: a vote forged in a player's name
    /// stands until that player's next datagram, and a datagram sent before
    /// a vote may arrive after one carrying it. Keep it above
    /// `keepalive_interval` plus the network's jitter. Our own vote counts
    /// at once, and a seat whose player said goodbye to us freezes on the
    /// votes as they are. Zero takes every datagram's word at once: forged
    /// datagrams can then get an honest player abandoned, and reordering
    /// can stall an abandonment for good.
    pub vote_hold: Duration,
    /// How many frames are kept for an observer that has fallen behind;
    /// one further behind (or one that joins late) is sent a snapshot.
    pub observer_window: u32,
    /// Bounds on the snapshots sent (to observers that fell behind, and to
    /// players resyncing) and taken (by an observer catching up, or a
    /// player resyncing).
    pub snapshot: SnapshotLimits,
    /// How many checksums are held, per peer and locally.
    pub checksum_window: usize,
    /// A hash of the game's build and content. Peers with different
    /// fingerprints would simulate differently: they refuse each other with
    /// [`Event::Incompatible`] instead of desyncing.
    pub fingerprint: u64,
    /// How often the round-trip time to each peer is measured.
    pub ping_interval: Duration,
    /// The session's first tick (for resuming a recorded session, or for
    /// tests near tick-number boundaries).
    pub first_tick: Tick,
    /// Heal a player whose state diverged from the majority's with a
    /// majority peer's state ([`Event::Resyncing`]). Every game of the
    /// session must then hand its state over when asked
    /// ([`Event::SnapshotRequested`]) and take the one it is sent
    /// ([`Event::Snapshot`]). Set it the same on every peer (it is not
    /// checked): a player with it on among peers with it off asks for a
    /// state nobody gives, and leaves after `max_resyncs` tries. Off, a
    /// divergence is reported and located, and the game goes on with it.
    pub resync: bool,
    /// With `resync`: how many times within 1,024 ticks a player is
    /// resynced, and this peer hands its state to the same player for
    /// that. Diverging once more within them, a player leaves the session
    /// ([`Event::DivergedTooOften`]).
    pub max_resyncs: u32,
}

impl Default for MeshConfig {
    fn default() -> Self {
        Self {
            delay: 2,
            adaptive: None,
            tick_rate: 30,
            max_lead: 8,
            max_datagram: 1200,
            max_input_len: 256,
            resend_interval: Duration::from_millis(40),
            keepalive_interval: Duration::from_millis(250),
            interrupt_after: Duration::from_millis(1000),
            abandon_after: Some(Duration::from_secs(10)),
            vote_hold: Duration::from_millis(1000),
            observer_window: 1024,
            snapshot: SnapshotLimits::default(),
            checksum_window: 512,
            fingerprint: 0,
            ping_interval: Duration::from_millis(1000),
            first_tick: Tick::ZERO,
            resync: false,
            max_resyncs: 3,
        }
    }
}

impl MeshConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        limits::link(
            self.max_datagram,
            [
                self.resend_interval,
                self.keepalive_interval,
                self.ping_interval,
            ],
            self.checksum_window,
        )?;
        let bad = ConfigError::unless;
        limits::lead(self.max_lead)?;
        limits::delay(self.delay, self.adaptive.as_ref())?;
        limits::tick_rate(self.tick_rate)?;
        limits::input_len(self.max_input_len)?;
        bad(
            self.max_input_len + 128 > self.max_datagram,
            "max_datagram must leave room for a maximum-size input",
        )?;
        bad(
            self.observer_window == 0,
            "observer_window must be positive",
        )?;
        bad(
            self.first_tick.checked_add(self.delay + 1).is_none(),
            "first_tick leaves no room to play",
        )
    }
}

/// Who takes part in a mesh session: each peer, and the seat it plays
/// (observers play none).
///
/// ```
/// use lockstep_core::{PeerId, PlayerId, Roster};
/// let roster = Roster::new()
///     .player(PeerId(10), PlayerId(0))
///     .player(PeerId(11), PlayerId(1))
///     .observer(PeerId(20));
/// assert_eq!(roster.members().len(), 3);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Roster {
    members: Vec<(PeerId, Option<PlayerId>)>,
}

impl Roster {
    /// An empty roster.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a peer playing `seat`.
    pub fn player(mut self, peer: PeerId, seat: PlayerId) -> Self {
        self.members.push((peer, Some(seat)));
        self
    }

    /// Adds a peer that watches.
    pub fn observer(mut self, peer: PeerId) -> Self {
        self.members.push((peer, None));
        self
    }

    /// Every member and its seat, in insertion order.
    pub fn members(&self) -> &[(PeerId, Option<PlayerId>)] {
        &self.members
    }
}

/// Numbers describing a session, for HUDs, logs and tests.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct MeshStats {
    /// The next tick to run (frames run so far).
    pub next_tick: Tick,
    /// The tick the next local input will be stamped for.
    pub next_commit: Tick,
    /// Frames handed to the game.
    pub frames: u64,
    /// Times the picture stopped: the game asked for a frame and none had
    /// come for two tick periods (`tick_rate`). Steady latency beyond the
    /// input delay is not a stall: frames still come every tick. Observers
    /// count none.
    pub stalls: u64,
    /// Total time spent stalled.
    pub stalled_for: Duration,
    /// Commits refused (lead limit or pause).
    pub commits_refused: u64,
    /// The input delay in force, in ticks.
    pub delay: u32,
    /// The delay our tracker wants, in ticks (with
    /// [`adaptive`](MeshConfig::adaptive), while playing).
    pub delay_wanted: Option<u32>,
    /// Times the delay changed (`adaptive`).
    pub delay_changes: u64,
    /// Frames that became complete later than the delay allowed after our
    /// input for them was committed.
    pub late_frames: u64,
    /// How many tick periods before it was due (our input's commit plus
    /// the delay) the last input of a frame arrived, smoothed; negative
    /// when frames come late. A player's figure.
    pub input_slack: Option<f64>,
    /// Frames run per second, over the last second: the tick rate
    /// achieved.
    pub tick_rate: Option<f64>,
    /// Datagrams sent.
    pub datagrams_sent: u64,
    /// Bytes sent.
    pub bytes_sent: u64,
    /// Datagrams received (accepted or not).
    pub datagrams_received: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Datagrams rejected as malformed or from unknown peers.
    pub datagrams_rejected: u64,
    /// Inputs received that were not needed: duplicates, ticks already run.
    pub inputs_redundant: u64,
    /// Inputs refused: too far in the future, for a frozen or foreign seat.
    pub inputs_refused: u64,
    /// Events dropped because the game did not drain them.
    pub events_dropped: u64,
    /// Snapshot chunks (or whole snapshots) refused: a bad checksum, over
    /// the cap, inconsistent.
    pub snapshot_errors: u64,
    /// Resyncs begun: our state diverged from the majority's and a
    /// majority peer's was asked for.
    pub resyncs: u32,
    /// Requests for our state from players that diverged, taken (the
    /// transfer may not have completed).
    pub resyncs_given: u64,
    /// Requests for our state refused: from a player we did not find
    /// diverged, or one given it `max_resyncs` times already.
    pub resyncs_refused: u64,
    /// Ticks held in the input store.
    pub buffered_ticks: usize,
    /// Checksums held (local and received).
    pub buffered_checksums: usize,
    /// Per remote peer.
    pub peers: Vec<PeerStats>,
}

/// What a session knows about one remote peer.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PeerStats {
    /// The peer.
    pub peer: PeerId,
    /// Its seat, if it plays.
    pub player: Option<PlayerId>,
    /// Its next tick, as last reported.
    pub next_tick: Tick,
    /// Smoothed round-trip time, once measured.
    pub rtt: Option<Duration>,
    /// The round trip's jitter (its mean deviation), once measured.
    pub rtt_jitter: Option<Duration>,
    /// Loss each way and bytes per second each way.
    pub traffic: Traffic,
    /// When it was last heard from.
    pub last_heard: Option<Instant>,
}
