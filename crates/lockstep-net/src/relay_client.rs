//! A relay's client over UDP, with its runner, that reconnects by itself.

use crate::{
    Attempt, Buffers, Clock, Reconnect, TransportError, TurnError, UdpTransport, drive,
    session_secret,
};
use lockstep_core::runner::{Runner, RunnerConfig, Status, Update};
use lockstep_core::sequenced::{ClientConfig, ClientSession};
use lockstep_core::{ConfigError, Event, Game, Instant, PeerId};
use std::net::SocketAddr;
use std::time::Duration;

/// How long a socket's calls must keep failing before it counts as dead
/// (one failed send, a full buffer, is not a lost connection).
const SOCKET_FAILS_FOR: Duration = Duration::from_secs(1);

/// Why a [`RelayClient`] could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// No socket could be opened.
    #[error("could not open a UDP socket: {0}")]
    Socket(#[from] std::io::Error),
    /// The operating system gave no random bytes for the connection's key.
    #[error("no random bytes for the connection's key: {0}")]
    Random(getrandom::Error),
    /// The session's config is refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// A game's whole client side of a relay match over UDP: the
/// [`ClientSession`], a [`Runner`] for the game, the socket, and the rule
/// for a lost connection. When the relay has been silent for
/// [`RECONNECT_AFTER`](crate::RECONNECT_AFTER), or the session timed out, while the relay may
/// still hold the seat ([`RECONNECT_FOR`](crate::RECONNECT_FOR)), it opens a new socket and takes
/// the seat back (`ClientSession::reconnect`); the runner then goes on
/// from where it stopped, or restarts the game from the state the relay
/// sends. [`status`](Self::status) is `Reconnecting` meanwhile.
///
/// The connection is sealed: a relay takes UDP clients only with a key,
/// and a fresh one is made for each connection.
///
/// A relay of a fleet that does not serve the room names the one that
/// does (a sealed redirect): the client goes there by itself, at most
/// [`MAX_REDIRECTS`](lockstep_core::sequenced::MAX_REDIRECTS) times, and
/// takes its seat back there if the connection is lost later.
///
/// ```no_run
/// use lockstep_core::runner::RunnerConfig;
/// use lockstep_core::sequenced::ClientConfig;
/// use lockstep_net::RelayClient;
/// # #[derive(Default)] struct MyGame;
/// # impl lockstep_core::Game for MyGame {
/// #     type Input = u8;
/// #     fn step(&mut self, _: &lockstep_core::Frame<u8>) {}
/// #     fn hash(&self) -> u64 { 0 }
/// #     fn save(&self) -> Vec<u8> { Vec::new() }
/// #     fn restore(_: &[u8]) -> Result<Self, String> { Ok(MyGame) }
/// # }
/// let config = ClientConfig { room: "lobby-1".into(), ..ClientConfig::default() };
/// let mut client = RelayClient::connect("127.0.0.1:7777".parse()?, config, MyGame::default(), RunnerConfig::default())?;
/// loop {
///     client.turn(|_game| 0)?;                  // the input, sampled when due
///     // draw(client.game(), client.status());
///     while let Some(_event) = client.poll_event() {}
///     client.wait(std::time::Duration::from_micros(16_667))?; // till the next render frame
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct RelayClient<G: Game> {
    runner: Runner<G, ClientSession<G::Input>>,
    udp: UdpTransport,
    relay: SocketAddr,
    buffers: Buffers,
    clock: Clock,
    /// When to take the seat back on a new connection.
    reconnect: Reconnect,
    /// Since when every turn's socket calls have failed.
    failing_since: Option<Instant>,
    /// The socket failed for [`SOCKET_FAILS_FOR`]: a new one is opened.
    broken: bool,
}

impl<G: Game> RelayClient<G> {
    /// Opens a socket and starts connecting to the relay at `relay`, for
    /// `game` (the state the match starts from; a joiner's is replaced by
    /// the state it is sent). `config.secret` is filled with a fresh key.
    pub fn connect(
        relay: SocketAddr,
        mut config: ClientConfig,
        game: G,
        runner: RunnerConfig,
    ) -> Result<Self, ConnectError> {
        config.secret = Some(session_secret().map_err(ConnectError::Random)?);
        let (udp, relay_id) = open(relay)?;
        let clock = Clock::new();
        let session = ClientSession::new(config, relay_id, clock.now())?;
        Ok(Self {
            runner: Runner::new(session, game, runner)?,
            udp,
            relay,
            buffers: Buffers::default(),
            clock,
            reconnect: Reconnect::default(),
            failing_since: None,
            broken: false,
        })
    }

    /// One turn of the game loop (see [`turn`](crate::turn)), after taking
    /// the seat back on a new connection if the old one is lost. A socket
    /// that fails counts as a lost connection (a new one is opened at the
    /// next turn, within a second), never as an error: the only errors are
    /// the game's ([`RunnerError`](lockstep_core::runner::RunnerError)).
    pub fn turn(&mut self, input: impl FnMut(&G) -> G::Input) -> Result<Update, TurnError> {
        let now = self.clock.now();
        self.reconnect_if_lost(now);
        let inbound = drive(&mut self.runner, &mut self.udp, now, &mut self.buffers);
        self.follow_redirect(now);
        let done = self.runner.update(now, input)?;
        let outbound = drive(&mut self.runner, &mut self.udp, now, &mut self.buffers);
        if inbound.is_ok() || outbound.is_ok() {
            self.failing_since = None;
        } else {
            let since = *self.failing_since.get_or_insert(now);
            self.broken |= now - since >= SOCKET_FAILS_FOR;
        }
        Ok(done)
    }

    /// Sleeps at most `frame` (until the next render frame), less when a
    /// timer is due or a datagram arrives.
    pub fn wait(&mut self, frame: Duration) -> Result<(), TransportError> {
        let until = self.clock.now() + frame;
        crate::wait(&self.runner, &mut self.udp, &self.clock, until)
    }

    /// Where the match stands: the runner's status. Once the client has
    /// stopped trying to take its seat back (at a turn), `Ended`, and
    /// `session().closed()` is [`CloseReason::GaveUp`](lockstep_core::sequenced::CloseReason::GaveUp).
    pub fn status(&self) -> Status {
        self.runner.status()
    }

    /// Takes the seat back after `after` of silence from the relay (3 s by
    /// default), trying for `give_up` (30 s, as long as a relay holds a
    /// seat by default) before the status turns `Ended`.
    pub fn set_reconnect(&mut self, after: Duration, give_up: Duration) {
        self.reconnect.set(after, give_up);
    }

    /// The game.
    pub fn game(&self) -> &G {
        self.runner.game()
    }

    /// Says whether this player is ready to start, in a room whose match
    /// starts once its players are ready (the status is
    /// [`Status::InLobby`] until then; `runner().session().roster()` names
    /// everyone seated and says who is ready).
    pub fn set_ready(&mut self, ready: bool) {
        self.runner.session_mut().set_ready(ready);
    }

    /// Leaves the match: the relay is told goodbye at the next turn (or
    /// when the client is dropped), and the status turns `Ended`. A client
    /// dropped without leaving says goodbye too, once; one that vanishes
    /// without a word (its process killed) keeps its seat held for the
    /// relay's grace (30 s), and its room's match with it.
    pub fn leave(&mut self) {
        self.runner.session_mut().leave();
    }

    /// The session: its seat, `roster()` (the room's players by name),
    /// `match_id()`, `lobby()`, stats.
    pub fn session(&self) -> &ClientSession<G::Input> {
        self.runner.session()
    }

    /// Ends the match for this game at `last` (see
    /// [`Runner::set_last_tick`]): the status turns `Finished` once it ran.
    pub fn set_last_tick(&mut self, last: Option<lockstep_core::Tick>) {
        self.runner.set_last_tick(last);
    }

    /// The next event, for the game to show.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.runner.poll_event()
    }

    /// The runner, to read the session through.
    pub fn runner(&self) -> &Runner<G, ClientSession<G::Input>> {
        &self.runner
    }

    /// The runner, for what it does not do (pause, leave).
    pub fn runner_mut(&mut self) -> &mut Runner<G, ClientSession<G::Input>> {
        &mut self.runner
    }

    /// Seats taken back on a new connection after one was lost.
    pub fn reconnects(&self) -> u32 {
        self.reconnect.reconnects()
    }

    /// The clock the loop runs on.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// The socket. A test of reconnecting cuts the connection by swapping
    /// in a socket whose peer 0 (the relay's id here) is an address nobody
    /// reads: nothing arrives, and the client takes its seat back on a
    /// socket of its own after [`RECONNECT_AFTER`](crate::RECONNECT_AFTER).
    pub fn transport_mut(&mut self) -> &mut UdpTransport {
        &mut self.udp
    }

    /// The relay said the room is served by another relay of its fleet:
    /// a socket for that one (its address family may differ), where the
    /// handshake starts again, and where a lost connection is retaken
    /// from now on. No socket now: tried again next turn (the session
    /// waits, and closes naming the other relay if it never can).
    fn follow_redirect(&mut self, now: Instant) {
        let Some(to) = self.runner.session().redirect() else {
            return;
        };
        let Ok((udp, id)) = open(to) else {
            return;
        };
        self.runner.session_mut().follow_redirect(id, now);
        self.udp = udp;
        self.relay = to;
        self.buffers = Buffers::default();
        self.failing_since = None;
        self.broken = false;
    }

    /// A new socket and a reconnect, when the relay has been silent for
    /// [`RECONNECT_AFTER`](crate::RECONNECT_AFTER), or the session timed out, or the socket failed,
    /// the seat may still be held, and the last try was a second ago or
    /// more. Without a seat to take back, a failed socket is replaced all
    /// the same: the session's own Hellos go out on the new one.
    fn reconnect_if_lost(&mut self, now: Instant) {
        match self.reconnect.due(&self.runner, self.broken, now) {
            Attempt::Now => {}
            Attempt::Later => return,
            Attempt::GiveUp => {
                // Closed for good, saying why (a try under way is dropped).
                self.runner.session_mut().give_up();
                return;
            }
            Attempt::None => {
                if self.broken
                    && let Ok((udp, _)) = open(self.relay)
                {
                    self.udp = udp;
                    self.broken = false;
                    self.failing_since = None;
                }
                return;
            }
        }
        // No random bytes or no socket now: tried again in a second.
        let (Ok(secret), Ok((udp, relay_id))) = (session_secret(), open(self.relay)) else {
            return;
        };
        if self
            .runner
            .session_mut()
            .reconnect(relay_id, Some(secret), now)
            .is_ok()
        {
            self.udp = udp;
            self.broken = false;
            self.failing_since = None;
            self.buffers = Buffers::default();
            self.reconnect.reconnected();
        }
    }
}

/// A socket of the relay's address family, the relay its only peer.
fn open(relay: SocketAddr) -> std::io::Result<(UdpTransport, PeerId)> {
    let any: SocketAddr = if relay.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let mut udp = UdpTransport::bind(any)?;
    let id = udp.add_peer(relay);
    Ok((udp, id))
}

/// A client dropped while connected says goodbye, once: its seat is
/// released at once rather than held for the relay's grace.
impl<G: Game> Drop for RelayClient<G> {
    fn drop(&mut self) {
        if self.runner.session().closed().is_some() {
            return;
        }
        self.runner.session_mut().leave();
        let _ = drive(
            &mut self.runner,
            &mut self.udp,
            self.clock.now(),
            &mut self.buffers,
        );
    }
}
