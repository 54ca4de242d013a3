//! The server loop.

use crate::config::{RelayConfig, RelayConfigError};
use crate::metrics::Metrics;
use crate::room::{Engine, Room, RoomName};
use crate::ticket::{self, Ledger, Role, TicketKey, Verified};
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
use tracing::{debug, info, warn};

mod admit;
mod fleet;
mod http;
mod rooms;
mod sealed;
mod timer;
mod ws;

use admit::{Budget, limit_key, unix_now};
use sealed::SealedConn;
use ws::{WsLimits, accept_ws};

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
    /// The recording directory cannot be made, or its thread started.
    #[error("recording: {0}")]
    Record(std::io::Error),
    /// The relay's place in a fleet cannot be used (a bad relay id).
    #[error("fleet: {0}")]
    Fleet(String),
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
    serve(config, listeners, metrics, None, async {
        shutdown.await;
        true
    })
    .await
}

/// [`run_with_metrics`] for a relay in a fleet: it keeps its entry in the
/// fleet's room directory and claims each room there before opening it
/// (see [`Fleet`](crate::fleet::Fleet)).
pub async fn run_in_fleet<D: crate::directory::Directory>(
    config: RelayConfig,
    listeners: Listeners,
    metrics: Arc<Metrics>,
    fleet: crate::fleet::Fleet<D>,
    shutdown: impl Future<Output = ()>,
) -> Result<RelayReport, RelayError> {
    fleet.check()?;
    let mut fleet = fleet;
    fleet.reachable_at(
        listeners.udp.as_ref().and_then(|s| s.local_addr().ok()),
        listeners.ws.as_ref().and_then(|s| s.local_addr().ok()),
    )?;
    serve(config, listeners, metrics, Some(fleet.task()), async {
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
    fleet: Option<crate::fleet::FleetTask>,
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
        let limits = http::Limits {
            max_lag: Duration::from_millis(config.limits.max_loop_lag_ms),
            max_connections: config.limits.max_connections,
            max_rooms: config.limits.max_rooms,
        };
        tasks.spawn(http::serve(listener, metrics.clone(), limits));
    }
    drop(core_tx);
    let udp = listeners.udp.map(Arc::new);
    let mut core = Core::new(config, metrics, udp.clone())?;
    // The fleet task, if the relay is in a fleet: every directory call is
    // its, so the loop never waits on the directory.
    let (news_tx, mut news_rx) = mpsc::channel::<crate::fleet::FleetNews>(256);
    let mut fleet_task = None;
    if let Some(task) = fleet {
        // Unbounded, but the loop keeps at most MAX_CLAIMS claims
        // waiting, and releases are one per room that closes.
        let (ops_tx, ops_rx) = mpsc::unbounded_channel();
        fleet_task = Some(tokio::spawn(task(
            ops_rx,
            news_tx.clone(),
            core.metrics.clone(),
        )));
        core.fleet = Some(fleet::FleetLink::new(ops_tx));
    }
    drop(news_tx);
    let mut fleet_open = fleet_task.is_some();
    let drain_for = Duration::from_secs(core.config.drain_secs);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut buf = vec![0u8; 65_536];
    // Without a WebSocket listener nothing ever sends on `core_rx`: once it
    // reports closed it is never polled again (it would answer `None` at
    // once, every time, and the loop would spin a core).
    let mut ws_open = true;
    let goodbye;
    let timer = timer::Timer::start();
    loop {
        let wake = core.next_wakeup();
        if let Some(t) = &timer {
            t.set(wake.into_std());
        }
        core.metrics
            .loop_at_ms
            .store(millis(core.start.elapsed()), Ordering::Relaxed);
        // Not biased: under a flood of UDP, timers, WebSocket traffic and
        // shutdown still get their turn.
        tokio::select! {
            g = &mut shutdown, if core.draining.is_none() => {
                if g && !drain_for.is_zero() && !core.rooms.is_empty() {
                    core.begin_drain(drain_for);
                    continue;
                }
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
            news = news_rx.recv(), if fleet_open => match news {
                Some(n) => core.fleet_news(n),
                None => fleet_open = false,
            },
            () = wait(timer.as_ref(), wake) => {}
        }
        core.timers();
        if let Some(deadline) = core.draining {
            if core.rooms.is_empty() {
                info!("drained: the last room closed");
                goodbye = true;
                break;
            }
            if std::time::Instant::now() >= deadline {
                info!(rooms = core.rooms.len(), "drain deadline: stopping");
                goodbye = true;
                break;
            }
        }
    }
    let report = core.shutdown(goodbye);
    // In a fleet: a relay that stops cleanly gives its rooms and its entry
    // up at once; one that stops dead leaves them to lapse, as a crash does.
    core.fleet = None;
    if let Some(task) = fleet_task {
        if goodbye {
            let _ = tokio::time::timeout(Duration::from_secs(2), task).await;
        } else {
            task.abort();
        }
    }
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
    /// The recording thread, if matches are recorded.
    disk: Option<crate::record::Disk>,
    /// The fleet, if the relay is in one.
    fleet: Option<fleet::FleetLink>,
    /// While draining for a shutdown: when it stops at the latest.
    draining: Option<std::time::Instant>,
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
        let disk = crate::record::Disk::start(&config.record).map_err(RelayError::Record)?;
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
            disk,
            fleet: None,
            draining: None,
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
}

/// Until `wake`: on the fine timer when there is one (see [`timer`]), else
/// on the runtime's.
async fn wait(timer: Option<&timer::Timer>, wake: tokio::time::Instant) {
    match timer {
        Some(t) => t.wait().await,
        None => tokio::time::sleep_until(wake).await,
    }
}
