//! A mesh game over UDP with the runner: each player is a thread with its
//! own socket on loopback, and each plays "tug of war" (every player pulls
//! a rope left or right each tick; the rope's position is the state) for
//! ten seconds. At the end every player prints its rope and state hash;
//! they must all be equal, and the process exits non-zero otherwise.
//!
//! ```text
//! cargo run -p lockstep-net --example mesh_game -- [players] [seconds]
//! ```
//!
//! Glue, the lines a game writes besides its own logic (`Rope` and its
//! `Game` impl, the input) and this example's own scaffolding (threads,
//! arguments, the end of the match and the check): 18 lines of setup in
//! `play` (the socket and the other players' addresses under their roster
//! ids, the clock, the session, the runner, buffers), and 4 in the loop
//! (the time, `turn`, `wait`, and the loop itself).

use lockstep_core::runner::{Runner, RunnerConfig, Status};
use lockstep_core::{Frame, Game, Instant, MeshConfig, MeshSession, PeerId, PlayerId, Roster};
use lockstep_net::{Buffers, Clock, UdpTransport, turn, wait};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

/// The game: a rope pulled by every player.
#[derive(Debug, Default)]
struct Rope {
    position: i64,
    ticks: u32,
    /// Ticks in the match (set at the start).
    last: u32,
    /// The state hash after the match's last tick, once run (not
    /// part of the state: the example's check).
    at_end: Option<u64>,
}

/// Ticks in a match of `seconds` at the mesh's 30 Hz.
const fn last_tick(seconds: u64) -> u32 {
    (seconds * 30) as u32
}

impl Game for Rope {
    /// -1 (left), 0 or 1 (right).
    type Input = i8;

    fn step(&mut self, frame: &Frame<i8>) {
        for pull in frame.inputs.iter().flatten() {
            self.position += i64::from((*pull).clamp(-1, 1));
        }
        self.ticks += 1;
        if frame.tick.get() + 1 == self.last {
            self.at_end = Some(self.hash());
        }
    }

    fn hash(&self) -> u64 {
        (self.position as u64).rotate_left(32) ^ u64::from(self.ticks)
    }

    fn save(&self) -> Vec<u8> {
        [
            &self.position.to_le_bytes()[..],
            &self.ticks.to_le_bytes(),
            &self.last.to_le_bytes(),
        ]
        .concat()
    }

    fn restore(bytes: &[u8]) -> Result<Self, String> {
        let (p, rest) = bytes.split_at_checked(8).ok_or("short state")?;
        let (t, l) = rest.split_at_checked(4).ok_or("short state")?;
        Ok(Self {
            position: i64::from_le_bytes(p.try_into().map_err(|_| "position")?),
            ticks: u32::from_le_bytes(t.try_into().map_err(|_| "ticks")?),
            last: u32::from_le_bytes(l.try_into().map_err(|_| "last")?),
            at_end: None,
        })
    }
}

/// One player's whole program: its socket, its session, its loop.
fn play(me: u32, sockets: Vec<std::net::UdpSocket>, seconds: u64) -> Result<Rope, String> {
    let addrs: Vec<SocketAddr> = sockets.iter().map(|s| s.local_addr().unwrap()).collect();
    let socket = sockets.into_iter().nth(me as usize).ok_or("no socket")?;
    // --- glue: from here to the loop ---
    let mut udp = UdpTransport::from_socket(socket).map_err(|e| e.to_string())?;
    let mut roster = Roster::new();
    for (i, addr) in addrs.iter().enumerate() {
        roster = roster.player(PeerId(i as u32), PlayerId(i as u16));
        if i as u32 != me {
            udp.insert_peer(PeerId(i as u32), *addr)
                .map_err(|e| e.to_string())?;
        }
    }
    let clock = Clock::new();
    let session = MeshSession::new(MeshConfig::default(), roster, PeerId(me), clock.now())
        .map_err(|e| e.to_string())?;
    let rope = Rope {
        last: last_tick(seconds),
        ..Rope::default()
    };
    let mut runner =
        Runner::new(session, rope, RunnerConfig::default()).map_err(|e| e.to_string())?;
    let mut buffers = Buffers::default();
    // --- the loop: a render frame at 60 Hz ---
    let frame = Duration::from_micros(16_667);
    let (last, mut done_at) = (last_tick(seconds), None);
    // Past the last tick a player plays on for a second, so that its
    // inputs for it reach everyone.
    while done_at.is_none_or(|t| clock.now() < t + Duration::from_secs(1)) {
        let now = clock.now();
        if now > Instant::ZERO + Duration::from_secs(seconds + 20) {
            return Err(format!(
                "player {me}: stalled at tick {}",
                runner.game().ticks
            ));
        }
        // This player pulls one way for a second, then the other.
        let pull = if (now.as_micros() / 1_000_000 + u64::from(me)).is_multiple_of(2) {
            1
        } else {
            -1
        };
        turn(&mut runner, &mut udp, now, &mut buffers, |_rope| pull).map_err(|e| e.to_string())?;
        if runner.status() == Status::Ended {
            return Err(format!("player {me}: the session ended"));
        }
        if runner.game().ticks >= last && done_at.is_none() {
            done_at = Some(now);
        }
        wait(&runner, &mut udp, &clock, now + frame).map_err(|e| e.to_string())?;
    }
    let (_, rope) = runner.into_parts();
    Ok(rope)
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let players: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(3);
    let seconds: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(10);
    let sockets = || -> std::io::Result<Vec<_>> {
        (0..players)
            .map(|_| std::net::UdpSocket::bind("127.0.0.1:0"))
            .collect()
    };
    let Ok(bound) = sockets() else {
        eprintln!("could not bind loopback sockets");
        return ExitCode::FAILURE;
    };
    let handles: Vec<_> = (0..players)
        .map(|me| {
            let mine: Vec<_> = bound.iter().map(|s| s.try_clone().unwrap()).collect();
            std::thread::spawn(move || play(me, mine, seconds))
        })
        .collect();
    let mut ends = Vec::new();
    for (me, h) in handles.into_iter().enumerate() {
        match h.join() {
            Ok(Ok(rope)) => {
                let end = rope.at_end.unwrap_or_default();
                println!(
                    "player {me}: hash after {} ticks {end:016x} (rope at {} after {})",
                    rope.last, rope.position, rope.ticks
                );
                ends.push(end);
            }
            Ok(Err(e)) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
            Err(_) => return ExitCode::FAILURE,
        }
    }
    if ends.windows(2).all(|w| w[0] == w[1]) {
        println!("all equal");
        ExitCode::SUCCESS
    } else {
        eprintln!("the players' states differ");
        ExitCode::FAILURE
    }
}
