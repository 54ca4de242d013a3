//! The mesh topology: every peer talks to every peer, no server.
//!
//! Each peer stamps its local input `delay` ticks ahead and sends it to every
//! other peer; a tick is confirmed once every seated player's input for it is
//! in hand. See [`MeshSession`] for the rules and the call order.

mod abandon;
mod delay;
mod observe;
mod packet;
mod resync;
mod store;

use crate::checksum::{Incoming, LocalChecks, Mismatch, Outcome, RemoteChecks};
use crate::endpoint::Transmit;
use crate::error::{
    AbandonError, ChecksumError, CommitError, ConfigError, DatagramError, Incompatibility,
    PauseError,
};
use crate::frame::SystemEvent;
use crate::link::{Link, StallMeter, Traffic};
use crate::pause::{PauseAgreement, PauseChange};
use crate::rules::limits;
use crate::shared::{Events, Rate};
use crate::snapshot::{SnapshotLimits, SnapshotSender};
use crate::wire::{self, Abandon, Datagram, Endorsement, Message, WireError};
use crate::{AdaptiveDelay, Event, Frame, Input, Instant, PeerId, PlayerId, Tick};
use core::time::Duration;
use delay::DelayState;
use packet::Refusal;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use store::{Cell, Slot, Store};

/// Most events held for the game before the oldest are dropped.
const EVENT_QUEUE_CAP: usize = 1024;

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
    /// stay lower before the delay falls a tick (`tick_rate` ticks).
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
    pub keepalive_interval: Duration,
    /// Silence after which [`Event::Interrupted`] is raised.
    pub interrupt_after: Duration,
    /// Silence after which a player is abandoned automatically; `None`
    /// leaves it to the game to call [`MeshSession::abandon`].
    pub abandon_after: Option<Duration>,
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
    fn validate(&self) -> Result<(), ConfigError> {
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
        limits::delay(self.delay)?;
        limits::tick_rate(self.tick_rate)?;
        if let Some(a) = &self.adaptive {
            a.validate_from(self.delay)?;
        }
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

#[derive(Debug, Clone)]
struct Seat {
    /// The peer playing this seat.
    peer: Option<PeerId>,
    /// The first tick the seat is empty: abandoned, or never taken.
    empty_from: Option<Tick>,
    /// It was emptied because its player said goodbye.
    left: bool,
}

/// The event that empties `player`'s seat: it said goodbye, or it was
/// given up.
fn departure(player: PlayerId, left: bool) -> SystemEvent {
    if left {
        SystemEvent::Left { player }
    } else {
        SystemEvent::Abandoned { player }
    }
}

#[derive(Debug, Clone)]
struct Peer {
    id: PeerId,
    seat: Option<PlayerId>,
    next_tick: Tick,
    /// Per seat: the lowest tick of that seat's input this peer lacks, as it
    /// last told us.
    acks: Vec<Option<Tick>>,
    /// The seats it votes to abandon, as of its latest packet.
    votes: Vec<PlayerId>,
    /// The seats it has frozen and how far it held their own input then,
    /// as of its latest packet.
    frozen: Vec<(PlayerId, Tick)>,
    /// The abandonment decisions it endorses, as of its latest packet.
    endorsed: Vec<Endorsement>,
    /// When it last sent us an input of its own seat we did not have.
    last_input: Option<Instant>,
    /// Whether its latest datagram said its game waits on its own input
    /// alone (it holds everyone else's).
    waits_on_itself: bool,
    /// Whether its latest datagram said its game waits on our input.
    waits_on_us: bool,
    /// Since when our next tick has waited on its input while others' is
    /// in: with `last_input`, what makes a peer that keeps its connection
    /// alive but sends no input silent all the same.
    waited_since: Option<Instant>,
    /// Our next tick as of the last packet sent to it.
    told_next: Tick,
    /// It sent inputs we have not acknowledged yet.
    ack_pending: bool,
    /// Its Hello showed the same game: its datagrams are taken.
    greeted: bool,
    /// It answered our Hello: no need to send it again.
    welcomed: bool,
    /// Its latest datagram carried a Hello, which we answer.
    owe_welcome: bool,
    /// We refused it, and tell it why in every datagram.
    refused: Option<Refusal>,
    /// It cannot play with us (either side found out).
    incompatible: Option<Incompatibility>,
    /// It said goodbye.
    left: bool,
    /// When it was heard, the send schedule, ping and pong, its traffic
    /// (silence counts from when it was added until it is heard).
    link: Link,
    /// The highest lifted pause it told us of.
    lifted_known: Option<Tick>,
    checks: RemoteChecks,
    /// The snapshot we send it, an observer too far behind for frames.
    outgoing: Option<Box<SnapshotSender>>,
    /// A player that diverged: its request for our state, accepted.
    giving: Option<resync::Giving>,
    /// When we accepted its requests for our state (our next tick then),
    /// within the last [`resync::MEMORY`] ticks.
    donated: VecDeque<Tick>,
    /// Its latest request's id: an older one (replayed, reordered) is not
    /// taken.
    last_request: Option<u32>,
}

impl Peer {
    fn new(id: PeerId, seat: Option<PlayerId>, width: usize, first: Tick, now: Instant) -> Self {
        Self {
            id,
            seat,
            next_tick: first,
            acks: vec![None; width],
            votes: Vec::new(),
            frozen: Vec::new(),
            endorsed: Vec::new(),
            last_input: None,
            waits_on_itself: false,
            waits_on_us: false,
            waited_since: None,
            told_next: first,
            ack_pending: false,
            greeted: false,
            welcomed: false,
            owe_welcome: false,
            refused: None,
            incompatible: None,
            left: false,
            link: Link::new(now),
            lifted_known: None,
            checks: RemoteChecks::default(),
            outgoing: None,
            giving: None,
            donated: VecDeque::new(),
            last_request: None,
        }
    }
}

/// One peer's side of a peer-to-peer lockstep session.
///
/// The session is a state machine without I/O: it never reads a clock or
/// touches a socket. The caller feeds it datagrams and the time, and drains
/// the datagrams it wants sent, the frames ready to run and the events worth
/// showing.
///
/// ```text
///          commit_local(input)           advance() -> Frame
///   game ───────────────────────▶ ┌─────────────┐ ─────────────────▶ game.step
///                                 │ MeshSession │
///   net ──handle_datagram(from)─▶ │             │ ──poll_transmit──▶ net
///   clock ─handle_timeout(now)──▶ └─────────────┘ ──poll_event────▶ HUD
/// ```
///
/// # One loop iteration
///
/// 1. `handle_datagram` for every datagram received;
/// 2. `handle_timeout(now)`;
/// 3. `commit_local(input)` when a tick of input is due (a refusal is
///    backpressure: offer the input again next time);
/// 4. `advance()` until it returns `None`, running each frame in order and
///    reporting checksums with `report_checksum`;
/// 5. `poll_transmit` until `None`, sending each datagram;
/// 6. `poll_event` until `None` (optional);
/// 7. sleep until `poll_timeout()` or the next datagram.
///
/// # The rules
///
/// * Input is stamped `delay` ticks ahead; the first `delay` ticks run on
///   neutral input. A tick runs only when every seated player's input for it
///   is known: a missing input stalls, it is never guessed, and
///   [`awaiting`](Self::awaiting) names who the tick waits on.
/// * Commits are bounded: more than `delay + max_lead` ticks ahead of the
///   slowest peer, or while paused, `commit_local` refuses.
/// * Every packet carries the sender's position and, per seat, the lowest
///   tick it still lacks; each peer resends from there (never a fixed
///   window), as much as fits one datagram. Any loss short of a partition
///   costs latency, not a stall forever.
/// * Duplicates and late copies never change a decided tick; inputs for ticks
///   already run are dropped, and so are inputs further ahead than any peer
///   still in step could have committed, so nothing a peer sends can grow
///   memory.
/// * History is pruned as soon as every peer has it, also while stalled.
/// * Observers receive confirmed frames from the lowest live seat, once every
///   live player has run them, run the same frames, commit nothing and are
///   waited for by nobody. One further behind than `observer_window`, or
///   joining a match under way ([`add_observer`](Self::add_observer),
///   [`join_under_way`](Self::join_under_way)), is sent that player's game
///   state instead ([`Event::SnapshotRequested`], [`Event::Snapshot`]) and
///   runs on from it.
/// * Pause and resume follow the agreement rules of the pause module: the
///   earliest proposed freeze frame wins however messages interleave.
/// * Abandoning a silent player: peers stop taking its input and report how
///   far they hold it; the lowest live seat collects every report, gets the
///   inputs some peer holds and it lacks, and declares the seat empty from
///   the first tick nobody holds. No peer can have run past that tick, so
///   every stream stays identical; the decision travels in every packet
///   until every peer has it, and the frame at that tick carries
///   [`SystemEvent::Abandoned`] ([`SystemEvent::Left`] for a player that
///   said goodbye: [`leave`](Self::leave)).
/// * Checkpoints of every peer's hash chain are compared with every other
///   peer's ([`report_checksum`](Self::report_checksum)); a mismatch raises
///   [`Event::Desync`] and a search for the first divergent tick. With
///   [`MeshConfig::resync`], a player whose checkpoints differ from those
///   of more than half of the live players takes one of their states
///   ([`Event::Resyncing`]) and runs on from it.
///
/// # Example
///
/// ```
/// use lockstep_core::{Instant, MeshConfig, MeshSession, PeerId, PlayerId, Roster};
///
/// let roster = Roster::new().player(PeerId(0), PlayerId(0)).player(PeerId(1), PlayerId(1));
/// let now = Instant::ZERO;
/// let mut a = MeshSession::<u8>::new(MeshConfig::default(), roster.clone(), PeerId(0), now)?;
/// let mut b = MeshSession::<u8>::new(MeshConfig::default(), roster, PeerId(1), now)?;
///
/// // The primed ticks run at once.
/// assert!(a.advance().is_some());
/// assert!(a.advance().is_some());
/// // Tick 2 waits for both players.
/// assert!(a.advance().is_none());
/// assert_eq!(a.awaiting(), vec![PlayerId(0), PlayerId(1)]);
///
/// a.commit_local(7)?;
/// b.commit_local(9)?;
/// // Deliver a's packets to b and b's to a (a transport would do this).
/// let mut buf = Vec::new();
/// while let Some(t) = a.poll_transmit(&mut buf) {
///     b.handle_datagram(PeerId(0), &buf[..t.len], now)?;
/// }
/// while let Some(t) = b.poll_transmit(&mut buf) {
///     a.handle_datagram(PeerId(1), &buf[..t.len], now)?;
/// }
/// let frame = a.advance().expect("both inputs are in");
/// assert_eq!(frame.inputs, vec![Some(7), Some(9)]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct MeshSession<I: Input> {
    config: MeshConfig,
    local: PeerId,
    local_seat: Option<PlayerId>,
    seats: Vec<Seat>,
    peers: Vec<Peer>,
    store: Store<I>,
    next_tick: Tick,
    next_commit: Tick,
    /// The session's first tick.
    start: Tick,
    /// `leave` was called: every datagram says goodbye.
    leaving: bool,
    started: Instant,
    now: Instant,
    pause: PauseAgreement,
    checks: LocalChecks,
    /// Seats this peer votes to abandon.
    votes: BTreeSet<PlayerId>,
    /// Seats a majority voted for, whose own input this peer no longer
    /// takes, not yet decided; with the first tick of the seat's own input
    /// it lacked when it froze them.
    frozen: BTreeMap<PlayerId, Tick>,
    /// The decision this peer endorses for each seat (never changed).
    endorsed: BTreeMap<PlayerId, Endorsement>,
    /// Seats and peers already reported as disputing an abandonment.
    disputed: BTreeSet<(PlayerId, PeerId)>,
    /// Every abandonment decided, in the order learned.
    decisions: Vec<(PlayerId, Tick)>,
    events: Events<Event>,
    stats: MeshStats,
    /// The input delay in force and, with `adaptive`, the wants it follows.
    delays: DelayState,
    /// Frames run, for the tick rate achieved.
    frame_rate: Rate,

    /// As the feeder: the state asked of the game for observers too far
    /// behind for frames.
    donor: observe::Donor,
    /// As an observer: a snapshot to catch up from.
    incoming: Option<Box<observe::Incoming>>,
    /// As a player whose state diverged: the majority peer's state asked
    /// for.
    resync: Option<Box<resync::Asking>>,
    /// When our resyncs began (our next tick then), within the last
    /// [`resync::MEMORY`] ticks.
    resynced: VecDeque<Tick>,
    next_resync_id: u32,
    /// The donor of the last resync: asked last if we diverge again.
    last_donor: Option<PeerId>,
    /// Donors that failed a resync of ours (sent nothing in time, or a
    /// state that failed its checks), with our next tick then, within the
    /// last [`resync::MEMORY`] ticks: asked after every other.
    failed_donors: VecDeque<(Tick, PeerId)>,
    /// When the picture stopped, and for how long (players only).
    stall: StallMeter,
    cursor: usize,
    scratch: Vec<u8>,
}

impl<I: Input> MeshSession<I> {
    /// A session for the peer `local` of `roster`, starting at `now`.
    ///
    /// Every peer of the session must be created with the same roster and the
    /// same `delay` and `max_lead`.
    pub fn new(
        config: MeshConfig,
        roster: Roster,
        local: PeerId,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        Self::build(config, roster, local, now, false)
    }

    /// An observer's session for a match already under way: its roster
    /// lists the players and itself, and every player
    /// [adds it](Self::add_observer). Unlike [`new`](Self::new), it runs no
    /// frame of its own making: the first frame it hands out is one the
    /// feeder sent it, or the one after the [snapshot](Event::Snapshot) it
    /// was sent. Only an observer can join under way.
    ///
    /// ```
    /// use lockstep_core::{Instant, MeshConfig, MeshSession, PeerId, PlayerId, Roster};
    /// let roster = Roster::new()
    ///     .player(PeerId(0), PlayerId(0))
    ///     .player(PeerId(1), PlayerId(1))
    ///     .observer(PeerId(9));
    /// let mut late = MeshSession::<u8>::join_under_way(MeshConfig::default(), roster, PeerId(9), Instant::ZERO)?;
    /// // Nothing to run until the feeder's frames or snapshot arrive.
    /// assert!(late.advance().is_none());
    /// # Ok::<(), lockstep_core::ConfigError>(())
    /// ```
    pub fn join_under_way(
        config: MeshConfig,
        roster: Roster,
        local: PeerId,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        Self::build(config, roster, local, now, true)
    }

    fn build(
        config: MeshConfig,
        roster: Roster,
        local: PeerId,
        now: Instant,
        under_way: bool,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let mut seen_peers = BTreeSet::new();
        let mut seen_seats = BTreeSet::new();
        let mut width = 0usize;
        for &(peer, seat) in roster.members() {
            if !seen_peers.insert(peer) {
                return Err(ConfigError::DuplicatePeer(peer));
            }
            if let Some(s) = seat {
                if s.index() >= wire::MAX_SEATS {
                    return Err(ConfigError::TooManySeats {
                        seat: s,
                        max: wire::MAX_SEATS,
                    });
                }
                if !seen_seats.insert(s) {
                    return Err(ConfigError::DuplicateSeat(s));
                }
                width = width.max(s.index() + 1);
            }
        }
        if width == 0 {
            return Err(ConfigError::NoPlayers);
        }
        let local_seat = match roster.members().iter().find(|(p, _)| *p == local) {
            Some((_, seat)) => *seat,
            None => return Err(ConfigError::LocalNotInRoster(local)),
        };
        ConfigError::unless(
            under_way && local_seat.is_some(),
            "only an observer joins a session under way",
        )?;
        let mut seats = vec![
            Seat {
                peer: None,
                empty_from: Some(config.first_tick),
                left: false,
            };
            width
        ];
        for &(peer, seat) in roster.members() {
            if let Some(s) = seat {
                seats[s.index()] = Seat {
                    peer: Some(peer),
                    empty_from: None,
                    left: false,
                };
            }
        }
        let peers = roster
            .members()
            .iter()
            .filter(|(p, _)| *p != local)
            .map(|&(id, seat)| Peer::new(id, seat, width, config.first_tick, now))
            .collect();
        let config_first = config.first_tick;
        let next_commit = config.first_tick.saturating_add(config.delay);
        let delays = DelayState::new(
            config.delay,
            width,
            config.adaptive.as_ref(),
            config.tick_rate,
            local_seat.is_some(),
            config_first,
        );
        let mut session = Self {
            checks: {
                let mut c = LocalChecks::new(config.checksum_window);
                if !under_way {
                    c.starts_at(config.first_tick);
                }
                c
            },
            next_commit,
            config,
            local,
            local_seat,
            seats,
            peers,
            store: Store::starting_at(config_first),
            next_tick: config_first,
            start: config_first,
            leaving: false,
            started: now,
            now,
            pause: PauseAgreement::default(),
            votes: BTreeSet::new(),
            frozen: BTreeMap::new(),
            endorsed: BTreeMap::new(),
            disputed: BTreeSet::new(),
            decisions: Vec::new(),
            events: Events::new(EVENT_QUEUE_CAP),
            stats: MeshStats::default(),
            delays,
            frame_rate: Rate::default(),
            donor: observe::Donor::default(),
            incoming: None,
            resync: None,
            resynced: VecDeque::new(),
            next_resync_id: 0,
            last_donor: None,
            failed_donors: VecDeque::new(),
            stall: StallMeter::default(),
            cursor: 0,
            scratch: Vec::new(),
        };
        // Prime the opening ticks so play starts at once instead of waiting a
        // round trip for input nobody could have sent yet. (An observer
        // joining under way runs no frame the feeder did not send it.)
        let primed = if under_way { 0 } else { session.config.delay };
        for k in 0..primed {
            let (seats, start) = (&session.seats, session.start);
            let tick = start.saturating_add(k);
            if let Some(slot) = session.store.ensure(tick, |t| new_slot(seats, start, t)) {
                for cell in &mut slot.cells {
                    if cell.is_unknown() {
                        *cell = Cell::Known(I::default());
                    }
                }
            }
        }
        // Tick 0 always exists: it carries the opening membership events.
        let (seats, start) = (&session.seats, session.start);
        session.store.ensure(start, |t| new_slot(seats, start, t));
        Ok(session)
    }

    // ----- getters -------------------------------------------------------

    /// The next frame to run: every frame before it has been handed out.
    pub fn frame(&self) -> Tick {
        self.next_tick
    }

    /// The tick the next committed input will be stamped for.
    pub fn next_commit(&self) -> Tick {
        self.next_commit
    }

    /// The local peer.
    pub fn local(&self) -> PeerId {
        self.local
    }

    /// The seat the local peer plays, if it plays one.
    pub fn seat(&self) -> Option<PlayerId> {
        self.local_seat
    }

    /// Whether the local peer watches rather than plays.
    pub fn watching(&self) -> bool {
        self.local_seat.is_none()
    }

    /// How many seats each frame has.
    pub fn seat_count(&self) -> usize {
        self.seats.len()
    }

    /// The session's configuration.
    pub fn config(&self) -> &MeshConfig {
        &self.config
    }

    /// Which players the next frame is still waiting on. Empty means it can
    /// run (or the session is frozen by a pause). While our own resync
    /// holds the frames (a state on its way, or one the game has not taken
    /// yet), our own seat. Read-only, so a HUD may ask every render frame.
    pub fn awaiting(&self) -> Vec<PlayerId> {
        if self.frozen() {
            return Vec::new();
        }
        if self.resync_limit().is_some_and(|l| self.next_tick > l) {
            return self.local_seat.into_iter().collect();
        }
        let slot = self.store.get(self.next_tick);
        (0..self.seats.len())
            .filter(|&i| match slot {
                Some(s) => s.cells.get(i).is_some_and(|c| !c.is_settled()),
                None => !self.seat_empty_at(i, self.next_tick),
            })
            .filter_map(seat_id)
            .collect()
    }

    /// Whether a pause has been called. Commits for the freeze frame and
    /// later stop at once; the simulation keeps running until it reaches
    /// [`pause_frame`](Self::pause_frame).
    pub fn paused(&self) -> bool {
        self.pause.frame().is_some()
    }

    /// Whether the simulation has come to rest on the pause frame: the moment
    /// the picture stops moving.
    pub fn frozen(&self) -> bool {
        self.pause.frame() == Some(self.next_tick)
    }

    /// The frame the session freezes on, while paused.
    pub fn pause_frame(&self) -> Option<Tick> {
        self.pause.frame()
    }

    /// The frame of the latest pause lifted, if any ever was.
    pub fn lifted_pause(&self) -> Option<Tick> {
        self.pause.lifted()
    }

    /// Every abandonment this session knows of: the seat and the first tick
    /// it is empty.
    pub fn abandoned(&self) -> &[(PlayerId, Tick)] {
        &self.decisions
    }

    /// Counters and per-peer figures.
    pub fn stats(&self) -> MeshStats {
        let mut s = self.stats.clone();
        s.stalls = self.stall.stalls();
        s.stalled_for = self.stall.stalled_for();
        s.next_tick = self.next_tick;
        s.next_commit = self.next_commit;
        s.delay = self.delays.delay;
        s.delay_wanted = self
            .delays
            .tracker
            .as_ref()
            .filter(|_| self.config.adaptive.is_some())
            .map(crate::DelayTracker::wanted);
        s.input_slack = self
            .delays
            .tracker
            .as_ref()
            .and_then(crate::DelayTracker::slack);
        s.tick_rate = self.frame_rate.per_sec(self.now);
        s.buffered_ticks = self.store.len();
        s.buffered_checksums =
            self.checks.len() + self.peers.iter().map(|p| p.checks.len()).sum::<usize>();
        s.peers = self
            .peers
            .iter()
            .map(|p| PeerStats {
                peer: p.id,
                player: p.seat,
                next_tick: p.next_tick,
                rtt: p.link.rtt(),
                rtt_jitter: p.link.jitter(),
                traffic: p.link.traffic(self.now),
                last_heard: p.link.last_heard(),
            })
            .collect();
        s
    }

    /// The most ticks the input store can hold with this configuration,
    /// whatever peers send: the slowest live player is at most
    /// `delay + max_lead` behind, observers at most `observer_window`, the
    /// [abandon window](Self::abandon_window) is kept, and nothing is
    /// accepted more than `delay + max_lead` ahead (with `adaptive`, its
    /// `max` for `delay`).
    pub fn buffer_bound(&self) -> usize {
        let lead = (self.delay_cap() + self.config.max_lead) as usize;
        let behind = lead
            .max(self.config.observer_window as usize)
            .max(self.abandon_window() as usize);
        lead + behind + 2
    }

    /// How many ticks before an abandonment's first empty tick the peers
    /// compare the abandoned seat's input over: `2 * (delay + max_lead) + 2`
    /// (with `adaptive`, its `max` for `delay`), which reaches back past
    /// every tick any peer may still hold forwarded input for. Every peer
    /// keeps at least this many ticks of history.
    pub fn abandon_window(&self) -> u32 {
        2 * (self.delay_cap() + self.config.max_lead) + 2
    }

    // ----- mutators ------------------------------------------------------

    /// Commits the local input for the next tick and schedules it to every
    /// peer. Returns the tick it will run on.
    ///
    /// A refusal is backpressure, not an error to report: keep the input and
    /// offer it again next frame (see [`CommitError`]).
    pub fn commit_local(&mut self, input: I) -> Result<Tick, CommitError> {
        let Some(seat) = self.local_seat else {
            return Err(CommitError::Observer);
        };
        if self.leaving {
            return Err(CommitError::Left);
        }
        if let Some(from) = self.seats[seat.index()].empty_from {
            return Err(CommitError::Abandoned { from });
        }
        // Inputs before the freeze frame are still owed: the frame before it
        // cannot run without them.
        if let Some(frame) = self.pause.frame().filter(|f| self.next_commit >= *f) {
            self.stats.commits_refused += 1;
            return Err(CommitError::Paused { frame });
        }
        let limit = self.delays.delay + self.config.max_lead;
        let lead = self.next_commit.since(self.min_live_next());
        if lead >= limit {
            self.stats.commits_refused += 1;
            return Err(CommitError::TooFarAhead { lead, limit });
        }
        self.scratch.clear();
        input.encode(&mut self.scratch);
        if self.scratch.len() > self.config.max_input_len {
            return Err(CommitError::InputTooLarge {
                len: self.scratch.len(),
                max: self.config.max_input_len,
            });
        }
        // The delay rose: the lead is topped up to it with neutral input,
        // before this one (nobody sampled input for the ticks it adds).
        self.fill_after_rise(seat)?;
        if let Some(frame) = self.pause.frame().filter(|f| self.next_commit >= *f) {
            // The rise reached the freeze frame: this input waits for the
            // resume.
            self.stats.commits_refused += 1;
            return Err(CommitError::Paused { frame });
        }
        let tick = self.stamp_own(seat, input)?;
        self.stamp_want(seat, tick);
        self.note_arrivals();
        for p in self.peers.iter_mut().filter(|p| p.seat.is_some()) {
            p.link.flush = true;
        }
        Ok(tick)
    }

    /// Our `input` for the next tick to stamp, which it returns.
    fn stamp_own(&mut self, seat: PlayerId, input: I) -> Result<Tick, CommitError> {
        let tick = self.next_commit;
        let after = tick.next().ok_or(CommitError::TickSpaceExhausted)?;
        let (seats, start) = (&self.seats, self.start);
        let slot = self
            .store
            .ensure(tick, |t| new_slot(seats, start, t))
            .ok_or(CommitError::TickSpaceExhausted)?;
        slot.cells[seat.index()] = Cell::Known(input);
        self.next_commit = after;
        Ok(tick)
    }

    /// The next confirmed frame, if every input for it is known. Frames come
    /// out in tick order, each exactly once; run every one.
    ///
    /// `None` means "not yet": a missing input (see
    /// [`awaiting`](Self::awaiting)) or the pause frame.
    pub fn advance(&mut self) -> Option<Frame<I>> {
        if self.frozen() || self.snapshot_waiting() {
            return None;
        }
        let tick = self.next_tick;
        // Resyncing: no frame past the donor's state (or, until it
        // arrives, past the tick asked for).
        if self.resync_limit().is_some_and(|l| tick > l) {
            self.announce_resync();
            return None;
        }
        if !self.store.get(tick).is_some_and(|s| s.complete()) {
            // A stall is the picture stopping: no frame for two tick
            // periods (steady latency beyond the input delay is not one).
            // Observers count none.
            if self.local_seat.is_some() {
                let two_ticks = Duration::from_secs(2) / self.config.tick_rate.max(1);
                self.stall.no_frame(self.now, two_ticks);
            }
            return None;
        }
        let next = tick.next()?;
        self.follow_delay(tick);
        let frame = self.store.get(tick)?.to_frame(tick);
        self.stall.ran(self.now);
        if self.local_seat.is_none() {
            // Observers learn membership from the frames themselves.
            for ev in &frame.events {
                if let SystemEvent::Abandoned { player } | SystemEvent::Left { player } = *ev {
                    if let Some(seat) = self.seats.get_mut(player.index()) {
                        seat.empty_from = Some(tick);
                    }
                    self.ignore_checksums_of(player, tick);
                    self.decisions.push((player, tick));
                    self.push_event(Event::Abandoned { player, from: tick });
                }
            }
        }
        self.next_tick = next;
        self.stats.frames += 1;
        self.frame_rate.add(self.now, 1);
        if self.is_feeder() {
            for p in self.peers.iter_mut().filter(|p| p.seat.is_none()) {
                p.link.flush = true;
            }
        }
        self.prune();
        self.plan_snapshots();
        self.announce_resync();
        Some(frame)
    }

    /// Calls a pause. The peers are told, commits for the returned frame and
    /// later stop (inputs still owed for earlier frames are taken), and the
    /// simulation will rest on the returned frame. If an earlier pause is
    /// already in flight, that one wins and its frame is returned.
    pub fn request_pause(&mut self) -> Result<Tick, PauseError> {
        let Some(seat) = self.local_seat else {
            return Err(PauseError::Observer);
        };
        if self.seats[seat.index()].empty_from.is_some() {
            return Err(PauseError::Abandoned);
        }
        let change = self.pause.request(self.next_commit);
        self.note_pause_change(change);
        self.flush_all();
        Ok(self.pause.frame().unwrap_or(self.next_commit))
    }

    /// Lifts the pause and lets commits flow again; the peers are told.
    /// Returns the frame the lifted pause was to freeze on, or `None` if
    /// there was no pause. Safe to call when not paused.
    pub fn resume(&mut self) -> Option<Tick> {
        let change = self.pause.resume();
        self.note_pause_change(change);
        self.flush_all();
        match change {
            PauseChange::Lifted(f) => Some(f),
            _ => None,
        }
    }

    /// Votes to give up on a player who has stopped sending.
    ///
    /// A vote is never withdrawn, and alone it does nothing: once a strict
    /// majority of the other seated players voted (silence past
    /// `abandon_after` and a goodbye vote on their own), the seat's input is
    /// no longer taken, every peer reports how far it holds it, and the
    /// lowest live seat proposes the first tick nobody holds (so no peer has
    /// run past it). Once every live peer endorsed that tick, with equal
    /// digests of the player's input before it, [`Event::Abandoned`] and a
    /// [`SystemEvent::Abandoned`] in the frame stream follow. In a
    /// two-player session one vote is a majority. Unlike a protocol where
    /// one machine relays everything, a mesh peer cannot pick the tick
    /// itself: another peer may already hold, and have run, later inputs of
    /// the player.
    pub fn abandon(&mut self, player: PlayerId) -> Result<(), AbandonError> {
        let Some(me) = self.local_seat else {
            return Err(AbandonError::Observer);
        };
        if player == me {
            return Err(AbandonError::Local);
        }
        let seat = self
            .seats
            .get(player.index())
            .filter(|s| s.peer.is_some())
            .ok_or(AbandonError::NoSuchPlayer(player))?;
        if let Some(from) = seat.empty_from {
            return Err(AbandonError::AlreadyAbandoned { player, from });
        }
        self.vote(player);
        self.progress_abandonments();
        Ok(())
    }

    /// Adds an observer to a session under way (the game learned of it
    /// from its lobby, as it learned the roster). Its own session lists the
    /// players and itself; it is sent the game's state as a snapshot (see
    /// [`Event::SnapshotRequested`]), then frames. Datagrams from a peer not
    /// added are refused as [`DatagramError::UnknownPeer`].
    ///
    /// ```
    /// use lockstep_core::{ConfigError, Instant, MeshConfig, MeshSession, PeerId, PlayerId, Roster};
    /// let roster = Roster::new().player(PeerId(0), PlayerId(0)).player(PeerId(1), PlayerId(1));
    /// let mut s = MeshSession::<u8>::new(MeshConfig::default(), roster, PeerId(0), Instant::ZERO)?;
    /// s.add_observer(PeerId(7))?;
    /// assert_eq!(s.add_observer(PeerId(1)), Err(ConfigError::DuplicatePeer(PeerId(1))));
    /// assert!(s.remove_observer(PeerId(7)));
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn add_observer(&mut self, peer: PeerId) -> Result<(), ConfigError> {
        if peer == self.local || self.peers.iter().any(|p| p.id == peer) {
            return Err(ConfigError::DuplicatePeer(peer));
        }
        let (width, first, now) = (self.seats.len(), self.start, self.now);
        self.peers.push(Peer::new(peer, None, width, first, now));
        Ok(())
    }

    /// Forgets an observer (it left, or the game stopped admitting it):
    /// nothing more is sent to it and its datagrams are refused. Returns
    /// whether it was one. Players are never removed: they are abandoned.
    pub fn remove_observer(&mut self, peer: PeerId) -> bool {
        let before = self.peers.len();
        self.peers.retain(|p| p.seat.is_some() || p.id != peer);
        self.cursor = 0;
        self.prune();
        self.peers.len() < before
    }

    /// Leaves the session: every peer is told goodbye (and empties this
    /// seat at once instead of waiting for silence: the frame stream
    /// records [`SystemEvent::Left`] when the deciding peer heard the
    /// goodbye), and commits stop. Keep
    /// driving the session for a moment (a few resend intervals) so the
    /// goodbye gets through loss.
    pub fn leave(&mut self) {
        self.leaving = true;
        self.flush_all();
    }

    /// Reports the game's state hash after running `tick`. Peers compare;
    /// a mismatch raises [`Event::Desync`]. Ticks must ascend; reporting
    /// every tick or every Nth is the game's choice (the same on every peer).
    pub fn report_checksum(&mut self, tick: Tick, hash: u64) -> Result<(), ChecksumError> {
        if tick >= self.next_tick {
            return Err(ChecksumError::NotRun {
                tick,
                next: self.next_tick,
            });
        }
        if let Some(last) = self.checks.latest().filter(|l| tick <= *l) {
            return Err(ChecksumError::NotAscending { tick, last });
        }
        // A checkpoint rides on the next datagram: it is not worth one.
        // An adaptive session's carries the delay in force too.
        let hash = if self.config.adaptive.is_some() {
            self.delays.mix(tick, hash)
        } else {
            hash
        };
        let _ = self.checks.report(tick, hash);
        let now = self.now;
        for i in 0..self.peers.len() {
            for o in self.peers[i].checks.catch_up(&self.checks, now) {
                self.check_outcome(i, o);
            }
        }
        self.plan_resync();
        Ok(())
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop()
    }

    // ----- network side --------------------------------------------------

    /// Takes a datagram from `from`, received at `now`.
    ///
    /// A rejected datagram leaves the session exactly as it was.
    pub fn handle_datagram(
        &mut self,
        from: PeerId,
        datagram: &[u8],
        now: Instant,
    ) -> Result<(), DatagramError> {
        self.now = self.now.max(now);
        self.stats.datagrams_received += 1;
        self.stats.bytes_received += datagram.len() as u64;
        // Refused before any decoding: nobody sends more than we allow.
        let taken = if datagram.len() > self.config.max_datagram {
            Err(WireError::Oversized(datagram.len()).into())
        } else {
            self.take_datagram(from, datagram)
        };
        match taken {
            Ok(()) => Ok(()),
            Err(e) => {
                self.stats.datagrams_rejected += 1;
                Err(e)
            }
        }
    }

    fn take_datagram(&mut self, from: PeerId, datagram: &[u8]) -> Result<(), DatagramError> {
        let idx = self
            .peers
            .iter()
            .position(|p| p.id == from)
            .ok_or(DatagramError::UnknownPeer(from))?;
        let now = self.now;
        self.peers[idx].link.received(now, datagram.len());
        // The header holds the low 16 bits of the sender's tick, read as
        // the tick nearest to ours between players (never more than a lead
        // apart), and to where the sender was last when an observer is at
        // either end: right unless it moved 32 768 ticks since, which only
        // an observer far behind (or jumping ahead from a snapshot) does.
        // Those datagrams open with the full tick (a Hello's `resume_from`,
        // a Welcome's `tick`): the anchor the header is read against.
        let anchor = wire::peek_anchor(datagram);
        let players = self.local_seat.is_some() && self.peers[idx].seat.is_some();
        let guess = if players {
            self.next_tick
        } else {
            self.peers[idx].next_tick
        };
        let reference = anchor.unwrap_or(guess);
        let d = match Datagram::decode(datagram, reference) {
            Ok(d) => d,
            Err(e) => {
                if let WireError::UnsupportedVersion { ours, theirs } = e {
                    self.note_incompatible(idx, Incompatibility::Protocol { ours, theirs });
                }
                return Err(e.into());
            }
        };
        let anchored = anchor.is_some();
        if let Some(reason) = self.peers[idx].incompatible {
            return Err(DatagramError::Incompatible(reason));
        }
        // Everything is validated and decoded before any state changes.
        let r = self.read(idx, &d)?;
        self.take_handshake(idx, &r)?;
        self.take_peer_state(idx, &r, d.base, anchored);
        self.take_pause(idx, &r);
        self.take_bye(idx, &r);
        self.take_abandon(idx, r.abandon);
        self.take_inputs(idx, r.inputs, &r.wants);
        self.take_frames(idx, r.frames);
        for c in &r.chunks {
            self.take_chunk(idx, c);
        }
        if let Some(ack) = r.snapshot_ack {
            self.take_snapshot_ack(idx, &ack);
        }
        if let Some((id, after)) = r.resync_request {
            self.take_resync_request(idx, id, after);
        }
        self.plan_resync();
        self.progress_abandonments();
        self.plan_snapshots();
        self.flush_chunks();
        self.note_arrivals();
        Ok(())
    }

    /// Reads a datagram's messages into one [`Received`], checking every
    /// seat, input size and frame shape.
    fn read<'a>(
        &mut self,
        idx: usize,
        d: &'a Datagram<'a>,
    ) -> Result<Received<'a, I>, DatagramError> {
        let width = self.seats.len();
        let seat_ok = |s: PlayerId| {
            if s.index() < width {
                Ok(())
            } else {
                Err(DatagramError::Violation("seat that does not exist"))
            }
        };
        let mut r = Received::default();
        for m in &d.messages {
            match m {
                Message::Hello(h) => r.hello = Some(h.fingerprint),
                Message::Status(st) => {
                    r.waits_on_itself = !st.waiting.is_empty()
                        && st.waiting.iter().all(|s| Some(*s) == self.peers[idx].seat);
                    r.waits_on_us = self.local_seat.is_some_and(|s| st.waiting.contains(&s));
                }
                Message::Welcome(_) => r.welcomed = true,
                Message::Reject(rej) => r.reject = Some(*rej),
                Message::Bye { .. } => r.bye = true,
                Message::Inputs(msg) => {
                    for &(s, t) in &msg.acks {
                        seat_ok(s)?;
                        r.acks.push((s, t));
                    }
                    for run in &msg.runs {
                        seat_ok(run.seat)?;
                        for (k, input) in run.decode::<I>()?.into_iter().enumerate() {
                            self.scratch.clear();
                            input.encode(&mut self.scratch);
                            if self.scratch.len() > self.config.max_input_len {
                                return Err(DatagramError::Violation("input over the size limit"));
                            }
                            r.inputs
                                .push((run.seat, run.start.saturating_add(k as u32), input));
                        }
                    }
                }
                Message::Frames(f) => {
                    if f.seats as usize != width {
                        return Err(DatagramError::Violation(
                            "frame with the wrong number of seats",
                        ));
                    }
                    r.frames.extend(f.decode::<I>()?);
                }
                m @ (Message::Checkpoint(_)
                | Message::CheckpointAck { .. }
                | Message::ChainQuery { .. }
                | Message::ChainAnswer { .. }) => {
                    r.checks.take(m);
                }
                Message::Pause { frame } => r.pause = Some(*frame),
                Message::Resume { lifted } => r.lifted = Some(*lifted),
                Message::Abandon(a) => {
                    let endorsed = a.endorsements.iter().map(|e| &e.seat);
                    let frozen = a.frozen.iter().map(|(s, _)| s);
                    for &s in a.votes.iter().chain(frozen).chain(endorsed) {
                        seat_ok(s)?;
                    }
                    r.abandon = Some(a);
                }
                Message::Ping { stamp } => r.ping = Some(*stamp),
                Message::Pong {
                    stamp,
                    held_ms,
                    received,
                    sent,
                } => r.pong = Some((*stamp, *held_ms, *received, *sent)),
                Message::SnapshotChunk(c) => r.chunks.push(*c),
                Message::SnapshotAck(a) => r.snapshot_ack = Some(*a),
                Message::SnapshotRequest { id, tick } => r.resync_request = Some((*id, *tick)),
                Message::CaughtUp { .. }
                | Message::Resync { .. }
                | Message::Error { .. }
                | Message::Challenge { .. }
                | Message::Padding { .. }
                | Message::Member(_)
                | Message::MemberAck { .. }
                | Message::Takeover { .. }
                | Message::TakeoverAck { .. }
                | Message::DelayWanted { .. } => {}
                Message::DelayWants { seat, changes } => {
                    seat_ok(*seat)?;
                    r.wants.push((*seat, changes.clone()));
                }
            }
        }
        Ok(r)
    }

    /// The handshake: nothing is taken from a peer before its Hello shows
    /// it runs the same game.
    fn take_handshake(&mut self, idx: usize, r: &Received<'_, I>) -> Result<(), DatagramError> {
        if let Some(rej) = r.reject {
            let reason = Incompatibility::from_reject(rej);
            self.note_incompatible(idx, reason);
            return Err(DatagramError::Incompatible(reason));
        }
        match r.hello {
            Some(fp) if fp != self.config.fingerprint => {
                let ours = self.config.fingerprint;
                self.peers[idx].refused = Some(Refusal::Game { ours, theirs: fp });
                self.peers[idx].link.flush = true;
                let reason = Incompatibility::Game { ours, theirs: fp };
                self.note_incompatible(idx, reason);
                Err(DatagramError::Incompatible(reason))
            }
            Some(_) => {
                let p = &mut self.peers[idx];
                p.greeted = true;
                p.owe_welcome = true;
                Ok(())
            }
            None if !self.peers[idx].greeted => {
                Err(DatagramError::Violation("datagram before hello"))
            }
            None => {
                self.peers[idx].owe_welcome = false;
                Ok(())
            }
        }
    }

    /// What the datagram says about its sender: it is alive, where it is,
    /// what it holds, its round trip and its checksums.
    fn take_peer_state(&mut self, idx: usize, r: &Received<'_, I>, base: Tick, anchored: bool) {
        let now = self.now;
        let (local_plays, local_next) = (self.local_seat.is_some(), self.next_tick);
        let p = &mut self.peers[idx];
        let recovered = p.link.heard(now);
        if r.welcomed {
            p.welcomed = true;
        }
        if recovered {
            let (peer, player) = (p.id, p.seat);
            self.push_event(Event::Recovered { peer, player });
        }
        let p = &mut self.peers[idx];
        // An anchored position is the sender's own word, also backwards
        // (it restarted, or an earlier reading was off by 65 536). An
        // observer's position is its latest datagram's, never past ours (it
        // runs only frames the players ran): a datagram from before it
        // jumped ahead, read against the jump, can land anywhere, and must
        // not stick as a maximum would.
        p.next_tick = if anchored {
            base
        } else if p.seat.is_none() && local_plays {
            base.min(local_next)
        } else {
            p.next_tick.max(base)
        };
        p.waits_on_itself = r.waits_on_itself;
        p.waits_on_us = r.waits_on_us;
        if let Some(stamp) = r.ping {
            p.link.pinged_by(stamp, now);
        }
        if let Some(pong) = r.pong {
            p.link.ponged(now, pong);
        }
        for &(seat, tick) in &r.acks {
            let a = &mut p.acks[seat.index()];
            *a = Some(a.map_or(tick, |old| old.max(tick)));
        }
        if let Some(l) = r.lifted {
            p.lifted_known = p.lifted_known.max(Some(l));
        }
        // Whether it still needs our resume is in its own datagram: one that
        // freezes on no lifted pause needs none (an idle peer is not told
        // again and again); one still frozen on a pause we lifted missed
        // the resume and is told again.
        if let Some(lifted) = self.pause.lifted() {
            match (p.seat, r.pause) {
                (Some(_), Some(f)) if f <= lifted => p.lifted_known = None,
                (Some(_), Some(_)) => {}
                (Some(_), None) => p.lifted_known = p.lifted_known.max(Some(lifted)),
                // An observer sends no pause of its own: it knows once it
                // has run past the frame.
                (None, _) if p.next_tick > lifted => {
                    p.lifted_known = p.lifted_known.max(Some(lifted));
                }
                (None, _) => {}
            }
        }
        let now = self.now;
        let p = &mut self.peers[idx];
        for o in p.checks.receive(&self.checks, &r.checks, now) {
            self.check_outcome(idx, o);
        }
        let p = &mut self.peers[idx];
        p.link.flush |= p.checks.urgent(now);
    }

    /// Searches for the first divergent tick: a question due goes out, and a
    /// peer that stopped answering ends its search empty-handed.
    fn progress_searches(&mut self) {
        let now = self.now;
        for i in 0..self.peers.len() {
            if let Some(o) = self.peers[i].checks.progress(now) {
                self.check_outcome(i, o);
            }
            if self.peers[i]
                .checks
                .question_due()
                .is_some_and(|d| d <= now)
            {
                self.peers[i].link.flush = true;
            }
        }
    }

    /// The game's state is being replaced: our chain starts over, and so
    /// does every comparison.
    pub(super) fn restart_checks(&mut self) {
        self.checks.restart();
        for p in &mut self.peers {
            p.checks.restart();
        }
    }

    /// What came of peer `i`'s checkpoints: the game hears of a mismatch
    /// and of where the search for the first divergent tick ended.
    fn check_outcome(&mut self, i: usize, o: Outcome) {
        let peer = self.peers[i].id;
        self.peers[i].link.flush |= self.peers[i].checks.urgent(self.now);
        match o {
            Outcome::Mismatch(m) => self.push_desync(peer, m),
            Outcome::Located { checkpoint, first } => self.push_event(Event::DesyncLocated {
                peer,
                checkpoint,
                first,
            }),
            Outcome::Agreed { from } => self.push_event(Event::DesyncEnded { peer, from }),
        }
    }

    /// Pause and resume: control state that must reach everyone. Only
    /// players in the game have a say: not observers, not abandoned seats.
    fn take_pause(&mut self, idx: usize, r: &Received<'_, I>) {
        let in_game = self.peers[idx]
            .seat
            .is_some_and(|s| self.seats[s.index()].empty_from.is_none());
        if !in_game {
            return;
        }
        if let Some(f) = r.pause {
            let change = self.pause.receive_pause(f, self.next_tick);
            self.note_pause_change(change);
        }
        if let Some(f) = r.lifted {
            let change = self.pause.receive_resume(f, self.next_tick);
            self.note_pause_change(change);
        }
    }

    /// A goodbye: we vote to abandon the sender's seat at once.
    fn take_bye(&mut self, idx: usize, r: &Received<'_, I>) {
        if !r.bye || self.peers[idx].left {
            return;
        }
        self.peers[idx].left = true;
        let (peer, player) = (self.peers[idx].id, self.peers[idx].seat);
        self.push_event(Event::PeerLeft { peer, player });
        if let Some(seat) = player.filter(|s| self.local_seat.is_some() && self.seat_live(*s)) {
            self.vote(seat);
        }
    }

    /// The sender's votes, frozen seats and endorsements (see the abandon
    /// module): recorded, to be weighed with everyone else's.
    fn take_abandon(&mut self, idx: usize, abandon: Option<&Abandon>) {
        let p = &mut self.peers[idx];
        if p.seat.is_none() || self.local_seat.is_none() {
            return;
        }
        match abandon {
            Some(a) => {
                p.votes.clone_from(&a.votes);
                p.frozen.clone_from(&a.frozen);
                p.endorsed.clone_from(&a.endorsements);
            }
            None => {
                p.votes.clear();
                p.frozen.clear();
                p.endorsed.clear();
            }
        }
        // Before this datagram's inputs: forwarded ones for a seat its
        // votes just froze are taken.
        if let Some(me) = self.local_seat {
            self.freeze_majorities(me);
        }
        // A peer that holds less of a frozen seat's input than we do gets
        // ours at once, not at the next resend.
        let p = &self.peers[idx];
        let behind = self
            .frozen
            .keys()
            .any(|&c| p.seat != Some(c) && p.acks[c.index()] < Some(self.contiguous(c)));
        if behind {
            self.peers[idx].link.flush = true;
        }
    }

    /// Inputs: a peer's own seat's, and forwarded ones for frozen seats
    /// (held, not run, until the abandonment is agreed).
    /// Inputs from peer `idx`, and the wants that go with them: a want is
    /// taken with the input of its seat and tick, when that input is new
    /// here, so a want cannot come without its input (nor be forged
    /// more cheaply than one).
    fn take_inputs(
        &mut self,
        idx: usize,
        inputs: Vec<(PlayerId, Tick, I)>,
        wants: &[(PlayerId, Vec<(Tick, u32)>)],
    ) {
        let sender_seat = self.peers[idx].seat;
        if self.local_seat.is_none() || sender_seat.is_none() {
            self.stats.inputs_refused += inputs.len() as u64;
            return;
        }
        let now = self.now;
        let mut fresh = false;
        let mut own_fresh = false;
        for (seat, tick, input) in inputs {
            let own = match self.input_verdict(idx, seat, tick) {
                Verdict::Refused => {
                    self.stats.inputs_refused += 1;
                    continue;
                }
                Verdict::Redundant => {
                    self.stats.inputs_redundant += 1;
                    continue;
                }
                Verdict::Own => true,
                Verdict::Forwarded => false,
            };
            let (seats, start) = (&self.seats, self.start);
            match self.store.ensure(tick, |t| new_slot(seats, start, t)) {
                // A player's own input also replaces input forwarded for it
                // while it was frozen here and since thawed.
                Some(slot)
                    if slot.cells[seat.index()].is_unknown()
                        || (own && matches!(slot.cells[seat.index()], Cell::Forwarded(_))) =>
                {
                    slot.cells[seat.index()] = if own {
                        Cell::Known(input)
                    } else {
                        Cell::Forwarded(input)
                    };
                    fresh = true;
                    // The want goes with the input it came with, and only
                    // with it: a player's own replacing a forwarded copy
                    // drops the forwarder's.
                    let want = wants
                        .iter()
                        .filter(|(s, _)| *s == seat)
                        .flat_map(|(_, c)| c)
                        .find(|(t, _)| *t == tick)
                        .map(|(_, d)| *d);
                    self.delays.take(seat.index(), tick, want);
                    own_fresh |= own;
                }
                _ => self.stats.inputs_redundant += 1,
            }
        }
        if fresh {
            self.peers[idx].ack_pending = true;
        }
        if own_fresh {
            self.peers[idx].last_input = Some(now);
        }
    }

    /// Whether input of `seat` for `tick` (or the want that goes with it)
    /// is taken from peer `idx`: a player's own, or a frozen seat's
    /// forwarded, within reach.
    fn input_verdict(&self, idx: usize, seat: PlayerId, tick: Tick) -> Verdict {
        let sender_seat = self.peers[idx].seat;
        if self.local_seat.is_none() || sender_seat.is_none() {
            return Verdict::Refused;
        }
        // No peer commits further than its own lead past where it says it
        // is: input beyond that is a lie about its position, which would
        // make peers it told another position wait on themselves.
        let claimed = self.peers[idx]
            .next_tick
            .saturating_add(self.delay_cap() + self.config.max_lead);
        let own = Some(seat) == sender_seat;
        let frozen = self.frozen.contains_key(&seat);
        let empty = self
            .seats
            .get(seat.index())
            .is_none_or(|s| s.empty_from.is_some_and(|e| tick >= e));
        if Some(seat) == self.local_seat
            || (own && frozen)
            || (own && tick >= claimed)
            || (!own && !frozen)
            || empty
            || tick >= self.horizon()
        {
            Verdict::Refused
        } else if tick < self.next_tick {
            Verdict::Redundant
        } else if own {
            Verdict::Own
        } else {
            Verdict::Forwarded
        }
    }

    /// Confirmed frames, for observers.
    fn take_frames(&mut self, idx: usize, frames: Vec<Frame<I>>) {
        if self.local_seat.is_some() || self.peers[idx].seat.is_none() {
            return;
        }
        let end = self.next_tick.saturating_add(self.config.observer_window);
        for frame in frames {
            if frame.tick < self.next_tick || frame.tick >= end {
                self.stats.inputs_redundant += 1;
                continue;
            }
            let (seats, start) = (&self.seats, self.start);
            if let Some(slot) = self.store.ensure(frame.tick, |t| new_slot(seats, start, t)) {
                if slot.complete() {
                    continue;
                }
                slot.cells = frame
                    .inputs
                    .into_iter()
                    .map(|c| c.map_or(Cell::Empty, Cell::Known))
                    .collect();
                slot.events = frame.events;
                slot.events.sort();
                slot.events.dedup();
            }
        }
    }

    /// Lets due timers fire: resends, keepalives, silence detection and
    /// automatic abandonment.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        let now = self.now;
        self.note_waiting();
        let mut silent_seats = Vec::new();
        for i in 0..self.peers.len() {
            if self.send_due(i) <= now {
                self.peers[i].link.flush = true;
            }
            let (id, seat) = (self.peers[i].id, self.peers[i].seat);
            let quiet = self.config.interrupt_after;
            if let Some(silent) = self.peers[i].link.interrupt(now, quiet, true) {
                self.push_event(Event::Interrupted {
                    peer: id,
                    player: seat,
                    silent_for: silent,
                });
            }
            let silent = self.peers[i].link.silent_for(now);
            if let (Some(after), Some(seat)) = (self.config.abandon_after, seat)
                && (silent >= after || self.input_silent_until(i, after).is_some_and(|t| t <= now))
                && self.can_auto_abandon(seat)
            {
                silent_seats.push(seat);
            }
        }
        for seat in silent_seats {
            self.vote(seat);
        }
        self.progress_searches();
        self.plan_resync();
        self.progress_abandonments();
        self.plan_snapshots();
        self.flush_chunks();
        self.drop_passed_snapshot();
        self.note_arrivals();
    }

    /// Writes the next datagram to send into `buf`.
    pub fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<Transmit> {
        let n = self.peers.len();
        for k in 0..n {
            let i = (self.cursor + k) % n;
            if self.peers[i].link.flush {
                self.cursor = (i + 1) % n;
                buf.clear();
                let more = self.build_datagram(i, buf);
                let now = self.now;
                let p = &mut self.peers[i];
                p.link.flush = more;
                p.ack_pending = false;
                p.link.sent(now, buf.len(), self.config.ping_interval, true);
                p.told_next = self.next_tick;
                self.stats.datagrams_sent += 1;
                self.stats.bytes_sent += buf.len() as u64;
                return Some(Transmit {
                    destination: p.id,
                    len: buf.len(),
                });
            }
        }
        None
    }

    /// When [`handle_timeout`](Self::handle_timeout) next needs calling.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut consider = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
        for i in 0..self.peers.len() {
            consider(self.send_due(i));
            let p = &self.peers[i];
            let heard = p.link.heard_or_since();
            if let Some(t) = p.link.interrupt_due(self.config.interrupt_after, true) {
                consider(t);
            }
            if let (Some(after), Some(seat)) = (self.config.abandon_after, p.seat)
                && self.can_auto_abandon(seat)
            {
                consider(heard + after);
                if let Some(t) = self.input_silent_until(i, after) {
                    consider(t);
                }
            }
        }
        if let Some(t) = self.snapshot_timeout() {
            consider(t);
        }
        if let Some(t) = self.resync_timeout() {
            consider(t);
        }
        for p in &self.peers {
            if let Some(t) = p.checks.question_due() {
                consider(t);
            }
        }
        next
    }

    /// Marks since when our next tick has waited on a remote seat whose own
    /// datagrams say it waits on nobody but itself: it holds every other
    /// seat's input and sends none of its own. A seat stalled behind someone
    /// else (no peer commits far past the slowest) says so and is never
    /// blamed; a silent connection is caught by datagram silence anyway.
    fn note_waiting(&mut self) {
        let now = self.now;
        let missing = self.awaiting();
        let local = self.local_seat;
        // Only while our own input is in: a tick we have not committed for
        // waits on us too.
        let ours_in = local.is_some_and(|me| !missing.contains(&me));
        for p in &mut self.peers {
            let blamed = ours_in
                && p.waits_on_itself
                && p.seat
                    .is_some_and(|x| Some(x) != local && missing.contains(&x));
            if blamed {
                p.waited_since.get_or_insert(now);
            } else {
                p.waited_since = None;
            }
        }
    }

    /// When peer `i` counts as silent for want of input: `after` past the
    /// later of its last new input and when we began waiting on it.
    fn input_silent_until(&self, i: usize, after: Duration) -> Option<Instant> {
        let p = &self.peers[i];
        let since = p.waited_since?;
        Some(p.last_input.map_or(since, |t| t.max(since)) + after)
    }

    // ----- internals -----------------------------------------------------

    fn note_incompatible(&mut self, idx: usize, reason: Incompatibility) {
        let p = &mut self.peers[idx];
        if p.incompatible.is_none() {
            p.incompatible = Some(reason);
            let peer = p.id;
            self.push_event(Event::Incompatible { peer, reason });
        }
    }

    /// An abandoned player's checksums from `from` on describe a stream
    /// nobody else runs.
    fn ignore_checksums_of(&mut self, seat: PlayerId, from: Tick) {
        for p in self.peers.iter_mut().filter(|p| p.seat == Some(seat)) {
            p.checks.ignore_from(from);
        }
    }

    fn push_event(&mut self, ev: Event) {
        self.events.push(ev);
        self.stats.events_dropped = self.events.dropped();
    }

    fn push_desync(&mut self, peer: PeerId, m: Mismatch) {
        self.push_event(Event::Desync {
            tick: m.tick,
            peer,
            local: m.local,
            remote: m.remote,
        });
    }

    fn note_pause_change(&mut self, change: PauseChange) {
        match change {
            PauseChange::None => {}
            PauseChange::Began(frame) | PauseChange::Moved(frame) => {
                self.push_event(Event::Paused { frame });
                self.flush_all();
            }
            PauseChange::Lifted(frame) => {
                self.push_event(Event::Resumed { frame });
                self.flush_all();
            }
        }
    }

    fn flush_all(&mut self) {
        for p in &mut self.peers {
            p.link.flush = true;
        }
    }

    fn seat_empty_at(&self, seat: usize, tick: Tick) -> bool {
        self.seats[seat].empty_from.is_some_and(|e| e <= tick)
    }

    /// Whether `seat` is played, not abandoned and not frozen.
    fn seat_live(&self, seat: PlayerId) -> bool {
        let s = &self.seats[seat.index()];
        s.peer.is_some() && s.empty_from.is_none() && !self.frozen.contains_key(&seat)
    }

    /// The remote peer playing `seat`.
    fn peer_of(&self, seat: PlayerId) -> Option<&Peer> {
        self.peers.iter().find(|p| p.seat == Some(seat))
    }

    fn live_seats(&self) -> impl Iterator<Item = PlayerId> + '_ {
        (0..self.seats.len())
            .filter_map(seat_id)
            .filter(|s| self.seat_live(*s))
    }

    /// Whether silence of `seat` would still give us a reason to vote.
    fn can_auto_abandon(&self, seat: PlayerId) -> bool {
        self.local_seat
            .is_some_and(|me| me != seat && self.seats[me.index()].empty_from.is_none())
            && self.seat_live(seat)
            && !self.votes.contains(&seat)
    }

    /// The lowest next tick among live players, this one included.
    fn min_live_next(&self) -> Tick {
        self.peers
            .iter()
            .filter(|p| p.seat.is_some_and(|s| self.seat_live(s)))
            .map(|p| p.next_tick)
            .fold(self.next_tick, Tick::min)
    }

    /// Inputs at or after this tick cannot come from a peer in step with us.
    fn horizon(&self) -> Tick {
        self.next_tick
            .saturating_add(self.delay_cap() + self.config.max_lead)
    }

    /// Whether this peer sends confirmed frames to observers: the lowest
    /// live seat does.
    fn is_feeder(&self) -> bool {
        self.local_seat.is_some() && self.live_seats().next() == self.local_seat
    }

    /// The lowest tick of `seat`'s own input (not forwarded) not held, from
    /// the next tick on: what the player itself is told, and how far a
    /// peer held it when it froze the seat.
    fn held_own(&self, seat: PlayerId) -> Tick {
        let mut t = self.next_tick;
        while self
            .store
            .cell(t, seat.index())
            .is_some_and(Cell::is_settled)
        {
            match t.next() {
                Some(n) => t = n,
                None => break,
            }
        }
        t
    }

    /// The lowest tick of `seat`'s input not held, from the next tick on.
    fn contiguous(&self, seat: PlayerId) -> Tick {
        let mut t = self.next_tick;
        while self
            .store
            .cell(t, seat.index())
            .is_some_and(|c| !c.is_unknown())
        {
            match t.next() {
                Some(n) => t = n,
                None => break,
            }
        }
        t
    }

    fn prune(&mut self) {
        let window = self.config.observer_window;
        let mut floor = self.next_tick;
        if self.local_seat.is_some() {
            for p in &self.peers {
                let keep = match p.seat {
                    Some(s) if self.seat_live(s) => p.next_tick,
                    Some(_) => continue,
                    // An observer being sent a snapshot needs the frames
                    // after it, whatever position it claims meanwhile.
                    None => {
                        let sent = p.outgoing.as_ref().map(|tx| tx.tick().saturating_add(1));
                        let want = sent.map_or(p.next_tick, |t| t.min(p.next_tick));
                        want.max(self.next_tick.saturating_sub(window))
                    }
                };
                floor = floor.min(keep);
            }
        }
        // The abandon window is kept whatever happens: peers compare it.
        floor = floor.min(self.next_tick.saturating_sub(self.abandon_window()));
        self.store.prune_below(floor);
        self.delays.prune_below(self.store.base());
    }

    fn send_due(&self, i: usize) -> Instant {
        let p = &self.peers[i];
        let interval = if p.link.sent_any() && self.has_news(p) {
            self.config.resend_interval
        } else {
            self.config.keepalive_interval
        };
        p.link.send_due(self.started, interval)
    }

    /// Whether `p` may lack something only we can tell it.
    fn has_news(&self, p: &Peer) -> bool {
        if p.incompatible.is_some() {
            return p.refused.is_some();
        }
        // Our progress is news: a peer held back by the lead limit waits
        // for it.
        if p.ack_pending
            || p.checks.has_news(&self.checks, self.now)
            || !p.welcomed
            || p.owe_welcome
            || self.leaving
            || p.told_next < self.next_tick
            || self.pause.frame().is_some()
            || self.resync_request(p.id).is_some()
        {
            return true;
        }
        if self.local_seat.is_none() {
            return false;
        }
        if self.pause.lifted() > p.lifted_known {
            return true;
        }
        if p.seat.is_none() {
            // One behind every frame held is fed a snapshot instead.
            return self.is_feeder()
                && p.next_tick >= self.store.base()
                && p.next_tick < self.min_live_next();
        }
        let unacked_own = self.local_seat.is_some_and(|s| {
            p.acks[s.index()].unwrap_or(p.next_tick).max(p.next_tick) < self.next_commit
        });
        unacked_own
            || !self.frozen.is_empty()
            || self.endorsed.values().any(|e| e.from >= p.next_tick)
    }
}

crate::endpoint::forward_to_inherent!(MeshSession, DatagramError);

fn seat_id(i: usize) -> Option<PlayerId> {
    u16::try_from(i).ok().map(PlayerId)
}

/// A fresh slot for `tick`: unknown for seats in play, empty otherwise, with
/// the membership events that take effect at that tick.
fn new_slot<I: Clone>(seats: &[Seat], start: Tick, tick: Tick) -> Slot<I> {
    let mut slot = Slot {
        cells: seats
            .iter()
            .map(|s| {
                if s.empty_from.is_some_and(|e| e <= tick) {
                    Cell::Empty
                } else {
                    Cell::Unknown
                }
            })
            .collect(),
        events: Vec::new(),
    };
    for (i, s) in seats.iter().enumerate() {
        let Some(player) = seat_id(i) else { continue };
        if s.peer.is_none() {
            continue;
        }
        if tick == start {
            slot.add_event(SystemEvent::Joined { player });
        }
        if s.empty_from == Some(tick) {
            slot.add_event(departure(player, s.left));
        }
    }
    slot
}

/// A datagram's messages, read and checked, before any of them is acted on.
struct Received<'a, I> {
    hello: Option<u64>,
    reject: Option<wire::RejectReason<'a>>,
    welcomed: bool,
    bye: bool,
    acks: Vec<(PlayerId, Tick)>,
    inputs: Vec<(PlayerId, Tick, I)>,
    frames: Vec<Frame<I>>,
    checks: Incoming<'a>,
    pause: Option<Tick>,
    lifted: Option<Tick>,
    abandon: Option<&'a Abandon>,
    ping: Option<u32>,
    pong: Option<(u32, u32, u32, u32)>,
    waits_on_itself: bool,
    waits_on_us: bool,
    wants: Vec<(PlayerId, Vec<(Tick, u32)>)>,
    chunks: Vec<wire::SnapshotChunk<'a>>,
    snapshot_ack: Option<wire::SnapshotAck>,
    resync_request: Option<(u32, Tick)>,
}

impl<I> Default for Received<'_, I> {
    fn default() -> Self {
        Self {
            hello: None,
            reject: None,
            welcomed: false,
            bye: false,
            acks: Vec::new(),
            inputs: Vec::new(),
            frames: Vec::new(),
            checks: Incoming::default(),
            pause: None,
            lifted: None,
            abandon: None,
            ping: None,
            pong: None,
            waits_on_itself: false,
            waits_on_us: false,
            wants: Vec::new(),
            chunks: Vec::new(),
            snapshot_ack: None,
            resync_request: None,
        }
    }
}

/// How input (or a want) from a peer is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Not the sender's to send, or out of reach.
    Refused,
    /// For a tick already run.
    Redundant,
    /// The sender's own seat's.
    Own,
    /// A frozen seat's, forwarded.
    Forwarded,
}
