//! The session a game inserts to play, and what drives it each update:
//! datagrams in, the runner's turn on the app's world, datagrams out.

use crate::SimTime;
use crate::sim::BevySim;
use crate::snapshot::Shared;
use bevy::platform::cell::SyncCell;
use bevy::prelude::*;
use lockstep_core::runner::{Played, Runner, RunnerConfig, RunnerError, Status, Update};
use lockstep_core::sequenced::{ClientConfig, ClientSession, HostedSession};
use lockstep_core::{Event, Input, Instant, MeshSession, PeerId, PlayerId, Tick};
use lockstep_net::{Attempt, Buffers, Reconnect, RelayClient, Transport, TurnError};
use std::net::SocketAddr;
use std::time::Duration;

/// Figures of the session, refreshed every update.
#[derive(Resource, Debug, Clone, Default, PartialEq)]
pub struct LockstepStats {
    /// Round trip to the server (a relay, a host), or the longest to a
    /// peer in a mesh.
    pub ping: Option<Duration>,
    /// The input delay, in ticks.
    pub delay: u32,
    /// Packet loss towards us, 0 to 1, where measured.
    pub loss: Option<f64>,
    /// Times the picture stopped for want of a frame.
    pub stalls: u64,
    /// Frames run.
    pub frames: u64,
    /// Frames the match is ahead of us (a relay's client).
    pub behind: u32,
    /// The seat this app plays in, once the session has given it one
    /// (`None` before, and for an observer; kept once the match is over):
    /// the player whose input [`LocalInput`](crate::LocalInput) becomes.
    pub seat: Option<PlayerId>,
}

/// What the plugin needs of a session beyond what the runner does.
pub(crate) trait Extras {
    /// The session's figures.
    fn figures(&self) -> LockstepStats;
    /// Leaves the match, saying so.
    fn leave(&mut self);
    /// Takes the seat back on a new connection whose id for the server
    /// is `server` (a relay's or host's client only).
    fn reconnect(&mut self, server: PeerId, secret: Option<[u8; 32]>, now: Instant) -> bool {
        let _ = (server, secret, now);
        false
    }
    /// Stops trying to take the seat back, saying why (a relay's or
    /// host's client only).
    fn give_up(&mut self) {}
}

impl<I: Input> Extras for ClientSession<I> {
    fn reconnect(&mut self, server: PeerId, secret: Option<[u8; 32]>, now: Instant) -> bool {
        Self::reconnect(self, server, secret, now).is_ok()
    }
    fn figures(&self) -> LockstepStats {
        let s = self.stats();
        LockstepStats {
            ping: s.rtt,
            delay: s.delay,
            loss: s.traffic.loss_down,
            stalls: s.stalls,
            frames: s.frames,
            behind: self.frames_behind(),
            seat: self.seat(),
        }
    }
    fn leave(&mut self) {
        Self::leave(self);
    }
    fn give_up(&mut self) {
        Self::give_up(self);
    }
}

impl<I: Input> Extras for MeshSession<I> {
    fn figures(&self) -> LockstepStats {
        let s = self.stats();
        LockstepStats {
            ping: s.peers.iter().filter_map(|p| p.rtt).max(),
            delay: s.delay,
            loss: s
                .peers
                .iter()
                .filter_map(|p| p.traffic.loss_down)
                .reduce(f64::max),
            stalls: s.stalls,
            frames: s.frames,
            behind: 0,
            seat: self.seat(),
        }
    }
    fn leave(&mut self) {
        Self::leave(self);
    }
}

impl<I: Input> Extras for HostedSession<I> {
    fn figures(&self) -> LockstepStats {
        self.client().figures()
    }
    fn leave(&mut self) {
        Self::leave(self);
    }
}

/// One connection's whole life, whatever its topology.
trait Connection<I: Input + Send + Sync>: Send {
    /// Datagrams in.
    fn receive(&mut self, now: Instant);
    /// The runner's turn.
    fn update(
        &mut self,
        now: Instant,
        input: &mut dyn FnMut(&BevySim<I>) -> I,
    ) -> Result<Update, RunnerError>;
    /// Datagrams out.
    fn send(&mut self);
    fn sim(&mut self) -> &mut BevySim<I>;
    fn status(&self) -> Status;
    fn poll_event(&mut self) -> Option<Event>;
    fn figures(&self) -> LockstepStats;
    fn leave(&mut self);
    fn set_last_tick(&mut self, last: Option<Tick>);
    fn last_run(&self) -> Option<Tick>;
    fn tick_rate(&self) -> Option<u32>;
}

/// A runner over a transport the game gave.
struct Driven<I: Input + Send + Sync, S, T> {
    runner: Runner<BevySim<I>, S>,
    transport: T,
    buffers: Buffers,
    send: Vec<u8>,
    /// The time of the last turn.
    now: Instant,
    /// What the session needs of the transport before datagrams move (a
    /// host-mode player's contacts).
    prepare: Option<fn(&mut S, &mut T)>,
    /// Where a new connection comes from, and when to make one.
    reconnect: Option<(Reconnect, Reopen<T>)>,
}

/// A new connection for a client whose connection was lost: the
/// transport, the server's id on it, and a fresh key if the room seals.
#[derive(Debug)]
pub struct Reopened<T> {
    /// The new transport.
    pub transport: T,
    /// The server's id on it.
    pub server: PeerId,
    /// A fresh key, for a server that seals its datagrams.
    pub secret: Option<[u8; 32]>,
}

/// Opens a new connection (see [`LockstepSession::client_reconnecting`]).
type Reopen<T> = Box<dyn FnMut() -> Result<Reopened<T>, String> + Send>;

impl<I, S, T> Connection<I> for Driven<I, S, T>
where
    I: Input + Send + Sync,
    S: Played<I> + Extras + Send,
    T: Transport + Send,
{
    fn receive(&mut self, now: Instant) {
        if let Some(prepare) = self.prepare {
            prepare(self.runner.session_mut(), &mut self.transport);
        }
        if let Some((rule, reopen)) = &mut self.reconnect {
            match rule.due(&self.runner, false, now) {
                Attempt::Now => {
                    if let Ok(new) = reopen()
                        && self
                            .runner
                            .session_mut()
                            .reconnect(new.server, new.secret, now)
                    {
                        self.transport = new.transport;
                        self.buffers = Buffers::default();
                        rule.reconnected();
                    }
                }
                Attempt::GiveUp => Extras::give_up(self.runner.session_mut()),
                Attempt::Later | Attempt::None => {}
            }
        }
        // The session is fed every datagram; one it refuses (a stranger's,
        // a forged one) is dropped, as `lockstep_net::drive` does.
        let _ = lockstep_net::drive(
            &mut ReceiveOnly(&mut self.runner),
            &mut self.transport,
            now,
            &mut self.buffers,
        );
    }
    fn update(
        &mut self,
        now: Instant,
        input: &mut dyn FnMut(&BevySim<I>) -> I,
    ) -> Result<Update, RunnerError> {
        self.now = now;
        self.runner.update(now, input)
    }
    fn send(&mut self) {
        if let Some(prepare) = self.prepare {
            prepare(self.runner.session_mut(), &mut self.transport);
        }
        while let Some(t) = self.runner.poll_transmit(&mut self.send) {
            // A datagram the network cannot take now is lost, as UDP's
            // would be: the session resends.
            let _ = self.transport.send(t.destination, &self.send[..t.len]);
        }
    }
    fn sim(&mut self) -> &mut BevySim<I> {
        self.runner.game_mut()
    }
    fn status(&self) -> Status {
        self.runner.status()
    }
    fn poll_event(&mut self) -> Option<Event> {
        self.runner.poll_event()
    }
    fn figures(&self) -> LockstepStats {
        self.runner.session().figures()
    }
    fn leave(&mut self) {
        Extras::leave(self.runner.session_mut());
    }
    fn set_last_tick(&mut self, last: Option<Tick>) {
        self.runner.set_last_tick(last);
    }
    fn last_run(&self) -> Option<Tick> {
        self.runner.last_run()
    }
    fn tick_rate(&self) -> Option<u32> {
        self.runner.session().tick_rate()
    }
}

/// Hands datagrams to an endpoint and sends nothing: the plugin's send
/// set sends, after the turn.
struct ReceiveOnly<'a, E>(&'a mut E);

impl<E: lockstep_core::Endpoint> lockstep_core::Endpoint for ReceiveOnly<'_, E> {
    type Error = E::Error;
    fn handle_datagram(&mut self, from: PeerId, d: &[u8], now: Instant) -> Result<(), E::Error> {
        self.0.handle_datagram(from, d, now)
    }
    fn handle_timeout(&mut self, _: Instant) {}
    fn poll_transmit(&mut self, _: &mut Vec<u8>) -> Option<lockstep_core::Transmit> {
        None
    }
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
}

/// A relay's client over UDP, which reconnects by itself: its datagrams
/// move inside its turn.
struct Relay<I: Input + Send + Sync> {
    client: RelayClient<BevySim<I>>,
}

impl<I: Input + Send + Sync> Connection<I> for Relay<I> {
    fn receive(&mut self, _: Instant) {}
    fn update(
        &mut self,
        _: Instant,
        input: &mut dyn FnMut(&BevySim<I>) -> I,
    ) -> Result<Update, RunnerError> {
        match self.client.turn(input) {
            Ok(u) => Ok(u),
            Err(TurnError::Runner(e)) => Err(e),
            // The client reconnects by itself: a failed socket is a lost
            // connection, never an error of the game's.
            Err(_) => Ok(Update::default()),
        }
    }
    fn send(&mut self) {}
    fn sim(&mut self) -> &mut BevySim<I> {
        self.client.runner_mut().game_mut()
    }
    fn status(&self) -> Status {
        self.client.status()
    }
    fn poll_event(&mut self) -> Option<Event> {
        self.client.poll_event()
    }
    fn figures(&self) -> LockstepStats {
        self.client.session().figures()
    }
    fn leave(&mut self) {
        self.client.leave();
    }
    fn set_last_tick(&mut self, last: Option<Tick>) {
        self.client.set_last_tick(last);
    }
    fn last_run(&self) -> Option<Tick> {
        self.client.runner().last_run()
    }
    fn tick_rate(&self) -> Option<u32> {
        self.client.session().welcome().map(|w| w.tick_rate)
    }
}

/// Makes a connection once the app's world can be saved as its start.
type Start<I> =
    Box<dyn FnOnce(BevySim<I>, RunnerConfig) -> Result<Box<dyn Connection<I>>, String> + Send>;

enum State<I: Input + Send + Sync> {
    Starting(Start<I>),
    Running(Box<dyn Connection<I>>),
    Failed(String),
}

/// The match the app plays: insert it to start, remove it to stop (or
/// [`leave`](Self::leave) first to tell the others). Made for a relay
/// ([`relay`](Self::relay)), a mesh ([`mesh`](Self::mesh)) or a relay's
/// or host's client over any transport ([`client`](Self::client),
/// [`hosted`](Self::hosted)). The state the simulation has when the
/// session starts (the first update after it is inserted) is the match's
/// start; a joiner's is replaced by the state it is sent.
///
/// ```no_run
/// use bevy::prelude::*;
/// use lockstep_bevy::LockstepSession;
/// use lockstep_core::sequenced::ClientConfig;
/// # let mut app = App::new();
/// let config = ClientConfig { room: "my-room".into(), ..ClientConfig::default() };
/// app.insert_resource(LockstepSession::<u8>::relay("127.0.0.1:7777".parse().unwrap(), config));
/// ```
#[derive(Resource)]
pub struct LockstepSession<I: Input + Send + Sync> {
    state: SyncCell<State<I>>,
    runner: RunnerConfig,
    last_tick: Option<Tick>,
}

impl<I: Input + Send + Sync> core::fmt::Debug for LockstepSession<I> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("LockstepSession")
            .field("last_tick", &self.last_tick)
            .finish_non_exhaustive()
    }
}

impl<I: Input + Send + Sync> LockstepSession<I> {
    fn starting(start: Start<I>) -> Self {
        Self {
            state: SyncCell::new(State::Starting(start)),
            runner: RunnerConfig::default(),
            last_tick: None,
        }
    }

    /// A relay's client over sealed UDP that reconnects by itself
    /// (`lockstep_net::RelayClient`).
    pub fn relay(relay: SocketAddr, config: ClientConfig) -> Self {
        Self::starting(Box::new(move |sim, runner| {
            let client =
                RelayClient::connect(relay, config, sim, runner).map_err(|e| e.to_string())?;
            Ok(Box::new(Relay { client }) as Box<dyn Connection<I>>)
        }))
    }

    /// A mesh player or observer over `transport`.
    pub fn mesh(session: MeshSession<I>, transport: impl Transport + Send + 'static) -> Self {
        Self::driven(session, transport)
    }

    /// A relay's or host's client over `transport` (a WebSocket, a test's
    /// network). It does not reconnect by itself.
    pub fn client(session: ClientSession<I>, transport: impl Transport + Send + 'static) -> Self {
        Self::driven(session, transport)
    }

    /// A player of a host-mode match (the host too) that survives its
    /// host, over `transport`, which knows its peers' addresses (a UDP
    /// socket accepting unknown peers): the players' contacts go into the
    /// roster and a takeover reaches them (`lockstep_net::share_contacts`).
    pub fn hosted<T>(session: HostedSession<I>, transport: T) -> Self
    where
        T: Transport + lockstep_net::Addresses + Send + 'static,
    {
        Self::with_parts(session, transport, None, Some(share_contacts::<I, T>))
    }

    /// A relay's or host's client over `transport` that takes its seat
    /// back on a new connection when this one is lost, by the rule of
    /// [`Reconnect`] (after 3 s of silence, once a second, for 30 s):
    /// `reopen` opens the new transport (a new socket, so the server sees
    /// a new address) and says the server's id on it.
    pub fn client_reconnecting<T>(
        session: ClientSession<I>,
        transport: T,
        reopen: impl FnMut() -> Result<Reopened<T>, String> + Send + 'static,
    ) -> Self
    where
        T: Transport + Send + 'static,
    {
        Self::with_parts(
            session,
            transport,
            Some((Reconnect::default(), Box::new(reopen))),
            None,
        )
    }

    fn driven<S, T>(session: S, transport: T) -> Self
    where
        S: Played<I> + Extras + Send + 'static,
        T: Transport + Send + 'static,
    {
        Self::with_parts(session, transport, None, None)
    }

    fn with_parts<S, T>(
        session: S,
        transport: T,
        reconnect: Option<(Reconnect, Reopen<T>)>,
        prepare: Option<fn(&mut S, &mut T)>,
    ) -> Self
    where
        S: Played<I> + Extras + Send + 'static,
        T: Transport + Send + 'static,
    {
        Self::starting(Box::new(move |sim, config| {
            let runner = Runner::new(session, sim, config).map_err(|e| e.to_string())?;
            Ok(Box::new(Driven {
                runner,
                transport,
                buffers: Buffers::default(),
                send: Vec::with_capacity(1500),
                now: Instant::ZERO,
                prepare,
                reconnect,
            }) as Box<dyn Connection<I>>)
        }))
    }

    /// Runs the match with `config` (pacing, catching up, checksums).
    #[must_use]
    pub fn with_runner_config(mut self, config: RunnerConfig) -> Self {
        self.runner = config;
        self
    }

    /// Ends the match for this app after tick `last`: every app that sets
    /// the same tick ends on the same state.
    pub fn set_last_tick(&mut self, last: Option<Tick>) {
        self.last_tick = last;
        if let State::Running(c) = self.state.get() {
            c.set_last_tick(last);
        }
    }

    /// Leaves the match, telling the others (remove the resource after a
    /// few updates, so the goodbye goes out).
    pub fn leave(&mut self) {
        if let State::Running(c) = self.state.get() {
            c.leave();
        }
    }

    /// Why the session could not start or the runner stopped, if it did.
    pub fn failure(&mut self) -> Option<&str> {
        match self.state.get() {
            State::Failed(e) => Some(e),
            _ => None,
        }
    }

    /// The tick of the last frame run, if any.
    pub fn last_run(&mut self) -> Option<Tick> {
        match self.state.get() {
            State::Running(c) => c.last_run(),
            _ => None,
        }
    }
}

/// Where the match stands, refreshed every update.
#[derive(Resource, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LockstepStatus {
    /// No session.
    #[default]
    Idle,
    /// The session's status.
    Session(Status),
    /// The session could not start, or the runner stopped
    /// ([`LockstepSession::failure`] says why).
    Failed,
}

impl LockstepStatus {
    /// Whether the match is over for this app: finished (its last tick
    /// run), ended (it left, or the match closed) or failed.
    ///
    /// ```
    /// use lockstep_bevy::prelude::*;
    /// assert!(LockstepStatus::Session(Status::Finished).is_over());
    /// assert!(!LockstepStatus::Session(Status::Playing).is_over());
    /// assert!(!LockstepStatus::Idle.is_over());
    /// ```
    pub fn is_over(&self) -> bool {
        matches!(
            self,
            Self::Session(Status::Finished | Status::Ended) | Self::Failed
        )
    }
}

/// A session event, as a message (for UI) and as an observer trigger.
#[derive(Message, Event, Debug, Clone, PartialEq)]
pub struct LockstepEvent(pub Event);

/// The status changed (to show a banner or a progress bar).
#[derive(Message, Event, Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusChanged(pub LockstepStatus);

/// Receive set: datagrams in.
pub(crate) fn receive<I: Input + Send + Sync>(
    session: Option<ResMut<LockstepSession<I>>>,
    time: Res<Time<Real>>,
) {
    let Some(mut session) = session else {
        return;
    };
    if let State::Running(c) = session.state.get() {
        c.receive(now(&time));
    }
}

/// Send set: datagrams out.
pub(crate) fn send<I: Input + Send + Sync>(session: Option<ResMut<LockstepSession<I>>>) {
    let Some(mut session) = session else {
        return;
    };
    if let State::Running(c) = session.state.get() {
        c.send();
    }
}

fn now(time: &Time<Real>) -> Instant {
    Instant::from_micros(u64::try_from(time.elapsed().as_micros()).unwrap_or(u64::MAX))
}

/// Puts in the log what a game must hear of even when it reads no
/// events: its simulation parted from the others', and what came of it.
fn log(ev: &Event) {
    match ev {
        Event::Desync {
            tick,
            local,
            remote,
            ..
        } => tracing::warn!(
            "lockstep: this app's state differs from the match's at checkpoint {tick} \
             ({local:x} here, {remote:x} there): the simulation is not deterministic, or \
             reads state that is not registered (run SelfCheck on the game)"
        ),
        Event::DesyncLocated {
            first: Some(f),
            checkpoint,
            ..
        } => tracing::warn!(
            "lockstep: the first tick whose state differs is {} (checkpoint {checkpoint})",
            f.tick
        ),
        Event::Resyncing => {
            tracing::warn!("lockstep: this app's state is being replaced by the match's");
        }
        Event::DivergedTooOften { resyncs } => tracing::error!(
            "lockstep: this app's state parted from the match's again after {resyncs} \
             resyncs: it leaves the match"
        ),
        _ => {}
    }
}

/// Advance set: the runner's turn, with the app's world as its game.
pub(crate) fn advance<I: Input + Send + Sync>(world: &mut World) {
    let Some(mut session) = world.remove_resource::<LockstepSession<I>>() else {
        if world.get_resource::<LockstepStatus>() != Some(&LockstepStatus::Idle) {
            world.insert_resource(LockstepStatus::Idle);
        }
        return;
    };
    let now = now(world.resource::<Time<Real>>());
    let last_tick = session.last_tick;
    let config = &session.runner;
    let state = session.state.get();
    if let State::Starting(_) = state
        && let State::Starting(start) = core::mem::replace(state, State::Failed(String::new()))
    {
        // What the state is made of, as registered by now.
        let registry: Shared = std::sync::Arc::new(
            world
                .get_resource::<crate::snapshot::Registry>()
                .cloned()
                .unwrap_or_default(),
        );
        let config = config.clone();
        // The match starts from the simulation's state now; the world
        // itself moves into the game only for each turn.
        *state = match registry.save(world) {
            Ok(bytes) => match start(BevySim::detached(registry, bytes), config) {
                Ok(mut c) => {
                    c.sim().attach();
                    c.set_last_tick(last_tick);
                    State::Running(c)
                }
                Err(e) => State::Failed(e),
            },
            Err(e) => State::Failed(format!("the simulation's state cannot be saved: {e}")),
        };
    }
    // State registered once the match has begun would be saved by some
    // machines and not others, or by none: stopped, loudly.
    if let State::Running(c) = session.state.get()
        && let Some(name) = world
            .get_resource::<crate::snapshot::Registry>()
            .and_then(|r| r.added_since(c.sim().registry()))
    {
        c.leave();
        *session.state.get() = State::Failed(format!(
            "{name} was registered as state after the session started: register every \
             lockstep component and resource before inserting the LockstepSession"
        ));
    }
    let status = match session.state.get() {
        State::Running(c) => {
            if let (Some(rate), Some(mut time)) =
                (c.tick_rate(), world.get_resource_mut::<SimTime>())
                && time.rate != rate
            {
                time.rate = rate;
            }
            core::mem::swap(world, c.sim().world.get_mut());
            let result = c.update(now, &mut |g: &BevySim<I>| g.sample_input());
            let sim = c.sim();
            core::mem::swap(world, sim.world.get_mut());
            let restored = core::mem::take(&mut sim.restored);
            let unsavable = sim.unsavable.take();
            let mut figures = c.figures();
            if figures.seat.is_none() {
                // Kept once the match is over (the session forgets it).
                figures.seat = world.get_resource::<LockstepStats>().and_then(|s| s.seat);
            }
            world.insert_resource(figures);
            while let Some(ev) = c.poll_event() {
                log(&ev);
                world.write_message(LockstepEvent(ev.clone()));
                world.trigger(LockstepEvent(ev));
            }
            if restored {
                let _ = world.try_run_schedule(crate::LockstepRestored);
            }
            match result {
                // State the snapshots and hashes would leave out: stopped,
                // loudly, rather than play on with checks that check
                // nothing.
                Ok(_) if unsavable.is_some() => {
                    let reason = unsavable.unwrap_or_default();
                    c.leave();
                    *session.state.get() =
                        State::Failed(format!("the simulation's state cannot be saved: {reason}"));
                    LockstepStatus::Failed
                }
                Ok(_) => LockstepStatus::Session(c.status()),
                Err(e) => {
                    let reason = e.to_string();
                    *session.state.get() = State::Failed(reason);
                    LockstepStatus::Failed
                }
            }
        }
        State::Failed(_) => LockstepStatus::Failed,
        State::Starting(_) => LockstepStatus::Idle,
    };
    if world.get_resource::<LockstepStatus>() != Some(&status) {
        world.insert_resource(status);
        world.write_message(StatusChanged(status));
        world.trigger(StatusChanged(status));
    }
    world.insert_resource(session);
}

/// A host-mode player's contacts, before its datagrams move.
fn share_contacts<I: Input + Send + Sync, T: lockstep_net::Addresses>(
    session: &mut HostedSession<I>,
    transport: &mut T,
) {
    lockstep_net::share_contacts(session, transport);
}
