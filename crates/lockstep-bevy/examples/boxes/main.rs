//! Boxes: each player steers a box on a plane (the game `bevy_ggrs` ships
//! as its example, in whole numbers so that every machine computes the
//! same), played through the lockstep plugin.
//!
//! Headless, in this terminal (the default): a relay in this process and
//! two bot players, each its own Bevy app; a picture of the plane and every
//! app's tick and state hash once a second.
//!
//! ```sh
//! cargo run -p lockstep-bevy --example boxes                     # relay, two players
//! cargo run -p lockstep-bevy --example boxes -- --late-join      # a third joins at 4 s
//! cargo run -p lockstep-bevy --example boxes -- --drop-reconnect # player 2's link cut at 4 s
//! cargo run -p lockstep-bevy --example boxes -- --mesh           # peer to peer on loopback
//! cargo run -p lockstep-bevy --example boxes -- --relay 127.0.0.1:7777 --room boxes
//! ```
//!
//! In a window, with the cargo feature `window` (a rendered Bevy build: it
//! takes a while the first time): you steer the first box with the arrow
//! keys or WASD, and the other players are bots, each on its own thread;
//! the same flags apply, and `--headless` plays in the terminal after all.
//!
//! ```sh
//! cargo run -p lockstep-bevy --example boxes --features window -- --late-join
//! ```
//!
//! `--relay` plays one player (you, in a window; a bot in the terminal)
//! against a relay of yours (`lockstep relay`); run it on two machines for
//! a match. Every run ends at `--ticks` (600) and checks that every app in
//! it ended on the same state.

use bevy::prelude::*;
use lockstep_bevy::prelude::*;
use lockstep_core::sequenced::{ClientConfig, ClientSession};
use lockstep_core::{
    Instant, MeshConfig, MeshSession, PeerId, PlayerId, Roster, SystemEvent, Tick,
};
use lockstep_net::{Transport, TransportError, UdpTransport};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[cfg(feature = "window")]
mod window;

const UP: u8 = 1;
const DOWN: u8 = 2;
const LEFT: u8 = 4;
const RIGHT: u8 = 8;

/// The plane's half width, in millimetres.
const HALF: i32 = 2_400;
/// Speed gained per tick a key is held, and the most, in mm per tick.
const ACCELERATION: i32 = 10;
const MAX_SPEED: i32 = 50;

/// A player's box: position and velocity in millimetres (and per tick).
#[derive(Component, Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[require(Simulated)]
struct Player {
    seat: u16,
    x: i32,
    z: i32,
    vx: i32,
    vz: i32,
}

/// Ticks run, as the simulation counts them (a resource of its state).
#[derive(Resource, Debug, Default, Clone, Copy, Serialize, Deserialize)]
struct FrameCount(u32);

/// Boxes join and leave with their seats, and move by their inputs.
fn move_boxes(
    mut commands: Commands,
    frame: Res<FrameInputs<u8>>,
    mut boxes: Query<(Entity, &mut Player)>,
    mut count: ResMut<FrameCount>,
) {
    for e in &frame.events {
        match *e {
            SystemEvent::Joined { player } => {
                // Seats start around a circle (a square, in whole numbers).
                let corner = [(-1, -1), (1, -1), (1, 1), (-1, 1)][player.index() % 4];
                commands.spawn(Player {
                    seat: player.0,
                    x: corner.0 * HALF / 2,
                    z: corner.1 * HALF / 2,
                    ..Player::default()
                });
            }
            SystemEvent::Left { player } | SystemEvent::Abandoned { player } => {
                for (entity, p) in &boxes {
                    if p.seat == player.0 {
                        commands.entity(entity).despawn();
                    }
                }
            }
            _ => {}
        }
    }
    for (_, mut p) in &mut boxes {
        let input = frame.input(PlayerId(p.seat)).copied().unwrap_or(0);
        let axis =
            |plus: u8, minus: u8| i32::from(input & plus != 0) - i32::from(input & minus != 0);
        let (ax, az) = (axis(RIGHT, LEFT), axis(DOWN, UP));
        p.vx = if ax == 0 {
            p.vx * 7 / 8
        } else {
            p.vx + ax * ACCELERATION
        };
        p.vz = if az == 0 {
            p.vz * 7 / 8
        } else {
            p.vz + az * ACCELERATION
        };
        p.vx = p.vx.clamp(-MAX_SPEED, MAX_SPEED);
        p.vz = p.vz.clamp(-MAX_SPEED, MAX_SPEED);
        p.x = (p.x + p.vx).clamp(-HALF, HALF);
        p.z = (p.z + p.vz).clamp(-HALF, HALF);
    }
    count.0 += 1;
}

/// A bot's hands on the keys: a new direction now and then.
#[derive(Resource)]
struct Bot {
    seed: u64,
    keys: u8,
}

fn bot_keys(mut bot: ResMut<Bot>, mut input: ResMut<LocalInput<u8>>) {
    bot.seed = bot
        .seed
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1);
    if (bot.seed >> 60) == 0 {
        bot.keys = ((bot.seed >> 40) % 16) as u8;
    }
    input.0 = bot.keys;
}

/// The game's part of an app, whatever shows it: its state, registered
/// with the plugin, and its simulation.
fn game(app: &mut App) -> &mut App {
    app.init_resource::<FrameCount>()
        .lockstep_component::<Player>()
        .lockstep_resource::<FrameCount>()
        .add_systems(LockstepSchedule, move_boxes)
}

/// A bot player's app: headless, the plugin, the game, a bot on the keys.
fn app(seed: u64, session: LockstepSession<u8>) -> App {
    let mut app = App::new();
    app.add_plugins((MinimalPlugins, LockstepPlugin::<u8>::default()));
    game(&mut app)
        .insert_resource(Bot { seed, keys: 0 })
        .add_systems(LockstepInput, bot_keys)
        .insert_resource(session);
    app
}

/// Whether an app's session is over, however it ended.
fn over(app: &App) -> bool {
    app.world().resource::<LockstepStatus>().is_over()
}

/// A UDP socket whose link can be cut, as a pulled cable cuts it.
struct Cuttable {
    udp: UdpTransport,
    cut: Arc<AtomicBool>,
}

impl Transport for Cuttable {
    fn send(&mut self, to: PeerId, datagram: &[u8]) -> Result<(), TransportError> {
        if self.cut.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.udp.send(to, datagram)
    }
    fn recv(&mut self, buf: &mut [u8]) -> Result<Option<(PeerId, usize)>, TransportError> {
        let got = self.udp.recv(buf)?;
        Ok(got.filter(|_| !self.cut.load(Ordering::Relaxed)))
    }
}

/// A relay client that takes its seat back on a new socket by itself;
/// `cut` cuts its first socket's link.
fn reconnecting(
    relay: SocketAddr,
    room: &str,
    cut: Arc<AtomicBool>,
) -> Result<LockstepSession<u8>, String> {
    let config = ClientConfig {
        room: room.into(),
        secret: Some(lockstep_net::session_secret().map_err(|e| e.to_string())?),
        ..ClientConfig::default()
    };
    let mut udp = UdpTransport::bind("0.0.0.0:0").map_err(|e| e.to_string())?;
    let server = udp.add_peer(relay);
    let session = ClientSession::new(config, server, Instant::ZERO).map_err(|e| e.to_string())?;
    let first = Cuttable { udp, cut };
    Ok(LockstepSession::client_reconnecting(
        session,
        first,
        move || {
            let mut udp = UdpTransport::bind("0.0.0.0:0").map_err(|e| e.to_string())?;
            let server = udp.add_peer(relay);
            Ok(lockstep_bevy::Reopened {
                transport: Cuttable {
                    udp,
                    cut: Arc::new(AtomicBool::new(false)),
                },
                server,
                secret: Some(lockstep_net::session_secret().map_err(|e| e.to_string())?),
            })
        },
    ))
}

/// Two (or more) players in a mesh on loopback UDP.
fn mesh(players: u16) -> Result<Vec<LockstepSession<u8>>, String> {
    let mut sockets = Vec::new();
    for _ in 0..players {
        sockets.push(UdpTransport::bind("127.0.0.1:0").map_err(|e| e.to_string())?);
    }
    let addrs: Vec<SocketAddr> = sockets
        .iter()
        .map(|s| s.local_addr().map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    let mut out = Vec::new();
    for (me, mut udp) in sockets.into_iter().enumerate() {
        let mut roster = Roster::new();
        for (k, addr) in addrs.iter().enumerate() {
            let peer = if k == me {
                PeerId(u32::MAX - 1)
            } else {
                udp.add_peer(*addr)
            };
            roster = roster.player(peer, PlayerId(k as u16));
        }
        let session = MeshSession::new(
            MeshConfig::default(),
            roster,
            PeerId(u32::MAX - 1),
            Instant::ZERO,
        )
        .map_err(|e| e.to_string())?;
        out.push(LockstepSession::mesh(session, udp));
    }
    Ok(out)
}

struct Options {
    late_join: bool,
    drop_reconnect: bool,
    mesh: bool,
    relay: Option<SocketAddr>,
    room: String,
    ticks: u32,
    /// In this terminal even when built with the window.
    headless: bool,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        late_join: false,
        drop_reconnect: false,
        mesh: false,
        relay: None,
        room: "boxes".into(),
        ticks: 600,
        headless: !cfg!(feature = "window"),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--late-join" => o.late_join = true,
            "--drop-reconnect" => o.drop_reconnect = true,
            "--mesh" => o.mesh = true,
            "--headless" => o.headless = true,
            "--relay" => {
                let v = args.next().ok_or("--relay needs HOST:PORT")?;
                o.relay = Some(v.parse().map_err(|e| format!("--relay {v}: {e}"))?);
            }
            "--room" => o.room = args.next().ok_or("--room needs a name")?,
            "--ticks" => {
                let v = args.next().ok_or("--ticks needs a number")?;
                o.ticks = v.parse().map_err(|e| format!("--ticks {v}: {e}"))?;
            }
            "-h" | "--help" => {
                println!(
                    "boxes [--late-join] [--drop-reconnect] [--mesh] [--relay HOST:PORT] [--room NAME] [--ticks N] [--headless]"
                );
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other} (see --help)")),
        }
    }
    if o.mesh && (o.late_join || o.drop_reconnect || o.relay.is_some()) {
        return Err("--mesh plays two peers from the start: --late-join, --drop-reconnect and --relay are for a relay".into());
    }
    Ok(o)
}

/// The plane as text: each box a digit (its seat) on a 48 by 12 grid.
fn picture(app: &mut App) -> String {
    let (w, h) = (48usize, 12usize);
    let mut grid = vec![vec!['.'; w]; h];
    let world = app.world_mut();
    for p in world.query::<&Player>().iter(world) {
        let col = ((p.x + HALF) as usize * (w - 1)) / (2 * HALF as usize);
        let row = ((p.z + HALF) as usize * (h - 1)) / (2 * HALF as usize);
        grid[row][col] = char::from_digit(u32::from(p.seat % 10), 10).unwrap_or('#');
    }
    grid.into_iter()
        .map(|r| r.into_iter().collect::<String>() + "\n")
        .collect()
}

fn line(k: usize, app: &App) -> String {
    let status = app.world().resource::<LockstepStatus>();
    let stats = app.world().resource::<LockstepStats>();
    let tick = app.world().resource::<SimTime>().tick;
    let hash = lockstep_bevy::state_hash(app.world()).unwrap_or(0);
    format!(
        "player {k}: tick {tick:>4}  hash {hash:016x}  ping {:>6}  delay {}  {status:?}",
        stats
            .ping
            .map_or("-".into(), |p| format!("{} ms", p.as_millis())),
        stats.delay
    )
}

/// A player who joins the relay's room mid-match.
fn late_player(relay: SocketAddr, room: &str, ticks: u32) -> Result<LockstepSession<u8>, String> {
    let mut session = reconnecting(relay, room, Arc::new(AtomicBool::new(false)))?;
    session.set_last_tick(Some(Tick::new(ticks)));
    Ok(session)
}

fn main() -> Result<(), String> {
    let o = options()?;
    // A relay in this process, unless one is named.
    let local = if o.relay.is_none() && !o.mesh {
        let bind = lockstep_relay::Bind {
            udp: Some(([127, 0, 0, 1], 0).into()),
            ws: None,
            http: None,
        };
        let mut config = lockstep_relay::RelayConfig::default();
        config.room_defaults.snapshot_join = true;
        config.room_defaults.snapshot_join_after = 0;
        Some(lockstep_relay::BackgroundRelay::start(config, bind).map_err(|e| e.to_string())?)
    } else {
        None
    };
    let relay = o.relay.or(local.as_ref().and_then(|r| r.udp));
    let cut = Arc::new(AtomicBool::new(false));
    let last = Some(Tick::new(o.ticks));
    let mut players: Vec<(LockstepSession<u8>, u64)> = Vec::new();
    match relay {
        _ if o.mesh => {
            for (k, s) in mesh(2)?.into_iter().enumerate() {
                players.push((s, 11 + k as u64));
            }
        }
        Some(relay) if o.relay.is_some() => {
            let s = reconnecting(relay, &o.room, Arc::new(AtomicBool::new(false)))?;
            players.push((s, std::process::id().into()));
        }
        Some(relay) => {
            let s = reconnecting(relay, &o.room, Arc::new(AtomicBool::new(false)))?;
            players.push((s, 11));
            players.push((reconnecting(relay, &o.room, cut.clone())?, 12));
        }
        None => return Err("no relay".into()),
    }
    for (s, _) in &mut players {
        s.set_last_tick(last);
    }
    #[cfg(feature = "window")]
    let ended = if o.headless {
        terminal(&o, relay, &cut, players)
    } else {
        window::run(&o, relay, cut, players)
    };
    #[cfg(not(feature = "window"))]
    let ended = terminal(&o, relay, &cut, players);
    drop(local);
    ended
}

/// The match in this terminal: every player a bot, each its own app,
/// updated in turn at 60 updates a second.
fn terminal(
    o: &Options,
    relay: Option<SocketAddr>,
    cut: &AtomicBool,
    players: Vec<(LockstepSession<u8>, u64)>,
) -> Result<(), String> {
    let mut apps: Vec<App> = players.into_iter().map(|(s, seed)| app(seed, s)).collect();
    let frame = Duration::from_micros(16_667);
    let began = std::time::Instant::now();
    let mut shown = 0u32;
    let mut joined = false;
    loop {
        for a in &mut apps {
            a.update();
        }
        let secs = began.elapsed().as_secs_f32();
        if secs >= 4.0 && o.late_join && !joined {
            if let Some(relay) = relay {
                println!("-- a third player joins mid-match (from a snapshot)");
                apps.push(app(13, late_player(relay, &o.room, o.ticks)?));
            }
            joined = true;
        }
        if secs >= 4.0 && o.drop_reconnect && !cut.swap(true, Ordering::Relaxed) {
            println!("-- player 1's link is cut; it takes its seat back on a new socket");
        }
        let second = began.elapsed().as_secs() as u32;
        if second > shown {
            shown = second;
            print!("{}", picture(&mut apps[0]));
            for (k, a) in apps.iter().enumerate() {
                println!("{}", line(k, a));
            }
            println!();
        }
        if apps.iter().all(over) {
            break;
        }
        if began.elapsed() > Duration::from_secs(u64::from(o.ticks) / 10 + 60) {
            return Err("the match did not finish in time".into());
        }
        std::thread::sleep(frame);
    }
    for (k, a) in apps.iter().enumerate() {
        println!("{}", line(k, a));
    }
    let hashes: Vec<Option<u64>> = apps
        .iter()
        .map(|a| lockstep_bevy::state_hash(a.world()))
        .collect();
    if hashes.windows(2).all(|w| w[0] == w[1]) && hashes.iter().all(Option::is_some) {
        println!("every app ended on the same state");
        Ok(())
    } else {
        Err(format!("the apps ended on different states: {hashes:?}"))
    }
}
