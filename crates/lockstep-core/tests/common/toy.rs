//! A tiny deterministic game for the join tests, and the client loop that
//! plays it: its whole state is a fold of every frame, plus incompressible
//! bulk (as a real state has) so that a snapshot takes many chunks.

use lockstep_core::sequenced::{ClientSession, Simulation};
use lockstep_core::sim::SimRng;
use lockstep_core::{Event, Frame, Tick};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Game {
    pub next: Tick,
    pub acc: u64,
    /// Bytes of bulk in a snapshot.
    pub bulk: usize,
}

impl Game {
    pub fn new(first: Tick, bulk: usize) -> Self {
        Self {
            next: first,
            acc: 0,
            bulk,
        }
    }

    pub fn step(&mut self, f: &Frame<u16>) {
        assert_eq!(f.tick, self.next, "frames in order, each once");
        let mut h = self.acc ^ u64::from(f.tick.get());
        for (i, input) in f.inputs.iter().enumerate() {
            let v = input.map_or(0xFFFF_FFFF, u64::from);
            h = (h ^ v ^ ((i as u64) << 40)).wrapping_mul(0x100_0000_01B3);
        }
        for ev in &f.events {
            h = (h ^ u64::from(ev.player().0) ^ 0xE7).wrapping_mul(0x100_0000_01B3);
        }
        self.acc = h;
        self.next = f.tick.saturating_add(1);
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut v = self.next.get().to_le_bytes().to_vec();
        v.extend_from_slice(&self.acc.to_le_bytes());
        let mut x = self.acc | 1;
        v.extend((0..self.bulk).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        }));
        v
    }

    pub fn restore(b: &[u8]) -> Self {
        let next = Tick::new(u32::from_le_bytes(b[..4].try_into().unwrap()));
        let acc = u64::from_le_bytes(b[4..12].try_into().unwrap());
        Self {
            next,
            acc,
            bulk: b.len() - 12,
        }
    }
}

impl Simulation<u16> for Game {
    fn step(&mut self, frame: &Frame<u16>) {
        Self::step(self, frame);
    }

    fn snapshot(&self) -> Vec<u8> {
        self.bytes()
    }

    fn hash(&self) -> u64 {
        self.acc
    }
}

/// One client's game loop and what it saw.
#[derive(Debug)]
pub struct App {
    pub game: Option<Game>,
    /// The state after each tick run.
    pub states: BTreeMap<Tick, u64>,
    pub asked: Option<Tick>,
    pub rng: SimRng,
    pub events: Vec<Event>,
    pub inputs_after_live: u64,
    /// Reports a wrong state hash every 10 ticks (a liar, or a broken
    /// build).
    pub lie: bool,
    /// Commits no input (its connection stays alive).
    pub mute: bool,
    /// The room's first tick and the bulk of the game's state, for a game
    /// started afresh.
    first: Tick,
    bulk: usize,
}

impl App {
    /// A client's game; a joining one has none until its snapshot.
    pub fn new(seed: u64, joining: bool, first: Tick, bulk: usize) -> Self {
        Self {
            game: (!joining).then(|| Game::new(first, bulk)),
            states: BTreeMap::new(),
            asked: None,
            rng: SimRng::new(seed),
            events: Vec::new(),
            inputs_after_live: 0,
            lie: false,
            mute: false,
            first,
            bulk,
        }
    }

    pub fn play(&mut self, c: &mut ClientSession<u16>) {
        while let Some(ev) = c.poll_event() {
            match ev {
                Event::SnapshotRequested { tick } => self.asked = Some(tick),
                // Taken back without our state: start over, as a new
                // client would.
                Event::Reconnected { kept: false, .. } => self.game = None,
                _ => {}
            }
            self.events.push(ev);
        }
        if let Some(s) = c.take_snapshot() {
            let g = Game::restore(&s.bytes);
            assert_eq!(g.next, s.tick.saturating_add(1));
            self.game = Some(g);
        }
        if c.seat().is_some()
            && !self.mute
            && c.commit_local(self.rng.next_u64() as u16).is_ok()
            && !c.joining()
        {
            self.inputs_after_live += 1;
        }
        self.donate(c);
        while let Some(f) = c.advance() {
            // A client welcomed to replay the game (not joining from a
            // snapshot) runs it from the start.
            if self.game.is_none() && !c.joining() {
                self.game = Some(Game::new(self.first, self.bulk));
            }
            let Some(g) = self.game.as_mut() else {
                panic!("a frame before the state it follows");
            };
            g.step(&f);
            self.states.insert(f.tick, g.acc);
            let _ = c.report_checksum(f.tick, g.acc ^ u64::from(self.lie));
            self.donate(c);
        }
    }

    /// Hands over the state asked for once it is the current one.
    pub fn donate(&mut self, c: &mut ClientSession<u16>) {
        if let (Some(t), Some(g)) = (self.asked, &self.game)
            && g.next == t.saturating_add(1)
        {
            c.provide_snapshot(t, g.bytes())
                .expect("snapshot under the cap");
            self.asked = None;
        }
    }

    pub fn caught_up(&self) -> bool {
        self.events
            .iter()
            .any(|e| matches!(e, Event::CaughtUp { .. }))
    }
}
