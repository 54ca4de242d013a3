//! The game loop, done once: a [`Runner`] owns a session of any topology and
//! a [`Game`], and does every turn what a lockstep game loop must, in the
//! order that is right.
//!
//! Each call to [`Runner::update`] (once per render frame):
//!
//! 1. lets the session's timers fire, and reads its events: a state
//!    request is noted, a snapshot received is restored
//!    ([`Game::replace`]), a reconnect that did not keep the state starts
//!    the game over;
//! 2. hands over the state asked for, as soon as the game has run exactly
//!    the tick asked (a relay wants the state right after that tick, so
//!    it is checked after every frame, never later);
//! 3. commits the local input when one is due, sampled from the game;
//! 4. runs the frames due: on a steady clock (a [`Pacer`] at the match's
//!    tick rate, which the session knows) while in step, or as many as
//!    [`RunnerConfig::catch_up_per_update`] allows while joining or far
//!    behind; after each frame it reports the state hash, hands over a
//!    state asked for that tick, and commits the next input due.
//!
//! The runner is sans-IO like the sessions: the time is passed in, and
//! datagrams go through [`handle_datagram`](Runner::handle_datagram) and
//! [`poll_transmit`](Runner::poll_transmit) (it is an [`Endpoint`]).
//!
//! ```
//! use lockstep_core::runner::{Runner, RunnerConfig, Status};
//! use lockstep_core::{Frame, Game, Instant, MeshConfig, MeshSession, PeerId, PlayerId, Roster};
//! use std::time::Duration;
//!
//! /// The sum of every input run.
//! #[derive(Default)]
//! struct Sum(u64);
//! impl Game for Sum {
//!     type Input = u8;
//!     fn step(&mut self, frame: &Frame<u8>) {
//!         self.0 += frame.inputs.iter().flatten().map(|&i| u64::from(i)).sum::<u64>();
//!     }
//!     fn hash(&self) -> u64 { self.0 }
//!     fn save(&self) -> Vec<u8> { self.0.to_le_bytes().to_vec() }
//!     fn restore(bytes: &[u8]) -> Result<Self, String> {
//!         Ok(Sum(u64::from_le_bytes(bytes.try_into().map_err(|_| "8 bytes")?)))
//!     }
//! }
//!
//! let roster = Roster::new().player(PeerId(0), PlayerId(0)).player(PeerId(1), PlayerId(1));
//! let mut runners = [0, 1].map(|i| {
//!     let session = MeshSession::new(MeshConfig::default(), roster.clone(), PeerId(i), Instant::ZERO).unwrap();
//!     Runner::new(session, Sum::default(), RunnerConfig::default()).unwrap()
//! });
//! let mut buf = Vec::new();
//! for step in 0..120u64 {
//!     let now = Instant::ZERO + Duration::from_micros(step * 16_667); // 60 render frames a second
//!     for r in runners.iter_mut() {
//!         r.update(now, |_game| 1)?;
//!     }
//!     // The "network": deliver everything at once.
//!     for from in 0..2 {
//!         while let Some(t) = runners[from].poll_transmit(&mut buf) {
//!             let bytes = buf[..t.len].to_vec();
//!             runners[1 - from].handle_datagram(PeerId(from as u32), &bytes, now)?;
//!         }
//!     }
//! }
//! assert_eq!(runners[0].status(), Status::Playing);
//! assert!(runners[0].game().0 > 100);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod played;

pub use played::Played;

use crate::sequenced::Lobby;
use crate::snapshot::SnapshotError;
use crate::{
    CommitError, Endpoint, Event, Game, Instant, Pacer, PacerConfig, PeerId, Tick,
    error::ConfigError,
};
use std::collections::{BTreeMap, VecDeque};

/// Events a runner keeps for the game to read: the oldest go first when the
/// game never reads them.
const EVENTS: usize = 256;

/// How a [`Runner`] runs its game.
#[derive(Debug, Clone, PartialEq)]
pub struct RunnerConfig {
    /// How ticks are paced while in step (the tick rate comes from the
    /// session). The default keeps one frame in hand, which is what the
    /// sessions' `ready_to_pace` counts towards.
    pub pacer: PacerConfig,
    /// The most frames one [`update`](Runner::update) runs while joining a
    /// match under way or far behind it (more than the pacer's
    /// `target + catch_up_beyond` frames in hand). 32 by default: a game
    /// whose tick costs 0.25 ms spends 8 ms of a render frame catching up.
    pub catch_up_per_update: u32,
    /// The state hash is reported every this many ticks (1, every tick, by
    /// default: a divergence is then located to its exact tick). Every
    /// machine must use the same value.
    pub checksum_every: u32,
    /// How a recording records (see [`record`](Runner::record)): chunks,
    /// checkpoints, keyframes.
    pub record: crate::replay::RecordConfig,
}

impl Default for RunnerConfig {
    fn default() -> Self {
        Self {
            pacer: PacerConfig::default(),
            catch_up_per_update: 32,
            checksum_every: 1,
            record: crate::replay::RecordConfig::default(),
        }
    }
}

/// Where a [`Runner`]'s match stands, for the game to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Status {
    /// Waiting to be let into the match (a relay's or host's Welcome).
    Connecting,
    /// Let in before, and now cut off: the server has gone silent, or the
    /// connection closed while the seat is held, or a new connection is
    /// taking the seat back (after `reconnect`).
    Reconnecting,
    /// Let in, and the match has not started: its lobby is open (how it
    /// starts, how many are seated and ready; the session's `roster` names
    /// them). Nothing runs until it starts.
    InLobby(Lobby),
    /// Joining a match under way: its state is awaited and arrives, `have`
    /// of `of` chunks (`0` of `0` until the first).
    Loading {
        /// Chunks in.
        have: u32,
        /// Chunks in all.
        of: u32,
    },
    /// Running frames as fast as the budget allows to reach the match:
    /// after joining (from a snapshot or by replaying the match), or after
    /// falling behind. The game shows a progress bar, not play.
    CatchingUp {
        /// Frames the match is ahead of us.
        behind: u32,
    },
    /// In step with the match.
    Playing,
    /// The match is paused.
    Paused,
    /// Our state parted from the others' and is being replaced with theirs.
    Resyncing,
    /// The session is over (left, closed, refused, or diverged too often;
    /// in a mesh, once our seat is empty: the others took our goodbye, or
    /// voted us out); the last events say why.
    Ended,
    /// The game ran the match's last tick
    /// ([`set_last_tick`](Runner::set_last_tick)) and runs no more.
    Finished,
}

/// What a [`Runner::update`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Update {
    /// Frames run.
    pub ran: u32,
    /// Inputs committed.
    pub committed: u32,
}

/// Why a [`Runner`] could not go on: each is a fault of the game or of the
/// state it was handed, never backpressure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RunnerError {
    /// The state received (to join, or to heal) does not restore. The game
    /// keeps the state it had, but the frames go on from the state it was
    /// sent, so the runner runs no more (every later `update` returns this
    /// error, and the status is `Ended`): leave, and join again.
    #[error("the state received after tick {tick} does not restore: {reason}")]
    Restore {
        /// The tick the state follows.
        tick: Tick,
        /// The game's reason.
        reason: String,
    },
    /// The game's start, saved when the runner was made, does not restore
    /// (needed to start over after a reconnect that kept no state).
    #[error("the game's own start does not restore: {0}")]
    Start(String),
    /// The game's input is larger than the session allows, or the match
    /// ran out of tick numbers.
    #[error("the game's input was refused: {0}")]
    Input(CommitError),
    /// The game's state was refused as a snapshot (over the cap).
    #[error("the game's state was refused: {0}")]
    Snapshot(SnapshotError),
}

/// Drives a session and a game together (see the [module](self)).
#[derive(Debug)]
pub struct Runner<G: Game, S> {
    session: S,
    game: G,
    /// The game as it was handed over, to start over from.
    start: Vec<u8>,
    config: RunnerConfig,
    /// Made once the tick rate is known.
    pacer: Option<Pacer>,
    /// The tick of the last frame run (or of the state restored).
    last_run: Option<Tick>,
    /// A state asked of us, until handed over.
    asked: Option<Tick>,
    events: VecDeque<Event>,
    /// A state received did not restore: the runner runs no more frames.
    failed: Option<RunnerError>,
    /// The session left for good (a mesh player that diverged too often).
    ended: bool,
    /// It was let into the match once.
    was_connected: bool,
    /// Peers we hear nothing from, since when.
    interrupted: BTreeMap<PeerId, Instant>,
    /// The match's last tick, if the game set one.
    last_tick: Option<Tick>,
    /// The game a state received replaced after it had run frames (a
    /// resync), until taken.
    replaced: Option<G>,
    /// Ticks the pacer handed out this update on a frame in hand it was
    /// told of before it came (see `frames_due`).
    granted: u32,
    /// Recording the frames run (see [`record`](Runner::record)).
    recording: Recording<G::Input>,
}

/// Where a runner's recording stands.
enum Recording<I: crate::Input> {
    Off,
    /// Asked for: it starts at the next frame run, from the state then.
    Asked(crate::replay::Header, Box<dyn std::io::Write + Send>),
    On(Active<I>),
    /// The writer failed: the game plays on.
    Failed(crate::replay::ReplayError),
}

/// A recording under way. Dropped unfinished (with its runner, by a game
/// that never called `stop_recording`), it is finished all the same, its
/// last chunk and end written: the file is whole, not a header alone.
#[derive(Debug)]
struct Active<I: crate::Input>(Option<Box<crate::replay::Recorder<I, Writer>>>);

/// Where a runner records.
type Writer = Box<dyn std::io::Write + Send>;

impl<I: crate::Input> Active<I> {
    fn get(&self) -> Option<&crate::replay::Recorder<I, Writer>> {
        self.0.as_deref()
    }

    fn get_mut(&mut self) -> Option<&mut crate::replay::Recorder<I, Writer>> {
        self.0.as_deref_mut()
    }

    /// Writes the last chunk and the end; the writer back.
    fn finish(mut self) -> Result<Writer, crate::replay::ReplayError> {
        match self.0.take() {
            Some(r) => r.finish(),
            None => Err(crate::replay::ReplayError::Io(std::io::Error::other(
                "the recording was finished before",
            ))),
        }
    }
}

impl<I: crate::Input> Drop for Active<I> {
    fn drop(&mut self) {
        if let Some(r) = self.0.take() {
            // Nobody is left to hear of a failure.
            let _ = r.finish();
        }
    }
}

impl<I: crate::Input> core::fmt::Debug for Recording<I> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Off => f.write_str("Off"),
            Self::Asked(h, _) => f.debug_tuple("Asked").field(&h.game).finish(),
            Self::On(r) => f.debug_tuple("On").field(r).finish(),
            Self::Failed(e) => f.debug_tuple("Failed").field(e).finish(),
        }
    }
}

impl<G: Game, S: Played<G::Input>> Runner<G, S> {
    /// A runner for `session` playing `game` from its start: the state the
    /// match's first frame runs on. A joiner that is sent a state replaces
    /// it with that; one that joins by replaying the match, or comes back
    /// without its state in a room without snapshots, runs the match from
    /// it.
    ///
    /// A config the runner cannot pace with (see [`PacerConfig`]), or a
    /// zero `catch_up_per_update` or `checksum_every`, is refused.
    pub fn new(session: S, game: G, config: RunnerConfig) -> Result<Self, ConfigError> {
        Pacer::new(30, config.pacer.clone())?;
        ConfigError::unless(
            config.catch_up_per_update == 0,
            "catch_up_per_update must be positive",
        )?;
        ConfigError::unless(
            config.checksum_every == 0,
            "checksum_every must be positive",
        )?;
        let start = game.save();
        Ok(Self {
            session,
            game,
            start,
            config,
            pacer: None,
            last_run: None,
            asked: None,
            events: VecDeque::new(),
            failed: None,
            ended: false,
            was_connected: false,
            interrupted: BTreeMap::new(),
            last_tick: None,
            replaced: None,
            granted: 0,
            recording: Recording::Off,
        })
    }

    /// One turn of the game loop at `now` (see the [module](self)):
    /// `input` samples the local player's input when one is due (it may be
    /// called several times when several frames run).
    pub fn update(
        &mut self,
        now: Instant,
        mut input: impl FnMut(&G) -> G::Input,
    ) -> Result<Update, RunnerError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.session.handle_timeout(now);
        self.take_events(now)?;
        self.donate()?;
        let mut done = Update::default();
        self.commit(&mut input, &mut done)?;
        let due = self.frames_due(now);
        while done.ran < due && !self.finished() {
            let Some(frame) = self.session.advance() else {
                break;
            };
            self.start_recording(&frame);
            self.game.step(&frame);
            self.last_run = Some(frame.tick);
            done.ran += 1;
            let checksum = frame.tick.get() % self.config.checksum_every == 0;
            let hash =
                (checksum || self.recording_wants_hash(frame.tick)).then(|| self.game.hash());
            self.record_frame(&frame, hash);
            if let Some(hash) = hash.filter(|_| checksum) {
                // Ticks run in order: the report cannot be refused.
                let _ = self.session.report_checksum(frame.tick, hash);
            }
            self.donate()?;
            self.commit(&mut input, &mut done)?;
        }
        if let Some(p) = self.pacer.as_mut()
            && done.ran < self.granted
        {
            p.give_back(self.granted - done.ran);
        }
        self.take_events(now)?;
        self.donate()?;
        Ok(done)
    }

    /// Ends the match for this game at `last`: frames after it are not
    /// run (the session goes on carrying datagrams, so the others get our
    /// inputs up to it). Every machine that sets the same tick ends on the
    /// same state, whatever its frames in hand: the way to stop a match,
    /// a test or a replay at one tick. `None` runs on.
    ///
    /// ```
    /// # use lockstep_core::runner::{Runner, RunnerConfig};
    /// # use lockstep_core::{Game, Frame, Instant, MeshConfig, MeshSession, PeerId, PlayerId, Roster, Tick};
    /// # #[derive(Default)] struct G;
    /// # impl Game for G { type Input = u8; fn step(&mut self, _: &Frame<u8>) {} fn hash(&self) -> u64 { 0 }
    /// #     fn save(&self) -> Vec<u8> { vec![] } fn restore(_: &[u8]) -> Result<Self, String> { Ok(G) } }
    /// let roster = Roster::new().player(PeerId(0), PlayerId(0));
    /// let session = MeshSession::new(MeshConfig::default(), roster, PeerId(0), Instant::ZERO)?;
    /// let mut runner = Runner::new(session, G, RunnerConfig::default())?;
    /// runner.set_last_tick(Some(Tick::new(9)));
    /// for ms in 0..2_000u64 {
    ///     runner.update(Instant::from_millis(ms), |_| 0)?;
    /// }
    /// assert_eq!(runner.last_run(), Some(Tick::new(9)));
    /// assert!(runner.finished());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_last_tick(&mut self, last: Option<Tick>) {
        self.last_tick = last;
    }

    /// Whether the game ran the match's last tick (see
    /// [`set_last_tick`](Self::set_last_tick)).
    pub fn finished(&self) -> bool {
        self.last_tick
            .is_some_and(|l| self.last_run.is_some_and(|r| r >= l))
    }

    /// Where the match stands.
    pub fn status(&self) -> Status {
        if self.finished() {
            return Status::Finished;
        }
        if self.ended
            || self.failed.is_some()
            || (self.session.closed() && !self.session.can_reconnect())
        {
            return Status::Ended;
        }
        if self.session.closed() {
            // A seat held: the game may reconnect.
            return Status::Reconnecting;
        }
        if !self.session.connected() {
            return if self.was_connected {
                Status::Reconnecting
            } else {
                Status::Connecting
            };
        }
        if self.session.can_reconnect() && self.interrupted_since().is_some() {
            // Our server is silent: a new connection is the way back.
            return Status::Reconnecting;
        }
        if let Some(lobby) = self.session.lobby() {
            return Status::InLobby(lobby);
        }
        if self.session.resyncing() {
            return Status::Resyncing;
        }
        if let Some((have, of)) = self.session.snapshot_progress() {
            return Status::Loading { have, of };
        }
        let behind = self.session.frames_behind();
        if self.session.joining() || behind > self.catch_up_beyond() {
            return Status::CatchingUp { behind };
        }
        if self.session.paused() {
            return Status::Paused;
        }
        Status::Playing
    }

    /// The next event the session raised (the runner has acted on those
    /// that ask something of the game): for the game to show or log.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The game.
    pub fn game(&self) -> &G {
        &self.game
    }

    /// The game, for what is not its state: an engine's world keeps the
    /// simulation's state beside everything else (meshes, UI), and an
    /// engine plugin reaches the rest through this. Changing the state
    /// here parts this machine from the others: run frames through the
    /// runner only.
    pub fn game_mut(&mut self) -> &mut G {
        &mut self.game
    }

    /// The session, to read (stats, roster, who the match waits on).
    pub fn session(&self) -> &S {
        &self.session
    }

    /// The session, for what the runner does not do: pause, resume, leave,
    /// vote a player out. Run frames and commit inputs through the runner
    /// only.
    pub fn session_mut(&mut self) -> &mut S {
        &mut self.session
    }

    /// Since when a peer has been silent (`Event::Interrupted`, until
    /// `Recovered`): for a relay's client, its relay. A game that owns its
    /// transport reconnects after a few seconds of it (see
    /// `lockstep_net::RelayClient`).
    pub fn interrupted_since(&self) -> Option<Instant> {
        self.interrupted.values().min().copied()
    }

    /// The tick of the last frame the game ran (or of the state it
    /// restored), if any.
    pub fn last_run(&self) -> Option<Tick> {
        self.last_run
    }

    /// After a state received replaced a game that had run frames (our
    /// state parted from the others' and was resynced), the game as it
    /// was, once: compared with [`game`](Self::game) (their state), field
    /// by field with [`Game::fields`], it shows what parted. Only the
    /// latest is kept.
    pub fn take_replaced(&mut self) -> Option<G> {
        self.replaced.take()
    }

    /// Records the match from the next frame the game runs into `out` (a
    /// file, say: see [`replay`](crate::replay)): every frame run, the
    /// game's state hash as [`RunnerConfig::record`] says (every 30 ticks,
    /// and every tick of the last 512 when a divergence is found), and every
    /// state the game takes in place of its own (a resync, with the state it
    /// replaced; a reconnect without its state), so that the recording
    /// verifies. `header` says what the match is (the game, who records);
    /// its first tick, the seats and tick rate of the match and, for a
    /// recording that starts mid-match (a late joiner, a reconnect), the
    /// game's state to start from are filled in when the first frame runs,
    /// and, unless given (0, empty), the game fingerprint, the match's id
    /// and the players' names as the session knows them then.
    /// A header that cannot be written (a text over its limit) is refused
    /// at once. A writer that fails later (a full disk) stops the
    /// recording, never the game: [`recording_error`](Self::recording_error)
    /// says why. Recording again finishes the recording before (one asked
    /// for whose first frame has not run yet is dropped, its writer
    /// untouched) and returns its outcome.
    pub fn record(
        &mut self,
        header: crate::replay::Header,
        out: Box<dyn std::io::Write + Send>,
    ) -> Result<(), crate::replay::ReplayError> {
        header.check()?;
        let before = self.stop_recording();
        self.recording = Recording::Asked(header, out);
        before.map_or(Ok(()), |r| r.map(drop))
    }

    /// Finishes the recording (its last chunk and its end written) and
    /// hands its writer back; `None` if nothing was recording.
    pub fn stop_recording(
        &mut self,
    ) -> Option<Result<Box<dyn std::io::Write + Send>, crate::replay::ReplayError>> {
        match core::mem::replace(&mut self.recording, Recording::Off) {
            Recording::On(r) => Some(r.finish()),
            Recording::Asked(_, out) => Some(Ok(out)),
            Recording::Failed(e) => Some(Err(e)),
            Recording::Off => None,
        }
    }

    /// Why the recording stopped, if its writer failed.
    pub fn recording_error(&self) -> Option<&crate::replay::ReplayError> {
        match &self.recording {
            Recording::Failed(e) => Some(e),
            _ => None,
        }
    }

    /// A recording asked for starts with the frame at `tick`, from the
    /// game's state now (the state after `tick - 1`, if the match began
    /// before).
    fn start_recording(&mut self, frame: &crate::Frame<G::Input>) {
        if !matches!(self.recording, Recording::Asked(..)) {
            return;
        }
        let tick = frame.tick;
        let Recording::Asked(mut header, out) =
            core::mem::replace(&mut self.recording, Recording::Off)
        else {
            return;
        };
        header.first_tick = tick;
        // The frames' width and pace are the match's.
        header.seats = u16::try_from(frame.inputs.len()).unwrap_or(header.seats);
        header.tick_rate = self.session.tick_rate().unwrap_or(header.tick_rate);
        if header.match_id == 0 {
            header.match_id = self.session.match_id().unwrap_or(0);
        }
        if header.fingerprint == 0 {
            header.fingerprint = self.session.fingerprint();
        }
        if header.names.is_empty() {
            let mut names = self.session.names();
            names.truncate(usize::from(header.seats));
            header.names = names;
        }
        header.snapshot = tick
            .get()
            .checked_sub(1)
            .map(|before| (Tick::new(before), self.game.save()));
        self.recording =
            match crate::replay::Recorder::with_config(header, out, self.config.record.clone()) {
                Ok(r) => Recording::On(Active(Some(Box::new(r)))),
                Err(e) => {
                    self.note_recording_stopped(&e);
                    Recording::Failed(e)
                }
            };
    }

    fn recording_wants_hash(&self, tick: Tick) -> bool {
        matches!(&self.recording, Recording::On(r) if r.get().is_some_and(|r| r.wants_hash(tick)))
    }

    /// Records a frame just run, with the game's hash after it where one
    /// was computed (every tick by default, for the checksums).
    fn record_frame(&mut self, frame: &crate::Frame<G::Input>, hash: Option<u64>) {
        let Recording::On(r) = &mut self.recording else {
            return;
        };
        let Some(r) = r.get_mut() else {
            return;
        };
        if r.next_tick().is_none_or(|next| frame.tick < next) {
            // Run again after coming back without our state (the room sent
            // the match from its start): recorded already.
            return;
        }
        let mut result = r.record(frame);
        if let Some(hash) = hash {
            r.state_hash(frame.tick, hash);
        }
        if result.is_ok() && r.wants_keyframe(frame.tick) {
            let state = self.game.save();
            result = r.state(
                crate::replay::StateKind::Keyframe,
                frame.tick,
                self.game.hash(),
                &state,
            );
        }
        if let Err(e) = result {
            self.note_recording_stopped(&e);
            self.recording = Recording::Failed(e);
        }
    }

    /// The recording under way, if one is.
    fn recorder(&mut self) -> Option<&mut crate::replay::Recorder<G::Input, Writer>> {
        match &mut self.recording {
            Recording::On(r) => r.get_mut(),
            _ => None,
        }
    }

    /// Tells the game its recording stopped (`Event::RecordingStopped`).
    fn note_recording_stopped(&mut self, e: &crate::replay::ReplayError) {
        if self.events.len() >= EVENTS {
            self.events.pop_front();
        }
        self.events.push_back(Event::RecordingStopped {
            reason: e.to_string(),
        });
    }

    /// Records a state received in place of ours (`old`, the game it
    /// replaced, after a resync; `None` after coming back without our
    /// state), unless it stands before frames recorded already (those run
    /// again from it are the same frames).
    fn record_state(&mut self, tick: Tick, bytes: &[u8], old: Option<&G>) {
        use crate::replay::StateKind;
        let Recording::On(r) = &mut self.recording else {
            return;
        };
        let Some(r) = r.get_mut() else {
            return;
        };
        let next = r.next_tick().map_or(1 << 32, |t| u64::from(t.get()));
        if u64::from(tick.get()) + 1 < next {
            return;
        }
        let mut result = Ok(());
        if let Some(old) = old {
            let last = u32::try_from(next - 1).ok().map(Tick::new);
            if next > 0 && self.last_run == last {
                let last = last.unwrap_or(Tick::new(u32::MAX));
                result = r.state(StateKind::Replaced, last, old.hash(), &old.save());
            }
        }
        let kind = if old.is_some() {
            StateKind::Resync
        } else {
            StateKind::Rejoin
        };
        if result.is_ok() {
            result = r.state(kind, tick, self.game.hash(), bytes);
        }
        if let Err(e) = result {
            self.note_recording_stopped(&e);
            self.recording = Recording::Failed(e);
        }
    }

    /// The runner's parts, to go on without it.
    pub fn into_parts(self) -> (S, G) {
        (self.session, self.game)
    }

    /// How far behind the match the runner may be and still run at the
    /// tick rate: the input delay (a room seals a tick once every input
    /// for it is in, which may be up to the delay before anyone runs it,
    /// and a mesh holds frames that far ahead), the pacer's frames in hand,
    /// and its margin. Beyond it, the runner catches up. (Counting from
    /// the frames in hand alone, a match at a 16-tick delay over a 250 ms
    /// round trip caught up for good: each runner ran frames as fast as
    /// they came, committed as fast, and the room ran at 41 ticks a second
    /// of 30.)
    fn catch_up_beyond(&self) -> u32 {
        self.config
            .pacer
            .target
            .saturating_add(self.config.pacer.catch_up_beyond)
            .saturating_add(self.session.delay())
    }

    /// How many frames to run now.
    fn frames_due(&mut self, now: Instant) -> u32 {
        self.granted = 0;
        if self.pacer.is_none() {
            self.pacer = self
                .session
                .tick_rate()
                .and_then(|rate| Pacer::new(rate, self.config.pacer.clone()).ok());
        }
        let catch_up = self.config.catch_up_per_update;
        let behind = self.session.frames_behind();
        let Some(pacer) = self.pacer.as_mut() else {
            return catch_up;
        };
        // Where every player's clock sets the pace, a frame not in hand yet
        // is no reason to run slow (it only slowed the whole room): the
        // pacer is told one is, and given back the ticks that then cannot
        // run (see `update`).
        let ready = self.session.ready_to_pace();
        let together = self.session.paced_together();
        let told = if together {
            ready.max(self.config.pacer.target as usize)
        } else {
            ready
        };
        // Asked even when catching up: its clock stays current.
        let paced = pacer.ticks_due(now, told);
        if self.session.joining() || behind > self.catch_up_beyond() {
            self.granted = 0;
            catch_up
        } else {
            self.granted = if together { paced } else { 0 };
            paced
        }
    }

    /// Reads the session's events, acting on those that ask something of
    /// the game, and keeps them for [`poll_event`](Self::poll_event).
    fn take_events(&mut self, now: Instant) -> Result<(), RunnerError> {
        while let Some(ev) = self.session.poll_event() {
            match &ev {
                Event::SnapshotRequested { tick } => self.asked = Some(*tick),
                Event::Reconnected { kept, .. } => {
                    self.was_connected = true;
                    self.interrupted.clear();
                    if !kept {
                        // Back without our state: start over, as a new
                        // client would; a snapshot, or the frames from the
                        // first tick, follow.
                        self.game.replace(&self.start).map_err(RunnerError::Start)?;
                        self.last_run = None;
                        self.asked = None;
                    }
                }
                Event::DivergedTooOften { .. } => self.ended = true,
                Event::Desync { .. } => {
                    // Every tick's hash held goes into the recording: its
                    // verification then names the tick the states parted.
                    if let Some(r) = self.recorder() {
                        r.keep_recent_hashes();
                    }
                }
                Event::Interrupted {
                    peer, silent_for, ..
                } => {
                    let silent = u64::try_from(silent_for.as_micros()).unwrap_or(u64::MAX);
                    let since = Instant::from_micros(now.as_micros().saturating_sub(silent));
                    self.interrupted.entry(*peer).or_insert(since);
                }
                Event::Recovered { peer, .. } => {
                    self.interrupted.remove(peer);
                }
                Event::Connected { .. } => {
                    self.was_connected = true;
                    self.interrupted.clear();
                }
                _ => {}
            }
            if self.events.len() >= EVENTS {
                self.events.pop_front();
            }
            self.events.push_back(ev);
        }
        if let Some(s) = self.session.take_snapshot() {
            match self.game.replace(&s.bytes) {
                Ok(old) => {
                    let old = self.last_run.is_some().then_some(old);
                    self.record_state(s.tick, &s.bytes, old.as_ref());
                    if old.is_some() {
                        self.replaced = old;
                    }
                    self.last_run = Some(s.tick);
                }
                Err(reason) => {
                    // The session goes on after the snapshot's tick: frames
                    // run onto the state we had would part from everyone.
                    let e = RunnerError::Restore {
                        tick: s.tick,
                        reason,
                    };
                    self.failed = Some(e.clone());
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Hands over the state asked for once the game has run the tick
    /// asked: exactly that tick for a sequenced session, any from it on
    /// for a mesh (a state refused as not asked for is dropped: the
    /// session asks again, or asks someone else).
    fn donate(&mut self) -> Result<(), RunnerError> {
        let (Some(asked), Some(last)) = (self.asked, self.last_run) else {
            return Ok(());
        };
        if last < asked {
            return Ok(());
        }
        self.asked = None;
        match self.session.provide_snapshot(last, self.game.save()) {
            Ok(()) | Err(SnapshotError::NotAsked { .. }) => Ok(()),
            Err(e) => Err(RunnerError::Snapshot(e)),
        }
    }

    /// Commits the local input if one is due.
    fn commit(
        &mut self,
        input: &mut impl FnMut(&G) -> G::Input,
        done: &mut Update,
    ) -> Result<(), RunnerError> {
        if !self.session.input_due() {
            return Ok(());
        }
        match self.session.commit_local(input(&self.game)) {
            Ok(_) => {
                done.committed += 1;
                Ok(())
            }
            Err(e @ (CommitError::InputTooLarge { .. } | CommitError::TickSpaceExhausted)) => {
                Err(RunnerError::Input(e))
            }
            // Backpressure: offered again at the next turn.
            Err(_) => Ok(()),
        }
    }
}

impl<G: Game, S: Played<G::Input>> Endpoint for Runner<G, S> {
    type Error = S::Error;

    fn handle_datagram(
        &mut self,
        from: PeerId,
        datagram: &[u8],
        now: Instant,
    ) -> Result<(), S::Error> {
        Self::handle_datagram(self, from, datagram, now)
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.session.handle_timeout(now);
    }

    fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<crate::Transmit> {
        Self::poll_transmit(self, buf)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Self::poll_timeout(self)
    }
}

impl<G: Game, S: Played<G::Input>> Runner<G, S> {
    /// Takes a datagram for the session (see [`Endpoint`]).
    pub fn handle_datagram(
        &mut self,
        from: PeerId,
        datagram: &[u8],
        now: Instant,
    ) -> Result<(), S::Error> {
        self.session.handle_datagram(from, datagram, now)
    }

    /// The next datagram to send (see [`Endpoint`]).
    pub fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<crate::Transmit> {
        self.session.poll_transmit(buf)
    }

    /// When the session next needs its timers run: the earlier of this and
    /// the next render frame is when to call [`update`](Self::update).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.session.poll_timeout()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Frame, MeshConfig, MeshSession, PlayerId, Roster};

    #[derive(Debug, Default)]
    struct Nothing;

    impl Game for Nothing {
        type Input = u8;
        fn step(&mut self, _: &Frame<u8>) {}
        fn hash(&self) -> u64 {
            0
        }
        fn save(&self) -> Vec<u8> {
            Vec::new()
        }
        fn restore(_: &[u8]) -> Result<Self, String> {
            Ok(Self)
        }
    }

    /// A config the runner cannot pace with is refused when the runner is
    /// made: a pacer it could not build left the runner running frames
    /// unpaced, as many as it could, with no error.
    #[test]
    fn a_config_it_cannot_run_with_is_refused() {
        let session = || {
            let roster = Roster::new().player(PeerId(0), PlayerId(0));
            MeshSession::new(MeshConfig::default(), roster, PeerId(0), Instant::ZERO).unwrap()
        };
        let bad = [
            RunnerConfig {
                pacer: PacerConfig {
                    max_adjust: 0.9,
                    ..PacerConfig::default()
                },
                ..RunnerConfig::default()
            },
            RunnerConfig {
                catch_up_per_update: 0,
                ..RunnerConfig::default()
            },
            RunnerConfig {
                checksum_every: 0,
                ..RunnerConfig::default()
            },
        ];
        for config in bad {
            assert!(
                matches!(
                    Runner::new(session(), Nothing, config.clone()),
                    Err(ConfigError::Invalid(_))
                ),
                "{config:?}"
            );
        }
        assert!(Runner::new(session(), Nothing, RunnerConfig::default()).is_ok());
    }

    /// A disk that fills up mid-match: the game plays on, the recording
    /// stops, and the game is told once (`Event::RecordingStopped`), as
    /// well as asked (`recording_error`).
    #[test]
    fn a_recording_that_fails_is_told_and_the_game_plays_on() {
        struct Full(usize);
        impl std::io::Write for Full {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                if self.0 + b.len() > 120 {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::StorageFull,
                        "no space left",
                    ));
                }
                self.0 += b.len();
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let roster = Roster::new().player(PeerId(0), PlayerId(0));
        let session =
            MeshSession::new(MeshConfig::default(), roster, PeerId(0), Instant::ZERO).unwrap();
        let config = RunnerConfig {
            record: crate::replay::RecordConfig {
                chunk_frames: 5,
                ..crate::replay::RecordConfig::default()
            },
            ..RunnerConfig::default()
        };
        let mut r = Runner::new(session, Nothing, config).unwrap();
        let header = crate::replay::Header::new(1, "full", 30, 1, crate::replay::Topology::Mesh);
        r.record(header, Box::new(Full(0))).unwrap();
        let mut stopped = 0;
        for ms in 0..3_000u64 {
            r.update(Instant::from_millis(ms), |_| 1).unwrap();
            while let Some(e) = r.poll_event() {
                if let Event::RecordingStopped { reason } = e {
                    assert!(reason.contains("no space left"), "{reason}");
                    stopped += 1;
                }
            }
        }
        assert_eq!(stopped, 1, "told once");
        assert!(r.recording_error().is_some());
        assert!(
            r.last_run().is_some_and(|t| t.get() > 60),
            "{:?}",
            r.last_run()
        );
    }
}
