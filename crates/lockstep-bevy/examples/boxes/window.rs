//! The boxes in a window (cargo feature `window`): you steer the first
//! player's box with the arrow keys or WASD; every other player is a bot,
//! each its own headless app on its own thread, as in the terminal.
//!
//! What shows the match is not its state: the simulation spawns bare
//! `Player` entities (and a restored snapshot spawns them again), and the
//! systems here dress each in a sprite and place it every frame.

use super::*;
use bevy::window::WindowResolution;
use std::sync::{Mutex, PoisonError};

/// Pixels per millimetre of the plane.
const SCALE: f32 = 280.0 / HALF as f32;

/// How the match ended, as far as this process saw it: the state hash of
/// every bot app whose match is over, and of the window's.
#[derive(Resource, Clone, Default)]
struct Tally {
    bots: Arc<Mutex<Vec<Option<u64>>>>,
    /// Bot apps that play (the late joiner counted from the start).
    expected: usize,
    mine: Arc<Mutex<Option<Option<u64>>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A bot player on a thread of its own, updating its app 60 times a
/// second until its match is over.
fn bot(session: LockstepSession<u8>, seed: u64, tally: &Tally) {
    let bots = tally.bots.clone();
    std::thread::spawn(move || {
        let mut app = app(seed, session);
        while !over(&app) {
            app.update();
            std::thread::sleep(Duration::from_micros(16_667));
        }
        lock(&bots).push(lockstep_bevy::state_hash(app.world()));
    });
}

/// Plays the match with the first player in a window; returns when the
/// window is closed.
pub(crate) fn run(
    o: &Options,
    relay: Option<SocketAddr>,
    cut: Arc<AtomicBool>,
    mut players: Vec<(LockstepSession<u8>, u64)>,
) -> Result<(), String> {
    if players.is_empty() {
        return Err("no player to show".into());
    }
    let (mine, _) = players.remove(0);
    let late = o.late_join && relay.is_some();
    let tally = Tally {
        expected: players.len() + usize::from(late),
        ..Tally::default()
    };
    for (session, seed) in players {
        bot(session, seed, &tally);
    }
    // What happens four seconds in, as in the terminal.
    if late || o.drop_reconnect {
        let (drop, room, ticks, tally) = (o.drop_reconnect, o.room.clone(), o.ticks, tally.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(4));
            if drop {
                println!("-- player 1's link is cut; it takes its seat back on a new socket");
                cut.store(true, Ordering::Relaxed);
            }
            if let (true, Some(relay)) = (late, relay) {
                println!("-- a third player joins mid-match (from a snapshot)");
                match late_player(relay, &room, ticks) {
                    Ok(session) => bot(session, 13, &tally),
                    Err(e) => eprintln!("the late player could not start: {e}"),
                }
            }
        });
    }

    let mut app = App::new();
    app.add_plugins(DefaultPlugins.set(WindowPlugin {
        primary_window: Some(Window {
            title: "lockstep: boxes".into(),
            resolution: WindowResolution::new(640, 680),
            ..default()
        }),
        ..default()
    }))
    .add_plugins(LockstepPlugin::<u8>::default());
    game(&mut app)
        .insert_resource(tally.clone())
        .add_systems(LockstepInput, keys)
        .add_systems(Startup, setup)
        .add_systems(Update, (dress, place, caption).chain())
        .insert_resource(mine);
    app.run();

    let mine = *lock(&tally.mine);
    let bots = lock(&tally.bots).clone();
    match mine {
        None => {
            println!("the window closed before the match was over");
            Ok(())
        }
        Some(mine) if bots.len() == tally.expected && bots.iter().all(|h| *h == mine) => {
            println!(
                "every app ended on the same state ({} apps)",
                bots.len() + 1
            );
            Ok(())
        }
        Some(mine) if bots.iter().all(|h| *h == mine) => {
            println!(
                "{} of {} other apps ended, on the window's state",
                bots.len(),
                tally.expected
            );
            Ok(())
        }
        Some(mine) => Err(format!(
            "the apps ended on different states: {mine:?} here, {bots:?}"
        )),
    }
}

/// Your hands on the keys, read when an input is due.
fn keys(keys: Res<ButtonInput<KeyCode>>, mut input: ResMut<LocalInput<u8>>) {
    let held = |bit: u8, a: KeyCode, b: KeyCode| {
        if keys.pressed(a) || keys.pressed(b) {
            bit
        } else {
            0
        }
    };
    input.0 = held(UP, KeyCode::ArrowUp, KeyCode::KeyW)
        | held(DOWN, KeyCode::ArrowDown, KeyCode::KeyS)
        | held(LEFT, KeyCode::ArrowLeft, KeyCode::KeyA)
        | held(RIGHT, KeyCode::ArrowRight, KeyCode::KeyD);
}

/// The caption above the plane.
#[derive(Component)]
struct Caption;

fn setup(mut commands: Commands) {
    commands.spawn(Camera2d);
    let side = 2.0 * HALF as f32 * SCALE + 40.0;
    commands.spawn((
        Sprite::from_color(Color::srgb(0.12, 0.13, 0.16), Vec2::splat(side)),
        Transform::from_xyz(0.0, -20.0, -1.0),
    ));
    commands.spawn((
        Caption,
        Text2d::default(),
        TextFont::from_font_size(15.0),
        Transform::from_xyz(0.0, 305.0, 1.0),
    ));
}

fn colour(seat: u16) -> Color {
    Color::hsl(f32::from(seat % 8) * 137.5 % 360.0, 0.65, 0.55)
}

/// Dresses each box the simulation spawned (or a snapshot restored) in a
/// sprite; yours gets a white rim.
fn dress(
    mut commands: Commands,
    boxes: Query<(Entity, &Player), Without<Sprite>>,
    stats: Res<LockstepStats>,
) {
    for (entity, p) in &boxes {
        let mut e = commands.entity(entity);
        e.insert(Sprite::from_color(colour(p.seat), Vec2::splat(36.0)));
        if stats.seat == Some(PlayerId(p.seat)) {
            e.with_child((
                Sprite::from_color(Color::WHITE, Vec2::splat(44.0)),
                Transform::from_xyz(0.0, 0.0, -0.5),
            ));
        }
    }
}

/// Puts every box where the simulation has it (z grows down the screen).
fn place(mut boxes: Query<(&Player, &mut Transform)>) {
    for (p, mut t) in &mut boxes {
        t.translation = Vec3::new(p.x as f32 * SCALE, -20.0 - p.z as f32 * SCALE, 0.0);
    }
}

/// The tick, the network's figures, the status; the verdict at the end.
fn caption(world: &mut World) {
    let status = world.resource::<LockstepStatus>().clone();
    let stats = world.resource::<LockstepStats>().clone();
    let tick = world.resource::<SimTime>().tick;
    let you = stats
        .seat
        .map_or("watching".to_string(), |s| format!("box {}", s.0));
    let ping = stats
        .ping
        .map_or("-".to_string(), |p| format!("{} ms", p.as_millis()));
    let mut text = format!(
        "you: {you} (arrow keys or WASD)\ntick {tick}   ping {ping}   delay {}   {status:?}",
        stats.delay
    );
    if status.is_over() {
        let tally = world.resource::<Tally>().clone();
        let mine = *lock(&tally.mine).get_or_insert_with(|| lockstep_bevy::state_hash(world));
        let bots = lock(&tally.bots).clone();
        text += &if bots.iter().any(|h| *h != mine) {
            "\nthe apps ended on DIFFERENT states".to_string()
        } else if bots.len() < tally.expected {
            format!(
                "\nover; {} of {} other apps over",
                bots.len(),
                tally.expected
            )
        } else {
            format!("\nover: {} apps ended on one state", bots.len() + 1)
        };
    }
    let mut captions = world.query_filtered::<&mut Text2d, With<Caption>>();
    for mut c in captions.iter_mut(world) {
        if c.0 != text {
            c.0.clone_from(&text);
        }
    }
}
