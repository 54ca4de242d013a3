//! `lockstep demo`: a relay and bots on this machine, and proof that every
//! client ended on the same state.

use crate::relay::Policy;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use lockstep_core::PlayerInputs;
use lockstep_core::sequenced::{ClientConfig, ClientSession};
use lockstep_core::wire::InputCodec;
use lockstep_demo::{Bot, Game, GameConfig};
use lockstep_net::{
    Buffers, Clock, Faults, FaultyTransport, Transport, UdpTransport, WsClientTransport, drive,
};
use lockstep_relay::{BackgroundRelay, Bind, RelayConfig};
use std::time::{Duration, Instant};

/// A game of swarm between bots, through a relay, all on this machine.
#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Bot players (1 to 64).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub(crate) players: u16,
    /// Ticks every client must run.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) ticks: u32,
    /// Ticks per second (1 to 240).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=240))]
    pub(crate) tick_rate: u32,
    /// How the relay seals ticks.
    #[arg(long, value_enum, default_value_t = Policy::WaitForAll)]
    pub(crate) policy: Policy,
    /// How the bots connect.
    #[arg(long, value_enum, default_value_t = TransportKind::Mixed)]
    pub(crate) transport: TransportKind,
    /// Puts a `lockstep netsim` between the UDP bots and the relay,
    /// impairing both ways as this script says (with `--transport udp`),
    /// e.g. `"latency=80ms jitter=20ms loss=5%"`; see `lockstep netsim
    /// --help` for the script.
    #[arg(long, value_name = "SCRIPT")]
    pub(crate) netsim: Option<String>,
    /// Packet loss each way, in percent (0 to 95: at 100 nothing could
    /// ever finish).
    #[arg(long, default_value_t = 0.0, value_parser = percent)]
    pub(crate) loss: f64,
    /// Added one-way latency, in milliseconds (at most 10,000).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub(crate) latency: u64,
    /// Latency varies by up to this much either way, in milliseconds (at
    /// most 10,000).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub(crate) jitter: u64,
    /// Seeds the game and the bots.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Input delay in ticks: where the delay starts, kept within 1 to 16
    /// as it follows the network; with `--fixed-delay`, the delay for good
    /// (0 to 1024).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=1024))]
    pub(crate) delay: u32,
    /// Keep the input delay at `--delay` (by default a wait-for-all room's
    /// delay follows the network, from 1 to 16 ticks).
    #[arg(long)]
    pub(crate) fixed_delay: bool,
    /// Bots that join the match while it runs (0 to 8), spread over its
    /// middle: each gets the game's state from a snapshot, catches up and
    /// plays (before tick 90 it replays the match instead).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=8))]
    pub(crate) late_joiners: u16,
    /// Bots whose connection is cut in the middle of the match (0 to 8):
    /// each reconnects 1.5 s later on a new socket, takes its seat back with
    /// its resume token, is sent the frames it missed, and plays on.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=8))]
    pub(crate) drop_reconnect: u16,
    /// A swarm of this many creeps from the first wave on (16 to 4,000),
    /// instead of waves that grow: a bigger game for late joiners to
    /// receive and for every client to run.
    #[arg(long, value_parser = clap::value_parser!(u32).range(16..=4000))]
    pub(crate) creeps: Option<u32>,
    /// The relay runs the game too: it hands late joiners its own state and
    /// is the checksum authority.
    #[arg(long)]
    pub(crate) server_sim: bool,
    /// No network: run swarm twice in this process on the bots' frames, one
    /// copy through a snapshot round trip every EVERY ticks (30 if not
    /// given), and report the first tick and field where the two differ.
    /// What finds non-determinism (iteration order, state a snapshot
    /// forgets) before any match is played. Uses --players, --ticks,
    /// --seed and --creeps.
    #[arg(long, value_name = "EVERY", num_args = 0..=1, default_missing_value = "30",
          value_parser = clap::value_parser!(u32).range(1..))]
    self_check: Option<u32>,
    /// Breaks one bot on purpose: at tick TICK (or the first tick after it
    /// that its ship is in the game) the bot playing seat SEAT changes its
    /// own score, a field no other client changes. The relay's
    /// majority finds the divergence at the next checkpoint; the bot finds
    /// the first divergent tick, writes a desync report (read it with
    /// `lockstep desync show`), is resynced from another bot's state and
    /// plays on; the match must still end with equal hashes.
    #[arg(long, value_name = "SEAT@TICK", value_parser = seat_at_tick)]
    pub(crate) inject_desync: Option<(u16, u32)>,
    /// Who sequences: a relay (`relay`), or the first bot's own process
    /// (`host`: the bots talk plain UDP to it over loopback, and carry the
    /// match on under another bot if it goes).
    #[arg(long, value_enum, default_value_t = Topology::Relay)]
    topology: Topology,
    /// With `--topology host`: the hosting bot's process dies at this tick
    /// (session and socket gone, no goodbye); the others must take over
    /// and end on the same state.
    #[arg(long, value_name = "TICK", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) kill_host_at: Option<u32>,
    /// With `--topology relay`: the relay's room runs with failover on, and
    /// the relay's process dies at this tick (no goodbye); the bots carry
    /// the match on under one of them, directly between themselves over
    /// loopback UDP, and must end on the same state.
    #[arg(long, value_name = "TICK", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) kill_relay_at: Option<u32>,
}

/// Who sequences the demo's match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Topology {
    /// A relay on this machine.
    Relay,
    /// One of the bots.
    Host,
}

fn seat_at_tick(s: &str) -> Result<(u16, u32), String> {
    let (seat, tick) = s
        .split_once('@')
        .ok_or_else(|| format!("{s:?} is not SEAT@TICK (say 1@200)"))?;
    let seat = seat
        .parse()
        .map_err(|_| format!("{seat:?} is not a seat number"))?;
    let tick = tick
        .parse()
        .map_err(|_| format!("{tick:?} is not a tick number"))?;
    Ok((seat, tick))
}

fn percent(s: &str) -> Result<f64, String> {
    crate::netsim::percent_up_to(s, 95.0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum TransportKind {
    Udp,
    Ws,
    Mixed,
}

/// What went wrong, for the exit message.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DemoError {
    #[error("{0}")]
    Setup(String),
    #[error("the clients ended on different states")]
    Desync,
    #[error("the game did not finish in time")]
    Timeout,
    #[error("{0} was turned away: {1}")]
    Refused(String, String),
    #[error("{0} joined but was not playing when the match ended (give it more --ticks)")]
    NotCaughtUp(String),
    #[error("swarm is {0}")]
    NotDeterministic(Box<lockstep_core::desync::Divergence>),
    #[error("the desync injected into {0} was not {1}")]
    NotHealed(String, &'static str),
}

/// A bot's new transport, whether it is a WebSocket, and the key that
/// seals its datagrams if not.
type Opened = (Box<dyn Transport>, bool, Option<[u8; 32]>);

struct Client {
    name: String,
    kind: &'static str,
    transport: Box<dyn Transport>,
    session: ClientSession<PlayerInputs>,
    game: Game,
    bot: Option<Bot>,
    /// Runs the bot's ticks on a steady clock.
    pacer: lockstep_core::Pacer,
    /// The input delay in force, as last seen.
    delay: u32,
    buffers: Buffers,
    desyncs: u32,
    snapshots: crate::snapshots::Snapshots,
    /// Joined the match under way: when it asked, and when it caught up.
    joined: Option<(Instant, Option<Instant>)>,
    /// Reconnected: whether its state was kept (else it came back from a
    /// snapshot).
    reconnected: Option<bool>,
    /// Its connection is cut until then; then it reconnects.
    offline: Option<Instant>,
    /// The game as it starts, for a reconnect that does not keep the state.
    start: Game,
    failure: Option<String>,
    /// Its recent states, newest last: when it is resynced, its own state
    /// at the snapshot's tick, beside the majority's, shows what differs.
    history: std::collections::VecDeque<Game>,
    /// Its recent frames, for a desync report.
    frames: std::collections::VecDeque<lockstep_core::Frame<PlayerInputs>>,
    /// The seat whose bot breaks its own state, and the tick when
    /// (`--inject-desync`).
    inject: Option<(u16, u32)>,
    desync: Notes,
}

/// What a bot heard of its own desync.
#[derive(Debug, Default)]
struct Notes {
    /// The checkpoint that differed.
    checkpoint: Option<lockstep_core::Tick>,
    /// Where the search ended.
    located: Option<Option<lockstep_core::desync::FirstDifference>>,
    /// It is being resynced.
    resyncing: bool,
    /// It was resynced (the snapshot's tick).
    resynced: Option<lockstep_core::Tick>,
    /// The report written.
    report: Option<std::path::PathBuf>,
    /// Healed before the search ended: the fields compared and the frames,
    /// for the report once it does.
    pending: Option<Pending>,
}

/// A report waiting for the search's result.
#[derive(Debug)]
struct Pending {
    tick: lockstep_core::Tick,
    fields: Vec<lockstep_core::desync::FieldDiff>,
    frames: Vec<lockstep_core::Frame<PlayerInputs>>,
}

/// States and frames a bot keeps for a desync report.
const KEEP: usize = 64;

pub(crate) fn main(a: DemoArgs) -> Result<(), DemoError> {
    if let Some(every) = a.self_check {
        return self_check(&a, every);
    }
    if a.topology == Topology::Host && a.kill_relay_at.is_some() {
        return Err(DemoError::Setup(
            "--kill-relay-at needs --topology relay (host mode has no relay to kill)".into(),
        ));
    }
    if a.netsim.is_some() && (a.topology == Topology::Host || a.kill_relay_at.is_some()) {
        return Err(DemoError::Setup(
            "--netsim goes in front of a relay: not with --topology host or --kill-relay-at (use --loss, --latency and --jitter there)".into(),
        ));
    }
    if a.topology == Topology::Host || a.kill_relay_at.is_some() {
        return crate::demo_host::main(&a);
    }
    if a.kill_host_at.is_some() {
        return Err(DemoError::Setup(
            "--kill-host-at needs --topology host (a relay has no host to kill)".into(),
        ));
    }
    if let Some((seat, tick)) = a.inject_desync {
        if seat >= a.players {
            return Err(DemoError::Setup(format!(
                "--inject-desync {seat}@{tick}: there are seats 0 to {} only",
                a.players - 1
            )));
        }
        if a.players < 3 && !a.server_sim {
            return Err(DemoError::Setup(format!(
                "--inject-desync {seat}@{tick}: two players have no majority, so neither would be told; use --players 3 or more, or --server-sim (the relay's own simulation judges)"
            )));
        }
        if tick + 200 > a.ticks {
            return Err(DemoError::Setup(format!(
                "--inject-desync {seat}@{tick}: the match must run 200 ticks past it to heal (--ticks {} or more)",
                tick + 200
            )));
        }
    }
    if a.netsim.is_some() && (a.loss > 0.0 || a.latency > 0 || a.jitter > 0) {
        return Err(DemoError::Setup(
            "--netsim impairs the bots' link already: put loss=, latency= and jitter= in its script instead of --loss, --latency and --jitter".into(),
        ));
    }
    if a.netsim.is_some() && a.transport != TransportKind::Udp {
        return Err(DemoError::Setup(
            "--netsim carries UDP only: add --transport udp".into(),
        ));
    }
    if a.drop_reconnect > a.players {
        return Err(DemoError::Setup(format!(
            "--drop-reconnect {} cuts more bots than --players {} starts",
            a.drop_reconnect, a.players
        )));
    }
    let mut config = RelayConfig::default();
    config.room_defaults.tick_rate = a.tick_rate;
    config.room_defaults.delay = a.delay;
    config.room_defaults.adaptive_delay = !a.fixed_delay;
    config.room_defaults.max_seats = a.players + a.late_joiners;
    config.room_defaults.snapshot_join = true;
    let game_config = game_config(&a);
    if a.server_sim {
        let seed = a.seed;
        config.game = Some(lockstep_relay::GameFactory::new(move || {
            Box::new(Game::with_config(seed, game_config))
        }));
    }
    config.room_defaults.policy = a.policy.into();
    // Every bot comes from this machine's one loopback address.
    config.limits.max_udp_per_addr = 256;
    config.limits.handshakes_per_addr = 1000;
    config.limits.stranger_replies_per_addr = 1000;
    let bind = Bind {
        http: None,
        ..Bind::loopback()
    };
    let relay =
        BackgroundRelay::start(config, bind).map_err(|e| DemoError::Setup(e.to_string()))?;
    let (udp, ws) = match (relay.udp, relay.ws) {
        (Some(u), Some(w)) => (u, w),
        _ => return Err(DemoError::Setup("the relay has no listeners".into())),
    };
    // The UDP bots send to the netsim instead, which carries on to the relay.
    let netsim = match &a.netsim {
        Some(text) => {
            let script = lockstep_net::FaultScript::parse(&Faults::default(), text)
                .map_err(|e| DemoError::Setup(format!("--netsim: {e}")))?;
            let n = crate::netsim::BackgroundNetsim::start(udp, script, a.seed)
                .map_err(|e| DemoError::Setup(format!("--netsim: {e}")))?;
            Some((n, text))
        }
        None => None,
    };
    let relay_udp = udp;
    let udp = netsim.as_ref().map_or(udp, |(n, _)| n.addr);
    let faults = (a.loss > 0.0 || a.latency > 0 || a.jitter > 0).then(|| Faults {
        loss: a.loss / 100.0,
        latency: Duration::from_millis(a.latency),
        jitter: Duration::from_millis(a.jitter),
        ..Faults::default()
    });
    let late = if a.late_joiners > 0 {
        format!(" (+{} joining late)", a.late_joiners)
    } else {
        String::new()
    };
    println!(
        "swarm: {} bot{}{late}, {} ticks at {} Hz, {:?} policy, {} transport{}",
        a.players,
        if a.players == 1 { "" } else { "s" },
        a.ticks,
        a.tick_rate,
        a.policy,
        match a.transport {
            TransportKind::Udp => "UDP",
            TransportKind::Ws => "WebSocket",
            TransportKind::Mixed => "mixed UDP/WebSocket",
        },
        faults.as_ref().map_or(String::new(), |f| {
            let mut s = String::new();
            if f.loss > 0.0 {
                s += &format!(", {:.0}% loss", f.loss * 100.0);
            }
            if a.latency > 0 || a.jitter > 0 {
                s += &format!(", {} ms +- {} ms", a.latency, a.jitter);
            }
            s + " each way"
        })
    );
    println!("relay on udp://{relay_udp} and ws://{ws}");
    if let Some((n, text)) = &netsim {
        println!("netsim on udp://{} in front of the relay: {text}", n.addr);
    }
    if a.server_sim {
        println!(
            "the relay runs the game too: it hands joiners its own state and is the checksum authority"
        );
    }
    let clock = Clock::new();
    // Bot `i`'s transport (a new socket each time), whether it is a
    // WebSocket, and the key that seals its datagrams if not.
    let open = |i: usize| -> Result<Opened, DemoError> {
        let ws_client = match a.transport {
            TransportKind::Udp => false,
            TransportKind::Ws => true,
            TransportKind::Mixed => i % 3 == 2,
        };
        let inner: Box<dyn Transport> = if ws_client {
            Box::new(
                WsClientTransport::connect(&format!("ws://{ws}/"), ws, Duration::from_secs(5))
                    .map_err(|e| DemoError::Setup(format!("websocket: {e}")))?,
            )
        } else {
            let mut t =
                UdpTransport::bind("127.0.0.1:0").map_err(|e| DemoError::Setup(e.to_string()))?;
            t.add_peer(udp);
            Box::new(t)
        };
        let transport: Box<dyn Transport> = match &faults {
            Some(f) => Box::new(FaultyTransport::new(
                inner,
                f.clone(),
                a.seed ^ (i as u64 + 1),
            )),
            None => inner,
        };
        // UDP bots seal their datagrams; WebSocket rides on TCP.
        let secret = if ws_client {
            None
        } else {
            Some(lockstep_net::session_secret().map_err(|e| DemoError::Setup(e.to_string()))?)
        };
        Ok((transport, ws_client, secret))
    };
    let new_client = |i: usize| -> Result<Client, DemoError> {
        let (transport, ws_client, secret) = open(i)?;
        let config = ClientConfig {
            room: "demo".into(),
            name: format!("bot{i}"),
            codec: InputCodec::PlayerInputs,
            fingerprint: crate::play::fingerprint(a.seed)
                ^ u64::from(a.creeps.unwrap_or(0)).wrapping_mul(0xA24B_AED4_963E_E407),
            secret,
            ..ClientConfig::default()
        };
        let session = ClientSession::new(config, WsClientTransport::SERVER, clock.now())
            .map_err(|e| DemoError::Setup(e.to_string()))?;
        let game = Game::with_config(a.seed, game_config);
        Ok(Client {
            name: format!("bot{i}"),
            kind: if ws_client { "ws" } else { "udp" },
            transport,
            session,
            start: game.clone(),
            game,
            bot: None,
            pacer: bot_pacer(a.tick_rate)?,
            delay: 0,
            buffers: Buffers::default(),
            desyncs: 0,
            snapshots: crate::snapshots::Snapshots::default(),
            joined: None,
            reconnected: None,
            offline: None,
            failure: None,
            history: std::collections::VecDeque::new(),
            frames: std::collections::VecDeque::new(),
            inject: a.inject_desync,
            desync: Notes::default(),
        })
    };
    let mut clients = Vec::with_capacity(usize::from(a.players + a.late_joiners));
    for i in 0..usize::from(a.players) {
        clients.push(new_client(i)?);
    }
    // Late joiners arrive at even steps through the middle of the match.
    let mut joins: Vec<u32> = (1..=u32::from(a.late_joiners))
        .map(|k| a.ticks / 4 + a.ticks / 2 * k / (u32::from(a.late_joiners) + 1))
        .collect();
    joins.reverse();
    // Cuts land in the middle third, on the first bots.
    let mut cuts: Vec<(u32, usize)> = (0..usize::from(a.drop_reconnect))
        .map(|k| {
            let at = a.ticks / 3 + a.ticks / 3 * k as u32 / (u32::from(a.drop_reconnect) + 1);
            (at, k % usize::from(a.players))
        })
        .collect();
    cuts.reverse();

    let bar = ProgressBar::new(u64::from(a.ticks));
    bar.set_style(
        ProgressStyle::with_template("{bar:40.cyan/blue} tick {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let started = Instant::now();
    let limit = Duration::from_secs_f64(f64::from(a.ticks) / f64::from(a.tick_rate) * 3.0 + 30.0);
    let mut last_report = Instant::now();
    let mut timed_out = false;
    loop {
        let done = joins.is_empty()
            && cuts.is_empty()
            && clients
                .iter()
                .all(|c| c.offline.is_none() && c.game.tick.get() >= a.ticks);
        if done {
            break;
        }
        if started.elapsed() > limit {
            timed_out = true;
            break;
        }
        // A bot the relay turned away will never finish: say so now.
        if let Some(c) = clients.iter().find(|c| c.session.closed().is_some()) {
            let reason = c
                .session
                .closed()
                .map(ToString::to_string)
                .unwrap_or_default();
            bar.finish_and_clear();
            let _ = relay.stop();
            return Err(DemoError::Refused(c.name.clone(), reason));
        }
        let slowest = clients.iter().map(|c| c.game.tick.get()).min().unwrap_or(0);
        if joins.last().is_some_and(|t| slowest >= *t) {
            joins.pop();
            let mut c = new_client(clients.len())?;
            c.joined = Some((Instant::now(), None));
            let line = format!("late join: {} arrives at tick {slowest}", c.name);
            bar.suspend(|| println!("{line}"));
            clients.push(c);
        }
        if let Some(&(at, k)) = cuts.last()
            && slowest >= at
        {
            cuts.pop();
            let c = &mut clients[k];
            if c.session.seat().is_some() {
                c.offline = Some(Instant::now() + Duration::from_millis(1_500));
                let line = format!("drop: {} loses its connection at tick {slowest}", c.name);
                bar.suspend(|| println!("{line}"));
            }
        }
        for (k, c) in clients.iter_mut().enumerate() {
            if c.offline.is_some_and(|until| Instant::now() >= until) {
                // A new socket; the same session takes its seat back on it.
                let (transport, _, secret) = open(k)?;
                c.transport = transport;
                c.buffers = Buffers::default();
                c.session
                    .reconnect(WsClientTransport::SERVER, secret, clock.now())
                    .map_err(|e| DemoError::Refused(c.name.clone(), e.to_string()))?;
                c.offline = None;
                c.joined = Some((Instant::now(), None));
                c.reconnected = Some(true);
            }
        }
        for c in clients.iter_mut().filter(|c| c.offline.is_none()) {
            step_client(c, &clock, a.ticks);
        }
        if let Some(c) = clients.iter().find(|c| c.failure.is_some()) {
            bar.finish_and_clear();
            let _ = relay.stop();
            let reason = c.failure.clone().unwrap_or_default();
            return Err(DemoError::Refused(c.name.clone(), reason));
        }
        if last_report.elapsed() >= Duration::from_millis(100) {
            last_report = Instant::now();
            let slowest = clients.iter().map(|c| c.game.tick.get()).min().unwrap_or(0);
            let (mut stalls, mut up, mut down) = (0, 0, 0);
            for c in &clients {
                let st = c.session.stats();
                stalls += st.stalls;
                up += st.bytes_sent;
                down += st.bytes_received;
            }
            let secs = started.elapsed().as_secs_f64().max(0.001);
            bar.set_position(u64::from(slowest));
            bar.set_message(format!(
                "| stalls {stalls} | up {:.1} KB/s | down {:.1} KB/s",
                up as f64 / secs / 1000.0,
                down as f64 / secs / 1000.0
            ));
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    bar.finish_and_clear();
    // Let final acknowledgements and goodbyes go out.
    for c in clients.iter_mut() {
        c.session.leave();
        let _ = drive(
            &mut c.session,
            &mut c.transport,
            clock.now(),
            &mut c.buffers,
        );
    }
    let elapsed = started.elapsed();
    if let Some((n, _)) = netsim {
        // Prints what each direction did.
        n.stop();
    }
    let report = relay.stop().map_err(|e| DemoError::Setup(e.to_string()))?;

    println!();
    println!(
        "{:<6} {:<4} {:>4} {:>6} {:>6} {:>6} {:>6} {:>10} {:>7} {:>5} {:>6} {:>9} {:>10} {:>6}  state hash",
        "client",
        "via",
        "seat",
        "ticks",
        "late%",
        "stalls",
        "stall%",
        "stalled ms",
        "rtt ms",
        "delay",
        "lat ms",
        "up B/tick",
        "down B/tick",
        "score",
    );
    let mut hashes = Vec::new();
    for c in &clients {
        let st = c.session.stats();
        let frames = u64::from(c.game.tick.get()).max(1);
        let seat = c.bot.as_ref().map(Bot::seat);
        let score = seat.and_then(|s| c.game.ship(s)).map_or(0, |s| s.score);
        let seat = seat.map_or("-".to_owned(), |s| s.0.to_string());
        let hash = c.game.hash();
        println!(
            "{:<6} {:<4} {:>4} {:>6} {:>6.1} {:>6} {:>6.1} {:>10} {:>7} {:>5} {:>6} {:>9.1} {:>10.1} {:>6}  {:016x}",
            c.name,
            c.kind,
            seat,
            c.game.tick.get(),
            st.late_frames as f64 * 100.0 / frames as f64,
            st.stalls,
            st.stall_rate() * 100.0,
            st.stalled_for.as_millis(),
            st.rtt.map_or("-".to_owned(), |r| r.as_millis().to_string()),
            c.delay,
            st.mean_input_latency()
                .map_or("-".to_owned(), |l| l.as_millis().to_string()),
            st.bytes_sent as f64 / frames as f64,
            st.bytes_received as f64 / frames as f64,
            score,
            hash
        );
        hashes.push(hash);
    }
    for c in &clients {
        let what = match c.reconnected {
            Some(true) => "reconnect (state kept, frames from the history)",
            Some(false) => "reconnect (from a snapshot)",
            None => "late join",
        };
        if let Some((asked, live)) = c.joined {
            match live {
                Some(live) => println!(
                    "{what}: {} playing {:.3} s after connecting",
                    c.name,
                    (live - asked).as_secs_f64()
                ),
                None => println!("{what}: {} never played", c.name),
            }
        }
    }
    println!();
    println!(
        "relay: {} ticks sealed, {} datagrams in, {} out; {:.1} s ({:.1} ticks/s of {})",
        report.ticks,
        report.datagrams_in,
        report.datagrams_out,
        elapsed.as_secs_f64(),
        f64::from(a.ticks) / elapsed.as_secs_f64().max(0.001),
        a.tick_rate,
    );
    // A desync injected is one only its bot hears of.
    let injected = |c: &Client| {
        a.inject_desync
            .is_some_and(|(seat, _)| c.bot.as_ref().is_some_and(|b| b.seat().0 == seat))
    };
    let desyncs: u32 = clients
        .iter()
        .filter(|c| !injected(c))
        .map(|c| c.desyncs)
        .sum();
    let agree = hashes.windows(2).all(|w| w[0] == w[1]);
    if timed_out {
        println!("FAILED: not every client reached tick {}", a.ticks);
        return Err(DemoError::Timeout);
    }
    if !agree || desyncs > 0 {
        println!("FAILED: the clients ended on different states ({desyncs} desync reports)");
        return Err(DemoError::Desync);
    }
    if let Some(c) = clients.iter().find(|c| injected(c)) {
        let missing = if c.desyncs == 0 {
            Some("detected")
        } else if c.desync.resynced.is_none() {
            Some("healed")
        } else if c.desync.report.is_none() {
            Some("reported")
        } else {
            None
        };
        if let Some(what) = missing {
            println!("FAILED: the desync injected into {} was not {what}", c.name);
            return Err(DemoError::NotHealed(c.name.clone(), what));
        }
        if let Some(file) = &c.desync.report {
            println!(
                "desync injected into {} (seat {}): detected, located, healed; report in {}",
                c.name,
                c.bot.as_ref().map_or(0, |b| b.seat().0),
                file.display()
            );
        }
    }
    // Equal hashes say nothing of a joiner that never played.
    let idle: Vec<&str> = clients
        .iter()
        .filter(|c| c.joined.is_some_and(|(_, live)| live.is_none()))
        .map(|c| c.name.as_str())
        .collect();
    if !idle.is_empty() {
        println!("FAILED: {} never played", idle.join(", "));
        return Err(DemoError::NotCaughtUp(idle.join(", ")));
    }
    let ships = clients.first().map_or(0, |c| c.game.ships.len());
    let creeps = clients.first().map_or(0, |c| c.game.creeps.len());
    println!(
        "OK: {} clients ran {} ticks and ended on the same state {:016x} ({} ships, {} creeps, wave {})",
        clients.len(),
        a.ticks,
        hashes.first().copied().unwrap_or(0),
        ships,
        creeps,
        clients.first().map_or(0, |c| c.game.wave)
    );
    Ok(())
}

/// Drains a bot's events: desyncs are counted, snapshot requests noted,
/// and a joiner's catching up timed.
fn take_events(c: &mut Client) {
    while let Some(ev) = c.session.poll_event() {
        c.snapshots.on_event(&ev);
        match ev {
            lockstep_core::Event::Desync { tick, .. } => {
                c.desyncs += 1;
                c.desync.checkpoint = Some(tick);
            }
            lockstep_core::Event::DesyncLocated { first, .. } => {
                c.desync.located = Some(first);
                if let Some(p) = c.desync.pending.take() {
                    write_report(c, p);
                }
                let line = match first {
                    Some(f) => format!(
                        "desync: {} found where it parted from the others: after tick {} (its hash {:016x}, theirs {:016x})",
                        c.name, f.tick, f.local, f.remote
                    ),
                    None => format!("desync: {} could not find the first divergent tick", c.name),
                };
                println!("{line}");
            }
            lockstep_core::Event::Resyncing => {
                c.desync.resyncing = true;
                println!(
                    "desync: the relay found {}'s state different (checkpoint through tick {}); resyncing it from another's state",
                    c.name,
                    c.desync.checkpoint.map_or("?".into(), |t| t.to_string())
                );
            }
            lockstep_core::Event::CaughtUp { .. }
            | lockstep_core::Event::Reconnected { kept: true, .. } => {
                if let Some((_, live)) = &mut c.joined {
                    *live = Some(Instant::now());
                }
            }
            // Back without our state: start over; a snapshot follows.
            lockstep_core::Event::Reconnected { kept: false, .. } => {
                c.game = c.start.clone();
                c.reconnected = Some(false);
            }
            _ => {}
        }
    }
}

/// Frames ready beyond the delay's worth past which a bot runs them
/// without its clock.
const CATCH_UP: usize = 8;
/// The most frames a bot runs in one loop iteration.
const MAX_PER_STEP: u32 = 64;

/// The clock a bot runs its ticks on: one frame kept in hand.
pub(crate) fn bot_pacer(tick_rate: u32) -> Result<lockstep_core::Pacer, DemoError> {
    lockstep_core::Pacer::new(
        tick_rate,
        lockstep_core::PacerConfig {
            target: 1,
            ..lockstep_core::PacerConfig::default()
        },
    )
    .map_err(|e| DemoError::Setup(e.to_string()))
}

/// How many ticks a bot runs now: as its pacer says, or, far behind
/// (joining, or after a stall), up to `MAX_PER_STEP` without it.
pub(crate) fn bot_ticks_due(
    pacer: &mut lockstep_core::Pacer,
    session: &ClientSession<PlayerInputs>,
    now: lockstep_core::Instant,
) -> u32 {
    let delay = session.welcome().map_or(0, |w| w.delay) as usize;
    if session.joining() || session.stats().buffered_frames > delay + CATCH_UP {
        MAX_PER_STEP
    } else {
        pacer.ticks_due(now, session.ready_to_pace())
    }
}

/// The bot's input for the tick `delay` ahead, if it is due.
fn commit_due(c: &mut Client) {
    if let Some(bot) = &mut c.bot
        && c.session.input_due()
    {
        let input = bot.input(&c.game);
        // A joiner plays once its input is taken: after catching up
        // from a snapshot, or at once when it replays the match.
        if c.session.commit_local(input).is_ok()
            && let Some((_, live @ None)) = &mut c.joined
        {
            *live = Some(Instant::now());
        }
    }
}

/// One game-loop iteration of one bot client.
fn step_client(c: &mut Client, clock: &Clock, ticks: u32) {
    let _ = drive(
        &mut c.session,
        &mut c.transport,
        clock.now(),
        &mut c.buffers,
    );
    if c.bot.is_none() {
        c.bot = c.session.seat().map(|s| Bot::new(s, u64::from(s.0) + 1));
    }
    take_events(c);
    match c.snapshots.restore(&mut c.session, &mut c.game) {
        Err(e) => {
            c.failure = Some(e);
            return;
        }
        Ok(Some(tick)) if c.desync.resyncing => healed(c, tick),
        Ok(_) => {}
    }
    c.snapshots.donate(&mut c.session, &c.game);
    // Ticks run on a steady clock (a little faster with frames in hand, a
    // little slower without), and each one commits the input for the
    // tick `delay` ahead, so the delay is the latency the bot plays with;
    // far behind (joining, or after a stall), it catches up without it.
    let delay = c.session.welcome().map_or(0, |w| w.delay);
    if c.session.welcome().is_some() {
        c.delay = delay;
    }
    // A commit the loop could not make when its frame ran (refused in a
    // pause, say) is made now: the next frame may wait on it.
    commit_due(c);
    let due = bot_ticks_due(&mut c.pacer, &c.session, clock.now());
    let mut ran = 0;
    while c.game.tick.get() < ticks && ran < due {
        let Some(frame) = c.session.advance() else {
            break;
        };
        ran += 1;
        c.game.step(&frame);
        // At the tick asked, or the first after it that the seat's ship is
        // in the game.
        if let Some((target, at)) = c.inject
            && frame.tick.get() >= at
            && let Some(seat) = c.bot.as_ref().map(Bot::seat).filter(|s| s.0 == target)
            && let Some(ship) = c.game.ships.iter_mut().find(|s| s.player == seat)
        {
            // The injected desync: this client alone changes a field.
            ship.score += 1000;
            c.inject = None;
        }
        let _ = c.session.report_checksum(frame.tick, c.game.hash());
        c.snapshots.donate(&mut c.session, &c.game);
        if c.history.len() >= KEEP {
            c.history.pop_front();
            c.frames.pop_front();
        }
        c.history.push_back(c.game.clone());
        c.frames.push_back(frame);
        commit_due(c);
    }
    take_events(c);
    let _ = drive(
        &mut c.session,
        &mut c.transport,
        clock.now(),
        &mut c.buffers,
    );
}

/// A bot being resynced restored the majority's state after `tick`: it
/// compares it with its own state after that tick, writes the report and
/// plays on.
fn healed(c: &mut Client, tick: lockstep_core::Tick) {
    use lockstep_core::desync::{Checked, Fields};
    c.desync.resyncing = false;
    c.desync.resynced = Some(tick);
    let mut theirs = Fields::new();
    c.game.fields(&mut theirs);
    let after = tick.saturating_add(1);
    let fields = match c.history.iter().find(|g| g.tick == after) {
        Some(ours) => {
            let mut mine = Fields::new();
            ours.fields(&mut mine);
            theirs.diff(&mine)
        }
        None => Vec::new(),
    };
    // The frames up to the first divergent tick, once it is known.
    let frames: Vec<_> = c.frames.iter().cloned().collect();
    let pending = Pending {
        tick,
        fields,
        frames,
    };
    println!(
        "desync: {} resynced from the state after tick {tick}",
        c.name
    );
    if c.desync.located.is_some() {
        write_report(c, pending);
    } else {
        c.desync.pending = Some(pending);
    }
    // The states kept describe the old game.
    c.history.clear();
    c.frames.clear();
}

/// Writes the report of a bot's desync, once healed and located.
fn write_report(c: &mut Client, p: Pending) {
    use lockstep_core::desync::Report;
    let checkpoint = c.desync.checkpoint.unwrap_or(p.tick);
    let first = c.desync.located.flatten();
    let upto = first.map_or(checkpoint, |f| f.tick);
    let frames: Vec<_> = p
        .frames
        .iter()
        .filter(|f| f.tick <= upto && upto.since(f.tick) < 8)
        .collect();
    let report = Report::from_match(
        &format!("{}, against the relay's majority", c.name),
        "swarm",
        checkpoint,
        first,
        p.tick,
        p.fields,
        frames,
    );
    let file = std::path::PathBuf::from(format!(
        "desync-report-{}-tick-{}.json",
        c.name, report.tick
    ));
    match crate::desync::write(&report, &file) {
        Ok(()) => {
            println!(
                "desync: {}'s report written to {} (read it with `lockstep desync show {}`)",
                c.name,
                file.display(),
                file.display()
            );
            c.desync.report = Some(file);
        }
        Err(e) => eprintln!("{e}"),
    }
}

/// The game's tuning the flags ask for.
pub(crate) fn game_config(a: &DemoArgs) -> GameConfig {
    a.creeps.map_or_else(GameConfig::default, |n| GameConfig {
        max_creeps: n,
        first_wave: n,
    })
}

/// `--self-check`: two copies of swarm on the bots' frames, one round-tripped
/// through its snapshot every `every` ticks.
fn self_check(a: &DemoArgs, every: u32) -> Result<(), DemoError> {
    use lockstep_core::desync::{Report, SelfCheck};
    use lockstep_core::{Frame, PlayerId, SystemEvent, Tick};
    let config = game_config(a);
    let cadence = if every == 1 {
        "every tick".to_owned()
    } else {
        format!("every {every} ticks")
    };
    println!(
        "self-check: swarm, {} bot{}, {} ticks, a snapshot round trip {cadence}, seed {}",
        a.players,
        if a.players == 1 { "" } else { "s" },
        a.ticks,
        a.seed
    );
    let started = Instant::now();
    let mut run = SelfCheck::every(every)
        .start(|| Game::with_config(a.seed, config))
        .map_err(|d| DemoError::NotDeterministic(Box::new(d)))?;
    let mut bots: Vec<Bot> = (0..a.players)
        .map(|p| Bot::new(PlayerId(p), a.seed.wrapping_add(u64::from(p))))
        .collect();
    for t in 0..a.ticks {
        let events = if t == 0 {
            (0..a.players)
                .map(|p| SystemEvent::Joined {
                    player: PlayerId(p),
                })
                .collect()
        } else {
            Vec::new()
        };
        let inputs = bots.iter_mut().map(|b| Some(b.input(run.game()))).collect();
        let frame = Frame {
            tick: Tick::new(t),
            inputs,
            events,
        };
        if let Err(d) = run.step(&frame) {
            let game = format!(
                "swarm (seed {}, {} bots, --creeps {:?})",
                a.seed, a.players, a.creeps
            );
            let report = Report::from_divergence(&d, "self-check", &game, run.recent());
            let file = std::path::PathBuf::from(format!("desync-report-tick-{}.json", d.tick));
            match crate::desync::write(&report, &file) {
                Ok(()) => println!(
                    "report written to {} (read it with `lockstep desync show {}`)",
                    file.display(),
                    file.display()
                ),
                Err(e) => eprintln!("{e}"),
            }
            return Err(DemoError::NotDeterministic(Box::new(d)));
        }
    }
    let passed = run.passed();
    println!(
        "OK: {} ticks and {} snapshot round trips, the two runs identical at every tick (in {} ms; {} creeps alive at the end)",
        passed.ticks,
        passed.round_trips,
        started.elapsed().as_millis(),
        run.game().creeps.len()
    );
    Ok(())
}
