//! Swarm under [`SelfCheck`](lockstep_core::desync::SelfCheck): stepped,
//! hashed, saved and restored, and shown field by field so a divergence is
//! named down to the creep and the coordinate.

use crate::game::{Game, Vec2};
use lockstep_core::desync::Fields;
use lockstep_core::{Frame, PlayerInputs};

impl lockstep_core::Game for Game {
    type Input = PlayerInputs;

    fn step(&mut self, frame: &Frame<PlayerInputs>) {
        Self::step(self, frame);
    }

    fn hash(&self) -> u64 {
        Self::hash(self)
    }

    fn save(&self) -> Vec<u8> {
        self.snapshot()
    }

    fn restore(bytes: &[u8]) -> Result<Self, String> {
        Self::restore(bytes).map_err(|e| e.to_string())
    }

    /// Every field of the state. Creeps are named by their id, not their
    /// place in the list, so one creep more or less does not make every
    /// later one differ.
    fn fields(&self, out: &mut Fields) {
        let v = |p: Vec2| format!("({}, {})", p.x, p.y);
        out.push("tick", self.tick);
        out.push("wave", self.wave);
        out.push("next_creep", self.next_creep);
        out.push("rng", format!("{:?}", self.rng));
        out.push("config", format!("{:?}", self.config));
        for s in &self.ships {
            let at = format!("ships[{}]", s.player.0);
            out.push(format!("{at}.pos"), v(s.pos));
            out.push(format!("{at}.vel"), v(s.vel));
            out.push(format!("{at}.facing"), v(s.facing));
            out.push(format!("{at}.respawn_in"), s.respawn_in);
            out.push(format!("{at}.cooldown"), s.cooldown);
            out.push(format!("{at}.boost"), s.boost);
            out.push(format!("{at}.score"), s.score);
            out.push(format!("{at}.deaths"), s.deaths);
            out.push(format!("{at}.shield"), s.shield);
        }
        for c in &self.creeps {
            let at = format!("creeps[id {}]", c.id);
            out.push(format!("{at}.pos"), v(c.pos));
            out.push(format!("{at}.hp"), c.hp);
            out.push(format!("{at}.speed"), c.speed);
        }
        out.push("shots.len", self.shots.len());
        for (i, s) in self.shots.iter().enumerate() {
            let at = format!("shots[{i}]");
            out.push(format!("{at}.owner"), s.owner.0);
            out.push(format!("{at}.pos"), v(s.pos));
            out.push(format!("{at}.vel"), v(s.vel));
            out.push(format!("{at}.ttl"), s.ttl);
        }
    }
}
