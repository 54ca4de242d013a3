//! The server loop.

use crate::config::{RelayConfig, RelayConfigError};
use crate::metrics::Metrics;
use crate::room::{Engine, Room, RoomName};
use crate::ticket::{self, Ledger, Role, TicketKey, Verified};
use futures_util::{SinkExt, StreamExt};
use governor::{Quota, RateLimiter, clock::DefaultClock, state::keyed::DefaultKeyedStateStore};
use lockstep_core::admission::{self, AddressValidator, SecretStream, Unwelcome};
use lockstep_core::secure::{self, SecureChannel};
use lockstep_core::sequenced::{DropReason, HOST_PEER, SequencerEvent};
use lockstep_core::wire::{self, Datagram, DatagramWriter, Message, RejectReason};
use lockstep_core::{Instant as CoreInstant, PeerId, Tick, TokenBucket};
use std::collections::HashMap;
use std::future::Future;
use std::io::ErrorKind;
use std::net::IpAddr;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tracing::{debug, info, warn};

/// The sockets a relay serves, bound by the caller (tests bind port 0).
#[derive(Debug, Default)]
pub struct Listeners {
    /// UDP clients.
    pub udp: Option<UdpSocket>,
    /// WebSocket clients (`ws://host:port/`).
    pub ws: Option<TcpListener>,
    /// `GET /metrics` (Prometheus) and `GET /healthz`.
    pub http: Option<TcpListener>,
}

/// The socket buffer a relay asks for: 4 MiB holds a few thousand
/// datagrams, a burst from every client at once.
pub const SOCKET_BUFFER: usize = 4 << 20;

/// Binds a UDP socket for [`Listeners::udp`] with a receive buffer of
/// `recv_buffer` bytes (the kernel may cap it), so a burst arriving while the
/// relay is busy waits instead of being dropped.
pub fn bind_udp(addr: SocketAddr, recv_buffer: usize) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    let _ = socket.set_recv_buffer_size(recv_buffer);
    let _ = socket.set_send_buffer_size(recv_buffer);
    if let Ok(got) = socket.recv_buffer_size()
        && got < recv_buffer
    {
        // Linux caps the request at net.core.rmem_max (often 208 KiB).
        warn!(
            "UDP receive buffer is {got} bytes, not the {recv_buffer} asked for: bursts may \
             be dropped (on Linux, raise net.core.rmem_max)"
        );
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    UdpSocket::from_std(socket.into())
}

/// Why the relay could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RelayError {
    /// A socket failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The configuration cannot run.
    #[error("invalid configuration: {0}")]
    Config(#[from] RelayConfigError),
    /// The operating system's random number generator failed.
    #[error("no randomness from the operating system: {0}")]
    Entropy(getrandom::Error),
    /// The WebSocket listener's certificate or key cannot be used.
    #[error("TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// A [`BackgroundRelay`](crate::BackgroundRelay)'s thread failed.
    #[error("relay thread: {0}")]
    Thread(String),
}

/// What a relay did, returned when it stops.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelayReport {
    /// Ticks sealed over all rooms.
    pub ticks: u64,
    /// Datagrams received.
    pub datagrams_in: u64,
    /// Datagrams sent.
    pub datagrams_out: u64,
    /// Connections refused.
    pub rejects: u64,
    /// Connections dropped for breaking a rule.
    pub violations: u64,
    /// Connections told goodbye at shutdown.
    pub said_goodbye: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum ConnKey {
    /// A plain UDP connection, known by its address.
    Udp(SocketAddr),
    Ws(u64),
    /// A sealed UDP connection, known by its connection id: its address
    /// may change (NAT rebinding).
    Sealed(u64),
}

/// A connection whose datagrams are sealed.
#[derive(Debug)]
struct SealedConn {
    channel: SecureChannel,
    /// Where its latest authentic datagram came from: where replies go.
    addr: SocketAddr,
    peer: PeerId,
    room: RoomName,
    /// Whether a sealed datagram from the client has opened: it has the
    /// keys, and sends no more plain Hellos.
    confirmed: bool,
    /// A new address authentic datagrams came from, and the stamp of the
    /// probe sent there: the connection moves when it is answered.
    probe: Option<(SocketAddr, u32)>,
    /// Where its per-address count is kept (where it was made).
    counted: IpAddr,
}

#[derive(Debug)]
enum CoreMsg {
    WsOpen { id: u64, tx: mpsc::Sender<Vec<u8>> },
    Datagram { id: u64, bytes: Vec<u8> },
    WsClosed { id: u64 },
}

/// Datagrams taken in one pass of the main loop after the one that woke
/// it, before timers and WebSocket traffic get a turn.
const UDP_BURST: usize = 64;

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Outgoing datagrams queued per WebSocket connection before dropping.
const WS_QUEUE: usize = 256;
/// The largest WebSocket message read: generously above any datagram, so
/// an oversized one reaches the room and is refused with a reason.
const WS_MAX_MESSAGE: usize = 64 << 10;

/// Runs a relay until `shutdown` completes, then tells every client goodbye
/// and returns what it did.
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use lockstep_relay::{Listeners, RelayConfig, run};
/// let listeners = Listeners {
///     udp: Some(tokio::net::UdpSocket::bind("127.0.0.1:7777").await?),
///     ws: Some(tokio::net::TcpListener::bind("127.0.0.1:7778").await?),
///     http: Some(tokio::net::TcpListener::bind("127.0.0.1:9100").await?),
/// };
/// let report = run(RelayConfig::default(), listeners, async {
///     let _ = tokio::signal::ctrl_c().await;
/// }).await?;
/// println!("{} ticks", report.ticks);
/// # Ok(()) }
/// ```
pub async fn run(
    config: RelayConfig,
    listeners: Listeners,
    shutdown: impl Future<Output = ()>,
) -> Result<RelayReport, RelayError> {
    run_with_metrics(config, listeners, Arc::new(Metrics::default()), shutdown).await
}

/// [`run`], counting into `metrics` (which the caller may read meanwhile).
pub async fn run_with_metrics(
    config: RelayConfig,
    listeners: Listeners,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) -> Result<RelayReport, RelayError> {
    serve(config, listeners, metrics, async {
        shutdown.await;
        true
    })
    .await
}

/// [`run_with_metrics`], until `shutdown` says whether to tell every client
/// goodbye (`false`: stop dead, as a crashed relay would).
pub(crate) async fn serve(
    config: RelayConfig,
    listeners: Listeners,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = bool>,
) -> Result<RelayReport, RelayError> {
    let (core_tx, mut core_rx) = mpsc::channel::<CoreMsg>(4096);
    let mut tasks = JoinSet::new();
    if let Some(listener) = listeners.ws {
        let limits = WsLimits::from(&config.limits);
        let tls = config.tls.as_ref().map(crate::tls::acceptor).transpose()?;
        tasks.spawn(accept_ws(
            listener,
            tls,
            core_tx.clone(),
            limits,
            metrics.clone(),
        ));
    }
    if let Some(listener) = listeners.http {
        let max_lag = Duration::from_millis(config.limits.max_loop_lag_ms);
        tasks.spawn(serve_http(listener, metrics.clone(), max_lag));
    }
    drop(core_tx);
    let udp = listeners.udp.map(Arc::new);
    let mut core = Core::new(config, metrics, udp.clone())?;
    let mut shutdown = std::pin::pin!(shutdown);
    let mut buf = vec![0u8; 65_536];
    // Without a WebSocket listener nothing ever sends on `core_rx`: once it
    // reports closed it is never polled again (it would answer `None` at
    // once, every time, and the loop would spin a core).
    let mut ws_open = true;
    let goodbye;
    loop {
        let wake = core.next_wakeup();
        core.metrics
            .loop_at_ms
            .store(millis(core.start.elapsed()), Ordering::Relaxed);
        // Not biased: under a flood of UDP, timers, WebSocket traffic and
        // shutdown still get their turn.
        tokio::select! {
            g = &mut shutdown => {
                goodbye = g;
                break;
            }
            r = recv_udp(udp.as_deref(), &mut buf) => match r {
                Ok((n, addr)) => {
                    core.datagram(ConnKey::Udp(addr), &buf[..n]);
                    // Take some of a burst without going round the loop, but
                    // never so much that ticks wait on it.
                    if let Some(s) = udp.as_deref() {
                        for _ in 0..UDP_BURST {
                            let Ok((n, addr)) = s.try_recv_from(&mut buf) else {
                                break;
                            };
                            core.datagram(ConnKey::Udp(addr), &buf[..n]);
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
                Err(e) => warn!("udp receive failed: {e}"),
            },
            msg = core_rx.recv(), if ws_open => match msg {
                Some(CoreMsg::WsOpen { id, tx }) => { core.ws_out.insert(id, tx); }
                Some(CoreMsg::Datagram { id, bytes }) => core.datagram(ConnKey::Ws(id), &bytes),
                Some(CoreMsg::WsClosed { id }) => core.ws_closed(id),
                None => ws_open = false,
            },
            () = tokio::time::sleep_until(wake) => {}
        }
        core.timers();
    }
    let report = core.shutdown(goodbye);
    // Let WebSocket writers deliver their goodbyes, then stop everything.
    core.ws_out.clear();
    let _ = tokio::time::timeout(Duration::from_millis(500), async {
        while core_rx.recv().await.is_some() {}
    })
    .await;
    tasks.abort_all();
    info!(ticks = report.ticks, "relay stopped");
    Ok(report)
}

async fn recv_udp(udp: Option<&UdpSocket>, buf: &mut [u8]) -> std::io::Result<(usize, SocketAddr)> {
    match udp {
        Some(s) => s.recv_from(buf).await,
        None => std::future::pending().await,
    }
}

/// Where datagrams leave, borrowed apart from the rooms so a room's
/// datagrams go out as it produces them.
struct Outbox<'a> {
    udp: Option<&'a UdpSocket>,
    ws_out: &'a HashMap<u64, mpsc::Sender<Vec<u8>>>,
    sealed: &'a mut HashMap<u64, SealedConn>,
    scratch: &'a mut Vec<u8>,
    metrics: &'a Metrics,
}

impl Outbox<'_> {
    fn send(&mut self, key: ConnKey, bytes: &[u8]) {
        let udp = |bytes: &[u8], addr| self.udp.is_some_and(|s| s.try_send_to(bytes, addr).is_ok());
        let (sent, len) = match key {
            ConnKey::Udp(addr) => (udp(bytes, addr), bytes.len()),
            ConnKey::Ws(id) => (
                self.ws_out
                    .get(&id)
                    .is_some_and(|tx| tx.try_send(bytes.to_vec()).is_ok()),
                bytes.len(),
            ),
            ConnKey::Sealed(id) => match self.sealed.get_mut(&id) {
                Some(c) => {
                    self.scratch.clear();
                    c.channel.seal(bytes, self.scratch);
                    (udp(self.scratch, c.addr), self.scratch.len())
                }
                None => (false, 0),
            },
        };
        if sent {
            self.metrics.datagrams_out.fetch_add(1, Ordering::Relaxed);
            self.metrics
                .bytes_out
                .fetch_add(len as u64, Ordering::Relaxed);
        } else {
            self.metrics.dropped_out.fetch_add(1, Ordering::Relaxed);
        }
    }
}

struct Core {
    config: RelayConfig,
    metrics: Arc<Metrics>,
    start: std::time::Instant,
    udp: Option<Arc<UdpSocket>>,
    rooms: HashMap<RoomName, Room>,
    /// Rooms by their next timeout (microseconds of the relay's clock).
    deadlines: std::collections::BTreeSet<(u64, RoomName)>,
    /// Plain UDP and WebSocket connections by where they come from.
    conns: HashMap<ConnKey, (PeerId, RoomName)>,
    /// Sealed UDP connections by connection id.
    sealed: HashMap<u64, SealedConn>,
    /// Ids of sealed connections that ended, until the cookie they were
    /// made with expires: a replayed Hello must not make the same keys
    /// seal a second stream from sequence number 0.
    retired: HashMap<u64, std::time::Instant>,
    keys: HashMap<PeerId, ConnKey>,
    /// Scratch for opening and sealing.
    crypt: Vec<u8>,
    ws_out: HashMap<u64, mpsc::Sender<Vec<u8>>>,
    next_peer: u32,
    buf: Vec<u8>,
    last_housekeeping: std::time::Instant,
    said_goodbye: u64,
    /// Mints the cookies that validate UDP addresses before any state.
    validator: AddressValidator,
    /// Keys each new room's resume tokens.
    room_keys: SecretStream,
    ticket_keys: Vec<TicketKey>,
    ledger: Ledger,
    /// Answers to strangers, over all of them and per source address.
    stranger_replies: Budget,
    /// Sealed handshakes computed for proven addresses.
    handshakes: Budget,
    /// UDP connections per source IP.
    udp_by_ip: HashMap<IpAddr, usize>,
}

type IpLimiter = RateLimiter<IpAddr, DefaultKeyedStateStore<IpAddr>, DefaultClock>;

/// A rate over all addresses and one per source IP, for work done for
/// addresses that have not proven much yet.
#[derive(Debug)]
struct Budget {
    total: TokenBucket,
    per_ip: IpLimiter,
}

impl Budget {
    fn new(total: u32, per_ip: u32) -> Self {
        let per_ip = NonZeroU32::new(per_ip).unwrap_or(NonZeroU32::MIN);
        Self {
            total: TokenBucket::full(total, CoreInstant::ZERO),
            per_ip: RateLimiter::keyed(Quota::per_second(per_ip)),
        }
    }

    /// Takes one unit for `ip` at `now`, if both rates allow. Past
    /// [`TRACKED_ADDRESSES`] new addresses get nothing until housekeeping.
    fn take(&mut self, ip: IpAddr, now: CoreInstant) -> bool {
        self.per_ip.len() < TRACKED_ADDRESSES
            && self.total.take(1, now)
            && self.per_ip.check_key(&ip).is_ok()
    }

    fn tidy(&self) {
        self.per_ip.retain_recent();
        self.per_ip.shrink_to_fit();
    }
}

/// A path probe's size: a sealed Ping with a 32-bit stamp.
const PROBE_LEN: usize = secure::SEALED_OVERHEAD + wire::HEADER_LEN + 1 + 5;

/// Ended sealed connections remembered at once; past it, new sealed
/// connections wait until housekeeping forgets old ones.
const RETIRED_IDS: usize = 100_000;

/// Source addresses whose reply rate is tracked at once; beyond it, new
/// addresses get no answer until housekeeping forgets quiet ones.
const TRACKED_ADDRESSES: usize = 65_536;

/// The bytes of `addr` a cookie is bound to.
fn addr_bytes(addr: SocketAddr) -> ([u8; 18], usize) {
    let mut out = [0u8; 18];
    let n = match addr.ip() {
        IpAddr::V4(ip) => {
            out[..4].copy_from_slice(&ip.octets());
            4
        }
        IpAddr::V6(ip) => {
            out[..16].copy_from_slice(&ip.octets());
            16
        }
    };
    out[n..n + 2].copy_from_slice(&addr.port().to_le_bytes());
    (out, n + 2)
}

/// The key a per-address limit counts `ip` under: an IPv6 address by its
/// /64 (one subscriber's network), an IPv4 address whole.
fn limit_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Core {
    fn new(
        config: RelayConfig,
        metrics: Arc<Metrics>,
        udp: Option<Arc<UdpSocket>>,
    ) -> Result<Self, RelayError> {
        let start = std::time::Instant::now();
        config.validate()?;
        let ticket_keys = config.ticket_keys()?;
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(RelayError::Entropy)?;
        let validator = AddressValidator::new(key);
        getrandom::fill(&mut key).map_err(RelayError::Entropy)?;
        let room_keys = SecretStream::new(key);
        let t = &config.tickets;
        let ledger = Ledger::new(t.max_uses, t.max_lifetime_secs, t.ledger_capacity);
        let l = &config.limits;
        let stranger_replies = Budget::new(l.stranger_replies_per_sec, l.stranger_replies_per_addr);
        let handshakes = Budget::new(l.handshakes_per_sec, l.handshakes_per_addr);
        let core = Self {
            config,
            metrics,
            start,
            udp,
            rooms: HashMap::new(),
            deadlines: std::collections::BTreeSet::new(),
            conns: HashMap::new(),
            sealed: HashMap::new(),
            retired: HashMap::new(),
            keys: HashMap::new(),
            crypt: Vec::with_capacity(2048),
            ws_out: HashMap::new(),
            next_peer: 0,
            buf: Vec::with_capacity(2048),
            last_housekeeping: start,
            said_goodbye: 0,
            validator,
            room_keys,
            ticket_keys,
            ledger,
            stranger_replies,
            handshakes,
            udp_by_ip: HashMap::new(),
        };
        Ok(core)
    }

    fn now(&self) -> CoreInstant {
        CoreInstant::from_duration(self.start.elapsed())
    }

    fn next_wakeup(&self) -> tokio::time::Instant {
        let mut next = self.start.elapsed() + Duration::from_millis(250);
        if let Some((t, _)) = self.deadlines.first() {
            next = next.min(Duration::from_micros(*t));
        }
        tokio::time::Instant::from_std(self.start + next)
    }

    /// Files room `name` under its next timeout, so finding due rooms costs
    /// a lookup, not a scan of every room.
    fn schedule(&mut self, name: &str) {
        let Some(room) = self.rooms.get_mut(name) else {
            return;
        };
        let due = room.engine.poll_timeout().map(|t| t.as_micros());
        if room.scheduled == due {
            return;
        }
        if let Some(old) = room.scheduled.take() {
            self.deadlines.remove(&(old, room.name.clone()));
        }
        if let Some(t) = due {
            self.deadlines.insert((t, room.name.clone()));
        }
        room.scheduled = due;
    }

    fn datagram(&mut self, key: ConnKey, bytes: &[u8]) {
        self.metrics.datagrams_in.fetch_add(1, Ordering::Relaxed);
        self.metrics
            .bytes_in
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        if let ConnKey::Udp(addr) = key
            && secure::is_sealed(bytes)
        {
            return self.sealed_datagram(addr, bytes);
        }
        match self.conns.get(&key).cloned() {
            Some((peer, room)) => self.deliver(peer, &room, bytes),
            None => self.stranger(key, bytes),
        }
    }

    fn deliver(&mut self, peer: PeerId, room: &str, bytes: &[u8]) {
        let now = self.now();
        if let Some(r) = self.rooms.get_mut(room) {
            let started = std::time::Instant::now();
            if let Err(e) = r.engine.handle_datagram(peer, bytes, now) {
                debug!(%peer, room = %room, "datagram refused: {e}");
            }
            self.flush(room, started);
        }
    }

    /// A sealed datagram: it belongs to the connection it opens under, from
    /// wherever it came; anything that does not open is dropped unanswered.
    fn sealed_datagram(&mut self, addr: SocketAddr, bytes: &[u8]) {
        // Opened whatever its size: only an authentic datagram may cost its
        // sender the connection (the room refuses one over the limit).
        let found = secure::connection_id(bytes).and_then(|id| self.sealed.get_mut(&id));
        let Some(c) = found else {
            self.metrics.unauthenticated.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let mut buf = std::mem::take(&mut self.crypt);
        buf.clear();
        buf.extend_from_slice(bytes);
        let opened = c.channel.open(&mut buf).map(|p| p.len());
        match opened {
            Ok(len) => {
                c.confirmed = true;
                let start = secure::SEALED_HEADER_LEN;
                let plain = &buf[start..start + len];
                let probe = if c.addr == addr {
                    None
                } else {
                    Self::follow(c, addr, plain)
                };
                let (peer, room) = (c.peer, c.room.clone());
                if let Some(id) = probe {
                    self.probe_path(id, addr, bytes.len());
                }
                self.deliver(peer, &room, &buf[start..start + len]);
            }
            Err(e) => {
                debug!(%addr, "sealed datagram refused: {e}");
                self.metrics.unauthenticated.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.crypt = buf;
    }

    /// An authentic datagram from `addr`, not where `c` is: the connection
    /// moves only once `addr` has answered a probe sent there (whoever holds
    /// the keys could forge the source address and aim the room's traffic
    /// at a victim). Returns the connection to probe, if a probe is due.
    fn follow(c: &mut SealedConn, addr: SocketAddr, plain: &[u8]) -> Option<u64> {
        match c.probe {
            Some((at, stamp)) if at == addr => {
                let answered = Datagram::decode(plain, Tick::ZERO).is_ok_and(|d| {
                    d.messages
                        .iter()
                        .any(|m| matches!(m, Message::Pong { stamp: s, .. } if *s == stamp))
                });
                if answered {
                    info!(peer = %c.peer, from = %c.addr, to = %addr, "connection moved");
                    c.addr = addr;
                    c.probe = None;
                }
                None
            }
            _ => Some(c.channel.id()),
        }
    }

    /// Sends sealed connection `id` a probe (a Ping with an unguessable
    /// stamp) at `addr`, within the budget for unproven addresses and never
    /// larger than the `request_len` bytes that came from there (a
    /// keepalive is too small to answer; the next real datagram is not).
    fn probe_path(&mut self, id: u64, addr: SocketAddr, request_len: usize) {
        if request_len < PROBE_LEN {
            return;
        }
        let now = self.now();
        if !self.stranger_replies.take(limit_key(addr.ip()), now) {
            return self.ignore();
        }
        let mut stamp = [0u8; 4];
        stamp.copy_from_slice(&self.room_keys.next_secret()[..4]);
        let stamp = u32::from_le_bytes(stamp);
        let Some(c) = self.sealed.get_mut(&id) else {
            return;
        };
        c.probe = Some((addr, stamp));
        let mut plain = Vec::new();
        let mut w = DatagramWriter::new(&mut plain, Tick::ZERO, 64);
        w.put(Message::Ping { stamp });
        let len = w.finish();
        let mut sealed = Vec::with_capacity(len + secure::SEALED_OVERHEAD);
        c.channel.seal(&plain[..len], &mut sealed);
        if let Some(s) = self.udp.as_deref() {
            let _ = s.try_send_to(&sealed, addr);
        }
    }

    /// A datagram from an address with no connection: it must open one.
    ///
    /// Until a UDP address has echoed a cookie minted for it, the relay keeps
    /// nothing for it and answers at most once per datagram, never with more
    /// bytes than it received, never to an answer, and at a bounded rate.
    fn stranger(&mut self, key: ConnKey, bytes: &[u8]) {
        let n = bytes.len();
        let hello = match admission::screen_stranger(bytes, self.config.limits.max_message) {
            Ok((_, hello)) => hello,
            Err(unwelcome) => {
                if let Unwelcome::Version(_) = unwelcome {
                    self.metrics.rejects.fetch_add(1, Ordering::Relaxed);
                }
                return self.answer_unwelcome(key, n, &unwelcome);
            }
        };
        let now = self.now();
        let mut channel = None;
        if let ConnKey::Udp(addr) = key {
            let (a, len) = addr_bytes(addr);
            let proven = hello
                .cookie
                .filter(|c| self.validator.check(&a[..len], c, now));
            let Some(cookie) = proven else {
                // The budget first: the challenge's key costs an X25519.
                if !self.may_answer(key) {
                    return self.ignore();
                }
                let cookie = self.validator.cookie(&a[..len], now);
                let server_key = hello.key.and_then(|k| {
                    self.metrics.handshakes.fetch_add(1, Ordering::Relaxed);
                    self.validator.handshake(&cookie, &k).ok()
                });
                let server_key = server_key.map(|(public, _)| public);
                self.metrics.challenges.fetch_add(1, Ordering::Relaxed);
                let challenge = Message::Challenge {
                    cookie: &cookie,
                    key: server_key,
                };
                return self.answer_now(key, n, &challenge);
            };
            if hello.key.is_some() {
                if !self.handshakes.take(limit_key(addr.ip()), now) {
                    return self.ignore();
                }
                self.metrics.handshakes.fetch_add(1, Ordering::Relaxed);
            }
            match hello.key.map(|k| self.validator.handshake(cookie, &k)) {
                Some(Ok((_, c))) => {
                    // The client resends its Hello until the Welcome comes:
                    // the same cookie and key name the same connection. The
                    // plain datagram itself never reaches the room (anyone
                    // who saw it could add messages): the Welcome is sent
                    // again, sealed, until the client has sealed anything.
                    if let Some(open) = self.sealed.get(&c.id()) {
                        let (peer, room, confirmed) =
                            (open.peer, open.room.clone(), open.confirmed);
                        if confirmed || !self.may_answer(key) {
                            return self.ignore();
                        }
                        if let Some(r) = self.rooms.get_mut(&room) {
                            r.engine.resend_welcome(peer);
                        }
                        return self.flush(&room, std::time::Instant::now());
                    }
                    if self.retired.contains_key(&c.id()) || self.retired.len() >= RETIRED_IDS {
                        return self.ignore();
                    }
                    let ip = limit_key(addr.ip());
                    if self.udp_by_ip.get(&ip).copied().unwrap_or(0)
                        >= self.config.limits.max_udp_per_addr
                    {
                        return self.reply_reject(
                            key,
                            RejectReason::Other("too many connections from your address"),
                        );
                    }
                    channel = Some(c);
                }
                Some(Err(_)) => return self.ignore(),
                None if !self.config.plain_udp => {
                    return self.reply_reject(
                        key,
                        RejectReason::Other(
                            "this relay takes sealed datagrams only: give the client a secret",
                        ),
                    );
                }
                None => {}
            }
        }
        if matches!(key, ConnKey::Ws(_)) && (hello.cookie.is_some() || hello.key.is_some()) {
            // A resume proof is bound to a cookie and key: over a transport
            // that checks neither, someone else's would pass.
            return self.reply_reject(
                key,
                RejectReason::Other("cookies and keys are for UDP; leave them out over WebSocket"),
            );
        }
        // The address is proven (UDP) or came through a TCP handshake
        // (WebSocket): from here on the relay may keep state for it.
        let existing: Option<RoomName> = self.rooms.get(hello.room).map(|r| r.name.clone());
        // A ticket checked for the connection being opened, spent if it opens.
        let mut to_spend: Option<Verified> = None;
        // A seat taken back with its resume token needs no ticket: the
        // token is the credential (the ticket may have expired meanwhile).
        let resuming = existing
            .as_ref()
            .and_then(|r| self.rooms.get(r))
            .is_some_and(|r| r.engine.would_resume(&hello, now));
        if !self.ticket_keys.is_empty() && !resuming {
            let role = if hello.spectator {
                Role::Spectator
            } else {
                Role::Player
            };
            let unix = unix_now();
            let checked = ticket::verify(
                &self.ticket_keys,
                hello.ticket,
                hello.room,
                hello.name,
                role,
                unix,
            )
            .and_then(|t| {
                self.ledger.check(&t, unix)?;
                Ok(t)
            });
            match checked {
                Ok(t) => to_spend = Some(t),
                Err(e) => {
                    info!(?key, room = %hello.room, name = %hello.name, "ticket refused: {e}");
                    self.metrics.bad_tickets.fetch_add(1, Ordering::Relaxed);
                    return self.reply_reject(key, RejectReason::BadTicket);
                }
            }
        }
        if self.conns.len() + self.sealed.len() >= self.config.limits.max_connections {
            return self.reply_reject(key, RejectReason::ServerFull);
        }
        let room: RoomName = existing.unwrap_or_else(|| hello.room.into());
        if !self.rooms.contains_key(&room) {
            // Rooms, declared ones too, open with their first client, in the
            // input codec it speaks, and close when empty.
            let declared = self.config.rooms.iter().any(|r| *r.name == *room);
            if !declared && !self.config.on_demand() {
                return self.reply_reject(key, RejectReason::NoSuchRoom);
            }
            if self.rooms.len() >= self.config.limits.max_rooms {
                return self.reply_reject(key, RejectReason::ServerFull);
            }
            let mut secret = [0u8; 32];
            secret[..16].copy_from_slice(&self.room_keys.next_secret());
            secret[16..].copy_from_slice(&self.room_keys.next_secret());
            let seq = self.config.sequencer(&room, hello.codec, secret);
            match Engine::new(seq, now, self.config.game.as_ref()) {
                Ok(engine) => {
                    info!(room = %room, "room created");
                    let r = Room::new(room.clone(), engine);
                    self.rooms.insert(room.clone(), r);
                }
                Err(e) => {
                    warn!(room = %room, "room refused its configuration: {e}");
                    return self.reply_reject(key, RejectReason::Other("room misconfigured"));
                }
            }
        }
        let peer = self.allocate_peer();
        let Some(r) = self.rooms.get_mut(&room) else {
            return;
        };
        let started = std::time::Instant::now();
        let _ = r.engine.handle_datagram(peer, bytes, now);
        let connected = r.engine.is_connected(peer);
        // Mapped even if refused: the refusal goes out through the mapping.
        let conn_key = match (channel, key) {
            (Some(channel), ConnKey::Udp(addr)) => {
                let id = channel.id();
                let room = room.clone();
                self.sealed.insert(
                    id,
                    SealedConn {
                        channel,
                        addr,
                        peer,
                        room,
                        confirmed: false,
                        probe: None,
                        counted: limit_key(addr.ip()),
                    },
                );
                ConnKey::Sealed(id)
            }
            _ => key,
        };
        self.keys.insert(peer, conn_key);
        if let ConnKey::Udp(addr) = key {
            *self.udp_by_ip.entry(limit_key(addr.ip())).or_default() += 1;
        }
        if connected {
            if !matches!(conn_key, ConnKey::Sealed(_)) {
                self.conns.insert(key, (peer, room.clone()));
            }
            if let Some(t) = to_spend {
                self.ledger.spend(&t);
            }
        }
        self.flush(&room, started);
        if !connected {
            self.forget(peer);
        }
    }

    fn ignore(&self) {
        self.metrics
            .strangers_ignored
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Answers a stranger's datagram of `request_len` bytes as `why` says
    /// (if at all), if the reply rates allow; over UDP, where the source
    /// may be forged, never with more bytes than came.
    fn answer_unwelcome(&mut self, key: ConnKey, request_len: usize, why: &Unwelcome) {
        if matches!(why, Unwelcome::NotOurs | Unwelcome::AnAnswer) || !self.may_answer(key) {
            return self.ignore();
        }
        let mut buf = Vec::new();
        match why.answer(Tick::ZERO, self.answer_budget(key, request_len), &mut buf) {
            Some(len) => self.send_answer(key, &buf[..len]),
            None => self.ignore(),
        }
    }

    /// Whether a stranger at `key` may be answered now (takes the budget).
    fn may_answer(&mut self, key: ConnKey) -> bool {
        let now = self.now();
        match key {
            ConnKey::Udp(addr) => self.stranger_replies.take(limit_key(addr.ip()), now),
            ConnKey::Ws(_) | ConnKey::Sealed(_) => true,
        }
    }

    /// The most bytes a stranger at `key` may be answered with, after a
    /// datagram of `request_len`.
    fn answer_budget(&self, key: ConnKey, request_len: usize) -> usize {
        match key {
            ConnKey::Udp(_) => request_len.min(self.config.limits.max_message),
            ConnKey::Ws(_) | ConnKey::Sealed(_) => self.config.limits.max_message,
        }
    }

    /// Answers a stranger with `m` once the budget was taken.
    fn answer_now(&mut self, key: ConnKey, request_len: usize, m: &Message<'_>) {
        let mut buf = Vec::new();
        let budget = self.answer_budget(key, request_len);
        match admission::write_answer(m, Tick::ZERO, budget, &mut buf) {
            Some(len) => self.send_answer(key, &buf[..len]),
            None => self.ignore(),
        }
    }

    /// Sends a stranger its answer; a WebSocket that opened with garbage
    /// is closed after it.
    fn send_answer(&mut self, key: ConnKey, bytes: &[u8]) {
        self.send(key, bytes);
        if let ConnKey::Ws(id) = key {
            self.ws_out.remove(&id);
        }
    }

    fn allocate_peer(&mut self) -> PeerId {
        loop {
            let p = PeerId(self.next_peer);
            self.next_peer = self.next_peer.wrapping_add(1);
            if p != HOST_PEER && !self.keys.contains_key(&p) {
                return p;
            }
        }
    }

    /// Refuses a proven address (UDP) or a WebSocket.
    fn reply_reject(&mut self, key: ConnKey, reason: RejectReason<'_>) {
        self.metrics.rejects.fetch_add(1, Ordering::Relaxed);
        let mut buf = Vec::new();
        let mut w = DatagramWriter::new(&mut buf, Tick::ZERO, self.config.limits.max_message);
        w.put(Message::Reject(reason));
        let len = w.finish();
        self.send(key, &buf[..len]);
        if let ConnKey::Ws(id) = key {
            self.ws_out.remove(&id);
        }
    }

    fn send(&mut self, key: ConnKey, bytes: &[u8]) {
        Outbox {
            udp: self.udp.as_deref(),
            ws_out: &self.ws_out,
            sealed: &mut self.sealed,
            scratch: &mut self.crypt,
            metrics: &self.metrics,
        }
        .send(key, bytes);
    }

    /// Sends everything room `name` has to send and acts on its events.
    /// `started` is when the call that may have sealed a tick began: the
    /// seal-to-last-send latency is measured from there.
    fn flush(&mut self, name: &str, started: std::time::Instant) {
        let Self {
            rooms,
            keys,
            udp,
            ws_out,
            sealed,
            crypt,
            metrics,
            buf,
            ..
        } = self;
        let Some(room) = rooms.get_mut(name) else {
            return;
        };
        // A failover room names every UDP connection's address in its
        // roster (where the others reach it if the relay goes), as it
        // changes.
        if room.engine.shares_roster() {
            let peers = room.engine.connections();
            room.contacts.retain(|p, _| peers.contains(p));
            for peer in peers {
                let addr = match keys.get(&peer) {
                    Some(ConnKey::Udp(a)) => Some(*a),
                    Some(ConnKey::Sealed(id)) => sealed.get(id).map(|c| c.addr),
                    _ => None,
                };
                if let Some(a) = addr
                    && room.contacts.get(&peer) != Some(&a)
                {
                    room.contacts.insert(peer, a);
                    room.engine.set_contact(peer, a.to_string().as_bytes());
                }
            }
        }
        let mut out = Outbox {
            udp: udp.as_deref(),
            ws_out,
            sealed,
            scratch: crypt,
            metrics,
        };
        while let Some(t) = room.engine.poll_transmit(buf) {
            if let Some(key) = keys.get(&t.destination) {
                out.send(*key, &buf[..t.len]);
            }
        }
        let mut closed = Vec::new();
        let mut resumed = Vec::new();
        while let Some(ev) = room.engine.poll_event() {
            match ev {
                SequencerEvent::Joined {
                    peer,
                    seat,
                    tick,
                    name: who,
                } => {
                    info!(room = %name, %peer, ?seat, %tick, who = %who, "joined");
                }
                SequencerEvent::Resumed {
                    peer,
                    previous,
                    seat,
                } => {
                    info!(room = %name, %peer, ?previous, ?seat, "resumed");
                    resumed.extend(previous);
                }
                SequencerEvent::Rejected { peer, reason } => {
                    info!(room = %name, %peer, "refused: {reason}");
                    metrics.rejects.fetch_add(1, Ordering::Relaxed);
                }
                SequencerEvent::Closed {
                    peer,
                    seat,
                    tick,
                    reason,
                } => {
                    match &reason {
                        DropReason::Violation(code, text) => {
                            warn!(room = %name, %peer, ?code, "dropped: {text}");
                            metrics.violations.fetch_add(1, Ordering::Relaxed);
                        }
                        other => info!(room = %name, %peer, ?seat, %tick, "left: {other:?}"),
                    }
                    closed.push(peer);
                }
                SequencerEvent::SeatReleased { seat, tick } => {
                    info!(room = %name, %seat, %tick, "seat given up: its player did not come back");
                }
                SequencerEvent::ChecksumSplit { tick, hashes } => {
                    warn!(room = %name, %tick, hashes, "checksums split with no majority");
                    metrics.desyncs.fetch_add(1, Ordering::Relaxed);
                }
                SequencerEvent::Desync {
                    tick,
                    peer,
                    expected,
                    got,
                } => {
                    warn!(room = %name, %peer, %tick, "desync: expected {expected:016x}, got {got:016x}");
                    metrics.desyncs.fetch_add(1, Ordering::Relaxed);
                }
                _ => {}
            }
        }
        let (sealed, stalls) = room.engine.counters();
        metrics
            .ticks
            .fetch_add(sealed - room.sealed, Ordering::Relaxed);
        metrics
            .stalls
            .fetch_add(stalls - room.stalls, Ordering::Relaxed);
        if sealed > room.sealed {
            let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
            metrics.observe_latency(us);
        }
        room.sealed = sealed;
        room.stalls = stalls;
        // A seat taken back: its old address is nobody's now.
        for previous in resumed {
            self.forget(previous);
        }
        // Forget connections whose goodbye or error has gone out.
        for peer in closed {
            let connected = self
                .rooms
                .get(name)
                .is_some_and(|r| r.engine.is_connected(peer));
            if !connected {
                self.forget(peer);
            }
        }
        self.schedule(name);
    }

    fn forget(&mut self, peer: PeerId) {
        let ip = match self.keys.remove(&peer) {
            Some(ConnKey::Sealed(id)) => {
                self.retired.insert(id, std::time::Instant::now());
                self.sealed.remove(&id).map(|c| c.counted)
            }
            Some(key) => {
                self.conns.remove(&key);
                match key {
                    ConnKey::Ws(id) => {
                        self.ws_out.remove(&id);
                        None
                    }
                    ConnKey::Udp(addr) => Some(limit_key(addr.ip())),
                    ConnKey::Sealed(_) => None,
                }
            }
            None => None,
        };
        // Uncounted where it was counted: where the connection was made.
        if let Some(ip) = ip
            && let Some(n) = self.udp_by_ip.get_mut(&ip)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.udp_by_ip.remove(&ip);
            }
        }
    }

    /// A WebSocket closed: its seat is freed at once.
    fn ws_closed(&mut self, id: u64) {
        self.ws_out.remove(&id);
        if let Some((peer, room)) = self.conns.get(&ConnKey::Ws(id)).cloned() {
            if let Some(r) = self.rooms.get_mut(&room) {
                r.engine.disconnect(peer);
            }
            self.flush(&room, std::time::Instant::now());
            self.forget(peer);
        }
    }

    fn timers(&mut self) {
        let now = self.now();
        if let Some((due, _)) = self.deadlines.first() {
            let late = now.as_micros().saturating_sub(*due);
            self.metrics.loop_lag_us.store(late, Ordering::Relaxed);
        }
        while self
            .deadlines
            .first()
            .is_some_and(|(t, _)| *t <= now.as_micros())
        {
            let Some((_, name)) = self.deadlines.pop_first() else {
                break;
            };
            let started = std::time::Instant::now();
            if let Some(r) = self.rooms.get_mut(&name) {
                r.scheduled = None;
                r.engine.handle_timeout(now);
            }
            self.flush(&name, started);
        }
        if self.last_housekeeping.elapsed() >= Duration::from_secs(1) {
            self.housekeeping();
        }
    }

    fn housekeeping(&mut self) {
        self.last_housekeeping = std::time::Instant::now();
        self.ledger.forget_expired(unix_now());
        // A retired id's cookie has expired: its Hello cannot come back.
        let cookie_life = admission::COOKIE_LIFETIME + Duration::from_secs(2);
        self.retired.retain(|_, at| at.elapsed() < cookie_life);
        self.stranger_replies.tidy();
        self.handshakes.tidy();
        // Connections whose room closed them without an event reaching us.
        let plain = self.conns.values().map(|(p, room)| (*p, room));
        let sealed = self.sealed.values().map(|c| (c.peer, &c.room));
        let stale: Vec<PeerId> = plain
            .chain(sealed)
            .filter(|(p, room)| {
                !self
                    .rooms
                    .get(*room)
                    .is_some_and(|r| r.engine.is_connected(*p))
            })
            .map(|(p, _)| p)
            .collect();
        for p in stale {
            self.forget(p);
        }
        let idle = Duration::from_secs(self.config.limits.idle_room_secs);
        let (mut players, mut spectators, mut delay_max) = (0, 0, 0);
        let mut remove = Vec::new();
        for (name, r) in &mut self.rooms {
            let st = r.engine.stats();
            players += st.players as u64;
            spectators += st.spectators as u64;
            if st.players > 0 {
                delay_max = delay_max.max(u64::from(st.delay));
            }
            let now = (
                st.delay_changes,
                st.datagrams_lost_in,
                st.datagrams_lost_out,
            );
            let was = std::mem::replace(&mut r.reported, now);
            let m = &self.metrics;
            m.delay_changes
                .fetch_add(now.0.saturating_sub(was.0), Ordering::Relaxed);
            m.lost_in
                .fetch_add(now.1.saturating_sub(was.1), Ordering::Relaxed);
            m.lost_out
                .fetch_add(now.2.saturating_sub(was.2), Ordering::Relaxed);
            if r.engine.is_empty() {
                let since = *r.empty_since.get_or_insert(self.last_housekeeping);
                // An empty room goes after a while; at once if it could no
                // longer take a joiner. A declared one opens afresh with its
                // next client.
                if since.elapsed() >= idle || !r.engine.replayable() {
                    remove.push(name.clone());
                }
            } else {
                r.empty_since = None;
            }
        }
        for name in remove {
            info!(room = %name, "empty room closed");
            if let Some(r) = self.rooms.remove(&name)
                && let Some(t) = r.scheduled
            {
                self.deadlines.remove(&(t, name));
            }
        }
        self.metrics
            .rooms
            .store(self.rooms.len() as u64, Ordering::Relaxed);
        self.metrics.players.store(players, Ordering::Relaxed);
        self.metrics.spectators.store(spectators, Ordering::Relaxed);
        self.metrics.delay_max.store(delay_max, Ordering::Relaxed);
    }

    fn shutdown(&mut self, goodbye: bool) -> RelayReport {
        let names: Vec<RoomName> = self.rooms.keys().cloned().collect();
        for name in names.iter().filter(|_| goodbye) {
            if let Some(r) = self.rooms.get_mut(name) {
                let before = r.engine.stats();
                self.said_goodbye += (before.players + before.spectators) as u64;
                r.engine.shutdown("the server is shutting down");
            }
            self.flush(name, std::time::Instant::now());
        }
        RelayReport {
            ticks: self.metrics.ticks.load(Ordering::Relaxed),
            datagrams_in: self.metrics.datagrams_in.load(Ordering::Relaxed),
            datagrams_out: self.metrics.datagrams_out.load(Ordering::Relaxed),
            rejects: self.metrics.rejects.load(Ordering::Relaxed),
            violations: self.metrics.violations.load(Ordering::Relaxed),
            said_goodbye: self.said_goodbye,
        }
    }
}

static NEXT_WS: AtomicU64 = AtomicU64::new(1);

/// What one WebSocket connection may do before it is closed.
#[derive(Debug, Clone, Copy)]
struct WsLimits {
    total: usize,
    per_addr: usize,
    hello_timeout: Duration,
}

impl From<&crate::config::Limits> for WsLimits {
    fn from(l: &crate::config::Limits) -> Self {
        Self {
            total: l.max_ws_connections,
            per_addr: l.max_ws_per_addr,
            hello_timeout: Duration::from_secs(l.ws_hello_timeout_secs.max(1)),
        }
    }
}

/// Control frames (pings, pongs) a WebSocket connection may send in a
/// burst, refilled at one a second.
const WS_CONTROL_BURST: u32 = 10;

async fn accept_ws(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    core: mpsc::Sender<CoreMsg>,
    limits: WsLimits,
    metrics: Arc<Metrics>,
) {
    let mut conns = JoinSet::new();
    let mut by_addr: HashMap<IpAddr, usize> = HashMap::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, addr)) => {
                    let ip = limit_key(addr.ip());
                    let from_ip = by_addr.get(&ip).copied().unwrap_or(0);
                    if conns.len() >= limits.total || from_ip >= limits.per_addr {
                        // Closed before the WebSocket handshake: it costs us a
                        // TCP accept and nothing more.
                        debug!(%addr, "websocket connection refused: limit");
                        metrics.ws_refused.fetch_add(1, Ordering::Relaxed);
                        drop(stream);
                        continue;
                    }
                    *by_addr.entry(ip).or_default() += 1;
                    metrics.ws_connections.store(conns.len() as u64 + 1, Ordering::Relaxed);
                    let id = NEXT_WS.fetch_add(1, Ordering::Relaxed);
                    debug!(%addr, id, "websocket connection");
                    let (core, metrics) = (core.clone(), metrics.clone());
                    let _ = stream.set_nodelay(true);
                    let tls = tls.clone();
                    conns.spawn(async move {
                        match tls {
                            // The TLS handshake within the WebSocket one's time.
                            Some(acceptor) => match tokio::time::timeout(
                                Duration::from_secs(5),
                                acceptor.accept(stream),
                            )
                            .await
                            {
                                Ok(Ok(s)) => ws_conn(s, id, core, limits, metrics).await,
                                _ => debug!(id, "TLS handshake failed or timed out"),
                            },
                            None => ws_conn(stream, id, core, limits, metrics).await,
                        }
                        ip
                    });
                }
                Err(e) => {
                    warn!("websocket accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(done) = conns.join_next(), if !conns.is_empty() => {
                if let Ok(ip) = done
                    && let Some(n) = by_addr.get_mut(&ip)
                {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        by_addr.remove(&ip);
                    }
                }
                metrics.ws_connections.store(conns.len() as u64, Ordering::Relaxed);
            }
        }
    }
}

async fn ws_conn<S>(
    stream: S,
    id: u64,
    core: mpsc::Sender<CoreMsg>,
    limits: WsLimits,
    metrics: Arc<Metrics>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let config = WebSocketConfig::default()
        .max_message_size(Some(WS_MAX_MESSAGE))
        .max_frame_size(Some(WS_MAX_MESSAGE));
    let ws = match tokio::time::timeout(
        Duration::from_secs(5),
        tokio_tungstenite::accept_async_with_config(stream, Some(config)),
    )
    .await
    {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => return debug!(id, "websocket handshake failed: {e}"),
        Err(_) => return debug!(id, "websocket handshake timed out"),
    };
    let (mut sink, mut source) = ws.split();
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(WS_QUEUE);
    if core.send(CoreMsg::WsOpen { id, tx }).await.is_err() {
        return;
    }
    let writer = async {
        while let Some(bytes) = rx.recv().await {
            if sink.send(WsMessage::Binary(bytes.into())).await.is_err() {
                return;
            }
        }
        let _ = sink.close().await;
    };
    let reader = async {
        let started = tokio::time::Instant::now();
        let mut control = TokenBucket::full(WS_CONTROL_BURST, CoreInstant::ZERO);
        let mut said_anything = false;
        loop {
            // The first message must come soon: an idle socket holds a slot.
            let next = if said_anything {
                source.next().await
            } else {
                match tokio::time::timeout_at(started + limits.hello_timeout, source.next()).await {
                    Ok(m) => m,
                    Err(_) => {
                        debug!(id, "websocket sent nothing in time");
                        metrics.ws_refused.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                }
            };
            let Some(Ok(msg)) = next else {
                return;
            };
            let now = CoreInstant::from_duration(started.elapsed());
            match msg {
                WsMessage::Binary(b) => {
                    said_anything = true;
                    let bytes = b.to_vec();
                    if core.send(CoreMsg::Datagram { id, bytes }).await.is_err() {
                        return;
                    }
                }
                WsMessage::Ping(_) | WsMessage::Pong(_) if control.take(1, now) => {}
                WsMessage::Close(_) => return,
                // Text is not our protocol; control frames past their rate
                // are a flood.
                _ => {
                    debug!(id, "websocket closed: text or too many control frames");
                    metrics.ws_refused.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        }
    };
    tokio::select! {
        () = writer => {}
        () = reader => {}
    }
    let _ = core.send(CoreMsg::WsClosed { id }).await;
}

async fn serve_http(listener: TcpListener, metrics: Arc<Metrics>, max_lag: Duration) {
    let started = std::time::Instant::now();
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut req = Vec::with_capacity(512);
            let mut chunk = [0u8; 512];
            let read = tokio::time::timeout(Duration::from_secs(5), async {
                while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 8192 {
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => req.extend_from_slice(&chunk[..n]),
                    }
                }
            })
            .await;
            if read.is_err() {
                return;
            }
            let line = req.split(|b| *b == b'\r').next().unwrap_or_default();
            let (status, kind, body) = match line {
                l if l.starts_with(b"GET /metrics ") => {
                    ("200 OK", "text/plain; version=0.0.4", metrics.render())
                }
                l if l.starts_with(b"GET /healthz ") => health(&metrics, started, max_lag),
                _ => ("404 Not Found", "text/plain", "not found\n".to_owned()),
            };
            let head = format!(
                "HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(body.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

/// `/healthz`: healthy while the main loop keeps up with its timers and
/// has passed recently; the body says how late it is either way.
fn health(
    metrics: &Metrics,
    started: std::time::Instant,
    max_lag: Duration,
) -> (&'static str, &'static str, String) {
    // The HTTP task's clock started a moment after the core's: that moment
    // only makes the check stricter.
    let since_pass =
        millis(started.elapsed()).saturating_sub(metrics.loop_at_ms.load(Ordering::Relaxed));
    let timer_lag = metrics.loop_lag_us.load(Ordering::Relaxed) / 1000;
    let lag = since_pass.max(timer_lag);
    if lag > millis(max_lag) {
        let body = format!("lagging: the main loop is {lag} ms behind\n");
        ("503 Service Unavailable", "text/plain", body)
    } else {
        ("200 OK", "text/plain", format!("ok: {lag} ms behind\n"))
    }
}
