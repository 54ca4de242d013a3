//! The simulation: integers only, collections in a defined order.

use crate::rng::Pcg32;
use lockstep_core::{Frame, PlayerId, PlayerInputs, SystemEvent, Tick};
use xxhash_rust::xxh3::xxh3_64;

/// Arena width in units (a unit is far below a pixel).
pub const ARENA_W: i32 = 16_384;
/// Arena height in units.
pub const ARENA_H: i32 = 8_192;
/// Ship radius (for hits).
pub const SHIP_RADIUS: i32 = 160;
/// Creep radius.
pub const CREEP_RADIUS: i32 = 120;
/// Fire: button bit 0.
pub const FIRE: u8 = 0;
/// Boost: button bit 1.
pub const BOOST: u8 = 1;

const ACCEL: i32 = 14;
const MAX_SPEED: i32 = 110;
const BOOST_SPEED: i32 = 190;
const BOOST_MAX: u16 = 90;
const SHOT_SPEED: i32 = 320;
const SHOT_TTL: u8 = 40;
const COOLDOWN: u8 = 5;
const RESPAWN_TICKS: u16 = 90;
/// Ticks a fresh ship is shielded: creeps touching it just pop.
const SHIELD_TICKS: u16 = 60;
const WAVE_EVERY: u32 = 150;

/// A point or a velocity, in arena units.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Vec2 {
    /// Horizontal, growing right.
    pub x: i32,
    /// Vertical, growing down.
    pub y: i32,
}

impl Vec2 {
    /// `(x, y)`.
    pub const fn new(x: i32, y: i32) -> Self {
        Self { x, y }
    }

    /// Squared length, without overflow.
    pub fn len2(self) -> i64 {
        i64::from(self.x) * i64::from(self.x) + i64::from(self.y) * i64::from(self.y)
    }

    /// Length, rounded down.
    pub fn length(self) -> i32 {
        i32::try_from(self.len2().unsigned_abs().isqrt()).unwrap_or(i32::MAX)
    }

    /// This direction scaled to `speed` (zero stays zero).
    pub fn with_len(self, speed: i32) -> Self {
        let l = i64::from(self.length());
        if l == 0 {
            return Self::default();
        }
        let s = i64::from(speed);
        Self::new(
            (i64::from(self.x) * s / l) as i32,
            (i64::from(self.y) * s / l) as i32,
        )
    }

    fn sub(self, o: Self) -> Self {
        Self::new(self.x.wrapping_sub(o.x), self.y.wrapping_sub(o.y))
    }

    fn add(self, o: Self) -> Self {
        Self::new(self.x.saturating_add(o.x), self.y.saturating_add(o.y))
    }
}

/// A player's ship.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ship {
    /// Whose.
    pub player: PlayerId,
    /// Where.
    pub pos: Vec2,
    /// Moving how fast.
    pub vel: Vec2,
    /// Where it fires when no aim is given.
    pub facing: Vec2,
    /// Ticks until it respawns; 0 while alive.
    pub respawn_in: u16,
    /// Ticks until it may fire again.
    pub cooldown: u8,
    /// Boost energy.
    pub boost: u16,
    /// Creeps destroyed.
    pub score: u32,
    /// Times destroyed.
    pub deaths: u32,
    /// Ticks of spawn shield left.
    pub shield: u16,
}

impl Ship {
    /// Whether the ship is in play.
    pub fn alive(&self) -> bool {
        self.respawn_in == 0
    }
}

/// A creep: flies at the nearest ship.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Creep {
    /// A stable identity.
    pub id: u32,
    /// Where.
    pub pos: Vec2,
    /// Hits it takes to destroy.
    pub hp: u8,
    /// Units per tick.
    pub speed: i32,
}

/// A projectile.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Shot {
    /// Who fired it.
    pub owner: PlayerId,
    /// Where.
    pub pos: Vec2,
    /// How fast.
    pub vel: Vec2,
    /// Ticks left.
    pub ttl: u8,
}

/// Tuning that must be the same on every machine (it is part of the state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GameConfig {
    /// Most creeps alive at once.
    pub max_creeps: u32,
    /// Creeps in the first wave; each wave brings more.
    pub first_wave: u32,
}

impl Default for GameConfig {
    fn default() -> Self {
        Self {
            max_creeps: 500,
            first_wave: 16,
        }
    }
}

/// Why a snapshot could not be restored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The bytes ended early.
    #[error("snapshot truncated")]
    Truncated,
    /// Not a snapshot of this version.
    #[error("not a swarm snapshot (version {0})")]
    Version(u8),
    /// A count beyond what a game can hold.
    #[error("{0} count out of range")]
    Count(&'static str),
    /// Bytes left after the state.
    #[error("trailing bytes after the snapshot")]
    Trailing,
}

/// The whole game state. Every machine holding the same `Game` and running
/// the same frames holds the same `Game` afterwards: integers only, every
/// collection iterated in a defined order, randomness from a seeded
/// generator that is part of the state.
///
/// ```
/// use lockstep_core::{Frame, PlayerId, PlayerInputs, SystemEvent, Tick};
/// use lockstep_demo::Game;
///
/// let mut a = Game::new(7);
/// let mut b = Game::new(7);
/// let join = Frame {
///     tick: Tick::ZERO,
///     inputs: vec![Some(PlayerInputs::default())],
///     events: vec![SystemEvent::Joined { player: PlayerId(0) }],
/// };
/// a.step(&join);
/// b.step(&join);
/// assert_eq!(a.hash(), b.hash());
/// assert_eq!(a.ships.len(), 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Game {
    /// The next tick to run.
    pub tick: Tick,
    /// Ships, in player order.
    pub ships: Vec<Ship>,
    /// Creeps, in spawn order.
    pub creeps: Vec<Creep>,
    /// Projectiles, in firing order.
    pub shots: Vec<Shot>,
    /// The generator for waves.
    pub rng: Pcg32,
    /// Waves spawned.
    pub wave: u32,
    /// The next creep id.
    pub next_creep: u32,
    /// Tuning.
    pub config: GameConfig,
}

const SNAPSHOT_VERSION: u8 = 1;

impl Game {
    /// A fresh arena, its waves seeded from `seed`.
    pub fn new(seed: u64) -> Self {
        Self::with_config(seed, GameConfig::default())
    }

    /// A fresh arena with `config`.
    pub fn with_config(seed: u64, config: GameConfig) -> Self {
        Self {
            tick: Tick::ZERO,
            ships: Vec::new(),
            creeps: Vec::new(),
            shots: Vec::new(),
            rng: Pcg32::new(seed),
            wave: 0,
            next_creep: 0,
            config,
        }
    }

    /// The ship of `player`, if it is in the game.
    pub fn ship(&self, player: PlayerId) -> Option<&Ship> {
        self.ships.iter().find(|s| s.player == player)
    }

    /// Where `player` appears.
    pub fn spawn_point(player: PlayerId) -> Vec2 {
        let i = i32::from(player.0 % 8);
        Vec2::new(
            ARENA_W / 2 + (i % 4 - 2) * 600 + 300,
            ARENA_H / 2 + (i / 4) * 600 - 300,
        )
    }

    /// Runs one confirmed frame.
    pub fn step(&mut self, frame: &Frame<PlayerInputs>) {
        for ev in &frame.events {
            self.membership(*ev);
        }
        self.move_ships(frame);
        self.move_shots();
        self.move_creeps();
        self.collide();
        self.spawn_waves();
        self.tick = frame.tick.saturating_add(1);
    }

    fn membership(&mut self, ev: SystemEvent) {
        match ev {
            SystemEvent::Joined { player } if self.ship(player).is_none() => {
                let at = self.ships.partition_point(|s| s.player < player);
                let pos = Self::spawn_point(player);
                self.ships.insert(
                    at,
                    Ship {
                        player,
                        pos,
                        vel: Vec2::default(),
                        facing: Vec2::new(1, 0),
                        respawn_in: 0,
                        cooldown: 0,
                        boost: BOOST_MAX,
                        score: 0,
                        deaths: 0,
                        shield: SHIELD_TICKS,
                    },
                );
            }
            SystemEvent::Left { player } | SystemEvent::Abandoned { player } => {
                self.ships.retain(|s| s.player != player);
            }
            _ => {}
        }
    }

    /// Where a ship comes back: of a few seeded candidates, the one farthest
    /// from any creep, so the swarm cannot camp on a respawn point.
    fn safe_point(rng: &mut Pcg32, creeps: &[Creep]) -> Vec2 {
        const MARGIN: i32 = 1_000;
        let mut best = (i64::MIN, Vec2::new(ARENA_W / 2, ARENA_H / 2));
        for _ in 0..8 {
            let p = Vec2::new(
                MARGIN + rng.below((ARENA_W - 2 * MARGIN) as u32) as i32,
                MARGIN + rng.below((ARENA_H - 2 * MARGIN) as u32) as i32,
            );
            let nearest = creeps
                .iter()
                .map(|c| c.pos.sub(p).len2())
                .min()
                .unwrap_or(i64::MAX);
            if nearest > best.0 {
                best = (nearest, p);
            }
        }
        best.1
    }

    fn move_ships(&mut self, frame: &Frame<PlayerInputs>) {
        let neutral = PlayerInputs::default();
        let Self {
            ships, rng, creeps, ..
        } = self;
        for ship in ships.iter_mut() {
            if !ship.alive() {
                ship.respawn_in -= 1;
                if ship.respawn_in == 0 {
                    ship.pos = Self::safe_point(rng, creeps);
                    ship.vel = Vec2::default();
                    ship.boost = BOOST_MAX;
                    ship.shield = SHIELD_TICKS;
                }
                continue;
            }
            ship.shield = ship.shield.saturating_sub(1);
            let input = frame.input(ship.player).unwrap_or(&neutral);
            let stick = Vec2::new(i32::from(input.movement[0]), i32::from(input.movement[1]));
            let boosting = input.button(BOOST) && ship.boost > 0 && stick != Vec2::default();
            if boosting {
                ship.boost -= 1;
            } else if ship.boost < BOOST_MAX && frame.tick.get().is_multiple_of(2) {
                ship.boost += 1;
            }
            let accel = Vec2::new(stick.x * ACCEL / 127, stick.y * ACCEL / 127);
            let accel = if boosting {
                Vec2::new(accel.x * 2, accel.y * 2)
            } else {
                accel
            };
            ship.vel = Vec2::new(ship.vel.x * 15 / 16, ship.vel.y * 15 / 16).add(accel);
            let cap = if boosting { BOOST_SPEED } else { MAX_SPEED };
            if ship.vel.length() > cap {
                ship.vel = ship.vel.with_len(cap);
            }
            ship.pos = ship.pos.add(ship.vel);
            ship.pos.x = ship.pos.x.clamp(0, ARENA_W - 1);
            ship.pos.y = ship.pos.y.clamp(0, ARENA_H - 1);
            let aim = Vec2::new(i32::from(input.aim[0]), i32::from(input.aim[1]));
            if aim != Vec2::default() {
                ship.facing = aim;
            } else if stick != Vec2::default() {
                ship.facing = stick;
            }
            ship.cooldown = ship.cooldown.saturating_sub(1);
            if input.button(FIRE) && ship.cooldown == 0 {
                ship.cooldown = COOLDOWN;
                let vel = ship.facing.with_len(SHOT_SPEED);
                if vel != Vec2::default() {
                    self.shots.push(Shot {
                        owner: ship.player,
                        pos: ship.pos,
                        vel,
                        ttl: SHOT_TTL,
                    });
                }
            }
        }
    }

    fn move_shots(&mut self) {
        for s in &mut self.shots {
            s.pos = s.pos.add(s.vel);
            s.ttl = s.ttl.saturating_sub(1);
        }
        self.shots.retain(|s| {
            s.ttl > 0 && (0..ARENA_W).contains(&s.pos.x) && (0..ARENA_H).contains(&s.pos.y)
        });
    }

    fn move_creeps(&mut self) {
        let targets: Vec<Vec2> = self
            .ships
            .iter()
            .filter(|s| s.alive())
            .map(|s| s.pos)
            .collect();
        let centre = Vec2::new(ARENA_W / 2, ARENA_H / 2);
        for c in &mut self.creeps {
            // The nearest live ship; ties go to the earlier ship.
            let target = targets
                .iter()
                .copied()
                .min_by_key(|t| t.sub(c.pos).len2())
                .unwrap_or(centre);
            let step = target.sub(c.pos).with_len(c.speed);
            c.pos = c.pos.add(step);
        }
    }

    fn collide(&mut self) {
        let hit2 = i64::from(CREEP_RADIUS + 40).pow(2);
        let mut i = 0;
        while i < self.shots.len() {
            let shot = &self.shots[i];
            if let Some(k) = self
                .creeps
                .iter()
                .position(|c| c.pos.sub(shot.pos).len2() <= hit2)
            {
                let owner = shot.owner;
                self.shots.remove(i);
                let c = &mut self.creeps[k];
                c.hp = c.hp.saturating_sub(1);
                if c.hp == 0 {
                    self.creeps.remove(k);
                    if let Some(s) = self.ships.iter_mut().find(|s| s.player == owner) {
                        s.score += 1;
                    }
                }
            } else {
                i += 1;
            }
        }
        let crash2 = i64::from(CREEP_RADIUS + SHIP_RADIUS).pow(2);
        for ship in &mut self.ships {
            if !ship.alive() {
                continue;
            }
            if let Some(k) = self
                .creeps
                .iter()
                .position(|c| c.pos.sub(ship.pos).len2() <= crash2)
            {
                self.creeps.remove(k);
                if ship.shield == 0 {
                    ship.respawn_in = RESPAWN_TICKS;
                    ship.deaths += 1;
                }
            }
        }
    }

    fn spawn_waves(&mut self) {
        let due = self.tick.get() % WAVE_EVERY == WAVE_EVERY - 1 || self.creeps.len() < 4;
        if !due || self.ships.is_empty() {
            return;
        }
        self.wave += 1;
        let count = self.config.first_wave + self.wave * 8;
        for _ in 0..count {
            if self.creeps.len() as u32 >= self.config.max_creeps {
                break;
            }
            self.spawn_creep();
        }
    }

    /// Adds one creep at a random point on the arena's edge.
    pub fn spawn_creep(&mut self) {
        let along = self.rng.below(2 * (ARENA_W + ARENA_H) as u32) as i32;
        let pos = if along < ARENA_W {
            Vec2::new(along, 0)
        } else if along < ARENA_W + ARENA_H {
            Vec2::new(ARENA_W - 1, along - ARENA_W)
        } else if along < 2 * ARENA_W + ARENA_H {
            Vec2::new(along - ARENA_W - ARENA_H, ARENA_H - 1)
        } else {
            Vec2::new(0, along - 2 * ARENA_W - ARENA_H)
        };
        let hp = 1 + (self.rng.below(100) < 20) as u8;
        let speed = 28 + self.rng.below(24) as i32 + (self.wave.min(20) as i32);
        self.creeps.push(Creep {
            id: self.next_creep,
            pos,
            hp,
            speed,
        });
        self.next_creep = self.next_creep.wrapping_add(1);
    }

    /// The canonical encoding of the whole state: little-endian, fields in
    /// a fixed order. Equal games give equal bytes on every platform.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut o = Vec::with_capacity(64 + self.creeps.len() * 16 + self.shots.len() * 20);
        o.push(SNAPSHOT_VERSION);
        put_u32(&mut o, self.tick.get());
        let (state, inc) = self.rng.state();
        put_u64(&mut o, state);
        put_u64(&mut o, inc);
        put_u32(&mut o, self.wave);
        put_u32(&mut o, self.next_creep);
        put_u32(&mut o, self.config.max_creeps);
        put_u32(&mut o, self.config.first_wave);
        put_u32(&mut o, self.ships.len() as u32);
        for s in &self.ships {
            o.extend_from_slice(&s.player.0.to_le_bytes());
            put_vec(&mut o, s.pos);
            put_vec(&mut o, s.vel);
            put_vec(&mut o, s.facing);
            o.extend_from_slice(&s.respawn_in.to_le_bytes());
            o.push(s.cooldown);
            o.extend_from_slice(&s.boost.to_le_bytes());
            put_u32(&mut o, s.score);
            put_u32(&mut o, s.deaths);
            o.extend_from_slice(&s.shield.to_le_bytes());
        }
        put_u32(&mut o, self.creeps.len() as u32);
        for c in &self.creeps {
            put_u32(&mut o, c.id);
            put_vec(&mut o, c.pos);
            o.push(c.hp);
            put_u32(&mut o, c.speed as u32);
        }
        put_u32(&mut o, self.shots.len() as u32);
        for s in &self.shots {
            o.extend_from_slice(&s.owner.0.to_le_bytes());
            put_vec(&mut o, s.pos);
            put_vec(&mut o, s.vel);
            o.push(s.ttl);
        }
        o
    }

    /// A game from [`snapshot`](Self::snapshot) bytes.
    pub fn restore(bytes: &[u8]) -> Result<Self, SnapshotError> {
        let mut r = Cursor(bytes);
        let v = r.u8()?;
        if v != SNAPSHOT_VERSION {
            return Err(SnapshotError::Version(v));
        }
        let tick = Tick::new(r.u32()?);
        let rng = Pcg32::from_state(r.u64()?, r.u64()?);
        let wave = r.u32()?;
        let next_creep = r.u32()?;
        let config = GameConfig {
            max_creeps: r.u32()?,
            first_wave: r.u32()?,
        };
        let n = r.count("ship", 1 << 16)?;
        let mut ships = Vec::with_capacity(n);
        for _ in 0..n {
            ships.push(Ship {
                player: PlayerId(r.u16()?),
                pos: r.vec()?,
                vel: r.vec()?,
                facing: r.vec()?,
                respawn_in: r.u16()?,
                cooldown: r.u8()?,
                boost: r.u16()?,
                score: r.u32()?,
                deaths: r.u32()?,
                shield: r.u16()?,
            });
        }
        let n = r.count("creep", 1 << 20)?;
        let mut creeps = Vec::with_capacity(n);
        for _ in 0..n {
            creeps.push(Creep {
                id: r.u32()?,
                pos: r.vec()?,
                hp: r.u8()?,
                speed: r.u32()? as i32,
            });
        }
        let n = r.count("shot", 1 << 20)?;
        let mut shots = Vec::with_capacity(n);
        for _ in 0..n {
            shots.push(Shot {
                owner: PlayerId(r.u16()?),
                pos: r.vec()?,
                vel: r.vec()?,
                ttl: r.u8()?,
            });
        }
        if !r.0.is_empty() {
            return Err(SnapshotError::Trailing);
        }
        Ok(Self {
            tick,
            ships,
            creeps,
            shots,
            rng,
            wave,
            next_creep,
            config,
        })
    }

    /// The canonical state hash: xxh3-64 of the snapshot. Stable across runs,
    /// builds and platforms.
    pub fn hash(&self) -> u64 {
        xxh3_64(&self.snapshot())
    }
}

fn put_u32(o: &mut Vec<u8>, v: u32) {
    o.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(o: &mut Vec<u8>, v: u64) {
    o.extend_from_slice(&v.to_le_bytes());
}

fn put_vec(o: &mut Vec<u8>, v: Vec2) {
    put_u32(o, v.x as u32);
    put_u32(o, v.y as u32);
}

struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], SnapshotError> {
        let (head, rest) = self
            .0
            .split_first_chunk::<N>()
            .ok_or(SnapshotError::Truncated)?;
        self.0 = rest;
        Ok(*head)
    }

    fn u8(&mut self) -> Result<u8, SnapshotError> {
        Ok(self.take::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16, SnapshotError> {
        Ok(u16::from_le_bytes(self.take()?))
    }

    fn u32(&mut self) -> Result<u32, SnapshotError> {
        Ok(u32::from_le_bytes(self.take()?))
    }

    fn u64(&mut self) -> Result<u64, SnapshotError> {
        Ok(u64::from_le_bytes(self.take()?))
    }

    fn vec(&mut self) -> Result<Vec2, SnapshotError> {
        Ok(Vec2::new(self.u32()? as i32, self.u32()? as i32))
    }

    fn count(&mut self, what: &'static str, max: usize) -> Result<usize, SnapshotError> {
        let n = self.u32()? as usize;
        if n > max || n > self.0.len() {
            return Err(SnapshotError::Count(what));
        }
        Ok(n)
    }
}

/// Swarm as a server that simulates runs it: every sealed frame, the
/// snapshot it hands joiners, and the hash clients are checked against.
impl lockstep_core::sequenced::Simulation<PlayerInputs> for Game {
    fn step(&mut self, frame: &Frame<PlayerInputs>) {
        Self::step(self, frame);
    }

    fn snapshot(&self) -> Vec<u8> {
        Self::snapshot(self)
    }

    fn hash(&self) -> u64 {
        Self::hash(self)
    }
}
