//! Bots: plausible players, deterministic from their own seed and the game.

use crate::game::{BOOST, FIRE, Game, Vec2};
use crate::rng::Pcg32;
use lockstep_core::{PlayerId, PlayerInputs};

const DANGER: i32 = 900;
const KITE: i32 = 2_200;
const RANGE: i32 = 6_000;

/// A bot playing one seat: it aims at the nearest creep and fires when in
/// range, keeps its distance, dodges what gets close, boosts to escape, and
/// wanders when the arena is quiet. Its choices depend only on its seed and
/// the game state, so its inputs are the same however often it is rerun.
#[derive(Debug, Clone)]
pub struct Bot {
    seat: PlayerId,
    rng: Pcg32,
    wander: Vec2,
    strafe: i32,
}

impl Bot {
    /// A bot for `seat`, seeded with `seed`.
    pub fn new(seat: PlayerId, seed: u64) -> Self {
        Self {
            seat,
            rng: Pcg32::new(seed ^ 0xB07),
            wander: Vec2::new(1, 0),
            strafe: 1,
        }
    }

    /// The seat it plays.
    pub fn seat(&self) -> PlayerId {
        self.seat
    }

    /// The input for the next tick, from the game as it stands.
    pub fn input(&mut self, game: &Game) -> PlayerInputs {
        let Some(me) = game.ship(self.seat).filter(|s| s.alive()) else {
            return PlayerInputs::default();
        };
        if self.rng.below(40) == 0 {
            self.strafe = -self.strafe;
            self.wander = Vec2::new(
                self.rng.below(255) as i32 - 127,
                self.rng.below(255) as i32 - 127,
            );
        }
        let nearest = game
            .creeps
            .iter()
            .map(|c| (Vec2::new(c.pos.x - me.pos.x, c.pos.y - me.pos.y), c))
            .min_by_key(|(d, c)| (d.len2(), c.id));
        let mut input = PlayerInputs::default();
        let mut go = self.wander;
        if let Some((to, _)) = nearest {
            let dist = to.length();
            input.aim = stick(to);
            if dist < RANGE {
                input.set_button(FIRE, true);
            }
            go = if dist < DANGER {
                input.set_button(BOOST, dist < DANGER / 2);
                Vec2::new(-to.x, -to.y)
            } else if dist > KITE {
                to
            } else {
                Vec2::new(-to.y * self.strafe, to.x * self.strafe)
            };
        }
        // Stay off the walls.
        let centre = Vec2::new(
            crate::game::ARENA_W / 2 - me.pos.x,
            crate::game::ARENA_H / 2 - me.pos.y,
        );
        if centre.x.abs() > crate::game::ARENA_W * 2 / 5
            || centre.y.abs() > crate::game::ARENA_H * 2 / 5
        {
            go = Vec2::new(go.x / 2 + centre.x, go.y / 2 + centre.y);
        }
        input.movement = stick(go);
        input
    }
}

/// A direction as a quantized stick at full tilt.
fn stick(v: Vec2) -> [i8; 2] {
    let m = v.x.unsigned_abs().max(v.y.unsigned_abs()).max(1) as i64;
    [
        (i64::from(v.x) * 127 / m).clamp(-127, 127) as i8,
        (i64::from(v.y) * 127 / m).clamp(-127, 127) as i8,
    ]
}
