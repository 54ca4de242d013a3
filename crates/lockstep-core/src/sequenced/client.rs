//! A client of a sequencer.

use super::{CloseReason, Rejection};
use crate::admission;
use crate::checksum::{Incoming, LocalChecks, Outcome, RemoteChecks};
use crate::endpoint::Transmit;
use crate::error::{
    ChecksumError, CommitError, ConfigError, DatagramError, Incompatibility, PauseError,
    ReconnectError,
};
use crate::link::{Link, StallMeter, Traffic};
use crate::rules::limits;
use crate::secure::{self, SecureChannel};
use crate::shared::{Events, Rate};
use crate::snapshot::{Snapshot, SnapshotError, SnapshotLimits, SnapshotReceiver, SnapshotSender};
use crate::wire::{
    self, ByeReason, ChainWriter, Datagram, DatagramWriter, Hello, InputCodec, InputRun, Inputs,
    MAX_COOKIE, MIN_HELLO_DATAGRAM, Message, ResumeToken, Welcome, WireError,
};
use crate::{
    AdaptiveDelay, DelayTracker, Event, Frame, Input, Instant, PeerId, PlayerId, SystemEvent, Tick,
};
use core::time::Duration;
use std::collections::{BTreeMap, VecDeque};

/// Most events held for the game before the oldest are dropped.
const EVENT_QUEUE_CAP: usize = 1024;
/// How long a resync waits for its snapshot to start before it is given up
/// (the sequencer repeats its `Resync` while it still means it).
const RESYNC_WAIT: Duration = Duration::from_secs(3);
/// How many times, a resend interval apart, a leaving client says goodbye
/// unless the server answers first.
pub const GOODBYES: u32 = 8;
/// Roster acknowledgements held for the next datagrams, at most (the
/// sequencer sends again what was not acknowledged).
const MEMBER_ACKS: usize = 16;
/// Roster acknowledgements one datagram carries at most.
const MEMBER_ACKS_PER_DATAGRAM: usize = 4;

/// A seat of the room's roster, as the sequencer shared it
/// ([`SequencerConfig::share_roster`](super::SequencerConfig::share_roster)):
/// what a player needs to carry the match on if the host leaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeatInfo {
    /// The seat.
    pub seat: PlayerId,
    /// It plays (it is not catching up from a snapshot).
    pub playing: bool,
    /// It hosts the room.
    pub hosts: bool,
    /// A commitment to its resume token
    /// ([`token_commitment`](crate::admission::token_commitment)).
    pub commitment: [u8; 16],
    /// How to reach it, as the host's application saw it; empty if not
    /// known.
    pub contact: Vec<u8>,
}

/// How a [`ClientSession`] connects and behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// A hash of the game's build and content; the sequencer refuses a
    /// different one.
    pub fingerprint: u64,
    /// The room to join.
    pub room: String,
    /// A display name.
    pub name: String,
    /// A join ticket, if the server requires one.
    pub ticket: Vec<u8>,
    /// Join as a spectator: receive every frame, send no input.
    pub spectator: bool,
    /// A token from an earlier Welcome, to take that seat back (the Hello
    /// carries proof of it, never the token).
    pub resume: Option<ResumeToken>,
    /// How inputs are delta-coded (must match the room).
    pub codec: InputCodec,
    /// The largest datagram to send, seal included (what is inside is
    /// `max_datagram - SEALED_OVERHEAD`, sealed or not).
    pub max_datagram: usize,
    /// The largest encoded input the game may commit.
    pub max_input_len: usize,
    /// How many ticks beyond the input delay a client may commit ahead of
    /// the frames it has run.
    pub max_lead: u32,
    /// How many frames past the next one are held when they arrive out of
    /// order or during catch-up.
    pub window: u32,
    /// Most committed inputs kept until the sequencer acknowledges them.
    /// Under `Deadline` frames keep coming while our uplink may be failing,
    /// so beyond this the oldest are dropped (they could only run late).
    pub max_unacked: usize,
    /// How often the Hello is repeated until answered.
    pub hello_interval: Duration,
    /// How long after the last datagram unacknowledged input is resent.
    pub resend_interval: Duration,
    /// How often an idle connection is sent a datagram anyway.
    pub keepalive_interval: Duration,
    /// Silence after which [`Event::Interrupted`] is raised.
    pub interrupt_after: Duration,
    /// Silence after which the connection is given up.
    pub timeout: Duration,
    /// How often round-trip time is measured.
    pub ping_interval: Duration,
    /// Checksums held.
    pub checksum_window: usize,
    /// A key for sealed datagrams: 32 bytes from a CSPRNG, new for every
    /// connection. With it the Hello offers a public key, and once a
    /// server answers with its own, every datagram after the handshake is
    /// authenticated and encrypted (see [`secure`](crate::secure)); check
    /// [`ClientSession::sealed`] if you must not play without. `None`:
    /// plain datagrams (LAN, WebSocket, tests).
    pub secret: Option<[u8; 32]>,
    /// Limits on snapshots received (joining a game under way) and sent
    /// (for someone else joining).
    pub snapshot: SnapshotLimits,
    /// Frames kept after they ran, at most (and the inputs sent whose tick
    /// has not run yet): what a player taking over as host needs to serve
    /// the players behind it (host mode). 0 keeps none.
    pub keep_frames: u32,
    /// How the input delay this player wants is judged (see
    /// [`DelayTracker`](crate::DelayTracker)): in a room whose delay
    /// adapts, every datagram says it. `None` says nothing, and the room
    /// goes by the other players. The room's own bounds apply.
    pub adaptive: Option<AdaptiveDelay>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            fingerprint: 0,
            room: String::new(),
            name: String::new(),
            ticket: Vec::new(),
            spectator: false,
            resume: None,
            codec: InputCodec::Opaque,
            max_datagram: 1200,
            max_input_len: 256,
            max_lead: 8,
            window: 4096,
            max_unacked: 256,
            hello_interval: Duration::from_millis(250),
            resend_interval: Duration::from_millis(40),
            keepalive_interval: Duration::from_millis(250),
            interrupt_after: Duration::from_secs(1),
            timeout: Duration::from_secs(15),
            ping_interval: Duration::from_secs(1),
            checksum_window: 512,
            secret: None,
            snapshot: SnapshotLimits::default(),
            keep_frames: 0,
            adaptive: Some(AdaptiveDelay::default()),
        }
    }
}

impl ClientConfig {
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
        bad(self.room.len() > wire::MAX_ROOM, "room name over 64 bytes")?;
        bad(self.name.len() > wire::MAX_NAME, "name over 32 bytes")?;
        bad(
            self.ticket.len() > wire::MAX_TICKET,
            "ticket over 512 bytes",
        )?;
        limits::input_len(self.max_input_len)?;
        bad(
            self.max_input_len + 128 + secure::SEALED_OVERHEAD > self.max_datagram,
            "max_datagram must leave room for a maximum-size input",
        )?;
        limits::lead(self.max_lead)?;
        bad(self.window < 16, "window must hold at least 16 frames")?;
        bad(self.max_unacked < 16, "max_unacked must be at least 16")?;
        bad(
            self.hello_interval.is_zero(),
            "hello_interval must be positive",
        )?;
        bad(self.timeout.is_zero(), "timeout must be positive")?;
        self.adaptive
            .as_ref()
            .map_or(Ok(()), AdaptiveDelay::validate)
    }
}

/// Counters and figures for a client.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ClientStats {
    /// The next frame to run.
    pub next_tick: Tick,
    /// The tick the next input will be stamped for.
    pub next_commit: Tick,
    /// The sequencer's open tick, as last told.
    pub server_open: Tick,
    /// How early (+) or late (-) our latest input reached the sequencer.
    pub slack: i32,
    /// The lead our inputs are stamped at, ticks past the next frame: the
    /// room's delay, or in a `Deadline` room our own (see
    /// [`ClientSession::input_due`]).
    pub lead: u32,
    /// Times our own lead fell because inputs arrived with ticks to
    /// spare (`Deadline`).
    pub lead_cuts: u64,
    /// Frames handed to the game.
    pub frames: u64,
    /// Times the picture stopped: no frame for two tick periods. (Steady
    /// latency beyond the input delay is not a stall: frames still come
    /// every tick.)
    pub stalls: u64,
    /// Time spent stalled.
    pub stalled_for: Duration,
    /// Commits refused.
    pub commits_refused: u64,
    /// Datagrams sent.
    pub datagrams_sent: u64,
    /// Bytes sent.
    pub bytes_sent: u64,
    /// Datagrams received.
    pub datagrams_received: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Datagrams rejected.
    pub datagrams_rejected: u64,
    /// Frames held ahead of the next one.
    pub buffered_frames: usize,
    /// Inputs sent but not acknowledged.
    pub unacked_inputs: usize,
    /// Inputs dropped unacknowledged because `max_unacked` was reached.
    pub inputs_dropped: u64,
    /// Smoothed round-trip time to the sequencer.
    pub rtt: Option<Duration>,
    /// The round trip's jitter (its mean deviation), once measured.
    pub rtt_jitter: Option<Duration>,
    /// Loss each way and bytes per second each way ("up" is to the
    /// sequencer).
    pub traffic: Traffic,
    /// Frames run per second, over the last second: the tick rate
    /// achieved.
    pub tick_rate: Option<f64>,
    /// How many tick periods before it was due (the commit of our input
    /// for it plus the delay) each frame arrived, smoothed; negative when
    /// frames come late. A seated player's figure (`slack` is the
    /// sequencer's view of our inputs).
    pub input_slack: Option<f64>,
    /// Snapshot chunks refused (bad checksum, inconsistent, over the cap).
    pub snapshot_errors: u64,
    /// Our inputs whose frame ran, timed from commit to run.
    pub inputs_timed: u64,
    /// The time from committing each of those inputs to running the frame
    /// of its tick, summed (see
    /// [`mean_input_latency`](Self::mean_input_latency)).
    pub input_latency_sum: Duration,
    /// The input delay in force, in ticks.
    pub delay: u32,
    /// The input delay this player wants (with
    /// [`ClientConfig::adaptive`]).
    pub delay_wanted: Option<u32>,
    /// Frames that came late: later after our input for them was
    /// committed than the input delay (see
    /// [`DelayTracker`](crate::DelayTracker)).
    pub late_frames: u64,
}

impl ClientStats {
    /// On average, how long after the game committed an input the frame of
    /// its tick ran: the delay the player feels (input delay, the trip to
    /// the sequencer and back, and stalls).
    pub fn mean_input_latency(&self) -> Option<Duration> {
        let n = u32::try_from(self.inputs_timed).ok().filter(|n| *n > 0)?;
        Some(self.input_latency_sum / n)
    }

    /// Stalls per frame run (0.005: one stall in 200 frames).
    pub fn stall_rate(&self) -> f64 {
        if self.frames == 0 {
            0.0
        } else {
            self.stalls as f64 / self.frames as f64
        }
    }
}

/// Commit times kept for inputs not yet run, at most.
const TIMED_INPUTS: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Connecting,
    Connected(Welcome),
    Closed(CloseReason),
}

/// One player's (or spectator's) side of a sequenced session.
///
/// Driven exactly like [`MeshSession`](crate::MeshSession): feed it the
/// sequencer's datagrams and the time, commit input each tick, run the
/// frames `advance` returns, drain `poll_transmit` and `poll_event`. It
/// connects on its own: the first `poll_transmit` carries the Hello.
///
/// The client runs frames strictly in order. A missing frame stalls it, and
/// every datagram it sends names the first frame it lacks, which is what
/// the sequencer resends from.
#[derive(Debug)]
pub struct ClientSession<I: Input> {
    config: ClientConfig,
    server: PeerId,
    state: State,
    started: Instant,
    now: Instant,
    /// The sequencer's position, for expanding its datagrams' base tick.
    server_base: Tick,
    /// Frames from `next_tick` on, as they arrive.
    frames: VecDeque<Option<Frame<I>>>,
    next_tick: Tick,
    next_commit: Tick,
    /// Committed inputs the sequencer has not acknowledged, oldest first.
    unacked: VecDeque<(Tick, I)>,
    /// When each of our inputs not yet run was committed (at most
    /// `TIMED_INPUTS`).
    committed_at: VecDeque<(Tick, Instant)>,
    server_open: Tick,
    slack: i32,
    /// In a `Deadline` room, the lead (ticks past our next frame) inputs
    /// are stamped at: raised when an input came late, lowered when
    /// every input of the last two seconds came with ticks to spare.
    lead: u32,
    /// The least slack the sequencer reported since when, this window.
    slack_low: Option<(i32, Instant)>,
    /// The first tick stamped after the lead last rose: the slack of
    /// inputs from before it (still reported until the sequencer has one
    /// from after) raises it no further.
    raised_for: Option<Tick>,
    /// One past the highest tick of our input the sequencer acknowledged.
    acked: Tick,
    waiting: Vec<PlayerId>,
    pause_frame: Option<Tick>,
    pause_requested: Option<bool>,
    lifted: Option<Tick>,
    /// Since when we have been saying goodbye, until the server answers or
    /// [`GOODBYES`] have gone out.
    leaving: Option<Instant>,
    /// When the sequencer was heard, the send schedule, ping and pong, the
    /// traffic each way (silence counts from `started`).
    link: Link,
    /// Frames run, for the tick rate achieved.
    frame_rate: Rate,
    checks: LocalChecks,
    server_checks: RemoteChecks,
    events: Events<Event>,
    stats: ClientStats,
    /// When the picture stopped, and for how long.
    stall: StallMeter,
    /// Judges the input delay we want (with `adaptive`, once seated).
    tracker: Option<DelayTracker>,
    /// The delay rose since the last commit: the next one first tops our
    /// lead up to it with neutral input.
    delay_rose: bool,
    /// The server's latest address-validation cookie, echoed in the Hello.
    cookie: Vec<u8>,
    /// Our public key, offered in the Hello.
    public: Option<[u8; 32]>,
    /// Keys agreed with the latest Challenge, until a sealed datagram
    /// opens with them.
    pending: Option<Box<SecureChannel>>,
    /// The keys every datagram is sealed with, once agreed.
    channel: Option<Box<SecureChannel>>,
    /// Scratch for opening and sealing.
    crypt: Vec<u8>,
    /// Joining a game under way from a snapshot.
    joining: Option<Box<Joining>>,
    /// The id of the last resync the sequencer asked of us.
    resynced: u32,
    /// The id of the last resync the game was told of (one given up for
    /// want of a snapshot and asked again is not news).
    resync_told: u32,
    /// A snapshot the sequencer asked of us, and its transfer.
    donation: Option<Donation>,
    /// The token of our seat, from the latest Welcome.
    token: Option<ResumeToken>,
    /// Connecting again with `token`, keeping what we have.
    reconnecting: bool,
    /// Moving to a new host after a takeover: its welcome is awaited
    /// against the clock, so the Hello is repeated every resend interval.
    moving: bool,
    /// The roster the sequencer shared: each seat's latest entry, with its
    /// version (`None`: the seat is empty).
    roster: BTreeMap<PlayerId, (u32, Option<SeatInfo>)>,
    /// Changes to the roster so far (an entry taken, or all forgotten).
    roster_changes: u64,
    /// Roster entries to acknowledge.
    member_acks: VecDeque<(PlayerId, u32)>,
    /// The last `keep_frames` frames run, oldest first.
    ran: VecDeque<Frame<I>>,
    /// With `keep_frames`: inputs the sequencer acknowledged whose tick
    /// has not run yet, oldest first.
    sent: VecDeque<(Tick, I)>,
}

/// A frame of an opaque room, its inputs as the sequencer holds them (byte
/// strings: a relay knows no input type), turned into the game's. An
/// opaque room's chains run over encodings, from the empty one: a relay
/// holds nothing for a seat whose input it never saw (the neutral input),
/// and a game's neutral input may well encode to bytes. So an empty
/// encoding is the neutral input, and inputs are compared as bytes, not
/// as values, on the way in.
fn typed_frame<I: Input>(f: Frame<Vec<u8>>) -> Result<Frame<I>, WireError> {
    let inputs = f
        .inputs
        .into_iter()
        .map(|i| {
            i.map(|bytes| match I::decode(&bytes) {
                Ok(v) => Ok(v),
                Err(_) if bytes.is_empty() => Ok(I::default()),
                Err(e) => Err(WireError::Input(e)),
            })
            .transpose()
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Frame {
        tick: f.tick,
        inputs,
        events: f.events,
    })
}

/// A client joining a game under way.
#[derive(Debug)]
struct Joining {
    receiver: SnapshotReceiver,
    /// The tick the snapshot follows, from its first chunk.
    tick: Option<Tick>,
    /// The snapshot, complete, until the game takes it.
    ready: Option<Snapshot>,
    /// The game took it: frames run.
    restored: bool,
    /// A resync: frames run on up to the snapshot's tick.
    resync: bool,
    /// The game was told the snapshot is whole.
    announced: bool,
    /// Since when a resync has waited for its first chunk, and the resync
    /// id before it: one whose snapshot never starts is given up (a forged
    /// `Resync` in plain mode must not freeze the game), and the same
    /// resync repeated by the sequencer is taken again.
    resync_wait: Option<(Instant, u32)>,
}

impl Joining {
    /// Waiting for a snapshot: a joiner's, or (with when it began and the
    /// resync id before it) a resync's.
    fn new(config: &ClientConfig, resync: Option<(Instant, u32)>) -> Box<Self> {
        Box::new(Self {
            receiver: SnapshotReceiver::new(config.snapshot.clone()),
            tick: None,
            ready: None,
            restored: false,
            announced: false,
            resync: resync.is_some(),
            resync_wait: resync,
        })
    }
}

/// A snapshot asked of us.
#[derive(Debug)]
struct Donation {
    id: u32,
    tick: Tick,
    sender: Option<Box<SnapshotSender>>,
}

impl<I: Input> ClientSession<I> {
    /// A client that will connect to the sequencer at `server` (the id the
    /// caller's transport uses for it).
    pub fn new(config: ClientConfig, server: PeerId, now: Instant) -> Result<Self, ConfigError> {
        config.validate()?;
        let public = config.secret.as_ref().map(secure::client_public);
        Ok(Self {
            checks: LocalChecks::new(config.checksum_window),
            config,
            server,
            state: State::Connecting,
            started: now,
            now,
            server_base: Tick::ZERO,
            frames: VecDeque::new(),
            next_tick: Tick::ZERO,
            next_commit: Tick::ZERO,
            unacked: VecDeque::new(),
            committed_at: VecDeque::new(),
            server_open: Tick::ZERO,
            slack: 0,
            lead: 0,
            slack_low: None,
            raised_for: None,
            acked: Tick::ZERO,
            waiting: Vec::new(),
            pause_frame: None,
            pause_requested: None,
            lifted: None,
            leaving: None,
            link: Link::ready(now),
            frame_rate: Rate::default(),
            server_checks: RemoteChecks::default(),
            events: Events::new(EVENT_QUEUE_CAP),
            stats: ClientStats::default(),
            stall: StallMeter::default(),
            tracker: None,
            delay_rose: false,
            cookie: Vec::new(),
            public,
            pending: None,
            channel: None,
            crypt: Vec::new(),
            joining: None,
            resynced: 0,
            resync_told: 0,
            donation: None,
            token: None,
            reconnecting: false,
            moving: false,
            roster: BTreeMap::new(),
            roster_changes: 0,
            member_acks: VecDeque::new(),
            ran: VecDeque::new(),
            sent: VecDeque::new(),
        })
    }

    // ----- getters -------------------------------------------------------

    /// Whether the sequencer accepted us and the session is live.
    pub fn connected(&self) -> bool {
        matches!(self.state, State::Connected(_))
    }

    /// Why the session ended, once it has.
    pub fn closed(&self) -> Option<&CloseReason> {
        match &self.state {
            State::Closed(r) => Some(r),
            _ => None,
        }
    }

    /// The seat we play, once connected (none for a spectator).
    pub fn seat(&self) -> Option<PlayerId> {
        match &self.state {
            State::Connected(w) => w.seat,
            _ => None,
        }
    }

    /// The sequencer's Welcome: tick rate, delay, seats.
    pub fn welcome(&self) -> Option<&Welcome> {
        match &self.state {
            State::Connected(w) => Some(w),
            _ => None,
        }
    }

    /// The next frame to run.
    pub fn frame(&self) -> Tick {
        self.next_tick
    }

    /// The tick the next input will be stamped for.
    pub fn next_commit(&self) -> Tick {
        self.next_commit
    }

    /// Who the next frame is waiting on, as the sequencer reports it: the
    /// seats holding up the open tick when the game is stalled on them.
    pub fn awaiting(&self) -> Vec<PlayerId> {
        if self.frames.front().is_some_and(Option::is_some) || self.next_tick < self.server_open {
            return Vec::new();
        }
        self.waiting.clone()
    }

    /// Whether the game is stalled: no frame for two tick periods (what
    /// [`ClientStats::stalls`] counts). A game shows
    /// [`awaiting`](Self::awaiting) while this holds, rather than flicker a
    /// banner for every input that arrives a little late.
    pub fn stalled(&self) -> bool {
        self.stall.stalled()
    }

    /// The frames ready to run, as a [`Pacer`](crate::Pacer) should count
    /// them. In a `Deadline` room, all of them: the sequencer's clock sets
    /// the pace, and a pacer running a little faster with frames in hand
    /// keeps up with it. In a `WaitForAll` room every player's clock sets
    /// the pace together: a player running faster would speed the whole
    /// match up. There, frames beyond one count only while the room waits
    /// on our input (the sequencer's `waiting` names our seat: our clock
    /// runs behind the others', and catching up brings it in step);
    /// otherwise every player runs at the tick rate.
    ///
    /// ```text
    /// let due = pacer.ticks_due(now, session.ready_to_pace());
    /// ```
    pub fn ready_to_pace(&self) -> usize {
        let ready = self.frames.iter().take_while(|f| f.is_some()).count();
        match self.welcome() {
            Some(w) if !w.deadline && w.seat.is_none_or(|me| !self.waiting.contains(&me)) => {
                ready.min(1)
            }
            _ => ready,
        }
    }

    /// Whether the sequencer has paused the game.
    pub fn paused(&self) -> bool {
        self.pause_frame.is_some()
    }

    /// Whether the simulation rests on the pause frame.
    pub fn frozen(&self) -> bool {
        self.pause_frame == Some(self.next_tick)
    }

    /// Counters and figures.
    pub fn stats(&self) -> ClientStats {
        let mut s = self.stats.clone();
        s.next_tick = self.next_tick;
        s.next_commit = self.next_commit;
        s.server_open = self.server_open;
        s.slack = self.slack;
        s.lead = self.lead_target();
        s.buffered_frames = self.frames.iter().filter(|f| f.is_some()).count();
        s.unacked_inputs = self.unacked.len();
        s.stalls = self.stall.stalls();
        s.stalled_for = self.stall.stalled_for();
        s.rtt = self.link.rtt();
        s.rtt_jitter = self.link.jitter();
        s.traffic = self.link.traffic(self.now);
        s.tick_rate = self.frame_rate.per_sec(self.now);
        s.input_slack = self.tracker.as_ref().and_then(DelayTracker::slack);
        s.delay = self.welcome().map_or(0, |w| w.delay);
        s.delay_wanted = self
            .tracker
            .as_ref()
            .filter(|_| self.config.adaptive.is_some())
            .map(DelayTracker::wanted);
        s
    }

    /// The most frames this client holds, whatever the sequencer sends.
    pub fn buffer_bound(&self) -> usize {
        self.config.window as usize
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    // ----- mutators ------------------------------------------------------

    /// Commits the local input for the next tick. A refusal is backpressure:
    /// offer the input again next frame.
    pub fn commit_local(&mut self, input: I) -> Result<Tick, CommitError> {
        let w = match &self.state {
            State::Connected(w) => *w,
            State::Connecting => return Err(CommitError::NotConnected),
            State::Closed(_) => return Err(CommitError::Left),
        };
        if w.seat.is_none() {
            return Err(CommitError::Observer);
        }
        if self.leaving.is_some() {
            return Err(CommitError::Left);
        }
        if self.joining.is_some() {
            return Err(CommitError::CatchingUp);
        }
        if let Some(frame) = self.pause_frame.filter(|f| self.next_commit >= *f) {
            self.stats.commits_refused += 1;
            return Err(CommitError::Paused { frame });
        }
        // Under a deadline, input stamped for a tick already sealed would
        // run late: stamp it where it will arrive in time instead.
        // Our lead rises to where an input reaches the open tick in time:
        // a round trip (with its jitter) and a tick past the open tick we
        // last heard of, at least the delay (once per late input stamped
        // since the last rise), and is kept until the slack says
        // otherwise.
        if w.deadline && self.slack < 0 && self.raised_for.is_none_or(|t| self.acked > t) {
            let period = (1_000_000 / u128::from(w.tick_rate.max(1))).max(1);
            let trip = self.link.rtt().zip(self.link.jitter()).map_or(0, |(r, j)| {
                u32::try_from((r + j).as_micros().div_ceil(period)).unwrap_or(u32::MAX)
            });
            let ahead = w.delay.max(trip.saturating_add(1));
            let cap = self
                .next_tick
                .saturating_add((w.delay + self.config.max_lead).saturating_sub(1));
            let target = self.server_open.saturating_add(ahead).min(cap);
            if self.next_commit < target {
                self.next_commit = target;
            }
            self.slack = 0;
            self.lead = self.next_commit.since(self.next_tick).max(1);
            self.slack_low = None;
            self.raised_for = Some(self.next_commit);
        }
        let limit = w.delay + self.config.max_lead;
        let lead = self.next_commit.since(self.next_tick);
        if lead >= limit {
            self.stats.commits_refused += 1;
            return Err(CommitError::TooFarAhead { lead, limit });
        }
        let mut scratch = Vec::new();
        input.encode(&mut scratch);
        if scratch.len() > self.config.max_input_len {
            return Err(CommitError::InputTooLarge {
                len: scratch.len(),
                max: self.config.max_input_len,
            });
        }
        // The delay rose: our lead is topped up to it with neutral input,
        // before this one (nobody sampled input for the ticks it adds). A
        // lead already past the delay (a game committing on its own clock)
        // gets none. Never past `max_unacked` inputs unacknowledged (the
        // oldest would be dropped unsent, and the room would wait on them
        // for good): the rest of a large rise follows at later commits.
        while self.delay_rose
            && self.next_commit.since(self.next_tick).saturating_add(1) < w.delay
            && self.pause_frame.is_none_or(|f| self.next_commit < f)
            && self.unacked.len() + 1 < self.config.max_unacked
        {
            let tick = self.next_commit;
            self.next_commit = tick.next().ok_or(CommitError::TickSpaceExhausted)?;
            self.unacked.push_back((tick, I::default()));
        }
        self.delay_rose &= self.next_commit.since(self.next_tick).saturating_add(1) < w.delay;
        if self.pause_frame.is_some_and(|f| self.next_commit >= f) {
            // The rise reached the freeze frame: the rest waits for the
            // resume, and so does this input.
            self.stats.commits_refused += 1;
            return Err(CommitError::Paused {
                frame: self.pause_frame.unwrap_or(self.next_commit),
            });
        }
        let tick = self.next_commit;
        self.next_commit = tick.next().ok_or(CommitError::TickSpaceExhausted)?;
        if self.committed_at.len() >= TIMED_INPUTS {
            self.committed_at.pop_front();
        }
        self.committed_at.push_back((tick, self.now));
        if let Some(t) = self.tracker.as_mut() {
            t.committed(tick, self.now);
        }
        self.unacked.push_back((tick, input));
        while self.unacked.len() > self.config.max_unacked {
            self.unacked.pop_front();
            self.stats.inputs_dropped += 1;
        }
        self.link.flush = true;
        Ok(tick)
    }

    /// The next frame, if it has arrived. Frames come in tick order, each
    /// exactly once; run every one.
    pub fn advance(&mut self) -> Option<Frame<I>> {
        // Joining, frames wait for the snapshot; being resynced, they run
        // up to its tick.
        if self.frozen()
            || self.joining.as_ref().is_some_and(|j| {
                !(j.restored || (j.resync && j.tick.is_none_or(|t| self.next_tick <= t)))
            })
        {
            return None;
        }
        match self.frames.front() {
            Some(Some(_)) => {}
            _ => {
                // A stall is the picture stopping: no frame for two tick
                // periods (steady latency beyond the input delay is not one).
                let period = self
                    .welcome()
                    .filter(|w| w.tick_rate > 0)
                    .map(|w| Duration::from_secs(2) / w.tick_rate);
                if let Some(two_ticks) = period {
                    self.stall.no_frame(self.now, two_ticks);
                }
                return None;
            }
        }
        let frame = self.frames.pop_front().flatten()?;
        self.next_tick = self.next_tick.saturating_add(1);
        self.announce_snapshot();
        if self.joining.as_ref().is_some_and(|j| j.restored) {
            // A change before our seat goes live is in force when it does;
            // one after it moves our lead.
            let live_at = self
                .seat()
                .and_then(|p| {
                    let ev = SystemEvent::CaughtUp { player: p };
                    frame.events.iter().position(|e| *e == ev)
                })
                .unwrap_or(frame.events.len());
            self.take_delay_changes(frame.tick, &frame.events[..live_at]);
            self.note_caught_up(&frame);
            self.take_delay_changes(frame.tick, &frame.events[live_at..]);
        } else {
            self.take_delay_changes(frame.tick, &frame.events);
        }
        self.stats.frames += 1;
        self.frame_rate.add(self.now, 1);
        while self
            .committed_at
            .front()
            .is_some_and(|(t, _)| *t < frame.tick)
        {
            self.committed_at.pop_front();
        }
        if let Some((_, at)) = self.committed_at.front().filter(|(t, _)| *t == frame.tick) {
            self.stats.inputs_timed += 1;
            self.stats.input_latency_sum += self.now - *at;
            self.committed_at.pop_front();
        }
        self.stall.ran(self.now);
        self.keep(&frame);
        Some(frame)
    }

    /// The input delay changed at frame `tick`: the new one is in force. A
    /// playing seat's next commit after a rise tops its lead up to it with
    /// neutral inputs; after a fall, [`input_due`](Self::input_due) holds
    /// back until the frames caught up. Changes before our Welcome's tick
    /// were in force before it.
    fn take_delay_changes(&mut self, tick: Tick, events: &[SystemEvent]) {
        let live = self.joining.is_none() && self.seat().is_some();
        let State::Connected(w) = &mut self.state else {
            return;
        };
        if tick < w.tick {
            return;
        }
        for ev in events {
            if let SystemEvent::DelayChanged { delay } = *ev {
                if live && delay > w.delay {
                    self.delay_rose = true;
                }
                w.delay = delay;
                if let Some(t) = self.tracker.as_mut() {
                    t.set_delay(delay);
                }
            }
        }
    }

    /// Keeps `frame`, just run, with `keep_frames`, and forgets the inputs
    /// sent for it and earlier.
    fn keep(&mut self, frame: &Frame<I>) {
        let keep = self.config.keep_frames as usize;
        if keep == 0 {
            return;
        }
        if self.ran.len() >= keep {
            self.ran.pop_front();
        }
        self.ran.push_back(frame.clone());
        while self.sent.front().is_some_and(|(t, _)| *t <= frame.tick) {
            self.sent.pop_front();
        }
    }

    /// The peer id of our sequencer.
    pub(crate) fn server_peer(&self) -> PeerId {
        self.server
    }

    /// When the sequencer was last heard from.
    pub(crate) fn last_heard(&self) -> Option<Instant> {
        self.link.last_heard()
    }

    /// Frames from someone other than our sequencer, known to be the
    /// room's (a survivor's, for a player taking over): held as if it had
    /// sent them.
    pub(crate) fn hold_frames(&mut self, frames: Vec<Frame<I>>) {
        for f in frames {
            self.store_frame(f);
        }
    }

    /// Forgets the frames held from `tick` on, not run yet (someone
    /// else's that came past a gap, for a player taking over).
    pub(crate) fn forget_frames_from(&mut self, tick: Tick) {
        let keep = tick.since(self.next_tick.min(tick)) as usize;
        self.frames.truncate(keep);
    }

    /// The first frame we hold (run and kept with
    /// [`keep_frames`](ClientConfig::keep_frames), or not run yet): with
    /// [`lacks`](Self::lacks) and [`frames_held`](Self::frames_held), what
    /// a player taking over as host learns from each survivor.
    pub fn held_from(&self) -> Tick {
        self.ran.front().map_or(self.next_tick, |f| f.tick)
    }

    /// The first frame we lack: every one from [`held_from`](Self::held_from)
    /// up to it is held.
    pub fn lacks(&self) -> Tick {
        let ahead = self.frames.iter().take_while(|f| f.is_some()).count();
        self.next_tick.saturating_add(ahead as u32)
    }

    /// The frames held from `from` on, at most `max`, in order (those run
    /// and kept, then those received and not run yet).
    pub fn frames_held(&self, from: Tick, max: usize) -> Vec<Frame<I>> {
        let ahead = self.frames.iter().map_while(Option::as_ref);
        self.ran
            .iter()
            .chain(ahead)
            .filter(|f| f.tick >= from)
            .take(max)
            .cloned()
            .collect()
    }

    /// The inputs committed for ticks after `after`, acknowledged or not
    /// (those acknowledged are kept only with
    /// [`keep_frames`](ClientConfig::keep_frames)), oldest first: what a
    /// new host must hold for us if the last frame anyone holds is
    /// `after`.
    pub fn inputs_after(&self, after: Tick) -> Vec<(Tick, I)> {
        self.sent
            .iter()
            .chain(self.unacked.iter())
            .filter(|(t, _)| *t > after)
            .cloned()
            .collect()
    }

    /// Whether the input for the tick `delay` ticks past the next frame is
    /// still to commit (in a `Deadline` room, our own lead's worth: it
    /// rises when an input arrives late and falls when inputs arrive with
    /// ticks to spare): the classic lockstep loop runs a frame, then
    /// commits while this holds, which keeps every player exactly the
    /// delay ahead (a player that joined while the game ran on has more
    /// lead than that, and commits nothing until it ran its way down to
    /// it). After the delay fell it stays false until the frames caught up
    /// with the inputs committed; after it rose, the ticks it added are
    /// filled with neutral input at the next commit, so the game commits
    /// once per frame run whatever the delay does.
    pub fn input_due(&self) -> bool {
        let Some(w) = self.welcome() else {
            return false;
        };
        w.seat.is_some()
            && self.joining.is_none()
            && self.leaving.is_none()
            && self.next_commit.since(self.next_tick) < self.lead_target()
    }

    /// The lead the classic loop keeps: the room's delay, or in a
    /// `Deadline` room our own lead.
    fn lead_target(&self) -> u32 {
        match self.welcome() {
            Some(w) if w.deadline && self.lead > 0 => self.lead,
            Some(w) => w.delay,
            None => 0,
        }
    }

    /// The sequencer reported the slack of our latest input. In a
    /// `Deadline` room, once every report for two seconds showed two
    /// ticks or more to spare, our lead falls by all but one of them
    /// (never below 1): [`input_due`](Self::input_due) holds commits back
    /// until the frames caught up, so no input is dropped or run twice. A
    /// late input raises the lead at the next commit (see `commit_local`).
    fn note_slack(&mut self, slack: i32) {
        let Some(w) = self.welcome() else { return };
        if !w.deadline || w.seat.is_none() || self.joining.is_some() {
            return;
        }
        if self.lead == 0 {
            self.lead = w.delay.max(1);
        }
        if slack < 0 {
            self.slack_low = None;
            return;
        }
        let now = self.now;
        let (low, since) = self.slack_low.get_or_insert((slack, now));
        *low = (*low).min(slack);
        if now - *since < Duration::from_secs(2) {
            return;
        }
        let spare = u32::try_from(*low - 1).unwrap_or(0);
        let cut = spare.min(self.lead - 1);
        if cut > 0 {
            self.lead -= cut;
            self.stats.lead_cuts += 1;
        }
        self.slack_low = None;
    }

    /// Whether this client is joining a game under way: receiving its
    /// snapshot or catching up. Commits are refused until it is over.
    pub fn joining(&self) -> bool {
        self.joining.is_some()
    }

    /// While the snapshot of a game under way arrives: chunks in, of how
    /// many (for a progress bar).
    pub fn snapshot_progress(&self) -> Option<(u32, u32)> {
        let j = self.joining.as_ref()?;
        if j.ready.is_some() || j.restored {
            return None;
        }
        j.receiver.progress().map(|(_, _, have, of)| (have, of))
    }

    /// The snapshot [`Event::Snapshot`] announced, once: restore it, then
    /// run frames as usual (they start right after its tick).
    pub fn take_snapshot(&mut self) -> Option<Snapshot> {
        let j = self.joining.as_mut().filter(|j| j.announced)?;
        let s = j.ready.take()?;
        j.restored = true;
        self.link.flush = true;
        Some(s)
    }

    /// Answers [`Event::SnapshotRequested`]: the game's state right after
    /// `tick` (run that frame first). Sent in chunks beside the game's own
    /// traffic. A state for a tick nobody asked for is ignored.
    pub fn provide_snapshot(&mut self, tick: Tick, bytes: Vec<u8>) -> Result<(), SnapshotError> {
        let budget = self.config.max_datagram - secure::SEALED_OVERHEAD;
        let Some(d) = self
            .donation
            .as_mut()
            .filter(|d| d.tick == tick && d.sender.is_none())
        else {
            return Ok(());
        };
        let snapshot = Snapshot::new(tick, bytes);
        let tx = SnapshotSender::new(
            d.id,
            &snapshot,
            budget.saturating_sub(160),
            &self.config.snapshot,
        )?;
        d.sender = Some(Box::new(tx));
        self.link.flush = true;
        Ok(())
    }

    /// Ends joining once the frame that makes our seat live has run (a
    /// spectator: once it has caught up with the open tick).
    fn note_caught_up(&mut self, frame: &Frame<I>) {
        let live = match self.seat() {
            Some(me) => frame.events.contains(&SystemEvent::CaughtUp { player: me }),
            None => frame.tick.saturating_add(1) >= self.server_open,
        };
        if live {
            self.joining = None;
            if let Some(w) = self.welcome() {
                self.next_commit = self.next_commit.max(frame.tick.saturating_add(w.delay));
            }
            self.push_event(Event::CaughtUp { tick: frame.tick });
        }
    }

    /// Whether to tell the sequencer we caught up: the snapshot restored and
    /// the frames run up to its open tick.
    fn says_caught_up(&self) -> bool {
        self.seat().is_some()
            && self
                .joining
                .as_ref()
                .is_some_and(|j| j.restored && self.next_tick.saturating_add(1) >= self.server_open)
    }

    /// Asks the sequencer to pause; every client freezes on the same frame.
    pub fn request_pause(&mut self) -> Result<(), PauseError> {
        if self.seat().is_none() {
            return Err(PauseError::Observer);
        }
        self.pause_requested = Some(true);
        self.link.flush = true;
        Ok(())
    }

    /// Takes our seat back on a new connection, after this one was lost:
    /// the caller opened a new transport (a new socket, so the server sees
    /// a new address) whose id for the sequencer is `server`, and passes a
    /// fresh `secret` if datagrams are sealed. The session repeats the
    /// handshake with proof of its resume token and the first frame it
    /// lacks; what it has run, committed and buffered stays. The sequencer
    /// sends the rest from its history, or a snapshot when the history no
    /// longer reaches back (then [`Event::Reconnected`] says the state was
    /// not kept). Call it when the sequencer has been silent for a while
    /// (after [`Event::Interrupted`], say 3 s), or once the session timed
    /// out; the seat is held for the room's grace (30 s by default).
    ///
    /// ```
    /// use lockstep_core::sequenced::{ClientConfig, ClientSession};
    /// use lockstep_core::{Instant, PeerId, ReconnectError};
    ///
    /// let mut s = ClientSession::<u8>::new(ClientConfig::default(), PeerId(0), Instant::ZERO)?;
    /// // Never welcomed to a seat: there is nothing to take back.
    /// assert_eq!(s.reconnect(PeerId(1), None, Instant::ZERO), Err(ReconnectError::NoSeat));
    /// # Ok::<(), lockstep_core::ConfigError>(())
    /// ```
    pub fn reconnect(
        &mut self,
        server: PeerId,
        secret: Option<[u8; 32]>,
        now: Instant,
    ) -> Result<(), ReconnectError> {
        let token = self.reconnect_check()?;
        self.reconnect_with(token, server, secret, now);
        Ok(())
    }

    /// Takes our seat back on the sequencer at `server`, which took the
    /// match over from the one that left (host migration): as
    /// [`reconnect`](Self::reconnect), whatever the old host said when it
    /// went, unless we left on purpose. A player's sequencer does not seal
    /// its datagrams: from now on neither do we (a client of a relay that
    /// failed over to a player gives its sealing up).
    pub(crate) fn move_to(&mut self, server: PeerId, now: Instant) -> Result<(), ReconnectError> {
        if self.leaving.is_some() {
            return Err(ReconnectError::Ended(CloseReason::Left));
        }
        let token = self.token.ok_or(ReconnectError::NoSeat)?;
        self.reconnect_with(token, server, None, now);
        self.moving = true;
        Ok(())
    }

    fn reconnect_with(
        &mut self,
        token: ResumeToken,
        server: PeerId,
        secret: Option<[u8; 32]>,
        now: Instant,
    ) {
        self.now = self.now.max(now);
        self.config.resume = Some(token);
        // The server sends its roster again (to a new host's, whose
        // versions start over, an old entry must not look newer).
        self.roster.clear();
        self.roster_changes += 1;
        self.member_acks.clear();
        self.new_handshake(secret);
        self.server = server;
        self.state = State::Connecting;
        self.reconnecting = true;
        self.moving = false;
        self.started = self.now;
        self.link.restart(self.now);
        self.server_checks = RemoteChecks::default();
        self.waiting.clear();
        self.donation = None;
    }

    /// Whether [`reconnect`](Self::reconnect) would take our seat back
    /// (we have a seat, and the session was not ended on purpose).
    pub fn can_reconnect(&self) -> bool {
        self.reconnect_check().is_ok()
    }

    /// The token `reconnect` would present, or why it would not.
    fn reconnect_check(&self) -> Result<ResumeToken, ReconnectError> {
        match &self.state {
            State::Closed(CloseReason::TimedOut | CloseReason::Bye(ByeReason::Timeout, _)) => {}
            State::Closed(r) => return Err(ReconnectError::Ended(r.clone())),
            _ if self.leaving.is_some() => return Err(ReconnectError::Ended(CloseReason::Left)),
            _ => {}
        }
        self.token.ok_or(ReconnectError::NoSeat)
    }

    /// Forgets the handshake under way (cookie and keys) so the next Hello
    /// starts a new one, with a new key: a server forgets a refused sealed
    /// connection for good.
    fn start_handshake_over(&mut self) {
        self.new_handshake(self.config.secret.as_ref().map(secure::next_secret));
    }

    /// Forgets the handshake under way, to start one with `secret`.
    fn new_handshake(&mut self, secret: Option<[u8; 32]>) {
        self.config.secret = secret;
        self.public = secret.as_ref().map(secure::client_public);
        self.cookie.clear();
        self.pending = None;
        self.channel = None;
    }

    /// Asks the sequencer to resume.
    pub fn resume(&mut self) {
        self.pause_requested = Some(false);
        self.link.flush = true;
    }

    /// Leaves: the sequencer is told goodbye and the seat empties. The
    /// goodbye is repeated every resend interval until the server answers or
    /// [`GOODBYES`] have gone out, so keep driving the session for that long
    /// ([`poll_timeout`](Self::poll_timeout) says when to stop: `None`).
    pub fn leave(&mut self) {
        if self.leaving.is_none() {
            self.leaving = Some(self.now);
            self.link.flush = true;
        }
    }

    /// Whether a goodbye is still to be repeated.
    fn saying_goodbye(&self) -> bool {
        let window = self.config.resend_interval * GOODBYES;
        self.leaving.is_some_and(|since| self.now < since + window)
    }

    /// Reports the game's state hash after running `tick` (every tick, or
    /// the same ones on every machine). Checkpoints of the hash chain go to
    /// the sequencer, which votes; a checkpoint that differs from the
    /// majority's (or the server's own simulation's) comes back as
    /// [`Event::Desync`], and the search for the first divergent tick as
    /// [`Event::DesyncLocated`].
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
        // Being resynced, the state is about to be replaced.
        if self
            .joining
            .as_ref()
            .is_some_and(|j| j.resync && !j.restored)
        {
            return Ok(());
        }
        // A checkpoint rides on the next datagram: it is not worth one.
        let _ = self.checks.report(tick, hash);
        for o in self.server_checks.catch_up(&self.checks, self.now) {
            self.check_outcome(o);
        }
        Ok(())
    }

    /// What came of the sequencer's reference checkpoints: the game hears
    /// of a mismatch and of where the search for the first divergent tick
    /// ended.
    fn check_outcome(&mut self, o: Outcome) {
        self.link.flush |= self.server_checks.urgent(self.now);
        let peer = self.server;
        match o {
            Outcome::Mismatch(m) => self.push_event(Event::Desync {
                tick: m.tick,
                peer,
                local: m.local,
                remote: m.remote,
            }),
            Outcome::Located { checkpoint, first } => self.push_event(Event::DesyncLocated {
                peer,
                checkpoint,
                first,
            }),
            Outcome::Agreed { from } => self.push_event(Event::DesyncEnded { peer, from }),
        }
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop()
    }

    // ----- network side --------------------------------------------------

    /// Takes a datagram. Only the sequencer's are accepted.
    pub fn handle_datagram(
        &mut self,
        from: PeerId,
        datagram: &[u8],
        now: Instant,
    ) -> Result<(), DatagramError> {
        self.now = self.now.max(now);
        self.stats.datagrams_received += 1;
        self.stats.bytes_received += datagram.len() as u64;
        self.link.received(self.now, datagram.len());
        // Refused before any decoding or opening: the sequencer never sends
        // more than we allow.
        let r = if datagram.len() > self.config.max_datagram {
            Err(WireError::Oversized(datagram.len()).into())
        } else {
            self.unseal_and_take(from, datagram)
        };
        if r.is_err() {
            self.stats.datagrams_rejected += 1;
        }
        r
    }

    /// Whether datagrams are sealed: keys were agreed and the server's
    /// first sealed datagram opened with them.
    pub fn sealed(&self) -> bool {
        self.channel.is_some()
    }

    fn unseal_and_take(&mut self, from: PeerId, datagram: &[u8]) -> Result<(), DatagramError> {
        if from != self.server {
            return Err(DatagramError::UnknownPeer(from));
        }
        if !secure::is_sealed(datagram) {
            // A plain datagram could be anyone's: once we asked for sealing,
            // only the handshake's own answers may come plain (a forged
            // Welcome or Frames must never reach the game).
            let handshake_only = |d: &Datagram<'_>| {
                d.messages.iter().all(|m| {
                    matches!(
                        m,
                        Message::Challenge { .. }
                            | Message::Reject(_)
                            | Message::Error { .. }
                            | Message::Padding { .. }
                    )
                })
            };
            let refused = self.channel.is_some()
                || (self.config.secret.is_some()
                    && !Datagram::decode(datagram, self.server_base)
                        .is_ok_and(|d| handshake_only(&d)));
            if refused {
                return Err(secure::SealError::NotSealed.into());
            }
            return self.take(datagram);
        }
        let mut buf = core::mem::take(&mut self.crypt);
        buf.clear();
        buf.extend_from_slice(datagram);
        let opened = match (&mut self.channel, &mut self.pending) {
            (Some(c), _) => c.open(&mut buf).map(|p| p.len()),
            (None, Some(p)) => p.open(&mut buf).map(|p| p.len()),
            (None, None) => Err(secure::SealError::WrongConnection),
        };
        let r = match opened {
            Ok(len) => {
                if self.channel.is_none() {
                    self.channel = self.pending.take();
                }
                let start = secure::SEALED_HEADER_LEN;
                self.take(&buf[start..start + len])
            }
            Err(e) => Err(e.into()),
        };
        self.crypt = buf;
        r
    }

    fn take(&mut self, datagram: &[u8]) -> Result<(), DatagramError> {
        if matches!(self.state, State::Closed(_)) {
            // The server's goodbye ends ours.
            let bye = Datagram::decode(datagram, self.server_base)
                .is_ok_and(|d| d.messages.iter().any(|m| matches!(m, Message::Bye { .. })));
            if bye && self.leaving.is_some() {
                self.leaving = Some(Instant::ZERO);
            }
            return Ok(());
        }
        let mut decoded = Datagram::decode(datagram, self.server_base);
        // Until the Welcome, our idea of the server's position is a guess:
        // the Welcome's absolute tick says where the room really is, and the
        // datagram's relative ticks are read again from there.
        if !self.connected()
            && let Ok(d) = &decoded
            && let Some(at) = d.messages.iter().find_map(|m| match m {
                Message::Welcome(w) => Some(w.tick),
                _ => None,
            })
            && wire::expand_tick(d.base.get() as u16, at) != d.base
        {
            decoded = Datagram::decode(datagram, at);
        }
        let d = match decoded {
            Ok(d) => d,
            Err(WireError::UnsupportedVersion { ours, theirs }) => {
                let reason = Rejection::ProtocolMismatch {
                    server: theirs,
                    client: ours,
                };
                self.close(CloseReason::Rejected(reason));
                return Err(DatagramError::Incompatible(Incompatibility::Protocol {
                    ours,
                    theirs,
                }));
            }
            Err(e) => return Err(e.into()),
        };
        // Decode typed payloads before acting on anything.
        let mut frames = Vec::new();
        for m in &d.messages {
            if let Message::Frames(f) = m {
                // A sequencer of our own input type chains our values; a
                // relay of an opaque room chains byte strings from the
                // empty one, which a value's chain may not read: those are
                // read as bytes.
                match f.decode::<I>() {
                    Ok(typed) => frames.extend(typed),
                    Err(e) if self.config.codec == InputCodec::Opaque => {
                        let raw = f.decode::<Vec<u8>>().map_err(|_| e)?;
                        for bytes in raw {
                            frames.push(typed_frame(bytes)?);
                        }
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let now = self.now;
        if self.link.heard(now) {
            self.push_event(Event::Recovered {
                peer: self.server,
                player: None,
            });
        }
        self.server_base = d.base;
        let mut checks = Incoming::default();
        for m in &d.messages {
            checks.take(m);
        }
        for o in self.server_checks.receive(&self.checks, &checks, now) {
            self.check_outcome(o);
        }
        self.link.flush |= self.server_checks.urgent(now);
        for m in d.messages {
            match m {
                Message::Welcome(w) => self.welcomed(w),
                Message::Challenge { cookie, key } if !self.connected() => {
                    // Answer at once: the server keeps no state until we do.
                    self.cookie.clear();
                    self.cookie
                        .extend_from_slice(&cookie[..cookie.len().min(MAX_COOKIE)]);
                    self.pending = match (&self.config.secret, key) {
                        (Some(secret), Some(key)) => SecureChannel::client(secret, &key, cookie)
                            .ok()
                            .map(Box::new),
                        _ => None,
                    };
                    self.link.flush = true;
                }
                // Reconnecting before the old connection went quiet (its
                // late datagrams still arrive): the Hello is repeated
                // until the seat is free, each time as a new handshake (a
                // server forgets a refused sealed connection for good).
                Message::Reject(wire::RejectReason::SeatBusy) if self.reconnecting => {
                    self.start_handshake_over();
                }
                Message::Reject(r) => {
                    self.close(CloseReason::Rejected(r.into()));
                    return Ok(());
                }
                Message::Error { code, text } => {
                    self.close(CloseReason::Error(code, text.to_owned()));
                    return Ok(());
                }
                Message::Bye { reason, text } => {
                    self.close(CloseReason::Bye(reason, text.to_owned()));
                    return Ok(());
                }
                Message::Status(st) => {
                    self.server_open = st.open;
                    self.slack = st.slack;
                    self.waiting = st.waiting;
                    self.note_slack(st.slack);
                }
                Message::Inputs(i) => {
                    if let Some(seat) = self.seat()
                        && let Some(&(_, acked)) = i.acks.iter().find(|(s, _)| *s == seat)
                    {
                        self.acked = self.acked.max(acked);
                        while self.unacked.front().is_some_and(|(t, _)| *t < acked) {
                            if let Some(sent) = self.unacked.pop_front()
                                && self.config.keep_frames > 0
                                && sent.0 >= self.next_tick
                            {
                                if self.sent.len() >= self.config.max_unacked {
                                    self.sent.pop_front();
                                }
                                self.sent.push_back(sent);
                            }
                        }
                        // A seat taken back: the sequencer already holds its
                        // inputs up to `acked`; commit from there.
                        self.next_commit = self.next_commit.max(acked);
                    }
                }
                Message::Resync { id, verdict } => self.resync(id, verdict),
                Message::Pause { frame } => {
                    let stale = self.lifted.is_some_and(|l| frame <= l);
                    if self.pause_frame.is_none() && frame >= self.next_tick && !stale {
                        self.pause_frame = Some(frame);
                        self.push_event(Event::Paused { frame });
                    }
                    if self.pause_requested == Some(true) {
                        self.pause_requested = None;
                    }
                }
                Message::Resume { lifted } => {
                    if self.lifted.is_none_or(|l| lifted > l) {
                        self.lifted = Some(lifted);
                        if let Some(frame) = self.pause_frame.take() {
                            self.push_event(Event::Resumed { frame });
                        }
                    }
                    if self.pause_requested == Some(false) {
                        self.pause_requested = None;
                    }
                }
                Message::Ping { stamp } => self.link.pinged_by(stamp, now),
                Message::Pong {
                    stamp,
                    held_ms,
                    received,
                    sent,
                } => {
                    let pong = (stamp, held_ms, received, sent);
                    self.link.ponged(now, pong);
                }
                Message::SnapshotChunk(c) => self.take_chunk(&c),
                Message::SnapshotRequest { id, tick } => self.snapshot_requested(id, tick),
                Message::Member(m) => self.take_member(&m),
                Message::SnapshotAck(a) => {
                    if let Some(tx) = self.donation.as_mut().and_then(|d| d.sender.as_mut()) {
                        tx.take_ack(&a, now);
                        if tx.done() {
                            self.donation = None;
                        }
                    }
                }
                _ => {}
            }
        }
        // Joining: frames count once the snapshot's tick says where they
        // start.
        let waiting_for_start = self
            .joining
            .as_ref()
            .is_some_and(|j| j.tick.is_none() && !j.resync);
        if self.connected() && !waiting_for_start {
            let had_gap = self.frames.front().is_some_and(Option::is_none);
            for f in frames {
                self.store_frame(f);
            }
            // A hole before frames that did arrive: say so at once.
            if !had_gap && self.frames.front().is_some_and(Option::is_none) {
                self.link.flush = true;
            }
        }
        Ok(())
    }

    /// A roster entry: kept if newer than the one held, acknowledged
    /// either way (a repeat means our acknowledgement was lost).
    fn take_member(&mut self, m: &wire::Member<'_>) {
        let newer = self.roster.get(&m.seat).is_none_or(|(v, _)| m.version > *v);
        if newer {
            let info = m.holder.map(|h| SeatInfo {
                seat: m.seat,
                playing: h.playing,
                hosts: h.hosts,
                commitment: h.commitment,
                contact: h.contact.to_vec(),
            });
            self.roster.insert(m.seat, (m.version, info));
            self.roster_changes += 1;
        }
        if !self.member_acks.contains(&(m.seat, m.version)) {
            if self.member_acks.len() >= MEMBER_ACKS {
                self.member_acks.pop_front();
            }
            self.member_acks.push_back((m.seat, m.version));
        }
        self.link.flush = true;
    }

    /// The room's roster, as the sequencer shared it: every seat held, in
    /// seat order (empty unless the room shares it, as a host-mode room
    /// does).
    pub fn roster(&self) -> impl Iterator<Item = &SeatInfo> + '_ {
        self.roster.values().filter_map(|(_, s)| s.as_ref())
    }

    /// Every roster entry received, the empty seats included (`None`).
    pub(crate) fn roster_entries(
        &self,
    ) -> impl Iterator<Item = (PlayerId, Option<&SeatInfo>)> + '_ {
        self.roster.iter().map(|(k, (_, s))| (*k, s.as_ref()))
    }

    /// Changes to the roster so far: a new value says look again.
    pub(crate) fn roster_changes(&self) -> u64 {
        self.roster_changes
    }

    /// A chunk of the snapshot we are joining from.
    fn take_chunk(&mut self, c: &wire::SnapshotChunk<'_>) {
        let Some(j) = self
            .joining
            .as_mut()
            .filter(|j| !j.restored && j.ready.is_none())
        else {
            return;
        };
        self.link.flush = true;
        // A client being resynced runs on up to the snapshot's tick (the
        // sequencer sends it the frames), so its game holds its own state
        // there to compare; a joiner's stream starts right after it.
        let runs_up = j.resync && self.next_tick <= c.tick;
        if j.tick != Some(c.tick) {
            j.tick = Some(c.tick);
            if !runs_up {
                self.next_tick = c.tick.saturating_add(1);
                self.frames.clear();
            }
        }
        match j.receiver.take(c) {
            Ok(Some(snapshot)) => {
                j.ready = Some(snapshot);
                self.announce_snapshot();
            }
            Ok(None) => {}
            Err(_) => self.stats.snapshot_errors += 1,
        }
    }

    /// Tells the game the snapshot is whole, once it has run up to its tick
    /// (a client being resynced) or at once (a joiner).
    fn announce_snapshot(&mut self) {
        let Some(j) = self.joining.as_mut() else {
            return;
        };
        let Some(tick) = j.ready.as_ref().map(|s| s.tick) else {
            return;
        };
        if j.announced || self.next_tick <= tick {
            return;
        }
        j.announced = true;
        // The stream goes on right after the snapshot's tick.
        if self.next_tick != tick.saturating_add(1) {
            self.next_tick = tick.saturating_add(1);
            self.frames.clear();
        }
        // The game's state is replaced: our chain starts over.
        self.checks.restart();
        self.server_checks.restart();
        self.push_event(Event::Snapshot { tick });
    }

    /// The sequencer asks for our state after `tick` for a joiner.
    fn snapshot_requested(&mut self, id: u32, tick: Tick) {
        if self.donation.as_ref().is_some_and(|d| d.id == id) {
            return;
        }
        // The state after a tick already run is gone (unless it is the
        // last one run: the game's current state).
        if tick.saturating_add(1) < self.next_tick || self.joining.is_some() {
            return;
        }
        self.donation = Some(Donation {
            id,
            tick,
            sender: None,
        });
        self.push_event(Event::SnapshotRequested { tick });
    }

    fn welcomed(&mut self, mut w: Welcome) {
        if self.connected() {
            return;
        }
        if w.seat.is_some() {
            self.token = Some(w.token);
            // Every seated client measures how its frames arrive (late
            // frames, slack); only an adaptive one says what it wants.
            if self.tracker.is_none() {
                let a = self.config.adaptive.clone().unwrap_or_default();
                self.tracker = Some(DelayTracker::new(a, w.tick_rate, w.delay));
            }
        }
        let reconnected = core::mem::take(&mut self.reconnecting);
        self.moving = false;
        if reconnected {
            // Our state stands unless the sequencer sends a snapshot, or we
            // had none of our own yet (we were joining).
            let kept = !w.snapshot && self.joining.is_none();
            // Kept: our lead is the delay we last ran with; the changes
            // since are in the frames still to run.
            if kept && let Some(old) = self.welcome() {
                w.delay = old.delay;
            }
            self.state = State::Connected(w);
            if !kept {
                self.frames.clear();
                self.unacked.clear();
                self.joining = None;
                self.start_over(w);
            }
            self.push_event(Event::Reconnected {
                seat: w.seat,
                tick: self.next_tick,
                kept,
            });
            return;
        }
        self.start_over(w);
        self.state = State::Connected(w);
        self.push_event(Event::Connected {
            seat: w.seat,
            tick: w.tick,
        });
    }

    /// The sequencer found our state diverged from the majority's: we wait
    /// for a snapshot as a joiner does (the game stops getting frames until
    /// it arrives), then run on from it.
    fn resync(&mut self, id: u32, verdict: wire::Checkpoint) {
        if id <= self.resynced || self.joining.is_some() || !self.connected() {
            return;
        }
        // The verdict that found us, compared before our state goes (its
        // own message may have been lost): the search starts from it.
        let mut checks = Incoming::default();
        checks.checkpoints.push(verdict);
        let now = self.now;
        for o in self.server_checks.receive(&self.checks, &checks, now) {
            self.check_outcome(o);
        }
        let previous = self.resynced;
        self.resynced = id;
        self.joining = Some(Joining::new(&self.config, Some((self.now, previous))));
        // Our seat runs neutral until we caught up: inputs not yet
        // acknowledged will never run. Our hashes describe a state about to
        // be replaced: no more is reported until the new one runs (what we
        // hold still answers the search for where we parted).
        self.unacked.clear();
        // Commits start again where the seat goes live; none made before
        // may leave a gap there.
        self.next_commit = self.next_tick;
        self.link.flush = true;
        if self.resync_told != id {
            self.resync_told = id;
            self.push_event(Event::Resyncing);
        }
    }

    /// Takes our position from `w`, as a session that has run nothing.
    fn start_over(&mut self, w: Welcome) {
        if w.snapshot {
            self.joining = Some(Joining::new(&self.config, None));
        }
        self.next_tick = if w.snapshot { w.tick } else { w.start };
        self.next_commit = w.tick.saturating_add(w.delay);
        self.lead = 0;
        self.slack_low = None;
        self.raised_for = None;
        self.acked = Tick::ZERO;
        // A state from a snapshot has a chain complete from its next block;
        // one run from the room's first tick, from the start.
        self.checks.restart();
        self.server_checks.restart();
        if !w.snapshot {
            self.checks.starts_at(w.start);
        }
        self.server_open = w.tick;
    }

    fn store_frame(&mut self, f: Frame<I>) {
        if f.tick < self.next_tick {
            return;
        }
        let i = f.tick.since(self.next_tick) as usize;
        if i >= self.config.window as usize {
            return;
        }
        while self.frames.len() <= i {
            self.frames.push_back(None);
        }
        if self.frames[i].is_none() {
            if let Some(t) = self.tracker.as_mut()
                && t.arrived(f.tick, self.now)
            {
                self.stats.late_frames += 1;
            }
            self.frames[i] = Some(f);
        }
    }

    /// Ends the session here, for `reason` (the game hears
    /// [`Event::Closed`]): host migration's way of telling a player the
    /// match went on without it.
    pub(crate) fn end(&mut self, reason: CloseReason) {
        self.close(reason);
    }

    fn close(&mut self, reason: CloseReason) {
        if matches!(self.state, State::Closed(_)) {
            return;
        }
        let ev = match &reason {
            CloseReason::Rejected(r) => Event::Rejected { reason: r.clone() },
            other => Event::Closed {
                reason: other.clone(),
            },
        };
        self.state = State::Closed(reason);
        self.push_event(ev);
    }

    fn push_event(&mut self, ev: Event) {
        self.events.push(ev);
    }

    /// Lets timers fire: the Hello until answered, resends, keepalives and
    /// the connection timeout.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        let now = self.now;
        if matches!(self.state, State::Closed(_)) {
            if self.saying_goodbye() && self.send_due() <= now {
                self.link.flush = true;
            }
            return;
        }
        if self.link.silent_for(now) >= self.config.timeout {
            self.close(CloseReason::TimedOut);
            return;
        }
        if let Some(silent) = self.link.interrupt(now, self.config.interrupt_after, false) {
            self.push_event(Event::Interrupted {
                peer: self.server,
                player: None,
                silent_for: silent,
            });
        }
        let chunk_due = !self.link.chunk_starved
            && self
                .donation
                .as_ref()
                .and_then(|d| d.sender.as_ref())
                .is_some_and(|tx| tx.has_due(now));
        if let Some(o) = self.server_checks.progress(now) {
            self.check_outcome(o);
        }
        // A resync whose snapshot never started is given up.
        if let Some(j) = &self.joining
            && j.tick.is_none()
            && let Some((since, previous)) = j.resync_wait
            && now >= since + RESYNC_WAIT
        {
            self.joining = None;
            self.resynced = previous;
        }
        let question_due = self.server_checks.question_due().is_some_and(|d| d <= now);
        if self.send_due() <= now || chunk_due || question_due {
            self.link.flush = true;
        }
    }

    /// Writes the next datagram for the sequencer into `buf`.
    pub fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<Transmit> {
        if !self.link.flush || self.closed().is_some_and(|r| *r != CloseReason::Left) {
            return None;
        }
        buf.clear();
        // The base is the first frame we lack: the sequencer resends from it.
        let base = self
            .next_tick
            .saturating_add(self.frames.iter().take_while(|f| f.is_some()).count() as u32);
        // Room for the seal either way, so a server sees one size limit for
        // what is inside, sealed or not.
        let budget = self.config.max_datagram - secure::SEALED_OVERHEAD;
        let mut w = DatagramWriter::new(buf, base, budget);
        if self.leaving.is_some() {
            w.put(Message::Bye {
                reason: ByeReason::Leaving,
                text: "",
            });
        }
        if matches!(self.state, State::Connecting) {
            let config = &self.config;
            w.put(Message::Hello(Hello {
                fingerprint: config.fingerprint,
                spectator: config.spectator,
                room: &config.room,
                name: &config.name,
                ticket: &config.ticket,
                // Never the token itself, which anyone watching could
                // replay: proof of it, bound to this handshake's cookie and
                // key. Not before a cookie when sealing (nothing to bind).
                resume: config
                    .resume
                    .filter(|_| self.public.is_none() || !self.cookie.is_empty())
                    .map(|t| admission::resume_proof(&t, &self.cookie, self.public.as_ref())),
                codec: config.codec,
                cookie: (!self.cookie.is_empty()).then_some(self.cookie.as_slice()),
                key: self.public,
                // Where we are, when we kept our state across a lost
                // connection: the rest may come from the history.
                resume_from: (self.reconnecting && self.joining.is_none()).then_some(base),
            }));
        }
        if let Some(pong) = self.link.pong(self.now) {
            w.put(pong);
        }
        if self.connected()
            && let Some(ping) = self.link.ping(self.now)
        {
            w.put(ping);
        }
        match self.pause_requested {
            Some(true) => w.put(Message::Pause {
                frame: self.next_commit,
            }),
            Some(false) => w.put(Message::Resume {
                lifted: self.next_tick,
            }),
            None => {}
        }
        self.server_checks.write(&self.checks, &mut w, self.now);
        for _ in 0..MEMBER_ACKS_PER_DATAGRAM {
            let Some((seat, version)) = self.member_acks.pop_front() else {
                break;
            };
            w.put(Message::MemberAck { seat, version });
        }
        if let Some(seat) = self.seat() {
            // Every unacknowledged input, oldest first, one run per stretch of
            // consecutive ticks (a late client may have skipped some).
            let mut left = w.remaining();
            let mut runs: Vec<(Tick, ChainWriter<I>)> = Vec::new();
            let mut expect: Option<Tick> = None;
            for (tick, input) in self.unacked.iter() {
                if expect != Some(*tick)
                    || runs.last().is_none_or(|(_, c)| c.count() >= wire::MAX_RUN)
                {
                    if let Some((_, c)) = runs.last() {
                        left = left.saturating_sub(c.len() + 12);
                    }
                    if left < 32 {
                        break;
                    }
                    runs.push((*tick, ChainWriter::new()));
                }
                let Some((_, chain)) = runs.last_mut() else {
                    break;
                };
                if !chain.push(input, left.saturating_sub(24)) {
                    break;
                }
                expect = tick.next();
            }
            let bytes: Vec<Vec<u8>> = runs
                .iter()
                .map(|(_, c)| {
                    let mut v = Vec::with_capacity(c.len());
                    c.write(&mut v);
                    v
                })
                .collect();
            let runs: Vec<InputRun<'_>> = runs
                .iter()
                .zip(&bytes)
                .filter(|((_, c), _)| !c.is_empty())
                .map(|((start, c), b)| InputRun {
                    seat,
                    start: *start,
                    count: c.count() as u32,
                    chain: b,
                })
                .collect();
            if !runs.is_empty() {
                w.put(Message::Inputs(Inputs { acks: vec![], runs }));
            }
        }
        if let Some(j) = &self.joining
            && let Some(ack) = j.receiver.current_ack()
        {
            w.put(Message::SnapshotAck(ack));
        }
        if self.says_caught_up() {
            w.put(Message::CaughtUp {
                tick: self.next_tick,
            });
        }
        if let Some(t) = self.tracker.as_ref().filter(|_| {
            self.config.adaptive.is_some()
                && self.joining.is_none()
                && self.connected()
                && self.leaving.is_none()
        }) {
            w.put(Message::DelayWanted { delay: t.wanted() });
        }
        let mut more = false;
        if let Some(tx) = self.donation.as_mut().and_then(|d| d.sender.as_mut()) {
            let carried = tx.write_due(&mut w, self.now);
            // Another datagram at once only if this one made room for a
            // chunk (else the next one would not either).
            more = carried && tx.has_due(self.now);
            self.link.chunk_starved = !carried && tx.has_due(self.now);
        }
        if matches!(self.state, State::Connecting) {
            // A server answers an unproven address with no more bytes than
            // it received: give it room for its challenge.
            w.pad_to(MIN_HELLO_DATAGRAM);
        }
        let mut len = w.finish();
        if let Some(channel) = &mut self.channel {
            let mut sealed = core::mem::take(&mut self.crypt);
            sealed.clear();
            channel.seal(&buf[..len], &mut sealed);
            buf.clear();
            buf.extend_from_slice(&sealed);
            len = buf.len();
            self.crypt = sealed;
        }
        // A snapshot goes out as fast as its window allows.
        self.link.flush = more;
        let timed = self.connected();
        self.link
            .sent(self.now, len, self.config.ping_interval, timed);
        self.stats.datagrams_sent += 1;
        self.stats.bytes_sent += len as u64;
        if self.leaving.is_some() && !matches!(self.state, State::Closed(_)) {
            self.state = State::Closed(CloseReason::Left);
        }
        Some(Transmit {
            destination: self.server,
            len,
        })
    }

    fn send_due(&self) -> Instant {
        let interval = if self.leaving.is_some() || self.moving && !self.connected() {
            self.config.resend_interval
        } else if !self.connected() {
            self.config.hello_interval
        } else if !self.unacked.is_empty()
            || self.server_checks.has_news(&self.checks, self.now)
            || self.pause_requested.is_some()
            || self.joining.is_some()
            || self.donation.is_some()
        {
            self.config.resend_interval
        } else {
            self.config.keepalive_interval
        };
        self.link.send_due(self.started, interval)
    }

    /// When [`handle_timeout`](Self::handle_timeout) next needs calling.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let resync = self
            .joining
            .as_ref()
            .filter(|j| j.tick.is_none())
            .and_then(|j| j.resync_wait)
            .map(|(since, _)| since + RESYNC_WAIT);
        if matches!(self.state, State::Closed(_)) {
            return self.saying_goodbye().then(|| self.send_due());
        }
        let heard = self.link.heard_or_since();
        let mut t = self.send_due().min(heard + self.config.timeout);
        if let Some(r) = self
            .donation
            .as_ref()
            .and_then(|d| d.sender.as_ref())
            .filter(|_| !self.link.chunk_starved)
            .and_then(|tx| tx.next_resend())
        {
            t = t.min(r);
        }
        if let Some(i) = self.link.interrupt_due(self.config.interrupt_after, false) {
            t = t.min(i);
        }
        if let Some(q) = self.server_checks.question_due() {
            t = t.min(q);
        }
        if let Some(r) = resync {
            t = t.min(r);
        }
        Some(t)
    }
}

crate::endpoint::forward_to_inherent!(ClientSession, DatagramError);
