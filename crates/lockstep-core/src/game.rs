//! The game's deterministic side, as the engine drives it.

use crate::desync::Fields;
use crate::{Frame, Input};

/// A deterministic game: what a [`Runner`](crate::runner::Runner) steps,
/// hashes, saves for a joiner and restores, and what
/// [`SelfCheck`](crate::desync::SelfCheck) runs twice to find where it is
/// not deterministic.
///
/// `step` must compute the same state from the same frames on every
/// machine; `save` then `restore` must give back exactly the state saved
/// (the hash the same, the next steps the same); `hash` must be equal for
/// equal states and built from a canonical, platform-independent encoding
/// (never `std::hash::Hash`, whose output may differ between builds).
///
/// ```
/// use lockstep_core::desync::Fields;
/// use lockstep_core::{Frame, Game, SystemEvent};
///
/// /// Every seat's running total; a seat that left keeps its score.
/// #[derive(Default)]
/// struct Scores(Vec<u64>);
///
/// impl Game for Scores {
///     type Input = u8;
///     fn step(&mut self, frame: &Frame<u8>) {
///         for e in &frame.events {
///             if let SystemEvent::Joined { player } = e {
///                 let seats = self.0.len().max(player.index() + 1);
///                 self.0.resize(seats, 0);
///             }
///         }
///         for (score, input) in self.0.iter_mut().zip(&frame.inputs) {
///             *score += u64::from(input.unwrap_or(0));
///         }
///     }
///     fn hash(&self) -> u64 {
///         self.0.iter().fold(0, |h, s| h.rotate_left(7) ^ s)
///     }
///     fn save(&self) -> Vec<u8> {
///         self.0.iter().flat_map(|s| s.to_le_bytes()).collect()
///     }
///     fn restore(bytes: &[u8]) -> Result<Self, String> {
///         let scores = bytes.chunks_exact(8);
///         if !scores.remainder().is_empty() {
///             return Err("not a whole number of scores".into());
///         }
///         Ok(Scores(scores.map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default())).collect()))
///     }
///     fn fields(&self, out: &mut Fields) {
///         for (i, s) in self.0.iter().enumerate() {
///             out.push(format!("scores[{i}]"), s);
///         }
///     }
/// }
/// ```
pub trait Game: Sized {
    /// The input a frame carries for each seat.
    type Input: Input;
    /// Runs one frame: every seat's input for its tick (`None` for an empty
    /// seat) and the [`SystemEvent`](crate::SystemEvent)s that take effect
    /// at it, identical on every machine.
    fn step(&mut self, frame: &Frame<Self::Input>);
    /// A hash of the whole state: equal states, equal hashes.
    fn hash(&self) -> u64;
    /// The state as a snapshot (for a player joining under way, or one
    /// being resynced).
    fn save(&self) -> Vec<u8>;
    /// The state a snapshot holds, or why it is not one. The bytes come
    /// from another machine: return an error, never panic.
    fn restore(bytes: &[u8]) -> Result<Self, String>;
    /// Puts the state `bytes` hold in place of this one and returns the
    /// state it replaces (a [`Runner`](crate::runner::Runner) keeps it
    /// after a resync, to name what parted). On an error nothing changes.
    ///
    /// The default restores a new game and swaps it in. A game whose state
    /// lives in an engine's world (an ECS, where `restore` cannot make a
    /// world with everything else in it) writes the state into its world
    /// instead, and returns a copy of the old state that can at least
    /// `hash`, `save` and list its `fields`.
    fn replace(&mut self, bytes: &[u8]) -> Result<Self, String> {
        let new = Self::restore(bytes)?;
        Ok(core::mem::replace(self, new))
    }
    /// The state's fields as (path, value) pairs, in a stable order, to
    /// name what differs. The default shows none: a divergence is then
    /// found by tick alone.
    fn fields(&self, out: &mut Fields) {
        let _ = out;
    }
}
