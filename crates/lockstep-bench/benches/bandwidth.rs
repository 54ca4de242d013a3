//! What a relay room sends as the round trip grows, on the seeded
//! simulated network (virtual time: the figures do not depend on the
//! machine).
//!
//! An 8-player `WaitForAll` room at 30 Hz with the adaptive delay, each
//! player running the classic lockstep loop (see `lockstep_bench::feel`),
//! at round trips of 0, 100, 250 and 500 ms (jitter a tenth of the round
//! trip) with 1% and 10% loss each way. Each run plays 10 s of warm-up and
//! counts the next 60 s; each figure is the mean of twelve seeds (a stall
//! rate of a few in ten thousand needs that many), run on two threads.
//! Bytes are per player per tick run, down (relay to player) and up; the
//! ratio is against the 0 ms figure at the same loss, measured in the same
//! run.

use lockstep_bench::feel::{self, Delay, Network, Setup};
use std::time::Duration;

const SEEDS: [u64; 12] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];

struct Row {
    down: f64,
    up: f64,
    stalls: f64,
    latency_ms: f64,
}

fn measure(rtt_ms: u64, loss: f64) -> Row {
    let run = |seed: u64| {
        let f = feel::run(&Setup {
            players: 8,
            tick_rate: 30,
            network: Network {
                rtt: Duration::from_millis(rtt_ms),
                jitter: Duration::from_millis(rtt_ms / 10),
                loss,
            },
            script: Vec::new(),
            delay: Delay::Adaptive(3),
            seconds: 60,
            warmup: 10,
            seed: seed * 7_919 + rtt_ms,
            runner: false,
        });
        assert!(
            f.streams_equal,
            "streams differ at {rtt_ms} ms, {loss} loss"
        );
        Row {
            down: f.down_per_tick,
            up: f.up_per_tick,
            stalls: f.stall_rate,
            latency_ms: f.latency.as_secs_f64() * 1000.0,
        }
    };
    let rows: Vec<Row> = std::thread::scope(|s| {
        let halves: Vec<_> = SEEDS
            .chunks(SEEDS.len().div_ceil(2))
            .map(|seeds| s.spawn(move || seeds.iter().map(|&x| run(x)).collect::<Vec<_>>()))
            .collect();
        halves
            .into_iter()
            .flat_map(|h| h.join().expect("a run"))
            .collect()
    });
    let n = rows.len() as f64;
    let mean = |f: fn(&Row) -> f64| rows.iter().map(f).sum::<f64>() / n;
    Row {
        down: mean(|r| r.down),
        up: mean(|r| r.up),
        stalls: mean(|r| r.stalls),
        latency_ms: mean(|r| r.latency_ms),
    }
}

fn main() {
    // `cargo test --benches` runs this with `--bench`-less arguments: keep
    // it to the real run.
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        return;
    }
    println!("bytes per player per tick: 8 players, WaitForAll, 30 Hz, adaptive delay,");
    println!(
        "10 s warm-up then 60 s counted, mean of {} seeds",
        SEEDS.len()
    );
    println!();
    println!(
        "| loss | RTT | down B/tick | vs 0 ms | up B/tick | vs 0 ms | stalls | input latency |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for loss in [0.01, 0.1] {
        let mut base: Option<Row> = None;
        for rtt in [0, 100, 250, 500] {
            let r = measure(rtt, loss);
            let (d0, u0) = base.as_ref().map_or((r.down, r.up), |b| (b.down, b.up));
            println!(
                "| {:.0}% | {rtt} ms | {:.1} | {:.2}x | {:.1} | {:.2}x | {:.2}% | {:.0} ms |",
                loss * 100.0,
                r.down,
                r.down / d0,
                r.up,
                r.up / u0,
                r.stalls * 100.0,
                r.latency_ms,
            );
            if base.is_none() {
                base = Some(r);
            }
        }
    }
}
