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
    Codec, FixedCodec, JsonCodec, LockstepCodec, Pacer, PadInput, SessionResult, Trace,
    loopback_sockets, measure_codec, run_mesh_udp,
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

/// The same game as `run_mesh_udp`, on GGRS in lockstep mode
/// (`max_prediction = 0`), input delay 2.
fn run_ggrs_udp(trace: &Trace, frames: u64) -> Result<SessionResult, Box<dyn std::error::Error>> {
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
    let mut pacers: Vec<Pacer> = (0..n).map(|_| Pacer::new()).collect();
    let mut ran = vec![0u64; n];
    let mut checks = vec![Vec::new(); n];
    let mut busy = Duration::ZERO;
    let deadline = std::time::Instant::now() + Duration::from_secs(60 + frames / 10);
    while ran.iter().any(|r| *r < frames) {
        if std::time::Instant::now() > deadline {
            return Err("GGRS over UDP did not finish in time".into());
        }
        let work = std::time::Instant::now();
        for i in 0..n {
            let s = &mut sessions[i];
            s.poll_remote_clients();
            for _ in s.events() {}
            if s.current_state() != SessionState::Running || ran[i] >= frames || !pacers[i].due() {
                continue;
            }
            let k = (ran[i] as usize).min(trace.ticks() - 1);
            s.add_local_input(i, PadInput::from(&trace.inputs[i][k]))?;
            for request in s.advance_frame()? {
                match request {
                    GgrsRequest::AdvanceFrame { inputs } => {
                        ran[i] += 1;
                        pacers[i].done();
                        let h = inputs.iter().fold(0u64, |h, (inp, _)| {
                            h.rotate_left(7) ^ u64::from(inp.buttons) ^ inp.movement[0] as u64
                        });
                        checks[i].push(h);
                    }
                    GgrsRequest::SaveGameState { cell, frame } => cell.save(frame, Some(0), None),
                    GgrsRequest::LoadGameState { cell, .. } => {
                        cell.load();
                    }
                }
            }
        }
        busy += work.elapsed();
        std::thread::sleep(Duration::from_micros(500));
    }
    let per = (n as u64 * frames) as f64;
    Ok(SessionResult {
        frames,
        bytes_per_player_frame: bytes.get() as f64 / per,
        datagrams_per_player_frame: datagrams.get() as f64 / per,
        micros_per_player_frame: busy.as_secs_f64() * 1e6 / per,
        socket_micros_per_player_frame: in_socket.get().as_secs_f64() * 1e6 / per,
        agreed: checks.iter().all(|c| c == &checks[0]),
    })
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
    let ours = run_mesh_udp(&session_trace, SESSION_FRAMES);
    let ggrs = run_ggrs_udp(&session_trace, SESSION_FRAMES);

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
    match (&ours, &ggrs) {
        (Ok(o), Ok(g)) => {
            row("lockstep mesh", o);
            row("GGRS 0.13, max_prediction = 0", g);
            println!();
            println!(
                "lockstep / GGRS: bytes {:.2}x (target <= 0.30x), CPU in the session {:.2}x \
                 (target <= 0.60x), CPU with socket calls {:.2}x",
                o.bytes_per_player_frame / g.bytes_per_player_frame,
                own(o) / own(g),
                o.micros_per_player_frame / g.micros_per_player_frame
            );
        }
        (o, g) => {
            if let Err(e) = o {
                println!("lockstep mesh over UDP failed: {e}");
            }
            if let Err(e) = g {
                println!("GGRS over UDP failed: {e}");
            }
        }
    }
}
