//! The Bevy SelfCheck finds what would part machines in a match, naming
//! the component.

mod common;

use bevy::prelude::*;
use lockstep_bevy::SelfCheck;
use lockstep_bevy::prelude::*;
use serde::{Deserialize, Serialize};

/// The test game as it should be: passes.
#[test]
fn the_game_passes() {
    let passed = SelfCheck::<u8>::new(|| common::app(1))
        .players(3)
        .ticks(300)
        .inputs(|tick, seat| ((tick.get() / 7 + u32::from(seat.0)) % 16) as u8)
        .run()
        .expect("deterministic, and its snapshot is its whole state");
    assert_eq!(passed.ticks, 300);
    assert_eq!(passed.round_trips, 10);
}

/// A component whose speed the simulation reads but the snapshot skips.
#[derive(Component, Debug, Default, Serialize, Deserialize)]
#[require(Simulated)]
struct Drifter {
    x: i64,
    #[serde(skip)]
    speed: i64,
}

fn drift(frame: Res<FrameInputs<u8>>, mut q: Query<&mut Drifter>) {
    for mut d in &mut q {
        d.speed += i64::from(frame.inputs.iter().flatten().count() as u8);
        d.x += d.speed;
    }
}

fn drifter_app() -> App {
    let mut app = App::new();
    app.add_plugins((MinimalPlugins, LockstepPlugin::<u8>::default()))
        .lockstep_component::<Drifter>()
        .add_systems(LockstepSchedule, drift)
        .add_systems(Startup, |mut commands: Commands| {
            commands.spawn(Drifter::default());
        });
    app
}

#[test]
fn a_field_the_snapshot_skips_is_named() {
    let err = SelfCheck::<u8>::new(drifter_app)
        .run()
        .expect_err("the skipped field parts the copies");
    let text = err.to_string();
    assert!(text.contains("Drifter"), "{text}");
    assert!(
        err.fields.iter().any(|f| f.path.contains("Drifter.x")),
        "{text}"
    );
    // Found right after the first round trip (tick 29), at tick 30.
    assert_eq!(err.tick.get(), 30, "{text}");
}

/// A component the simulation reads and writes, never registered.
#[derive(Component, Debug, Default)]
struct Hidden(i64);

#[derive(Component, Debug, Default, Serialize, Deserialize)]
#[require(Simulated)]
struct Shown(i64);

fn hidden(frame: Res<FrameInputs<u8>>, mut q: Query<(&mut Hidden, &mut Shown)>) {
    for (mut h, mut s) in &mut q {
        h.0 += 1 + i64::from(frame.tick.get().is_multiple_of(3));
        s.0 += h.0;
    }
}

#[test]
fn a_component_never_registered_is_caught() {
    let make = || {
        let mut app = App::new();
        app.add_plugins((MinimalPlugins, LockstepPlugin::<u8>::default()))
            .lockstep_component::<Shown>()
            .add_systems(LockstepSchedule, hidden)
            .add_systems(Startup, |mut commands: Commands| {
                commands.spawn((Hidden(0), Shown(0)));
            });
        app
    };
    let err = SelfCheck::<u8>::new(make)
        .run()
        .expect_err("a fresh app's Hidden starts over");
    let text = err.to_string();
    assert!(text.contains("Shown"), "{text}");
}

/// A system whose result depends on the order a hash map iterates in.
#[derive(Resource, Debug, Default, Serialize, Deserialize)]
struct Order(Vec<u32>);

fn unordered(mut o: ResMut<Order>) {
    let m: std::collections::HashMap<u32, ()> = (0..16).map(|k| (k, ())).collect();
    o.0 = m.keys().copied().collect();
}

#[test]
fn a_step_that_is_not_deterministic_is_caught() {
    let make = || {
        let mut app = App::new();
        app.add_plugins((MinimalPlugins, LockstepPlugin::<u8>::default()))
            .init_resource::<Order>()
            .lockstep_resource::<Order>()
            .add_systems(LockstepSchedule, unordered);
        app
    };
    let err = SelfCheck::<u8>::new(make)
        .run()
        .expect_err("two hash maps iterate in two orders");
    assert_eq!(err.tick.get(), 0, "{err}");
    assert!(err.to_string().contains("Order"), "{err}");
}

/// State on an entity that did not opt in would be left out of every
/// snapshot and hash: it cannot be saved, loudly.
#[test]
fn registered_state_on_an_entity_not_simulated_is_refused() {
    #[derive(Component, Debug, Default, Serialize, Deserialize)]
    struct Loose(i64);
    let make = || {
        let mut app = App::new();
        app.add_plugins((MinimalPlugins, LockstepPlugin::<u8>::default()))
            .lockstep_component::<Loose>()
            .add_systems(Startup, |mut commands: Commands| {
                commands.spawn(Loose(1));
            });
        app
    };
    let mut app = make();
    app.update();
    let err = lockstep_bevy::state_bytes(app.world()).expect_err("refused");
    assert!(
        err.contains("Loose") && err.contains("not Simulated"),
        "{err}"
    );
}
