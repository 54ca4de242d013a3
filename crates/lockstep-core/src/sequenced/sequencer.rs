//! The sequencer: one room's authority on which tick each input runs.

use super::{DropReason, MissingInput, Policy, Rejection, SequencerEvent};
use crate::admission::{self, SecretStream};
use crate::checksum::{Incoming, Referee, Relayed, Routed, Verdicted};
use crate::endpoint::Transmit;
use crate::error::ConfigError;
use crate::link::{Link, Traffic};
use crate::rules::limits;
use crate::shared::{Events, Rate};
use crate::snapshot::{SnapshotError, SnapshotLimits, SnapshotReceiver, SnapshotSender};
use crate::wire::{
    self, ByeReason, Datagram, DatagramWriter, ErrorCode, Frames, Hello, Holder, InputCodec,
    Inputs, Member, Message, Status, Welcome, WireError,
};
use crate::wire::{Checkpoint, ResumeToken};
use crate::{
    AdaptiveDelay, Frame, Input, Instant, PeerId, PlayerId, SystemEvent, Tick, TokenBucket,
};
use core::time::Duration;
use std::collections::{BTreeMap, VecDeque};

/// Most one-shot replies (refusals, errors to strangers) queued at once.
const REPLY_QUEUE_CAP: usize = 256;
/// Most events held for the caller before the oldest are dropped.
const EVENT_QUEUE_CAP: usize = 4096;
/// Datagrams a second a connection may send beyond its usual rate while it
/// sends or receives a snapshot.
const SNAPSHOT_DATAGRAMS_PER_SEC: u32 = 2_000;
/// Most frames tried in one datagram. A client catching up still gets
/// about two thousand frames a second at 30 Hz, and the work per datagram
/// stays bounded when a thousand clients catch up at once.
const CATCH_UP_FRAMES: u32 = 64;
/// The most of a lone player's round trip the `Deadline` clock waits for
/// in single-player mode (a client can claim any round trip it likes).
const SOLO_MAX_RTT: Duration = Duration::from_millis(500);
/// Donors blamed for a snapshot that left a resynced client diverged.
const SUSPECTS: usize = 8;
/// Roster entries one datagram carries at most.
const ROSTER_PER_DATAGRAM: usize = 4;

/// What a player taking over from a host that left hands its new
/// sequencer ([`Sequencer::take_over`]), gathered from the survivors
/// ([`ClientSession::frames_held`](super::ClientSession::frames_held),
/// [`lacks`](super::ClientSession::lacks),
/// [`inputs_after`](super::ClientSession::inputs_after)).
#[derive(Debug, Clone)]
pub struct Handover<I> {
    /// Frames sealed by the old host, in order, without gaps, ending with
    /// the highest one any survivor holds (nobody ran a later one), and
    /// starting at or before the first frame any survivor lacks.
    pub frames: Vec<Frame<I>>,
    /// The first tick to seal: one past the last of `frames`.
    pub next: Tick,
    /// The seats whose players will come back.
    pub survivors: Vec<Survivor<I>>,
    /// For the first new frame: the old host's seat leaving
    /// ([`SystemEvent::Left`] or [`SystemEvent::Abandoned`]), the seats
    /// nobody came back for abandoned, and
    /// [`SystemEvent::HostChanged`].
    pub events: Vec<SystemEvent>,
    /// The game fingerprint the room requires.
    pub fingerprint: u64,
}

/// A seat whose player will come back to a sequencer taking over.
#[derive(Debug, Clone)]
pub struct Survivor<I> {
    /// The seat.
    pub seat: PlayerId,
    /// Its resume token: the player takes the seat back with it
    /// ([`ClientSession::reconnect`](super::ClientSession::reconnect)).
    pub token: ResumeToken,
    /// Another token it may come back with: the one it held before
    /// `token`, or after it (an earlier host handed it a new one that the
    /// roster had not shared yet). Only the player that proved `token`
    /// names it.
    pub previous: Option<ResumeToken>,
    /// Where it reported from: only a Hello from this peer takes the seat
    /// back (none: from anywhere).
    pub peer: Option<PeerId>,
    /// It was playing (not catching up from a snapshot).
    pub playing: bool,
    /// Inputs it committed for ticks not sealed yet, by tick: they run
    /// while it comes back.
    pub inputs: Vec<(Tick, I)>,
}

/// Why a survivor of a takeover that ran frames the new host replaced is
/// refused (the room hands out no snapshot to put it right).
fn replaced_refusal() -> Rejection {
    Rejection::Other(
        "this player ran frames the new host replaced, and the room hands out no snapshot: it can only join again as a new player"
            .into(),
    )
}

/// One seat's entry in the roster, as last shared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct RosterEntry {
    /// The roster version when it last changed (0: never shared).
    version: u32,
    holder: Option<RosterHolder>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct RosterHolder {
    playing: bool,
    hosts: bool,
    /// The token it was shared for (the commitment is made once per token).
    token: ResumeToken,
    commitment: [u8; 16],
    contact: Vec<u8>,
}

/// A game the sequencer runs itself, as a server that simulates does: it
/// steps every sealed frame, hands joiners its own state (no client is
/// asked to donate), and its state hash is the checksum reference every
/// client is compared against, whatever the players report.
///
/// ```
/// use lockstep_core::sequenced::{Sequencer, SequencerConfig, Simulation};
/// use lockstep_core::{Frame, Instant};
///
/// #[derive(Debug, Default)]
/// struct Sum(u64);
///
/// impl Simulation<u8> for Sum {
///     fn step(&mut self, frame: &Frame<u8>) {
///         self.0 += frame.inputs.iter().flatten().map(|i| u64::from(*i)).sum::<u64>();
///     }
///     fn snapshot(&self) -> Vec<u8> {
///         self.0.to_le_bytes().to_vec()
///     }
///     fn hash(&self) -> u64 {
///         self.0
///     }
/// }
///
/// let room = Sequencer::<u8>::with_simulation(
///     SequencerConfig::default(),
///     Instant::ZERO,
///     Box::new(Sum::default()),
/// )?;
/// # Ok::<(), lockstep_core::ConfigError>(())
/// ```
pub trait Simulation<I>: core::fmt::Debug + Send {
    /// Runs one sealed frame (every frame, in order, from the room's first
    /// tick).
    fn step(&mut self, frame: &Frame<I>);
    /// The state after the last frame run, as the game's clients restore it.
    fn snapshot(&self) -> Vec<u8>;
    /// The state hash clients report for the same tick.
    fn hash(&self) -> u64;
}

/// How a [`Sequencer`] runs its room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequencerConfig {
    /// When ticks are sealed.
    pub policy: Policy,
    /// Ticks per second: the `Deadline` clock, and what clients are told.
    pub tick_rate: u32,
    /// Input delay in ticks clients are told to use; a joining seat's first
    /// `delay` ticks run neutral. With `adaptive`, the delay to start with.
    pub delay: u32,
    /// Let the input delay follow the network (`WaitForAll` only): each
    /// player's client says which delay would keep its stalls at the
    /// target rate ([`Message::DelayWanted`]), and the room plays at the
    /// largest any playing seat wants, within `min..=max`. It rises at
    /// once and falls a tick at a time, each once the wants stayed lower
    /// for a second; a change takes effect at the
    /// open tick, where a [`SystemEvent::DelayChanged`] says so in every
    /// client's stream. `None` (the default): the delay stays `delay`.
    pub adaptive: Option<AdaptiveDelay>,
    /// Seats in the room.
    pub max_seats: u16,
    /// Spectators allowed at once.
    pub max_spectators: u16,
    /// How far past the open tick (beyond `delay`) a client may stamp input.
    pub max_lead: u32,
    /// Sealed frames kept, for clients that missed some and for joiners
    /// replaying the game from its start.
    pub history: u32,
    /// The largest encoded input taken.
    pub max_input_len: usize,
    /// The largest datagram sent or taken.
    pub max_datagram: usize,
    /// Datagrams a connection may send per second (a token bucket: bursts
    /// up to a second's worth).
    pub max_datagrams_per_sec: u32,
    /// Inputs a connection may send per second, resends included (a token
    /// bucket, like datagrams).
    pub max_inputs_per_sec: u32,
    /// The game fingerprint required; `None` adopts the first client's.
    pub fingerprint: Option<u64>,
    /// How inputs are delta-coded; clients naming another codec are refused.
    pub codec: InputCodec,
    /// Silence after which a connection is dropped.
    pub timeout: Duration,
    /// How long after its last datagram a client is sent one again when it
    /// may lack something.
    pub resend_interval: Duration,
    /// How often an idle client is sent a datagram anyway.
    pub keepalive_interval: Duration,
    /// How often round-trip time is measured.
    pub ping_interval: Duration,
    /// Votes held for checkpoints without a verdict yet.
    pub checksum_window: usize,
    /// The room's first tick.
    pub first_tick: Tick,
    /// Keys the resume tokens handed out with each seat. A server facing the
    /// internet fills it from a CSPRNG (the default, all zeros, makes tokens
    /// anyone can compute: fine for tests and a LAN, nothing more).
    pub secret: [u8; 32],
    /// How long a seat's connection must have been silent before its resume
    /// token moves the seat to a new connection: a live player's seat is
    /// never taken over, whoever holds its token.
    pub resume_after_silence: Duration,
    /// How long a player's seat is held for its resume token once its
    /// connection has been dropped for silence (`timeout`), counted from
    /// the last datagram heard, or once its transport closed. Meanwhile the
    /// seat runs neutral input and holds nobody up (under `WaitForAll` a
    /// silent player is abandoned after `abandon_after` while its
    /// connection is still open). When the grace ends the seat is `Left`.
    /// A grace no longer than `timeout` holds no seat.
    pub seat_grace: Duration,
    /// The longest a pause lasts: then play resumes by itself, whoever asked
    /// for it.
    pub max_pause: Duration,
    /// How many pauses each seat may ask for over the match.
    pub pauses_per_seat: u32,
    /// How a client joins a game under way. `false`: it replays the stream
    /// from the room's first tick, which only works while the history
    /// holds it. `true`: it is handed a snapshot of the game's state taken
    /// by an in-step client (the donor) right after a tick, then the frames
    /// after it; it plays once it says it caught up, and until then its
    /// seat runs neutral input and holds nobody up. The game must answer
    /// [`Event::SnapshotRequested`](crate::Event::SnapshotRequested).
    pub snapshot_join: bool,
    /// With `snapshot_join`, a client whose state the seated majority (or
    /// the server's own simulation) found diverged is resynced: told so
    /// ([`Message::Resync`](crate::wire::Message::Resync)), handed a
    /// snapshot from a client that agrees with the majority, and run on
    /// from it as a joiner is (its seat runs neutral until it caught up).
    /// After this many resyncs of the same seat it is dropped instead
    /// (its game keeps diverging); 0 never resyncs.
    pub max_resyncs: u32,
    /// With `snapshot_join`, how many ticks into the game a joiner still
    /// replays it instead (cheaper than a snapshot early on, and needs no
    /// donor).
    pub snapshot_join_after: u32,
    /// After a join, how long to wait for more joiners to share one
    /// snapshot: each new one restarts the wait, up to `join_wait_max`.
    pub join_wait: Duration,
    /// The longest the first joiner waits for others.
    pub join_wait_max: Duration,
    /// How long a donor may go without sending a chunk of its snapshot
    /// before another client is asked instead.
    pub donor_timeout: Duration,
    /// Limits on snapshots passing through.
    pub snapshot: SnapshotLimits,
    /// With a [`Simulation`], the ticks whose state hash it folds into its
    /// hash chain, whose checkpoints are the references: every tick this
    /// many ticks from the first. Clients must report the same ticks (by
    /// default every one) to be told of a divergence.
    pub sim_check_every: u32,
    /// Send every seated client the roster ([`Message::Member`]): each
    /// seat's holder, a commitment to its resume token, and its contact
    /// (as [`set_contact`](Sequencer::set_contact) gave it). It is what the
    /// players need to carry a match on without its host (host mode); it
    /// shows every player every other player's contact (an address, with
    /// UDP), so it is off by default.
    pub share_roster: bool,
}

impl Default for SequencerConfig {
    fn default() -> Self {
        Self {
            policy: Policy::WaitForAll {
                abandon_after: Duration::from_secs(10),
            },
            tick_rate: 30,
            delay: 3,
            adaptive: None,
            max_seats: 8,
            max_spectators: 8,
            max_lead: 8,
            history: 4096,
            max_input_len: 256,
            max_datagram: 1200,
            max_datagrams_per_sec: 400,
            max_inputs_per_sec: 4000,
            fingerprint: None,
            codec: InputCodec::Opaque,
            timeout: Duration::from_secs(15),
            resend_interval: Duration::from_millis(40),
            keepalive_interval: Duration::from_millis(250),
            ping_interval: Duration::from_secs(1),
            checksum_window: 512,
            first_tick: Tick::ZERO,
            secret: [0; 32],
            resume_after_silence: Duration::from_secs(1),
            seat_grace: Duration::from_secs(30),
            max_pause: Duration::from_secs(60),
            pauses_per_seat: 3,
            snapshot_join: false,
            snapshot_join_after: 90,
            max_resyncs: 3,
            join_wait: Duration::from_millis(300),
            join_wait_max: Duration::from_secs(3),
            donor_timeout: Duration::from_secs(3),
            snapshot: SnapshotLimits::default(),
            sim_check_every: 1,
            share_roster: false,
        }
    }
}

impl SequencerConfig {
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
        limits::tick_rate(self.tick_rate)?;
        limits::delay(self.delay)?;
        if let Some(a) = &self.adaptive {
            a.validate_from(self.delay)?;
        }
        limits::lead(self.max_lead)?;
        bad(
            self.max_seats == 0 || usize::from(self.max_seats) > wire::MAX_SEATS,
            "max_seats must be 1 to 256",
        )?;
        bad(self.history < 16, "history must hold at least 16 frames")?;
        limits::input_len(self.max_input_len)?;
        bad(self.timeout.is_zero(), "timeout must be positive")?;
        bad(self.max_pause.is_zero(), "max_pause must be positive")
    }
}

/// Why a datagram was not taken. The sequencer's state is unchanged except
/// for what the error says (a violating connection is closed and told why).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SequencerError {
    /// The bytes are malformed or from another protocol version.
    #[error("malformed datagram: {0}")]
    Wire(#[from] WireError),
    /// A stranger sent something other than a Hello.
    #[error("{0} is not connected and sent no hello")]
    NotConnected(PeerId),
    /// The connection broke a rule and is being closed.
    #[error("{peer} dropped ({code:?}): {text}")]
    Dropped {
        /// The connection.
        peer: PeerId,
        /// The error it is told.
        code: ErrorCode,
        /// Details.
        text: String,
    },
    /// The connection was refused.
    #[error("{peer} refused: {reason}")]
    Refused {
        /// The connection.
        peer: PeerId,
        /// Why.
        reason: Rejection,
    },
    /// In host mode, a datagram for this player's own client, refused by
    /// it (see [`HostedSession`](super::HostedSession)).
    #[error("refused by this player's client: {0}")]
    Client(crate::DatagramError),
}

/// Counters for a sequencer.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct SequencerStats {
    /// The next tick to seal.
    pub open: Tick,
    /// Ticks sealed.
    pub sealed: u64,
    /// Times sealing had to wait on a player (`WaitForAll`).
    pub stalls: u64,
    /// The input delay in force, in ticks.
    pub delay: u32,
    /// Times the input delay changed (`adaptive`).
    pub delay_changes: u64,
    /// Inputs that arrived after their tick was sealed (`Deadline`).
    pub late_inputs: u64,
    /// Inputs received again (resends).
    pub duplicate_inputs: u64,
    /// Datagrams sent.
    pub datagrams_sent: u64,
    /// Bytes sent.
    pub bytes_sent: u64,
    /// Datagrams received.
    pub datagrams_received: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Datagrams from clients lost on the way, as their pongs' counts
    /// show (an estimate: clients report them).
    pub datagrams_lost_in: u64,
    /// Datagrams to clients lost on the way, likewise.
    pub datagrams_lost_out: u64,
    /// Ticks sealed per second, over the last second.
    pub tick_rate: Option<f64>,
    /// Connections refused.
    pub rejects: u64,
    /// Connections dropped for breaking a rule.
    pub violations: u64,
    /// Checksum mismatches reported.
    pub desyncs: u64,
    /// Connected players.
    pub players: usize,
    /// Connected spectators.
    pub spectators: usize,
    /// Frames held in the history.
    pub history: usize,
    /// Inputs waiting to be sealed, over all seats.
    pub pending_inputs: usize,
}

#[derive(Debug, Clone)]
enum Closing {
    Error(ErrorCode, String),
    Bye(ByeReason, String),
}

#[derive(Debug, Clone)]
enum Reply {
    Reject(Rejection),
    /// A datagram written already (an answer to a stranger).
    Raw(Vec<u8>),
}

#[derive(Debug, Clone)]
struct Conn {
    peer: PeerId,
    seat: Option<PlayerId>,
    /// The first frame the client lacks (its datagrams' base).
    next: Tick,
    welcome_pending: bool,
    /// When it was heard (silence counts from its Hello), the send
    /// schedule, ping and pong, the traffic each way.
    link: Link,
    ack_pending: bool,
    checks: Relayed,
    datagram_rate: TokenBucket,
    /// Extra datagrams allowed while it sends or receives a snapshot: a
    /// window of chunks, and an acknowledgement for each, outrun the usual
    /// rate.
    snapshot_rate: TokenBucket,
    input_rate: TokenBucket,
    closing: Option<Closing>,
    /// Joining a game under way from a snapshot.
    join: Option<Join>,
    /// Resumed by replaying the game from its start: the history is kept
    /// for it like a joiner's, until it has caught up with the open tick.
    replaying: bool,
    /// It is being resynced: the id its `Resync` message carries, and the
    /// verdict that found it.
    resync: Option<(u32, Checkpoint)>,
    /// Its checkpoints before this tick describe a state since replaced.
    judged_from: Tick,
    /// The majority found its state diverged: its questions about where
    /// are passed on.
    diverged: bool,
    /// The donor of its last resync's snapshot: blamed if it diverges
    /// again at once.
    resync_donor: Option<PeerId>,
    /// How many times it was resynced, as a spectator (a seat's count
    /// outlives its connections).
    resyncs: u32,
    /// How other players can reach it, as the application sees it.
    contact: Vec<u8>,
    /// The roster version of each seat's entry it acknowledged.
    roster_acked: Vec<u32>,
}

/// Where a client joining from a snapshot stands.
#[derive(Debug, Clone)]
enum Join {
    /// Its snapshot has not reached the sequencer yet: nothing is sent but
    /// control messages.
    Waiting,
    /// Its snapshot is on the way, and the frames after it.
    Receiving(Box<SnapshotSender>),
    /// It has its snapshot and runs frames until it catches up.
    CatchingUp,
}

/// The snapshot being fetched from a donor for the waiting joiners.
#[derive(Debug, Clone)]
struct Fetch {
    id: u32,
    tick: Tick,
    donor: PeerId,
    /// When the donor was asked or last sent a chunk not seen before.
    progress: Instant,
    /// When it was asked: however it drips, it has ten donor timeouts.
    asked: Instant,
    /// Whether any chunk came (until then the request is repeated).
    started: bool,
    receiver: SnapshotReceiver,
}

#[derive(Debug, Clone)]
struct Seat<I> {
    /// The connection playing it; none while the seat is held for a
    /// player whose connection was dropped.
    conn: Option<PeerId>,
    /// What takes the seat back on a new connection.
    token: ResumeToken,
    /// The token before the last resume, still good until the connection
    /// it moved the seat to shows it got its Welcome (a datagram without a
    /// Hello): a client whose Welcome was lost still holds only this one.
    previous: Option<ResumeToken>,
    /// When the player was last heard, once its connection was dropped for
    /// silence: the seat is held until `seat_grace` after it.
    lost: Option<Instant>,
    /// Inputs are due from this tick; earlier ticks run neutral.
    from: Tick,
    /// Inputs waiting for their tick, by the tick they will run on.
    pending: BTreeMap<Tick, I>,
    /// One past the highest stamped tick received. Clients send every
    /// unacknowledged input in every datagram, oldest first, so anything
    /// stamped earlier either arrived with it or was skipped on purpose (a
    /// late client stamping further ahead).
    received: Tick,
    /// The input it ran last.
    last: I,
    /// How early (+) or late (-) its latest input arrived, in ticks.
    slack: i32,
    /// When it last sent an input not seen before (or joined): a player
    /// that keeps its connection alive but sends no input is still
    /// abandoned when the game waits on it.
    last_input: Instant,
    /// Since when the open tick has been waiting on it.
    waited_since: Option<Instant>,
    /// Whether it plays: a seat joining from a snapshot runs neutral input
    /// and holds nobody up until its client caught up.
    live: bool,
    /// The newest pause frame it asked for: a duplicated or delayed request
    /// is not a new one.
    pause_asked: Option<Tick>,
    /// Held for a player that was playing a moment ago under the host that
    /// left (host migration): its inputs, handed over, run until it is back,
    /// and it is back in step (no input delay to stamp its way up).
    handed_over: bool,
    /// The input delay its client last said it wants (`adaptive`).
    wants: Option<u32>,
    /// Held after a takeover for the player that reported it from this
    /// peer: only a Hello from there takes it back (the token travelled
    /// to candidates that may not all be honest).
    bound: Option<PeerId>,
}

impl<I> Seat<I> {
    /// Its inputs are due from `tick` on (if not already later); earlier
    /// ticks run neutral, and its acknowledgement tells its client so.
    fn due_from(&mut self, tick: Tick) {
        self.from = self.from.max(tick);
        self.received = self.received.max(self.from);
    }
}

/// A room's sequencer: admits connections, seats players, decides which tick
/// each input runs on and sends every sealed tick to every client.
///
/// Sans-IO like every session: feed it datagrams and the time, drain
/// datagrams and events. One iteration: `handle_datagram` for each datagram,
/// `handle_timeout(now)` (which seals due ticks), then `poll_transmit` until
/// `None`, and `poll_event` for what to log.
///
/// ```
/// use lockstep_core::sequenced::{ClientConfig, ClientSession, Sequencer, SequencerConfig};
/// use lockstep_core::{Instant, PeerId};
///
/// let now = Instant::ZERO;
/// let mut room = Sequencer::<u8>::new(SequencerConfig::default(), now)?;
/// let mut alice = ClientSession::<u8>::new(ClientConfig::default(), PeerId(0), now)?;
/// let mut buf = Vec::new();
/// // Alice's Hello reaches the room as connection 7; the Welcome comes back.
/// alice.handle_timeout(now);
/// let t = alice.poll_transmit(&mut buf).expect("hello");
/// room.handle_datagram(PeerId(7), &buf[..t.len], now)?;
/// let t = room.poll_transmit(&mut buf).expect("welcome");
/// alice.handle_datagram(PeerId(0), &buf[..t.len], now)?;
/// assert!(alice.connected());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Sequencer<I: Input> {
    config: SequencerConfig,
    fingerprint: Option<u64>,
    /// A room taken over: the first tick it sealed itself. A survivor that
    /// comes back claiming frames past it ran the old host's frames the
    /// takeover replaced.
    taken_over_at: Option<Tick>,
    /// Tokens of seats given up because their players ran replaced frames:
    /// a Hello with one is told why, again (at most one per seat).
    replaced: Vec<ResumeToken>,
    now: Instant,
    started: Instant,
    conns: Vec<Conn>,
    seats: Vec<Option<Seat<I>>>,
    /// Sealed frames `history_base..open`.
    history: Vec<Frame<I>>,
    history_base: Tick,
    open: Tick,
    /// System events for ticks not sealed yet.
    tick_events: BTreeMap<Tick, Vec<SystemEvent>>,
    /// The `Deadline` clock: when it started and at which tick.
    clock: Option<(Instant, Tick)>,
    paused: bool,
    /// When the current pause began.
    paused_at: Option<Instant>,
    /// Pauses each seat has asked for, whoever held it.
    pauses_used: Vec<u32>,
    /// The frame the current (or last) pause is known by: above every
    /// earlier one, so a client never takes a new pause for an echo of the
    /// last, even when no tick was sealed between them.
    pause_frame: Tick,
    lifted: Option<Tick>,
    /// Seats the open tick waits on (`WaitForAll`).
    waiting: Vec<PlayerId>,
    /// Checkpoint votes and verdicts, and questions between clients.
    referee: Referee,
    /// How many times each seat was resynced.
    resyncs: BTreeMap<PlayerId, u32>,
    /// Donors whose snapshot left a resynced client diverged again: asked
    /// only when nobody else can donate (a few, the newest).
    suspects: VecDeque<PeerId>,
    /// Nobody could donate: when to look again.
    join_retry: Option<Instant>,
    next_resync: u32,
    replies: VecDeque<(PeerId, Reply)>,
    events: Events<SequencerEvent>,
    stats: SequencerStats,
    /// Ticks sealed, for the tick rate achieved.
    seal_rate: Rate,
    tokens: SecretStream,
    cursor: usize,
    /// The snapshot being fetched for joiners.
    fetch: Option<Fetch>,
    /// When the first and the latest joiner still waiting for a snapshot
    /// arrived.
    join_asked: Option<(Instant, Instant)>,
    next_snapshot_id: u32,
    /// Clients that failed to donate since the last snapshot was ready.
    bad_donors: Vec<PeerId>,
    /// Donors whose state was over the cap since the last snapshot was
    /// ready: one could lie; two mean the joiners cannot get in.
    too_large: Vec<PeerId>,
    /// The last donor, told its snapshot arrived whole until it stops
    /// sending chunks.
    thanked: Option<(PeerId, wire::SnapshotAck)>,
    /// The game, when the sequencer runs it itself.
    simulation: Option<Box<dyn Simulation<I>>>,
    /// The seat playing alone, in `Deadline`'s single-player mode.
    solo: Option<PlayerId>,
    /// The roster as last shared, per seat, with `share_roster`.
    roster: Vec<RosterEntry>,
    /// The latest roster version (bumped by each entry that changes).
    roster_version: u32,
    /// Where single-player mode's pace started (time, tick): a player
    /// alone runs at most `delay + max_lead` ticks ahead of the tick rate.
    solo_pace: Option<(Instant, Tick)>,
    /// Since when the open tick has waited on someone (`WaitForAll`),
    /// before it says so.
    blocked_since: Option<Instant>,
    /// The input delay in force.
    delay: u32,
    /// Since when the largest want has stayed below the delay
    /// (`adaptive`): it falls a tick once that is a second.
    low_since: Option<Instant>,
}

impl<I: Input> Sequencer<I> {
    /// A room with no one in it yet.
    pub fn new(config: SequencerConfig, now: Instant) -> Result<Self, ConfigError> {
        config.validate()?;
        let max_seats = usize::from(config.max_seats);
        let seats = (0..max_seats).map(|_| None).collect();
        Ok(Self {
            fingerprint: config.fingerprint,
            referee: Referee::new(config.checksum_window, false),
            resyncs: BTreeMap::new(),
            suspects: VecDeque::new(),
            join_retry: None,
            next_resync: 1,
            history_base: config.first_tick,
            open: config.first_tick,
            tokens: SecretStream::new(config.secret),
            taken_over_at: None,
            blocked_since: None,
            delay: config.delay,
            low_since: None,
            replaced: Vec::new(),
            config,
            now,
            started: now,
            conns: Vec::new(),
            seats,
            history: Vec::new(),
            tick_events: BTreeMap::new(),
            clock: None,
            paused: false,
            paused_at: None,
            pauses_used: vec![0; max_seats],
            pause_frame: Tick::ZERO,
            lifted: None,
            waiting: Vec::new(),
            replies: VecDeque::new(),
            events: Events::new(EVENT_QUEUE_CAP),
            stats: SequencerStats::default(),
            seal_rate: Rate::default(),
            cursor: 0,
            fetch: None,
            join_asked: None,
            next_snapshot_id: 1,
            bad_donors: Vec::new(),
            too_large: Vec::new(),
            thanked: None,
            simulation: None,
            solo: None,
            solo_pace: None,
            roster: vec![RosterEntry::default(); max_seats],
            roster_version: 0,
        })
    }

    /// Tells the sequencer how other players can reach connection `peer`
    /// (with UDP, the address it is seen at, as text, say): shared in the
    /// roster when [`SequencerConfig::share_roster`] is on, so that a
    /// player can take over as host. At most
    /// [`MAX_CONTACT`](wire::MAX_CONTACT) bytes.
    ///
    /// ```
    /// use lockstep_core::sequenced::{Sequencer, SequencerConfig, SequencerError};
    /// use lockstep_core::{Instant, PeerId};
    /// let mut room = Sequencer::<u8>::new(SequencerConfig::default(), Instant::ZERO)?;
    /// assert_eq!(room.set_contact(PeerId(3), b"192.0.2.7:4000"), Err(SequencerError::NotConnected(PeerId(3))));
    /// # Ok::<(), lockstep_core::ConfigError>(())
    /// ```
    pub fn set_contact(&mut self, peer: PeerId, contact: &[u8]) -> Result<(), SequencerError> {
        if contact.len() > wire::MAX_CONTACT {
            return Err(SequencerError::Wire(WireError::TooLong {
                what: "contact",
                len: contact.len(),
                max: wire::MAX_CONTACT,
            }));
        }
        let i = self
            .conn_index(peer)
            .ok_or(SequencerError::NotConnected(peer))?;
        if self.conns[i].contact != contact {
            // (Called every loop by a host's application: no copy unless
            // it changed.)
            self.conns[i].contact = contact.to_vec();
        }
        Ok(())
    }

    /// Brings the shared roster up to date with the seats: an entry whose
    /// holder, playing state, token or contact changed gets the next
    /// version, and goes out to every seated client until acknowledged.
    fn refresh_roster(&mut self) {
        if !self.config.share_roster {
            return;
        }
        // Runs before every datagram: compares in place, and hashes and
        // copies only what changed.
        for k in 0..self.seats.len() {
            let current = self.seats[k].as_ref().map(|s| {
                let hosts = s.conn == Some(super::HOST_PEER);
                // Nobody reaches the host's own client but the host.
                let contact: &[u8] = s
                    .conn
                    .filter(|_| !hosts)
                    .and_then(|p| self.conn_index(p))
                    .map_or(&[], |i| &self.conns[i].contact);
                // The token its holder surely has: the one before, until
                // it shows it got its new one (its Welcome may be lost).
                (s.live, hosts, s.previous.unwrap_or(s.token), contact)
            });
            let e = &self.roster[k];
            let same = match (&e.holder, &current) {
                (None, None) => true,
                (Some(h), Some((playing, hosts, token, contact))) => {
                    h.playing == *playing
                        && h.hosts == *hosts
                        && h.token == *token
                        && h.contact == *contact
                }
                _ => false,
            };
            // An empty seat never shared needs no entry.
            if same || (e.version == 0 && current.is_none()) {
                continue;
            }
            let holder = current.map(|(playing, hosts, token, contact)| RosterHolder {
                playing,
                hosts,
                token,
                commitment: admission::token_commitment(&token),
                contact: contact.to_vec(),
            });
            self.roster_version = self.roster_version.wrapping_add(1).max(1);
            let e = &mut self.roster[k];
            e.version = self.roster_version;
            e.holder = holder;
        }
    }

    /// The roster entries `c` has not acknowledged, by seat (none for a
    /// spectator, or without `share_roster`).
    fn roster_unacked<'a>(&'a self, c: &'a Conn) -> impl Iterator<Item = usize> + 'a {
        let shared = self.config.share_roster && c.seat.is_some() && c.closing.is_none();
        // Nothing to walk in a room that does not share (has_news asks for
        // every connection).
        let n = if shared { self.roster.len() } else { 0 };
        self.roster[..n]
            .iter()
            .enumerate()
            .filter(move |(k, e)| e.version > c.roster_acked.get(*k).copied().unwrap_or(0))
            .map(|(k, _)| k)
    }

    /// Connection `i` acknowledged `seat`'s entry at `version` (a version
    /// it was never sent changes nothing it is owed).
    fn roster_acked(&mut self, i: usize, seat: PlayerId, version: u32) {
        let Some(e) = self.roster.get(seat.index()) else {
            return;
        };
        if version != e.version {
            return;
        }
        let c = &mut self.conns[i];
        if c.roster_acked.len() < self.roster.len() {
            c.roster_acked.resize(self.roster.len(), 0);
        }
        c.roster_acked[seat.index()] = version;
    }

    /// A room taken over from a host that left (host migration): the
    /// frames sealed before, as the survivors held them, go on from the
    /// tick after the last; each survivor's seat is held for its token,
    /// with the inputs it committed for later ticks (under `WaitForAll` the
    /// room waits for a playing survivor up to `abandon_after`, then holds
    /// its seat as any dropped one's); the first new frame carries
    /// `handover.events`. Survivors come back with
    /// [`ClientSession::reconnect`](super::ClientSession::reconnect),
    /// keeping their state.
    pub fn take_over(
        config: SequencerConfig,
        handover: Handover<I>,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        let mut s = Self::new(config, now)?;
        let next = handover.next;
        // Tokens from a stream of their own: every host of the match may
        // hold the same key, and a token minted again for another seat
        // would let its holder resume that seat. The context (the tick and
        // the survivors' tokens) is new at every takeover.
        let mut context = next.get().to_le_bytes().to_vec();
        for sv in &handover.survivors {
            context.extend_from_slice(&sv.token.0);
        }
        s.tokens = s.tokens.branch(&context);
        s.fingerprint = Some(handover.fingerprint);
        s.taken_over_at = Some(next);
        s.history_base = handover.frames.first().map_or(next, |f| f.tick);
        // The delay in force is the last one the frames set: the config's
        // comes from the frames this host ran, and a change may lie in one
        // handed over that it has not run yet.
        let last_change = handover.frames.iter().rev().find_map(|f| {
            f.events.iter().rev().find_map(|e| match e {
                SystemEvent::DelayChanged { delay } => Some(*delay),
                _ => None,
            })
        });
        if let Some(d) = last_change {
            s.delay = d;
            if let Some(a) = s.config.adaptive.as_mut() {
                a.min = a.min.min(d);
                a.max = a.max.max(d);
            }
        }
        s.history = handover.frames;
        s.open = next;
        for sv in handover.survivors {
            let Some(slot) = s.seats.get_mut(sv.seat.index()) else {
                continue;
            };
            let pending: BTreeMap<Tick, I> =
                sv.inputs.into_iter().filter(|(t, _)| *t >= next).collect();
            let received = pending
                .last_key_value()
                .map_or(next, |(t, _)| t.saturating_add(1));
            // Its inputs are due from its first one (a player seated just
            // before the host went has none for the first ticks), or, with
            // none at all, a delay from now, as a joiner's.
            let from = pending
                .first_key_value()
                .map_or(next.saturating_add(s.delay), |(t, _)| *t);
            *slot = Some(Seat {
                conn: None,
                token: sv.token,
                previous: sv.previous.filter(|p| *p != sv.token),
                lost: Some(now),
                from,
                pending,
                received,
                last: I::default(),
                slack: 0,
                last_input: now,
                waited_since: None,
                live: sv.playing,
                pause_asked: None,
                handed_over: sv.playing,
                wants: None,
                bound: sv.peer,
            });
        }
        for ev in handover.events {
            s.add_tick_event(next, ev);
        }
        s.start_clock();
        Ok(s)
    }

    /// A room whose game the sequencer runs itself (see [`Simulation`]):
    /// `simulation` must be the game's state at the room's first tick.
    pub fn with_simulation(
        config: SequencerConfig,
        now: Instant,
        simulation: Box<dyn Simulation<I>>,
    ) -> Result<Self, ConfigError> {
        let mut s = Self::new(config, now)?;
        s.simulation = Some(simulation);
        s.referee = Referee::new(s.config.checksum_window, true);
        Ok(s)
    }

    /// The game the sequencer runs, if it runs one.
    pub fn simulation(&self) -> Option<&dyn Simulation<I>> {
        self.simulation.as_deref()
    }

    // ----- getters -------------------------------------------------------

    /// The next tick to seal.
    pub fn open_tick(&self) -> Tick {
        self.open
    }

    /// The configuration.
    pub fn config(&self) -> &SequencerConfig {
        &self.config
    }

    /// Seats the open tick is waiting on (`WaitForAll`), empty otherwise.
    pub fn waiting(&self) -> &[PlayerId] {
        &self.waiting
    }

    /// Whether sealing is paused.
    pub fn paused(&self) -> bool {
        self.paused
    }

    /// Whether nobody is connected and no seat is held for a dropped
    /// player (a server keeps the room while one may come back).
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty() && !self.seats.iter().flatten().any(|s| s.lost.is_some())
    }

    /// Connections, with their seats.
    pub fn connections(&self) -> impl Iterator<Item = (PeerId, Option<PlayerId>)> + '_ {
        self.conns.iter().map(|c| (c.peer, c.seat))
    }

    /// Whether `peer` is connected (or being told goodbye).
    pub fn is_connected(&self, peer: PeerId) -> bool {
        self.conns.iter().any(|c| c.peer == peer)
    }

    /// Whether `seat` is held for `token` (its current token, or the one
    /// before while its holder may not have the new one yet).
    pub fn holds_token(&self, seat: PlayerId, token: &ResumeToken) -> bool {
        self.seats
            .get(seat.index())
            .and_then(Option::as_ref)
            .is_some_and(|s| s.token == *token || s.previous.as_ref() == Some(token))
    }

    /// Whether a Hello presenting `token` at `now` would take a seat back
    /// (the token is live and its seat's connection has gone quiet), so a
    /// server can let it in without spending a join ticket.
    pub fn would_resume(&self, hello: &Hello<'_>, now: Instant) -> bool {
        self.resumable(hello)
            .is_some_and(|(seat, _)| self.seat_quiet(seat, now.max(self.now)))
    }

    /// The seat `hello` proves it may take back, and the token it proves:
    /// the seat's own (`false`) or the one before (`true`).
    fn resumable(&self, hello: &Hello<'_>) -> Option<(PlayerId, bool)> {
        let proof = hello.resume?;
        let cookie = hello.cookie.unwrap_or_default();
        let proves =
            |t: &ResumeToken| admission::resume_proof(t, cookie, hello.key.as_ref()) == proof;
        self.seats.iter().enumerate().find_map(|(i, s)| {
            let s = s.as_ref()?;
            let previous = if proves(&s.token) {
                false
            } else if s.previous.as_ref().is_some_and(proves) {
                true
            } else {
                return None;
            };
            Some((PlayerId(i as u16), previous))
        })
    }

    /// Whether `seat`'s connection, if it still has one, has been quiet long
    /// enough for its token to move the seat to another.
    fn seat_quiet(&self, seat: PlayerId, now: Instant) -> bool {
        self.seat_conn(seat).is_none_or(|i| {
            let c = &self.conns[i];
            c.closing.is_some() || c.link.silent_for(now) >= self.config.resume_after_silence
        })
    }

    /// The connection playing `seat`, if any.
    fn seat_conn(&self, seat: PlayerId) -> Option<usize> {
        let peer = self.seats.get(seat.index())?.as_ref()?.conn?;
        self.conn_index(peer)
    }

    /// Whether the history still holds every frame from the room's first
    /// tick, so a new client can join by replaying it.
    pub fn replayable(&self) -> bool {
        self.history_base == self.config.first_tick
    }

    /// The sealed frame for `tick`, if still in the history.
    pub fn frame(&self, tick: Tick) -> Option<&Frame<I>> {
        self.history
            .get(tick.since(self.history_base) as usize)
            .filter(|_| tick >= self.history_base)
    }

    /// Counters.
    pub fn stats(&self) -> SequencerStats {
        let mut s = self.stats.clone();
        s.open = self.open;
        s.delay = self.delay;
        s.tick_rate = self.seal_rate.per_sec(self.now);
        s.players = self
            .conns
            .iter()
            .filter(|c| c.seat.is_some() && c.closing.is_none())
            .count();
        s.spectators = self
            .conns
            .iter()
            .filter(|c| c.seat.is_none() && c.closing.is_none())
            .count();
        s.history = self.history.len();
        s.pending_inputs = self.seats.iter().flatten().map(|s| s.pending.len()).sum();
        s
    }

    /// Ticks sealed and stalls begun so far: the two counters a server
    /// polls after every datagram, without building [`stats`](Self::stats).
    pub fn counters(&self) -> (u64, u64) {
        (self.stats.sealed, self.stats.stalls)
    }

    /// Smoothed round-trip time to `peer`, once measured.
    pub fn rtt(&self, peer: PeerId) -> Option<Duration> {
        self.conns.iter().find(|c| c.peer == peer)?.link.rtt()
    }

    /// Loss each way and bytes per second each way on `peer`'s
    /// connection ("up" is to the client).
    pub fn traffic(&self, peer: PeerId) -> Option<Traffic> {
        let c = self.conns.iter().find(|c| c.peer == peer)?;
        Some(c.link.traffic(self.now))
    }

    // ----- mutators ------------------------------------------------------

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<SequencerEvent> {
        self.events.pop()
    }

    /// Stops sealing ticks until [`resume`](Self::resume).
    pub fn pause(&mut self) {
        if !self.paused {
            self.paused = true;
            self.paused_at = Some(self.now);
            self.pause_frame = match self.lifted {
                Some(l) => self.open.max(l.saturating_add(1)),
                None => self.open,
            };
            self.flush_all();
        }
    }

    /// A seat asks for a pause freezing at `frame`: granted while its budget
    /// lasts; a request repeated or delayed in the network is not new.
    fn pause_asked(&mut self, seat: PlayerId, frame: Tick) {
        let Some(s) = self.seats[seat.index()].as_mut() else {
            return;
        };
        if s.pause_asked.is_some_and(|f| frame <= f) {
            return;
        }
        s.pause_asked = Some(frame);
        // The budget belongs to the seat for the room's life: leaving and
        // coming back does not refill it.
        let used = &mut self.pauses_used[seat.index()];
        if self.paused || *used >= self.config.pauses_per_seat {
            return;
        }
        *used += 1;
        self.pause();
    }

    /// Starts sealing again; the `Deadline` clock restarts from now, so no
    /// burst of ticks catches up the pause.
    pub fn resume(&mut self) {
        if self.paused {
            self.paused = false;
            self.paused_at = None;
            self.lifted = Some(self.pause_frame);
            if self.clock.is_some() {
                self.clock = Some((self.now, self.open));
            }
            if self.solo_pace.is_some() {
                self.solo_pace = Some((self.now, self.open));
            }
            self.flush_all();
        }
    }

    /// Starts the `Deadline` clock at the open tick if it stopped (nobody
    /// was playing).
    fn start_clock(&mut self) {
        if matches!(self.config.policy, Policy::Deadline { .. }) && self.clock.is_none() {
            self.clock = Some((self.now, self.open));
            if self.solo_pace.is_some() {
                self.solo_pace = Some((self.now, self.open));
            }
        }
    }

    /// Closes `peer` with a goodbye (kicked), freeing its seat: the stream
    /// records it as `Abandoned` (it did not choose to leave).
    pub fn kick(&mut self, peer: PeerId, text: &str) {
        if let Some(i) = self.conn_index(peer) {
            self.close(
                i,
                Closing::Bye(ByeReason::Kicked, text.to_owned()),
                DropReason::Kicked,
            );
        }
    }

    /// Sends `peer` its Welcome again (its Hello was repeated where the
    /// server cannot hand the datagram itself to the room, such as a plain
    /// Hello for a sealed connection). Changes nothing else: not even when
    /// `peer` was last heard from.
    pub fn resend_welcome(&mut self, peer: PeerId) {
        if let Some(i) = self.conn_index(peer) {
            let c = &mut self.conns[i];
            c.welcome_pending = true;
            c.link.flush = true;
        }
    }

    /// Ends `peer`'s connection because its transport closed (a WebSocket
    /// closed, say), as if it had timed out, without waiting for the
    /// silence: a player's seat is held for `seat_grace` from its last
    /// datagram (or emptied at once when the grace holds none).
    pub fn disconnect(&mut self, peer: PeerId) {
        if let Some(i) = self.conn_index(peer) {
            let reason = self.silence_reason(i);
            self.close(
                i,
                Closing::Bye(ByeReason::Timeout, "connection closed".into()),
                reason,
            );
        }
    }

    /// How connection `i` ends when it is given up for silence: a player's
    /// seat is held for its resume token, when the grace holds any.
    fn silence_reason(&self, i: usize) -> DropReason {
        if self.conns[i].seat.is_some() && self.config.seat_grace > self.config.timeout {
            DropReason::Lost
        } else {
            DropReason::TimedOut
        }
    }

    /// Says goodbye to everybody (the server is shutting down).
    pub fn shutdown(&mut self, text: &str) {
        for i in 0..self.conns.len() {
            if self.conns[i].closing.is_none() {
                self.close(
                    i,
                    Closing::Bye(ByeReason::Shutdown, text.to_owned()),
                    DropReason::Shutdown,
                );
            }
        }
    }

    // ----- network side --------------------------------------------------

    /// Takes a datagram from `from`.
    pub fn handle_datagram(
        &mut self,
        from: PeerId,
        datagram: &[u8],
        now: Instant,
    ) -> Result<(), SequencerError> {
        self.now = self.now.max(now);
        self.stats.datagrams_received += 1;
        self.stats.bytes_received += datagram.len() as u64;
        let result = match self.conn_index(from) {
            Some(i) => {
                self.conns[i].link.received(now, datagram.len());
                self.take_conn(i, datagram)
            }
            None => self.take_stranger(from, datagram),
        };
        self.seal_due();
        result
    }

    /// Lets timers fire: seals due ticks, drops silent connections, resends.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        let now = self.now;
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            if c.closing.is_none() && c.link.silent_for(now) >= self.config.timeout {
                let reason = self.silence_reason(i);
                self.close(i, Closing::Bye(ByeReason::Timeout, String::new()), reason);
            }
        }
        // A player handed over that is not back within `abandon_after`
        // holds nobody up any more (its seat is held as any dropped one).
        if let Policy::WaitForAll { abandon_after } = self.config.policy {
            for s in self.seats.iter_mut().flatten() {
                if s.handed_over && s.lost.is_some_and(|t| now - t >= abandon_after) {
                    s.handed_over = false;
                }
            }
        }
        for k in 0..self.seats.len() {
            let expired = self.seats[k]
                .as_ref()
                .and_then(|s| s.lost)
                .is_some_and(|t| now - t >= self.config.seat_grace);
            if expired {
                let seat = PlayerId(k as u16);
                self.release_seat(seat, SystemEvent::Left { player: seat });
                self.push_event(SequencerEvent::SeatReleased {
                    seat,
                    tick: self.open,
                });
            }
        }
        if self
            .paused_at
            .is_some_and(|at| now - at >= self.config.max_pause)
        {
            self.resume();
        }
        self.seal_due();
        self.progress_joins();
        self.refresh_roster();
        for i in 0..self.conns.len() {
            let chunk_due = !self.conns[i].link.chunk_starved
                && matches!(&self.conns[i].join, Some(Join::Receiving(tx)) if tx.has_due(now));
            if self.send_due(i) <= now || chunk_due {
                self.conns[i].link.flush = true;
            }
        }
    }

    /// Writes the next datagram to send into `buf`.
    pub fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<Transmit> {
        buf.clear();
        self.refresh_roster();
        if let Some((peer, reply)) = self.replies.pop_front() {
            let mut w = DatagramWriter::new(buf, self.open, self.config.max_datagram);
            let _ = match &reply {
                Reply::Reject(r) => w.push(&Message::Reject(r.as_reason())),
                Reply::Raw(bytes) => {
                    w.finish();
                    buf.clear();
                    buf.extend_from_slice(bytes);
                    return Some(self.sent(peer, buf.len()));
                }
            };
            let len = w.finish();
            return Some(self.sent(peer, len));
        }
        let n = self.conns.len();
        let i = (0..n)
            .map(|k| (self.cursor + k) % n)
            .find(|&i| self.conns[i].link.flush)?;
        self.cursor = (i + 1) % n;
        Some(self.transmit(i, buf))
    }

    /// Like [`poll_transmit`](Self::poll_transmit), for `peer` only: lets a
    /// host pass its own client's traffic across while datagrams for
    /// everyone else stay due here.
    pub(crate) fn poll_transmit_to(&mut self, peer: PeerId, buf: &mut Vec<u8>) -> Option<Transmit> {
        buf.clear();
        let i = self
            .conn_index(peer)
            .filter(|&i| self.conns[i].link.flush)?;
        Some(self.transmit(i, buf))
    }

    /// Builds connection `i`'s datagram into `buf` and marks it sent.
    fn transmit(&mut self, i: usize, buf: &mut Vec<u8>) -> Transmit {
        let carried = self.build(i, buf);
        let now = self.now;
        let c = &mut self.conns[i];
        let peer = c.peer;
        c.link.flush = false;
        c.ack_pending = false;
        c.welcome_pending = c.welcome_pending && c.closing.is_none();
        c.link.sent(now, buf.len(), self.config.ping_interval, true);
        // A snapshot goes out as fast as its window allows (another
        // datagram at once only if this one had room for chunks).
        if let Some(Join::Receiving(tx)) = &c.join
            && carried
            && tx.has_due(now)
        {
            c.link.flush = true;
        }
        if c.closing.is_some() {
            self.conns.remove(i);
            self.cursor = 0;
        }
        self.sent(peer, buf.len())
    }

    /// When [`handle_timeout`](Self::handle_timeout) next needs calling.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut consider = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
        for (i, c) in self.conns.iter().enumerate() {
            consider(self.send_due(i));
            consider(c.link.heard_or_since() + self.config.timeout);
        }
        for seat in self.seats.iter().flatten() {
            if let Some(t) = seat.lost {
                consider(t + self.config.seat_grace);
            }
        }
        if let Some(t) = self.next_seal_at() {
            consider(t);
        }
        if let Some(at) = self.paused_at {
            consider(at + self.config.max_pause);
        }
        if let Some(t) = self.join_due() {
            consider(t);
        }
        if let Some(f) = &self.fetch {
            consider(f.progress + self.config.donor_timeout);
            consider(f.asked + self.config.donor_timeout * 10);
        }
        for c in &self.conns {
            if let Some(Join::Receiving(tx)) = &c.join {
                if let Some(t) = tx.next_resend().filter(|_| !c.link.chunk_starved) {
                    consider(t);
                }
                if let Some(t) = tx.last_progress() {
                    consider(t + self.config.donor_timeout * 3);
                }
                if let Some(t) = tx.started() {
                    consider(t + self.config.donor_timeout * 20);
                }
            }
        }
        // Nothing is sealed in a pause, nor anyone abandoned for holding a
        // tick up: those timers wait for the resume (a deadline that
        // passed meanwhile is acted on then).
        if let (Policy::WaitForAll { abandon_after }, false) = (self.config.policy, self.paused) {
            // Saying whom the room waits on, once it has waited a tick
            // (a time already past was seen to by the last call).
            if let Some(t) = self
                .blocked_since
                .map(|t| t + Duration::from_secs(1) / self.config.tick_rate)
                .filter(|t| self.waiting.is_empty() && *t > self.now)
            {
                consider(t);
            }
            for s in &self.waiting {
                if let Some(seat) = &self.seats[s.index()] {
                    let since = seat.waited_since.unwrap_or(self.now);
                    consider(seat.last_input.max(since) + abandon_after);
                }
            }
        }
        next
    }

    // ----- internals -----------------------------------------------------

    fn sent(&mut self, peer: PeerId, len: usize) -> Transmit {
        self.stats.datagrams_sent += 1;
        self.stats.bytes_sent += len as u64;
        Transmit {
            destination: peer,
            len,
        }
    }

    fn push_event(&mut self, ev: SequencerEvent) {
        self.events.push(ev);
    }

    fn reply(&mut self, peer: PeerId, reply: Reply) {
        if self.replies.len() < REPLY_QUEUE_CAP {
            self.replies.push_back((peer, reply));
        }
    }

    fn conn_index(&self, peer: PeerId) -> Option<usize> {
        self.conns.iter().position(|c| c.peer == peer)
    }

    fn flush_all(&mut self) {
        for c in &mut self.conns {
            c.link.flush = true;
        }
    }

    fn refuse(&mut self, peer: PeerId, reason: Rejection) -> Result<(), SequencerError> {
        self.stats.rejects += 1;
        self.reply(peer, Reply::Reject(reason.clone()));
        self.push_event(SequencerEvent::Rejected {
            peer,
            reason: reason.clone(),
        });
        Err(SequencerError::Refused { peer, reason })
    }

    /// A datagram from a peer with no connection: it must open one. It is
    /// screened as every server screens strangers
    /// ([`screen_stranger`](admission::screen_stranger)), and answered, if
    /// at all, with no more bytes than it had.
    fn take_stranger(&mut self, peer: PeerId, datagram: &[u8]) -> Result<(), SequencerError> {
        let hello = match admission::screen_stranger(datagram, self.config.max_datagram) {
            Ok((_, hello)) => hello,
            Err(unwelcome) => {
                let mut out = Vec::new();
                if let Some(len) = unwelcome.answer(self.open, datagram.len(), &mut out) {
                    out.truncate(len);
                    self.reply(peer, Reply::Raw(out));
                }
                return Err(match unwelcome {
                    admission::Unwelcome::Version(theirs) => {
                        let reason = Rejection::ProtocolMismatch {
                            server: wire::VERSION,
                            client: theirs,
                        };
                        self.stats.rejects += 1;
                        self.push_event(SequencerEvent::Rejected {
                            peer,
                            reason: reason.clone(),
                        });
                        SequencerError::Refused { peer, reason }
                    }
                    admission::Unwelcome::NotOurs => WireError::BadMagic.into(),
                    admission::Unwelcome::TooLarge { len, .. } => WireError::Oversized(len).into(),
                    admission::Unwelcome::Malformed(e) => e.into(),
                    _ => SequencerError::NotConnected(peer),
                });
            }
        };
        self.admit(peer, &hello)
    }

    fn admit(&mut self, peer: PeerId, hello: &Hello<'_>) -> Result<(), SequencerError> {
        match self.fingerprint {
            Some(fp) if fp != hello.fingerprint => {
                return self.refuse(
                    peer,
                    Rejection::GameMismatch {
                        server: fp,
                        client: hello.fingerprint,
                    },
                );
            }
            Some(_) => {}
            None => self.fingerprint = Some(hello.fingerprint),
        }
        if hello.codec != self.config.codec {
            return self.refuse(
                peer,
                Rejection::Other("the room uses another input codec".into()),
            );
        }
        // A known token takes its seat back on this new connection, once the
        // seat's old connection has gone quiet (or was dropped), and is
        // spent doing so.
        if let Some((player, with_previous)) = self.resumable(hello) {
            if !self.seat_quiet(player, self.now) {
                return self.refuse(peer, Rejection::SeatBusy);
            }
            // Held after a takeover for the peer that reported it: the
            // token alone, which candidates saw, does not take it.
            if self.seats[player.index()]
                .as_ref()
                .and_then(|s| s.bound)
                .is_some_and(|b| b != peer)
            {
                return self.refuse(peer, Rejection::BadToken);
            }
            let old = self.seat_conn(player);
            let live = self.seats[player.index()].as_ref().is_some_and(|s| s.live);
            // A survivor of a takeover back for the first time that ran
            // frames past the first one the new host sealed ran the old
            // host's, which the takeover replaced (its claim to hold them
            // was not believed): its state is not the match's any more.
            // (Held for its reporter until it is back, however long that
            // takes.)
            let handed_over = self.seats[player.index()]
                .as_ref()
                .is_some_and(|s| s.bound.is_some());
            let ran_replaced = handed_over
                && hello
                    .resume_from
                    .zip(self.taken_over_at)
                    .is_some_and(|(t, next)| t > next);
            // A player that was playing and still holds the frames up to
            // the one it names is sent the rest from the history.
            let from_history = hello
                .resume_from
                .filter(|t| live && !ran_replaced && *t >= self.history_base && *t <= self.open);
            // Otherwise it is resumed from a snapshot, like a joiner, where a
            // joiner would be (and always if it was joining): its seat runs
            // neutral and holds nobody up until it has caught up again. A
            // joiner starts its join over: the new connection knows nothing
            // of the old one's snapshot. (It replays the game instead, while
            // the history holds it, when nobody else could donate: a room
            // of joiners would wait for ever.)
            let rejoin = from_history.is_none()
                && (!live || self.snapshot_join_now())
                && (self.donor_available(old) || !self.replayable());
            if ran_replaced && !(rejoin && self.config.snapshot_join) {
                // Its seat cannot be played on: nobody waits for it (and a
                // Hello repeated after this answer was lost hears it again).
                if old.is_none() {
                    if let Some(s) = self.seats[player.index()].as_ref()
                        && self.replaced.len() < wire::MAX_SEATS
                    {
                        self.replaced.push(s.token);
                    }
                    self.release_seat(player, SystemEvent::Abandoned { player });
                }
                return self.refuse(peer, replaced_refusal());
            }
            if from_history.is_none() && !rejoin && !self.replayable() {
                return self.refuse(
                    peer,
                    Rejection::Other(
                        "the game has run past its replay history: resuming needs a snapshot"
                            .into(),
                    ),
                );
            }
            let previous = old.map(|i| {
                let previous = self.conns[i].peer;
                self.conns.remove(i);
                self.cursor = 0;
                previous
            });
            let now = self.now;
            if rejoin {
                self.join_asked = Some(self.join_asked.map_or((now, now), |(f, _)| (f, now)));
            }
            let next = match from_history {
                Some(t) => t,
                None if rejoin => self.open,
                None => self.config.first_tick,
            };
            let mut conn = self.new_conn(peer, Some(player), next, rejoin);
            conn.replaying = !rejoin && next < self.open;
            self.conns.push(conn);
            let fresh = ResumeToken(self.tokens.next_secret());
            let due = self.open.saturating_add(self.delay);
            // A joiner that replays the game instead plays at once, as one
            // joining by replay does.
            let replays = !rejoin && !live;
            if let Some(s) = self.seats[player.index()].as_mut() {
                s.conn = Some(peer);
                // The token the client holds stays good until it shows it
                // got the new one.
                if !with_previous {
                    s.previous = Some(s.token);
                }
                s.token = fresh;
                // Back from a drop (its seat ran neutral meanwhile), or
                // replaying: its inputs are due a delay from now, as a
                // joiner's are, so nobody waits while it stamps its way up
                // from where it stopped (its acknowledgement moves it there).
                if ((s.lost.is_some() && s.live) || replays) && !s.handed_over {
                    s.due_from(due);
                }
                s.handed_over = false;
                s.bound = None;
                if replays {
                    s.live = true;
                    s.last_input = now;
                }
                s.lost = None;
                if rejoin {
                    s.live = false;
                    s.pending.clear();
                    s.waited_since = None;
                }
            }
            if replays {
                self.add_tick_event(self.open, SystemEvent::CaughtUp { player });
            }
            // A CaughtUp the old connection earned and no tick carries yet
            // would end the new one's join before it is over.
            if rejoin {
                for events in self.tick_events.values_mut() {
                    events.retain(|e| *e != SystemEvent::CaughtUp { player });
                }
            }
            self.start_clock();
            self.push_event(SequencerEvent::Resumed {
                peer,
                previous,
                seat: Some(player),
            });
            return Ok(());
        }
        // A token no seat holds: taking a new seat instead would hand a
        // client that kept its state someone else's game.
        if let Some(proof) = hello.resume {
            let cookie = hello.cookie.unwrap_or_default();
            if self
                .replaced
                .iter()
                .any(|t| admission::resume_proof(t, cookie, hello.key.as_ref()) == proof)
            {
                return self.refuse(peer, replaced_refusal());
            }
            return self.refuse(peer, Rejection::BadToken);
        }
        // A game under way is joined from a snapshot when the room says so;
        // otherwise by replaying it, while the history holds it all.
        let from_snapshot =
            self.snapshot_join_now() && (self.donor_available(None) || !self.replayable());
        if !from_snapshot && self.history_base > self.config.first_tick {
            return self.refuse(
                peer,
                Rejection::Other(
                    "the game has run past its replay history: joining needs a snapshot".into(),
                ),
            );
        }
        let seat = if hello.spectator {
            let watching = self.conns.iter().filter(|c| c.seat.is_none()).count();
            if watching >= usize::from(self.config.max_spectators) {
                return self.refuse(peer, Rejection::RoomFull);
            }
            None
        } else {
            let Some(free) = self.seats.iter().position(Option::is_none) else {
                return self.refuse(peer, Rejection::RoomFull);
            };
            let player = PlayerId(free as u16);
            let from = self.open.saturating_add(self.delay);
            self.seats[free] = Some(Seat {
                conn: Some(peer),
                token: ResumeToken(self.tokens.next_secret()),
                previous: None,
                lost: None,
                from,
                pending: BTreeMap::new(),
                received: from,
                last: I::default(),
                slack: 0,
                last_input: self.now,
                waited_since: None,
                pause_asked: None,
                handed_over: false,
                wants: None,
                bound: None,
                live: !from_snapshot,
            });
            self.add_tick_event(self.open, SystemEvent::Joined { player });
            self.start_clock();
            Some(player)
        };
        let now = self.now;
        if from_snapshot {
            self.join_asked = Some(
                self.join_asked
                    .map_or((now, now), |(first, _)| (first, now)),
            );
        }
        // A joiner from a snapshot is sent frames from the snapshot's tick
        // on, once it is known.
        let next = if from_snapshot {
            self.open
        } else {
            self.config.first_tick
        };
        let conn = self.new_conn(peer, seat, next, from_snapshot);
        self.conns.push(conn);
        self.push_event(SequencerEvent::Joined {
            peer,
            seat,
            tick: self.open,
            name: hello.name.to_owned(),
        });
        Ok(())
    }

    /// A connection just admitted, sent frames from `next`.
    fn new_conn(&self, peer: PeerId, seat: Option<PlayerId>, next: Tick, join: bool) -> Conn {
        let now = self.now;
        Conn {
            peer,
            seat,
            next,
            welcome_pending: true,
            link: Link::ready(now),
            ack_pending: false,
            checks: Relayed::default(),
            datagram_rate: TokenBucket::full(self.config.max_datagrams_per_sec, now),
            snapshot_rate: TokenBucket::full(SNAPSHOT_DATAGRAMS_PER_SEC, now),
            input_rate: TokenBucket::full(self.config.max_inputs_per_sec, now),
            closing: None,
            join: join.then_some(Join::Waiting),
            replaying: false,
            resync: None,
            judged_from: Tick::ZERO,
            diverged: false,
            resync_donor: None,
            resyncs: 0,
            contact: Vec::new(),
            roster_acked: Vec::new(),
        }
    }

    /// Records `ev` for `tick`, in the order things happened: a seat left
    /// and taken again within one tick reads `[Left, Joined]`.
    fn add_tick_event(&mut self, tick: Tick, ev: SystemEvent) {
        let list = self.tick_events.entry(tick).or_default();
        if !list.contains(&ev) {
            list.push(ev);
        }
    }

    /// Closes connection `i`: it is sent `closing` once, and its seat is
    /// empty from the open tick.
    fn close(&mut self, i: usize, closing: Closing, reason: DropReason) {
        let c = &mut self.conns[i];
        if c.closing.is_some() {
            return;
        }
        c.closing = Some(closing);
        c.link.flush = true;
        let (peer, seat, last_heard) = (c.peer, c.seat, c.link.heard_or_since());
        if let Some(s) = seat {
            if reason == DropReason::Lost
                && let Some(held) = self.seats[s.index()].as_mut()
            {
                held.conn = None;
                held.lost = Some(last_heard);
            } else {
                let ev = match reason {
                    DropReason::Left => SystemEvent::Left { player: s },
                    _ => SystemEvent::Abandoned { player: s },
                };
                self.release_seat(s, ev);
            }
        }
        if let DropReason::Violation(..) = reason {
            self.stats.violations += 1;
        }
        self.push_event(SequencerEvent::Closed {
            peer,
            seat,
            tick: self.open,
            reason,
        });
    }

    /// Empties `seat` from the open tick on, saying so with `ev`.
    fn release_seat(&mut self, seat: PlayerId, ev: SystemEvent) {
        self.seats[seat.index()] = None;
        // A newcomer on the seat starts with a clean record.
        self.resyncs.remove(&seat);
        self.add_tick_event(self.open, ev);
        self.waiting.retain(|w| *w != seat);
    }

    fn violation(&mut self, i: usize, code: ErrorCode, text: String) -> SequencerError {
        let peer = self.conns[i].peer;
        self.close(
            i,
            Closing::Error(code, text.clone()),
            DropReason::Violation(code, text.clone()),
        );
        SequencerError::Dropped { peer, code, text }
    }

    fn take_conn(&mut self, i: usize, datagram: &[u8]) -> Result<(), SequencerError> {
        if self.conns[i].closing.is_some() {
            return Ok(());
        }
        let now = self.now;
        {
            let c = &mut self.conns[i];
            c.link.heard(now);
            let transferring = matches!(c.join, Some(Join::Receiving(_)))
                || self.fetch.as_ref().is_some_and(|f| f.donor == c.peer);
            let allowed =
                (transferring && c.snapshot_rate.take(1, now)) || c.datagram_rate.take(1, now);
            if !allowed {
                return Err(self.violation(
                    i,
                    ErrorCode::RateLimited,
                    "too many datagrams per second".into(),
                ));
            }
        }
        if datagram.len() > self.config.max_datagram {
            return Err(self.violation(
                i,
                ErrorCode::TooLarge,
                format!(
                    "datagram of {} bytes over the {}-byte limit",
                    datagram.len(),
                    self.config.max_datagram
                ),
            ));
        }
        let d = match Datagram::decode(datagram, self.open) {
            Ok(d) => d,
            Err(e) => return Err(self.violation(i, ErrorCode::Malformed, e.to_string())),
        };
        let seat = self.conns[i].seat;
        // Decode and check everything before acting on any of it.
        let mut inputs: Vec<(Tick, I)> = Vec::new();
        let mut scratch = Vec::new();
        for m in &d.messages {
            if let Message::Inputs(msg) = m {
                let Some(s) = seat else {
                    return Err(self.violation(
                        i,
                        ErrorCode::Violation,
                        "a spectator sent inputs".into(),
                    ));
                };
                for run in &msg.runs {
                    if run.seat != s {
                        return Err(self.violation(
                            i,
                            ErrorCode::Violation,
                            format!("input for {} from the connection playing {}", run.seat, s),
                        ));
                    }
                    let decoded = match run.decode::<I>() {
                        Ok(v) => v,
                        Err(e) => {
                            return Err(self.violation(i, ErrorCode::Malformed, e.to_string()));
                        }
                    };
                    for (k, input) in decoded.into_iter().enumerate() {
                        scratch.clear();
                        input.encode(&mut scratch);
                        if scratch.len() > self.config.max_input_len {
                            return Err(self.violation(
                                i,
                                ErrorCode::TooLarge,
                                format!(
                                    "input of {} bytes over the {}-byte limit",
                                    scratch.len(),
                                    self.config.max_input_len
                                ),
                            ));
                        }
                        inputs.push((run.start.saturating_add(k as u32), input));
                    }
                }
            }
        }
        let horizon = self
            .open
            .saturating_add(self.max_delay() + self.config.max_lead + 1);
        if let Some((t, _)) = inputs.iter().find(|(t, _)| *t > horizon) {
            let text = format!("input for tick {t}, beyond tick {horizon}");
            return Err(self.violation(i, ErrorCode::Violation, text));
        }
        {
            let c = &mut self.conns[i];
            let n = u32::try_from(inputs.len()).unwrap_or(u32::MAX);
            if !c.input_rate.take(n, self.now) {
                return Err(self.violation(
                    i,
                    ErrorCode::RateLimited,
                    "too many inputs per second".into(),
                ));
            }
            // A joiner cannot know where its frames start before its
            // snapshot's first chunk: its position counts from then on.
            if !Self::before_snapshot(c) {
                c.next = c.next.max(d.base.min(self.open));
                // Caught up once within a lead of the open tick.
                c.replaying =
                    c.replaying && self.open.since(c.next) > self.delay + self.config.max_lead;
            }
            // A spectator says nothing when it has caught up: its position
            // shows it.
            if c.seat.is_none()
                && matches!(c.join, Some(Join::CatchingUp))
                && c.next.saturating_add(1) >= self.open
            {
                c.join = None;
            }
        }

        let mut hello_seen = false;
        let peer = self.conns[i].peer;
        // The last donor, once it sends no more chunks, got our thanks.
        if self.thanked.is_some_and(|(p, _)| p == peer)
            && !d
                .messages
                .iter()
                .any(|m| matches!(m, Message::SnapshotChunk(_)))
        {
            self.thanked = None;
        }
        let mut checks = Incoming::default();
        for m in &d.messages {
            checks.take(m);
        }
        self.take_checks(i, &checks);
        for m in d.messages {
            match m {
                Message::Hello(_) => hello_seen = true,
                Message::Pause { frame } => {
                    if let Some(s) = seat {
                        self.pause_asked(s, frame);
                    }
                }
                Message::Resume { .. } if seat.is_some() => self.resume(),
                Message::Ping { stamp } => self.conns[i].link.pinged_by(stamp, now),
                Message::Pong {
                    stamp,
                    held_ms,
                    received,
                    sent,
                } => {
                    let c = &mut self.conns[i];
                    let pong = (stamp, held_ms, received, sent);
                    let (to_it, from_it) = c.link.ponged(now, pong);
                    self.stats.datagrams_lost_out += to_it;
                    self.stats.datagrams_lost_in += from_it;
                }
                Message::Bye { .. } => {
                    self.close(
                        i,
                        Closing::Bye(ByeReason::Leaving, String::new()),
                        DropReason::Left,
                    );
                    return Ok(());
                }
                Message::SnapshotChunk(c) => self.take_chunk(i, &c),
                Message::SnapshotAck(a) => {
                    let done = match self.conns[i].join.as_mut() {
                        Some(Join::Receiving(tx)) => {
                            tx.take_ack(&a, now);
                            tx.done()
                        }
                        _ => false,
                    };
                    if done {
                        self.conns[i].join = Some(Join::CatchingUp);
                    }
                }
                Message::CaughtUp { .. } => self.caught_up(i),
                Message::MemberAck { seat, version } => self.roster_acked(i, seat, version),
                Message::DelayWanted { delay } => {
                    if let Some(s) = seat.and_then(|s| self.seats[s.index()].as_mut()) {
                        s.wants = Some(delay);
                    }
                }
                _ => {}
            }
        }
        self.conns[i].welcome_pending = hello_seen;
        // It has its Welcome, and the token in it: the one before is spent.
        if !hello_seen && let Some(s) = seat.and_then(|s| self.seats[s.index()].as_mut()) {
            s.previous = None;
        }
        if let Some(s) = seat {
            for (t, input) in inputs {
                self.accept_input(s, t, input);
            }
            self.conns[i].ack_pending = true;
        }
        Ok(())
    }

    /// A chunk of the snapshot being fetched, from its donor (anyone else's
    /// chunks are ignored).
    fn take_chunk(&mut self, i: usize, chunk: &wire::SnapshotChunk<'_>) {
        let peer = self.conns[i].peer;
        let now = self.now;
        if self
            .thanked
            .is_some_and(|(p, a)| p == peer && a.id == chunk.id)
        {
            // It missed our last acknowledgement: say it again.
            self.conns[i].link.flush = true;
            return;
        }
        let Some(f) = self
            .fetch
            .as_mut()
            .filter(|f| f.donor == peer && f.id == chunk.id)
        else {
            return;
        };
        f.started = true;
        self.conns[i].link.flush = true;
        let before = f.receiver.progress().map_or(0, |p| p.2);
        let taken = f.receiver.take(chunk);
        if f.receiver.progress().map_or(0, |p| p.2) > before || matches!(taken, Ok(Some(_))) {
            f.progress = now;
        }
        match taken {
            Ok(None) => {}
            Ok(Some(snapshot)) if snapshot.tick != f.tick => {
                let reason = format!(
                    "a snapshot after tick {} instead of {}",
                    snapshot.tick, f.tick
                );
                self.donor_failed(reason);
            }
            Ok(Some(snapshot)) => {
                self.thanked = f.receiver.current_ack().map(|a| (f.donor, a));
                let donor = f.donor;
                self.deliver(&snapshot, Some(donor));
            }
            Err(e @ SnapshotError::TooLarge { .. }) => {
                self.too_large_claim(e);
            }
            Err(e) => self.donor_failed(e.to_string()),
        }
    }

    /// Hands `snapshot` to every joiner waiting for one.
    fn deliver(&mut self, snapshot: &crate::snapshot::Snapshot, donor: Option<PeerId>) {
        self.fetch = None;
        self.join_retry = None;
        self.bad_donors.clear();
        self.too_large.clear();
        self.join_asked = None;
        let chunk_len = self.config.max_datagram.saturating_sub(160);
        let id = self.next_snapshot_id;
        self.next_snapshot_id = id.wrapping_add(1);
        // Compressed once; every joiner's sender shares the bytes.
        let tx = match SnapshotSender::new(id, snapshot, chunk_len, &self.config.snapshot) {
            Ok(tx) => tx,
            Err(e) => {
                self.refuse_waiting_joiners(&e);
                return;
            }
        };
        let mut joiners = 0;
        for c in &mut self.conns {
            if !matches!(c.join, Some(Join::Waiting)) || c.closing.is_some() {
                continue;
            }
            c.join = Some(Join::Receiving(Box::new(tx.for_another(id))));
            // A client being resynced is sent the frames up to the
            // snapshot's tick it lacks, then the rest (see `build`).
            let after = snapshot.tick.saturating_add(1);
            c.next = if c.resync.is_some() {
                c.next.min(after)
            } else {
                after
            };
            c.judged_from = after;
            c.resync_donor = donor.filter(|_| c.resync.is_some());
            c.link.flush = true;
            joiners += 1;
        }
        self.push_event(SequencerEvent::SnapshotReady {
            tick: snapshot.tick,
            bytes: snapshot.bytes.len(),
            joiners,
        });
    }

    /// The donor says its state is over the cap. Every donor's state is
    /// about as large: once two say so (or nobody else could), the joiners
    /// cannot get in. One alone could be lying to keep them out.
    fn too_large_claim(&mut self, e: SnapshotError) {
        let Some(donor) = self.fetch.as_ref().map(|f| f.donor) else {
            return;
        };
        if !self.too_large.contains(&donor) {
            self.too_large.push(donor);
        }
        let others = self.conns.iter().any(|c| {
            c.closing.is_none()
                && c.join.is_none()
                && c.peer != donor
                && !self.too_large.contains(&c.peer)
                && !self.bad_donors.contains(&c.peer)
        });
        if self.too_large.len() >= 2 || !others {
            self.fetch = None;
            self.too_large.clear();
            self.refuse_waiting_joiners(&e);
        } else {
            self.donor_failed(e.to_string());
        }
    }

    /// Closes every joiner still waiting for a snapshot, telling it why.
    fn refuse_waiting_joiners(&mut self, e: &SnapshotError) {
        for i in 0..self.conns.len() {
            if matches!(self.conns[i].join, Some(Join::Waiting)) {
                let text = format!("cannot join the game under way: {e}");
                self.close(
                    i,
                    Closing::Error(ErrorCode::TooLarge, text.clone()),
                    DropReason::Violation(ErrorCode::TooLarge, text),
                );
            }
        }
    }

    /// The donor being asked failed: another is asked at once.
    fn donor_failed(&mut self, reason: String) {
        if let Some(f) = self.fetch.take() {
            self.bad_donors.push(f.donor);
            self.push_event(SequencerEvent::SnapshotFailed {
                donor: f.donor,
                reason,
            });
            self.join_asked = Some((Instant::ZERO, Instant::ZERO));
        }
    }

    /// A joiner says it caught up: a player's seat plays from the open tick
    /// plus the delay, and the stream says so at the open tick.
    fn caught_up(&mut self, i: usize) {
        if !matches!(self.conns[i].join, Some(Join::CatchingUp)) {
            return;
        }
        let (peer, seat) = (self.conns[i].peer, self.conns[i].seat);
        self.conns[i].join = None;
        let open = self.open;
        let from = open.saturating_add(self.delay);
        if let Some(player) = seat
            && let Some(s) = self.seats[player.index()].as_mut()
        {
            s.live = true;
            s.due_from(from);
            s.last_input = self.now;
            // A joiner may have missed a change (one in a frame before its
            // snapshot's tick, after its Welcome): the frame it goes live
            // at states the delay its inputs are due by.
            let delay = self.delay;
            let stated = self.tick_events.get(&open).is_some_and(|evs| {
                evs.iter()
                    .rev()
                    .take_while(|e| !matches!(e, SystemEvent::CaughtUp { .. }))
                    .any(|e| *e == SystemEvent::DelayChanged { delay })
            });
            if self.config.adaptive.is_some() && !stated {
                let evs = self.tick_events.entry(open).or_default();
                evs.push(SystemEvent::DelayChanged { delay });
            }
            self.add_tick_event(open, SystemEvent::CaughtUp { player });
            self.start_clock();
        }
        self.push_event(SequencerEvent::CaughtUp {
            peer,
            seat,
            tick: open,
        });
    }

    /// When the joiners waiting may stop waiting for others to share their
    /// snapshot.
    fn join_due(&self) -> Option<Instant> {
        if self.fetch.is_some() {
            return None;
        }
        let (first, last) = self.join_asked?;
        // A client being resynced does not wait for joiners to share with.
        let resync = self
            .conns
            .iter()
            .any(|c| c.resync.is_some() && matches!(c.join, Some(Join::Waiting)));
        let due = if resync {
            last
        } else {
            (last + self.config.join_wait).min(first + self.config.join_wait_max)
        };
        Some(self.join_retry.map_or(due, |r| due.max(r)))
    }

    /// Asks a donor for a snapshot once joiners have waited long enough,
    /// and replaces a donor that went away or quiet; closes a joiner that
    /// stopped acknowledging its snapshot (it would be sent the window
    /// again and again for nothing).
    fn progress_joins(&mut self) {
        let now = self.now;
        let stalled_after = self.config.donor_timeout * 3;
        let longest = self.config.donor_timeout * 20;
        for i in 0..self.conns.len() {
            let stalled = matches!(&self.conns[i].join, Some(Join::Receiving(tx))
                if tx.last_progress().is_some_and(|t| now - t >= stalled_after)
                    || tx.started().is_some_and(|t| now - t >= longest));
            if stalled && self.conns[i].closing.is_none() {
                let text = "stopped acknowledging its snapshot".to_owned();
                self.close(
                    i,
                    Closing::Error(ErrorCode::Violation, text.clone()),
                    DropReason::Violation(ErrorCode::Violation, text),
                );
            }
        }
        let waiting = self
            .conns
            .iter()
            .any(|c| matches!(c.join, Some(Join::Waiting)) && c.closing.is_none());
        if !waiting {
            self.fetch = None;
            self.join_asked = None;
            return;
        }
        if let Some(f) = &self.fetch {
            let gone = self
                .conn_index(f.donor)
                .is_none_or(|i| self.conns[i].closing.is_some());
            if gone {
                self.donor_failed("it left".into());
            } else if now - f.progress >= self.config.donor_timeout {
                self.donor_failed("it went quiet".into());
            } else if now - f.asked >= self.config.donor_timeout * 10 {
                self.donor_failed("it sends too slowly".into());
            } else {
                return;
            }
        }
        if self.join_asked.is_none() {
            self.join_asked = Some((now, now));
        }
        if self.join_due().is_some_and(|t| t > now) {
            return;
        }
        // A sequencer that runs the game hands over its own state, after
        // the last tick sealed.
        if let Some(sim) = &self.simulation {
            let tick = self.open.saturating_sub(1).max(self.config.first_tick);
            let snapshot = crate::snapshot::Snapshot::new(tick, sim.snapshot());
            self.deliver(&snapshot, None);
            return;
        }
        // The donor: a client that is not joining itself, closest to the
        // open tick (it runs the requested tick soonest), then nearest.
        let open = self.open;
        // Once the seated majority has agreed on a state, a client that
        // agreed with it donates (a spectator's state is nobody's reference)
        // while there is one, and one that handed out a state found wrong
        // at once only if nobody else can.
        let voters = self.referee.voters();
        let donor = self
            .conns
            .iter()
            .filter(|c| {
                c.closing.is_none() && c.join.is_none() && !self.bad_donors.contains(&c.peer)
            })
            .min_by_key(|c| {
                (
                    !voters.is_empty() && !voters.contains(&c.peer),
                    self.suspects.contains(&c.peer),
                    open.since(c.next.min(open)),
                    c.link.rtt().unwrap_or(Duration::MAX),
                )
            })
            .map(|c| c.peer);
        let Some(donor) = donor else {
            // Everyone left is waiting for a state nobody has: while the
            // game can still be replayed, they are told to come back and
            // replay it (a player's seat is held for it; its resume takes
            // the replay, since nobody could donate).
            let all_waiting = self
                .conns
                .iter()
                .all(|c| c.closing.is_some() || matches!(c.join, Some(Join::Waiting)));
            if all_waiting && self.simulation.is_none() && self.replayable() {
                for i in 0..self.conns.len() {
                    if self.conns[i].closing.is_none() {
                        let reason = self.silence_reason(i);
                        self.close(
                            i,
                            Closing::Bye(
                                ByeReason::Timeout,
                                "nobody can hand you the game's state: reconnect to replay it"
                                    .into(),
                            ),
                            reason,
                        );
                    }
                }
                return;
            }
            // Nobody to ask (or everyone failed): try them all again later.
            self.bad_donors.clear();
            self.join_asked = Some((now, now));
            self.join_retry = Some(now + self.config.join_wait);
            return;
        };
        let id = self.next_snapshot_id;
        self.next_snapshot_id = id.wrapping_add(1);
        // The state after the open tick, once sealed; while nothing is
        // sealed (a pause, nobody playing), after the last tick sealed,
        // which an in-step donor holds already.
        let sealing = !self.paused && self.anyone_live();
        let tick = if sealing {
            open
        } else {
            open.saturating_sub(1).max(self.config.first_tick)
        };
        self.fetch = Some(Fetch {
            id,
            tick,
            donor,
            progress: now,
            asked: now,
            started: false,
            receiver: SnapshotReceiver::new(self.config.snapshot.clone()),
        });
        if let Some(i) = self.conn_index(donor) {
            self.conns[i].link.flush = true;
        }
        self.push_event(SequencerEvent::SnapshotAsked { donor, tick, id });
    }

    fn accept_input(&mut self, seat: PlayerId, stamped: Tick, input: I) {
        let open = self.open;
        let deadline = matches!(self.config.policy, Policy::Deadline { .. });
        let Some(s) = self.seats[seat.index()].as_mut() else {
            return;
        };
        if !s.live || stamped < s.from || stamped < s.received {
            self.stats.duplicate_inputs += 1;
            return;
        }
        s.received = stamped.saturating_add(1);
        s.last_input = self.now;
        s.slack = i32::try_from(i64::from(stamped.get()) - i64::from(open.get())).unwrap_or(0);
        let mut at = stamped;
        if at < open {
            if !deadline {
                return;
            }
            self.stats.late_inputs += 1;
            at = open;
        }
        while s.pending.contains_key(&at) {
            at = at.saturating_add(1);
        }
        s.pending.insert(at, input);
    }

    /// A client found diverged is resynced, where the room allows it: it
    /// waits for a snapshot as a joiner does, on the same connection; a
    /// seat resynced `max_resyncs` times already is dropped instead.
    fn resync(&mut self, peer: PeerId, verdict: Checkpoint) {
        if !self.config.snapshot_join || self.config.max_resyncs == 0 {
            return;
        }
        let Some(i) = self.conn_index(peer) else {
            return;
        };
        let c = &mut self.conns[i];
        if c.closing.is_some() || c.join.is_some() {
            return;
        }
        let seat = c.seat;
        // Diverged again, on the state it was handed: its donor may have
        // lied, and hands nobody its state again.
        if let Some(d) = c.resync_donor.take() {
            if self.suspects.len() >= SUSPECTS {
                self.suspects.pop_front();
            }
            self.suspects.push_back(d);
        }
        let count = match seat {
            Some(s) => {
                let n = self.resyncs.entry(s).or_insert(0);
                *n += 1;
                *n
            }
            None => {
                c.resyncs += 1;
                c.resyncs
            }
        };
        // A fetch from this very client would hand its own state back.
        if self.fetch.as_ref().is_some_and(|f| f.donor == peer) {
            self.fetch = None;
        }
        if count > self.config.max_resyncs {
            let text = format!("its game diverged {count} times");
            self.close(
                i,
                Closing::Error(ErrorCode::Violation, text.clone()),
                DropReason::Violation(ErrorCode::Violation, text),
            );
            return;
        }
        self.referee.forget(peer);
        let id = self.next_resync;
        self.next_resync = self.next_resync.wrapping_add(1);
        let c = &mut self.conns[i];
        c.join = Some(Join::Waiting);
        c.resync = Some((id, verdict));
        c.link.flush = true;
        if let Some(player) = seat {
            if let Some(s) = self.seats[player.index()].as_mut() {
                s.live = false;
                s.pending.clear();
                s.waited_since = None;
            }
            for events in self.tick_events.values_mut() {
                events.retain(|e| *e != SystemEvent::CaughtUp { player });
            }
        }
        let now = self.now;
        self.join_asked = Some(self.join_asked.map_or((now, now), |(f, _)| (f, now)));
        self.push_event(SequencerEvent::Resync { peer, seat, count });
    }

    /// A client's checkpoints, questions and answers about its state.
    fn take_checks(&mut self, i: usize, msgs: &Incoming<'_>) {
        let (peer, seat) = (self.conns[i].peer, self.conns[i].seat);
        // Acknowledgements ride on the next datagram: frames go every tick.
        self.conns[i].checks.took(msgs, &self.referee);
        let seated = self.seats.iter().flatten().count();
        // A client joining (or being resynced) runs a state not yet judged:
        // its checkpoints count once it caught up.
        let judged = self.conns[i].join.is_none();
        let from = self.conns[i].judged_from;
        for &cp in msgs.checkpoints.iter().filter(|c| judged && c.tick >= from) {
            if cp.tick >= self.open {
                continue;
            }
            for v in self.referee.vote(seat, peer, cp, seated) {
                self.stats.desyncs += 1;
                if let Verdicted::Desync { peer, verdict, .. } = v {
                    if let Some(j) = self.conn_index(peer) {
                        self.conns[j].diverged = true;
                    }
                    self.resync(peer, verdict);
                }
                let ev = match v {
                    Verdicted::Desync { verdict, peer, got } => SequencerEvent::Desync {
                        tick: verdict.tick,
                        peer,
                        expected: verdict.value,
                        got,
                    },
                    Verdicted::Split { tick, hashes } => {
                        SequencerEvent::ChecksumSplit { tick, hashes }
                    }
                };
                self.push_event(ev);
            }
        }
        let now = self.now;
        // Only a client found diverged asks, and only about ticks the
        // clients still hold: anything else is passed to nobody.
        let low = self.open.saturating_sub(self.config.checksum_window as u32);
        let ticks: Vec<Tick> = msgs
            .query
            .map(|(_, t)| {
                t.iter()
                    .copied()
                    .filter(|t| *t >= low && *t < self.open)
                    .collect()
            })
            .unwrap_or_default();
        if let Some((id, _)) = msgs.query
            && self.conns[i].diverged
            && !ticks.is_empty()
            && self.conns[i].checks.may_ask(now)
        {
            let ticks = ticks.as_slice();
            let live = |p: PeerId| {
                self.conns
                    .iter()
                    .any(|c| c.peer == p && c.closing.is_none() && !Self::before_snapshot(c))
            };
            match self.referee.route(peer, id, ticks, live) {
                Routed::Forward { to, id } => {
                    for to in to {
                        if let Some(j) = self.conn_index(to) {
                            self.conns[j].checks.query = Some((id, ticks.to_vec()));
                            self.conns[j].link.flush = true;
                        }
                    }
                }
                Routed::Answer(entries) => {
                    self.conns[i].checks.answer = Some((id, entries));
                    self.conns[i].link.flush = true;
                }
                Routed::Nowhere => {}
            }
        }
        if let Some((id, entries)) = msgs.answer
            && let Some((asker, answer)) = self.referee.answered(peer, id, entries)
            && let Some(j) = self.conn_index(asker)
        {
            self.conns[j].checks.answer = Some(answer);
            self.conns[j].link.flush = true;
        }
    }

    fn next_seal_at(&self) -> Option<Instant> {
        if self.paused {
            return None;
        }
        let (start, first) = self.clock?;
        let n = u64::from(self.open.since(first)) + 1;
        let micros = n.saturating_mul(1_000_000) / u64::from(self.config.tick_rate);
        Some(start + Duration::from_micros(micros))
    }

    /// The largest delay a client may be stamping with: with `adaptive`,
    /// one that fell a moment ago still has input in flight for it.
    fn max_delay(&self) -> u32 {
        self.config
            .adaptive
            .as_ref()
            .map_or(self.delay, |a| a.max.max(self.delay))
    }

    /// With `adaptive` under `WaitForAll`: plays at the largest delay a
    /// playing seat wants, rising at once, falling a tick at a time once
    /// the wants stayed below the delay for a second.
    /// The change takes effect at the open tick, in every stream.
    fn adapt_delay(&mut self) {
        let Some(a) = &self.config.adaptive else {
            return;
        };
        if !matches!(self.config.policy, Policy::WaitForAll { .. }) || self.paused {
            return;
        }
        let Some(wanted) = self
            .seats
            .iter()
            .flatten()
            .filter(|s| s.live && s.conn.is_some())
            .filter_map(|s| s.wants)
            .max()
        else {
            return;
        };
        let wanted = a.clamp(wanted);
        // A rise at once; a fall a tick at a time, each once the wants
        // stayed below the delay for a second (a player wanting low and
        // high in turn cannot make every lead fall and fill again).
        let wanted = if wanted > self.delay {
            self.low_since = None;
            wanted
        } else if wanted == self.delay {
            self.low_since = None;
            return;
        } else {
            let since = *self.low_since.get_or_insert(self.now);
            if self.now - since < Duration::from_secs(1) {
                return;
            }
            self.low_since = Some(self.now);
            self.delay - 1
        };
        self.delay = wanted;
        self.stats.delay_changes += 1;
        // One change per tick: a later one replaces an earlier one not
        // sealed yet, in its place, unless a seat went live after it (its
        // inputs are due from the delay before): then it follows.
        let open = self.open;
        let events = self.tick_events.entry(open).or_default();
        let change = SystemEvent::DelayChanged { delay: wanted };
        match events
            .iter()
            .rposition(|e| matches!(e, SystemEvent::DelayChanged { .. }))
        {
            Some(i)
                if !events[i..]
                    .iter()
                    .any(|e| matches!(e, SystemEvent::CaughtUp { .. })) =>
            {
                events[i] = change;
            }
            _ => events.push(change),
        }
        self.flush_all();
    }

    /// Seals every tick that is due.
    fn seal_due(&mut self) {
        self.adapt_delay();
        let mut sealed = false;
        loop {
            if self.paused || self.open.next().is_none() {
                break;
            }
            match self.config.policy {
                Policy::Deadline { .. } => {
                    // Nobody playing (joiners play once caught up): stop
                    // the clock rather than seal empty frames for nobody;
                    // the next player restarts it.
                    if !self.anyone_live() {
                        self.clock = None;
                        break;
                    }
                    // Single-player mode: a player alone has its input for
                    // the open tick sealed as it arrives, with no wait for
                    // the clock (which then counts from a tick and a round
                    // trip later, sealing ticks it sends nothing for: a game
                    // committing every tick always comes first).
                    let solo = self.solo_seat();
                    if self.solo != solo {
                        self.switch_solo(solo);
                    }
                    // Never faster than the tick rate allows, give or take
                    // the lead a client may have.
                    let in_pace = self.solo_pace.is_none_or(|(t0, k0)| {
                        let due = (self.now - t0).as_micros() * u128::from(self.config.tick_rate)
                            / 1_000_000;
                        u128::from(self.open.since(k0))
                            < due + u128::from(self.delay + self.config.max_lead)
                    });
                    let ready = in_pace
                        && solo
                            .and_then(|p| self.seats[p.index()].as_ref())
                            .is_some_and(|s| s.pending.contains_key(&self.open));
                    if ready {
                        self.seal_one();
                        // A tick more, and the player's round trip: its
                        // next input has time to come.
                        let period = Duration::from_secs(1) / self.config.tick_rate;
                        let rtt = solo
                            .and_then(|p| self.seat_conn(p))
                            .and_then(|i| self.conns[i].link.rtt())
                            .unwrap_or_default()
                            .min(SOLO_MAX_RTT);
                        self.clock = Some((self.now + period + rtt, self.open));
                        sealed = true;
                        continue;
                    }
                    match self.next_seal_at() {
                        Some(at) if at <= self.now => {}
                        _ => break,
                    }
                }
                Policy::WaitForAll { abandon_after } => {
                    if !self.anyone_live() {
                        self.waiting.clear();
                        self.blocked_since = None;
                        break;
                    }
                    let blocked = self.blocked();
                    if !blocked.is_empty() {
                        // Give up on whoever has been silent too long.
                        let mut dropped = false;
                        for s in &blocked {
                            // Silence is about inputs, not datagrams: keeping
                            // the connection alive holds nobody up for long.
                            // It counts from when the game began waiting on
                            // the seat, since nobody can send input while
                            // the game waits on someone else.
                            let now = self.now;
                            let seat = self.seats[s.index()].as_mut();
                            let silent = seat.is_none_or(|seat| {
                                let since = *seat.waited_since.get_or_insert(now);
                                now - seat.last_input.max(since) >= abandon_after
                            });
                            let seat = self.seats[s.index()].as_ref();
                            let conn = seat
                                .and_then(|seat| seat.conn)
                                .and_then(|p| self.conn_index(p));
                            if let (true, Some(i)) = (silent, conn) {
                                self.close(
                                    i,
                                    Closing::Bye(
                                        ByeReason::Timeout,
                                        "abandoned: the game waited on your input too long".into(),
                                    ),
                                    DropReason::Abandoned,
                                );
                                dropped = true;
                            }
                        }
                        if dropped {
                            continue;
                        }
                        let blocked = if self.someone_ahead() {
                            blocked
                        } else {
                            Vec::new()
                        };
                        // Inputs for a tick arrive a little apart: the room
                        // is waiting on someone (and says so) once the open
                        // tick has waited a tick period.
                        let period = Duration::from_secs(1) / self.config.tick_rate;
                        let since = (!blocked.is_empty())
                            .then(|| *self.blocked_since.get_or_insert(self.now));
                        self.blocked_since = since;
                        let shown = if since.is_some_and(|t| self.now - t >= period) {
                            blocked
                        } else {
                            Vec::new()
                        };
                        if self.waiting != shown {
                            if self.waiting.is_empty() && !shown.is_empty() {
                                self.stats.stalls += 1;
                            }
                            self.waiting = shown;
                            self.flush_all();
                        }
                        break;
                    }
                }
            }
            self.waiting.clear();
            self.blocked_since = None;
            self.seal_one();
            sealed = true;
        }
        if sealed {
            self.flush_all();
        }
    }

    /// Whether anyone could hand a joiner the game's state: the sequencer's
    /// own game, or a client (other than connection `except`) that is not
    /// joining itself.
    fn donor_available(&self, except: Option<usize>) -> bool {
        self.simulation.is_some()
            || self
                .conns
                .iter()
                .enumerate()
                .any(|(k, c)| Some(k) != except && c.closing.is_none() && c.join.is_none())
    }

    /// Whether a client arriving now joins from a snapshot: the room says
    /// so, and the game is far enough under way.
    fn snapshot_join_now(&self) -> bool {
        self.config.snapshot_join
            && self.open.since(self.config.first_tick) >= self.config.snapshot_join_after.max(1)
    }

    /// The one seat that plays, when only one does (`Deadline`'s
    /// single-player mode).
    fn solo_seat(&self) -> Option<PlayerId> {
        let mut live = self
            .seats
            .iter()
            .enumerate()
            .filter(|(_, s)| s.as_ref().is_some_and(|s| s.live && s.conn.is_some()))
            .map(|(i, _)| PlayerId(i as u16));
        let first = live.next();
        live.next().is_none().then_some(first).flatten()
    }

    /// Enters or leaves single-player mode. Leaving it, the player is told
    /// its input came late, so it stamps its next input `delay` ticks ahead
    /// again (the ticks between run neutral for it: nothing it committed is
    /// dropped or run twice).
    fn switch_solo(&mut self, solo: Option<PlayerId>) {
        if let Some(was) = self.solo
            && solo.is_none()
            && let Some(s) = self.seats[was.index()].as_mut()
        {
            s.slack = s.slack.min(-1);
        }
        if solo.is_none() {
            // The clock takes over from now, whatever wait solo mode set.
            self.solo_pace = None;
            if self.clock.is_some_and(|(at, _)| at > self.now) {
                self.clock = Some((self.now, self.open));
            }
        } else if self.solo.is_none() || self.solo_pace.is_none() {
            self.solo_pace = Some((self.now, self.open));
        }
        self.solo = solo;
        self.flush_all();
    }

    /// Whether any seat plays (is taken by a connected player and, if it
    /// joined from a snapshot, caught up).
    fn anyone_live(&self) -> bool {
        self.seats
            .iter()
            .flatten()
            .any(|s| s.live && s.conn.is_some())
    }

    /// Seats without input for the open tick. While every seat lacks it, the
    /// tick is simply in the future; `waiting` only names seats holding up
    /// others who already sent theirs.
    fn blocked(&self) -> Vec<PlayerId> {
        let t = self.open;
        self.seats
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let s = s.as_ref()?;
                // A held seat (its connection dropped) holds nobody up; one
                // handed over by a host that left does, while its player
                // is on its way back.
                let here = s.conn.is_some() || s.handed_over;
                (s.live && here && t >= s.from && !s.pending.contains_key(&t))
                    .then_some(PlayerId(i as u16))
            })
            .collect()
    }

    fn someone_ahead(&self) -> bool {
        self.seats
            .iter()
            .flatten()
            .any(|s| s.live && s.received > self.open && self.open >= s.from)
    }

    fn seal_one(&mut self) {
        let t = self.open;
        let missing = match self.config.policy {
            Policy::Deadline { missing } => missing,
            Policy::WaitForAll { .. } => MissingInput::Neutral,
        };
        let inputs = self
            .seats
            .iter_mut()
            .map(|s| {
                let s = s.as_mut()?;
                s.waited_since = None;
                if t < s.from || !s.live {
                    return Some(I::default());
                }
                Some(match s.pending.remove(&t) {
                    Some(input) => {
                        s.last = input.clone();
                        input
                    }
                    // A held seat's player is not there to hold a key down.
                    None => match missing {
                        MissingInput::RepeatLast if s.conn.is_some() => s.last.clone(),
                        _ => I::default(),
                    },
                })
            })
            .collect();
        let events = self.tick_events.remove(&t).unwrap_or_default();
        let frame = Frame {
            tick: t,
            inputs,
            events,
        };
        if let Some(sim) = self.simulation.as_mut() {
            sim.step(&frame);
            // Its chain gives the references: clients reporting the same
            // ticks are told when they differ.
            if t.since(self.config.first_tick)
                .is_multiple_of(self.config.sim_check_every.max(1))
            {
                self.referee.simulated(t, sim.hash());
            }
        }
        self.history.push(frame);
        self.stats.sealed += 1;
        self.seal_rate.add(self.now, 1);
        self.open = t.saturating_add(1);
        let keep = self.config.history as usize;
        if self.history.len() >= keep + keep / 2 {
            let mut cut = self.history.len() - keep;
            // Joiners need the frames after their snapshot, and a client
            // replaying the game (one resumed while nobody could donate) the
            // frames from its start: kept for them, up to eight times the
            // history.
            let joiners_from = self
                .conns
                .iter()
                .filter(|c| c.closing.is_none() && (c.join.is_some() || c.replaying))
                .map(|c| c.next)
                // A joiner still waiting gets the snapshot being fetched,
                // and the frames after its tick; while the game can still be
                // replayed from its start, it stays so (if every donor goes,
                // the joiners replay it instead of waiting for ever).
                .chain(self.fetch.as_ref().map(|f| f.tick.saturating_add(1)))
                .chain(
                    (self.replayable()
                        && self
                            .conns
                            .iter()
                            .any(|c| matches!(c.join, Some(Join::Waiting))))
                    .then_some(self.config.first_tick),
                )
                .min();
            if let Some(from) = joiners_from
                && self.history.len() < keep.saturating_mul(8)
            {
                cut = cut.min(from.since(self.history_base.min(from)) as usize);
            }
            self.history.drain(..cut);
            self.history_base = self.history_base.saturating_add(cut as u32);
            for i in 0..self.conns.len() {
                if self.conns[i].next < self.history_base && self.conns[i].closing.is_none() {
                    // A player's seat is held: it may come back on a new
                    // connection and get a snapshot.
                    let (kind, reason) = match self.silence_reason(i) {
                        DropReason::Lost => (ByeReason::Timeout, DropReason::Lost),
                        _ => (ByeReason::Kicked, DropReason::FellBehind),
                    };
                    self.close(
                        i,
                        Closing::Bye(kind, "fell further behind than the history".into()),
                        reason,
                    );
                }
            }
        }
    }

    fn send_due(&self, i: usize) -> Instant {
        let c = &self.conns[i];
        let interval = if c.link.sent_any() && self.has_news(c) {
            self.config.resend_interval
        } else {
            self.config.keepalive_interval
        };
        c.link.send_due(self.started, interval)
    }

    fn has_news(&self, c: &Conn) -> bool {
        c.closing.is_some()
            || self.roster_unacked(c).next().is_some()
            || c.welcome_pending
            || c.ack_pending
            || c.next < self.open
            || !self.waiting.is_empty()
            || self.paused
            || c.checks.has_news(
                &self.referee,
                !Self::before_snapshot(c) || c.resync.is_some(),
                self.now,
            )
    }

    /// Whether `c` is joining and has not got its snapshot yet: nothing but
    /// the snapshot is of use to it.
    fn before_snapshot(c: &Conn) -> bool {
        matches!(c.join, Some(Join::Waiting | Join::Receiving(_)))
    }

    /// Builds connection `i`'s datagram into `buf`; says whether it carried
    /// snapshot chunks.
    fn build(&mut self, i: usize, buf: &mut Vec<u8>) -> bool {
        let now = self.now;
        let c = &self.conns[i];
        let mut w = DatagramWriter::new(buf, self.open, self.config.max_datagram);
        // Control messages are bounded far below the minimum budget; only
        // frames are sized to what is left.
        match &c.closing {
            Some(Closing::Error(code, text)) => {
                w.put(Message::Error {
                    code: *code,
                    text: truncate(text),
                });
                w.finish();
                return false;
            }
            Some(Closing::Bye(reason, text)) => {
                w.put(Message::Bye {
                    reason: *reason,
                    text: truncate(text),
                });
                w.finish();
                return false;
            }
            None => {}
        }
        if c.welcome_pending {
            // The client stamps its first input at `tick + delay`: its
            // seat's first due tick, whatever the delay did since (a
            // change after `tick` reaches it in the frames).
            let from = c
                .seat
                .and_then(|s| self.seats[s.index()].as_ref())
                .map(|s| s.from);
            let delay = from.map_or(self.delay, |f| {
                self.delay.min(f.since(self.config.first_tick.min(f)))
            });
            w.put(Message::Welcome(Welcome {
                seat: c.seat,
                start: self.config.first_tick,
                tick: from.map_or(self.open, |f| f.saturating_sub(delay)),
                deadline: matches!(self.config.policy, Policy::Deadline { .. }),
                tick_rate: self.config.tick_rate,
                delay,
                seats: u32::from(self.config.max_seats),
                token: c
                    .seat
                    .and_then(|s| self.seats[s.index()].as_ref())
                    .map(|s| s.token)
                    .unwrap_or_default(),
                snapshot: c.join.is_some(),
            }));
        }
        for m in c.link.pong(now).into_iter().chain(c.link.ping(now)) {
            w.put(m);
        }
        let seat = c
            .seat
            .and_then(|s| Some((s, self.seats[s.index()].as_ref()?)));
        w.put(Message::Status(Status {
            open: self.open,
            slack: seat.map_or(0, |(_, s)| s.slack),
            waiting: self.waiting.clone(),
        }));
        if self.paused {
            w.put(Message::Pause {
                frame: self.pause_frame,
            });
        } else if let Some(lifted) = self.lifted {
            w.put(Message::Resume { lifted });
        }
        if let Some((id, s)) = seat {
            w.put(Message::Inputs(Inputs {
                acks: vec![(id, s.received)],
                runs: vec![],
            }));
        }
        for k in self.roster_unacked(c).take(ROSTER_PER_DATAGRAM) {
            let e = &self.roster[k];
            w.put(Message::Member(Member {
                seat: PlayerId(k as u16),
                version: e.version,
                holder: e.holder.as_ref().map(|h| Holder {
                    playing: h.playing,
                    hosts: h.hosts,
                    commitment: h.commitment,
                    contact: &h.contact,
                }),
            }));
        }
        // References are of no use to a joiner before its snapshot (and a
        // joiner that never acknowledges them would get them all, again
        // and again).
        let before_snapshot = Self::before_snapshot(c);
        // Until its first chunk shows it took the news.
        if let Some((id, verdict)) = c.resync
            && matches!(c.join, Some(Join::Waiting | Join::Receiving(_)))
        {
            w.put(Message::Resync { id, verdict });
        }
        // A client being resynced still hears the verdict that found it.
        let verdicts = !before_snapshot || c.resync.is_some();
        let mut checks = core::mem::take(&mut self.conns[i].checks);
        checks.write(&self.referee, &mut w, verdicts, now);
        self.conns[i].checks = checks;
        let c = &self.conns[i];
        if let Some((_, ack)) = self.thanked.filter(|(p, _)| *p == c.peer) {
            w.put(Message::SnapshotAck(ack));
        }
        if let Some(f) = self.fetch.as_ref().filter(|f| f.donor == c.peer) {
            if !f.started {
                w.put(Message::SnapshotRequest {
                    id: f.id,
                    tick: f.tick,
                });
            }
            if let Some(ack) = f.receiver.current_ack() {
                w.put(Message::SnapshotAck(ack));
            }
        }
        let next = c.next;
        let resyncing = self.conns[i].resync.is_some();
        // A client being resynced runs on up to its snapshot's tick (its own
        // state there shows how it differs), never past it: frames it ran
        // beyond would be named by its datagrams after it went back.
        let mut end = self.open;
        let mut chunks = false;
        match self.conns[i].join.as_mut() {
            Some(Join::Waiting) if resyncing => match &self.fetch {
                Some(f) => end = end.min(f.tick.saturating_add(1)),
                None => {
                    w.finish();
                    return false;
                }
            },
            // Nothing to run before the snapshot.
            Some(Join::Waiting) => {
                w.finish();
                return false;
            }
            // The snapshot alone: frames are of no use before it is whole
            // (and a joiner that acknowledges slowly gets little of either).
            Some(Join::Receiving(tx)) => {
                let carried = tx.write_due(&mut w, now);
                let starved = !carried && tx.has_due(now);
                let upto = tx.tick().saturating_add(1);
                self.conns[i].link.chunk_starved = starved;
                // Frames too, up to the snapshot's tick, for a client being
                // resynced that has not run that far.
                if !resyncing || next >= upto {
                    w.finish();
                    return carried;
                }
                chunks = carried;
                end = end.min(upto);
            }
            Some(Join::CatchingUp) | None => {}
        }
        // Frames from what the client lacks, as many as fit.
        let from = next.max(self.history_base);
        let end = end.min(from.saturating_add(CATCH_UP_FRAMES)).max(from);
        let a = from.since(self.history_base) as usize;
        let b = end.since(self.history_base) as usize;
        let seats = usize::from(self.config.max_seats);
        let mut n = b.saturating_sub(a);
        let mut body = Vec::new();
        while n > 0 {
            body.clear();
            wire::encode_frames_body(&self.history[a..a + n], seats, &mut body);
            let m = Message::Frames(Frames {
                start: from,
                count: n as u32,
                seats: seats as u32,
                body: &body,
            });
            if w.push(&m).is_ok() {
                break;
            }
            n /= 2;
        }
        w.finish();
        chunks
    }
}

crate::endpoint::forward_to_inherent!(Sequencer, SequencerError);

/// `text`, cut to the protocol's limit on a character boundary.
fn truncate(text: &str) -> &str {
    if text.len() <= wire::MAX_TEXT {
        return text;
    }
    let mut end = wire::MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
