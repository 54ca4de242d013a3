//! A relay match played by `RelayClient`s: a relay on loopback, two
//! players from the start, a third joining from a snapshot four seconds
//! in, and the second player's link going dead at eight seconds (its
//! client takes its seat back on a new socket by itself). At the end every
//! player prints the hash of its state after the same tick; they must be
//! equal, and the process exits non-zero otherwise.
//!
//! ```text
//! cargo run -p lockstep-relay --example relay_game
//! ```
//!
//! Glue, the lines a game writes besides its own logic (`Pong` and its
//! `Game` impl, the input) and this example's scaffolding (the relay, the
//! three players in one loop, the dead link, the check): 2 lines to
//! connect (the room, `RelayClient::connect`) and 4 in the loop (`turn`,
//! the events, `wait`, the loop itself). Late join and reconnect take
//! none.

use lockstep_core::runner::{RunnerConfig, Status};
use lockstep_core::sequenced::ClientConfig;
use lockstep_core::{Frame, Game, PeerId, SystemEvent, Tick};
use lockstep_net::{RelayClient, UdpTransport};
use lockstep_relay::{BackgroundRelay, Bind, RelayConfig};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// A ball bouncing between walls, each seat's paddle moved by its input.
#[derive(Debug, Default)]
struct Pong {
    ball: (i32, i32),
    speed: (i32, i32),
    paddles: Vec<i32>,
    tick: u32,
    /// The hash after tick `CHECK` (the example's check, not state).
    checked: Option<u64>,
}

/// The tick whose state every player compares.
const CHECK: u32 = 450;

impl Game for Pong {
    /// -1, 0 or 1: the paddle's move.
    type Input = i8;

    fn step(&mut self, frame: &Frame<i8>) {
        for e in &frame.events {
            if let SystemEvent::Joined { player } = e {
                let seats = self.paddles.len().max(player.index() + 1);
                self.paddles.resize(seats, 0);
            }
        }
        for (paddle, input) in self.paddles.iter_mut().zip(&frame.inputs) {
            *paddle = (*paddle + i32::from(input.unwrap_or(0).clamp(-1, 1)) * 4).clamp(-100, 100);
        }
        if self.speed == (0, 0) {
            self.speed = (3, 2);
        }
        self.ball = (self.ball.0 + self.speed.0, self.ball.1 + self.speed.1);
        if self.ball.0.abs() > 200 {
            self.speed.0 = -self.speed.0;
        }
        if self.ball.1.abs() > 100 {
            self.speed.1 = -self.speed.1;
        }
        self.tick = frame.tick.get() + 1;
        if frame.tick == Tick::new(CHECK) {
            self.checked = Some(self.hash());
        }
    }

    fn hash(&self) -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for v in [self.ball.0, self.ball.1, self.speed.0, self.speed.1]
            .into_iter()
            .chain(self.paddles.iter().copied())
        {
            h = (h ^ v as u32 as u64).wrapping_mul(0x100_0000_01B3);
        }
        h ^ u64::from(self.tick)
    }

    fn save(&self) -> Vec<u8> {
        [
            self.ball.0,
            self.ball.1,
            self.speed.0,
            self.speed.1,
            self.tick as i32,
        ]
        .into_iter()
        .chain(self.paddles.iter().copied())
        .flat_map(i32::to_le_bytes)
        .collect()
    }

    fn restore(bytes: &[u8]) -> Result<Self, String> {
        let words: Vec<i32> = bytes
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let [bx, by, sx, sy, tick, paddles @ ..] = words.as_slice() else {
            return Err(format!("{} bytes is no Pong", bytes.len()));
        };
        Ok(Self {
            ball: (*bx, *by),
            speed: (*sx, *sy),
            paddles: paddles.to_vec(),
            tick: *tick as u32,
            checked: None,
        })
    }
}

fn main() -> ExitCode {
    let mut config = RelayConfig::default();
    config.room_defaults.snapshot_join = true;
    let relay = match BackgroundRelay::start(config, Bind::loopback()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("the relay did not start: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Some(addr) = relay.udp else {
        return ExitCode::FAILURE;
    };
    let connect = || {
        let room = ClientConfig {
            room: "pong".into(),
            ..ClientConfig::default()
        };
        RelayClient::connect(addr, room, Pong::default(), RunnerConfig::default())
    };
    let start = Instant::now();
    let mut players = Vec::new();
    let mut cut = false;
    let mut _hole = None;
    let deadline = start + Duration::from_secs(60);
    while players.len() < 3
        || players
            .iter()
            .any(|p: &RelayClient<Pong>| p.game().checked.is_none())
    {
        let elapsed = start.elapsed();
        if Instant::now() > deadline {
            eprintln!("the match did not reach tick {CHECK} within a minute");
            return ExitCode::FAILURE;
        }
        // Two players at once, a third four seconds in.
        if players.len() < 2 || (players.len() == 2 && elapsed > Duration::from_secs(4)) {
            match connect() {
                Ok(p) => players.push(p),
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        // At eight seconds the second player's link goes dead: its socket
        // is swapped for one whose "relay" nobody reads.
        if !cut && elapsed > Duration::from_secs(8) {
            cut = true;
            let (Ok(hole), Ok(mut dead)) = (
                std::net::UdpSocket::bind("127.0.0.1:0"),
                UdpTransport::bind("127.0.0.1:0"),
            ) else {
                return ExitCode::FAILURE;
            };
            if let Ok(a) = hole.local_addr() {
                let _ = dead.insert_peer(PeerId(0), a);
            }
            *players[1].transport_mut() = dead;
            _hole = Some(hole);
        }
        for (i, p) in players.iter_mut().enumerate() {
            // Each paddle follows the ball, a little late.
            let pulled = |g: &Pong| {
                let me = g.paddles.get(i).copied().unwrap_or(0);
                (g.ball.1 - me).signum() as i8
            };
            if let Err(e) = p.turn(pulled) {
                eprintln!("player {i}: {e}");
                return ExitCode::FAILURE;
            }
            while let Some(event) = p.poll_event() {
                if matches!(event, lockstep_core::Event::Reconnected { .. }) {
                    println!("player {i}: {event:?}");
                }
            }
            if p.status() == Status::Ended {
                eprintln!("player {i}: the session ended");
                return ExitCode::FAILURE;
            }
        }
        if let Some(p) = players.first_mut() {
            let _ = p.wait(Duration::from_millis(5));
        }
    }
    let hashes: Vec<u64> = players.iter().filter_map(|p| p.game().checked).collect();
    for (i, (p, h)) in players.iter().zip(&hashes).enumerate() {
        println!(
            "player {i}: after tick {CHECK} {h:016x} ({} reconnects)",
            p.reconnects()
        );
    }
    let _ = relay.stop();
    if hashes.windows(2).all(|w| w[0] == w[1]) && players[1].reconnects() > 0 {
        println!("all equal");
        ExitCode::SUCCESS
    } else {
        eprintln!("the players' states differ, or nobody reconnected");
        ExitCode::FAILURE
    }
}
