//! `lockstep relay`.

use clap::{Args, ValueEnum};
use lockstep_relay::{Listeners, PolicyName, RelayConfig, StartName};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use tracing_subscriber::EnvFilter;

/// Where the relay listens and how its rooms run. Flags override the file.
#[derive(Debug, Args)]
pub(crate) struct RelayArgs {
    /// UDP address for clients ("off" to disable).
    #[arg(long, env = "LOCKSTEP_UDP", default_value = "127.0.0.1:7777")]
    udp: String,
    /// WebSocket address for clients ("off" to disable).
    #[arg(long, env = "LOCKSTEP_WS", default_value = "127.0.0.1:7778")]
    ws: String,
    /// HTTP address for /metrics and /healthz ("off" to disable).
    #[arg(long, env = "LOCKSTEP_HTTP", default_value = "127.0.0.1:9100")]
    http: String,
    /// A TOML configuration file (limits, tickets, room defaults, rooms).
    #[arg(long, env = "LOCKSTEP_CONFIG")]
    config: Option<PathBuf>,
    /// Require join tickets signed with this secret.
    #[arg(long, env = "LOCKSTEP_TICKET_SECRET", hide_env_values = true)]
    ticket_secret: Option<String>,
    /// Default tick rate of rooms (Hz, 1 to 1000).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1000))]
    tick_rate: Option<u32>,
    /// Default input delay of rooms (ticks, 0 to 1024): where a
    /// wait-for-all room's delay starts; it then follows the network within
    /// `min_delay..=max_delay` (1 to 16) unless the config file's
    /// `adaptive_delay = false`.
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=1024))]
    delay: Option<u32>,
    /// Default sealing policy of rooms.
    #[arg(long, value_enum)]
    policy: Option<Policy>,
    /// Default seats per room (1 to 256).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
    max_seats: Option<u16>,
    /// When a room's match starts: with its first player, once
    /// `--start-players` seats are taken, or once at least that many are
    /// seated and all are ready (or 60 s after that many are ready,
    /// without the rest: `ready_wait_secs` in the config file; with
    /// exactly that many seated, every one must say ready). Any but
    /// at-once opens a lobby: players see each other by name and nothing
    /// runs until the match starts.
    #[arg(long, value_enum)]
    start: Option<StartRule>,
    /// The count `--start` names (1 to the seats).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
    start_players: Option<u16>,
    /// Most rooms at once.
    #[arg(long)]
    max_rooms: Option<usize>,
    /// Also take UDP clients that do not seal their datagrams (a LAN or a
    /// test; anyone can forge such a client's address).
    #[arg(long)]
    plain_udp: bool,
    /// Serve WebSocket over TLS (wss://) with this certificate chain (PEM).
    #[arg(long, requires = "ws_key", env = "LOCKSTEP_WS_CERT")]
    ws_cert: Option<PathBuf>,
    /// The private key (PEM) for --ws-cert.
    #[arg(long, requires = "ws_cert", env = "LOCKSTEP_WS_KEY")]
    ws_key: Option<PathBuf>,
    /// How a player joins a room's game under way: from a snapshot of the
    /// game's state (every client must hand one over when asked, as
    /// `lockstep play` does) or by replaying it from its first tick (only
    /// while the relay still holds it all). Without a configuration file,
    /// snapshot.
    #[arg(long, value_enum)]
    join: Option<JoinMode>,
    /// Run the game in every room too: the relay then hands joiners its
    /// own state and is the checksum authority. Only swarm, the demo game.
    #[arg(long, value_enum)]
    game: Option<ServerGame>,
    /// The game seed for --game (players must use the same).
    #[arg(long, default_value_t = 1, requires = "game")]
    seed: u64,
    /// Spectators watch this many seconds behind the match (against a
    /// spectator telling a player what the others do now).
    #[arg(long, value_name = "SECS")]
    spectator_delay: Option<u32>,
    /// Record every match into this directory, one replay file each
    /// (ROOM-MATCHID.lkrp): `lockstep replay verify FILE` checks one.
    #[arg(long, value_name = "DIR")]
    record: Option<PathBuf>,
    /// Finish a recording at this many MiB (the match plays on
    /// unrecorded). 256 without a configuration file.
    #[arg(long, value_name = "MIB", requires = "record")]
    record_max_mib: Option<u64>,
    /// On SIGTERM or Ctrl-C, drain for at most this many seconds first:
    /// no new rooms, /readyz fails, running matches end, and the relay
    /// exits once the last room closes (0: exit at once).
    #[arg(long, value_name = "SECS")]
    drain_secs: Option<u64>,
    /// Join a fleet: keep this relay's entry, and claim each room before
    /// opening it, in the room directory at this Redis URL
    /// (redis://host:port/db).
    #[arg(
        long,
        env = "LOCKSTEP_DIRECTORY",
        value_name = "URL",
        requires = "relay_id"
    )]
    directory: Option<String>,
    /// This relay's id in the fleet (1 to 64 of A-Z a-z 0-9 - _ .).
    #[arg(
        long,
        env = "LOCKSTEP_RELAY_ID",
        requires = "directory",
        value_parser = crate::ticket::relay_id
    )]
    relay_id: Option<String>,
    /// The UDP address clients reach this relay at, as the fleet tells
    /// them (the bound one if not given).
    #[arg(long, value_name = "HOST:PORT", requires = "directory")]
    public_udp: Option<SocketAddr>,
    /// The WebSocket address clients reach this relay at (the bound one
    /// if not given).
    #[arg(long, value_name = "HOST:PORT", requires = "directory")]
    public_ws: Option<SocketAddr>,
    /// The keys' prefix in the directory (fleets sharing one Redis each
    /// take their own).
    #[arg(long, default_value = "lockstep:", requires = "directory")]
    directory_prefix: String,
    /// How long this relay's entry and room claims outlive it, in
    /// seconds, unless renewed (a killed relay's rooms stay claimed this
    /// long).
    #[arg(long, value_name = "SECS", default_value_t = lockstep_relay::fleet::LEASE.as_secs(), value_parser = clap::value_parser!(u64).range(1..=300), requires = "directory")]
    lease: u64,
    /// Run this many relays in this process, one per core, each on its own
    /// thread (ids ID-0, ID-1, ...; each port given one higher than the
    /// last relay's, port 0 picking its own), behind the one directory.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256), requires = "directory")]
    relays: u16,
    /// Be an Agones game server: Ready once listening, health from the
    /// loop, rooms and players as Counters, the `lockstep-draining` label
    /// while draining, Shutdown once stopped. Needs a build with the
    /// `agones` feature.
    #[arg(long, conflicts_with = "relays")]
    agones: bool,
    /// The Agones SDK server's gRPC port (the `AGONES_SDK_GRPC_PORT` Agones
    /// sets, else 9357, unless given).
    #[arg(long, value_name = "PORT", requires = "agones")]
    agones_port: Option<u16>,
    /// Log as JSON lines instead of text.
    #[arg(long)]
    json_logs: bool,
}

/// `addr` for the `k`th relay of a process: its port `k` higher (port 0
/// stays 0: the OS picks).
fn nth(addr: Option<SocketAddr>, k: u16) -> Result<Option<SocketAddr>, RelayCliError> {
    let Some(mut a) = addr else { return Ok(None) };
    if a.port() != 0 {
        let port = a
            .port()
            .checked_add(k)
            .ok_or_else(|| RelayCliError::Address(format!("{a} + {k}")))?;
        a.set_port(port);
    }
    Ok(Some(a))
}

/// A game the relay can run itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ServerGame {
    /// The demo game.
    Swarm,
}

/// When a room's match starts, as a command-line value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum StartRule {
    /// With the first player (no lobby).
    AtOnce,
    /// Once `--start-players` seats are taken.
    Seated,
    /// Once at least `--start-players` are seated and all are ready.
    Ready,
}

impl From<StartRule> for StartName {
    fn from(s: StartRule) -> Self {
        match s {
            StartRule::AtOnce => Self::AtOnce,
            StartRule::Seated => Self::Seated,
            StartRule::Ready => Self::Ready,
        }
    }
}

/// How joiners join a game under way, as a command-line value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum JoinMode {
    /// From a snapshot of the game's state.
    Snapshot,
    /// By replaying the game from its first tick.
    Replay,
}

/// A room's sealing policy, as a command-line value.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum Policy {
    /// Seal a tick once every player's input is in.
    WaitForAll,
    /// Seal on the clock; late input runs on the next tick.
    Deadline,
}

impl From<Policy> for PolicyName {
    fn from(p: Policy) -> Self {
        match p {
            Policy::WaitForAll => Self::WaitForAll,
            Policy::Deadline => Self::Deadline,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum RelayCliError {
    #[error("cannot read {path}: {source}")]
    ReadConfig {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("bad configuration in {path}: {source}")]
    ParseConfig {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("bad address {0:?} (expected host:port or \"off\")")]
    Address(String),
    #[error(transparent)]
    Config(#[from] lockstep_relay::RelayConfigError),
    #[error("TLS: {0}")]
    Tls(#[from] lockstep_relay::TlsError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Relay(#[from] lockstep_relay::RelayError),
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
    #[error(transparent)]
    Directory(#[from] lockstep_relay::directory::DirectoryError),
    #[error("Agones: {0}")]
    Agones(String),
}

/// `host:port` (a name is looked up) or `off`.
fn addr(s: &str) -> Result<Option<SocketAddr>, RelayCliError> {
    if s == "off" {
        return Ok(None);
    }
    std::net::ToSocketAddrs::to_socket_addrs(s)
        .ok()
        .and_then(|mut a| a.next())
        .map(Some)
        .ok_or_else(|| RelayCliError::Address(s.to_owned()))
}

fn config(args: &RelayArgs) -> Result<RelayConfig, RelayCliError> {
    let mut config = match &args.config {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|source| RelayCliError::ReadConfig {
                    path: path.clone(),
                    source,
                })?;
            toml::from_str(&text).map_err(|source| RelayCliError::ParseConfig {
                path: path.clone(),
                source,
            })?
        }
        None => RelayConfig::default(),
    };
    if let Some(s) = &args.ticket_secret {
        config.tickets.secret = Some(s.clone());
    }
    let d = &mut config.room_defaults;
    d.tick_rate = args.tick_rate.unwrap_or(d.tick_rate);
    d.delay = args.delay.unwrap_or(d.delay);
    d.max_seats = args.max_seats.unwrap_or(d.max_seats);
    d.policy = args.policy.map_or(d.policy, PolicyName::from);
    d.start = args.start.map_or(d.start, StartName::from);
    d.start_players = args.start_players.unwrap_or(d.start_players);
    d.spectator_delay_secs = args.spectator_delay.unwrap_or(d.spectator_delay_secs);
    if let Some(ServerGame::Swarm) = args.game {
        let seed = args.seed;
        config.game = Some(lockstep_relay::GameFactory::new(move || {
            Box::new(lockstep_demo::Game::new(seed))
        }));
        // Clients of another build or seed would not run this game.
        config.fingerprint = Some(crate::play::fingerprint(seed));
    }
    match args.join {
        Some(mode) => d.snapshot_join = mode == JoinMode::Snapshot,
        None if args.config.is_none() => d.snapshot_join = true,
        None => {}
    }
    config.limits.max_rooms = args.max_rooms.unwrap_or(config.limits.max_rooms);
    config.drain_secs = args.drain_secs.unwrap_or(config.drain_secs);
    config.plain_udp |= args.plain_udp;
    if let Some(dir) = &args.record {
        config.record.dir = Some(dir.clone());
    }
    config.record.max_mib = args.record_max_mib.unwrap_or(config.record.max_mib);
    if let (Some(cert), Some(key)) = (&args.ws_cert, &args.ws_key) {
        config.tls = Some(lockstep_relay::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
        });
    }
    // Refuse now, in words, what would otherwise refuse every client later.
    config.validate()?;
    if let Some(files) = &config.tls {
        lockstep_relay::tls_acceptor(files)?;
    }
    Ok(config)
}

pub(crate) fn main(args: RelayArgs) -> Result<(), RelayCliError> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colour only for a terminal: a log file gets plain text.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    if args.json_logs {
        let _ = subscriber.json().try_init();
    } else {
        let _ = subscriber.try_init();
    }
    if args.agones && !cfg!(feature = "agones") {
        // Before listening: a relay Agones never hears from is never used.
        return agones_missing();
    }
    let config = config(&args)?;
    let (udp, ws, http) = (addr(&args.udp)?, addr(&args.ws)?, addr(&args.http)?);
    let args = std::sync::Arc::new(args);
    if args.relays > 1 {
        return many(&args, &config, (udp, ws, http));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(RelayCliError::Runtime)?;
    let id = args.relay_id.clone();
    runtime.block_on(serve_one(
        args,
        config,
        (udp, ws, http),
        id,
        shutdown_signal(),
    ))
}

/// `args.relays` relays, each on a thread of its own with its own
/// runtime, until SIGTERM or Ctrl-C stops them all.
fn many(
    args: &std::sync::Arc<RelayArgs>,
    config: &RelayConfig,
    (udp, ws, http): (Option<SocketAddr>, Option<SocketAddr>, Option<SocketAddr>),
) -> Result<(), RelayCliError> {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let base = args.relay_id.clone().unwrap_or_default();
    let mut threads = Vec::new();
    for k in 0..args.relays {
        let listen = (nth(udp, k)?, nth(ws, k)?, nth(http, k)?);
        let (args, config, mut stop) = (args.clone(), config.clone(), stop_rx.clone());
        let id = format!("{base}-{k}");
        threads.push(std::thread::spawn(move || -> Result<(), RelayCliError> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(RelayCliError::Runtime)?;
            runtime.block_on(serve_one(args, config, listen, Some(id), async move {
                let _ = stop.wait_for(|s| *s).await;
            }))
        }));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RelayCliError::Runtime)?;
    runtime.block_on(shutdown_signal());
    let _ = stop_tx.send(true);
    let mut first = Ok(());
    for t in threads {
        let r = t
            .join()
            .unwrap_or_else(|_| Err(RelayCliError::Address("a relay thread panicked".into())));
        if first.is_ok() {
            first = r;
        }
    }
    first
}

/// One relay: binds, says where, serves (in the fleet if told) until
/// `shutdown`.
async fn serve_one(
    args: std::sync::Arc<RelayArgs>,
    config: RelayConfig,
    (udp, ws, http): (Option<SocketAddr>, Option<SocketAddr>, Option<SocketAddr>),
    relay_id: Option<String>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RelayCliError> {
    {
        let bind_err = |addr| move |source| RelayCliError::Bind { addr, source };
        let mut listeners = Listeners::default();
        if let Some(a) = udp {
            listeners.udp = Some(
                lockstep_relay::bind_udp(a, lockstep_relay::SOCKET_BUFFER).map_err(bind_err(a))?,
            );
        }
        if let Some(a) = ws {
            listeners.ws = Some(
                tokio::net::TcpListener::bind(a)
                    .await
                    .map_err(bind_err(a))?,
            );
        }
        if let Some(a) = http {
            listeners.http = Some(
                tokio::net::TcpListener::bind(a)
                    .await
                    .map_err(bind_err(a))?,
            );
        }
        // The addresses actually bound (port 0 picks one), on stdout for
        // scripts and tests.
        let shown = |a: Option<std::io::Result<SocketAddr>>| match a {
            Some(Ok(a)) => a.to_string(),
            _ => "off".to_owned(),
        };
        // Whoever started us may have stopped reading (a script that read
        // the first relay's line): a closed stdout must not stop a relay.
        let _ = writeln!(
            std::io::stdout(),
            "listening udp={} ws={} http={}",
            shown(
                listeners
                    .udp
                    .as_ref()
                    .map(tokio::net::UdpSocket::local_addr)
            ),
            shown(
                listeners
                    .ws
                    .as_ref()
                    .map(tokio::net::TcpListener::local_addr)
            ),
            shown(
                listeners
                    .http
                    .as_ref()
                    .map(tokio::net::TcpListener::local_addr)
            ),
        );
        tracing::info!("relay listening");
        let public = |a: Option<std::io::Result<SocketAddr>>| {
            a.and_then(Result::ok)
                .is_some_and(|a| !a.ip().is_loopback())
        };
        let reachable = public(
            listeners
                .udp
                .as_ref()
                .map(tokio::net::UdpSocket::local_addr),
        ) || public(
            listeners
                .ws
                .as_ref()
                .map(tokio::net::TcpListener::local_addr),
        );
        if reachable && config.ticket_keys().map_or(true, |k| k.is_empty()) {
            tracing::warn!(
                "listening beyond this machine without a ticket secret: anyone who can reach it \
                 may open rooms and take seats (set LOCKSTEP_TICKET_SECRET to invite players)"
            );
        }
        if reachable && config.plain_udp {
            tracing::warn!(
                "plain UDP beyond this machine: anyone who can forge a player's address can \
                 speak for it (fine on a LAN you trust)"
            );
        }
        let metrics = std::sync::Arc::new(lockstep_relay::Metrics::default());
        let relay: std::pin::Pin<Box<dyn Future<Output = _>>> = match (&args.directory, &relay_id) {
            (Some(url), Some(id)) => {
                lockstep_relay::directory::check_relay_id(id)?;
                let directory =
                    lockstep_relay::directory::RedisDirectory::open(url, &args.directory_prefix)?;
                let k = id
                    .rsplit_once('-')
                    .and_then(|(_, k)| k.parse::<u16>().ok())
                    .filter(|_| args.relays > 1)
                    .unwrap_or(0);
                let fleet = lockstep_relay::fleet::Fleet {
                    directory,
                    id: id.clone(),
                    // Unset: the bound address (run_in_fleet fills it).
                    udp: nth(args.public_udp, k)?,
                    ws: nth(args.public_ws, k)?,
                    lease: std::time::Duration::from_secs(args.lease),
                };
                tracing::info!(relay = %id, "in the fleet of {url}");
                Box::pin(lockstep_relay::run_in_fleet(
                    config,
                    listeners,
                    metrics.clone(),
                    fleet,
                    shutdown,
                ))
            }
            _ => Box::pin(lockstep_relay::run_with_metrics(
                config,
                listeners,
                metrics.clone(),
                shutdown,
            )),
        };
        let report = if args.agones {
            agones(args.agones_port, metrics, relay).await??
        } else {
            relay.await?
        };
        tracing::info!(
            ticks = report.ticks,
            datagrams_in = report.datagrams_in,
            datagrams_out = report.datagrams_out,
            goodbyes = report.said_goodbye,
            "relay stopped"
        );
        Ok(())
    }
}

/// Runs `relay` as an Agones game server (see `lockstep_agones`).
#[cfg(feature = "agones")]
async fn agones<R>(
    port: Option<u16>,
    metrics: std::sync::Arc<lockstep_relay::Metrics>,
    relay: impl Future<Output = R>,
) -> Result<R, RelayCliError> {
    let mut config = lockstep_agones::AgonesConfig::default();
    config.port = port;
    let server = lockstep_agones::GameServer::connect(config)
        .await
        .map_err(|e| RelayCliError::Agones(e.to_string()))?;
    tracing::info!("an Agones game server");
    server
        .serve(metrics, relay)
        .await
        .map_err(|e| RelayCliError::Agones(e.to_string()))
}

/// Without the `agones` feature: refused by name.
#[cfg(not(feature = "agones"))]
async fn agones<R>(
    _port: Option<u16>,
    _metrics: std::sync::Arc<lockstep_relay::Metrics>,
    _relay: impl Future<Output = R>,
) -> Result<R, RelayCliError> {
    agones_missing()
}

/// `--agones` on a build without the feature.
fn agones_missing<R>() -> Result<R, RelayCliError> {
    Err(RelayCliError::Agones(
        "this lockstep was built without Agones: build it with `--features agones` \
         (cargo install --path crates/lockstep-cli --features agones; the SDK's build needs protoc)"
            .into(),
    ))
}

/// Completes on SIGINT (Ctrl-C) or, on Unix, SIGTERM.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("shutting down");
}
