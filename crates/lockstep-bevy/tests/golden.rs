//! The snapshot encoding, byte for byte: a fixture world's saved state is
//! pinned here, so a change to how state is saved shows (snapshots of one
//! build must load in another build of the same game).

use bevy::ecs::entity::{EntityMapper, MapEntities};
use bevy::prelude::*;
use lockstep_bevy::prelude::*;
use lockstep_bevy::{restore_state, state_bytes};
use serde::{Deserialize, Serialize};

#[derive(Component, Clone, Serialize, Deserialize)]
#[require(Simulated)]
struct Body {
    x: i32,
    y: i32,
    name: String,
}

#[derive(Component, Clone, Serialize, Deserialize)]
struct Target(Entity);

impl MapEntities for Target {
    fn map_entities<M: EntityMapper>(&mut self, mapper: &mut M) {
        self.0 = mapper.get_mapped(self.0);
    }
}

#[derive(Component, Reflect, Default)]
#[reflect(Component)]
struct Health {
    points: u16,
    tags: Vec<u8>,
}

#[derive(Resource, Default, Serialize, Deserialize)]
struct Score(Vec<u32>);

pub(crate) fn app() -> App {
    let mut app = App::new();
    app.add_plugins(LockstepPlugin::<u8>::default())
        .lockstep_component::<Body>()
        .lockstep_mapped_component::<Target>()
        .lockstep_component_reflect::<Health>()
        .lockstep_resource::<Score>()
        .insert_resource(SimRng::seeded(0x0123_4567_89ab_cdef));
    app
}

pub(crate) fn fixture() -> App {
    let mut app = app();
    let w = app.world_mut();
    let a = w
        .spawn((
            Body {
                x: -1,
                y: 300,
                name: "a".into(),
            },
            Health {
                points: 9,
                tags: vec![1, 2],
            },
        ))
        .id();
    w.spawn((
        Body {
            x: 3,
            y: 4,
            name: "bee".into(),
        },
        Target(a),
    ));
    w.insert_resource(Score(vec![5, 600]));
    app
}

/// The fixture's state: "LKBV", version 1, the registry's fingerprint,
/// the next simulation id, then the resources (`Score`, `SimRng`,
/// `SimTime`, by type name) and both entities by id with their components
/// (`Body`, `Health`, `Target`, by type name), each value a presence
/// byte, its length (u32) and its postcard bytes.
const GOLDEN: &str = "4c4b425601b568c31f0bd7fb4e0200000001040000000205d8040109000000ef9bafcdf8acd1910101030000000000000200000001000000010500000001d804016101040000000902010200020000000106000000060803626565000105000000feffffff0f";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn saved_state_keeps_its_bytes() {
    let bytes = state_bytes(fixture().world()).expect("saves");
    assert_eq!(hex(&bytes), GOLDEN);
    let mut other = app();
    restore_state(other.world_mut(), &bytes).expect("loads");
    assert_eq!(state_bytes(other.world()).expect("saves"), bytes);
}
