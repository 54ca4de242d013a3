//! `lockstep demo`: a relay and bots on this machine, and proof that every
//! client ended on the same state.

use crate::relay::Policy;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use lockstep_core::runner::{Runner, RunnerConfig};
use lockstep_core::sequenced::{ClientConfig, ClientSession};
use lockstep_core::{PlayerInputs, Tick};
use lockstep_demo::{Bot, Game, GameConfig};
use lockstep_net::{
    Buffers, Clock, Faults, FaultyTransport, Transport, TurnError, UdpTransport, WsClientTransport,
    drive, turn,
};
use lockstep_relay::{BackgroundRelay, Bind, RelayConfig, StartName};
use std::time::{Duration, Instant};

mod args;
mod bot;
pub(crate) mod host;
mod swarm;

use args::Topology;
pub(crate) use args::{DemoArgs, DemoError, TransportKind};
use bot::{Client, Notes, Opened, step_client};
use swarm::{Seat, Swarm};

/// How a bot's runner plays: frames paced on a steady clock, and up to 64
/// a turn when it catches up (a bot has no screen to keep drawing).
fn runner_config() -> RunnerConfig {
    RunnerConfig {
        catch_up_per_update: 64,
        ..RunnerConfig::default()
    }
}

pub(crate) fn main(a: DemoArgs) -> Result<(), DemoError> {
    if let Some(every) = a.self_check {
        return self_check(&a, every);
    }
    check_topology(&a)?;
    if a.topology == Topology::Host || a.kill_relay_at.is_some() {
        return host::main(&a);
    }
    check_relay_flags(&a)?;
    let relay = start_relay(&a)?;
    let net = Net::start(&a, &relay)?;
    net.announce(&a);
    let clock = Clock::new();
    let lobby = Lobby {
        a: &a,
        net: &net,
        clock: &clock,
        game_config: game_config(&a),
    };
    let started = Instant::now();
    let (mut clients, timed_out, second_half) = match play(&a, &lobby) {
        Ok(played) => played,
        Err(e) => {
            let _ = relay.stop();
            return Err(e);
        }
    };
    say_goodbye(&mut clients, &clock);
    let elapsed = started.elapsed();
    net.stop();
    let report = relay.stop().map_err(|e| DemoError::Setup(e.to_string()))?;
    let hashes = print_table(&clients);
    print_joins(&clients);
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
    if let Some(d) = second_half {
        let ticks = a.ticks - a.ticks / 2;
        println!(
            "steady state: the slowest client ran ticks {} to {} in {:.1} s ({:.1} ticks/s)",
            a.ticks / 2,
            a.ticks,
            d.as_secs_f64(),
            f64::from(ticks) / d.as_secs_f64().max(0.001),
        );
    }
    judge(&a, &clients, &hashes, timed_out)
}

/// Flags that cannot go together whoever sequences.
fn check_topology(a: &DemoArgs) -> Result<(), DemoError> {
    if a.topology == Topology::Host && a.kill_relay_at.is_some() {
        return Err(DemoError::Setup(
            "--kill-relay-at needs --topology relay (host mode has no relay to kill)".into(),
        ));
    }
    if a.record.is_some() && (a.topology == Topology::Host || a.kill_relay_at.is_some()) {
        return Err(DemoError::Setup(
            "--record records a relay match: not with --topology host or --kill-relay-at".into(),
        ));
    }
    if a.netsim.is_some() && (a.topology == Topology::Host || a.kill_relay_at.is_some()) {
        return Err(DemoError::Setup(
            "--netsim goes in front of a relay: not with --topology host or --kill-relay-at (use --loss, --latency and --jitter there)".into(),
        ));
    }
    Ok(())
}

/// Flags the relay demo cannot honour as given.
fn check_relay_flags(a: &DemoArgs) -> Result<(), DemoError> {
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
    Ok(())
}

/// The relay on loopback ports, its room as the flags say.
fn start_relay(a: &DemoArgs) -> Result<BackgroundRelay, DemoError> {
    let mut config = RelayConfig::default();
    config.room_defaults.tick_rate = a.tick_rate;
    config.room_defaults.delay = a.delay;
    config.room_defaults.adaptive_delay = !a.fixed_delay;
    config.room_defaults.max_seats = a.players + a.late_joiners;
    config.room_defaults.snapshot_join = true;
    // The match starts through the lobby, once every bot is seated and
    // ready; late joiners join it under way.
    config.room_defaults.start = StartName::Ready;
    config.room_defaults.start_players = a.players;
    let game_config = game_config(a);
    if a.server_sim {
        let seed = a.seed;
        config.game = Some(lockstep_relay::GameFactory::new(move || {
            Box::new(Game::with_config(seed, game_config))
        }));
    }
    config.room_defaults.policy = a.policy.into();
    config.record.dir.clone_from(&a.relay_record);
    // Every bot comes from this machine's one loopback address.
    config.limits.max_udp_per_addr = 256;
    config.limits.handshakes_per_addr = 1000;
    config.limits.stranger_replies_per_addr = 1000;
    let bind = Bind {
        http: None,
        ..Bind::loopback()
    };
    BackgroundRelay::start(config, bind).map_err(|e| DemoError::Setup(e.to_string()))
}

/// Where the bots reach the relay, and what stands between.
struct Net {
    /// The relay's UDP address.
    relay_udp: std::net::SocketAddr,
    /// Where UDP bots send: the relay, or a netsim in front of it.
    udp: std::net::SocketAddr,
    /// The relay's WebSocket address.
    ws: std::net::SocketAddr,
    /// The netsim in front of the relay, and its script.
    netsim: Option<(crate::netsim::BackgroundNetsim, String)>,
    /// How each bot's own transport is impaired.
    faults: Option<Faults>,
}

impl Net {
    /// The bots' way to `relay`, through a netsim if the flags ask.
    fn start(a: &DemoArgs, relay: &BackgroundRelay) -> Result<Self, DemoError> {
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
                Some((n, text.clone()))
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

        Ok(Self {
            relay_udp,
            udp,
            ws,
            netsim,
            faults,
        })
    }

    /// Says what is about to be played, and where.
    fn announce(&self, a: &DemoArgs) {
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
            self.faults.as_ref().map_or(String::new(), |f| {
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
        println!("relay on udp://{} and ws://{}", self.relay_udp, self.ws);
        if let Some((n, text)) = &self.netsim {
            println!("netsim on udp://{} in front of the relay: {text}", n.addr);
        }
        if a.server_sim {
            println!(
                "the relay runs the game too: it hands joiners its own state and is the checksum authority"
            );
        }
    }

    /// Stops the netsim, which prints what each direction did.
    fn stop(self) {
        if let Some((n, _)) = self.netsim {
            n.stop();
        }
    }
}

/// What opens a bot's connection to the relay.
struct Lobby<'a> {
    a: &'a DemoArgs,
    net: &'a Net,
    clock: &'a Clock,
    game_config: GameConfig,
}

impl Lobby<'_> {
    /// Bot `i`'s transport (a new socket each time), whether it is a
    /// WebSocket, and the key that seals its datagrams if not.
    fn open(&self, i: usize) -> Result<Opened, DemoError> {
        let ws_client = match self.a.transport {
            TransportKind::Udp => false,
            TransportKind::Ws => true,
            TransportKind::Mixed => i % 3 == 2,
        };
        let inner: Box<dyn Transport> = if ws_client {
            Box::new(
                WsClientTransport::connect(
                    &format!("ws://{}/", self.net.ws),
                    self.net.ws,
                    Duration::from_secs(5),
                )
                .map_err(|e| DemoError::Setup(format!("websocket: {e}")))?,
            )
        } else {
            let mut t =
                UdpTransport::bind("127.0.0.1:0").map_err(|e| DemoError::Setup(e.to_string()))?;
            t.add_peer(self.net.udp);
            Box::new(t)
        };
        let transport: Box<dyn Transport> = match &self.net.faults {
            Some(f) => Box::new(FaultyTransport::new(
                inner,
                f.clone(),
                self.a.seed ^ (i as u64 + 1),
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
    }

    /// Bot `i`, connecting.
    fn new_client(&self, i: usize) -> Result<Client, DemoError> {
        let (transport, ws_client, secret) = self.open(i)?;
        let config = ClientConfig {
            room: "demo".into(),
            name: format!("bot{i}"),
            fingerprint: fingerprint(self.a),
            secret,
            ..ClientConfig::default()
        };
        let mut session = ClientSession::new(config, WsClientTransport::SERVER, self.clock.now())
            .map_err(|e| DemoError::Setup(e.to_string()))?;
        // Ready as soon as it is seated: the match starts with every bot.
        session.set_ready(true);
        let seat = Seat::default();
        let game = Swarm::new(
            Game::with_config(self.a.seed, self.game_config),
            self.a.inject_desync,
            seat.clone(),
        );
        let mut runner = Runner::new(session, game, runner_config())
            .map_err(|e| DemoError::Setup(e.to_string()))?;
        runner.set_last_tick(Some(Tick::new(self.a.ticks.saturating_sub(1))));
        // The recording: bot0's, or with --inject-desync the one whose game
        // breaks (known once seated, before its first frame).
        let mut record_if_seat = None;
        if let Some(path) = &self.a.record {
            let rec = Recording {
                path: path.clone(),
                header: self.replay_header(i),
            };
            match self.a.inject_desync {
                Some((seat, _)) => record_if_seat = Some((seat, rec)),
                None if i == 0 => rec.start(&mut runner)?,
                None => {}
            }
        }
        Ok(Client {
            name: format!("bot{i}"),
            kind: if ws_client { "ws" } else { "udp" },
            transport,
            runner,
            seat,
            bot: None,
            delay: 0,
            buffers: Buffers::default(),
            desyncs: 0,
            joined: None,
            reconnected: None,
            offline: None,
            failure: None,
            desync: Notes::default(),
            record_if_seat,
        })
    }

    /// The header of bot `i`'s recording.
    fn replay_header(&self, i: usize) -> lockstep_core::replay::Header {
        let mut header = lockstep_core::replay::Header::new(
            fingerprint(self.a),
            &format!("swarm (lockstep {})", env!("CARGO_PKG_VERSION")),
            self.a.tick_rate,
            self.a.players + self.a.late_joiners,
            lockstep_core::replay::Topology::Relay,
        );
        header.recorder = format!("bot{i}");
        header
    }
}

/// A recording `--record` asks for.
#[derive(Debug)]
pub(super) struct Recording {
    path: std::path::PathBuf,
    header: lockstep_core::replay::Header,
}

impl Recording {
    /// Starts it on `runner`: from the next frame it runs.
    pub(super) fn start(
        self,
        runner: &mut Runner<Swarm, ClientSession<PlayerInputs>>,
    ) -> Result<(), DemoError> {
        let file = std::fs::File::create(&self.path)
            .map_err(|e| DemoError::Setup(format!("--record {}: {e}", self.path.display())))?;
        runner
            .record(
                self.header,
                Box::new(
                    lockstep_core::replay::Background::new(file, 8 << 20)
                        .map_err(|e| DemoError::Setup(e.to_string()))?,
                ),
            )
            .map_err(|e| DemoError::Setup(e.to_string()))
    }
}

/// Plays the match: the bots, late joiners arriving and connections cut
/// on schedule, until every bot has run `--ticks` ticks or time ran out
/// (`true`). A bot turned away ends it with an error.
/// Plays the match: the clients, whether it ran out of time, and how long
/// the slowest client took over the second half of the ticks (the steady
/// state, past connecting and the first adaptation).
fn play(
    a: &DemoArgs,
    lobby: &Lobby<'_>,
) -> Result<(Vec<Client>, bool, Option<Duration>), DemoError> {
    let mut clients = Vec::with_capacity(usize::from(a.players + a.late_joiners));
    for i in 0..usize::from(a.players) {
        clients.push(lobby.new_client(i)?);
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
    let mut half: Option<Instant> = None;
    // The lobby as the first bot last saw it, until the match starts.
    let mut lobby_seen: Option<(u16, u16)> = None;
    let mut in_lobby = true;
    loop {
        let done = joins.is_empty()
            && cuts.is_empty()
            && clients
                .iter()
                .all(|c| c.offline.is_none() && c.game().tick.get() >= a.ticks);
        if done {
            break;
        }
        if started.elapsed() > limit {
            timed_out = true;
            break;
        }
        // A bot the relay turned away will never finish: say so now.
        if let Some(c) = clients.iter().find(|c| c.session().closed().is_some()) {
            let reason = c
                .session()
                .closed()
                .map(ToString::to_string)
                .unwrap_or_default();
            bar.finish_and_clear();
            return Err(DemoError::Refused(c.name.clone(), reason));
        }
        let slowest = clients
            .iter()
            .map(|c| c.game().tick.get())
            .min()
            .unwrap_or(0);
        if half.is_none() && slowest >= a.ticks / 2 {
            half = Some(Instant::now());
        }
        if joins.last().is_some_and(|t| slowest >= *t) {
            joins.pop();
            let mut c = lobby.new_client(clients.len())?;
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
            if c.session().seat().is_some() {
                c.offline = Some(Instant::now() + Duration::from_millis(1_500));
                let line = format!("drop: {} loses its connection at tick {slowest}", c.name);
                bar.suspend(|| println!("{line}"));
            }
        }
        for (k, c) in clients.iter_mut().enumerate() {
            if c.offline.is_some_and(|until| Instant::now() >= until) {
                // A new socket; the same session takes its seat back on it.
                let (transport, _, secret) = lobby.open(k)?;
                c.transport = transport;
                c.buffers = Buffers::default();
                c.runner
                    .session_mut()
                    .reconnect(WsClientTransport::SERVER, secret, lobby.clock.now())
                    .map_err(|e| DemoError::Refused(c.name.clone(), e.to_string()))?;
                c.offline = None;
                c.joined = Some((Instant::now(), None));
                c.reconnected = Some(true);
            }
        }
        for c in clients.iter_mut().filter(|c| c.offline.is_none()) {
            step_client(c, lobby.clock);
        }
        if in_lobby && let Some(first) = clients.first() {
            match first.session().lobby() {
                Some(l) if lobby_seen != Some((l.seated, l.ready)) => {
                    lobby_seen = Some((l.seated, l.ready));
                    let line = format!("lobby: {} seated, {} ready", l.seated, l.ready);
                    bar.suspend(|| println!("{line}"));
                }
                None if first.session().connected() => {
                    in_lobby = false;
                    let line = format!(
                        "lobby: every bot seated and ready, the match starts ({} ms after the first connected)",
                        started.elapsed().as_millis()
                    );
                    bar.suspend(|| println!("{line}"));
                }
                _ => {}
            }
        }
        if let Some(c) = clients.iter().find(|c| c.failure.is_some()) {
            bar.finish_and_clear();
            let reason = c.failure.clone().unwrap_or_default();
            return Err(DemoError::Refused(c.name.clone(), reason));
        }
        if last_report.elapsed() >= Duration::from_millis(100) {
            last_report = Instant::now();
            let slowest = clients
                .iter()
                .map(|c| c.game().tick.get())
                .min()
                .unwrap_or(0);
            let (mut stalls, mut up, mut down) = (0, 0, 0);
            for c in &clients {
                let st = c.session().stats();
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
    let second_half = half.filter(|_| !timed_out).map(|h| h.elapsed());
    Ok((clients, timed_out, second_half))
}

/// Lets final acknowledgements and goodbyes go out, and finishes the
/// recording.
fn say_goodbye(clients: &mut [Client], clock: &Clock) {
    for c in clients.iter_mut() {
        let written = c.runner.stop_recording();
        if let Some(result) = written {
            match result.and_then(|mut w| Ok(w.flush()?)) {
                Ok(()) => println!("recorded: {} ran the match into the replay file", c.name),
                Err(e) => eprintln!("recording failed: {e}"),
            }
        }
    }
    for c in clients.iter_mut() {
        c.runner.session_mut().leave();
        let _ = drive(&mut c.runner, &mut c.transport, clock.now(), &mut c.buffers);
    }
}

/// The table of every bot's figures; returns their state hashes.
fn print_table(clients: &[Client]) -> Vec<u64> {
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
    for c in clients {
        let st = c.session().stats();
        let game = c.game();
        let frames = u64::from(game.tick.get()).max(1);
        let seat = c.bot.as_ref().map(Bot::seat);
        let score = seat.and_then(|s| game.ship(s)).map_or(0, |s| s.score);
        let seat = seat.map_or("-".to_owned(), |s| s.0.to_string());
        let hash = game.hash();
        println!(
            "{:<6} {:<4} {:>4} {:>6} {:>6.1} {:>6} {:>6.1} {:>10} {:>7} {:>5} {:>6} {:>9.1} {:>10.1} {:>6}  {:016x}",
            c.name,
            c.kind,
            seat,
            game.tick.get(),
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
    hashes
}

/// How long each late joiner and reconnecting bot took to play.
fn print_joins(clients: &[Client]) {
    for c in clients {
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
}

/// Whether the match proved what it set out to: one state everywhere,
/// every joiner playing, an injected desync detected, healed and reported.
fn judge(
    a: &DemoArgs,
    clients: &[Client],
    hashes: &[u64],
    timed_out: bool,
) -> Result<(), DemoError> {
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
    let ships = clients.first().map_or(0, |c| c.game().ships.len());
    let creeps = clients.first().map_or(0, |c| c.game().creeps.len());
    println!(
        "OK: {} clients ran {} ticks and ended on the same state {:016x} ({} ships, {} creeps, wave {})",
        clients.len(),
        a.ticks,
        hashes.first().copied().unwrap_or(0),
        ships,
        creeps,
        clients.first().map_or(0, |c| c.game().wave)
    );
    Ok(())
}

/// The demo's game fingerprint: swarm's for the seed, and the creeps
/// asked for (another tuning is another game).
pub(crate) fn fingerprint(a: &DemoArgs) -> u64 {
    swarm_fingerprint(a.seed, a.creeps)
}

/// Swarm's fingerprint for a seed and a number of creeps.
pub(crate) fn swarm_fingerprint(seed: u64, creeps: Option<u32>) -> u64 {
    crate::play::fingerprint(seed)
        ^ u64::from(creeps.unwrap_or(0)).wrapping_mul(0xA24B_AED4_963E_E407)
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
