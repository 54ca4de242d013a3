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
        common::until_finished(&mut refs, 60, |refs| run(&net, refs, &mut clock, 30));
        let hashes: Vec<_> = apps
            .iter()
            .enumerate()
            .map(|(p, a)| {
                assert_eq!(
                    *a.world().resource::<LockstepStatus>(),
                    LockstepStatus::Session(Status::Finished),
                    "seed {seed}"
                );
                assert_eq!(
                    a.world().resource::<LockstepStats>().seat,
                    Some(PlayerId(p as u16)),
                    "each app knows its seat"
                );
                assert_eq!(a.world().resource::<SimTime>().tick, 300);
                assert_eq!(a.world().resource::<SimTime>().rate, 30, "the match's rate");
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

fn room() -> lockstep_core::sequenced::SequencerConfig {
    lockstep_core::sequenced::SequencerConfig {
        policy: lockstep_core::sequenced::Policy::WaitForAll {
            abandon_after: Duration::from_secs(10),
        },
        snapshot_join: true,
        snapshot_join_after: 0,
        ..lockstep_core::sequenced::SequencerConfig::default()
    }
}

/// Two apps play through a relay's room; a third joins four seconds in,
/// from a snapshot one of them sends without a line of the game's code:
/// all three end on one state at tick 400, and the joiner's ship moved by
/// its own inputs.
#[test]
fn an_app_joins_mid_match_from_a_snapshot() {
    for seed in 1..=3u64 {
        let link = LinkConditions {
            latency: Duration::from_millis(25),
            jitter: Duration::from_millis(8),
            loss: 0.03,
            ..LinkConditions::default()
        };
        let net = Net::new(seed, link);
        let mut server = common::Server::new(&net, room());
        let mut apps: Vec<bevy::prelude::App> = Vec::new();
        for p in 1..=2u32 {
            let mut a = app(seed * 10 + u64::from(p));
            let mut s = common::client_session(&net, PeerId(p), false);
            s.set_last_tick(Some(Tick::new(400)));
            a.insert_resource(s);
            apps.push(a);
        }
        let mut clock = Instant::ZERO;
        {
            let mut refs: Vec<&mut bevy::prelude::App> = apps.iter_mut().collect();
            common::run_star(&net, &mut server, &mut refs, &mut clock, 240);
        }
        let mut joiner = app(seed * 10 + 3);
        let mut s = common::client_session(&net, PeerId(3), false);
        s.set_last_tick(Some(Tick::new(400)));
        joiner.insert_resource(s);
        apps.push(joiner);
        {
            let mut refs: Vec<&mut bevy::prelude::App> = apps.iter_mut().collect();
            common::until_finished(&mut refs, 40, |refs| {
                common::run_star(&net, &mut server, refs, &mut clock, 30);
            });
        }
        assert_eq!(
            apps[2].world().resource::<LockstepStats>().seat,
            Some(PlayerId(2)),
            "seed {seed}: the joiner knows its seat"
        );
        // It says goodbye: the seat it played is still told.
        apps[2]
            .world_mut()
            .resource_mut::<LockstepSession<u8>>()
            .leave();
        {
            let mut refs: Vec<&mut bevy::prelude::App> = apps.iter_mut().collect();
            common::run_star(&net, &mut server, &mut refs, &mut clock, 10);
        }
        assert_eq!(
            apps[2].world().resource::<LockstepStats>().seat,
            Some(PlayerId(2)),
            "seed {seed}: the seat it played, after it left"
        );
        let seen = &apps[2].world().resource::<common::Seen>().0;
        assert!(
            seen.iter()
                .any(|e| matches!(e, lockstep_core::Event::Snapshot { .. })),
            "seed {seed}: the joiner took a snapshot: {seen:?}"
        );
        let hashes: Vec<_> = apps
            .iter()
            .map(|a| {
                assert_eq!(
                    *a.world().resource::<LockstepStatus>(),
                    LockstepStatus::Session(Status::Finished),
                    "seed {seed}"
                );
                state_hash(a.world()).expect("saves")
            })
            .collect();
        assert!(
            hashes.windows(2).all(|w| w[0] == w[1]),
            "seed {seed}: {hashes:?}"
        );
        assert!(
            apps[2].world().resource::<common::Restored>().0 >= 1,
            "seed {seed}: LockstepRestored ran"
        );
        let ships = common::ships(&mut apps[2]);
        assert_eq!(ships.len(), 3, "seed {seed}: {ships:?}");
        assert!(
            ships[2].x != 0 || ships[2].y != 0,
            "seed {seed}: the joiner's ship moved: {ships:?}"
        );
    }
}

/// Three apps through a relay's room; one app's state is changed from
/// outside the simulation (a bug, a cheat): the divergence is found at
/// the first tick whose state differs, the app is healed from another's
/// state with no code of the game's, and all three end on one state.
#[test]
fn a_changed_state_is_found_at_its_tick_and_healed() {
    // What the log says, for a game that reads no events.
    let said = common::Said::default();
    let _log = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_writer(said.clone())
            .with_ansi(false)
            .finish(),
    );
    for seed in 1..=3u64 {
        let link = LinkConditions {
            latency: Duration::from_millis(20),
            jitter: Duration::from_millis(5),
            loss: 0.02,
            ..LinkConditions::default()
        };
        let net = Net::new(seed, link);
        let mut server = common::Server::new(&net, room());
        let mut apps: Vec<bevy::prelude::App> = (1..=3u32)
            .map(|p| {
                let mut a = app(seed * 10 + u64::from(p));
                let mut s = common::client_session(&net, PeerId(p), false);
                s.set_last_tick(Some(Tick::new(450)));
                a.insert_resource(s);
                a
            })
            .collect();
        let mut clock = Instant::ZERO;
        let mut refs: Vec<&mut bevy::prelude::App> = apps.iter_mut().collect();
        common::run_star(&net, &mut server, &mut refs, &mut clock, 200);
        // The change, between two updates: the next tick's state differs.
        let w = refs[1].world_mut();
        let changed_after = w.resource::<SimTime>().tick;
        let mut q = w.query::<&mut common::Ship>();
        for mut ship in q.iter_mut(w) {
            ship.x += 1;
        }
        common::until_finished(&mut refs, 40, |refs| {
            common::run_star(&net, &mut server, refs, &mut clock, 30)
        });
        common::one_state(&apps, &format!("seed {seed}"));
        for a in &apps {
            assert_eq!(a.world().resource::<SimTime>().tick, 450, "seed {seed}");
        }
        let seen = &apps[1].world().resource::<common::Seen>().0;
        assert!(
            seen.iter()
                .any(|e| matches!(e, lockstep_core::Event::Resyncing)),
            "seed {seed}: the changed app was resynced: {seen:?}"
        );
        assert!(apps[1].world().resource::<common::Restored>().0 >= 1);
        // Its first divergent tick, named exactly: the tick after the change
        // (the checkpoint that differed comes a few ticks later).
        let named: Vec<Tick> = seen
            .iter()
            .filter_map(|e| match e {
                lockstep_core::Event::DesyncLocated { first: Some(f), .. } => Some(f.tick),
                _ => None,
            })
            .collect();
        assert_eq!(
            named.first().copied(),
            Some(Tick::new(changed_after + 1)),
            "seed {seed}: {seen:?}"
        );
    }
    let log = said.text();
    assert!(
        log.contains("differs from the match's") && log.contains("being replaced"),
        "{log}"
    );
}

/// Two apps through a relay's room; one's connection is cut for good four
/// seconds in: it takes its seat back on a new connection by itself (no
/// code of the game's), and both end on one state at tick 500 with its
/// inputs running again.
#[test]
fn an_app_whose_connection_drops_reconnects() {
    for seed in 1..=3u64 {
        let link = LinkConditions {
            latency: Duration::from_millis(20),
            jitter: Duration::from_millis(5),
            loss: 0.02,
            ..LinkConditions::default()
        };
        let net = Net::new(seed, link);
        let mut server = common::Server::new(&net, room());
        let mut apps: Vec<bevy::prelude::App> = (1..=2u32)
            .map(|p| {
                let mut a = app(seed * 10 + u64::from(p));
                let mut s = common::reconnecting_session(&net, PeerId(p));
                s.set_last_tick(Some(Tick::new(500)));
                a.insert_resource(s);
                a
            })
            .collect();
        let mut clock = Instant::ZERO;
        let mut refs: Vec<&mut bevy::prelude::App> = apps.iter_mut().collect();
        common::run_star(&net, &mut server, &mut refs, &mut clock, 240);
        net.cut(PeerId(2), common::SERVER);
        let before = common::ships(refs[1]);
        let mut reconnecting = false;
        common::until_finished(&mut refs, 200, |refs| {
            common::run_star(&net, &mut server, refs, &mut clock, 10);
            let now_reconnecting = *refs[1].world().resource::<LockstepStatus>()
                == LockstepStatus::Session(Status::Reconnecting);
            if now_reconnecting {
                // Still its seat (its box), while it takes it back.
                assert!(refs[1].world().resource::<LockstepStats>().seat.is_some());
            }
            reconnecting |= now_reconnecting;
        });
        assert!(reconnecting, "seed {seed}: it said Reconnecting meanwhile");
        common::one_state(&apps, &format!("seed {seed}"));
        for a in &apps {
            assert_eq!(a.world().resource::<SimTime>().tick, 500, "seed {seed}");
        }
        let seen = &apps[1].world().resource::<common::Seen>().0;
        assert!(
            seen.iter()
                .any(|e| matches!(e, lockstep_core::Event::Reconnected { .. })),
            "seed {seed}: {seen:?}"
        );
        // Its ship went on moving by its inputs after the reconnect.
        let after = common::ships(&mut apps[1]);
        assert_eq!(after.len(), 2, "seed {seed}: its seat kept");
        assert_ne!(before[1], after[1], "seed {seed}");
    }
}

/// A ship spawned without `Simulated` mid-match (its `require` left out)
/// would be state no snapshot or hash holds: the session stops, saying
/// why, instead of playing on.
#[test]
fn state_outside_the_snapshot_stops_the_session_loudly() {
    use bevy::prelude::*;
    let net = Net::new(1, LinkConditions::default());
    let roster = Roster::new().player(PeerId(0), PlayerId(0));
    let mut a = app(1);
    a.add_systems(
        LockstepSchedule,
        |frame: Res<FrameInputs<u8>>, mut commands: Commands| {
            if frame.tick.get() == 40 {
                let e = commands.spawn(common::Ship::default()).id();
                commands.entity(e).remove::<Simulated>();
            }
        },
    );
    let session = MeshSession::<u8>::new(MeshConfig::default(), roster, PeerId(0), Instant::ZERO)
        .expect("a mesh session");
    a.insert_resource(LockstepSession::mesh(session, net.transport(PeerId(0))));
    let mut clock = Instant::ZERO;
    run(&net, &mut [&mut a], &mut clock, 120);
    assert_eq!(
        *a.world().resource::<LockstepStatus>(),
        LockstepStatus::Failed
    );
    let mut s = a.world_mut().resource_mut::<LockstepSession<u8>>();
    let why = s.failure().expect("a reason").to_owned();
    assert!(
        why.contains("not Simulated") && why.contains("Ship"),
        "{why}"
    );
}

/// A host-mode match: one app hosts, three join; the host's app stops for
/// good four seconds in (its process killed): the others take the match
/// over among themselves and end on one state at tick 400.
#[test]
fn a_hosted_match_survives_its_host_app() {
    use lockstep_core::sequenced::{HostedConfig, HostedSession};
    for seed in 1..=2u64 {
        let link = LinkConditions {
            latency: Duration::from_millis(15),
            jitter: Duration::from_millis(5),
            loss: 0.01,
            ..LinkConditions::default()
        };
        let net = Net::new(seed, link);
        let config = HostedConfig::default();
        let mut apps: Vec<bevy::prelude::App> = (0..4u32)
            .map(|p| {
                let session = if p == 0 {
                    HostedSession::host(config.clone(), Instant::ZERO)
                } else {
                    HostedSession::join(config.clone(), PeerId(0), Instant::ZERO)
                }
                .expect("a hosted session");
                let mut s = LockstepSession::<u8>::hosted(session, net.transport(PeerId(p)));
                s.set_last_tick(Some(Tick::new(400)));
                let mut a = app(seed * 10 + u64::from(p));
                a.insert_resource(s);
                a
            })
            .collect();
        let mut clock = Instant::ZERO;
        {
            let mut refs: Vec<&mut bevy::prelude::App> = apps.iter_mut().collect();
            run(&net, &mut refs, &mut clock, 240);
        }
        // The host is gone: nobody hears from it again.
        let host = apps.remove(0);
        for p in 1..4u32 {
            net.cut(PeerId(0), PeerId(p));
        }
        drop(host);
        let mut refs: Vec<&mut bevy::prelude::App> = apps.iter_mut().collect();
        common::until_finished(&mut refs, 120, |refs| run(&net, refs, &mut clock, 10));
        common::one_state(&apps, &format!("seed {seed}"));
        for a in &apps {
            assert_eq!(a.world().resource::<SimTime>().tick, 400, "seed {seed}");
            let seen = &a.world().resource::<common::Seen>().0;
            assert!(
                seen.iter()
                    .any(|e| matches!(e, lockstep_core::Event::Reconnected { .. })),
                "seed {seed}: {seen:?}"
            );
        }
    }
}

/// A component registered as state after the session started (a plugin
/// added late) would be in no snapshot the match already agreed on: the
/// session stops, naming it, instead of playing on without it.
#[test]
fn state_registered_after_the_start_stops_the_session_loudly() {
    #[derive(bevy::prelude::Component, serde::Serialize, serde::Deserialize)]
    struct Late(u32);
    let net = Net::new(1, LinkConditions::default());
    let roster = Roster::new().player(PeerId(0), PlayerId(0));
    let mut a = app(1);
    let session = MeshSession::<u8>::new(MeshConfig::default(), roster, PeerId(0), Instant::ZERO)
        .expect("a mesh session");
    a.insert_resource(LockstepSession::mesh(session, net.transport(PeerId(0))));
    let mut clock = Instant::ZERO;
    run(&net, &mut [&mut a], &mut clock, 30);
    assert_eq!(
        *a.world().resource::<LockstepStatus>(),
        LockstepStatus::Session(Status::Playing)
    );
    a.lockstep_component::<Late>();
    run(&net, &mut [&mut a], &mut clock, 2);
    assert_eq!(
        *a.world().resource::<LockstepStatus>(),
        LockstepStatus::Failed
    );
    let mut s = a.world_mut().resource_mut::<LockstepSession<u8>>();
    let why = s.failure().expect("a reason").to_owned();
    assert!(why.contains("Late") && why.contains("after"), "{why}");
}
