//! Host mode that survives its host: every player runs a [`HostedSession`],
//! one of them hosting; when the host goes, the others carry the match on
//! under one of them.
//!
//! Each client knows the roster (seats, token commitments, contacts) from
//! the host. A client that hears nothing from the host for `host_timeout`,
//! or hears its goodbye, reports to the first seat of the roster's order
//! (playing seats with a contact, lowest first) that has not failed it: a
//! [`Takeover`](Message::Takeover) with its seat, its token, the frames it
//! holds, and its inputs for the ticks it has not run. The player on that
//! seat (the candidate) collects the reports until every surviving seat
//! reported, or `takeover_wait` passed with more than half of them, or
//! `takeover_alone` passed; fetches the frames up to the highest any
//! survivor holds; and starts a sequencer from the tick after
//! ([`Sequencer::take_over`]). The survivors then take their seats back on
//! it as reconnecting clients do, keeping their state.

use super::{
    ClientConfig, ClientSession, HOST_PEER, Handover, HostSession, Policy, SeatInfo, Sequencer,
    SequencerConfig, SequencerError, Survivor,
};
use crate::admission::token_commitment;
use crate::endpoint::Transmit;
use crate::error::{ChecksumError, CommitError, ConfigError, PauseError};
use crate::snapshot::{Snapshot, SnapshotError};
use crate::wire::{
    self, ChainWriter, Datagram, DatagramWriter, Frames, InputRun, Inputs, Message, ResumeToken,
};
use crate::{Event, Frame, Input, Instant, PeerId, PlayerId, SystemEvent, Tick};
use core::time::Duration;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Answers to reports from anyone queued at most.
const ANSWERS_QUEUED: usize = 64;

/// Reasons queued at most for [`HostedSession::poll_ignored`] (the rest are
/// only counted).
const IGNORED_QUEUED: usize = 64;

/// Why a [`HostedSession`] did not act on a takeover message (or acted
/// against its sender): for the application's log. A stream of these from
/// one peer is a sign of a broken or hostile player.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Ignored {
    /// A report whose token does not prove its seat (as the roster, or the
    /// new host's own seats, have it).
    #[error("a takeover report whose token does not prove seat {0}")]
    Unproven(PlayerId),
    /// A report for the seat of the host being replaced.
    #[error("a takeover report for the departing host's own seat {0}")]
    HostSeat(PlayerId),
    /// A report while we still hear our host: answered that it lives.
    #[error("a takeover report while the host is heard (answered that it lives)")]
    HostHeard,
    /// A report for a seat from somewhere else than the roster's contact
    /// for it (or before that contact was resolved).
    #[error("a takeover report for seat {0} from elsewhere than its roster address")]
    Elsewhere(PlayerId),
    /// A seat proven from two peers: held for nobody.
    #[error("seat {0} proven from two peers: held for nobody")]
    Contested(PlayerId),
    /// A claim to hold frames that brought none: cut to what we hold.
    #[error("seat {0} claimed frames it never sent: not believed")]
    ClaimNotBelieved(PlayerId),
    /// An answer from a player we are not reporting to.
    #[error("a takeover answer from a player we did not report to")]
    NotOurCandidate,
    /// Frames from a player not asked for them, or past a gap.
    #[error("frames from a player not asked for them, or past a gap")]
    FramesRefused,
    /// A datagram from the host we left for a new one: told it was
    /// replaced, and nothing taken.
    #[error("a datagram from the host we left (told it was replaced)")]
    OldHost,
    /// Hosting: a report for a seat we do not hold (answered `late`).
    #[error("a takeover report for a seat this host does not hold (answered late)")]
    Late,
    /// Collecting: a seat's own word that it hosts (`ready`), or that the
    /// match went on without us (`late`), no other player having said it
    /// follows that seat. Not believed (any seat could say it); a real
    /// host is named by the players that follow it, and reached that way.
    #[error("seat {0} says it hosts, on its own word only: not believed")]
    HostClaimNotBelieved(PlayerId),
    /// A refusal or goodbye from a host we moved to that never welcomed
    /// us, and that no other player said it follows: it counts as silent,
    /// and is taken over.
    #[error("a refusal or goodbye from a host that never welcomed us")]
    Unwelcomed,
    /// A report while we move to a new host that has not welcomed us yet:
    /// not answered (we cannot say that host lives).
    #[error("a takeover report while moving to a host that has not welcomed us")]
    Moving,
    /// Collecting: the report of a candidate earlier in the order that
    /// collects too. Not counted (both would go on); we yield to it.
    #[error("the report of seat {0}, an earlier candidate collecting too: not counted")]
    EarlierCandidate(PlayerId),
}

/// How a [`HostedSession`] plays, hosts, and takes over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostedConfig {
    /// The room, when hosting (its roster is always shared).
    pub sequencer: SequencerConfig,
    /// This player's client (it keeps at least the sequencer's history of
    /// frames, to serve those behind it if it takes over).
    pub client: ClientConfig,
    /// Silence from the host after which the others take over.
    pub host_timeout: Duration,
    /// How long a candidate waits for every survivor before going on with
    /// more than half of them.
    pub takeover_wait: Duration,
    /// How long a candidate waits before going on with whoever reported
    /// (a lone survivor plays on; two halves of a split network both go on).
    pub takeover_alone: Duration,
}

impl Default for HostedConfig {
    fn default() -> Self {
        Self {
            sequencer: SequencerConfig::default(),
            client: ClientConfig {
                keep_frames: 512,
                ..ClientConfig::default()
            },
            host_timeout: Duration::from_millis(500),
            takeover_wait: Duration::from_millis(300),
            takeover_alone: Duration::from_secs(10),
        }
    }
}

/// A survivor's report, as the candidate took it.
#[derive(Debug, Clone)]
struct Report<I> {
    peer: PeerId,
    token: ResumeToken,
    /// The other token the reporter named beside the one it proved.
    previous: Option<ResumeToken>,
    lacks: Tick,
    inputs: Vec<(Tick, I)>,
}

/// A takeover under way, on a survivor.
#[derive(Debug)]
enum Takeover<I> {
    /// Reporting to the candidate on `seat`.
    Reporting {
        seat: PlayerId,
        /// Its peer id, once the application resolved its contact.
        peer: Option<PeerId>,
        /// It answered: it counts us, and we are committed to it (the old
        /// host, if it comes back, is not followed any more).
        acked: bool,
        /// When we began reporting to it (or last heard it).
        since: Instant,
        /// It asked for our frames from this tick.
        want: Option<Tick>,
    },
    /// We are the candidate: collecting reports.
    Collecting {
        since: Instant,
        reports: BTreeMap<PlayerId, Report<I>>,
        /// When the frames we lack last came closer (or we began to ask).
        progress: Instant,
        /// Seats whose claim to hold more frames brought none: their
        /// claims are not believed again in this takeover.
        distrusted: Vec<PlayerId>,
        /// Seats proven from two places (its token reached someone else,
        /// a candidate before us, say): held for nobody, given up.
        contested: Vec<PlayerId>,
    },
}

/// What a player is now.
#[derive(Debug)]
enum Role<I: Input> {
    Host(Box<HostSession<I>>),
    Client(Box<ClientSession<I>>),
}

/// A player in host mode: the host, or a client of it, which carries the
/// match on when the host goes.
///
/// Each client knows the roster (seats, token commitments, contacts) from
/// the host. When the host goes silent for `host_timeout`, or says
/// goodbye, the clients report to the lowest playing seat with a contact
/// (the candidate), which collects the reports, fetches the frames it
/// lacks, and goes on as the sequencer from the tick after the last frame
/// any survivor holds; the others take their seats back on it, keeping
/// their state. The stream says so (`SystemEvent::HostChanged`), and every
/// survivor hears [`Event::Reconnected`] (`kept: true`). A host's goodbye
/// does not end a client's session (no [`Event::Closed`] for it): the match
/// goes on; `Event::Closed` comes when it is over for this player (it was
/// left out of a takeover, say, and the reason says so). The rules are in
/// `docs/host-migration.md`.
///
/// Besides the usual driving, the application names each connection's
/// contact while hosting ([`set_contact`](Self::set_contact)) and resolves
/// contacts while taking over ([`contact_wanted`](Self::contact_wanted),
/// [`resolved`](Self::resolved)); `lockstep_net::drive_hosted` does both
/// over UDP. Every player's [`HostedConfig`] should agree on the
/// sequencer's settings (history, fingerprint, limits): a new host runs the
/// room with its own, taking only the frame width, tick rate, input delay
/// and policy from the room as it was.
///
/// ```
/// use lockstep_core::sequenced::{HostedConfig, HostedSession};
/// use lockstep_core::{Instant, PeerId};
///
/// // The host's process, and a player that joins it at `PeerId(1)`.
/// let host = HostedSession::<u8>::host(HostedConfig::default(), Instant::ZERO)?;
/// let player = HostedSession::<u8>::join(HostedConfig::default(), PeerId(1), Instant::ZERO)?;
/// assert!(host.hosting() && !player.hosting());
/// # Ok::<(), lockstep_core::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct HostedSession<I: Input> {
    config: HostedConfig,
    role: Role<I>,
    now: Instant,
    /// Host changes so far.
    epoch: u32,
    /// The epoch before the takeover under way (restored if it is called
    /// off).
    epoch_before: u32,
    /// The room as our latest Welcome with a seat described it (our seat
    /// and token, and the room's shape, which a new host runs it with,
    /// whatever its own configuration says).
    room: Option<wire::Welcome>,
    /// The token we held before (a new host hands out a new one, and a
    /// roster that had not caught up with it still commits to this one).
    earlier: Option<ResumeToken>,
    /// The roster, as last shared by the hosts we followed, by seat.
    roster: Vec<SeatInfo>,
    /// Our client's roster changes taken so far.
    roster_seen: u64,
    /// The seat of the host we followed (none when hosting).
    host_seat: Option<PlayerId>,
    takeover: Option<Takeover<I>>,
    /// Candidates that failed this takeover.
    failed: Vec<PlayerId>,
    /// Seats another player said host (or that asked us to yield), followed
    /// once in this takeover.
    redirected: BTreeSet<PlayerId>,
    /// Seats another player said it follows as host, in this takeover: a
    /// refusal or a `late` from one is believed (one seat's own word is
    /// not).
    vouched: BTreeSet<PlayerId>,
    /// When we first collected in this takeover.
    collecting_since: Option<Instant>,
    /// Contacts the application resolved.
    peers: BTreeMap<Vec<u8>, PeerId>,
    /// Takeover datagrams to send.
    out: VecDeque<(PeerId, Vec<u8>)>,
    /// When the takeover datagrams were last sent.
    sent_at: Option<Instant>,
    /// When a collecting candidate last asked the other players.
    probed_at: Option<Instant>,
    /// Survivors told the new host is ready, until their Hello arrives.
    ready: BTreeMap<PeerId, Instant>,
    /// When we moved to a new host: silence from it counts from then.
    moved_at: Option<Instant>,
    /// The match went on without us (we reported too late): no more
    /// takeovers.
    ended: bool,
    /// A candidate of this takeover still hears the host: the host lives,
    /// and we never go on alone.
    told_alive: bool,
    /// The host we stopped following at the latest takeover, and the
    /// token it knew us by: told it was replaced if it speaks again.
    old_host: Option<(PeerId, ResumeToken)>,
    /// When the old host was last told.
    told_old: Option<Instant>,
    /// Hosting: the seats that left us for another host (proved with the
    /// tokens we handed them, from their own connections).
    deposers: BTreeSet<PlayerId>,
    /// Hosting: each seat's latest connection.
    seat_peers: BTreeMap<PlayerId, PeerId>,
    /// Hosting, we were replaced while out of reach: the session ended.
    deposed: bool,
    /// What was ignored, and why, for the application's log.
    ignored: VecDeque<(PeerId, Ignored)>,
    /// The host's goodbye, held back while we take the match over.
    held_close: Option<Event>,
    /// Ignored messages beyond the queue.
    ignored_dropped: u64,
}

impl<I: Input> HostedSession<I> {
    /// The host of a new room.
    pub fn host(config: HostedConfig, now: Instant) -> Result<Self, ConfigError> {
        let config = Self::fix(config);
        let host = HostSession::new(config.sequencer.clone(), config.client.clone(), now)?;
        Ok(Self::with(config, Role::Host(Box::new(host)), now))
    }

    /// A player joining the room hosted at `host`.
    pub fn join(config: HostedConfig, host: PeerId, now: Instant) -> Result<Self, ConfigError> {
        let config = Self::fix(config);
        let client = ClientSession::new(config.client.clone(), host, now)?;
        Ok(Self::with(config, Role::Client(Box::new(client)), now))
    }

    fn fix(mut config: HostedConfig) -> HostedConfig {
        config.sequencer.share_roster = true;
        // A new host takes the inputs its players send.
        config.sequencer.codec = config.client.codec;
        config.client.keep_frames = config.client.keep_frames.max(config.sequencer.history);
        config
    }

    fn with(config: HostedConfig, role: Role<I>, now: Instant) -> Self {
        Self {
            config,
            role,
            now,
            epoch: 0,
            epoch_before: 0,
            room: None,
            earlier: None,
            roster: Vec::new(),
            roster_seen: 0,
            host_seat: None,
            takeover: None,
            failed: Vec::new(),
            redirected: BTreeSet::new(),
            vouched: BTreeSet::new(),
            collecting_since: None,
            peers: BTreeMap::new(),
            out: VecDeque::new(),
            sent_at: None,
            probed_at: None,
            ready: BTreeMap::new(),
            moved_at: None,
            ended: false,
            told_alive: false,
            old_host: None,
            told_old: None,
            deposers: BTreeSet::new(),
            seat_peers: BTreeMap::new(),
            deposed: false,
            ignored: VecDeque::new(),
            ignored_dropped: 0,
            held_close: None,
        }
    }

    /// Whether this player hosts the room now.
    pub fn hosting(&self) -> bool {
        matches!(self.role, Role::Host(_))
    }

    fn host_mut(&mut self) -> Option<&mut HostSession<I>> {
        match &mut self.role {
            Role::Host(h) => Some(h),
            Role::Client(_) => None,
        }
    }

    /// Whether this player, hosting, was replaced by another host while it
    /// was out of reach: more than half of the other seats came back
    /// proving (with the tokens it handed them) that they play under a new
    /// host now. Its session ended: every player, its own included, was
    /// told goodbye ([`Event::Closed`]); the game can only join the match
    /// again as a new player.
    pub fn deposed(&self) -> bool {
        self.deposed
    }

    /// The next takeover message this session ignored (or acted on against
    /// its sender), and why, for the application's log. At most 64 wait;
    /// [`ignored_dropped`](Self::ignored_dropped) counts the rest.
    pub fn poll_ignored(&mut self) -> Option<(PeerId, Ignored)> {
        self.ignored.pop_front()
    }

    /// Ignored takeover messages that did not fit the queue.
    pub fn ignored_dropped(&self) -> u64 {
        self.ignored_dropped
    }

    fn ignore(&mut self, from: PeerId, why: Ignored) {
        if self.ignored.len() < IGNORED_QUEUED {
            self.ignored.push_back((from, why));
        } else {
            self.ignored_dropped += 1;
        }
    }

    /// Whether a takeover is under way here.
    pub fn taking_over(&self) -> bool {
        self.takeover.is_some()
    }

    /// Host changes so far.
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// The sequencer, when hosting.
    pub fn sequencer(&mut self) -> Option<&mut Sequencer<I>> {
        self.host_mut().map(HostSession::sequencer)
    }

    /// This player's client (the host's own one when hosting).
    pub fn client(&self) -> &ClientSession<I> {
        match &self.role {
            Role::Host(h) => h.client(),
            Role::Client(c) => c,
        }
    }

    fn client_mut(&mut self) -> &mut ClientSession<I> {
        match &mut self.role {
            Role::Host(h) => h.client_mut(),
            Role::Client(c) => c,
        }
    }

    /// Our seat and token, and the room's width, from our latest Welcome.
    fn me(&self) -> Option<(PlayerId, ResumeToken, u32)> {
        let w = self.room.as_ref()?;
        Some((w.seat?, w.token, w.seats))
    }

    /// Our seat, once welcomed.
    pub fn seat(&self) -> Option<PlayerId> {
        self.me().map(|(s, _, _)| s)
    }

    /// The next frame to run.
    pub fn frame(&self) -> Tick {
        self.client().frame()
    }

    /// See [`ClientSession::commit_local`].
    pub fn commit_local(&mut self, input: I) -> Result<Tick, CommitError> {
        match &mut self.role {
            Role::Host(h) => h.commit_local(input),
            Role::Client(c) => c.commit_local(input),
        }
    }

    /// See [`ClientSession::ready_to_pace`].
    pub fn ready_to_pace(&self) -> usize {
        match &self.role {
            Role::Host(h) => h.ready_to_pace(),
            Role::Client(c) => c.ready_to_pace(),
        }
    }

    /// See [`ClientSession::input_due`].
    pub fn input_due(&self) -> bool {
        match &self.role {
            Role::Host(h) => h.input_due(),
            Role::Client(c) => c.input_due(),
        }
    }

    /// See [`ClientSession::advance`].
    pub fn advance(&mut self) -> Option<Frame<I>> {
        match &mut self.role {
            Role::Host(h) => h.advance(),
            Role::Client(c) => c.advance(),
        }
    }

    /// See [`ClientSession::report_checksum`].
    pub fn report_checksum(&mut self, tick: Tick, hash: u64) -> Result<(), ChecksumError> {
        self.client_mut().report_checksum(tick, hash)
    }

    /// The seats the next frame waits on (see [`ClientSession::awaiting`];
    /// hosting, the sequencer's own view).
    pub fn awaiting(&self) -> Vec<PlayerId> {
        match &self.role {
            Role::Host(h) => h.awaiting(),
            Role::Client(c) => c.awaiting(),
        }
    }

    /// Asks for a pause (hosting: pauses the room). See
    /// [`ClientSession::request_pause`].
    pub fn request_pause(&mut self) -> Result<(), PauseError> {
        match &mut self.role {
            Role::Host(h) => h.request_pause(),
            Role::Client(c) => c.request_pause(),
        }
    }

    /// Asks to resume (hosting: resumes the room).
    pub fn resume(&mut self) {
        match &mut self.role {
            Role::Host(h) => h.resume(),
            Role::Client(c) => c.resume(),
        }
    }

    /// Answers [`Event::SnapshotRequested`] (see
    /// [`ClientSession::provide_snapshot`]): a joiner, a player catching up
    /// after a takeover, or a diverged one is sent this state.
    pub fn provide_snapshot(&mut self, tick: Tick, bytes: Vec<u8>) -> Result<(), SnapshotError> {
        match &mut self.role {
            Role::Host(h) => h.provide_snapshot(tick, bytes),
            Role::Client(c) => c.provide_snapshot(tick, bytes),
        }
    }

    /// The state [`Event::Snapshot`] announced (see
    /// [`ClientSession::take_snapshot`]).
    pub fn take_snapshot(&mut self) -> Option<Snapshot> {
        match &mut self.role {
            Role::Host(h) => h.take_snapshot(),
            Role::Client(c) => c.take_snapshot(),
        }
    }

    /// Leaves the match. The host tells every client goodbye, and they
    /// take over at once (its seat is `Left` in the first new frame); a
    /// client leaves as [`ClientSession::leave`] does. Keep driving the
    /// session a little while so the goodbyes go out.
    pub fn leave(&mut self) {
        match &mut self.role {
            Role::Host(h) => {
                h.sequencer().shutdown("the host left");
                h.client_mut().leave();
            }
            Role::Client(c) => c.leave(),
        }
    }

    /// The next game event.
    pub fn poll_event(&mut self) -> Option<Event> {
        // Nobody took over after all: the goodbye held back ends it.
        if !self.hosting()
            && !self.may_take_over()
            && let Some(ev) = self.held_close.take()
        {
            return Some(ev);
        }
        loop {
            let ev = self.client_mut().poll_event()?;
            // The host's goodbye ends nothing here: we take the match over.
            let host_went = matches!(
                &ev,
                Event::Closed {
                    reason: super::CloseReason::Bye(
                        wire::ByeReason::Leaving | wire::ByeReason::Shutdown,
                        _
                    )
                }
            );
            if host_went && self.may_take_over() && !self.deposed {
                self.held_close = Some(ev);
                continue;
            }
            return Some(ev);
        }
    }

    /// The seat of the host this player follows (none while hosting, or
    /// while the host has no seat, as a relay has none).
    pub fn host_seat(&self) -> Option<PlayerId> {
        if self.hosting() { None } else { self.host_seat }
    }

    /// How other players can reach connection `peer` (hosting): see
    /// [`Sequencer::set_contact`]. Also tells a survivor which peer id
    /// a contact it must reach has ([`contact_wanted`](Self::contact_wanted)).
    pub fn set_contact(&mut self, peer: PeerId, contact: &[u8]) -> Result<(), SequencerError> {
        if let Some(h) = self.host_mut() {
            h.set_contact(peer, contact)?;
        }
        Ok(())
    }

    /// A contact this survivor must reach now (the candidate of a takeover;
    /// a candidate asks every player), until the application tells its
    /// peer id with [`resolved`](Self::resolved). Ask again after each
    /// answer: the next one comes, until none is wanted.
    pub fn contact_wanted(&self) -> Option<&[u8]> {
        match &self.takeover {
            Some(Takeover::Reporting {
                seat, peer: None, ..
            }) => self
                .roster
                .iter()
                .find(|e| e.seat == *seat)
                .map(|e| e.contact.as_slice()),
            // A candidate asks every other player too, one contact at a time.
            Some(Takeover::Collecting { .. }) => self
                .probed()
                .find(|e| !self.peers.contains_key(&e.contact))
                .map(|e| e.contact.as_slice()),
            _ => None,
        }
    }

    /// The players a collecting candidate asks where they stand (sending
    /// them its own report): every other seat of the roster with a
    /// contact, but the host's. Its reporters too: one of them may be a
    /// candidate collecting as well, which counts us and answers, and the
    /// later of the two yields to the earlier.
    fn probed(&self) -> impl Iterator<Item = &SeatInfo> + '_ {
        let me = self.seat();
        self.roster.iter().filter(move |e| {
            !e.contact.is_empty() && Some(e.seat) != me && Some(e.seat) != self.host_seat
        })
    }

    /// The seat whose contact the application resolved to `peer`.
    fn seat_of(&self, peer: PeerId) -> Option<PlayerId> {
        let (contact, _) = self.peers.iter().find(|(_, p)| **p == peer)?;
        self.roster
            .iter()
            .find(|e| e.contact == *contact)
            .map(|e| e.seat)
    }

    /// The peer id the application's transport uses for `contact`.
    pub fn resolved(&mut self, contact: &[u8], peer: PeerId) {
        if self.peers.len() >= wire::MAX_SEATS {
            self.peers.clear();
        }
        self.peers.insert(contact.to_vec(), peer);
        if let Some(Takeover::Reporting {
            seat,
            peer: p @ None,
            ..
        }) = &mut self.takeover
            && self
                .roster
                .iter()
                .any(|e| e.seat == *seat && e.contact == contact)
        {
            *p = Some(peer);
            self.sent_at = None;
        }
    }

    // ----- network side ---------------------------------------------------

    /// Takes a datagram.
    pub fn handle_datagram(
        &mut self,
        from: PeerId,
        datagram: &[u8],
        now: Instant,
    ) -> Result<(), SequencerError> {
        self.now = self.now.max(now);
        let now = self.now;
        let from_server = !self.hosting() && self.client().server_peer() == from;
        // The host we left for a new one: told it was replaced (now and
        // then), and nothing it sends is taken.
        if self.committed_against(from) {
            self.tell_old_host();
            self.ignore(from, Ignored::OldHost);
            return Ok(());
        }
        // A host we moved to is heard once it welcomes us: until then
        // anything else from it (a claim to host repeated, say) neither
        // keeps us waiting on it nor calls a takeover off.
        let welcomed = !self.awaiting_welcome();
        if from_server {
            if welcomed {
                if self.host_heard() {
                    return Ok(());
                }
            } else if matches!(self.takeover, Some(Takeover::Reporting { acked: true, .. })) {
                return Ok(());
            } else if !self.host_seat.is_some_and(|h| self.believed(h)) && self.refuses(datagram) {
                // A host that never welcomed us, and that no other player
                // said it follows, cannot end our session: it is silent,
                // and taken over (a real one is named by its players, and
                // refuses us again).
                self.ignore(from, Ignored::Unwelcomed);
                return Ok(());
            }
        }
        // Takeover traffic: from players that are nobody's connection yet,
        // and, to a host, reports from its own players that left it for
        // another host (they depose it). Looked at before anything else
        // takes the datagram; it opens with a takeover message, so nothing
        // else is decoded twice.
        let takeover = matches!(
            datagram.get(wire::HEADER_LEN),
            Some(&(wire::message_type::TAKEOVER | wire::message_type::TAKEOVER_ACK))
        );
        if takeover && (self.hosting() || !from_server) {
            let reference = self.client().frame();
            if let Ok(d) = Datagram::decode(datagram, reference)
                && d.messages
                    .iter()
                    .any(|m| matches!(m, Message::Takeover { .. } | Message::TakeoverAck { .. }))
            {
                self.take_takeover(from, &d);
                return Ok(());
            }
        }
        let r = match &mut self.role {
            Role::Host(h) => {
                self.ready.remove(&from);
                // A seat that plays with us again did not leave us (its
                // report was a takeover called off, or a lie).
                if !self.deposers.is_empty()
                    && let Some((_, Some(seat))) =
                        h.sequencer().connections().find(|(p, _)| *p == from)
                {
                    self.deposers.remove(&seat);
                }
                h.handle_datagram(from, datagram, now)
            }
            Role::Client(c) => c
                .handle_datagram(from, datagram, now)
                .map_err(SequencerError::Client),
        };
        if from_server && !welcomed {
            if self.client().connected() {
                // Its welcome, while we were taking it over.
                self.host_heard();
            } else if self.client().closed().is_some() {
                // Its refusal, believed: the match goes on there without
                // us, and we take nothing over.
                self.takeover = None;
                self.ended = true;
            }
        }
        self.note_client();
        r
    }

    /// Whether we moved to a new host that has not welcomed us yet.
    fn awaiting_welcome(&self) -> bool {
        self.moved_at.is_some() && !self.client().connected()
    }

    /// Whether `seat`'s word that it hosts (a `ready`), or will not have
    /// us (a `late`, a refusal), is believed: another player said it
    /// follows that seat, or no other player is left to say so (with only
    /// the two of us, a liar could as well leave).
    fn believed(&self, seat: PlayerId) -> bool {
        let me = self.seat();
        self.vouched.contains(&seat)
            || !self.roster.iter().any(|e| {
                e.playing
                    && !e.contact.is_empty()
                    && Some(e.seat) != me
                    && e.seat != seat
                    && Some(e.seat) != self.host_seat
            })
    }

    /// Whether a datagram refuses us or says goodbye.
    fn refuses(&self, datagram: &[u8]) -> bool {
        Datagram::decode(datagram, self.client().frame()).is_ok_and(|d| {
            d.messages.iter().any(|m| {
                matches!(
                    m,
                    Message::Bye { .. } | Message::Error { .. } | Message::Reject(_)
                ) && !matches!(m, Message::Reject(wire::RejectReason::SeatBusy))
            })
        })
    }

    /// Our host was heard while we were taking it over: returns whether
    /// the datagram is to be dropped.
    fn host_heard(&mut self) -> bool {
        match &self.takeover {
            // Counted by a candidate: the old host is not followed any
            // more (it would feed frames the new host never sealed) unless
            // the candidate calls the takeover off.
            Some(Takeover::Reporting { acked: true, .. }) => return true,
            // The candidate, before it sealed anything: the host was only
            // out of reach (a partition healed), and the takeover is
            // called off; its reporters are told so, and follow the host
            // again too.
            Some(Takeover::Collecting { reports, .. }) => {
                let peers: Vec<PeerId> = reports.values().map(|r| r.peer).collect();
                let base = self.client().frame();
                for p in peers {
                    let alive = Reply::Alive(self.host_seat);
                    self.answer_report(p, answer(self.epoch, alive, base));
                }
                self.call_off();
            }
            // Nobody counts us yet: we follow the host again.
            Some(Takeover::Reporting { .. }) => self.call_off(),
            None => {}
        }
        false
    }

    /// Lets timers fire: notices a silent host, moves a takeover on.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        let now = self.now;
        match &mut self.role {
            Role::Host(h) => {
                h.handle_timeout(now);
                // (At most one entry per seat.)
                for (p, seat) in h.sequencer().connections() {
                    if let Some(s) = seat {
                        self.seat_peers.insert(s, p);
                    }
                }
            }
            Role::Client(c) => c.handle_timeout(now),
        }
        self.note_client();
        if !self.hosting() && self.takeover.is_none() && self.host_gone() {
            self.begin_takeover();
        }
        self.progress_takeover();
    }

    /// The next datagram to send.
    pub fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.out.is_empty() && self.sent_at.is_none_or(|t| self.now >= t + self.resend()) {
            self.queue_takeover();
        }
        if let Some((to, bytes)) = self.out.pop_front() {
            buf.clear();
            buf.extend_from_slice(&bytes);
            return Some(Transmit {
                destination: to,
                len: buf.len(),
            });
        }
        // Reporting: nothing goes to the old host any more (what the
        // client has for it is dropped, so its timers stay quiet); but a
        // host we moved to that never welcomed us may only have missed our
        // Hello: until a candidate counts us, we keep saying it.
        let hello = self.awaiting_welcome()
            && matches!(
                self.takeover,
                Some(Takeover::Reporting { acked: false, .. })
            );
        if matches!(self.takeover, Some(Takeover::Reporting { .. })) && !hello {
            while self.client_mut().poll_transmit(buf).is_some() {}
            return None;
        }
        match &mut self.role {
            Role::Host(h) => h.poll_transmit(buf),
            Role::Client(c) => c.poll_transmit(buf),
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) next needs calling.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let own = match &self.role {
            Role::Host(h) => h.poll_timeout(),
            Role::Client(c) => c.poll_timeout(),
        };
        let resend = self.sent_at.map_or(self.now, |t| t + self.resend());
        // Deadlines still ahead (one passed while the candidate waits for
        // frames must not spin the clock).
        let ahead = |t: Instant| if t > self.now { t } else { resend };
        let takeover = self.takeover.as_ref().map(|t| match t {
            Takeover::Reporting { since, .. } => {
                resend.min(ahead(*since + self.config.host_timeout))
            }
            Takeover::Collecting { since, .. } => resend
                .min(ahead(*since + self.config.takeover_wait))
                .min(ahead(*since + self.config.takeover_alone)),
        });
        let ready = (!self.ready.is_empty()).then_some(resend);
        let watch = self
            .takeover
            .is_none()
            .then(|| self.silent_until())
            .flatten();
        [own, takeover, ready, watch].into_iter().flatten().min()
    }

    fn resend(&self) -> Duration {
        self.config.client.resend_interval
    }

    /// Notes what our client learned: our seat and token, the roster and
    /// who hosts (kept as they were once a takeover began).
    fn note_client(&mut self) {
        if self.client().connected() {
            // Welcomed: silence counts from what we hear again.
            self.moved_at = None;
        }
        if self.takeover.is_some() {
            return;
        }
        let Some(welcome) = self.client().welcome().copied() else {
            return;
        };
        let Some(me) = welcome.seat.map(|s| (s, welcome.token, welcome.seats)) else {
            return;
        };
        if let Some((seat, token, _)) = self.me()
            && seat == me.0
            && token != me.1
        {
            self.earlier = Some(token);
        }
        self.room = Some(welcome);
        let c = self.client();
        let changes = c.roster_changes();
        if changes == self.roster_seen {
            return;
        }
        // Entries merge seat by seat: a new host's roster comes in pieces
        // (under loss, some seats' entries first), and until a seat's own
        // entry comes the one known before stands (an entry saying the seat
        // is empty removes it). A new host names its players' contacts a
        // moment after it shared their seats: the contacts known before
        // stand in meanwhile too.
        let entries: Vec<(PlayerId, Option<SeatInfo>)> =
            c.roster_entries().map(|(k, e)| (k, e.cloned())).collect();
        self.roster_seen = changes;
        for (seat, entry) in entries {
            let at = self.roster.iter().position(|o| o.seat == seat);
            match (entry, at) {
                (Some(mut e), Some(i)) => {
                    if e.contact.is_empty() && !e.hosts {
                        e.contact = core::mem::take(&mut self.roster[i].contact);
                    }
                    self.roster[i] = e;
                }
                (Some(e), None) => {
                    let i = self.roster.partition_point(|o| o.seat < seat);
                    self.roster.insert(i, e);
                }
                (None, Some(i)) => {
                    self.roster.remove(i);
                }
                (None, None) => {}
            }
        }
        // A client that moved has no host in its roster until its new
        // host's entry comes: it follows the seat it moved to meanwhile.
        if let Some(h) = self.roster.iter().rev().find(|e| e.hosts) {
            self.host_seat = Some(h.seat);
        }
    }

    /// Whether the host we follow is gone: silent for `host_timeout`, or
    /// it said goodbye.
    fn host_gone(&self) -> bool {
        if !self.may_take_over() {
            return false;
        }
        self.host_said_bye() || self.silent_until().is_some_and(|t| self.now >= t)
    }

    /// Whether the host we follow said it went: only such a goodbye (not
    /// one that drops us, nor a refusal) hands the match over at once.
    fn host_said_bye(&self) -> bool {
        matches!(
            self.client().closed(),
            Some(super::CloseReason::Bye(
                wire::ByeReason::Leaving | wire::ByeReason::Shutdown,
                _
            ))
        )
    }

    /// Whether this client could take part in a takeover: it has a seat
    /// and a roster, and the match has not ended for it.
    fn may_take_over(&self) -> bool {
        !self.hosting() && self.room.is_some() && !self.roster.is_empty() && !self.ended
    }

    /// When the host we follow counts as silent, while we are connected to
    /// it and may take over.
    fn silent_until(&self) -> Option<Instant> {
        let c = self.client();
        if !self.may_take_over() || c.closed().is_some() {
            return None;
        }
        // A host we moved to is silent until it welcomes us (whatever
        // else it sends).
        let heard = match self.moved_at {
            Some(moved) if self.awaiting_welcome() => moved,
            _ => c.last_heard()?,
        };
        Some(heard + self.config.host_timeout)
    }

    /// The seats that may take over, in order: playing, reachable, not
    /// the host that left, not failed.
    fn candidates(&self) -> impl Iterator<Item = PlayerId> + '_ {
        let me = self.seat();
        self.roster
            .iter()
            .filter(move |e| e.playing && (!e.contact.is_empty() || Some(e.seat) == me))
            .filter(|e| Some(e.seat) != self.host_seat && !self.failed.contains(&e.seat))
            .map(|e| e.seat)
    }

    fn begin_takeover(&mut self) {
        self.old_host = self
            .me()
            .map(|(_, token, _)| (self.client().server_peer(), token));
        self.epoch_before = self.epoch;
        // Never wraps: a later takeover always counts higher.
        self.epoch = self.epoch.saturating_add(1);
        self.failed.clear();
        self.redirected.clear();
        self.vouched.clear();
        self.collecting_since = None;
        self.told_alive = false;
        self.next_candidate();
    }

    /// Whether `from` is the host we left for good: a candidate counted us,
    /// or the takeover is over.
    fn committed_against(&self, from: PeerId) -> bool {
        self.old_host.is_some_and(|(p, _)| p == from)
            && match &self.takeover {
                None => true,
                Some(Takeover::Reporting { acked, .. }) => *acked,
                Some(Takeover::Collecting { .. }) => false,
            }
    }

    /// Tells the host we left that we play under another now (at most once
    /// a resend interval, however much it sends): our report, with the
    /// token it handed us.
    fn tell_old_host(&mut self) {
        let now = self.now;
        if self.told_old.is_some_and(|t| now < t + self.resend()) {
            return;
        }
        let (Some((to, token)), Some((seat, _, _))) = (self.old_host, self.me()) else {
            return;
        };
        self.told_old = Some(now);
        let mut buf = Vec::new();
        let mut w = DatagramWriter::new(&mut buf, self.client().frame(), 64);
        w.put(Message::Takeover {
            epoch: self.epoch,
            seat,
            token,
            lacks: self.client().lacks(),
        });
        w.finish();
        self.answer_report(to, buf);
    }

    /// Hosting: more than half of the other seats proved they left us for
    /// another host. The session ends: whoever still follows us is told
    /// goodbye, and takes part in a takeover of its own (to find it was
    /// left out, or to join the new host).
    fn depose_if_left(&mut self) {
        let me = self.seat();
        let others = self.roster.iter().filter(|e| Some(e.seat) != me).count();
        if self.deposed || self.deposers.len() * 2 <= others {
            return;
        }
        self.deposed = true;
        if let Role::Host(h) = &mut self.role {
            h.sequencer().shutdown(
                "another player hosts this match now: this host was replaced while out of reach",
            );
        }
    }

    /// Reports to the candidate on `seat` from now on.
    fn report_to(&mut self, seat: PlayerId) {
        let contact = self
            .roster
            .iter()
            .find(|e| e.seat == seat)
            .map(|e| e.contact.clone())
            .unwrap_or_default();
        let peer = self.peers.get(&contact).copied();
        self.sent_at = None;
        self.takeover = Some(Takeover::Reporting {
            seat,
            peer,
            acked: false,
            since: self.now,
            want: None,
        });
    }

    /// Ends the takeover under way before anything was sealed anew: the
    /// host was only out of reach.
    fn call_off(&mut self) {
        self.old_host = None;
        self.takeover = None;
        self.epoch = self.epoch_before;
        self.sent_at = None;
    }

    /// Reports to the next candidate, or collects if it is us.
    fn next_candidate(&mut self) {
        let now = self.now;
        self.sent_at = None;
        let first = self.candidates().next();
        match first {
            Some(seat) if Some(seat) == self.seat() => {
                // The waits count from the first time we collected in this
                // takeover, however often we yielded meanwhile.
                let since = *self.collecting_since.get_or_insert(now);
                self.takeover = Some(Takeover::Collecting {
                    since,
                    reports: BTreeMap::new(),
                    progress: now,
                    distrusted: Vec::new(),
                    contested: Vec::new(),
                });
                self.probed_at = None;
            }
            Some(seat) => self.report_to(seat),
            // Nobody can take over now (we do not play, and every
            // candidate failed): we try again when the host is still gone.
            None => self.takeover = None,
        }
    }

    /// A `Takeover` or `TakeoverAck` from `from`.
    fn take_takeover(&mut self, from: PeerId, d: &Datagram<'_>) {
        let now = self.now;
        // Already taken over: a seat we hold comes back (by either token
        // it names); any other reported too late (the match went on
        // without it).
        if self.hosting() {
            // The reports whose token is one our sequencer holds the seat
            // for.
            let Role::Host(h) = &mut self.role else {
                return;
            };
            let seq = h.sequencer();
            let proven: Vec<(PlayerId, u32)> = d
                .messages
                .iter()
                .filter_map(|m| match *m {
                    Message::Takeover {
                        seat, token, epoch, ..
                    } => Some((seat, token, epoch)),
                    _ => None,
                })
                .filter(|(seat, token, _)| seq.holds_token(*seat, token))
                .map(|(seat, _, epoch)| (seat, epoch))
                .collect();
            // A takeover we never knew of: that player left us for
            // another host. Nothing is answered.
            let newer: Vec<PlayerId> = proven
                .iter()
                .filter(|(_, e)| *e > self.epoch)
                .map(|(s, _)| *s)
                .collect();
            if !newer.is_empty() {
                // Only from the seat's own connection: its token may have
                // reached others (a takeover called off, say).
                if Some(newer[0]) != self.seat() && self.seat_peers.get(&newer[0]) == Some(&from) {
                    self.deposers.insert(newer[0]);
                }
                self.depose_if_left();
                return;
            }
            if !d
                .messages
                .iter()
                .any(|m| matches!(m, Message::Takeover { .. }))
            {
                return;
            }
            let held = !proven.is_empty();
            if held {
                // Once per report (those we told at the takeover are told
                // again on our own until they come).
                if !self.ready.contains_key(&from) {
                    let ready = answer(self.epoch, Reply::Ready, self.client().frame());
                    self.answer_report(from, ready);
                }
            } else {
                let late = answer(self.epoch, Reply::Late, self.client().frame());
                self.answer_report(from, late);
                self.ignore(from, Ignored::Late);
            }
            self.sent_at = None;
            return;
        }
        // A collecting candidate's probe carries its own report, marked.
        let mark = d.messages.iter().find_map(bare_host);
        for m in &d.messages {
            match *m {
                Message::Takeover {
                    epoch,
                    seat,
                    token,
                    lacks,
                } => {
                    // Someone noticed before us, and we find the host gone
                    // too (a player that still hears the host never leaves
                    // it on another's word): we take part.
                    if self.takeover.is_none() && !self.hosting() {
                        if self.host_gone() {
                            self.begin_takeover();
                        } else if self.awaiting_welcome() {
                            // We moved to a host that has not welcomed us
                            // yet: we cannot say it lives.
                            self.ignore(from, Ignored::Moving);
                            return;
                        } else {
                            // We still hear the host: say so (once for the
                            // datagram), and take no part.
                            let base = self.client().frame();
                            let alive = answer(self.epoch, Reply::Alive(self.host_seat), base);
                            self.answer_report(from, alive);
                            self.ignore(from, Ignored::HostHeard);
                            return;
                        }
                    }
                    if !matches!(self.takeover, Some(Takeover::Collecting { .. })) {
                        continue;
                    }
                    // The token must be the seat's, as the host committed to.
                    let holds = self
                        .roster
                        .iter()
                        .any(|e| e.seat == seat && e.commitment == token_commitment(&token));
                    if !holds {
                        self.ignore(from, Ignored::Unproven(seat));
                        continue;
                    }
                    // From where the roster says the seat's player is: its
                    // token went to every candidate it reported to, and the
                    // host that left minted it.
                    let contact = self
                        .roster
                        .iter()
                        .find(|e| e.seat == seat)
                        .map(|e| e.contact.as_slice())
                        .filter(|c| !c.is_empty());
                    if let Some(c) = contact
                        && self.peers.get(c) != Some(&from)
                    {
                        self.ignore(from, Ignored::Elsewhere(seat));
                        continue;
                    }
                    if Some(seat) == self.host_seat {
                        self.ignore(from, Ignored::HostSeat(seat));
                        continue;
                    }
                    // A candidate earlier in the order, collecting too: we
                    // yield to it, never count it (it may not hear us, and
                    // would go on counting us too).
                    if mark == Some(seat) && Some(seat) < self.seat() {
                        self.ignore(from, Ignored::EarlierCandidate(seat));
                        continue;
                    }
                    // Epochs may differ (a player that joined after a
                    // takeover counts from 0): the higher one stands, from
                    // a report that proved its seat.
                    self.epoch = self.epoch.max(epoch);
                    let Some(Takeover::Collecting {
                        reports,
                        distrusted,
                        contested,
                        ..
                    }) = &mut self.takeover
                    else {
                        continue;
                    };
                    // A seat proven from two places: one of them got the
                    // token from the other's reports. Neither has it.
                    if contested.contains(&seat) {
                        self.ignore(from, Ignored::Contested(seat));
                        continue;
                    }
                    if reports.get(&seat).is_some_and(|r| r.peer != from) {
                        reports.remove(&seat);
                        if contested.len() < wire::MAX_SEATS {
                            contested.push(seat);
                        }
                        self.ignore(from, Ignored::Contested(seat));
                        continue;
                    }
                    // The other token it named for the seat, if any.
                    let previous = d.messages.iter().find_map(|m| match *m {
                        Message::Takeover {
                            seat: s, token: t, ..
                        } if s == seat && t != token => Some(t),
                        _ => None,
                    });
                    let inputs = d
                        .messages
                        .iter()
                        .filter_map(|m| match m {
                            Message::Inputs(i) => Some(i),
                            _ => None,
                        })
                        .flat_map(|i| i.runs.iter())
                        .filter(|r| r.seat == seat)
                        .filter_map(|r| r.decode::<I>().ok().map(|v| (r.start, v)))
                        .flat_map(|(start, v)| {
                            v.into_iter()
                                .enumerate()
                                .map(move |(k, x)| (start.saturating_add(k as u32), x))
                        })
                        .take(256)
                        .collect();
                    // A claim found false once stays so.
                    let lacks = if distrusted.contains(&seat) {
                        reports.get(&seat).map_or(lacks, |r| r.lacks.min(lacks))
                    } else {
                        lacks
                    };
                    reports.insert(
                        seat,
                        Report {
                            peer: from,
                            token,
                            previous,
                            lacks,
                            inputs,
                        },
                    );
                    self.sent_at = None;
                }
                Message::TakeoverAck {
                    epoch,
                    ready,
                    want,
                    late,
                    alive,
                    host,
                } => {
                    let sender = self.seat_of(from);
                    // Another player's word that it follows a seat as host.
                    if let (true, Some(h), Some(s)) = (alive, host, sender)
                        && h != s
                    {
                        self.vouched.insert(h);
                    }
                    // Only `host` set: naming the sender, a collecting
                    // candidate's mark on its probe; naming another seat, a
                    // candidate that gave up for it, passing it on (named
                    // as `alive` would, but nobody's word that it hosts).
                    let bare = bare_host(m);
                    let follow = bare.is_some() && bare != sender;
                    let probe = bare.is_some() && !follow;
                    let alive = alive || follow;
                    if matches!(self.takeover, Some(Takeover::Collecting { .. }))
                        && !self.collector_yields(from, ready, late, alive, host)
                    {
                        continue;
                    }
                    // A mark: only another collecting candidate acts on it
                    // (above).
                    let ours = matches!(
                        &self.takeover,
                        Some(Takeover::Reporting { peer: Some(p), .. }) if *p == from
                    );
                    if probe {
                        continue;
                    }
                    if !ours {
                        if !matches!(self.takeover, Some(Takeover::Collecting { .. })) {
                            self.ignore(from, Ignored::NotOurCandidate);
                        }
                        continue;
                    }
                    // It follows another host than the one we lost: the
                    // candidate we gave up on took over already (its answers
                    // to us were lost). We report to that host again.
                    let me = self.seat();
                    if let Some(h) = host.filter(|h| {
                        alive
                            && Some(*h) != self.host_seat
                            && Some(*h) != me
                            && Some(*h) != sender
                            && !self.redirected.contains(h)
                    }) && self
                        .roster
                        .iter()
                        .any(|e| e.seat == h && e.playing && !e.contact.is_empty())
                    {
                        self.redirected.insert(h);
                        self.failed.retain(|s| *s != h);
                        self.report_to(h);
                        return;
                    }
                    // Sent to a host it names again, or its own seat: it
                    // holds us to no end; it counts as failed, and the next
                    // candidate is tried (a later takeover may follow the
                    // same word once more).
                    if alive && host.is_some() && host != self.host_seat {
                        // (A match goes on elsewhere: never alone.)
                        self.told_alive = true;
                        if let Some(Takeover::Reporting { seat, .. }) = &self.takeover {
                            let seat = *seat;
                            self.failed.push(seat);
                        }
                        self.next_candidate();
                        return;
                    }
                    let Some(Takeover::Reporting {
                        since,
                        want: w,
                        acked,
                        peer: Some(p),
                        ..
                    }) = &mut self.takeover
                    else {
                        continue;
                    };
                    if alive && *acked {
                        // The candidate that counted us heard the host again
                        // before it sealed anything: called off; we follow
                        // the host again once we hear it (or take part in
                        // the next takeover if we do not).
                        self.call_off();
                        return;
                    }
                    if alive {
                        // The host lives for the candidate (or it has not
                        // noticed the silence yet): we wait on it, and never
                        // go on alone.
                        self.told_alive = true;
                        *since = now;
                        continue;
                    }
                    *since = now;
                    *w = want;
                    *acked = true;
                    self.epoch = self.epoch.max(epoch);
                    if late {
                        // The match went on without us: this session ends.
                        self.takeover = None;
                        self.ended = true;
                        let reason = super::CloseReason::Bye(
                            wire::ByeReason::Kicked,
                            "the match went on under a new host without this player (it reported too late)".into(),
                        );
                        // The game hears it once: in place of the host's
                        // goodbye held back, or as the session's end.
                        if self.client().closed().is_some() {
                            self.held_close = Some(Event::Closed { reason });
                        } else {
                            self.client_mut().end(reason);
                        }
                    } else if ready {
                        let to = *p;
                        let Some(Takeover::Reporting { seat, .. }) = self.takeover.take() else {
                            continue;
                        };
                        // The old host is out of the roster for good (a
                        // takeover before the new host's roster comes must
                        // not wait on it), and the seat we move to hosts.
                        let old = self.host_seat.replace(seat);
                        self.roster.retain(|e| Some(e.seat) != old);
                        self.moved_at = Some(now);
                        let _ = self.client_mut().move_to(to, now);
                    } else {
                        self.sent_at = None;
                    }
                }
                _ => {}
            }
        }
        // Frames from the survivor asked for them (from nobody else).
        let frames_in = d.messages.iter().any(|m| matches!(m, Message::Frames(_)));
        if frames_in && self.asked() != Some(from) {
            self.ignore(from, Ignored::FramesRefused);
        }
        if self.asked() == Some(from) {
            let seats = self.me().map_or(0, |(_, _, w)| w) as usize;
            let frames: Vec<Frame<I>> = d
                .messages
                .iter()
                .filter_map(|m| match m {
                    Message::Frames(f) if f.seats as usize == seats => f.decode::<I>().ok(),
                    _ => None,
                })
                .flatten()
                .collect();
            // Only a run that continues from the first frame we lack: a
            // frame past a gap could be anything.
            let before = self.client().lacks();
            let frames: Vec<Frame<I>> = frames
                .into_iter()
                .skip_while(|f| f.tick < before)
                .enumerate()
                .take_while(|(k, f)| f.tick == before.saturating_add(*k as u32))
                .map(|(_, f)| f)
                .collect();
            if !frames.is_empty() {
                self.client_mut().hold_frames(frames);
                if self.client().lacks() > before
                    && let Some(Takeover::Collecting { progress, .. }) = &mut self.takeover
                {
                    *progress = now;
                }
                self.sent_at = None;
            }
        }
    }

    /// A collecting candidate's answer from a player it asked: a new host
    /// (it answered `ready`, or `late`: believed only on another seat's
    /// word), a candidate earlier in the order that counts us (`Wait`), or
    /// a player that follows another
    /// host: we report to it instead, and tell our own reporters so.
    /// Returns whether we now report to the sender (its answer is then
    /// taken as a reporter's).
    fn collector_yields(
        &mut self,
        from: PeerId,
        hosts: bool,
        late: bool,
        alive: bool,
        host: Option<PlayerId>,
    ) -> bool {
        let Some(sender) = self.seat_of(from) else {
            return false;
        };
        let me = self.seat();
        let to = if (hosts || late) && !self.believed(sender) {
            // Its own word that it hosts, or that the match went on
            // without us: nothing proves it (any seated player can say
            // so, and welcome whoever follows). A real host is named by
            // the players that follow it, and reached that way. We never
            // go on alone.
            self.ignore(from, Ignored::HostClaimNotBelieved(sender));
            self.told_alive = true;
            return false;
        } else if hosts || late {
            // Believed (a seat we followed that never welcomed us is the
            // host we replace next: its datagrams are no takeover
            // messages to us, and it leaves the roster at our next move).
            sender
        } else if alive {
            if host == self.host_seat {
                // It still hears the host: we never go on alone.
                self.told_alive = true;
                return false;
            }
            // Another's word that `h` hosts: once per seat in a takeover
            // (a liar naming a dead seat again and again would hold us),
            // and never its own (a host answers `ready`).
            match host {
                Some(h) if Some(h) != me && h != sender && self.redirected.insert(h) => h,
                // Someone says a match goes on elsewhere: whatever else we
                // do, we never go on alone.
                _ => {
                    self.told_alive = true;
                    return false;
                }
            }
        } else if Some(sender) < me && self.redirected.insert(sender) {
            // An earlier candidate that counts us, or marks its probe: once
            // per takeover (one that never goes on as a host, marking
            // again and again, would hold us for good).
            sender
        } else if Some(sender) < me {
            // Marked again by a seat we yielded to already: the match may
            // go on there; we never go on alone.
            self.told_alive = true;
            return false;
        } else {
            // A later candidate counting us: it yields to us when our own
            // answer reaches it.
            return false;
        };
        self.yield_to(to, (to == sender).then_some(from))
    }

    /// A collecting candidate reports to `to` instead (at `peer`, if
    /// known), and tells its own reporters to follow. Returns whether it
    /// now reports to `peer`.
    fn yield_to(&mut self, to: PlayerId, peer: Option<PeerId>) -> bool {
        let Some(Takeover::Collecting { reports, .. }) = &self.takeover else {
            return false;
        };
        let reporters: Vec<PeerId> = reports.values().map(|r| r.peer).collect();
        let base = self.client().frame();
        for p in reporters {
            self.answer_report(p, answer(self.epoch, Reply::Follow(to), base));
        }
        self.failed.retain(|s| *s != to);
        self.report_to(to);
        if let (Some(from), Some(Takeover::Reporting { peer: p, .. })) = (peer, &mut self.takeover)
        {
            *p = Some(from);
            return true;
        }
        false
    }

    /// The survivor a candidate asks for the frames it lacks: the one
    /// holding the most, if more than the candidate.
    fn asked(&self) -> Option<PeerId> {
        let Some(Takeover::Collecting { reports, .. }) = &self.takeover else {
            return None;
        };
        let own = self.client().lacks();
        reports
            .values()
            .filter(|r| r.lacks > own)
            .max_by_key(|r| r.lacks)
            .map(|r| r.peer)
    }

    /// Queues an answer to a report from anyone (at most
    /// [`ANSWERS_QUEUED`]: a flood of reports gets no more; each answer is
    /// smaller than the report it answers).
    fn answer_report(&mut self, to: PeerId, bytes: Vec<u8>) {
        if self.out.len() < ANSWERS_QUEUED {
            self.out.push_back((to, bytes));
        }
    }

    /// Moves a takeover on: the next candidate after a silent one; the
    /// candidate going on once it heard enough.
    fn progress_takeover(&mut self) {
        let now = self.now;
        match &self.takeover {
            Some(Takeover::Reporting { seat, since, .. })
                if now >= *since + self.config.host_timeout =>
            {
                let seat = *seat;
                self.failed.push(seat);
                self.next_candidate();
            }
            Some(Takeover::Reporting { .. }) => {}
            Some(Takeover::Collecting { since, reports, .. }) => {
                let since = *since;
                let expected: Vec<PlayerId> = self
                    .roster
                    .iter()
                    .map(|e| e.seat)
                    .filter(|s| Some(*s) != self.host_seat && Some(*s) != self.seat())
                    .collect();
                let heard = expected.iter().filter(|s| reports.contains_key(s)).count();
                // Survivors and us, of every seat: a host that went silent
                // may live on beyond a partition, with players of its own,
                // and counts against us; one that said goodbye is gone.
                let all = heard == expected.len();
                let host = usize::from(!self.host_said_bye());
                let majority = (heard + 1) * 2 > expected.len() + 1 + host;
                // At once when everyone reported, if that is a majority (a
                // lone survivor of a host gone silent cannot tell it from
                // being cut off); alone only when nobody said the host
                // lives.
                let go = (majority && (all || now >= since + self.config.takeover_wait))
                    || (now >= since + self.config.takeover_alone && !self.told_alive);
                if go {
                    self.settle();
                }
            }
            None => {}
        }
    }

    /// The candidate, once it heard enough: fetches the frames it lacks,
    /// then takes the match over.
    fn settle(&mut self) {
        let own = self.client().lacks();
        let now = self.now;
        let quiet = self.config.host_timeout;
        if let Some(asked) = self.asked() {
            // Asked in the next takeover datagram to it; one that claims
            // frames and sends none for `host_timeout` is not believed (it
            // would hold the takeover for good).
            if let Some(Takeover::Collecting {
                reports,
                progress,
                distrusted,
                ..
            }) = &mut self.takeover
                && now >= *progress + quiet
            {
                let mut cut = Vec::new();
                for (s, r) in reports.iter_mut().filter(|(_, r)| r.peer == asked) {
                    r.lacks = own;
                    if !distrusted.contains(s) {
                        distrusted.push(*s);
                    }
                    cut.push(*s);
                }
                *progress = now;
                for s in cut {
                    self.ignore(asked, Ignored::ClaimNotBelieved(s));
                }
            }
            return;
        }
        let Some(Takeover::Collecting { reports, .. }) = self.takeover.take() else {
            return;
        };
        let Some((seat, token, _)) = self.me() else {
            return;
        };
        let now = self.now;
        // Frames past the gap at `own` (if any came) are nobody's to trust.
        self.client_mut().forget_frames_from(own);
        let c = self.client();
        let last = own.saturating_sub(1);
        let next = own;
        let frames = c.frames_held(c.held_from(), usize::MAX);
        let mut events: Vec<SystemEvent> = Vec::new();
        if let Some(h) = self.host_seat {
            events.push(if matches!(c.closed(), Some(super::CloseReason::Bye(..))) {
                SystemEvent::Left { player: h }
            } else {
                SystemEvent::Abandoned { player: h }
            });
        }
        // Every seat still in the match that did not report is given up:
        // the roster's, and one seated too shortly before the host went
        // for its entry to have reached us (the stream says it joined).
        let mut occupied: BTreeMap<PlayerId, bool> =
            self.roster.iter().map(|e| (e.seat, true)).collect();
        for f in &frames {
            for ev in &f.events {
                match *ev {
                    SystemEvent::Joined { player } => {
                        occupied.insert(player, true);
                    }
                    SystemEvent::Left { player } | SystemEvent::Abandoned { player } => {
                        occupied.insert(player, false);
                    }
                    _ => {}
                }
            }
        }
        for (&s, _) in occupied.iter().filter(|(_, here)| **here) {
            let answered = s == seat || reports.contains_key(&s);
            if !answered && Some(s) != self.host_seat {
                events.push(SystemEvent::Abandoned { player: s });
            }
        }
        events.push(SystemEvent::HostChanged { player: seat });
        let playing = |s: PlayerId| self.roster.iter().any(|e| e.seat == s && e.playing);
        let mut survivors: Vec<Survivor<I>> = reports
            .iter()
            .map(|(s, r)| Survivor {
                seat: *s,
                token: r.token,
                previous: r.previous,
                peer: Some(r.peer),
                playing: playing(*s),
                inputs: r.inputs.clone(),
            })
            .collect();
        survivors.push(Survivor {
            seat,
            token,
            previous: None,
            peer: Some(HOST_PEER),
            playing: playing(seat),
            inputs: c.inputs_after(last),
        });
        let handover = Handover {
            frames,
            next,
            survivors,
            events,
            fingerprint: self.config.client.fingerprint,
        };
        let Ok(mut sequencer) = Sequencer::take_over(self.room_config(), handover, now) else {
            return;
        };
        // A paused room stays paused under its new host (its players froze
        // on the old host's word, and commit nothing to wait on) until a
        // player resumes it; the pause's `max_pause` counts from now.
        if c.paused() {
            sequencer.pause();
        }
        let Ok(placeholder) = ClientSession::new(self.config.client.clone(), HOST_PEER, now) else {
            return;
        };
        let Role::Client(mut client) =
            core::mem::replace(&mut self.role, Role::Client(Box::new(placeholder)))
        else {
            return;
        };
        if client.move_to(HOST_PEER, now).is_err() {
            self.role = Role::Client(client);
            return;
        }
        self.role = Role::Host(Box::new(HostSession::from_parts(sequencer, *client, now)));
        self.host_seat = None;
        for r in reports.values() {
            self.ready.insert(r.peer, now);
        }
        self.sent_at = None;
    }

    /// The configuration a new host seals with: ours, with the room's shape
    /// as the old host described it (frame width, tick rate, input delay,
    /// policy), so the match runs on as it did.
    fn room_config(&self) -> SequencerConfig {
        let mut config = self.config.sequencer.clone();
        let Some(w) = &self.room else {
            return config;
        };
        config.max_seats = u16::try_from(w.seats).unwrap_or(config.max_seats);
        if w.tick_rate > 0 {
            config.tick_rate = w.tick_rate;
        }
        config.delay = w.delay;
        // The delay the match ran at is kept within our adaptive bounds
        // (widened to it if need be: a room that cannot be taken over
        // dies with its host); a match at delay 0 stays fixed.
        if let Some(a) = config.adaptive.as_mut() {
            if w.delay == 0 {
                config.adaptive = None;
            } else {
                a.min = a.min.min(w.delay);
                a.max = a.max.max(w.delay);
            }
        }
        config.policy = match (w.deadline, config.policy) {
            (true, Policy::WaitForAll { .. }) => Policy::Deadline {
                missing: super::MissingInput::Neutral,
            },
            (false, Policy::Deadline { .. }) => Policy::WaitForAll {
                abandon_after: Duration::from_secs(10),
            },
            (_, p) => p,
        };
        config
    }

    /// Queues this takeover's datagrams: a survivor's report to the
    /// candidate; a candidate's answers.
    fn queue_takeover(&mut self) {
        let now = self.now;
        let epoch = self.epoch;
        match &self.takeover {
            Some(Takeover::Reporting {
                peer: Some(to),
                want,
                ..
            }) => {
                let (to, want) = (*to, *want);
                if let Some(bytes) = self.report(want, false) {
                    self.out.push_back((to, bytes));
                }
            }
            Some(Takeover::Collecting { reports, since, .. }) => {
                let since = *since;
                let own = self.client().lacks();
                let ask = self.asked();
                for r in reports.values() {
                    let want = (Some(r.peer) == ask).then_some(own);
                    self.out.push_back((
                        r.peer,
                        answer(epoch, Reply::Wait(want), self.client().frame()),
                    ));
                }
                // Everyone else is asked where it stands: a candidate
                // earlier in the order that counts us, a new host, or a
                // player that follows one is yielded to; one that still
                // hears the host keeps us from going on alone.
                // Every resend interval at first, then every `host_timeout`
                // (a candidate told the host lives may wait long).
                let every = if now < since + self.config.takeover_wait {
                    self.resend()
                } else {
                    self.config.host_timeout
                };
                let probed: Vec<PeerId> = self
                    .probed()
                    .filter_map(|e| self.peers.get(&e.contact).copied())
                    .collect();
                if !probed.is_empty()
                    && self.probed_at.is_none_or(|t| now >= t + every)
                    && let Some(bytes) = self.report(None, true)
                {
                    self.probed_at = Some(now);
                    for to in probed {
                        self.out.push_back((to, bytes.clone()));
                    }
                }
            }
            _ => {}
        }
        // The new host: tell the survivors to come back, until they do.
        let base = self.client().frame();
        let quiet = self.config.takeover_alone;
        self.ready.retain(|_, since| now < *since + quiet);
        for &peer in self.ready.keys() {
            self.out
                .push_back((peer, answer(epoch, Reply::Ready, base)));
        }
        // Whether or not anything went: the next try is a resend
        // interval away.
        self.sent_at = Some(now);
    }

    /// A survivor's report: its `Takeover`, its inputs for the ticks it has
    /// not run, and the frames asked for.
    /// A collecting candidate's probe carries, after its report, a
    /// `TakeoverAck` naming its own seat as `host` (not `alive`): "I
    /// collect". A later candidate collecting too yields to it.
    fn report(&self, want: Option<Tick>, probe: bool) -> Option<Vec<u8>> {
        let (seat, token, width) = self.me()?;
        let c = self.client();
        let mut buf = Vec::new();
        let mut w = DatagramWriter::new(&mut buf, c.frame(), self.config.client.max_datagram);
        w.push(&Message::Takeover {
            epoch: self.epoch,
            seat,
            token,
            lacks: c.lacks(),
        })
        .ok()?;
        // The token before, for a candidate whose roster still commits to
        // it (it proves the seat as well; the new host then takes either).
        if let Some(earlier) = self.earlier.filter(|t| *t != token) {
            w.push(&Message::Takeover {
                epoch: self.epoch,
                seat,
                token: earlier,
                lacks: c.lacks(),
            })
            .ok()?;
        }
        if probe {
            w.push(&Message::TakeoverAck {
                epoch: self.epoch,
                ready: false,
                want: None,
                late: false,
                alive: false,
                host: Some(seat),
            })
            .ok()?;
        }
        let inputs = c.inputs_after(c.frame().saturating_sub(1));
        let mut chain = ChainWriter::new();
        let start = inputs.first().map(|(t, _)| *t);
        let mut expect = start;
        for (t, i) in &inputs {
            if Some(*t) != expect || !chain.push(i, 400) {
                break;
            }
            expect = t.next();
        }
        if let Some(start) = start
            && !chain.is_empty()
        {
            let mut bytes = Vec::new();
            chain.write(&mut bytes);
            let _ = w.push(&Message::Inputs(Inputs {
                acks: Vec::new(),
                runs: vec![InputRun {
                    seat,
                    start,
                    count: chain.count() as u32,
                    chain: &bytes,
                }],
            }));
        }
        if let Some(from) = want {
            let frames = c.frames_held(from, 32);
            let mut n = frames.len();
            let mut body = Vec::new();
            while n > 0 {
                body.clear();
                wire::encode_frames_body(&frames[..n], width as usize, &mut body);
                let m = Message::Frames(Frames {
                    start: from,
                    count: n as u32,
                    seats: width,
                    body: &body,
                });
                if w.push(&m).is_ok() {
                    break;
                }
                n /= 2;
            }
        }
        w.finish();
        Some(buf)
    }
}

/// The seat a `TakeoverAck` names when `host` is all it says (the
/// collecting mark, or a candidate passing a seat on).
fn bare_host(m: &Message<'_>) -> Option<PlayerId> {
    match *m {
        Message::TakeoverAck {
            ready: false,
            want: None,
            late: false,
            alive: false,
            host,
            ..
        } => host,
        _ => None,
    }
}

/// What an answer to a report says (one thing at a time).
#[derive(Debug, Clone, Copy)]
enum Reply {
    /// Counted; wait (and send the frames from this tick on, if any).
    Wait(Option<Tick>),
    /// The new host is ready: come back.
    Ready,
    /// The match went on without that seat.
    Late,
    /// We still hear the host (on this seat, if we know it).
    Alive(Option<PlayerId>),
    /// A collecting candidate gave up for this seat: report there (we do
    /// not follow it yet, so this is no word that it hosts).
    Follow(PlayerId),
}

/// A candidate's (or new host's, or a player's that still hears the host)
/// answer to a report.
fn answer(epoch: u32, reply: Reply, base: Tick) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut w = DatagramWriter::new(&mut buf, base, 64);
    w.put(Message::TakeoverAck {
        epoch,
        ready: matches!(reply, Reply::Ready),
        want: match reply {
            Reply::Wait(want) => want,
            _ => None,
        },
        late: matches!(reply, Reply::Late),
        alive: matches!(reply, Reply::Alive(_)),
        host: match reply {
            Reply::Alive(host) => host,
            Reply::Follow(seat) => Some(seat),
            _ => None,
        },
    });
    w.finish();
    buf
}

crate::endpoint::forward_to_inherent!(HostedSession, SequencerError);
