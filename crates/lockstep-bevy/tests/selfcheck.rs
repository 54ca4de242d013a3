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
    let mut app = common::bare();
    app.lockstep_component::<Drifter>()
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
        let mut app = common::bare();
        app.lockstep_component::<Shown>()
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
        let mut app = common::bare();
        app.init_resource::<Order>()
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
        let mut app = common::bare();
        app.lockstep_component::<Loose>()
            .add_systems(Startup, |mut commands: Commands| {
                commands.spawn(Loose(1));
            });
        app
    };
    let mut app = make();
    app.update();
    let err = lockstep_bevy::state_bytes(app.world())
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains("Loose") && err.contains("not Simulated"),
        "{err}"
    );
}

/// State registered through reflection (`#[derive(Reflect)]`, no serde):
/// saved, restored into a fresh app and hashed the same as serde state;
/// a field the reflection ignores is named like a skipped serde field.
#[derive(Component, Debug, Default, Reflect)]
#[require(Simulated)]
struct Glider {
    x: i64,
    heading: u8,
}

#[derive(Resource, Debug, Default, Reflect)]
struct Wind(i64);

fn glide(frame: Res<FrameInputs<u8>>, mut wind: ResMut<Wind>, mut q: Query<&mut Glider>) {
    wind.0 += i64::from(frame.tick.get() % 5) - 2;
    for mut g in &mut q {
        let sum = frame
            .inputs
            .iter()
            .flatten()
            .fold(0u8, |a, b| a.wrapping_add(*b));
        g.heading = g.heading.wrapping_add(sum);
        g.x += i64::from(g.heading % 7) + wind.0;
    }
}

fn glider_app() -> App {
    let mut app = common::bare();
    app.init_resource::<Wind>()
        .lockstep_component_reflect::<Glider>()
        .lockstep_resource_reflect::<Wind>()
        .add_systems(LockstepSchedule, glide)
        .add_systems(Startup, |mut commands: Commands| {
            commands.spawn(Glider::default());
            commands.spawn(Glider { x: 5, heading: 3 });
        });
    app
}

#[test]
fn reflected_state_round_trips() {
    let passed = SelfCheck::<u8>::new(glider_app)
        .inputs(|tick, seat| (tick.get() as u8).wrapping_mul(3) ^ seat.0 as u8)
        .run()
        .expect("reflected state is the whole state");
    assert_eq!(passed.round_trips, 10);
}

#[derive(Component, Debug, Default, Reflect)]
#[require(Simulated)]
struct Drifting {
    x: i64,
    #[reflect(ignore)]
    speed: i64,
}

#[test]
fn a_field_the_reflection_ignores_is_named() {
    let make = || {
        let mut app = common::bare();
        app.lockstep_component_reflect::<Drifting>()
            .add_systems(
                LockstepSchedule,
                |frame: Res<FrameInputs<u8>>, mut q: Query<&mut Drifting>| {
                    for mut d in &mut q {
                        d.speed += 1 + i64::from(frame.tick.get() % 2);
                        d.x += d.speed;
                    }
                },
            )
            .add_systems(Startup, |mut commands: Commands| {
                commands.spawn(Drifting::default());
            });
        app
    };
    let err = SelfCheck::<u8>::new(make)
        .run()
        .expect_err("speed is left out");
    assert!(
        err.fields.iter().any(|f| f.path.contains("Drifting.x")),
        "{err}"
    );
}

/// A component that points at another simulated entity.
#[derive(Component, Debug, Clone, Serialize, Deserialize)]
#[require(Simulated)]
struct Follows(Entity);

use bevy::ecs::entity::{EntityMapper, MapEntities};

impl MapEntities for Follows {
    fn map_entities<E: EntityMapper>(&mut self, m: &mut E) {
        self.0 = m.get_mapped(self.0);
    }
}

fn follower_app() -> App {
    let mut app = common::bare();
    app.lockstep_mapped_component::<Follows>();
    app
}

/// References between entities are saved as simulation ids and mapped to
/// the other world's entities; a snapshot whose reference names an id it
/// does not hold is refused before anything changes.
#[test]
fn references_map_between_worlds_and_a_dangling_one_changes_nothing() {
    let mut a = follower_app();
    let w = a.world_mut();
    let leader = w.spawn(Simulated::default()).id();
    let gone = w.spawn(Simulated::default()).id();
    w.spawn(Follows(leader));
    w.despawn(gone);
    let bytes = lockstep_bevy::state_bytes(a.world()).expect("saves");

    // Into another world, whose entities are numbered otherwise.
    let mut b = follower_app();
    let w = b.world_mut();
    for _ in 0..5 {
        w.spawn_empty();
    }
    lockstep_bevy::restore_state(w, &bytes).expect("restores");
    let (follower, target) = {
        let mut q = w.query::<(&Simulated, &Follows)>();
        let (s, f) = q.single(w).expect("one follower");
        (s.id(), f.0)
    };
    assert_eq!(follower, 3);
    assert_eq!(
        w.get::<Simulated>(target).map(Simulated::id),
        Some(1),
        "follows the leader"
    );
    assert_eq!(lockstep_bevy::state_bytes(w).expect("saves"), bytes);

    // The follower points at id 1; renumber the leader to 2 (the id of the
    // entity despawned): the reference dangles.
    let at = bytes
        .windows(10)
        .rposition(|x| x == [1, 0, 0, 0, 0, 3, 0, 0, 0, 1])
        .expect("the leader's record (its id, no Follows), then the follower's");
    let mut bad = bytes.clone();
    bad[at] = 2;
    let before = lockstep_bevy::state_bytes(w).expect("saves");
    let err = lockstep_bevy::restore_state(w, &bad).expect_err("a dangling reference");
    assert!(err.to_string().contains("Follows"), "{err}");
    assert_eq!(
        lockstep_bevy::state_bytes(w).expect("saves"),
        before,
        "nothing changed"
    );
}

/// A simulation that reads Bevy's clock (`Time`, which each machine
/// advances its own way) instead of `SimTime`: each copy's clock runs its
/// own way in the check, and the check names the field it moved.
#[test]
fn a_simulation_reading_bevys_clock_is_caught() {
    fn clocked(time: Res<Time>, mut q: Query<&mut Shown>) {
        for mut s in &mut q {
            s.0 += time.delta().as_millis() as i64;
        }
    }
    let err = SelfCheck::<u8>::new(|| {
        let mut app = common::bare();
        app.lockstep_component::<Shown>()
            .add_systems(LockstepSchedule, clocked)
            .add_systems(Startup, |mut commands: Commands| {
                commands.spawn(Shown(0));
            });
        app
    })
    .run()
    .expect_err("Time parts the copies");
    assert!(err.fields.iter().any(|f| f.path.contains("Shown")), "{err}");
}

/// State on an entity that is not `Simulated`: the check says it cannot
/// be saved, and why (not a malformed empty snapshot).
#[test]
fn state_outside_the_simulation_is_named() {
    let err = SelfCheck::<u8>::new(|| {
        let mut app = common::bare();
        app.lockstep_component::<Shown>().add_systems(
            LockstepSchedule,
            |frame: Res<FrameInputs<u8>>, mut commands: Commands| {
                if frame.tick.get() == 5 {
                    let e = commands.spawn(Shown(1)).id();
                    commands.entity(e).remove::<Simulated>();
                }
            },
        );
        app
    })
    .run()
    .expect_err("unsavable");
    assert!(
        matches!(&err.cause, lockstep_core::desync::Cause::Unsavable(why) if why.contains("not Simulated") && why.contains("Shown")),
        "{err}"
    );
}

/// A hound hunts a prey (an entity reference); the prey is caught and
/// despawned, and the hound keeps pointing at it for a while, as Bevy code
/// does. The reference is saved as none (`Entity::PLACEHOLDER`) on every
/// machine alike: the state saves, round trips, and the check passes
/// (the session used to stop, as if the hound pointed outside the
/// simulation).
#[test]
fn a_reference_to_a_despawned_entity_saves_as_none() {
    use bevy::ecs::entity::{EntityMapper, MapEntities};
    #[derive(Component, Debug, Clone, Serialize, Deserialize)]
    #[require(Simulated)]
    struct Hunts(Entity);
    impl MapEntities for Hunts {
        fn map_entities<M: EntityMapper>(&mut self, m: &mut M) {
            self.0 = m.get_mapped(self.0);
        }
    }
    fn hunt(
        frame: Res<FrameInputs<u8>>,
        mut commands: Commands,
        prey: Query<(Entity, &Shown)>,
        mut hounds: Query<&mut Hunts>,
    ) {
        let t = frame.tick.get();
        if t == 1 {
            let p = commands.spawn(Shown(7)).id();
            commands.spawn(Hunts(p));
        }
        if t == 12 {
            for (e, _) in &prey {
                commands.entity(e).despawn();
            }
        }
        if t == 200 {
            for mut h in &mut hounds {
                h.0 = Entity::PLACEHOLDER;
            }
        }
    }
    let passed = SelfCheck::<u8>::new(|| {
        let mut app = common::bare();
        app.lockstep_component::<Shown>()
            .lockstep_mapped_component::<Hunts>()
            .add_systems(LockstepSchedule, hunt);
        app
    })
    .ticks(240)
    .run()
    .expect("a stale reference is state like any other");
    assert_eq!(passed.ticks, 240);
}
