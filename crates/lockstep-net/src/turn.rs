//! A [`Runner`] over a [`Transport`], in the game's own thread: one call a
//! render frame moves the datagrams and runs the turn, another sleeps until
//! the next thing to do.

use crate::{Buffers, Clock, Transport, TransportError, drive};
use lockstep_core::runner::{Played, Runner, RunnerError, Update};
use lockstep_core::{Game, Instant};

/// Why a [`turn`] stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TurnError {
    /// The transport failed (a closed WebSocket, a socket error): open a
    /// new one to reconnect.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The game failed (see [`RunnerError`]).
    #[error(transparent)]
    Runner(#[from] RunnerError),
}

/// One turn of a game loop at `now`: every waiting datagram in, the
/// runner's [`update`](Runner::update) (`input` samples the local input
/// when one is due), every datagram out. A datagram the session refuses is
/// dropped (one bad datagram never stops the loop); what the transport or
/// the game cannot do is the error.
///
/// ```no_run
/// use lockstep_core::runner::{Runner, RunnerConfig};
/// use lockstep_core::sequenced::{ClientConfig, ClientSession};
/// use lockstep_net::{Buffers, Clock, UdpTransport, turn, wait};
/// # #[derive(Default)] struct MyGame;
/// # impl lockstep_core::Game for MyGame {
/// #     type Input = u8;
/// #     fn step(&mut self, _: &lockstep_core::Frame<u8>) {}
/// #     fn hash(&self) -> u64 { 0 }
/// #     fn save(&self) -> Vec<u8> { Vec::new() }
/// #     fn restore(_: &[u8]) -> Result<Self, String> { Ok(MyGame) }
/// # }
/// let mut udp = UdpTransport::bind("0.0.0.0:0")?;
/// let relay = udp.add_peer("127.0.0.1:7777".parse()?);
/// let clock = Clock::new();
/// let config = ClientConfig { secret: Some(lockstep_net::session_secret()?), ..ClientConfig::default() };
/// let session = ClientSession::new(config, relay, clock.now())?;
/// let mut runner = Runner::new(session, MyGame::default(), RunnerConfig::default())?;
/// let mut buffers = Buffers::default();
/// let frame = std::time::Duration::from_micros(16_667);
/// loop {
///     let now = clock.now();
///     turn(&mut runner, &mut udp, now, &mut buffers, |_game| 0)?;
///     // A relay of a fleet named the room's relay: go there.
///     if let Some(to) = runner.session().redirect() {
///         let relay = udp.add_peer(to);
///         runner.session_mut().follow_redirect(relay, now);
///     }
///     // draw(runner.game(), runner.status());
///     wait(&runner, &mut udp, &clock, now + frame)?;
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn turn<G: Game, S: Played<G::Input>, T: Transport + ?Sized>(
    runner: &mut Runner<G, S>,
    transport: &mut T,
    now: Instant,
    buffers: &mut Buffers,
    input: impl FnMut(&G) -> G::Input,
) -> Result<Update, TurnError> {
    drive(runner, transport, now, buffers)?;
    let done = runner.update(now, input)?;
    drive(runner, transport, now, buffers)?;
    Ok(done)
}

/// [`turn`] for a player in host mode over UDP (a runner around a
/// [`HostedSession`](lockstep_core::sequenced::HostedSession)): the
/// datagrams move through [`drive_hosted`](crate::drive_hosted), which
/// names the players' contacts and resolves those a takeover needs, so the
/// match survives its host with no code of the game's.
pub fn turn_hosted<G: Game, T: Transport + crate::Addresses>(
    runner: &mut Runner<G, lockstep_core::sequenced::HostedSession<G::Input>>,
    transport: &mut T,
    now: Instant,
    buffers: &mut Buffers,
    input: impl FnMut(&G) -> G::Input,
) -> Result<Update, TurnError> {
    crate::drive_hosted(runner.session_mut(), transport, now, buffers)?;
    let done = runner.update(now, input)?;
    crate::drive_hosted(runner.session_mut(), transport, now, buffers)?;
    Ok(done)
}

/// Sleeps until `until` (the next render frame), or sooner when the
/// session has a timer due or a datagram arrives: a loop that calls
/// [`turn`] then `wait` uses no CPU while nothing happens, and answers a
/// datagram as soon as it comes.
pub fn wait<G: Game, S: Played<G::Input>, T: Transport + ?Sized>(
    runner: &Runner<G, S>,
    transport: &mut T,
    clock: &Clock,
    until: Instant,
) -> Result<(), TransportError> {
    let until = runner.poll_timeout().map_or(until, |t| t.min(until));
    let now = clock.now();
    if until <= now {
        return Ok(());
    }
    transport.wait(until - now)
}
