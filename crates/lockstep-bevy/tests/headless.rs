//! Bevy apps, headless, playing over the simulated network.

mod common;

use common::{Net, app, run};
use lockstep_bevy::prelude::*;
use lockstep_bevy::state_hash;
use lockstep_core::runner::Status;
use lockstep_core::sim::LinkConditions;
use lockstep_core::{Instant, MeshConfig, MeshSession, PeerId, PlayerId, Roster, Tick};
use std::time::Duration;

/// Two to four apps in a mesh under loss and jitter, each stopping at
/// tick 300: every one ends on the same state.
#[test]
fn apps_in_a_mesh_end_equal() {
    for (seed, players) in [(1u64, 2u32), (2, 3), (3, 4)] {
        let link = LinkConditions {
            latency: Duration::from_millis(30),
            jitter: Duration::from_millis(10),
            loss: 0.05,
            ..LinkConditions::default()
        };
        let net = Net::new(seed, link);
        let mut roster = Roster::new();
        for p in 0..players {
            roster = roster.player(PeerId(p), PlayerId(p as u16));
        }
        let mut apps: Vec<_> = (0..players)
            .map(|p| {
                let mut a = app(seed * 10 + u64::from(p));
                let session = MeshSession::<u8>::new(
                    MeshConfig::default(),
                    roster.clone(),
                    PeerId(p),
                    Instant::ZERO,
                )
                .expect("a mesh session");
                let mut s = LockstepSession::mesh(session, net.transport(PeerId(p)));
                s.set_last_tick(Some(Tick::new(300)));
                a.insert_resource(s);
                a
            })
            .collect();
        let mut clock = Instant::ZERO;
        let mut refs: Vec<&mut bevy::prelude::App> = apps.iter_mut().collect();
        for _ in 0..60 {
            run(&net, &mut refs, &mut clock, 30);
            let done = refs.iter().all(|a| {
                *a.world().resource::<LockstepStatus>() == LockstepStatus::Session(Status::Finished)
            });
            if done {
                break;
            }
        }
        let hashes: Vec<_> = apps
            .iter()
            .map(|a| {
                assert_eq!(
                    *a.world().resource::<LockstepStatus>(),
                    LockstepStatus::Session(Status::Finished),
                    "seed {seed}"
                );
                assert_eq!(a.world().resource::<SimTime>().tick, 300);
                state_hash(a.world()).expect("saves")
            })
            .collect();
        assert!(
            hashes.windows(2).all(|w| w[0] == w[1]),
            "seed {seed}: {hashes:?}"
        );
        let score = apps[0].world().resource::<common::Score>();
        assert_eq!(score.0.len(), players as usize, "every seat's ship scored");
        // Every player's input ran: each ship moved.
        let w = apps[0].world_mut();
        let ships: Vec<common::Ship> = w.query::<&common::Ship>().iter(w).cloned().collect();
        assert_eq!(ships.len(), players as usize);
        assert!(
            ships.iter().all(|s| s.x != 0 || s.y != 0),
            "seed {seed}: {ships:?}"
        );
    }
}
