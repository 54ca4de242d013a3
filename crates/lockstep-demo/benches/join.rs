//! `cargo bench -p lockstep-demo --bench join`: what joining a game of swarm
//! under way costs, with 8 ships and 500 or 2000 creeps: the snapshot's
//! size raw and compressed, the time to take, compress, move (through the
//! engine's sender and receiver, no network), decompress and restore it, and
//! how fast a joiner catches up, as ticks per second and as a multiple of
//! real time at 30 Hz.

mod common;

use criterion::{Criterion, criterion_group, criterion_main};
use lockstep_core::snapshot::{Snapshot, SnapshotLimits, SnapshotReceiver, SnapshotSender};
use lockstep_core::{Frame, Instant, PlayerInputs};
use lockstep_demo::{Bot, Game};
use std::hint::black_box;
use std::time::Duration;

/// The arena after some play, so ships, shots and creeps are spread as in
/// a real match.
fn arena(creeps: u32) -> (Game, Vec<Bot>) {
    let (mut game, mut bots) = common::arena(creeps);
    for _ in 0..300 {
        let inputs = bots.iter_mut().map(|b| Some(b.input(&game))).collect();
        game.step(&Frame {
            tick: game.tick,
            inputs,
            events: vec![],
        });
    }
    (game, bots)
}

/// Moves `snapshot` through a sender and a receiver with 1,100-byte chunks.
fn transfer(snapshot: &Snapshot) -> Snapshot {
    let limits = SnapshotLimits {
        window: u32::MAX,
        ..SnapshotLimits::default()
    };
    let mut tx = SnapshotSender::new(1, snapshot, 1_100, &limits).expect("under the cap");
    let mut rx = SnapshotReceiver::new(limits);
    loop {
        let Some(c) = tx.next_chunk(Instant::ZERO) else {
            panic!("the transfer ended without a snapshot");
        };
        if let Some(done) = rx.take(&c.as_message()).expect("a good chunk") {
            return done;
        }
    }
}

fn join(c: &mut Criterion) {
    let mut group = c.benchmark_group("swarm join, 8 ships");
    for creeps in [500u32, 2000] {
        let (game, _) = arena(creeps);
        let bytes = game.snapshot();
        let snapshot = Snapshot::new(game.tick.saturating_sub(1), bytes.clone());
        group.bench_function(format!("{creeps} creeps: take the snapshot"), |b| {
            b.iter(|| black_box(game.snapshot()));
        });
        group.bench_function(format!("{creeps} creeps: compress and chunk"), |b| {
            b.iter(|| {
                SnapshotSender::new(1, black_box(&snapshot), 1_100, &SnapshotLimits::default())
            });
        });
        group.bench_function(format!("{creeps} creeps: send, reassemble, check"), |b| {
            b.iter(|| transfer(black_box(&snapshot)));
        });
        group.bench_function(format!("{creeps} creeps: restore"), |b| {
            b.iter(|| Game::restore(black_box(&bytes)));
        });
    }
    group.finish();
    summary();
}

/// The figures a reader compares, measured in this run with plain loops
/// (criterion's above are the precise ones).
fn summary() {
    println!("\njoining swarm under way (8 ships):");
    println!(
        "  {:>6} {:>6} {:>9} {:>9} {:>6} {:>9} {:>9} {:>9} {:>12} {:>9}",
        "creeps",
        "alive",
        "raw KB",
        "LZ4 KB",
        "ratio",
        "take ms",
        "move ms",
        "restore",
        "catch-up t/s",
        "x 30 Hz"
    );
    for creeps in [500u32, 2000] {
        let (game, bots) = arena(creeps);
        let bytes = game.snapshot();
        let snapshot = Snapshot::new(game.tick.saturating_sub(1), bytes.clone());
        let packed = SnapshotSender::new(1, &snapshot, 1_100, &SnapshotLimits::default())
            .expect("under the cap")
            .packed_len();
        let time = |n: u32, f: &mut dyn FnMut()| {
            let start = std::time::Instant::now();
            for _ in 0..n {
                f();
            }
            start.elapsed() / n
        };
        let take = time(50, &mut || {
            black_box(game.snapshot());
        });
        let moved = time(50, &mut || {
            black_box(transfer(&snapshot));
        });
        let restore = time(50, &mut || {
            black_box(Game::restore(&bytes).expect("restores"));
        });
        // Catching up: the joiner runs frames (the bots' inputs are made
        // here once, as a joiner receives them, not decided).
        let mut g = game.clone();
        let mut b = bots.clone();
        let frames: Vec<Frame<PlayerInputs>> = (0..300)
            .map(|_| {
                let inputs = b.iter_mut().map(|bot| Some(bot.input(&g))).collect();
                let f = Frame {
                    tick: g.tick,
                    inputs,
                    events: vec![],
                };
                g.step(&f);
                f
            })
            .collect();
        let mut runs = Duration::ZERO;
        for _ in 0..5 {
            let mut j = Game::restore(&bytes).expect("restores");
            let start = std::time::Instant::now();
            for f in &frames {
                j.step(f);
            }
            runs += start.elapsed();
            assert_eq!(
                j.hash(),
                g.hash(),
                "the joiner catches up to the same state"
            );
        }
        let per_tick = runs / (5 * frames.len() as u32);
        let tps = 1.0 / per_tick.as_secs_f64();
        println!(
            "  {creeps:>6} {:>6} {:>9.1} {:>9.1} {:>5.2}x {:>9.3} {:>9.3} {:>7.3}ms {:>12.0} {:>8.0}x",
            game.creeps.len(),
            bytes.len() as f64 / 1000.0,
            packed as f64 / 1000.0,
            bytes.len() as f64 / packed as f64,
            take.as_secs_f64() * 1e3,
            moved.as_secs_f64() * 1e3,
            restore.as_secs_f64() * 1e3,
            tps,
            tps / 30.0
        );
    }
}

criterion_group!(benches, join);
criterion_main!(benches);
