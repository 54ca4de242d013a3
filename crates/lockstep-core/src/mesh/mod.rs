//! The mesh topology: every peer talks to every peer, no server.
//!
//! Each peer stamps its local input `delay` ticks ahead and sends it to every
//! other peer; a tick is confirmed once every seated player's input for it is
//! in hand. See [`MeshSession`] for the rules and the call order.

mod abandon;
mod checks;
mod config;
mod delay;
mod game;
mod members;
mod observe;
mod packet;
mod receive;
mod resync;
mod store;
mod timers;

pub use config::{MeshConfig, MeshStats, PeerStats, Roster};
use members::{Peer, Seat, new_slot, seat_id};

use crate::checks::{Incoming, LocalChecks, Mismatch, Outcome, RemoteChecks};
use crate::endpoint::Transmit;
use crate::error::{
    AbandonError, ChecksumError, CommitError, ConfigError, DatagramError, Incompatibility,
    PauseError,
};
use crate::frame::SystemEvent;
use crate::link::{Link, Recent, StallMeter, Traffic};
use crate::rules::limits;
use crate::rules::pause::{PauseAgreement, PauseChange};
use crate::rules::wait::{self, Waits};
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
    /// Whom our next tick waits on, once it has waited a tick period, and
    /// the tick it is for.
    waits: (Waits, Tick),
    /// Our latest inputs, which runs to peers are coded against (see
    /// [`link::reference`]).
    own_inputs: Recent<I>,
    /// Per seat, its latest inputs as its own peer sent them: what that
    /// peer's runs may be coded against.
    seat_inputs: Vec<Recent<I>>,
    cursor: usize,
    scratch: Vec<u8>,
    /// A run's inputs as decoded, kept to reuse its storage.
    run_inputs: Vec<I>,
    /// What coding inputs for a datagram works in, kept likewise.
    packing: packet::Packing<I>,
    /// Whom our next tick awaits, as of the last timeout (kept to reuse its
    /// storage).
    missing: Vec<PlayerId>,
    /// Decodes datagrams in storage kept from one to the next.
    decoder: wire::Decoder,
    /// Until when [`handle_timeout`](Self::handle_timeout) has nothing to
    /// do, as worked out by its last call that did work: the next timer
    /// then. `None` once anything but time passing may have changed the
    /// session (a datagram, a commit, a frame run, ...).
    quiet_until: Option<Instant>,
    /// Whether a peer may have a datagram due: false once
    /// [`poll_transmit`](Self::poll_transmit) found none, until anything
    /// but time passing changes the session or a timeout does its work
    /// (every peer's `flush` is set in one or the other), so that a loop's
    /// idle polls do not read every peer's state.
    may_flush: bool,
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
        let (width, local_seat) = check_roster(&roster, local, under_way)?;
        let seats = seats_of(&roster, width, config.first_tick);
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
                let mut c = LocalChecks::new(config.checksum_window, config.keepalive_interval);
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
            waits: (Waits::default(), config_first),
            own_inputs: Recent::default(),
            seat_inputs: vec![Recent::default(); width],
            cursor: 0,
            scratch: Vec::new(),
            run_inputs: Vec::new(),
            packing: packet::Packing::default(),
            missing: Vec::new(),
            decoder: wire::Decoder::default(),
            quiet_until: None,
            may_flush: true,
        };
        session.prime(under_way);
        Ok(session)
    }

    /// The tick period the game runs at (`tick_rate`).
    pub(super) fn period(&self) -> Duration {
        Duration::from_secs(1) / self.config.tick_rate.max(1)
    }

    /// Primes the opening ticks so play starts at once instead of waiting
    /// a round trip for input nobody could have sent yet. (An observer
    /// joining under way runs no frame the feeder did not send it.) The
    /// first tick always exists: it carries the opening membership events.
    fn prime(&mut self, under_way: bool) {
        let primed = if under_way { 0 } else { self.config.delay };
        let (seats, start) = (&self.seats, self.start);
        for k in 0..primed {
            let tick = start.saturating_add(k);
            if let Some(slot) = self.store.ensure(tick, |t| new_slot(seats, start, t)) {
                for cell in &mut slot.cells {
                    if cell.is_unknown() {
                        *cell = Cell::Known(I::default());
                    }
                }
            }
        }
        self.store.ensure(start, |t| new_slot(seats, start, t));
        // Primed ticks are known to everyone: none of ours is to go.
        for p in &mut self.peers {
            p.inputs_sent = crate::link::Resend::new(start.saturating_add(primed));
        }
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

    /// Whether our state is being replaced with another player's after
    /// [`Event::Resyncing`] (false again once it is restored, or once the
    /// resync is given up).
    pub fn resyncing(&self) -> bool {
        self.resync.is_some()
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
    /// yet), our own seat. While our own input is missing because we are
    /// as far ahead of the slowest players as the lead limit allows, those
    /// players too. Read-only, so a HUD may ask every render frame.
    pub fn awaiting(&self) -> Vec<PlayerId> {
        let mut out = Vec::new();
        self.awaiting_into(&mut out);
        out
    }

    /// [`awaiting`](Self::awaiting), into `out` (emptied first).
    ///
    /// While our own input is missing only because the lead limit holds
    /// our commits, the slowest live players are named too: they hold the
    /// tick up. (A peer told that our tick waits on our own input alone
    /// takes us for a player that stopped sending it, and votes us out.)
    pub(super) fn awaiting_into(&self, out: &mut Vec<PlayerId>) {
        out.clear();
        if self.frozen() {
            return;
        }
        if self.resync_limit().is_some_and(|l| self.next_tick > l) {
            out.extend(self.local_seat);
            return;
        }
        let slot = self.store.get(self.next_tick);
        out.extend(
            (0..self.seats.len())
                .filter(|&i| match slot {
                    Some(s) => s.cells.get(i).is_some_and(|c| !c.is_settled()),
                    None => !self.seat_empty_at(i, self.next_tick),
                })
                .filter_map(seat_id),
        );
        if let Some(me) = self.local_seat
            && out.contains(&me)
            && self.lead_held()
        {
            let slowest = self.min_live_next();
            for p in &self.peers {
                if let Some(s) = p
                    .seat
                    .filter(|&s| p.next_tick == slowest && self.seat_live(s) && !out.contains(&s))
                {
                    out.push(s);
                }
            }
            out.sort_unstable();
        }
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
        self.stir();
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

    /// Writes the next datagram to send into `buf`.
    pub fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<Transmit> {
        // Peers take turns from the cursor on. A loop calls this far more
        // often than a datagram is due: finding none stays this short.
        if !self.may_flush {
            debug_assert!(
                self.peers.iter().all(|p| !p.link.flush),
                "a peer's datagram came due unseen"
            );
            return None;
        }
        let n = self.peers.len();
        let from = if self.cursor < n {
            self.cursor
        } else {
            self.cursor.checked_rem(n).unwrap_or(0)
        };
        let Some(i) = (from..n).chain(0..from).find(|&i| self.peers[i].link.flush) else {
            self.may_flush = false;
            return None;
        };
        Some(self.transmit_to(i, buf))
    }

    /// Writes the datagram due to peer `i` into `buf`.
    #[inline(never)]
    fn transmit_to(&mut self, i: usize, buf: &mut Vec<u8>) -> Transmit {
        let n = self.peers.len();
        self.stir();
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
        Transmit {
            destination: p.id,
            len: buf.len(),
        }
    }

    // ----- internals -----------------------------------------------------

    fn push_event(&mut self, ev: Event) {
        self.events.push(ev);
        self.stats.events_dropped = self.events.dropped();
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
}

crate::endpoint::forward_to_inherent!(MeshSession, DatagramError);

/// The roster checked for a session: each peer and seat once, seats within
/// the protocol's, someone playing, and `local` in it (an observer, when
/// the session is under way). Returns the seat count and `local`'s seat.
fn check_roster(
    roster: &Roster,
    local: PeerId,
    under_way: bool,
) -> Result<(usize, Option<PlayerId>), ConfigError> {
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
    Ok((width, local_seat))
}

/// `width` seats, those of the roster taken from `first` on, the rest
/// empty.
fn seats_of(roster: &Roster, width: usize, first: Tick) -> Vec<Seat> {
    let mut seats = vec![
        Seat {
            peer: None,
            empty_from: Some(first),
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
    seats
}
