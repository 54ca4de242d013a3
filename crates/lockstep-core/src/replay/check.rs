//! Running a replay's frames through the game again.

use super::Replay;
use crate::Tick;

/// What running a replay's frames through the game found (see [`verify`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verified {
    /// Every checkpoint matched: how many, over how many frames.
    Matches {
        /// Checkpoints compared.
        checkpoints: usize,
        /// Frames run.
        frames: usize,
    },
    /// The game's state after `tick` is not the one recorded: the first
    /// checkpoint that differs (the states parted at or before it).
    Differs {
        /// The checkpoint's tick.
        tick: Tick,
        /// The recorded hash.
        recorded: u64,
        /// The hash this game's run gives.
        ran: u64,
    },
    /// The snapshot the recording starts from does not restore.
    BadSnapshot(String),
}

/// Runs a replay's frames through the game (`start` is the game at the
/// match's first tick; a recording that starts mid-match restores its
/// header's snapshot instead) and compares its state hash with every
/// checkpoint recorded. The caller checks the header's fingerprint first:
/// another build's replay would differ, and say little.
///
/// ```
/// use lockstep_core::replay::{verify, Header, Recorder, Replay, Topology, Verified};
/// use lockstep_core::{Frame, Game, Tick};
/// #[derive(Default)] struct Sum(u64);
/// impl Game for Sum {
///     type Input = u8;
///     fn step(&mut self, f: &Frame<u8>) { self.0 += f.inputs.iter().flatten().map(|i| u64::from(*i)).sum::<u64>(); }
///     fn hash(&self) -> u64 { self.0 }
///     fn save(&self) -> Vec<u8> { self.0.to_le_bytes().to_vec() }
///     fn restore(b: &[u8]) -> Result<Self, String> { Ok(Sum(u64::from_le_bytes(b.try_into().map_err(|_| "8 bytes")?))) }
/// }
/// let mut rec = Recorder::<u8, _>::new(Header::new(1, "sum", 30, 1, Topology::Other), Vec::new())?;
/// let mut game = Sum::default();
/// for t in 0..90u32 {
///     let f = Frame { tick: Tick::new(t), inputs: vec![Some(3)], events: vec![] };
///     game.step(&f);
///     rec.record(&f)?;
///     rec.checkpoint(f.tick, game.hash());
/// }
/// let file = rec.finish()?;
/// let replay = Replay::<u8>::read(&file);
/// assert_eq!(verify(&replay, Sum::default()), Verified::Matches { checkpoints: 90, frames: 90 });
/// # Ok::<(), lockstep_core::replay::ReplayError>(())
/// ```
pub fn verify<G: crate::Game>(replay: &Replay<G::Input>, start: G) -> Verified {
    let mut game = match replay.header.as_ref().and_then(|h| h.snapshot.as_ref()) {
        Some((_, bytes)) => match G::restore(bytes) {
            Ok(g) => g,
            Err(e) => return Verified::BadSnapshot(e),
        },
        None => start,
    };
    let mut checks = replay.checkpoints.iter().peekable();
    let mut compared = 0;
    for frame in &replay.frames {
        game.step(frame);
        while let Some(c) = checks.next_if(|c| c.tick <= frame.tick) {
            if c.tick < frame.tick {
                continue;
            }
            compared += 1;
            let ran = game.hash();
            if ran != c.value {
                return Verified::Differs {
                    tick: c.tick,
                    recorded: c.value,
                    ran,
                };
            }
        }
    }
    Verified::Matches {
        checkpoints: compared,
        frames: replay.frames.len(),
    }
}
