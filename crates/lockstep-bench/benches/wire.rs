//! `cargo bench -p lockstep-bench`: lockstep's wire codec against a plain
//! fixed-size encoding and a JSON envelope on one seeded input trace, then a
//! lockstep mesh and a GGRS lockstep session side by side over loopback UDP
//! with the same inputs. Criterion times the codecs; the run ends with one
//! table of every figure, all measured in this run.

mod common;

use common::GgrsConfig;
use criterion::{Criterion, Throughput};
use ggrs::{GgrsRequest, Message, NonBlockingSocket, PlayerType, SessionBuilder, SessionState};
use lockstep_bench::{
    Codec, FixedCodec, JsonCodec, LockstepCodec, MeshRun, Pacer, PadInput, SessionResult,
    SessionRun, StepTimes, Trace, loopback_sockets, measure_codec, run_side_by_side,
};
use std::cell::Cell;
use std::hint::black_box;
use std::net::{SocketAddr, UdpSocket};
use std::rc::Rc;
use std::time::Duration;

const SEED: u64 = 0x5EED;
const CODEC_PLAYERS: usize = 8;
const CODEC_TICKS: usize = 1800; // one minute at 30 Hz
const SESSION_PLAYERS: usize = 4;
const SESSION_FRAMES: u64 = 450; // 15 s at 30 Hz

fn codecs() -> Vec<Box<dyn Codec>> {
    vec![
        Box::new(LockstepCodec::default()),
        Box::new(FixedCodec),
        Box::new(JsonCodec),
    ]
}

fn codec_benches(c: &mut Criterion, trace: &Trace) {
    let mut group = c.benchmark_group("encode+decode one tick, 8 players");
    group.throughput(Throughput::Elements(CODEC_PLAYERS as u64));
    for mut codec in codecs() {
        group.bench_function(codec.name(), |b| {
            let mut buf = Vec::with_capacity(2048);
            let mut tick = 0usize;
            b.iter(|| {
                tick = (tick + 1) % trace.ticks();
                let mut n = 0;
                for p in 0..trace.players() {
                    buf.clear();
                    let held = trace.held(p, tick);
                    codec.encode(p, tick as u32, trace.window(p, tick), held, &mut buf);
                    n += codec.decode(black_box(&buf), held);
                }
                n
            });
        });
    }
    group.finish();
}

/// GGRS's own UDP socket serialises with bincode; this one does the same and
/// counts what it sends.
struct CountingSocket {
    socket: UdpSocket,
    bytes: Rc<Cell<u64>>,
    datagrams: Rc<Cell<u64>>,
    /// Time inside `recv_from` and `send_to` themselves.
    in_socket: Rc<Cell<Duration>>,
    buf: Vec<u8>,
}

impl CountingSocket {
    fn timed<T>(&self, call: impl FnOnce(&UdpSocket) -> T) -> T {
        let started = std::time::Instant::now();
        let out = call(&self.socket);
        self.in_socket.set(self.in_socket.get() + started.elapsed());
        out
    }
}

impl NonBlockingSocket<SocketAddr> for CountingSocket {
    fn send_to(&mut self, msg: &Message, addr: &SocketAddr) {
        if let Ok(bytes) = bincode::serialize(msg) {
            self.bytes.set(self.bytes.get() + bytes.len() as u64);
            self.datagrams.set(self.datagrams.get() + 1);
            let _ = self.timed(|s| s.send_to(&bytes, addr));
        }
    }

    fn receive_all_messages(&mut self) -> Vec<(SocketAddr, Message)> {
        let mut out = Vec::new();
        let mut buf = std::mem::take(&mut self.buf);
        // Until it would block (or fails).
        while let Ok((n, from)) = self.timed(|s| s.recv_from(&mut buf)) {
            if let Ok(m) = bincode::deserialize(&buf[..n]) {
                out.push((from, m));
            }
        }
        self.buf = buf;
        out
    }
}

/// The same game as [`MeshRun`], on GGRS in lockstep mode
/// (`max_prediction = 0`), input delay 2.
struct GgrsRun<'t> {
    trace: &'t Trace,
    frames: u64,
    sessions: Vec<ggrs::P2PSession<GgrsConfig>>,
    pacers: Vec<Pacer>,
    ran: Vec<u64>,
    checks: Vec<Vec<u64>>,
    bytes: Rc<Cell<u64>>,
    datagrams: Rc<Cell<u64>>,
    in_socket: Rc<Cell<Duration>>,
    busy: Duration,
}

impl<'t> GgrsRun<'t> {
    fn new(trace: &'t Trace, frames: u64) -> Result<Self, Box<dyn std::error::Error>> {
        let n = trace.players();
        let (sockets, addrs) = loopback_sockets(n)?;
        let bytes = Rc::new(Cell::new(0));
        let datagrams = Rc::new(Cell::new(0));
        let in_socket = Rc::new(Cell::new(Duration::ZERO));
        let mut sessions = Vec::new();
        for (i, socket) in sockets.into_iter().enumerate() {
            let mut b = SessionBuilder::<GgrsConfig>::new()
                .with_num_players(n)?
                .with_max_prediction_window(0)
                .with_input_delay(2)
                .with_fps(lockstep_bench::TICK_RATE as usize)?;
            for (j, addr) in addrs.iter().enumerate() {
                let kind = if i == j {
                    PlayerType::Local
                } else {
                    PlayerType::Remote(*addr)
                };
                b = b.add_player(kind, j)?;
            }
            let sock = CountingSocket {
                socket,
                bytes: bytes.clone(),
                datagrams: datagrams.clone(),
                in_socket: in_socket.clone(),
                buf: vec![0; 4096],
            };
            sessions.push(b.start_p2p_session(sock)?);
        }
        Ok(Self {
            trace,
            frames,
            sessions,
            pacers: (0..n).map(|_| Pacer::new()).collect(),
            ran: vec![0; n],
            checks: vec![Vec::new(); n],
            bytes,
            datagrams,
            in_socket,
            busy: Duration::ZERO,
        })
    }
}

impl SessionRun for GgrsRun<'_> {
    fn step(&mut self) -> Result<bool, Box<dyn std::error::Error>> {
        let work = std::time::Instant::now();
        let trace = self.trace;
        for i in 0..self.sessions.len() {
            let s = &mut self.sessions[i];
            s.poll_remote_clients();
            for _ in s.events() {}
            if s.current_state() != SessionState::Running
                || self.ran[i] >= self.frames
                || !self.pacers[i].due()
            {
                continue;
            }
            let k = (self.ran[i] as usize).min(trace.ticks() - 1);
            s.add_local_input(i, PadInput::from(&trace.inputs[i][k]))?;
            for request in s.advance_frame()? {
                match request {
                    GgrsRequest::AdvanceFrame { inputs } => {
                        self.ran[i] += 1;
                        self.pacers[i].done();
                        let h = inputs.iter().fold(0u64, |h, (inp, _)| {
                            h.rotate_left(7) ^ u64::from(inp.buttons) ^ inp.movement[0] as u64
                        });
                        self.checks[i].push(h);
                    }
                    GgrsRequest::SaveGameState { cell, frame } => cell.save(frame, Some(0), None),
                    GgrsRequest::LoadGameState { cell, .. } => {
                        cell.load();
                    }
                }
            }
        }
        self.busy += work.elapsed();
        Ok(self.ran.iter().all(|r| *r >= self.frames))
    }

    fn result(&self) -> SessionResult {
        let times = StepTimes {
            busy: self.busy,
            in_socket: self.in_socket.get(),
        };
        let agreed = self.checks.iter().all(|c| c == &self.checks[0]);
        times.result(
            self.sessions.len(),
            self.frames,
            self.bytes.get(),
            self.datagrams.get(),
            agreed,
        )
    }
}

/// A session's own work: its CPU less the time inside socket calls, which
/// the harness's 2 kHz polling makes about the same for any session.
fn own(r: &SessionResult) -> f64 {
    r.micros_per_player_frame - r.socket_micros_per_player_frame
}

fn main() {
    let trace = Trace::generate(CODEC_PLAYERS, CODEC_TICKS, SEED);
    let mut c = Criterion::default().configure_from_args();
    codec_benches(&mut c, &trace);
    c.final_summary();

    // The table: every figure below comes from this run.
    let rows: Vec<(String, lockstep_bench::CodecResult)> = codecs()
        .into_iter()
        .map(|mut codec| {
            (
                codec.name().to_string(),
                measure_codec(codec.as_mut(), &trace, 20),
            )
        })
        .collect();
    let session_trace = Trace::generate(SESSION_PLAYERS, SESSION_FRAMES as usize + 16, SEED);
    let sessions = run_sessions(&session_trace);

    println!();
    println!(
        "Wire codecs: {CODEC_PLAYERS} players, {} Hz, {CODEC_TICKS} ticks, seed {SEED:#x}; each player sends \
         its last {} ticks of input every tick",
        lockstep_bench::TICK_RATE,
        lockstep_bench::WINDOW
    );
    println!();
    println!(
        "| codec | bytes / player / tick | vs lockstep | encode+decode / tick (8 players) | vs lockstep |"
    );
    println!("|---|---:|---:|---:|---:|");
    let base = rows[0].1;
    for (name, r) in &rows {
        println!(
            "| {name} | {:.1} | {:.2}x | {:.2} us | {:.2}x |",
            r.bytes_per_player_tick,
            r.bytes_per_player_tick / base.bytes_per_player_tick,
            r.nanos_per_tick / 1000.0,
            r.nanos_per_tick / base.nanos_per_tick
        );
    }
    println!();
    println!(
        "Sessions over loopback UDP: {SESSION_PLAYERS} players, {} Hz, {SESSION_FRAMES} frames, input delay 2, \
         same inputs",
        lockstep_bench::TICK_RATE
    );
    println!();
    println!(
        "| session | bytes / player / frame | datagrams / player / frame | CPU / player / frame | in socket calls | in the session | all peers agree |"
    );
    println!("|---|---:|---:|---:|---:|---:|---|");
    let row = |name: &str, r: &SessionResult| {
        println!(
            "| {name} | {:.1} | {:.2} | {:.1} us | {:.1} us | {:.1} us | {} |",
            r.bytes_per_player_frame,
            r.datagrams_per_player_frame,
            r.micros_per_player_frame,
            r.socket_micros_per_player_frame,
            own(r),
            r.agreed
        );
    };
    match &sessions {
        Ok(rounds) => {
            let (o, g) = (mean(rounds, |r| r.0), mean(rounds, |r| r.1));
            row("lockstep mesh", &o);
            row("GGRS 0.13, max_prediction = 0", &g);
            let each: Vec<String> = rounds
                .iter()
                .map(|(o, g)| format!("{:.2}x", own(o) / own(g)))
                .collect();
            println!();
            println!(
                "lockstep / GGRS: bytes {:.2}x (target <= 0.30x), CPU in the session {:.2}x \
                 (target <= 0.60x; by round {}), CPU with socket calls {:.2}x",
                o.bytes_per_player_frame / g.bytes_per_player_frame,
                own(&o) / own(&g),
                each.join(", "),
                o.micros_per_player_frame / g.micros_per_player_frame
            );
        }
        Err(e) => println!("the sessions over UDP failed: {e}"),
    }
}

/// Rounds of the two sessions run side by side in one loop.
const ROUNDS: usize = 3;

/// Both sessions, side by side (see [`run_side_by_side`]), [`ROUNDS`] times:
/// each round's figures for lockstep and GGRS.
fn run_sessions(
    trace: &Trace,
) -> Result<Vec<(SessionResult, SessionResult)>, Box<dyn std::error::Error>> {
    (0..ROUNDS)
        .map(|_| {
            let mut ours = MeshRun::new(trace, SESSION_FRAMES)?;
            let mut ggrs = GgrsRun::new(trace, SESSION_FRAMES)?;
            let limit = Duration::from_secs(60 + SESSION_FRAMES / 10);
            run_side_by_side(&mut [&mut ours, &mut ggrs], limit)?;
            Ok((ours.result(), ggrs.result()))
        })
        .collect()
}

/// The mean of one side's figures over the rounds; all agree if each did.
fn mean(
    rounds: &[(SessionResult, SessionResult)],
    side: impl Fn(&(SessionResult, SessionResult)) -> SessionResult,
) -> SessionResult {
    let n = rounds.len().max(1) as f64;
    let sum =
        |f: &dyn Fn(&SessionResult) -> f64| rounds.iter().map(|r| f(&side(r))).sum::<f64>() / n;
    SessionResult {
        frames: rounds.first().map_or(0, |r| side(r).frames),
        bytes_per_player_frame: sum(&|r| r.bytes_per_player_frame),
        datagrams_per_player_frame: sum(&|r| r.datagrams_per_player_frame),
        micros_per_player_frame: sum(&|r| r.micros_per_player_frame),
        socket_micros_per_player_frame: sum(&|r| r.socket_micros_per_player_frame),
        agreed: rounds.iter().all(|r| side(r).agreed),
    }
}
