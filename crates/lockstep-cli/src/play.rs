//! `lockstep play`: swarm in a terminal, against a relay.

use clap::Args;
use crossterm::event::{
    self, Event as TermEvent, KeyCode, KeyEventKind, KeyModifiers, KeyboardEnhancementFlags,
    PopKeyboardEnhancementFlags, PushKeyboardEnhancementFlags,
};
use crossterm::{cursor, execute, terminal};
use lockstep_core::sequenced::{ClientConfig, ClientSession, CloseReason};
use lockstep_core::wire::InputCodec;
use lockstep_core::{Event, PlayerInputs};
use lockstep_demo::render::{self, Hud};
use lockstep_demo::{BOOST, FIRE, Game};
use lockstep_net::{Buffers, Clock, Transport, UdpTransport, WsClientTransport, drive};
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
struct Screen {
    terminal: Terminal<CrosstermBackend<Stdout>>,
    enhanced: bool,
}

impl Screen {
    fn open() -> Result<Self, PlayError> {
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
    let clock = Clock::new();
    let config = ClientConfig {
        room: a.room.clone(),
        name: a.name.clone(),
        spectator: a.watch,
        ticket: a.ticket.clone().map(|t| t.0).unwrap_or_default(),
        codec: InputCodec::PlayerInputs,
        fingerprint: fingerprint(a.seed),
        // Sealed datagrams over UDP; a WebSocket rides on TCP.
        secret: if a.relay.starts_with("ws://") || a.relay.starts_with("wss://") {
            None
        } else {
            Some(lockstep_net::session_secret().map_err(|e| PlayError::Connect(e.to_string()))?)
        },
        ..ClientConfig::default()
    };
    let base_config = config.clone();
    // The options are checked before anything touches the network.
    let mut session =
        ClientSession::<PlayerInputs>::new(config, WsClientTransport::SERVER, clock.now())
            .map_err(|e| PlayError::Options(format!("bad option: {e}")))?;
    check_address(&a.relay)?;
    use std::io::IsTerminal;
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        return Err(PlayError::Options(
            "play needs an interactive terminal (its input or output is not one)".into(),
        ));
    }
    let (mut transport, where_) = connect(&a.relay, a.ca.as_deref(), Duration::from_secs(5))?;
    let mut game = Game::new(a.seed);
    let mut snapshots = crate::snapshots::Snapshots::default();
    let mut catch_up = lockstep_core::CatchUp::default();
    // Ticks on a steady clock, a couple of frames kept ready (once the
    // room's tick rate is known).
    let mut pacer: Option<lockstep_core::Pacer> = None;
    let mut keys = Keys::default();
    let mut buffers = Buffers::default();
    let mut screen = Screen::open()?;
    let mut last_draw = Instant::now() - Duration::from_secs(1);
    let mut status = format!("connecting to {where_}...");
    let mut in_room = format!("room {} on {where_}", a.room);
    // Since when the relay has not been heard; since when we have been
    // trying to get back, and how often in this outage; times we got back.
    let mut lost_since: Option<Instant> = None;
    let mut outage: Option<Instant> = None;
    let mut tries = 0u32;
    let mut back = 0u32;
    let outcome = loop {
        let now = Instant::now();
        // A connection lost for 3 s (or timed out) is replaced by a new
        // socket on which the session takes its seat back, while the relay
        // still holds it: the game goes on from where it stopped (or, after
        // a long absence, from a snapshot).
        let lost = lost_since.is_some_and(|t| now - t >= Duration::from_secs(3));
        let in_time = outage.is_none_or(|t| now - t < RECONNECT_FOR);
        if may_reconnect(&session, outage, now) || (lost && in_time && session.can_reconnect()) {
            outage.get_or_insert(now);
            tries += 1;
            let secret = match base_config.secret {
                Some(_) => Some(
                    lockstep_net::session_secret()
                        .map_err(|e| PlayError::Connect(e.to_string()))?,
                ),
                None => None,
            };
            if session
                .reconnect(WsClientTransport::SERVER, secret, clock.now())
                .is_ok()
            {
                // A short wait for the new connection: the screen is not
                // drawn meanwhile, and a failed try is repeated a second on.
                if let Ok((t, _)) = connect(&a.relay, a.ca.as_deref(), Duration::from_secs(1)) {
                    transport = t;
                }
                buffers = Buffers::default();
                lost_since = None;
                status = format!("connection lost: reconnecting ({tries})...");
                continue;
            }
        }
        let mut quitting = false;
        while event::poll(Duration::ZERO)? {
            match event::read()? {
                TermEvent::Key(k) => {
                    let quit = matches!(k.code, KeyCode::Char('q' | 'Q') | KeyCode::Esc)
                        || (k.code == KeyCode::Char('c')
                            && k.modifiers.contains(KeyModifiers::CONTROL));
                    if quit && k.kind != KeyEventKind::Release {
                        quitting = true;
                        break;
                    }
                    let code = match k.code {
                        KeyCode::Char(c) => KeyCode::Char(c.to_ascii_lowercase()),
                        other => other,
                    };
                    match k.kind {
                        KeyEventKind::Release => keys.release(code),
                        _ if code == KeyCode::Char('f') => keys.autofire = !keys.autofire,
                        _ => keys.press(code, now),
                    }
                }
                TermEvent::Resize(..) => last_draw = now - Duration::from_secs(1),
                _ => {}
            }
        }
        if quitting {
            // Say goodbye while the relay answers (a moment at most: the
            // transport may be dead), then go.
            session.leave();
            let until = Instant::now() + Duration::from_millis(500);
            while session.closed().is_none() && Instant::now() < until {
                if drive(&mut session, &mut transport, clock.now(), &mut buffers).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            break None;
        }
        if let Some(reason) =
            ended(&session, &where_).filter(|_| !may_reconnect(&session, outage, now))
        {
            break Some(reason);
        }
        // A transport that died (a closed WebSocket) is replaced a second
        // later, without waiting for the session to notice the silence.
        if drive(&mut session, &mut transport, clock.now(), &mut buffers).is_err() {
            lost_since.get_or_insert(now - Duration::from_secs(2));
        }
        if let Err(e) = snapshots.restore(&mut session, &mut game) {
            break Some(e);
        }
        // Ticks run on a steady clock (frames arriving unevenly do not
        // make the ships jump); catching up runs at most a budget of ticks
        // per render frame, so the screen keeps drawing.
        let ready = session.stats().buffered_frames;
        if pacer.is_none()
            && let Some(w) = session.welcome()
        {
            pacer = lockstep_core::Pacer::new(
                w.tick_rate,
                lockstep_core::PacerConfig {
                    // One commit per tick run: the delay's spare ticks are
                    // in hand, one is the target (see `ready_to_pace`).
                    target: 1,
                    ..lockstep_core::PacerConfig::default()
                },
            )
            .ok();
        }
        let due = match pacer.as_mut() {
            Some(p) => {
                let paced = p.ticks_due(clock.now(), session.ready_to_pace());
                let delay = session.welcome().map_or(0, |w| w.delay);
                let behind = ready as u32 >= delay + p.config().catch_up_beyond;
                if behind || session.joining() {
                    catch_up.ticks(ready).max(1)
                } else {
                    paced as usize
                }
            }
            None => catch_up.ticks(ready).max(1),
        };
        // A commit the loop could not make when its frame ran (refused in
        // a pause, say) is made now: the next frame may wait on it.
        if session.input_due() {
            let _ = session.commit_local(keys.input(now));
        }
        let started = Instant::now();
        let mut ran = 0;
        while ran < due {
            let Some(frame) = session.advance() else {
                break;
            };
            game.step(&frame);
            ran += 1;
            let _ = session.report_checksum(frame.tick, game.hash());
            snapshots.donate(&mut session, &game);
            // The input for the tick `delay` ahead, as this one runs.
            if session.input_due() {
                let _ = session.commit_local(keys.input(now));
            }
        }
        catch_up.ran(ran, started.elapsed());
        if session.joining() {
            status = match session.snapshot_progress() {
                Some((have, of)) => format!("joining: the game's state, {have}/{of}"),
                None if game.tick == lockstep_core::Tick::ZERO => "joining...".into(),
                None => format!(
                    "catching up: tick {} of {}",
                    game.tick,
                    session.stats().server_open
                ),
            };
        }
        while let Some(ev) = session.poll_event() {
            snapshots.on_event(&ev);
            match ev {
                Event::CaughtUp { .. } => status = in_room.clone(),
                // Back without our state: start over; a snapshot follows,
                // or the game from its start.
                Event::Reconnected { kept, .. } => {
                    if !kept {
                        game = Game::new(a.seed);
                        snapshots = crate::snapshots::Snapshots::default();
                    }
                    lost_since = None;
                    back += 1;
                    tries = 0;
                    outage = None;
                    in_room = format!("room {} on {where_} (reconnected {back}x)", a.room);
                    status = in_room.clone();
                }
                Event::Connected { .. } | Event::Recovered { .. } => {
                    lost_since = None;
                    status = in_room.clone();
                }
                Event::Desync { tick, .. } => status = format!("DESYNC detected at tick {tick}"),
                Event::Interrupted { .. } => {
                    lost_since.get_or_insert(now);
                    status = "the relay is not answering...".into();
                }
                Event::Rejected { reason } => status = format!("refused: {reason}"),
                Event::Closed { reason } => status = format!("disconnected: {reason}"),
                _ => {}
            }
        }
        snapshots.donate(&mut session, &game);
        if drive(&mut session, &mut transport, clock.now(), &mut buffers).is_err() {
            lost_since.get_or_insert(now - Duration::from_secs(2));
        }
        if let Some(reason) =
            ended(&session, &where_).filter(|_| !may_reconnect(&session, outage, now))
        {
            break Some(reason);
        }
        if now - last_draw >= Duration::from_millis(33) {
            last_draw = now;
            let hud = Hud {
                tick: game.tick.get(),
                ping_ms: session.stats().rtt.map(|r| r.as_millis() as u32),
                loss_pct: {
                    let t = session.stats().traffic;
                    let pct = |l: f64| (l * 100.0).round() as u32;
                    t.loss_up.zip(t.loss_down).map(|(u, d)| (pct(u), pct(d)))
                },
                delay: session.welcome().map_or(0, |w| w.delay),
                stalls: (session.stats().stalls, session.stats().frames),
                me: session.seat(),
                spectator: a.watch,
                // Not while the relay is silent: its last word on whom the
                // game waits is stale.
                waiting_on: if session.stalled() && lost_since.is_none() && tries == 0 {
                    session.awaiting()
                } else {
                    Vec::new()
                },
                status: status.clone(),
                help: HELP.to_owned(),
            };
            screen.terminal.draw(|f| render::draw(f, &game, &hud))?;
        }
        // Idle until input arrives or a millisecond passes.
        let _ = event::poll(Duration::from_millis(1))?;
    };
    drop(screen);
    match outcome {
        None => Ok(()),
        Some(reason) if reason == "left" => Ok(()),
        Some(reason) => Err(PlayError::Closed(reason)),
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
