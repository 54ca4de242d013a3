//! Bevy apps with the lockstep plugin against the `lockstep relay` binary
//! over loopback UDP: two play from the start, a third joins mid-match
//! from a snapshot one of them sends; all three end on one state.

use crate::common::{RelayProcess, UDP_ONLY};
use bevy::prelude::*;
use lockstep_bevy::prelude::*;
use lockstep_core::runner::Status;
use lockstep_core::sequenced::ClientConfig;
use lockstep_core::{PlayerId, SystemEvent, Tick};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// A seat's marker, moved by its input.
#[derive(Component, Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[require(Simulated)]
struct Marker {
    seat: u16,
    x: i64,
    steps: u64,
}

fn simulate(
    mut commands: Commands,
    frame: Res<FrameInputs<u8>>,
    mut markers: Query<&mut Marker>,
    mut rng: ResMut<SimRng>,
) {
    for e in &frame.events {
        if let SystemEvent::Joined { player } = e {
            commands.spawn(Marker {
                seat: player.0,
                ..Marker::default()
            });
        }
    }
    let wobble = rng.below(3) as i64;
    for mut m in &mut markers {
        let input = frame.input(PlayerId(m.seat)).copied().unwrap_or(0);
        m.x += i64::from(input) - 2 + wobble;
        m.steps += u64::from(input != 0);
    }
}

#[derive(Resource)]
struct Seed(u8);

fn controls(mut seed: ResMut<Seed>, mut input: ResMut<LocalInput<u8>>) {
    seed.0 = seed.0.wrapping_mul(5).wrapping_add(3);
    // Idle (the neutral 0) now and then, as players are.
    input.0 = seed.0 % 5;
}

#[derive(Resource, Default)]
struct Restored(u32);

fn app(relay: std::net::SocketAddr, seed: u8) -> App {
    let mut app = App::new();
    app.add_plugins((MinimalPlugins, LockstepPlugin::<u8>::default()))
        .insert_resource(Seed(seed))
        .insert_resource(SimRng::seeded(7))
        .init_resource::<Restored>()
        .lockstep_component::<Marker>()
        .add_systems(LockstepInput, controls)
        .add_systems(LockstepSchedule, simulate)
        .add_systems(LockstepRestored, |mut r: ResMut<Restored>| r.0 += 1);
    let config = ClientConfig {
        room: "bevy".into(),
        ..ClientConfig::default()
    };
    let mut session = LockstepSession::<u8>::relay(relay, config);
    session.set_last_tick(Some(Tick::new(LAST)));
    app.insert_resource(session);
    app
}

const LAST: u32 = 420;

fn status(app: &App) -> LockstepStatus {
    *app.world().resource::<LockstepStatus>()
}

#[test]
fn bevy_apps_play_through_the_relay_binary_and_one_joins_late() {
    let config =
        std::env::temp_dir().join(format!("lockstep-bevy-e2e-{}.toml", std::process::id()));
    std::fs::write(
        &config,
        "[room_defaults]\nsnapshot_join = true\nsnapshot_join_after = 0\ntick_rate = 60\n",
    )
    .expect("write the relay's config");
    let path = config.to_string_lossy().into_owned();
    let mut args = UDP_ONLY.to_vec();
    args.extend(["--config", path.as_str()]);
    let relay = RelayProcess::start(&args);
    let udp = relay.addr("udp");
    let mut apps = vec![app(udp, 1), app(udp, 2)];
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut joined = false;
    loop {
        for a in &mut apps {
            a.update();
        }
        let tick = apps[0].world().resource::<SimTime>().tick;
        if !joined && tick >= 120 {
            apps.push(app(udp, 3));
            joined = true;
        }
        if joined
            && apps
                .iter()
                .all(|a| status(a) == LockstepStatus::Session(Status::Finished))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not done in 60 s: {:?}",
            apps.iter().map(status).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let hashes: Vec<u64> = apps
        .iter()
        .map(|a| lockstep_bevy::state_hash(a.world()).expect("saves"))
        .collect();
    assert!(hashes.windows(2).all(|w| w[0] == w[1]), "{hashes:?}");
    for a in &apps {
        assert_eq!(a.world().resource::<SimTime>().tick, LAST);
    }
    // The joiner came in from a snapshot, and its own inputs ran.
    let joiner = &mut apps[2];
    assert!(
        joiner.world().resource::<Restored>().0 >= 1,
        "restored from a snapshot"
    );
    let w = joiner.world_mut();
    let mut markers: Vec<Marker> = w.query::<&Marker>().iter(w).cloned().collect();
    markers.sort_by_key(|m| m.seat);
    assert_eq!(markers.len(), 3, "{markers:?}");
    assert!(
        markers[2].steps > 100,
        "the joiner's inputs ran: {markers:?}"
    );
    let _ = std::fs::remove_file(&config);
}
