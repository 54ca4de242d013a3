//! A host-mode match with the runner: one player's process hosts (it runs
//! the sequencer beside its own game), the others connect to it over
//! loopback UDP. The host opens a lobby and presses start once everyone is
//! seated, naming each player; then, at five seconds, the host's process
//! dies without a goodbye, and the others carry the match on under one of
//! them by themselves. Every player left prints the hash of its state
//! after the same tick; they must be equal, and the process exits
//! non-zero otherwise.
//!
//! ```text
//! cargo run -p lockstep-net --example host_game -- [players]
//! ```
//!
//! Glue, the lines a game writes besides its own logic (`Tally` and its
//! `Game` impl, the input) and this example's scaffolding (threads, the
//! host's death, the check): 18 lines of setup in `play` (the socket, the
//! clock, the config with the player's name and the start rule, the
//! session as host or as a player of the host's address, the runner,
//! buffers), 10 for the lobby (the host pressing start once all are
//! seated, and saying who they are), and 4 in the loop (the time,
//! `turn_hosted`, `wait`, the loop itself). The takeover takes none.

use lockstep_core::runner::{Runner, RunnerConfig, Status};
use lockstep_core::sequenced::{HostedConfig, HostedSession, SequencerConfig, Start};
use lockstep_core::{Frame, Game, Tick};
use lockstep_net::{Buffers, Clock, UdpTransport, turn_hosted, wait};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Duration;

/// The game: every seat's inputs summed, with the ticks run.
#[derive(Debug, Default)]
struct Tally {
    sum: u64,
    ticks: u32,
    /// The hash after tick `CHECK` (the example's check, not state).
    checked: Option<u64>,
}

/// The tick whose state every player left compares: well after the
/// takeover.
const CHECK: u32 = 420;

impl Game for Tally {
    type Input = u8;

    fn step(&mut self, frame: &Frame<u8>) {
        for (seat, i) in frame.inputs.iter().enumerate() {
            self.sum = self.sum.wrapping_mul(31) ^ (u64::from(i.unwrap_or(0)) << (seat % 8));
        }
        self.ticks += 1;
        if frame.tick == Tick::new(CHECK) {
            self.checked = Some(self.hash());
        }
    }

    fn hash(&self) -> u64 {
        self.sum ^ u64::from(self.ticks).rotate_left(40)
    }

    fn save(&self) -> Vec<u8> {
        [&self.sum.to_le_bytes()[..], &self.ticks.to_le_bytes()].concat()
    }

    fn restore(bytes: &[u8]) -> Result<Self, String> {
        let (s, t) = bytes.split_at_checked(8).ok_or("short state")?;
        Ok(Self {
            sum: u64::from_le_bytes(s.try_into().map_err(|_| "sum")?),
            ticks: u32::from_le_bytes(t.try_into().map_err(|_| "ticks")?),
            checked: None,
        })
    }
}

/// One player's whole program. The host (`host` is `None`) sends its
/// address on `bound` once it listens; it dies at five seconds.
fn play(
    me: u32,
    players: u16,
    host: Option<SocketAddr>,
    bound: mpsc::Sender<SocketAddr>,
) -> Result<Option<u64>, String> {
    let err = |e: &dyn std::fmt::Display| format!("player {me}: {e}");
    // --- glue: from here to the loop ---
    let mut udp = UdpTransport::bind("127.0.0.1:0")
        .map_err(|e| err(&e))?
        .accept_unknown(usize::from(players) * 2);
    let clock = Clock::new();
    let mut config = HostedConfig::default();
    config.client.name = format!("player{me}");
    // The match starts when the host says (it says once all are seated).
    config.sequencer = SequencerConfig {
        start: Start::Manual,
        // Keys the seats' resume tokens and the match's id.
        secret: lockstep_net::session_secret().map_err(|e| err(&e))?,
        ..SequencerConfig::default()
    };
    let session = match host {
        None => HostedSession::host(config, clock.now()),
        Some(addr) => HostedSession::join(config, udp.add_peer(addr), clock.now()),
    }
    .map_err(|e| err(&e))?;
    let mut runner =
        Runner::new(session, Tally::default(), RunnerConfig::default()).map_err(|e| err(&e))?;
    let mut buffers = Buffers::default();
    if host.is_none() {
        bound
            .send(udp.local_addr().map_err(|e| err(&e))?)
            .map_err(|e| err(&e))?;
    }
    // --- the loop: a render frame at 60 Hz ---
    let frame = Duration::from_micros(16_667);
    let dies_at = host.is_none().then(|| clock.now() + Duration::from_secs(5));
    let mut pressed = false;
    loop {
        let now = clock.now();
        if dies_at.is_some_and(|t| now >= t) {
            // The host's process dies: no goodbye, its socket gone.
            println!(
                "player {me} (the host): process gone at tick {}",
                runner.game().ticks
            );
            return Ok(None);
        }
        if now.as_micros() > 40_000_000 {
            return Err(err(&format!("stalled at tick {}", runner.game().ticks)));
        }
        // The lobby: who is seated, by name; the host starts the match
        // once everyone is.
        if let Status::InLobby(lobby) = runner.status()
            && lobby.seated == players
            && !pressed
            && let Some(room) = runner.session_mut().sequencer()
        {
            room.start_match();
            pressed = true;
            let names: Vec<String> = runner
                .session()
                .client()
                .roster()
                .map(|s| s.name.clone())
                .collect();
            println!(
                "player {me} (the host): all seated ({}), starting",
                names.join(", ")
            );
        }
        let input = (me as u8).wrapping_mul(3) ^ (now.as_micros() / 200_000) as u8;
        turn_hosted(&mut runner, &mut udp, now, &mut buffers, |_| input).map_err(|e| err(&e))?;
        if runner.status() == Status::Ended {
            return Err(err(&"the session ended"));
        }
        if runner.game().checked.is_some() {
            break;
        }
        wait(&runner, &mut udp, &clock, now + frame).map_err(|e| err(&e))?;
    }
    // A second more, so that the others get our inputs for the check tick.
    let until = clock.now() + Duration::from_secs(1);
    while clock.now() < until {
        let now = clock.now();
        turn_hosted(&mut runner, &mut udp, now, &mut buffers, |_| 0).map_err(|e| err(&e))?;
        wait(&runner, &mut udp, &clock, now + frame).map_err(|e| err(&e))?;
    }
    let hosting = if runner.session().hosting() {
        " (hosting now)"
    } else {
        ""
    };
    Ok(runner.game().checked.inspect(|h| {
        println!("player {me}{hosting}: hash after tick {CHECK} {h:016x}");
    }))
}

fn main() -> ExitCode {
    let players: u16 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .max(3);
    let (tx, rx) = mpsc::channel();
    let host = std::thread::spawn(move || play(0, players, None, tx));
    let Ok(addr) = rx.recv_timeout(Duration::from_secs(5)) else {
        eprintln!("the host did not start");
        return ExitCode::FAILURE;
    };
    let others: Vec<_> = (1..u32::from(players))
        .map(|me| {
            let (tx, _) = mpsc::channel();
            std::thread::spawn(move || play(me, players, Some(addr), tx))
        })
        .collect();
    let mut hashes = Vec::new();
    for h in std::iter::once(host).chain(others) {
        match h.join() {
            Ok(Ok(Some(hash))) => hashes.push(hash),
            Ok(Ok(None)) => {}
            Ok(Err(e)) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
            Err(_) => return ExitCode::FAILURE,
        }
    }
    if hashes.len() + 1 == usize::from(players) && hashes.windows(2).all(|w| w[0] == w[1]) {
        println!("all {} players left agree", hashes.len());
        ExitCode::SUCCESS
    } else {
        eprintln!("the players left differ, or some never reached tick {CHECK}");
        ExitCode::FAILURE
    }
}
