//! A client of a sequencer.

use super::{CloseReason, Rejection};
use crate::admission;
use crate::checks::{Incoming, LocalChecks, Outcome, RemoteChecks};
use crate::endpoint::Transmit;
use crate::error::{
    ChecksumError, CommitError, ConfigError, DatagramError, Incompatibility, PauseError,
    ReconnectError,
};
use crate::link::{self, Link, StallMeter, Traffic};
use crate::rules::limits;
use crate::rules::pause::{PauseAgreement, PauseChange};
use crate::secure::{self, SecureChannel};
use crate::shared::{Events, Rate};
use crate::snapshot::{Snapshot, SnapshotError, SnapshotLimits, SnapshotReceiver, SnapshotSender};
use crate::wire::{
    self, ByeReason, ChainWriter, Datagram, DatagramWriter, Hello, InputCodec, InputRun, Inputs,
    MAX_COOKIE, MIN_HELLO_DATAGRAM, Message, ResumeToken, Start, Welcome, WireError,
};
use crate::{
    AdaptiveDelay, DelayTracker, Event, Frame, Input, Instant, PeerId, PlayerId, SystemEvent, Tick,
};
use core::time::Duration;
use std::collections::{BTreeMap, VecDeque};

mod config;
mod join;
mod play;
mod receive;
mod recent;
mod reconnect;
mod roster;
mod send;
mod timers;

pub use config::{ClientConfig, ClientStats, SeatInfo};
use join::{Donation, Joining};

/// Redirects a client follows before it takes the next as a refusal
/// (relays that keep sending it on disagree about where the room is).
pub const MAX_REDIRECTS: u32 = 4;
/// Most events held for the game before the oldest are dropped.
const EVENT_QUEUE_CAP: usize = 1024;
/// How long a resync waits for its snapshot to start before it is given up
/// (the sequencer repeats its `Resync` while it still means it).
const RESYNC_WAIT: Duration = Duration::from_secs(3);

/// `Frames` messages kept at most while the frame they are coded against
/// has not arrived: a few seconds of datagrams, so that a frame that lost
/// every copy, once resent, brings every frame sent since with it.
const WAITING_FRAMES: usize = 256;
/// Bytes of `Frames` bodies kept at most while they wait.
const WAITING_BYTES: usize = 256 * 1024;

/// A datagram's frames, and its `Frames` messages waiting for the frame
/// they are coded against.
type TypedFrames<I> = (Vec<receive::Decoded<I>>, Vec<WaitingFrames>);

/// A `Frames` message waiting for the frame it is coded against.
#[derive(Debug, Clone)]
struct WaitingFrames {
    start: Tick,
    count: u32,
    seats: u32,
    reference: Option<Tick>,
    body: Vec<u8>,
}
/// How many times, a resend interval apart, a leaving client says goodbye
/// unless the server answers first.
pub const GOODBYES: u32 = 8;
/// Roster acknowledgements held for the next datagrams, at most (the
/// sequencer sends again what was not acknowledged).
const MEMBER_ACKS: usize = 16;
/// Roster acknowledgements one datagram carries at most.
const MEMBER_ACKS_PER_DATAGRAM: usize = 4;

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
    /// The frames run last, which frames may be coded against.
    recent: recent::Recent<I>,
    /// `Frames` messages coded against a frame that has not arrived yet.
    waiting_frames: VecDeque<WaitingFrames>,
    next_tick: Tick,
    next_commit: Tick,
    /// Committed inputs the sequencer has not acknowledged, oldest first.
    unacked: VecDeque<(Tick, I)>,
    /// Which of them go in the next datagram (see `link::resend`), by
    /// tick.
    inputs_sent: link::Resend,
    /// Our latest inputs, which runs are coded against (see
    /// [`link::reference`](crate::link::reference)).
    own_inputs: link::Recent<I>,
    /// How the sequencer's acknowledgement of our inputs moves.
    ack_watch: link::AckWatch,
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
    /// The sequencer's pause in flight and the last it lifted.
    pause: PauseAgreement,
    pause_requested: Option<bool>,
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
    /// Decodes datagrams in storage kept from one to the next.
    decoder: wire::Decoder,
    /// Our inputs' runs, kept from one datagram to the next so that
    /// sending allocates nothing once they have grown: each run being
    /// written, the chains' bytes, and the list of runs lent to the
    /// datagram (empty between datagrams).
    run_chains: Vec<send::RunOut<I>>,
    run_bytes: Vec<u8>,
    run_list: Vec<InputRun<'static>>,
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
    /// How the room's match starts, as its lobby last said.
    lobby_rule: Start,
    /// Whether we said we are ready ([`set_ready`](Self::set_ready)).
    ready: bool,
    /// Where the relay sent us, until the caller follows it.
    redirect: Option<std::net::SocketAddr>,
    /// Redirects taken so far.
    redirects: u32,
    /// Seats whose inputs did not decode as ours, told to the game once.
    undecodable_seats: std::collections::BTreeSet<PlayerId>,
    /// In a room of opaque inputs, the relay's bytes of the frames held
    /// (see [`crate::input::relay`]), by tick: what later frames are
    /// coded against.
    relay_frames: BTreeMap<Tick, Vec<Option<Vec<u8>>>>,
    /// The neutral input's encoding.
    neutral: Vec<u8>,
}

/// A room's lobby, as a client sees it before the match starts (see
/// [`ClientSession::lobby`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lobby {
    /// How the match starts.
    pub start: Start,
    /// Players seated, as the roster shows them so far.
    pub seated: u16,
    /// Of them, those who said they are ready.
    pub ready: u16,
}

impl<I: Input> ClientSession<I> {
    /// A client that will connect to the sequencer at `server` (the id the
    /// caller's transport uses for it).
    pub fn new(config: ClientConfig, server: PeerId, now: Instant) -> Result<Self, ConfigError> {
        config.validate()?;
        let public = config.secret.as_ref().map(secure::client_public);
        Ok(Self {
            checks: LocalChecks::new(config.checksum_window, config.keepalive_interval),
            config,
            server,
            state: State::Connecting,
            started: now,
            now,
            server_base: Tick::ZERO,
            frames: VecDeque::new(),
            recent: recent::Recent::default(),
            waiting_frames: VecDeque::new(),
            next_tick: Tick::ZERO,
            next_commit: Tick::ZERO,
            unacked: VecDeque::new(),
            inputs_sent: link::Resend::new(Tick::ZERO),
            own_inputs: link::Recent::default(),
            ack_watch: link::AckWatch::default(),
            committed_at: VecDeque::new(),
            server_open: Tick::ZERO,
            slack: 0,
            lead: 0,
            slack_low: None,
            raised_for: None,
            acked: Tick::ZERO,
            waiting: Vec::new(),
            pause: PauseAgreement::default(),
            pause_requested: None,
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
            decoder: wire::Decoder::default(),
            run_chains: Vec::new(),
            run_bytes: Vec::new(),
            run_list: Vec::new(),
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
            lobby_rule: Start::AtOnce,
            ready: false,
            redirect: None,
            redirects: 0,
            undecodable_seats: std::collections::BTreeSet::new(),
            relay_frames: BTreeMap::new(),
            neutral: crate::input::relay::neutral::<I>(),
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

    /// While the room's match has not started, its lobby: how the match
    /// starts and how many are seated and ready so far
    /// ([`roster`](Self::roster) lists them by name), and no input is due.
    /// `None` once the match started (or before we are connected).
    pub fn lobby(&self) -> Option<Lobby> {
        if !self.lobby_open() {
            return None;
        }
        let (mut seated, mut ready) = (0, 0);
        for s in self.roster() {
            seated += 1;
            ready += u16::from(s.ready);
        }
        Some(Lobby {
            start: self.lobby_rule,
            seated,
            ready,
        })
    }

    /// Whether the room's lobby is open, as far as we know.
    fn lobby_open(&self) -> bool {
        self.welcome().is_some_and(|w| w.lobby)
    }

    /// The match's id, once connected (see
    /// [`Welcome::match_id`](crate::wire::Welcome::match_id)).
    pub fn match_id(&self) -> Option<u64> {
        self.welcome().map(|w| w.match_id)
    }

    /// Says whether we are ready to start: in a room whose match starts
    /// once its players are ready ([`Start::Ready`]), it starts when every
    /// seated player said so. Sent until the roster shows it; it can be
    /// taken back while the lobby is open (the sequencer takes a change at
    /// most once a second), and counts for nothing once the match
    /// started. A spectator has nothing to say.
    ///
    /// ```
    /// use lockstep_core::sequenced::{ClientConfig, ClientSession};
    /// use lockstep_core::{Instant, PeerId};
    /// let mut c = ClientSession::<u8>::new(ClientConfig::default(), PeerId(0), Instant::ZERO)?;
    /// c.set_ready(true);
    /// assert!(c.is_ready());
    /// # Ok::<(), lockstep_core::ConfigError>(())
    /// ```
    pub fn set_ready(&mut self, ready: bool) {
        if self.ready != ready {
            self.ready = ready;
            self.link.flush = true;
        }
    }

    /// Whether we said we are ready ([`set_ready`](Self::set_ready)).
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// Whether the roster does not show our readiness yet, while the
    /// lobby is open: it goes again.
    pub(super) fn ready_unshown(&self) -> bool {
        let Some(seat) = self.seat().filter(|_| self.lobby_open()) else {
            return false;
        };
        let shown = self
            .roster
            .get(&seat)
            .and_then(|(_, s)| s.as_ref())
            .is_some_and(|s| s.ready);
        shown != self.ready
    }

    /// The next frame to run.
    pub fn frame(&self) -> Tick {
        self.next_tick
    }

    /// How many frames the room has sealed past the next one we run, as
    /// far as we know: how far behind the match we are (a joiner replaying
    /// it, a client after a hitch), whether or not the frames are in hand.
    pub fn frames_behind(&self) -> u32 {
        self.server_open.since(self.next_tick)
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
    /// runs behind the others', and catching up brings it in step) or
    /// while we are joining (a joiner holds nobody up, and it goes live
    /// only once it has run up to the room's open tick); otherwise every
    /// player runs at the tick rate.
    ///
    /// ```text
    /// let due = pacer.ticks_due(now, session.ready_to_pace());
    /// ```
    pub fn ready_to_pace(&self) -> usize {
        let ready = self.frames.iter().take_while(|f| f.is_some()).count();
        if self.paced_together() {
            ready.min(1)
        } else {
            ready
        }
    }

    /// Whether every player's clock sets the pace together, so that a
    /// pacer must never run slower than the tick rate for want of a frame
    /// in hand: a `WaitForAll` room, in step, not waiting on our input (the
    /// case where [`ready_to_pace`](Self::ready_to_pace) counts one frame at
    /// most). At a one-tick delay the next frame is never in hand a tick
    /// ahead, and a pacer that slowed while short of it slowed the whole
    /// room (28.6 ticks a second of 30 on a 20 ms link). A loop whose pacer
    /// is told a frame is in hand whenever this holds gives the ticks back
    /// that then cannot run ([`Pacer::give_back`](crate::Pacer::give_back));
    /// the runner does.
    pub fn paced_together(&self) -> bool {
        self.welcome().is_some_and(|w| {
            !w.deadline
                && self.joining.is_none()
                && w.seat.is_none_or(|me| !self.waiting.contains(&me))
        })
    }

    /// Whether the sequencer has paused the game.
    pub fn paused(&self) -> bool {
        self.pause.frame().is_some()
    }

    /// Whether the simulation rests on the pause frame.
    pub fn frozen(&self) -> bool {
        self.pause.frame() == Some(self.next_tick)
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
        if let Some(w) = self.welcome() {
            s.delay = w.delay;
        }
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
            self.store_frame(receive::Decoded::typed(f));
        }
    }

    /// Forgets the frames held from `tick` on, not run yet (someone
    /// else's that came past a gap, for a player taking over).
    pub(crate) fn forget_frames_from(&mut self, tick: Tick) {
        let keep = tick.since(self.next_tick.min(tick)) as usize;
        self.frames.truncate(keep);
        self.waiting_frames.clear();
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

    /// Asks the sequencer to pause; every client freezes on the same frame.
    pub fn request_pause(&mut self) -> Result<(), PauseError> {
        if self.seat().is_none() {
            return Err(PauseError::Observer);
        }
        self.pause_requested = Some(true);
        self.link.flush = true;
        Ok(())
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

    /// Stops trying to take the seat back: a session whose connection is
    /// lost (it timed out, or a [`reconnect`](Self::reconnect) is under
    /// way) closes with [`CloseReason::GaveUp`], with no goodbye (nobody
    /// hears it), so that [`closed`](Self::closed) says why the match
    /// ended and [`can_reconnect`](Self::can_reconnect) is false. For a
    /// loop's reconnect rule that has run out of time
    /// (`lockstep_net::RelayClient` calls it). Does nothing while
    /// connected (to end a live match, [`leave`](Self::leave)) or once
    /// closed for another reason.
    ///
    /// ```
    /// use lockstep_core::sequenced::{ClientConfig, ClientSession, CloseReason};
    /// use lockstep_core::{Instant, PeerId};
    ///
    /// let mut s = ClientSession::<u8>::new(ClientConfig::default(), PeerId(0), Instant::ZERO)?;
    /// s.give_up();
    /// assert_eq!(s.closed(), Some(&CloseReason::GaveUp));
    /// assert!(!s.can_reconnect());
    /// # Ok::<(), lockstep_core::ConfigError>(())
    /// ```
    pub fn give_up(&mut self) {
        let lost = match &self.state {
            State::Connected(_) => false,
            State::Closed(_) => self.can_reconnect(),
            _ => true,
        };
        if lost {
            self.disconnect(State::Closed(CloseReason::GaveUp));
            self.push_event(Event::Closed {
                reason: CloseReason::GaveUp,
            });
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
        self.checks.may_report(tick, self.next_tick)?;
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
        self.disconnect(State::Closed(reason));
        self.push_event(ev);
    }

    /// Leaves the connected state for `next` (closed, or connecting again):
    /// the stats go on showing the delay that was in force.
    fn disconnect(&mut self, next: State) {
        if let Some(w) = self.welcome() {
            self.stats.delay = w.delay;
        }
        self.state = next;
    }

    fn push_event(&mut self, ev: Event) {
        self.events.push(ev);
    }
}

crate::endpoint::forward_to_inherent!(ClientSession, DatagramError);
