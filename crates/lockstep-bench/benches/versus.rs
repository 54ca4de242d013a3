//! lockstep's mesh and GGRS 0.13 in lockstep mode (`max_prediction = 0`),
//! side by side over the same impaired link: real loopback UDP, every
//! datagram each side sends delayed 30 ms and dropped 5% of the time by
//! `lockstep_net::ImpairedLink` (GGRS through its `NonBlockingSocket`).
//! 2 and 4 players at 60 Hz, each library at its best input delay (of 1 to
//! 6 ticks: the lowest latency stalling at most 0.5% of ticks, or else the
//! one stalling least).
//!
//! Both run the same loop on a steady 60 Hz clock: when a tick is due,
//! advance; if the frame is not confirmed the tick stalls (counted once)
//! and the loop looks again a moment later, catching up at most two ticks
//! per look. Figures: ticks run per second (of 60), the share of ticks
//! that stalled, and the mean time from adding an input to running the
//! frame it belongs to.

mod common;

use common::GgrsConfig;
use ggrs::{GgrsRequest, Message, NonBlockingSocket, PlayerType, SessionBuilder, SessionState};
use lockstep_bench::{PadInput, Trace, loopback_sockets};
use lockstep_core::{
    AdaptiveDelay, Instant as CoreInstant, MeshConfig, MeshSession, PeerId, PlayerId, Roster,
};
use lockstep_core::{PlayerInputs, StreamHash};
use lockstep_net::{Faults, ImpairedLink};
use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

const RATE: u32 = 60;
const SECONDS: u64 = 12;
const WARMUP: Duration = Duration::from_secs(2);
const TARGET: f64 = 0.005;

fn faults() -> Faults {
    Faults {
        latency: Duration::from_millis(30),
        loss: 0.05,
        ..Faults::default()
    }
}

/// A UDP socket whose every datagram goes out through an impaired link.
struct Impaired {
    socket: UdpSocket,
    link: ImpairedLink<SocketAddr>,
    buf: Vec<u8>,
}

impl Impaired {
    fn new(socket: UdpSocket, seed: u64) -> Self {
        Self {
            socket,
            link: ImpairedLink::new(faults(), seed),
            buf: vec![0; 65_536],
        }
    }

    fn send(&mut self, to: SocketAddr, bytes: &[u8]) {
        self.link.push(Instant::now(), to, bytes);
        self.flush();
    }

    fn flush(&mut self) {
        while let Some((to, bytes)) = self.link.pop_due(Instant::now()) {
            let _ = self.socket.send_to(&bytes, to);
        }
    }

    fn recv(&mut self) -> Option<(SocketAddr, &[u8])> {
        self.flush();
        match self.socket.recv_from(&mut self.buf) {
            Ok((n, from)) => Some((from, &self.buf[..n])),
            Err(e) if e.kind() == ErrorKind::WouldBlock => None,
            Err(_) => None,
        }
    }
}

impl NonBlockingSocket<SocketAddr> for Impaired {
    fn send_to(&mut self, msg: &Message, addr: &SocketAddr) {
        if let Ok(bytes) = bincode::serialize(msg) {
            self.send(*addr, &bytes);
        }
    }

    fn receive_all_messages(&mut self) -> Vec<(SocketAddr, Message)> {
        let mut out = Vec::new();
        while let Some((from, bytes)) = self.recv() {
            if let Ok(m) = bincode::deserialize(bytes) {
                out.push((from, m));
            }
        }
        out
    }
}

/// One player's steady clock and what it saw.
struct Clock {
    due: Instant,
    ran: u64,
    stalled: u64,
    stalled_at: Option<u64>,
    /// When each frame's own input was added, by frame.
    added: HashMap<u64, Instant>,
    latency: Duration,
    timed: u64,
    counting: bool,
}

impl Clock {
    fn new(start: Instant) -> Self {
        Self {
            due: start,
            ran: 0,
            stalled: 0,
            stalled_at: None,
            added: HashMap::new(),
            latency: Duration::ZERO,
            timed: 0,
            counting: false,
        }
    }

    fn stall(&mut self, frame: u64) {
        if self.stalled_at != Some(frame) {
            self.stalled_at = Some(frame);
            if self.counting {
                self.stalled += 1;
            }
        }
    }

    /// Frame `frame` ran now; its own input was added for it earlier.
    fn ran(&mut self, frame: u64, period: Duration) {
        if let Some(at) = self.added.remove(&frame)
            && self.counting
        {
            self.latency += at.elapsed();
            self.timed += 1;
        }
        if self.counting {
            self.ran += 1;
        }
        self.due += period;
    }

    fn settle(&mut self, period: Duration) {
        let now = Instant::now();
        if self.due + period * 2 < now {
            self.due = now - period * 2;
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Outcome {
    ticks_per_sec: f64,
    stall_rate: f64,
    latency: Duration,
    agreed: bool,
}

fn outcome(clocks: &[Clock], counted: Duration, agreed: bool) -> Outcome {
    let ran: u64 = clocks.iter().map(|c| c.ran).sum();
    let stalled: u64 = clocks.iter().map(|c| c.stalled).sum();
    let timed: u64 = clocks.iter().map(|c| c.timed).sum();
    let lat: Duration = clocks.iter().map(|c| c.latency).sum();
    Outcome {
        ticks_per_sec: ran as f64 / clocks.len() as f64 / counted.as_secs_f64(),
        stall_rate: stalled as f64 / ran.max(1) as f64,
        latency: lat / u32::try_from(timed.max(1)).unwrap_or(u32::MAX),
        agreed,
    }
}

/// The lockstep mesh at `delay`, or (`adaptive`) starting there and
/// following the network; with the delay it ended at.
fn lockstep_mesh(players: usize, delay: u32, adaptive: bool, trace: &Trace) -> (Outcome, u32) {
    let period = Duration::from_secs(1) / RATE;
    let (sockets, addrs) = loopback_sockets(players).expect("loopback sockets");
    let mut links: Vec<Impaired> = sockets
        .into_iter()
        .enumerate()
        .map(|(i, s)| Impaired::new(s, 100 + i as u64))
        .collect();
    let mut roster = Roster::new();
    for i in 0..players {
        roster = roster.player(PeerId(i as u32), PlayerId(i as u16));
    }
    let config = MeshConfig {
        delay,
        adaptive: adaptive.then(AdaptiveDelay::default),
        tick_rate: RATE,
        max_lead: 16,
        abandon_after: None,
        resend_interval: Duration::from_millis(20),
        ..MeshConfig::default()
    };
    let start = Instant::now();
    let now = || CoreInstant::from_duration(start.elapsed());
    let mut sessions: Vec<MeshSession<PlayerInputs>> = (0..players)
        .map(|i| MeshSession::new(config.clone(), roster.clone(), PeerId(i as u32), now()))
        .collect::<Result<_, _>>()
        .expect("a valid mesh");
    let mut clocks: Vec<Clock> = (0..players).map(|_| Clock::new(start)).collect();
    let mut hashes: Vec<Vec<u64>> = vec![Vec::new(); players];
    let mut hash: Vec<StreamHash> = (0..players).map(|_| StreamHash::new()).collect();
    let mut buf = Vec::with_capacity(1500);
    let end = start + WARMUP + Duration::from_secs(SECONDS);
    while Instant::now() < end {
        let counting = Instant::now() >= start + WARMUP;
        for i in 0..players {
            clocks[i].counting = counting;
            while let Some((from, bytes)) = links[i].recv() {
                if let Some(p) = addrs.iter().position(|a| *a == from) {
                    let _ = sessions[i].handle_datagram(PeerId(p as u32), bytes, now());
                }
            }
            let s = &mut sessions[i];
            s.handle_timeout(now());
            // Adaptive: one commit per frame run, while the input is due
            // (a refused one is offered again here).
            if adaptive && s.input_due() {
                let k = s.next_commit().get() as usize;
                let input = trace.inputs[i][k % trace.ticks()].clone();
                if let Ok(t) = s.commit_local(input) {
                    clocks[i].added.insert(u64::from(t.get()), Instant::now());
                }
            }
            let mut looked = 0;
            while Instant::now() >= clocks[i].due && looked < 2 {
                looked += 1;
                let Some(f) = s.advance() else {
                    clocks[i].stall(u64::from(s.frame().get()));
                    break;
                };
                hash[i].push(&f);
                hashes[i].push(hash[i].value());
                clocks[i].ran(u64::from(f.tick.get()), period);
                if adaptive && !s.input_due() {
                    continue;
                }
                let k = s.next_commit().get() as usize;
                let input = trace.inputs[i][k % trace.ticks()].clone();
                if let Ok(t) = s.commit_local(input) {
                    clocks[i].added.insert(u64::from(t.get()), Instant::now());
                }
            }
            clocks[i].settle(period);
            while let Some(t) = s.poll_transmit(&mut buf) {
                links[i].send(addrs[t.destination.0 as usize], &buf[..t.len]);
            }
            while s.poll_event().is_some() {}
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let common = hashes.iter().map(Vec::len).min().unwrap_or(0);
    let agreed = common > 0
        && hashes
            .iter()
            .all(|h| h[common - 1] == hashes[0][common - 1]);
    let ended = sessions[0].delay();
    (
        outcome(&clocks, Duration::from_secs(SECONDS), agreed),
        ended,
    )
}

fn ggrs_p2p(players: usize, delay: usize, trace: &Trace) -> Outcome {
    let period = Duration::from_secs(1) / RATE;
    let (sockets, addrs) = loopback_sockets(players).expect("loopback sockets");
    let mut sessions = Vec::new();
    for (i, socket) in sockets.into_iter().enumerate() {
        let mut b = SessionBuilder::<GgrsConfig>::new()
            .with_num_players(players)
            .expect("players")
            .with_max_prediction_window(0)
            .with_input_delay(delay)
            .with_fps(RATE as usize)
            .expect("fps");
        for (j, addr) in addrs.iter().enumerate() {
            let kind = if i == j {
                PlayerType::Local
            } else {
                PlayerType::Remote(*addr)
            };
            b = b.add_player(kind, j).expect("a player");
        }
        sessions.push(
            b.start_p2p_session(Impaired::new(socket, 200 + i as u64))
                .expect("a session"),
        );
    }
    // Synchronising first (GGRS's handshake), outside the figures.
    let sync_deadline = Instant::now() + Duration::from_secs(30);
    while sessions
        .iter()
        .any(|s| s.current_state() != SessionState::Running)
    {
        assert!(Instant::now() < sync_deadline, "GGRS did not synchronise");
        for s in &mut sessions {
            s.poll_remote_clients();
            for _ in s.events() {}
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let start = Instant::now();
    let mut clocks: Vec<Clock> = (0..players).map(|_| Clock::new(start)).collect();
    let mut frames = vec![0u64; players];
    let mut checks: Vec<Vec<u64>> = vec![Vec::new(); players];
    let end = start + WARMUP + Duration::from_secs(SECONDS);
    while Instant::now() < end {
        let counting = Instant::now() >= start + WARMUP;
        for i in 0..players {
            clocks[i].counting = counting;
            let s = &mut sessions[i];
            s.poll_remote_clients();
            for _ in s.events() {}
            let mut looked = 0;
            while Instant::now() >= clocks[i].due && looked < 2 {
                looked += 1;
                let f = frames[i];
                let input = PadInput::from(&trace.inputs[i][f as usize % trace.ticks()]);
                if s.add_local_input(i, input).is_err() {
                    break;
                }
                let requests = s.advance_frame().unwrap_or_default();
                let mut advanced = false;
                for r in requests {
                    if let GgrsRequest::AdvanceFrame { inputs } = r {
                        advanced = true;
                        let h = inputs.iter().fold(0u64, |h, (inp, _)| {
                            h.rotate_left(7) ^ u64::from(inp.buttons) ^ inp.movement[0] as u64
                        });
                        checks[i].push(h);
                    }
                }
                if !advanced {
                    clocks[i].stall(f);
                    break;
                }
                // The input added for frame `f` runs at `f + delay`.
                clocks[i].added.insert(f + delay as u64, Instant::now());
                clocks[i].ran(f, period);
                frames[i] += 1;
            }
            clocks[i].settle(period);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let common = checks.iter().map(Vec::len).min().unwrap_or(0);
    let agreed = common > 0 && checks.iter().all(|c| c[..common] == checks[0][..common]);
    outcome(&clocks, Duration::from_secs(SECONDS), agreed)
}

/// The best of `runs` (delay, outcome): the lowest latency within the
/// target stall rate at 59 ticks a second or more, else the fewest stalls.
fn best(runs: &[(usize, Outcome)]) -> (usize, Outcome) {
    runs.iter()
        .filter(|(_, o)| o.stall_rate <= TARGET && o.ticks_per_sec >= 59.0)
        .min_by(|a, b| a.1.latency.cmp(&b.1.latency))
        .or_else(|| {
            runs.iter().max_by(|a, b| {
                a.1.ticks_per_sec
                    .total_cmp(&b.1.ticks_per_sec)
                    .then(b.1.stall_rate.total_cmp(&a.1.stall_rate))
            })
        })
        .copied()
        .expect("some runs")
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    println!(
        "lockstep mesh vs GGRS 0.13 lockstep mode: 60 Hz, loopback UDP, every datagram 30 ms late \
         and 5% lost (lockstep_net::ImpairedLink), {SECONDS} s counted after {} s, delays 1 to 6",
        WARMUP.as_secs()
    );
    println!();
    println!(
        "| players | library | delay | ticks/s (of 60) | stalls | input latency | streams agree |"
    );
    println!("|---:|---|---:|---:|---:|---:|---|");
    for players in [2usize, 4] {
        let trace = Trace::generate(players, 4096, 0x5EED + players as u64);
        let ours: Vec<(usize, Outcome)> = (1..=6)
            .map(|d| (d, lockstep_mesh(players, d as u32, false, &trace).0))
            .collect();
        let theirs: Vec<(usize, Outcome)> =
            (1..=6).map(|d| (d, ggrs_p2p(players, d, &trace))).collect();
        let (o, ended) = lockstep_mesh(players, 3, true, &trace);
        let adaptive = [(ended as usize, o)];
        for (name, runs) in [
            ("lockstep", &ours[..]),
            ("lockstep, adaptive (from 3)", &adaptive[..]),
            ("GGRS", &theirs[..]),
        ] {
            let (d, o) = best(runs);
            println!(
                "| {players} | {name} | {d} | {:.1} | {:.2}% | {:.0} ms | {} |",
                o.ticks_per_sec,
                o.stall_rate * 100.0,
                o.latency.as_secs_f64() * 1000.0,
                if o.agreed { "yes" } else { "NO" }
            );
        }
        for (name, runs) in [("lockstep", &ours), ("GGRS", &theirs)] {
            let all: Vec<String> = runs
                .iter()
                .map(|(d, o)| format!("{d}: {:.1}/s {:.1}%", o.ticks_per_sec, o.stall_rate * 100.0))
                .collect();
            eprintln!("{players} players, {name}, every delay: {}", all.join(", "));
        }
    }
}
