//! Swarm is deterministic: the same frames give the same state hash at every
//! tick, a snapshot restored mid-game continues exactly, and membership from
//! the stream spawns and removes ships.

use lockstep_core::{Frame, PlayerId, PlayerInputs, SystemEvent, Tick};
use lockstep_demo::{Bot, Game, SnapshotError};
use proptest::prelude::*;

/// Frames of bots playing: `players` join at tick 0, player 1 leaves at
/// `leave_at`.
fn bot_frames(players: u16, ticks: u32, leave_at: u32, seed: u64) -> Vec<Frame<PlayerInputs>> {
    let mut game = Game::new(seed);
    let mut bots: Vec<Bot> = (0..players)
        .map(|p| Bot::new(PlayerId(p), seed + u64::from(p)))
        .collect();
    let mut frames = Vec::new();
    for t in 0..ticks {
        let mut events = Vec::new();
        if t == 0 {
            events.extend((0..players).map(|p| SystemEvent::Joined {
                player: PlayerId(p),
            }));
        }
        if t == leave_at {
            events.push(SystemEvent::Left {
                player: PlayerId(1),
            });
        }
        let inputs = bots
            .iter_mut()
            .map(|b| (t < leave_at || b.seat() != PlayerId(1)).then(|| b.input(&game)))
            .collect();
        let f = Frame {
            tick: Tick::new(t),
            inputs,
            events,
        };
        game.step(&f);
        frames.push(f);
    }
    frames
}

fn hashes(seed: u64, frames: &[Frame<PlayerInputs>]) -> Vec<u64> {
    let mut g = Game::new(seed);
    frames
        .iter()
        .map(|f| {
            g.step(f);
            g.hash()
        })
        .collect()
}

#[test]
fn the_same_frames_give_the_same_hash_at_every_tick() {
    let frames = bot_frames(4, 900, 600, 3);
    assert_eq!(hashes(3, &frames), hashes(3, &frames));
    // And the hash is sensitive: another seed or one changed input differs.
    assert_ne!(hashes(3, &frames).last(), hashes(4, &frames).last());
    let mut changed = frames.clone();
    changed[100].inputs[0] = Some(
        PlayerInputs::default()
            .with_button(0, true)
            .with_aim(-1.0, 0.0),
    );
    let (a, b) = (hashes(3, &frames), hashes(3, &changed));
    assert_eq!(a[99], b[99]);
    assert_ne!(a[899], b[899]);
}

/// The hash is a function of the frames alone, not of this process, this
/// build or this platform: a fixed trace always ends on this value. (A
/// change to the rules or the snapshot format changes it, deliberately.)
#[test]
fn a_fixed_trace_ends_on_a_known_hash() {
    let frames = bot_frames(4, 900, 600, 3);
    let last = hashes(3, &frames).last().copied();
    assert_eq!(last, Some(GOLDEN), "got {last:016x?}");
}

const GOLDEN: u64 = 0x0aea_9685_c330_fded;

#[test]
fn bots_play_a_real_game() {
    let frames = bot_frames(4, 1200, u32::MAX, 9);
    let mut g = Game::new(9);
    let mut most = 0;
    for f in &frames {
        g.step(f);
        most = most.max(g.creeps.len());
    }
    let score: u32 = g.ships.iter().map(|s| s.score).sum();
    let deaths: u32 = g.ships.iter().map(|s| s.deaths).sum();
    assert!(score > 50, "bots destroyed {score} creeps");
    assert!(most > 100, "at most {most} creeps on screen");
    assert!(deaths < score, "{deaths} deaths for {score} kills");
    assert!(g.wave >= 5);
}

#[test]
fn membership_comes_from_the_stream() {
    let frames = bot_frames(3, 700, 600, 5);
    let mut g = Game::new(5);
    for f in &frames[..600] {
        g.step(f);
    }
    assert_eq!(
        g.ships.iter().map(|s| s.player).collect::<Vec<_>>(),
        [PlayerId(0), PlayerId(1), PlayerId(2)]
    );
    g.step(&frames[600]);
    assert_eq!(
        g.ships.iter().map(|s| s.player).collect::<Vec<_>>(),
        [PlayerId(0), PlayerId(2)]
    );
}

#[test]
fn snapshot_restore_continue_equals_never_stopping() {
    let frames = bot_frames(4, 800, 500, 11);
    let straight = hashes(11, &frames);
    for cut in [0usize, 1, 137, 499, 500, 799] {
        let mut g = Game::new(11);
        for f in &frames[..cut] {
            g.step(f);
        }
        let bytes = g.snapshot();
        let mut back = Game::restore(&bytes).expect("restores");
        assert_eq!(back, g);
        for (i, f) in frames[cut..].iter().enumerate() {
            back.step(f);
            assert_eq!(
                back.hash(),
                straight[cut + i],
                "cut at {cut}, tick {}",
                cut + i
            );
        }
    }
}

#[test]
fn bad_snapshots_are_typed_errors() {
    let frames = bot_frames(2, 100, u32::MAX, 1);
    let mut g = Game::new(1);
    for f in &frames {
        g.step(f);
    }
    let bytes = g.snapshot();
    for cut in [0, 1, 10, bytes.len() / 2, bytes.len() - 1] {
        assert!(Game::restore(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    let mut v = bytes.clone();
    v[0] = 9;
    assert_eq!(Game::restore(&v), Err(SnapshotError::Version(9)));
    let mut long = bytes.clone();
    long.push(0);
    assert_eq!(Game::restore(&long), Err(SnapshotError::Trailing));
}

prop_compose! {
    fn inputs()(mx in -127i8..=127, my in -127i8..=127, ax in -127i8..=127, ay in -127i8..=127, b in 0u32..4)
        -> PlayerInputs {
        PlayerInputs { movement: [mx, my], aim: [ax, ay], buttons: b, ..PlayerInputs::default() }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    /// Any input trace, with seats joining and leaving: two runs agree at
    /// every tick, and restoring any snapshot continues identically.
    #[test]
    fn random_traces_are_deterministic(
        seed in any::<u64>(),
        trace in proptest::collection::vec((proptest::collection::vec(proptest::option::of(inputs()), 4), 0u8..20), 1..300),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut frames = Vec::new();
        for (t, (cells, ev)) in trace.into_iter().enumerate() {
            let mut events = Vec::new();
            if t == 0 {
                events.push(SystemEvent::Joined { player: PlayerId(0) });
            }
            match ev {
                0 => events.push(SystemEvent::Joined { player: PlayerId(0) }),
                1 => events.push(SystemEvent::Joined { player: PlayerId(3) }),
                2 => events.push(SystemEvent::Abandoned { player: PlayerId(2) }),
                3 => events.push(SystemEvent::Left { player: PlayerId(1) }),
                4 => events.push(SystemEvent::Joined { player: PlayerId(1) }),
                _ => {}
            }
            frames.push(Frame { tick: Tick::new(t as u32), inputs: cells, events });
        }
        let a = hashes(seed, &frames);
        prop_assert_eq!(&a, &hashes(seed, &frames));
        let k = cut.index(frames.len());
        let mut g = Game::new(seed);
        for f in &frames[..k] {
            g.step(f);
        }
        let mut back = Game::restore(&g.snapshot()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        for (i, f) in frames[k..].iter().enumerate() {
            back.step(f);
            prop_assert_eq!(back.hash(), a[k + i]);
        }
    }
}

/// Swarm under `SelfCheck`: two copies on the bots' frames, one through a
/// snapshot round trip every 7 ticks, identical at every tick; and a copy
/// whose restore forgets a field is named at the first round trip.
#[test]
fn swarm_passes_its_self_check_and_a_forgetful_restore_is_named() {
    use lockstep_core::desync::{Cause, Fields, SelfCheck};
    let frames = bot_frames(4, 600, 400, 3);
    let passed = SelfCheck::every(7)
        .run(|| Game::new(3), frames.clone())
        .unwrap_or_else(|d| panic!("{d}"));
    assert_eq!((passed.ticks, passed.round_trips), (600, 85));

    /// Swarm whose restore loses every ship's score.
    struct Forgetful(Game);
    impl lockstep_core::Game for Forgetful {
        type Input = PlayerInputs;
        fn step(&mut self, f: &Frame<PlayerInputs>) {
            self.0.step(f);
        }
        fn hash(&self) -> u64 {
            self.0.hash()
        }
        fn save(&self) -> Vec<u8> {
            self.0.snapshot()
        }
        fn restore(bytes: &[u8]) -> Result<Self, String> {
            let mut g = Game::restore(bytes).map_err(|e| e.to_string())?;
            for s in &mut g.ships {
                s.score = 0;
            }
            Ok(Self(g))
        }
        fn fields(&self, out: &mut Fields) {
            lockstep_core::Game::fields(&self.0, out);
        }
    }
    let found = SelfCheck::every(7)
        .run(|| Forgetful(Game::new(3)), frames)
        .unwrap_err();
    assert_eq!(found.cause, Cause::RoundTrip);
    assert!(
        found.fields.iter().all(|d| d.path.ends_with(".score")),
        "{found}"
    );
    assert!(!found.fields.is_empty());
}
