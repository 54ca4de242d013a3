//! The sequencer: one room's authority on which tick each input runs.

use super::{DropReason, MissingInput, Policy, Rejection, SequencerEvent};
use crate::admission::{self, SecretStream};
use crate::checks::{Incoming, Referee, Relayed, Routed, Verdicted};
use crate::endpoint::Transmit;
use crate::error::ConfigError;
use crate::link::{Link, Recent, Redundancy, Resend, Taken, Traffic};
use crate::rules::delay::DelayStep;
use crate::rules::limits;
use crate::rules::pause::{PauseAgreement, PauseChange};
use crate::rules::wait::{self, Waits};
use crate::shared::{Events, Rate};
use crate::snapshot::donor::{self, DonorClock};
use crate::snapshot::{SnapshotError, SnapshotLimits, SnapshotReceiver, SnapshotSender};
use crate::wire::{
    self, ByeReason, Datagram, DatagramWriter, ErrorCode, Frames, Hello, Holder, Inputs, Member,
    Message, Start, Status, Welcome, WireError,
};
use crate::wire::{Checkpoint, ResumeToken};
use crate::{
    AdaptiveDelay, Frame, Input, Instant, PeerId, PlayerId, SystemEvent, Tick, TokenBucket,
};
use core::time::Duration;
use std::collections::{BTreeMap, VecDeque};

mod admit;
mod config;
mod control;
mod join;
mod receive;
mod roster;
mod seal;
mod send;
mod takeover;
mod timers;

pub use config::{SequencerConfig, SequencerError, SequencerStats, Simulation};
use roster::RosterEntry;
pub use takeover::{Handover, Survivor};

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
/// The least time between two changes of a seat's readiness taken (each
/// is a roster entry for every client).
const READY_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
enum Closing {
    Error(ErrorCode, String),
    Bye(ByeReason, String),
}

#[derive(Debug, Clone)]
struct Conn {
    peer: PeerId,
    seat: Option<PlayerId>,
    /// The first frame the client lacks (its datagrams' base): set through
    /// [`Conn::lacks_from`] only, which keeps `frames_sent` with it.
    next: Tick,
    /// Which frames from `next` went to it, and how often.
    frames_sent: Resend,
    /// The first frame sent to it since it connected or began joining from
    /// a snapshot: it holds every frame from there to `next`, so frames
    /// may be coded against one of them.
    sent_from: Option<Tick>,
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
    /// The room's delay changed while it was joining: the copy of its
    /// Welcome it took, or a frame before its snapshot, may have held
    /// another, so the frame it goes live at states the delay.
    delay_moved: bool,
}

impl Conn {
    /// The client lacks frames from `next` on (it said so, or it goes back
    /// to a snapshot's).
    fn lacks_from(&mut self, next: Tick) {
        self.next = next;
        self.frames_sent.lacks_from(next);
    }
}

/// A run of frames as coded for a datagram: its first tick, its length,
/// the tick it is coded against, and the `Frames` body. Sealed frames never
/// change, so the same three always give the same body.
#[derive(Debug, Clone)]
struct Coded {
    start: Tick,
    count: usize,
    reference: Option<Tick>,
    body: Vec<u8>,
}

/// Runs kept coded: enough for every client a newly sealed tick goes to,
/// whether it acknowledged the last one or not.
const CODED: usize = 16;

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
    /// A spectator of a room that watches with a delay: the snapshot it
    /// joins from is held (`Sequencer::held`) until it is that old.
    Held,
}

/// The snapshot being fetched from a donor for the waiting joiners.
#[derive(Debug, Clone)]
struct Fetch {
    id: u32,
    tick: Tick,
    donor: PeerId,
    /// When the donor was asked and last sent a chunk not seen before.
    clock: DonorClock,
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
    /// The stamped ticks taken, in whatever order they came: the first one
    /// lacking is what its client is acknowledged, one past the highest
    /// how far its inputs reach.
    taken: Taken,
    /// The latest inputs its client sent, by the tick stamped: what its
    /// runs may be coded against.
    recent: Recent<I>,
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
    /// The name its player gave (display only), at most
    /// [`MAX_NAME`](wire::MAX_NAME) bytes.
    name: String,
    /// Its player said it is ready to start.
    ready: bool,
    /// When its readiness last changed.
    ready_at: Option<Instant>,
}

impl<I> Seat<I> {
    /// Its inputs are due from `tick` on (if not already later); earlier
    /// ticks run neutral, and its acknowledgement tells its client so.
    fn due_from(&mut self, tick: Tick) {
        self.from = self.from.max(tick);
        self.taken.skip_to(self.from);
    }

    /// It stops playing until its client has caught up (a rejoin from a
    /// snapshot, a resync), with `open` the open tick: what it sent for
    /// ticks not sealed yet is dropped, and so is its acknowledgement of
    /// them (its client, told they arrived, would never send them again,
    /// and the room would wait on it when it plays again).
    fn stop_playing(&mut self, open: Tick) {
        self.live = false;
        self.pending.clear();
        // Its client stamps those ticks again, with other inputs.
        self.recent.clear();
        self.waited_since = None;
        self.taken.forget_from(open.max(self.from));
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
/// It sends plain datagrams: encryption and address validation are the
/// relay's (`lockstep-relay`), in front of it. Its clients leave
/// [`ClientConfig::secret`](crate::sequenced::ClientConfig::secret) `None` (a client with a secret refuses the
/// plain `Welcome` and never gets in).
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
    /// Decodes datagrams in storage kept from one to the next.
    decoder: wire::Decoder,
    /// A run's inputs as decoded, kept from one run to the next.
    decoded: Vec<I>,
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
    /// Runs of frames coded lately, shared by the connections sent the
    /// same run (see `send::coded`).
    coded: Vec<Coded>,
    /// A snapshot held for spectators until it is `spectator_delay` old.
    held: Option<(crate::snapshot::Snapshot, Option<PeerId>)>,
    /// Sealed frames `history_base..open`.
    history: Vec<Frame<I>>,
    history_base: Tick,
    open: Tick,
    /// System events for ticks not sealed yet.
    tick_events: BTreeMap<Tick, Vec<SystemEvent>>,
    /// The `Deadline` clock: when it started and at which tick.
    clock: Option<(Instant, Tick)>,
    /// The pause in flight and the last one lifted.
    pause: PauseAgreement,
    /// When the current pause began.
    paused_at: Option<Instant>,
    /// Pauses each seat has asked for, whoever held it.
    pauses_used: Vec<u32>,
    /// Seats the open tick waits on (`WaitForAll`), once it waited a tick.
    waits: Waits,
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
    /// Answers to strangers, written already (each under the size of what
    /// it answers).
    replies: VecDeque<(PeerId, Vec<u8>)>,
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
    /// The input delay in force.
    delay: u32,
    /// When the delay may step (`adaptive`).
    delay_step: DelayStep,
    /// The match has started (its lobby, if it had one, is closed): ticks
    /// are sealed.
    playing: bool,
    /// The room's owner asked to start the match ([`Sequencer::start_match`]).
    start_asked: bool,
    /// A player has held a seat: once none does, the match is over.
    had_player: bool,
    /// The match's id (see [`Welcome::match_id`]).
    match_id: u64,
    /// Since when at least `min` seated players are ready (`Start::Ready`).
    enough_ready: Option<Instant>,
}

impl<I: Input> Sequencer<I> {
    /// A room with no one in it yet.
    pub fn new(config: SequencerConfig, now: Instant) -> Result<Self, ConfigError> {
        config.validate()?;
        Self::check_lobby_frame(&config)?;
        let max_seats = usize::from(config.max_seats);
        let seats = (0..max_seats).map(|_| None).collect();
        let config_start = config.start;
        let match_id = admission::match_id(&config.secret);
        Ok(Self {
            decoder: wire::Decoder::default(),
            decoded: Vec::new(),
            fingerprint: config.fingerprint,
            referee: Referee::new(config.checksum_window, false, config.keepalive_interval),
            resyncs: BTreeMap::new(),
            suspects: VecDeque::new(),
            join_retry: None,
            next_resync: 1,
            history_base: config.first_tick,
            open: config.first_tick,
            tokens: SecretStream::new(config.secret),
            taken_over_at: None,
            delay: config.delay,
            delay_step: DelayStep::default(),
            replaced: Vec::new(),
            config,
            now,
            started: now,
            conns: Vec::new(),
            seats,
            history: Vec::new(),
            coded: Vec::new(),
            held: None,
            tick_events: BTreeMap::new(),
            clock: None,
            pause: PauseAgreement::default(),
            paused_at: None,
            pauses_used: vec![0; max_seats],
            waits: Waits::default(),
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
            playing: !config_start.has_lobby(),
            start_asked: false,
            had_player: false,
            match_id,
            enough_ready: None,
        })
    }

    /// With a lobby, whether the match's first frame (every seat's
    /// `Joined`, every input neutral) fits in a datagram beside the
    /// control messages that go with it.
    fn check_lobby_frame(config: &SequencerConfig) -> Result<(), ConfigError> {
        /// Room for the header, a status, an acknowledgement, ping and
        /// pong, and the `Frames` message's own fields.
        const BESIDE: usize = 64;
        if !config.start.has_lobby() {
            return Ok(());
        }
        let size = |seats: u16| {
            let n = usize::from(seats);
            let frame = Frame {
                tick: config.first_tick,
                inputs: vec![Some(I::default()); n],
                events: (0..seats)
                    .map(|k| SystemEvent::Joined {
                        player: PlayerId(k),
                    })
                    .collect(),
            };
            let mut body = Vec::new();
            wire::encode_frames_body(core::slice::from_ref(&frame), n, None, &mut body);
            body.len() + BESIDE
        };
        let first_frame = size(config.max_seats);
        if first_frame <= config.max_datagram {
            return Ok(());
        }
        let fits = (1..config.max_seats)
            .rev()
            .find(|n| size(*n) <= config.max_datagram)
            .unwrap_or(0);
        Err(ConfigError::LobbyTooLarge {
            seats: config.max_seats,
            first_frame,
            max_datagram: config.max_datagram,
            fits,
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

    /// A room whose game the sequencer runs itself (see [`Simulation`]):
    /// `simulation` must be the game's state at the room's first tick.
    pub fn with_simulation(
        config: SequencerConfig,
        now: Instant,
        simulation: Box<dyn Simulation<I>>,
    ) -> Result<Self, ConfigError> {
        let mut s = Self::new(config, now)?;
        s.simulation = Some(simulation);
        s.referee = Referee::new(s.config.checksum_window, true, s.config.keepalive_interval);
        Ok(s)
    }

    /// The game fingerprint the room requires: its configuration's, or
    /// the first client's it adopted (`None` until then).
    pub fn fingerprint(&self) -> Option<u64> {
        self.fingerprint
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
        self.waits.named()
    }

    /// Whether sealing is paused.
    pub fn paused(&self) -> bool {
        self.pause.frame().is_some()
    }

    /// Whether nobody is connected and no seat is held for a dropped
    /// player (a server keeps the room while one may come back).
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty() && !self.seats.iter().flatten().any(|s| s.lost.is_some())
    }

    /// Whether the match is over: it started, had players, and every one
    /// has left (no seat is held, not even for a dropped player's token).
    /// A lobby everyone left is not over: nothing was played in it. A server
    /// closes the room: a client that comes under its name later starts a
    /// new match, with a new [`match_id`](Self::match_id).
    pub fn match_over(&self) -> bool {
        self.had_player && self.playing && self.seats.iter().all(Option::is_none)
    }

    /// Whether a spectator still lacks frames the room sealed (one
    /// watching with a delay, at the match's end, is sent the rest).
    pub fn spectators_behind(&self) -> bool {
        self.conns
            .iter()
            .any(|c| c.seat.is_none() && c.closing.is_none() && c.next < self.open)
    }

    /// Whether the match has started: false while its lobby is open (see
    /// [`SequencerConfig::start`]).
    pub fn match_started(&self) -> bool {
        self.playing
    }

    /// Starts the match now, whatever the start rule says (a host pressing
    /// start): the lobby closes at the next call that seals. Does nothing
    /// once it has started.
    pub fn start_match(&mut self) {
        self.start_asked = true;
    }

    /// The match's id, as every client's Welcome carries it (see
    /// [`Welcome::match_id`]).
    pub fn match_id(&self) -> u64 {
        self.match_id
    }

    /// Each seat's player by name, and whether it said it is ready, in seat
    /// order (a dropped player's seat held for it included).
    pub fn players(&self) -> impl Iterator<Item = (PlayerId, &str, bool)> + '_ {
        self.seats
            .iter()
            .enumerate()
            .filter_map(|(k, s)| Some((PlayerId(k as u16), s.as_ref()?)))
            .map(|(p, s)| (p, s.name.as_str(), s.ready))
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

    /// Writes the next datagram to send into `buf`.
    pub fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<Transmit> {
        buf.clear();
        self.refresh_roster();
        if let Some((peer, bytes)) = self.replies.pop_front() {
            buf.extend_from_slice(&bytes);
            return Some(self.sent(peer, buf.len()));
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
        self.refresh_roster();
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

    fn reply(&mut self, peer: PeerId, reply: Vec<u8>) {
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

    /// Records `ev` for `tick`, in the order things happened: a seat left
    /// and taken again within one tick reads `[Left, Joined]`.
    fn add_tick_event(&mut self, tick: Tick, ev: SystemEvent) {
        let list = self.tick_events.entry(tick).or_default();
        // A seat that joined at a tick not sealed yet and leaves at it
        // never was in the stream: its `Joined` goes instead of a `Left`
        // following it (otherwise the next player to take the seat at
        // that tick, a lobby's first, had its `Joined` taken for a
        // repeat and every game saw the seat leave).
        if let SystemEvent::Left { player } | SystemEvent::Abandoned { player } = ev
            && let Some(i) = list
                .iter()
                .rposition(|e| *e == SystemEvent::Joined { player })
        {
            list.remove(i);
            list.retain(|e| *e != SystemEvent::CaughtUp { player });
            return;
        }
        if !list.contains(&ev) {
            list.push(ev);
        }
    }
}

crate::endpoint::forward_to_inherent!(Sequencer, SequencerError);
