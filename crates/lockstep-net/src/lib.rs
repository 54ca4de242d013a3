//! Transports for lockstep sessions.
//!
//! The sessions in `lockstep-core` never touch a socket; this crate carries
//! their datagrams. Every transport is the same small non-blocking trait,
//! [`Transport`], so a game loop drives a session over UDP, WebSocket or an
//! in-process channel with the same few lines and no async runtime:
//!
//! ```no_run
//! use lockstep_core::sequenced::{ClientConfig, ClientSession};
//! use lockstep_core::PeerId;
//! use lockstep_net::{Clock, Transport, UdpTransport, drive};
//!
//! let mut udp = UdpTransport::bind("0.0.0.0:0")?;
//! let server = udp.add_peer("127.0.0.1:7777".parse()?);
//! let clock = Clock::new();
//! // Sealed datagrams: a relay takes UDP clients only with a secret.
//! let config = ClientConfig { secret: Some(lockstep_net::session_secret()?), ..ClientConfig::default() };
//! let mut session = ClientSession::<u8>::new(config, server, clock.now())?;
//! let mut buffers = lockstep_net::Buffers::default();
//! loop {
//!     let moved = drive(&mut session, &mut udp, clock.now(), &mut buffers)?;
//!     // A datagram the session refused is counted, not returned.
//!     if moved.rejected > 0 { /* log it: the session is refusing what it gets */ }
//!     // One input per frame run: commit only while the session wants one
//!     // (committing every pass would stamp inputs up to `max_lead` ahead).
//!     while session.input_due() {
//!         session.commit_local(0)?;
//!     }
//!     while let Some(frame) = session.advance() { /* game.step(&frame) */ }
//!     # break;
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! - [`UdpTransport`]: `std::net` UDP, addresses mapped to [`PeerId`]s;
//!   as a server it gives each new source address an id (up to a limit).
//! - [`WsClientTransport`]: a WebSocket client (`ws://` or `wss://`)
//!   carrying one datagram per binary message, for networks where only TCP
//!   gets through.
//! - [`MemoryNetwork`]: in-process endpoints, for tests and single-process
//!   tools.
//! - [`FaultyTransport`]: wraps any transport with loss, delay, jitter,
//!   duplication, reordering and a bandwidth limit, both ways, from a
//!   seed; [`ImpairedLink`] is one direction of it without a clock (what
//!   `lockstep netsim` runs), and [`FaultScript`] changes it over time.
//!
//! - [`turn`] and [`wait`]: a game loop for a
//!   [`Runner`](lockstep_core::runner::Runner) over any transport, one
//!   call to move datagrams and run the turn, one to sleep until the next
//!   render frame, timer or datagram (no spinning). The
//!   `mesh_game` example is a whole game over UDP this way.
//! - [`RelayClient`]: a relay match's client side over UDP, runner
//!   included, which takes its seat back on a new socket by itself when
//!   the connection is lost.
//!
//! - [`drive_hosted`]: [`drive`] for a host-mode player
//!   ([`HostedSession`](lockstep_core::sequenced::HostedSession)) over
//!   UDP, naming contacts and resolving the ones a takeover needs.
//!
//! Connection handshakes, retries, keepalives and timeouts are the
//! sessions' job (Hello/Welcome, pings, silence detection), so they work the
//! same over every transport.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod faulty;
mod memory;
mod reconnect;
mod relay_client;
mod turn;
mod udp;
mod ws;

pub use faulty::{
    FaultScript, Faults, FaultyTransport, HELD_BYTES_CAP, HELD_CAP, ImpairedLink, LinkCounts,
    MAX_QUEUE_DELAY, ScriptError,
};
pub use memory::{MemoryNetwork, MemoryTransport};
pub use reconnect::{Attempt, RECONNECT_AFTER, RECONNECT_FOR, Reconnect};
pub use relay_client::{ConnectError, RelayClient};
pub use turn::{TurnError, turn, turn_hosted, wait};
pub use udp::{MAX_PEER_ID, UdpTransport};
pub use ws::{WsClientTransport, tls_trusting};

use lockstep_core::{Endpoint, Instant, PeerId};

/// A fresh key for [`ClientConfig::secret`](lockstep_core::sequenced::ClientConfig::secret):
/// 32 bytes from the operating system's generator, for one connection.
///
/// ```
/// let a = lockstep_net::session_secret()?;
/// assert_ne!(a, lockstep_net::session_secret()?);
/// # Ok::<(), getrandom::Error>(())
/// ```
pub fn session_secret() -> Result<[u8; 32], getrandom::Error> {
    let mut s = [0u8; 32];
    getrandom::fill(&mut s)?;
    Ok(s)
}

/// The largest datagram any transport here carries.
pub const MAX_DATAGRAM: usize = lockstep_core::wire::MAX_DATAGRAM_LEN;

/// What can go wrong moving a datagram.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The operating system refused.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// No address is known for this peer.
    #[error("no address for {0}")]
    UnknownPeer(PeerId),
    /// The datagram is larger than the transport carries.
    #[error("datagram of {len} bytes, limit {max}")]
    TooLarge {
        /// Its size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The connection is closed (WebSocket).
    #[error("connection closed")]
    Closed,
    /// The WebSocket layer failed.
    #[error("WebSocket error: {0}")]
    WebSocket(String),
    /// A peer id past what the transport indexes.
    #[error("{peer} is past the largest peer id, {max}")]
    PeerIdTooLarge {
        /// The id.
        peer: PeerId,
        /// The largest.
        max: u32,
    },
}

/// A non-blocking datagram transport.
///
/// `send` never blocks: when the network cannot take a datagram now, it is
/// dropped, as UDP would (the sessions resend). `recv` returns `Ok(None)`
/// when nothing is waiting.
pub trait Transport {
    /// Sends `datagram` to `to`.
    fn send(&mut self, to: PeerId, datagram: &[u8]) -> Result<(), TransportError>;

    /// Receives the next waiting datagram into `buf` (which must hold
    /// [`MAX_DATAGRAM`] bytes to be sure nothing is cut); returns the sender
    /// and the length.
    fn recv(&mut self, buf: &mut [u8]) -> Result<Option<(PeerId, usize)>, TransportError>;

    /// Blocks until a datagram may be waiting or `timeout` has passed,
    /// whichever is first, so that a loop with nothing to do sleeps
    /// instead of spinning. It may return early (a caller checks the time
    /// and calls `recv`); it never consumes a datagram. The default sleeps
    /// for at most a millisecond: a transport that can wait on its
    /// source does better.
    fn wait(&mut self, timeout: std::time::Duration) -> Result<(), TransportError> {
        std::thread::sleep(timeout.min(std::time::Duration::from_millis(1)));
        Ok(())
    }
}

impl<T: Transport + ?Sized> Transport for Box<T> {
    fn send(&mut self, to: PeerId, datagram: &[u8]) -> Result<(), TransportError> {
        (**self).send(to, datagram)
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<Option<(PeerId, usize)>, TransportError> {
        (**self).recv(buf)
    }

    fn wait(&mut self, timeout: std::time::Duration) -> Result<(), TransportError> {
        (**self).wait(timeout)
    }
}

/// Maps the process's monotonic clock to the core's [`Instant`], from the
/// moment the clock was made.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: std::time::Instant,
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock {
    /// A clock starting now.
    pub fn new() -> Self {
        Self {
            start: std::time::Instant::now(),
        }
    }

    /// The time since the clock started.
    pub fn now(&self) -> Instant {
        Instant::from_duration(self.start.elapsed())
    }
}

/// What one [`drive`] call moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Driven {
    /// Datagrams received and handed to the session.
    pub received: usize,
    /// Of those, how many the session rejected.
    pub rejected: usize,
    /// Datagrams sent.
    pub sent: usize,
}

/// Reusable buffers for [`drive`]: one the size of the largest datagram
/// for receiving (allocated once), one for sending.
#[derive(Debug)]
pub struct Buffers {
    recv: Box<[u8]>,
    send: Vec<u8>,
}

impl Default for Buffers {
    fn default() -> Self {
        Self {
            recv: vec![0u8; MAX_DATAGRAM].into_boxed_slice(),
            send: Vec::with_capacity(1500),
        }
    }
}

/// A transport that knows its peers' network addresses and can name a new
/// one: what host mode needs to tell players where to find each other.
pub trait Addresses {
    /// Where `peer` is.
    fn addr(&self, peer: PeerId) -> Option<std::net::SocketAddr>;
    /// The peer id of `addr`, made a peer if it was not one.
    fn add_peer(&mut self, addr: std::net::SocketAddr) -> PeerId;
}

impl Addresses for UdpTransport {
    fn addr(&self, peer: PeerId) -> Option<std::net::SocketAddr> {
        Self::addr(self, peer)
    }

    fn add_peer(&mut self, addr: std::net::SocketAddr) -> PeerId {
        Self::add_peer(self, addr)
    }
}

impl<T: Transport + Addresses> Addresses for FaultyTransport<T> {
    fn addr(&self, peer: PeerId) -> Option<std::net::SocketAddr> {
        self.inner().addr(peer)
    }

    fn add_peer(&mut self, addr: std::net::SocketAddr) -> PeerId {
        self.inner_mut().add_peer(addr)
    }
}

/// [`drive`] for a player in host mode over UDP
/// ([`HostedSession`](lockstep_core::sequenced::HostedSession)), with the
/// two things host mode needs from the transport: hosting, each
/// connection's contact (the address it is seen at, as text) goes into the
/// roster; taking part in a takeover, the contacts of the players to reach
/// become peers of the socket. The socket must accept unknown peers
/// ([`UdpTransport::accept_unknown`]): whoever takes over hears from the
/// others there. A [`FaultyTransport`] around the socket tries it over an
/// impaired link.
pub fn drive_hosted<I: lockstep_core::Input, T: Transport + Addresses>(
    session: &mut lockstep_core::sequenced::HostedSession<I>,
    udp: &mut T,
    now: Instant,
    buffers: &mut Buffers,
) -> Result<Driven, TransportError> {
    share_contacts(session, udp);
    drive(session, udp, now, buffers)
}

/// What [`drive_hosted`] does before it drives: hosting, each connection's
/// contact (the address it is seen at, as text) goes into the roster;
/// taking part in a takeover, the contacts of the players to reach become
/// peers of the transport; redirected by a relay of a fleet, the relay it
/// names becomes the session's server. For a loop that moves datagrams its own way (an
/// engine plugin's receive and send steps).
pub fn share_contacts<I: lockstep_core::Input, T: Addresses>(
    session: &mut lockstep_core::sequenced::HostedSession<I>,
    udp: &mut T,
) {
    if let Some(room) = session.sequencer() {
        let peers: Vec<PeerId> = room.connections().map(|(p, _)| p).collect();
        for p in peers {
            if let Some(addr) = udp.addr(p) {
                let _ = room.set_contact(p, addr.to_string().as_bytes());
            }
        }
    }
    // Every contact wanted now (a candidate asks every player), each once.
    for _ in 0..lockstep_core::wire::MAX_SEATS {
        let Some(contact) = session.contact_wanted().map(<[u8]>::to_vec) else {
            break;
        };
        let Some(addr) = std::str::from_utf8(&contact)
            .ok()
            .and_then(|s| s.parse::<std::net::SocketAddr>().ok())
        else {
            break;
        };
        let peer = udp.add_peer(addr);
        session.resolved(&contact, peer);
    }
    // A relay of a fleet named the room's relay: it is a peer too.
    if let Some(to) = session.redirect() {
        let peer = udp.add_peer(to);
        session.follow_redirect(peer);
    }
}

/// One network step of a game loop: every waiting datagram into the
/// session, its timers, and every datagram it wants sent out.
///
/// A datagram the session refuses (`handle_datagram` returned an error: a
/// stranger's, a forged one, one sealed under keys it does not hold) is
/// dropped and counted in [`Driven::rejected`], not returned: from the
/// network such a datagram is the sender's problem, and one bad datagram
/// must not stop the loop. A count that keeps rising on a session that
/// does not get in is worth a log line (a client with a `secret` talking to
/// a server that does not seal sees exactly that). The error returned is
/// the transport's own.
pub fn drive<E: Endpoint + ?Sized, T: Transport + ?Sized>(
    endpoint: &mut E,
    transport: &mut T,
    now: Instant,
    buffers: &mut Buffers,
) -> Result<Driven, TransportError> {
    let mut d = Driven::default();
    loop {
        match transport.recv(&mut buffers.recv) {
            Ok(Some((from, len))) => {
                d.received += 1;
                if endpoint
                    .handle_datagram(from, &buffers.recv[..len], now)
                    .is_err()
                {
                    d.rejected += 1;
                }
            }
            Ok(None) => break,
            // A dead transport still lets the endpoint's timers run: it
            // notices the silence, times out, and says so.
            Err(e) => {
                endpoint.handle_timeout(now);
                return Err(e);
            }
        }
    }
    endpoint.handle_timeout(now);
    while let Some(t) = endpoint.poll_transmit(&mut buffers.send) {
        transport.send(t.destination, &buffers.send[..t.len])?;
        d.sent += 1;
    }
    Ok(d)
}
