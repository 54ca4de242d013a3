//! The arena the benchmarks measure: 8 ships (and their bots) and a swarm
//! of `creeps` creeps.

use lockstep_core::{Frame, PlayerId, PlayerInputs, SystemEvent, Tick};
use lockstep_demo::{Bot, Game, GameConfig};

pub(crate) fn arena(creeps: u32) -> (Game, Vec<Bot>) {
    let mut game = Game::with_config(
        1,
        GameConfig {
            max_creeps: creeps,
            first_wave: 0,
        },
    );
    let join = Frame {
        tick: Tick::ZERO,
        inputs: vec![Some(PlayerInputs::default()); 8],
        events: (0..8)
            .map(|p| SystemEvent::Joined {
                player: PlayerId(p),
            })
            .collect(),
    };
    game.step(&join);
    while (game.creeps.len() as u32) < creeps {
        game.spawn_creep();
    }
    let bots = (0..8)
        .map(|p| Bot::new(PlayerId(p), u64::from(p)))
        .collect();
    (game, bots)
}
