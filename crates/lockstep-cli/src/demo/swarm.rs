//! Swarm as a demo bot's runner plays it: the game, and the bot's notes
//! beside it (none of them state): the desync it injects into its own
//! game (`--inject-desync`), its recent states and frames for a desync
//! report, and the host changes it ran.

use lockstep_core::desync::Fields;
use lockstep_core::{Frame, PlayerId, PlayerInputs, SystemEvent, Tick};
use lockstep_demo::Game;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// States and frames a bot keeps for a desync report.
pub(super) const KEEP: usize = 64;

/// The bot's seat, as its session tells it once welcomed (0: not yet;
/// else the seat + 1): shared with the game, which the runner owns.
#[derive(Debug, Clone, Default)]
pub(super) struct Seat(Arc<AtomicU32>);

impl Seat {
    pub(super) fn set(&self, seat: PlayerId) {
        self.0.store(u32::from(seat.0) + 1, Ordering::Relaxed);
    }

    fn get(&self) -> Option<PlayerId> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            n => Some(PlayerId((n - 1) as u16)),
        }
    }
}

/// Swarm with a bot's notes (see the [module](self)). Only `game` is
/// saved, restored and hashed: a state received starts the notes afresh.
#[derive(Debug, Clone)]
pub(crate) struct Swarm {
    pub(crate) game: Game,
    /// `--inject-desync`: the seat whose game breaks, and from which tick.
    inject: Option<(u16, u32)>,
    seat: Seat,
    /// Its recent states and frames, newest last.
    pub(super) history: VecDeque<Game>,
    pub(super) frames: VecDeque<Frame<PlayerInputs>>,
    /// Every `HostChanged` it ran, with its tick.
    pub(super) host_changes: Vec<(Tick, PlayerId)>,
}

impl Swarm {
    pub(super) fn new(game: Game, inject: Option<(u16, u32)>, seat: Seat) -> Self {
        Self {
            game,
            inject,
            seat,
            history: VecDeque::new(),
            frames: VecDeque::new(),
            host_changes: Vec::new(),
        }
    }
}

impl lockstep_core::Game for Swarm {
    type Input = PlayerInputs;

    fn step(&mut self, frame: &Frame<PlayerInputs>) {
        self.game.step(frame);
        // At the tick asked, or the first after it that the seat's ship is
        // in the game: this client alone changes a field.
        if let Some((target, at)) = self.inject
            && frame.tick.get() >= at
            && let Some(seat) = self.seat.get().filter(|s| s.0 == target)
            && let Some(ship) = self.game.ships.iter_mut().find(|s| s.player == seat)
        {
            ship.score += 1000;
            self.inject = None;
        }
        for e in &frame.events {
            if let SystemEvent::HostChanged { player } = e {
                self.host_changes.push((frame.tick, *player));
            }
        }
        if self.history.len() >= KEEP {
            self.history.pop_front();
            self.frames.pop_front();
        }
        self.history.push_back(self.game.clone());
        self.frames.push_back(frame.clone());
    }

    fn hash(&self) -> u64 {
        self.game.hash()
    }

    fn save(&self) -> Vec<u8> {
        self.game.snapshot()
    }

    fn restore(bytes: &[u8]) -> Result<Self, String> {
        let game = Game::restore(bytes).map_err(|e| e.to_string())?;
        Ok(Self::new(game, None, Seat::default()))
    }

    fn fields(&self, out: &mut Fields) {
        lockstep_core::Game::fields(&self.game, out);
    }
}
