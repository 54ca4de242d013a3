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

mod collect;
mod config;
mod receive;
mod report;
mod watch;

use collect::{Reply, answer};
pub use config::{HostedConfig, Ignored};

/// Answers to reports from anyone queued at most.
const ANSWERS_QUEUED: usize = 64;

/// Reasons queued at most for [`HostedSession::poll_ignored`] (the rest are
/// only counted).
const IGNORED_QUEUED: usize = 64;

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

    /// Says whether this player is ready to start (see
    /// [`ClientSession::set_ready`]).
    pub fn set_ready(&mut self, ready: bool) {
        self.client_mut().set_ready(ready);
    }

    /// This player's client (the host's own one when hosting).
    pub fn client(&self) -> &ClientSession<I> {
        match &self.role {
            Role::Host(h) => h.client(),
            Role::Client(c) => c,
        }
    }

    /// Where a relay of a fleet said the room is, until
    /// [`follow_redirect`](Self::follow_redirect) (see
    /// [`ClientSession::redirect`]); `drive_hosted` in `lockstep-net`
    /// follows it by itself.
    pub fn redirect(&self) -> Option<std::net::SocketAddr> {
        self.client().redirect()
    }

    /// Goes on at the relay [`redirect`](Self::redirect) named, whose id in
    /// the caller's transport is `server`, from the session's latest time
    /// (see [`ClientSession::follow_redirect`]). Does nothing without a
    /// redirect.
    pub fn follow_redirect(&mut self, server: PeerId) {
        let now = self.now;
        self.client_mut().follow_redirect(server, now);
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
                    reason: crate::sequenced::CloseReason::Bye(
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
}

crate::endpoint::forward_to_inherent!(HostedSession, SequencerError);
