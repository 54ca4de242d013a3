//! `SelfCheck` on three small games, each broken the way real games are,
//! and on one that is not: it names the tick and the field every time.

use lockstep_core::desync::{Cause, Fields, SelfCheck};
use lockstep_core::{Frame, Game, Tick};
use std::collections::HashMap;

fn frames(n: u32) -> impl Iterator<Item = Frame<u8>> {
    (0..n).map(|t| Frame {
        tick: Tick::new(t),
        inputs: vec![Some((t % 5) as u8), Some((t % 3) as u8)],
        events: vec![],
    })
}

fn sum(frame: &Frame<u8>) -> u64 {
    frame.inputs.iter().flatten().map(|&i| u64::from(i)).sum()
}

/// Scores per key, folded into a total by walking a `HashMap`: each copy of
/// the game walks it in its own order.
#[derive(Default)]
struct HashOrder {
    scores: HashMap<u32, u64>,
    total: u64,
}

impl Game for HashOrder {
    type Input = u8;
    fn step(&mut self, frame: &Frame<u8>) {
        *self.scores.entry(frame.tick.get() % 32).or_default() += sum(frame) + 1;
        for v in self.scores.values() {
            self.total = self.total.wrapping_mul(31).wrapping_add(*v);
        }
    }
    fn hash(&self) -> u64 {
        self.total
    }
    fn save(&self) -> Vec<u8> {
        let mut out = self.total.to_le_bytes().to_vec();
        let mut keys: Vec<_> = self.scores.iter().collect();
        keys.sort();
        for (k, v) in keys {
            out.extend_from_slice(&k.to_le_bytes());
            out.extend_from_slice(&v.to_le_bytes());
        }
        out
    }
    fn restore(bytes: &[u8]) -> Result<Self, String> {
        let total = u64::from_le_bytes(
            bytes
                .get(..8)
                .ok_or("short")?
                .try_into()
                .map_err(|_| "short")?,
        );
        let mut scores = HashMap::new();
        for e in bytes[8..].chunks_exact(12) {
            let k = u32::from_le_bytes([e[0], e[1], e[2], e[3]]);
            let v = u64::from_le_bytes(e[4..].try_into().map_err(|_| "short")?);
            scores.insert(k, v);
        }
        Ok(Self { scores, total })
    }
    fn fields(&self, out: &mut Fields) {
        out.push("total", self.total);
        let mut keys: Vec<_> = self.scores.iter().collect();
        keys.sort();
        for (k, v) in keys {
            out.push(format!("scores[{k}]"), v);
        }
    }
}

/// A combo counter the snapshot forgets.
#[derive(Default)]
struct ForgetfulSnapshot {
    score: u64,
    combo: u32,
}

impl Game for ForgetfulSnapshot {
    type Input = u8;
    fn step(&mut self, frame: &Frame<u8>) {
        self.combo = if sum(frame) > 2 { self.combo + 1 } else { 0 };
        self.score += sum(frame) * u64::from(self.combo + 1);
    }
    fn hash(&self) -> u64 {
        self.score ^ (u64::from(self.combo) << 48)
    }
    fn save(&self) -> Vec<u8> {
        self.score.to_le_bytes().to_vec()
    }
    fn restore(bytes: &[u8]) -> Result<Self, String> {
        let score = u64::from_le_bytes(bytes.try_into().map_err(|_| "not 8 bytes")?);
        Ok(Self { score, combo: 0 })
    }
    fn fields(&self, out: &mut Fields) {
        out.push("score", self.score);
        out.push("combo", self.combo);
    }
}

/// A turret that turns by a rotation recurrence, keeping its sine and
/// cosine; a restore recomputes them from the angle, which is not the same
/// float.
struct Turret {
    angle: f64,
    sin: f64,
    cos: f64,
}

impl Default for Turret {
    fn default() -> Self {
        Self {
            angle: 0.0,
            sin: 0.0,
            cos: 1.0,
        }
    }
}

impl Game for Turret {
    type Input = u8;
    fn step(&mut self, frame: &Frame<u8>) {
        let d = 0.01 * (sum(frame) as f64 + 1.0);
        let (s, c) = (d.sin(), d.cos());
        (self.sin, self.cos) = (self.sin * c + self.cos * s, self.cos * c - self.sin * s);
        self.angle += d;
    }
    fn hash(&self) -> u64 {
        self.angle.to_bits()
            ^ self.sin.to_bits().rotate_left(21)
            ^ self.cos.to_bits().rotate_left(42)
    }
    fn save(&self) -> Vec<u8> {
        self.angle.to_le_bytes().to_vec()
    }
    fn restore(bytes: &[u8]) -> Result<Self, String> {
        let angle = f64::from_le_bytes(bytes.try_into().map_err(|_| "not 8 bytes")?);
        Ok(Self {
            angle,
            sin: angle.sin(),
            cos: angle.cos(),
        })
    }
    fn fields(&self, out: &mut Fields) {
        out.push("angle", self.angle);
        out.push("sin", self.sin);
        out.push("cos", self.cos);
    }
}

/// The same turret done right: the snapshot keeps what the step keeps.
#[derive(Default)]
struct SoundTurret(Turret);

impl Game for SoundTurret {
    type Input = u8;
    fn step(&mut self, frame: &Frame<u8>) {
        self.0.step(frame);
    }
    fn hash(&self) -> u64 {
        self.0.hash()
    }
    fn save(&self) -> Vec<u8> {
        [self.0.angle, self.0.sin, self.0.cos]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    }
    fn restore(bytes: &[u8]) -> Result<Self, String> {
        let v: Vec<f64> = bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        match v[..] {
            [angle, sin, cos] => Ok(Self(Turret { angle, sin, cos })),
            _ => Err(format!("{} bytes", bytes.len())),
        }
    }
    fn fields(&self, out: &mut Fields) {
        self.0.fields(out);
    }
}

#[test]
fn hashmap_iteration_order_is_caught_at_the_first_tick_it_matters() {
    let found = SelfCheck::every(10)
        .run(HashOrder::default, frames(1_000))
        .unwrap_err();
    // One key: one order. Two keys or more: the copies walk them apart
    // (32 keys by tick 31; two random orders agree by chance only).
    assert_eq!(found.cause, Cause::Step);
    assert!((1..32).contains(&found.tick.get()), "{found}");
    assert_eq!(found.fields.len(), 1, "{found}");
    assert_eq!(found.fields[0].path, "total");
}

#[test]
fn a_field_the_snapshot_forgets_is_caught_at_the_first_round_trip_that_loses_it() {
    let found = SelfCheck::every(7)
        .run(ForgetfulSnapshot::default, frames(1_000))
        .unwrap_err();
    assert_eq!(found.cause, Cause::RoundTrip);
    // The first round trip after tick 6 with a combo under way.
    assert_eq!(found.tick.get() % 7, 6, "{found}");
    let paths: Vec<&str> = found.fields.iter().map(|d| d.path.as_str()).collect();
    assert_eq!(paths, ["combo"], "{found}");
    assert_eq!(found.fields[0].found.as_deref(), Some("0"));
}

#[test]
fn a_float_a_restore_computes_differently_is_caught_and_named() {
    let found = SelfCheck::every(10)
        .run(Turret::default, frames(1_000))
        .unwrap_err();
    assert_eq!(found.cause, Cause::RoundTrip);
    assert_eq!(found.tick, Tick::new(9), "{found}");
    assert!(
        found
            .fields
            .iter()
            .all(|d| d.path == "sin" || d.path == "cos"),
        "{found}"
    );
    assert!(!found.fields.is_empty());
}

#[test]
fn a_sound_game_passes() {
    let passed = SelfCheck::every(10)
        .run(SoundTurret::default, frames(1_000))
        .unwrap();
    assert_eq!((passed.ticks, passed.round_trips), (1_000, 100));
}

#[test]
fn a_snapshot_that_does_not_restore_is_reported() {
    #[derive(Default)]
    struct Broken(u64);
    impl Game for Broken {
        type Input = u8;
        fn step(&mut self, frame: &Frame<u8>) {
            self.0 += sum(frame);
        }
        fn hash(&self) -> u64 {
            self.0
        }
        fn save(&self) -> Vec<u8> {
            vec![1, 2, 3]
        }
        fn restore(bytes: &[u8]) -> Result<Self, String> {
            Err(format!("{} bytes is no state", bytes.len()))
        }
    }
    let found = SelfCheck::every(5)
        .run(Broken::default, frames(100))
        .unwrap_err();
    assert_eq!(found.tick, Tick::new(4));
    assert_eq!(found.cause, Cause::Restore("3 bytes is no state".into()));
    assert!(
        found.to_string().contains("could not be restored"),
        "{found}"
    );
}
