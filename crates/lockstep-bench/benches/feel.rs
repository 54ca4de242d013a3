//! How play feels with an adaptive input delay, against every fixed one,
//! on the seeded simulated network (virtual time: the figures do not
//! depend on the machine).
//!
//! A 4-player `WaitForAll` room at 30 Hz, each player running the classic
//! lockstep loop on a steady clock (see `lockstep_bench::feel`). For each
//! network (round trip x jitter x loss, both directions), every fixed
//! delay from 1 to 12 ticks is run, and the adaptive delay (starting at
//! 3); each run plays 10 s of warm-up and counts the next 60 s. The best
//! fixed delay is the one with the lowest mean input latency whose stall
//! rate is at most the target, 0.5% (or, if none is, the one stalling
//! least). Then a scripted change: latency jumps from 40 to 200 ms round
//! trip mid-match and back, and how many ticks the delay takes to follow.

use lockstep_bench::feel::{self, Change, Delay, Feel, Network, Setup};
use std::time::Duration;

const TARGET: f64 = 0.005;
const TICK_MS: f64 = 1000.0 / 30.0;

fn setup(network: Network, delay: Delay, seed: u64) -> Setup {
    Setup {
        players: 4,
        tick_rate: 30,
        network,
        script: Vec::new(),
        delay,
        seconds: 60,
        warmup: 10,
        seed,
        runner: false,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The best fixed delay for `network`, and its figures.
fn best_fixed(network: Network, seed: u64) -> (u32, Feel) {
    let runs: Vec<(u32, Feel)> = (1..=12)
        .map(|d| (d, feel::run(&setup(network, Delay::Fixed(d), seed))))
        .collect();
    let within = runs
        .iter()
        .filter(|(_, f)| f.stall_rate <= TARGET && f.ticks_per_sec > 29.0)
        .min_by(|a, b| a.1.latency.cmp(&b.1.latency));
    let best = within.or_else(|| {
        runs.iter()
            .min_by(|a, b| a.1.stall_rate.total_cmp(&b.1.stall_rate))
    });
    best.cloned().expect("twelve runs")
}

fn sweep() {
    println!("adaptive input delay vs the best fixed delay: 4 players, WaitForAll, 30 Hz,");
    println!("10 s warm-up then 60 s counted per run, simulated network (both directions)");
    println!();
    println!(
        "| RTT | jitter | loss | best fixed | stalls | latency | adaptive (end) | stalls | latency | vs best |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut rows = 0;
    let mut met = 0;
    for rtt in [20u64, 60, 120, 250] {
        for jitter in [0u64, 10, 40] {
            for loss in [0.0, 0.02, 0.1] {
                let network = Network {
                    rtt: Duration::from_millis(rtt),
                    jitter: Duration::from_millis(jitter),
                    loss,
                };
                let seed = rtt * 1_000 + jitter * 10 + (loss * 100.0) as u64;
                let (d, fixed) = best_fixed(network, seed);
                let a = feel::run(&setup(network, Delay::Adaptive(3), seed));
                assert!(a.streams_equal && fixed.streams_equal, "streams differ");
                let gap = (ms(a.latency) - ms(fixed.latency)) / TICK_MS;
                let ok = gap <= 1.0 && a.stall_rate <= fixed.stall_rate.max(TARGET);
                rows += 1;
                met += usize::from(ok);
                println!(
                    "| {rtt} ms | {jitter} ms | {:.0}% | {d} | {:.2}% | {:.0} ms | {} | {:.2}% | {:.0} ms | {:+.2} ticks{} |",
                    loss * 100.0,
                    fixed.stall_rate * 100.0,
                    ms(fixed.latency),
                    a.final_delay,
                    a.stall_rate * 100.0,
                    ms(a.latency),
                    gap,
                    if ok { "" } else { " (missed)" },
                );
            }
        }
    }
    println!();
    println!(
        "{met} of {rows} rows within a tick of the best fixed delay's latency, stalling no more than it or the target"
    );
}

/// Latency jumps from 40 to 200 ms round trip, then back.
fn scripted() {
    let net = |rtt| Network {
        rtt: Duration::from_millis(rtt),
        jitter: Duration::from_millis(5),
        loss: 0.0,
    };
    let mut s = setup(net(40), Delay::Adaptive(3), 42);
    s.warmup = 0;
    s.seconds = 90;
    s.script = vec![
        Change {
            at: Duration::from_secs(30),
            network: net(200),
        },
        Change {
            at: Duration::from_secs(60),
            network: net(40),
        },
    ];
    let f = feel::run(&s);
    println!();
    println!(
        "scripted change, adaptive delay: round trip 40 ms, 200 ms from 30 s, 40 ms from 60 s (jitter 5 ms)"
    );
    println!();
    println!("| at | delay changes to | ticks after the network changed |");
    println!("|---:|---:|---:|");
    for (tick, delay) in &f.changes {
        let at = tick.get() as f64 / 30.0;
        let since = if at >= 60.0 {
            at - 60.0
        } else if at >= 30.0 {
            at - 30.0
        } else {
            at
        };
        println!("| {at:.1} s | {delay} | {:.0} |", since * 30.0);
    }
    let stalls_up = f
        .stalls_at
        .iter()
        .filter(|t| t.as_secs() >= 30 && t.as_secs() < 60)
        .count();
    println!();
    println!(
        "stalled looks after the rise (all players): {stalls_up}; delay at the end: {}",
        f.final_delay
    );
}

/// The same room with each player a `Runner` (which paces and commits by
/// itself), against the classic loop, in the same run and on the same
/// seeds: the sessions' own stalls (no frame for two tick periods), input
/// latency, the delay at the end and ticks run per second.
fn runner() {
    println!();
    println!(
        "the runner's loop against the classic loop: adaptive delay from 3, the sessions' own stalls"
    );
    println!();
    println!(
        "| RTT | jitter | loss | classic: delay | stalls | latency | ticks/s | runner: delay | stalls | latency | ticks/s |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (rtt, jitter, loss) in [
        (20u64, 0u64, 0.0),
        (20, 10, 0.02),
        (60, 10, 0.02),
        (120, 10, 0.1),
        (120, 40, 0.02),
        (250, 10, 0.02),
    ] {
        let network = Network {
            rtt: Duration::from_millis(rtt),
            jitter: Duration::from_millis(jitter),
            loss,
        };
        let seed = rtt * 1_000 + jitter * 10 + (loss * 100.0) as u64;
        let classic = feel::run(&setup(network, Delay::Adaptive(3), seed));
        let runner = feel::run(&Setup {
            runner: true,
            ..setup(network, Delay::Adaptive(3), seed)
        });
        assert!(
            classic.streams_equal && runner.streams_equal,
            "streams differ"
        );
        let cell = |f: &Feel| {
            format!(
                "{} | {:.2}% | {:.0} ms | {:.1}",
                f.final_delay,
                f.session_stall_rate * 100.0,
                ms(f.latency),
                f.ticks_per_sec
            )
        };
        println!(
            "| {rtt} ms | {jitter} ms | {:.0}% | {} | {} |",
            loss * 100.0,
            cell(&classic),
            cell(&runner)
        );
    }
}

fn main() {
    // `cargo test --benches` runs this with `--bench`-less arguments: keep
    // it to the real run.
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        return;
    }
    sweep();
    scripted();
    runner();
}
