//! `cargo bench -p lockstep-demo`: one tick of swarm with 8 ships and 500
//! or 2000 creeps, against a budget of one millisecond per tick.

mod common;

use common::arena;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use lockstep_core::Frame;
use std::hint::black_box;

fn step(c: &mut Criterion) {
    let mut group = c.benchmark_group("swarm step, 8 ships");
    for creeps in [500u32, 2000] {
        let (game, mut bots) = arena(creeps);
        let inputs = bots
            .iter_mut()
            .map(|b| Some(b.input(&game)))
            .collect::<Vec<_>>();
        let frame = Frame {
            tick: game.tick,
            inputs,
            events: vec![],
        };
        group.bench_function(format!("{creeps} creeps"), |b| {
            b.iter_batched(
                || game.clone(),
                |mut g| {
                    g.step(black_box(&frame));
                    g
                },
                BatchSize::SmallInput,
            );
        });
        group.bench_function(format!("{creeps} creeps + 8 bots deciding"), |b| {
            b.iter_batched(
                || (game.clone(), bots.clone()),
                |(mut g, mut bots)| {
                    let inputs = bots.iter_mut().map(|b| Some(b.input(&g))).collect();
                    g.step(&Frame {
                        tick: g.tick,
                        inputs,
                        events: vec![],
                    });
                    g
                },
                BatchSize::SmallInput,
            );
        });
    }
    group.finish();
    summary();
}

/// Prints each case against the budget, measured in this run: a plain loop
/// over fresh steps (criterion's figures above are the precise ones).
fn summary() {
    const BUDGET_US: f64 = 1_000.0;
    println!("\nswarm step vs the 1 ms budget (8 ships, 8 bots deciding):");
    for creeps in [500u32, 2000] {
        let (game, bots) = arena(creeps);
        let rounds = 300;
        let mut total = std::time::Duration::ZERO;
        for _ in 0..rounds {
            let (mut g, mut bots) = (game.clone(), bots.clone());
            let start = std::time::Instant::now();
            for _ in 0..10 {
                let inputs = bots.iter_mut().map(|b| Some(b.input(&g))).collect();
                g.step(&Frame {
                    tick: g.tick,
                    inputs,
                    events: vec![],
                });
            }
            total += start.elapsed();
            black_box(g);
        }
        let us = total.as_secs_f64() * 1e6 / f64::from(rounds * 10);
        println!(
            "  {creeps:>5} creeps: {us:>7.1} us/tick = {:.3}x the budget; {:.2}% of a 60 Hz frame",
            us / BUDGET_US,
            us / 16_667.0 * 100.0
        );
    }
}

criterion_group!(benches, step);
criterion_main!(benches);
