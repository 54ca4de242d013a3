//! `lockstep play`: swarm in a terminal, against a relay.

use clap::Args;
use crossterm::event::{
    self, Event as TermEvent, KeyCode, KeyEventKind, KeyModifiers, KeyboardEnhancementFlags,
    PopKeyboardEnhancementFlags, PushKeyboardEnhancementFlags,
};
use crossterm::{cursor, execute, terminal};
use lockstep_core::admission::display_name;
use lockstep_core::runner::{Runner, RunnerConfig, Status};
use lockstep_core::sequenced::{ClientConfig, ClientSession, CloseReason, Start};
use lockstep_core::{Event, PlayerInputs};
use lockstep_demo::render::{self, Hud};
use lockstep_demo::{BOOST, FIRE, Game};
use lockstep_net::{Buffers, Clock, Transport, TurnError, UdpTransport, WsClientTransport, turn};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use std::io::Stdout;
use std::time::{Duration, Instant};

/// Swarm's game fingerprint for a game seed: clients of other builds, or
/// started with another seed, are refused instead of desyncing.
pub(crate) fn fingerprint(seed: u64) -> u64 {
    const BUILD: u64 = 0x5_3A63;
    BUILD
        ^ seed
            .wrapping_add(1)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(29)
}

/// Connect to a relay and play (or watch) in this terminal.
#[derive(Debug, Args)]
pub(crate) struct PlayArgs {
    /// The relay: host:port for UDP, or ws://host:port/ (wss:// over TLS)
    /// for WebSocket.
    #[arg(long, env = "LOCKSTEP_RELAY", default_value = "127.0.0.1:7777")]
    relay: String,
    /// The room to join (created if new).
    #[arg(long, default_value = "lobby")]
    room: String,
    /// Your name.
    #[arg(long, default_value = "player")]
    name: String,
    /// Watch instead of playing.
    #[arg(long)]
    watch: bool,
    /// The game seed (the same for everyone in the room).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// A join ticket from the matchmaker (hex, as `lockstep ticket`
    /// prints), for relays that require one.
    #[arg(long, env = "LOCKSTEP_TICKET", hide_env_values = true, value_parser = crate::ticket::hex)]
    ticket: Option<crate::ticket::TicketBytes>,
    /// For wss://, trust this certificate (PEM: a self-hosted relay's own
    /// certificate or CA) instead of the usual public roots.
    #[arg(long)]
    ca: Option<std::path::PathBuf>,
    /// Records the match as you play (or watch) it into this replay file;
    /// `lockstep replay verify FILE --seed N` checks it.
    #[arg(long, value_name = "FILE")]
    record: Option<std::path::PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum PlayError {
    #[error("cannot reach the relay: {0}")]
    Connect(String),
    #[error("{0}")]
    Options(String),
    #[error("terminal: {0}")]
    Terminal(#[from] std::io::Error),
    #[error("{0}")]
    Closed(String),
}

const HELP: &str = " WASD move · arrows/IJKL aim · space fire (F: auto-fire) · B boost · Q quit";
const LOBBY_HELP: &str = " R ready / not ready · Q quit";

/// What a key asks of the game as a whole.
#[derive(Debug, PartialEq, Eq)]
enum Asked {
    Nothing,
    Quit,
    ToggleReady,
}

/// Keys held, by when they expire: terminals rarely report releases, so a
/// press holds a key for a moment, and auto-repeat keeps it held.
#[derive(Debug, Default)]
struct Keys {
    held: Vec<(KeyCode, Instant)>,
    autofire: bool,
}

const HOLD: Duration = Duration::from_millis(280);
/// How long after losing the relay `play` keeps trying to take its seat
/// back: the relay holds a seat 30 s from the last packet.
const RECONNECT_FOR: Duration = Duration::from_secs(30);

impl Keys {
    fn press(&mut self, k: KeyCode, now: Instant) {
        self.held.retain(|(h, _)| *h != k);
        self.held.push((k, now + HOLD));
    }

    fn release(&mut self, k: KeyCode) {
        self.held.retain(|(h, _)| *h != k);
    }

    fn down(&self, now: Instant, keys: &[KeyCode]) -> bool {
        self.held
            .iter()
            .any(|(k, until)| keys.contains(k) && *until > now)
    }

    fn input(&mut self, now: Instant) -> PlayerInputs {
        self.held.retain(|(_, until)| *until > now);
        let axis = |neg: &[KeyCode], pos: &[KeyCode]| -> f32 {
            f32::from(i8::from(self.down(now, pos)) - i8::from(self.down(now, neg)))
        };
        let ch = |c: char| KeyCode::Char(c);
        let mut input = PlayerInputs::default()
            .with_movement(axis(&[ch('a')], &[ch('d')]), axis(&[ch('w')], &[ch('s')]))
            .with_aim(
                axis(&[KeyCode::Left, ch('j')], &[KeyCode::Right, ch('l')]),
                axis(&[KeyCode::Up, ch('i')], &[KeyCode::Down, ch('k')]),
            );
        input.set_button(FIRE, self.autofire || self.down(now, &[ch(' ')]));
        input.set_button(BOOST, self.down(now, &[ch('b')]));
        input
    }
}

/// Puts the terminal back however the game ends.
pub(crate) struct Screen {
    pub(crate) terminal: Terminal<CrosstermBackend<Stdout>>,
    enhanced: bool,
}

impl Screen {
    pub(crate) fn open() -> Result<Self, PlayError> {
        terminal::enable_raw_mode()?;
        let mut out = std::io::stdout();
        execute!(out, terminal::EnterAlternateScreen, cursor::Hide)?;
        let enhanced = terminal::supports_keyboard_enhancement().unwrap_or(false);
        if enhanced {
            let _ = execute!(
                out,
                PushKeyboardEnhancementFlags(KeyboardEnhancementFlags::REPORT_EVENT_TYPES)
            );
        }
        let terminal = Terminal::new(CrosstermBackend::new(out))?;
        Ok(Self { terminal, enhanced })
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let out = self.terminal.backend_mut();
        if self.enhanced {
            let _ = execute!(out, PopKeyboardEnhancementFlags);
        }
        let _ = execute!(out, cursor::Show, terminal::LeaveAlternateScreen);
        let _ = terminal::disable_raw_mode();
    }
}

pub(crate) fn main(a: PlayArgs) -> Result<(), PlayError> {
    let mut p = Play::open(a)?;
    let outcome = loop {
        let now = Instant::now();
        if p.reconnect_if_lost(now)? {
            continue;
        }
        match p.read_keys(now)? {
            Asked::Quit => {
                p.say_goodbye();
                break None;
            }
            Asked::ToggleReady => {
                let ready = !p.runner.session().is_ready();
                p.runner.session_mut().set_ready(ready);
            }
            Asked::Nothing => {}
        }
        if let Some(reason) = p.ended(now) {
            break Some(reason);
        }
        if let Err(e) = p.turn(now) {
            break Some(e);
        }
        p.take_events(now);
        if let Some(reason) = p.ended(now) {
            break Some(reason);
        }
        p.draw(now)?;
        // Idle until input arrives or a millisecond passes.
        let _ = event::poll(Duration::from_millis(1))?;
    };
    let recorded = p.runner.stop_recording();
    drop(p);
    if let Some(Err(e)) = recorded.map(|r| r.and_then(|mut w| Ok(w.flush()?))) {
        eprintln!("the recording failed: {e}");
    }
    match outcome {
        None => Ok(()),
        Some(reason) if reason == "left" => Ok(()),
        Some(reason) => Err(PlayError::Closed(reason)),
    }
}

/// A game of `play` under way: the session and its connection, the game,
/// the keys, the screen, and what the status line says.
struct Play {
    a: PlayArgs,
    clock: Clock,
    /// The session's configuration as it started (a reconnect needs a new
    /// secret of the same kind).
    base_config: ClientConfig,
    /// The session and the game: ticks on a steady clock, catching up
    /// when behind, the state handed over and restored, checksums.
    runner: Runner<Game, ClientSession<PlayerInputs>>,
    transport: Box<dyn Transport>,
    /// The relay, as the screen shows it.
    where_: String,
    keys: Keys,
    buffers: Buffers,
    screen: Screen,
    last_draw: Instant,
    status: String,
    in_room: String,
    /// Since when the relay has not been heard.
    lost_since: Option<Instant>,
    /// Since when we have been trying to get back, and how often in this
    /// outage; times we got back.
    outage: Option<Instant>,
    tries: u32,
    back: u32,
}

impl Play {
    /// Checks the options, opens the terminal and connects.
    fn open(a: PlayArgs) -> Result<Self, PlayError> {
        let clock = Clock::new();
        let config = ClientConfig {
            room: a.room.clone(),
            name: a.name.clone(),
            spectator: a.watch,
            ticket: a.ticket.clone().map(|t| t.0).unwrap_or_default(),
            fingerprint: fingerprint(a.seed),
            // Sealed datagrams over UDP; a WebSocket rides on TCP.
            secret: if a.relay.starts_with("ws://") || a.relay.starts_with("wss://") {
                None
            } else {
                Some(
                    lockstep_net::session_secret()
                        .map_err(|e| PlayError::Connect(e.to_string()))?,
                )
            },
            ..ClientConfig::default()
        };
        let base_config = config.clone();
        // The options are checked before anything touches the network.
        let session =
            ClientSession::<PlayerInputs>::new(config, WsClientTransport::SERVER, clock.now())
                .map_err(|e| PlayError::Options(format!("bad option: {e}")))?;
        check_address(&a.relay)?;
        use std::io::IsTerminal;
        if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
            return Err(PlayError::Options(
                "play needs an interactive terminal (its input or output is not one)".into(),
            ));
        }
        let mut runner = Runner::new(session, Game::new(a.seed), RunnerConfig::default())
            .map_err(|e| PlayError::Options(format!("bad option: {e}")))?;
        if let Some(path) = &a.record {
            let file = std::fs::File::create(path)
                .map_err(|e| PlayError::Options(format!("--record {}: {e}", path.display())))?;
            let mut header = lockstep_core::replay::Header::new(
                fingerprint(a.seed),
                &format!("swarm (lockstep {})", env!("CARGO_PKG_VERSION")),
                30,
                lockstep_core::wire::MAX_SEATS as u16,
                lockstep_core::replay::Topology::Relay,
            );
            header.recorder = a.name.clone();
            // Written on a thread of its own: the game never waits on the
            // disk.
            let out = lockstep_core::replay::Background::new(file, 8 << 20)
                .map_err(|e| PlayError::Options(format!("--record: {e}")))?;
            runner
                .record(header, Box::new(out))
                .map_err(|e| PlayError::Options(format!("--record: {e}")))?;
        }
        let (transport, where_) = connect(&a.relay, a.ca.as_deref(), Duration::from_secs(5))?;
        let screen = Screen::open()?;
        let status = format!("connecting to {where_}...");
        let in_room = format!("room {} on {where_}", a.room);
        Ok(Self {
            runner,
            a,
            clock,
            base_config,
            transport,
            where_,
            keys: Keys::default(),
            buffers: Buffers::default(),
            screen,
            last_draw: Instant::now() - Duration::from_secs(1),
            status,
            in_room,
            lost_since: None,
            outage: None,
            tries: 0,
            back: 0,
        })
    }

    /// A connection lost for 3 s (or timed out) is replaced by a new
    /// socket on which the session takes its seat back, while the relay
    /// still holds it: the game goes on from where it stopped (or, after a
    /// long absence, from a snapshot). Whether it tried.
    fn reconnect_if_lost(&mut self, now: Instant) -> Result<bool, PlayError> {
        let lost = self
            .lost_since
            .is_some_and(|t| now - t >= Duration::from_secs(3));
        let in_time = self.outage.is_none_or(|t| now - t < RECONNECT_FOR);
        if may_reconnect(self.runner.session(), self.outage, now)
            || (lost && in_time && self.runner.session().can_reconnect())
        {
            self.outage.get_or_insert(now);
            self.tries += 1;
            let secret = match self.base_config.secret {
                Some(_) => Some(
                    lockstep_net::session_secret()
                        .map_err(|e| PlayError::Connect(e.to_string()))?,
                ),
                None => None,
            };
            if self
                .runner
                .session_mut()
                .reconnect(WsClientTransport::SERVER, secret, self.clock.now())
                .is_ok()
            {
                // A short wait for the new connection: the screen is not
                // drawn meanwhile, and a failed try is repeated a second on.
                if let Ok((t, _)) =
                    connect(&self.a.relay, self.a.ca.as_deref(), Duration::from_secs(1))
                {
                    self.transport = t;
                }
                self.buffers = Buffers::default();
                self.lost_since = None;
                self.status = format!("connection lost: reconnecting ({})...", self.tries);
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Takes the keys pressed and released; whether the player quits or
    /// says it is ready (or not).
    fn read_keys(&mut self, now: Instant) -> Result<Asked, PlayError> {
        while event::poll(Duration::ZERO)? {
            match event::read()? {
                TermEvent::Key(k) => {
                    let quit = matches!(k.code, KeyCode::Char('q' | 'Q') | KeyCode::Esc)
                        || (k.code == KeyCode::Char('c')
                            && k.modifiers.contains(KeyModifiers::CONTROL));
                    if quit && k.kind != KeyEventKind::Release {
                        return Ok(Asked::Quit);
                    }
                    let code = match k.code {
                        KeyCode::Char(c) => KeyCode::Char(c.to_ascii_lowercase()),
                        other => other,
                    };
                    if code == KeyCode::Char('r')
                        && k.kind == KeyEventKind::Press
                        && self.runner.session().lobby().is_some()
                    {
                        return Ok(Asked::ToggleReady);
                    }
                    match k.kind {
                        KeyEventKind::Release => self.keys.release(code),
                        _ if code == KeyCode::Char('f') => self.keys.autofire = !self.keys.autofire,
                        _ => self.keys.press(code, now),
                    }
                }
                TermEvent::Resize(..) => self.last_draw = now - Duration::from_secs(1),
                _ => {}
            }
        }
        Ok(Asked::Nothing)
    }

    /// Says goodbye while the relay answers (a moment at most: the
    /// transport may be dead).
    fn say_goodbye(&mut self) {
        self.runner.session_mut().leave();
        let until = Instant::now() + Duration::from_millis(500);
        while self.runner.session().closed().is_none() && Instant::now() < until {
            if !self.exchange() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Why the session ended, in words, if it has and will not be replaced
    /// by a new connection.
    fn ended(&self, now: Instant) -> Option<String> {
        ended(self.runner.session(), &self.where_)
            .filter(|_| !may_reconnect(self.runner.session(), self.outage, now))
    }

    /// One exchange of datagrams with the transport; whether it still
    /// works.
    fn exchange(&mut self) -> bool {
        lockstep_net::drive(
            &mut self.runner,
            &mut self.transport,
            self.clock.now(),
            &mut self.buffers,
        )
        .is_ok()
    }

    /// One turn: datagrams in, the frames due run (on a steady clock, or
    /// catching up within a budget per render frame so the screen keeps
    /// drawing), the input due committed, datagrams out. A transport that
    /// died (a closed WebSocket) is replaced a second later, without
    /// waiting for the session to notice the silence. The game failing
    /// (a state that does not restore) ends `play`, in words.
    fn turn(&mut self, now: Instant) -> Result<(), String> {
        let keys = &mut self.keys;
        match turn(
            &mut self.runner,
            &mut self.transport,
            self.clock.now(),
            &mut self.buffers,
            |_| keys.input(now),
        ) {
            Ok(_) => Ok(()),
            Err(TurnError::Transport(_)) => {
                self.lost_since.get_or_insert(now - Duration::from_secs(2));
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// What the status line says of the match: the lobby and who is in
    /// it, the state arriving, catching up; `None` in play.
    fn match_status(&self) -> Option<String> {
        let s = self.runner.session();
        Some(match self.runner.status() {
            Status::InLobby(l) => {
                let rule = match l.start {
                    Start::Seated(n) => format!("starts at {n} players"),
                    Start::Ready { min } => {
                        format!("starts when all are ready (at least {min})")
                    }
                    _ => "starts when the host says".into(),
                };
                let names: Vec<String> = s
                    .roster()
                    .map(|e| {
                        let mark = if e.ready { "*" } else { "" };
                        format!("{}{mark}", display_name(&e.name))
                    })
                    .collect();
                let you = if s.is_ready() { "ready" } else { "not ready" };
                format!(
                    "lobby: {} seated, {} ready, {rule} · {} · you: {you}",
                    l.seated,
                    l.ready,
                    names.join(" ")
                )
            }
            Status::Loading { have, of } => format!("joining: the game's state, {have}/{of}"),
            Status::CatchingUp { behind } => format!("catching up: {behind} ticks behind"),
            _ => return None,
        })
    }

    /// The session's events: the status line, and a reconnect's outcome.
    fn take_events(&mut self, now: Instant) {
        while let Some(ev) = self.runner.poll_event() {
            match ev {
                Event::CaughtUp { .. } => self.status = self.in_room.clone(),
                // Back, with our state or (the runner restarted the game)
                // without it.
                Event::Reconnected { .. } => {
                    self.lost_since = None;
                    self.back += 1;
                    self.tries = 0;
                    self.outage = None;
                    self.in_room = format!(
                        "room {} on {} (reconnected {}x)",
                        self.a.room, self.where_, self.back
                    );
                    self.status = self.in_room.clone();
                }
                Event::Connected { .. } | Event::Recovered { .. } => {
                    self.lost_since = None;
                    self.status = self.in_room.clone();
                }
                Event::Desync { tick, .. } => {
                    self.status = format!("DESYNC detected at tick {tick}")
                }
                Event::Interrupted { .. } => {
                    self.lost_since.get_or_insert(now);
                    self.status = "the relay is not answering...".into();
                }
                Event::Rejected { reason } => self.status = format!("refused: {reason}"),
                Event::RecordingStopped { reason } => {
                    self.status = format!("recording stopped: {reason} (the game goes on)")
                }
                Event::Closed { reason } => self.status = format!("disconnected: {reason}"),
                _ => {}
            }
        }
    }

    /// The arena and the HUD, some 30 times a second.
    fn draw(&mut self, now: Instant) -> Result<(), PlayError> {
        if now - self.last_draw >= Duration::from_millis(33) {
            self.last_draw = now;
            let session = self.runner.session();
            let in_lobby = session.lobby().is_some();
            let hud = Hud {
                tick: self.runner.game().tick.get(),
                ping_ms: session.stats().rtt.map(|r| r.as_millis() as u32),
                loss_pct: {
                    let t = session.stats().traffic;
                    let pct = |l: f64| (l * 100.0).round() as u32;
                    t.loss_up.zip(t.loss_down).map(|(u, d)| (pct(u), pct(d)))
                },
                delay: session.welcome().map_or(0, |w| w.delay),
                stalls: (session.stats().stalls, session.stats().frames),
                me: session.seat(),
                spectator: self.a.watch,
                // Not while the relay is silent: its last word on whom the
                // game waits is stale.
                waiting_on: if session.stalled()
                    && !in_lobby
                    && self.lost_since.is_none()
                    && self.tries == 0
                {
                    session.awaiting()
                } else {
                    Vec::new()
                },
                status: self.match_status().unwrap_or_else(|| {
                    // Who plays which ship, by name.
                    let names: Vec<String> = session
                        .roster()
                        .map(|e| format!("{}:{}", e.seat.0, display_name(&e.name)))
                        .collect();
                    format!("{} · {}", self.status, names.join(" "))
                }),
                help: if in_lobby && !self.a.watch {
                    LOBBY_HELP
                } else {
                    HELP
                }
                .to_owned(),
            };
            let game = self.runner.game();
            self.screen.terminal.draw(|f| render::draw(f, game, &hud))?;
        }
        Ok(())
    }
}

/// Whether a session that ended will be replaced by a new connection: it
/// timed out after being welcomed, and tries are left.
fn may_reconnect(
    session: &ClientSession<PlayerInputs>,
    outage: Option<Instant>,
    now: Instant,
) -> bool {
    session.closed().is_some()
        && session.can_reconnect()
        && outage.is_none_or(|t| now - t < RECONNECT_FOR)
}

/// Why the session ended, in words, if it has.
fn ended(session: &ClientSession<PlayerInputs>, relay: &str) -> Option<String> {
    Some(match session.closed()? {
        CloseReason::TimedOut if session.welcome().is_none() => {
            format!("no answer from the relay at {relay}")
        }
        CloseReason::Rejected(lockstep_core::sequenced::Rejection::GameMismatch { .. }) => {
            format!("{}: is everyone using the same --seed?", session.closed()?)
        }
        other => other.to_string(),
    })
}

/// Refuses an address with a scheme `connect` does not speak.
fn check_address(relay: &str) -> Result<(), PlayError> {
    let udp = relay.strip_prefix("udp://").unwrap_or(relay);
    // A UDP address needs its port (an IPv6 one is written [addr]:port).
    let port = udp.rsplit_once(':').is_some_and(|(host, port)| {
        !port.is_empty() && (!host.contains(':') || host.ends_with(']'))
    });
    match relay.split_once("://") {
        Some(("udp", _)) | None if !port => Err(PlayError::Options(format!(
            "--relay: {relay} has no port: use host:port, e.g. 127.0.0.1:7777"
        ))),
        Some(("udp" | "ws" | "wss", _)) | None => Ok(()),
        Some((scheme, _)) => Err(PlayError::Options(format!(
            "--relay: {scheme}:// is not a relay address: use host:port (UDP), ws://host:port/ \
             or wss://host:port/"
        ))),
    }
}

fn connect(
    relay: &str,
    ca: Option<&std::path::Path>,
    timeout: Duration,
) -> Result<(Box<dyn Transport>, String), PlayError> {
    // The address as the screen shows it works too.
    let relay = relay.strip_prefix("udp://").unwrap_or(relay);
    if let Some(rest) = relay.strip_prefix("wss://") {
        let host = rest.split('/').next().unwrap_or(rest).to_owned();
        let t = match ca {
            Some(path) => {
                let pem = std::fs::read(path)
                    .map_err(|e| PlayError::Options(format!("{}: {e}", path.display())))?;
                let tls = lockstep_net::tls_trusting(&pem)
                    .map_err(|e| PlayError::Options(e.to_string()))?;
                WsClientTransport::connect_with_tls(relay, host.as_str(), timeout, tls)
            }
            None => WsClientTransport::connect(relay, host.as_str(), timeout),
        }
        .map_err(|e| PlayError::Connect(e.to_string()))?;
        return Ok((Box::new(t), relay.to_owned()));
    }
    if let Some(rest) = relay.strip_prefix("ws://") {
        let host = rest.split('/').next().unwrap_or(rest).to_owned();
        let t = WsClientTransport::connect(relay, host.as_str(), timeout).map_err(|e| {
            // A TLS listener answers a clear handshake with bytes that
            // are not HTTP.
            let hint = if e.to_string().contains("httparse") {
                " (does the relay serve wss:// there? try --relay wss://...)"
            } else {
                ""
            };
            PlayError::Connect(format!("{e}{hint}"))
        })?;
        Ok((Box::new(t), relay.to_owned()))
    } else {
        check_address(relay)?;
        let addr = std::net::ToSocketAddrs::to_socket_addrs(relay)
            .map_err(|e| PlayError::Connect(format!("{relay}: {e}")))?
            .next()
            .ok_or_else(|| PlayError::Connect(format!("{relay}: no address")))?;
        let bind = if addr.is_ipv4() {
            "0.0.0.0:0"
        } else {
            "[::]:0"
        };
        let mut t = UdpTransport::bind(bind).map_err(|e| PlayError::Connect(e.to_string()))?;
        t.add_peer(addr);
        Ok((Box::new(t), format!("udp://{addr}")))
    }
}
