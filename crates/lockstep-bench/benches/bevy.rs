//! `cargo bench -p lockstep-bench --bench bevy`: what the Bevy plugin adds
//! to each tick of a game, against the game's own systems alone.
//!
//! The game: `N` simulated units (position, velocity, health) moved by one
//! system, for N of 100, 1,000 and 10,000. Measured in one run:
//! - the game alone: its simulation schedule run on a plain Bevy world,
//!   once per tick;
//! - through the plugin: a single-player match (a mesh of one), one tick
//!   per app update, which adds the runner's turn, moving the world in and
//!   out of the runner, sampling the input and saving and hashing the
//!   registered state every tick for the checksums;
//! - the state's save and hash alone (`state_hash`).

use bevy::ecs::schedule::ScheduleLabel;
use bevy::prelude::*;
use bevy::time::TimeUpdateStrategy;
use criterion::Criterion;
use lockstep_bevy::prelude::*;
use lockstep_core::{Instant as SimInstant, MeshConfig, MeshSession, PeerId, PlayerId, Roster};
use lockstep_net::{Transport, TransportError};
use serde::{Deserialize, Serialize};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// One unit of the game, in whole numbers.
#[derive(Component, Clone, Serialize, Deserialize)]
#[require(Simulated)]
struct Unit {
    x: i32,
    y: i32,
    vx: i32,
    vy: i32,
    hp: u32,
}

fn step(mut units: Query<&mut Unit>, frame: Option<Res<FrameInputs<u8>>>) {
    let push = frame
        .and_then(|f| f.input(PlayerId(0)).copied())
        .map_or(0, i32::from);
    for mut u in &mut units {
        u.vx = (u.vx + push - 1).clamp(-8, 8);
        u.x = (u.x + u.vx).rem_euclid(10_000);
        u.y = (u.y + u.vy).rem_euclid(10_000);
        u.hp = u.hp.wrapping_add(1) % 1_000;
    }
}

fn spawn(world: &mut World, n: u32) {
    for i in 0..n {
        let k = i as i32;
        world.spawn(Unit {
            x: k * 37 % 10_000,
            y: k * 91 % 10_000,
            vx: k % 5 - 2,
            vy: k % 7 - 3,
            hp: i % 1_000,
        });
    }
}

/// The game's schedule on a plain world (the baseline).
#[derive(ScheduleLabel, Debug, Clone, PartialEq, Eq, Hash)]
struct Alone;

fn alone(n: u32) -> World {
    let mut world = World::new();
    let mut schedule = Schedule::new(Alone);
    schedule.add_systems(step);
    world.add_schedule(schedule);
    spawn(&mut world, n);
    world
}

/// A transport with nobody on it: a match of one.
struct Nobody;

impl Transport for Nobody {
    fn send(&mut self, _: PeerId, _: &[u8]) -> Result<(), TransportError> {
        Ok(())
    }
    fn recv(&mut self, _: &mut [u8]) -> Result<Option<(PeerId, usize)>, TransportError> {
        Ok(None)
    }
}

/// A single-player match through the plugin, a tick of time per update.
fn through_plugin(n: u32) -> App {
    let mut app = App::new();
    app.add_plugins((MinimalPlugins, LockstepPlugin::<u8>::default()))
        .insert_resource(TimeUpdateStrategy::ManualDuration(Duration::from_micros(
            33_334,
        )))
        .lockstep_component::<Unit>()
        .add_systems(LockstepSchedule, step)
        .add_systems(LockstepInput, |mut i: ResMut<LocalInput<u8>>| {
            i.0 = i.0.wrapping_add(1) % 3;
        });
    spawn(app.world_mut(), n);
    let session = MeshSession::<u8>::new(
        MeshConfig::default(),
        Roster::new().player(PeerId(0), PlayerId(0)),
        PeerId(0),
        SimInstant::ZERO,
    )
    .expect("a match of one");
    app.insert_resource(LockstepSession::mesh(session, Nobody));
    // Into play: past the start and the first ticks.
    for _ in 0..30 {
        app.update();
    }
    app
}

fn ticks(app: &App) -> u64 {
    app.world().resource::<SimTime>().ticks
}

fn main() {
    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(20)
        .measurement_time(Duration::from_secs(4));
    let mut figures = Vec::new();
    for n in [100u32, 1_000, 10_000] {
        let mut world = alone(n);
        let mut t_alone = Duration::ZERO;
        c.bench_function(&format!("bevy/alone/{n}"), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    world.run_schedule(Alone);
                }
                let d = start.elapsed();
                t_alone = d / iters as u32;
                d
            });
        });
        let mut app = through_plugin(n);
        assert_eq!(
            *app.world().resource::<LockstepStatus>(),
            LockstepStatus::Session(Status::Playing),
            "the match of one plays"
        );
        let mut t_plugin = Duration::ZERO;
        c.bench_function(&format!("bevy/plugin/{n}"), |b| {
            b.iter_custom(|iters| {
                // Updates until `iters` more ticks ran: time per tick.
                let from = ticks(&app);
                let start = Instant::now();
                while ticks(&app) < from + iters {
                    app.update();
                }
                let d = start.elapsed();
                t_plugin = d / iters as u32;
                d
            });
        });
        let mut t_hash = Duration::ZERO;
        c.bench_function(&format!("bevy/state_hash/{n}"), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(lockstep_bevy::state_hash(app.world()));
                }
                let d = start.elapsed();
                t_hash = d / iters as u32;
                d
            });
        });
        figures.push((n, t_alone, t_plugin, t_hash));
    }
    println!();
    println!("per tick, N units      game alone     through the plugin   ratio    save+hash");
    for (n, a, p, h) in figures {
        println!(
            "{n:>8}        {:>10.1} us   {:>10.1} us        {:>6.1}x   {:>8.1} us",
            a.as_secs_f64() * 1e6,
            p.as_secs_f64() * 1e6,
            p.as_secs_f64() / a.as_secs_f64().max(1e-12),
            h.as_secs_f64() * 1e6,
        );
    }
    c.final_summary();
}
