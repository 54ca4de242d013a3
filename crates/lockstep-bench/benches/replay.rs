//! `cargo bench -p lockstep-bench --bench replay`: what a replay costs and
//! what it gives back, in one run.
//!
//! - Size per minute: eight players at 30 Hz on the codec benchmark's input
//!   trace (every stick moving about every five ticks), against the
//!   16 KB/min target, and a sparse command stream (an RTS: each player
//!   issues a command about every two seconds).
//! - The recorder's cost per tick on that trace (criterion), against the
//!   2 us target.
//! - Verifying: swarm with 8 bots and 500 creeps over 9,000 ticks (5
//!   minutes), its ticks per second against running the game alone (the
//!   fastest of five runs of each).
//! - Seeking: a 100,000-tick swarm replay with 2,000 creeps, indexed every
//!   300 ticks; 1,000 seeks to random ticks, forwards and backwards, p50,
//!   p99 and the slowest against the 200 ms target.

use criterion::Criterion;
use lockstep_bench::Trace;
use lockstep_core::replay::{Header, Playback, Recorder, Replay, Topology, verify};
use lockstep_core::sim::SimRng;
use lockstep_core::{Frame, PlayerId, PlayerInputs, SystemEvent, Tick};
use lockstep_demo::{Bot, Game, GameConfig};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// The codec benchmark's seed.
const SEED: u64 = 0x5EED;
const PLAYERS: usize = 8;
const RATE: u32 = 30;
const MINUTE: usize = 60 * RATE as usize;

fn joined(tick: u32) -> Vec<SystemEvent> {
    if tick == 0 {
        (0..PLAYERS as u16)
            .map(|p| SystemEvent::Joined {
                player: PlayerId(p),
            })
            .collect()
    } else {
        Vec::new()
    }
}

/// The trace's frames.
fn trace_frames(trace: &Trace, ticks: usize) -> Vec<Frame<PlayerInputs>> {
    (0..ticks)
        .map(|t| Frame {
            tick: Tick::new(t as u32),
            inputs: (0..PLAYERS)
                .map(|p| Some(trace.inputs[p][t].clone()))
                .collect(),
            events: joined(t as u32),
        })
        .collect()
}

/// An RTS's commands: each player clicks somewhere about every two
/// seconds (a pointer and a button for one tick), else sends nothing new.
fn sparse_frames(ticks: usize) -> Vec<Frame<PlayerInputs>> {
    let mut rng = SimRng::new(SEED);
    (0..ticks)
        .map(|t| Frame {
            tick: Tick::new(t as u32),
            inputs: (0..PLAYERS)
                .map(|_| {
                    let mut i = PlayerInputs::default();
                    if rng.chance(1.0 / 60.0) {
                        i.pointer = [rng.below(4096) as u16, rng.below(4096) as u16];
                        i.buttons = 1 << rng.below(4);
                    }
                    Some(i)
                })
                .collect(),
            events: joined(t as u32),
        })
        .collect()
}

/// Records `frames` as a runner does: a checkpoint every 30 ticks (here a
/// hash of the tick).
fn record(frames: &[Frame<PlayerInputs>]) -> Vec<u8> {
    let header = Header::new(1, "bench", RATE, PLAYERS as u16, Topology::Relay);
    let mut rec = Recorder::new(header, Vec::new()).expect("a recorder");
    for f in frames {
        rec.record(f).expect("recorded");
        rec.state_hash(
            f.tick,
            u64::from(f.tick.get()).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
    }
    rec.finish().expect("finished")
}

/// Frames of swarm played by 8 bots, and the game after them.
fn swarm_frames(creeps: u32, ticks: u32) -> (Vec<Frame<PlayerInputs>>, Game) {
    let config = GameConfig {
        max_creeps: creeps,
        first_wave: creeps,
    };
    let mut game = Game::with_config(1, config);
    let mut bots: Vec<Bot> = (0..PLAYERS as u16)
        .map(|p| Bot::new(PlayerId(p), u64::from(p) + 1))
        .collect();
    let mut frames = Vec::with_capacity(ticks as usize);
    for t in 0..ticks {
        let inputs = bots.iter_mut().map(|b| Some(b.input(&game))).collect();
        let f = Frame {
            tick: Tick::new(t),
            inputs,
            events: joined(t),
        };
        game.step(&f);
        frames.push(f);
    }
    (frames, game)
}

fn start(creeps: u32) -> Game {
    Game::with_config(
        1,
        GameConfig {
            max_creeps: creeps,
            first_wave: creeps,
        },
    )
}

/// Records swarm's frames with its state hash every 30 ticks, as the
/// runner does.
fn record_swarm(frames: &[Frame<PlayerInputs>], creeps: u32) -> Vec<u8> {
    let header = Header::new(1, "swarm", RATE, PLAYERS as u16, Topology::Relay);
    let mut rec = Recorder::new(header, Vec::new()).expect("a recorder");
    let mut game = start(creeps);
    for f in frames {
        game.step(f);
        rec.record(f).expect("recorded");
        if rec.wants_hash(f.tick) {
            rec.state_hash(f.tick, game.hash());
        }
    }
    rec.finish().expect("finished")
}

fn main() {
    let mut c = Criterion::default().configure_from_args();

    // Size per minute.
    let trace = Trace::generate(PLAYERS, MINUTE, SEED);
    let dense = trace_frames(&trace, MINUTE);
    let dense_file = record(&dense);
    let sparse_file = record(&sparse_frames(MINUTE));
    let mut raw = Vec::new();
    lockstep_core::wire::encode_frames_body(&dense[..1024], PLAYERS, None, &mut raw);
    let raw_per_min = raw.len() as f64 * MINUTE as f64 / 1024.0;

    // The recorder's cost per tick.
    let mut group = c.benchmark_group("replay");
    group.bench_function("record one tick, 8 players (the codec trace)", |b| {
        let header = Header::new(1, "bench", RATE, PLAYERS as u16, Topology::Relay);
        let mut rec = Recorder::new(header, std::io::sink()).expect("a recorder");
        let mut t = 0u32;
        b.iter(|| {
            let f = &dense[t as usize % MINUTE];
            let frame = Frame {
                tick: Tick::new(t),
                inputs: f.inputs.clone(),
                events: Vec::new(),
            };
            rec.record(black_box(&frame)).expect("recorded");
            rec.state_hash(frame.tick, u64::from(t));
            t += 1;
        });
    });
    group.finish();
    // The same, timed by hand over 60 minutes of ticks, frames made first.
    let hour: Vec<Frame<PlayerInputs>> = (0..60 * MINUTE)
        .map(|t| Frame {
            tick: Tick::new(t as u32),
            inputs: dense[t % MINUTE].inputs.clone(),
            events: Vec::new(),
        })
        .collect();
    let header = Header::new(1, "bench", RATE, PLAYERS as u16, Topology::Relay);
    let mut rec = Recorder::new(header, std::io::sink()).expect("a recorder");
    let started = Instant::now();
    for f in &hour {
        rec.record(f).expect("recorded");
        rec.state_hash(f.tick, u64::from(f.tick.get()));
    }
    rec.finish().expect("finished");
    let per_tick = started.elapsed().as_secs_f64() / hour.len() as f64;

    // Verify against the game alone.
    let (frames, _) = swarm_frames(500, 9_000);
    let file = record_swarm(&frames, 500);
    let replay = Replay::<PlayerInputs>::read(&file);
    // Each timed five times, alternately, the fastest kept: the machine's
    // noise is not the code's.
    let (mut game_s, mut verify_s) = (f64::MAX, f64::MAX);
    for _ in 0..5 {
        let started = Instant::now();
        let mut alone = start(500);
        for f in &frames {
            alone.step(f);
        }
        black_box(alone.hash());
        game_s = game_s.min(started.elapsed().as_secs_f64());
        let started = Instant::now();
        let v = verify(&replay, start(500)).expect("verifies");
        assert!(v.matches() && v.checkpoints == 300, "{v:?}");
        verify_s = verify_s.min(started.elapsed().as_secs_f64());
    }
    let reading = Instant::now();
    black_box(Replay::<PlayerInputs>::read(&file).frame_count());
    let read_s = reading.elapsed().as_secs_f64();

    // Seek.
    let built = Instant::now();
    let (frames, _) = swarm_frames(2_000, 100_000);
    let made_s = built.elapsed().as_secs_f64();
    let file = record_swarm(&frames, 2_000);
    drop(frames);
    let replay = Replay::<PlayerInputs>::read(&file);
    let mut p = Playback::new(&replay, start(2_000)).expect("a start");
    let indexing = Instant::now();
    p.index(300).expect("indexed");
    let index_s = indexing.elapsed().as_secs_f64();
    let mut rng = SimRng::new(SEED);
    let mut times = Vec::with_capacity(1_000);
    let mut at = 50_000u32;
    let (mut back, mut ran_most) = (0, 0);
    for _ in 0..1_000 {
        let to = rng.below(100_000) as u32;
        back += usize::from(to < at);
        let s = Instant::now();
        let ran = p.seek(Tick::new(to)).expect("seeks");
        times.push(s.elapsed());
        ran_most = ran_most.max(ran);
        assert_eq!(p.tick(), Some(Tick::new(to)));
        at = to;
    }
    times.sort();
    let q = |f: f64| times[((times.len() as f64 * f).ceil() as usize).min(times.len()) - 1];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;

    println!();
    println!("replay size per minute, 8 players at 30 Hz (checkpoints every 30 ticks included):");
    println!(
        "  the codec trace: {:>7} bytes/min = {:.1} KB/min ({:.2}x the 16 KB/min target; the frames body alone, uncompressed: {:.1} KB/min)",
        dense_file.len(),
        dense_file.len() as f64 / 1000.0,
        dense_file.len() as f64 / 16_000.0,
        raw_per_min / 1000.0
    );
    println!(
        "  sparse commands: {:>7} bytes/min = {:.1} KB/min ({:.2}x the target)",
        sparse_file.len(),
        sparse_file.len() as f64 / 1000.0,
        sparse_file.len() as f64 / 16_000.0
    );
    println!(
        "recorder: {:.2} us per tick over an hour of the trace ({:.2}x the 2 us target)",
        per_tick * 1e6,
        per_tick * 1e6 / 2.0
    );
    println!(
        "verify, swarm 500 creeps, 9,000 ticks: {:.0} ticks/s; the game alone {:.0} ticks/s ({:.2}x its time; reading the file {:.1} ms)",
        9_000.0 / verify_s,
        9_000.0 / game_s,
        verify_s / game_s,
        read_s * 1e3
    );
    println!(
        "seek, swarm 2,000 creeps, 100,000 ticks ({} KB; made in {made_s:.0} s, indexed every 300 ticks in {index_s:.1} s, {} keyframes):",
        file.len() / 1000,
        p.keyframes()
    );
    println!(
        "  1,000 seeks ({back} backwards): p50 {:.1} ms, p99 {:.1} ms, slowest {:.1} ms ({:.2}x the 200 ms target at p99), at most {ran_most} ticks run",
        ms(q(0.5)),
        ms(q(0.99)),
        ms(times[times.len() - 1]),
        ms(q(0.99)) / 200.0
    );
}
