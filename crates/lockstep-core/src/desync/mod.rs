//! Finding where a game stops being deterministic, down to the tick and the
//! field.
//!
//! A lockstep game must compute the same state from the same frames on
//! every machine, and restore a snapshot to exactly the state it was taken
//! from. [`SelfCheck`] tests both in one process, before any network is
//! involved: it runs two copies of the game on the same frames, round-trips
//! one of them through its snapshot every few ticks, compares their hashes
//! after every tick and, at the first difference, names the tick, what was
//! happening (a step, a round trip) and, if the game shows its fields
//! ([`Game::fields`](crate::Game::fields)), which ones differ. It catches iteration over a
//! `HashMap` (each copy has its own random order), state a snapshot forgets,
//! a value a restore computes differently (a float rebuilt from a rounded
//! copy), and anything else that makes two runs part.
//!
//! ```
//! use lockstep_core::desync::{Fields, SelfCheck};
//! use lockstep_core::{Frame, Game, Tick};
//!
//! /// A counter that forgets its `bonus` in snapshots.
//! #[derive(Default)]
//! struct Counter { total: u64, bonus: u64 }
//!
//! impl Game for Counter {
//!     type Input = u8;
//!     fn step(&mut self, frame: &Frame<u8>) {
//!         self.bonus += 1;
//!         self.total += frame.inputs.iter().flatten().map(|&i| u64::from(i)).sum::<u64>() + self.bonus;
//!     }
//!     fn hash(&self) -> u64 { self.total ^ (self.bonus << 32) }
//!     fn save(&self) -> Vec<u8> { self.total.to_le_bytes().to_vec() }
//!     fn restore(bytes: &[u8]) -> Result<Self, String> {
//!         let total = u64::from_le_bytes(bytes.try_into().map_err(|_| "8 bytes")?);
//!         Ok(Counter { total, bonus: 0 })
//!     }
//!     fn fields(&self, out: &mut Fields) {
//!         out.push("total", self.total);
//!         out.push("bonus", self.bonus);
//!     }
//! }
//!
//! let frames = (0..100).map(|t| Frame { tick: Tick::new(t), inputs: vec![Some(1u8)], events: vec![] });
//! let found = SelfCheck::every(10).run(Counter::default, frames).unwrap_err();
//! assert_eq!(found.tick, Tick::new(9));
//! assert_eq!(found.fields[0].path, "bonus");
//! ```

use crate::{Frame, Input, Tick};
use core::fmt;
use std::collections::{HashMap, VecDeque};

mod chain;
mod report;
mod search;
mod self_check;

pub(crate) use chain::block_of;
pub use chain::{BLOCK, CHECK_INTERVAL, ChainError, FirstDifference, HashChain};
pub use report::{REPORT_VERSION, Report, ReportField, ReportFrame};
pub use search::{Search, Step};
pub use self_check::{Cause, Divergence, FieldDiff, Fields, Passed, Run, SelfCheck};

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Two machines whose states part at `split` (for one reported
        /// tick or for good): the search names exactly `split` when the
        /// window still holds it, in one question per block and at most
        /// log2(block) + 1 more, the memory stays within the window, and the
        /// chain differs from the split to the end of its block (for these
        /// seeds).
        #[test]
        fn the_first_difference_is_found_exactly_in_few_questions(
            first in prop_oneof![Just(0u32), 65_500u32..65_600, (u32::MAX - 30_000)..(u32::MAX - 29_000)],
            len in 2u32..1_500,
            window in 1usize..600,
            split in 0u32..1_500,
            every in prop_oneof![Just(1u32), 1u32..12],
            lasting in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let (mut ours, mut theirs) = (HashChain::new(window), HashChain::new(window));
            let mut rng = crate::sim::SimRng::new(seed);
            for k in 0..len {
                let t = Tick::new(first).saturating_add(k * every);
                let h = rng.next_u64();
                ours.push(t, h).unwrap();
                // Their state differs at `split` only, or from it on.
                let differs = k == split || (k > split && lasting);
                theirs.push(t, if differs { h ^ 1 } else { h }).unwrap();
                prop_assert!(ours.links.len() <= window);
            }
            let last = ours.last().unwrap();
            let lo = ours.oldest().unwrap();
            let mut asked = 0u32;
            let found = ours.first_difference(lo, last, |t| {
                asked += 1;
                theirs.chain(t)
            });
            let blocks = block_of(last) - block_of(lo) + 1;
            let per_block = BLOCK.div_ceil(every);
            prop_assert!(
                asked <= blocks + 32 - per_block.leading_zeros() + 1,
                "{asked} questions for {blocks} blocks"
            );
            let held = len.min(window as u32);
            if split >= len {
                prop_assert_eq!(found, None);
            } else if split >= len - held {
                let split_tick = Tick::new(first).saturating_add(split * every);
                prop_assert_eq!(found, Some(split_tick));
                // Its block's chain differs from the split on.
                for t in ours.ticks_in(split_tick, last).filter(|t| block_of(*t) == block_of(split_tick)) {
                    prop_assert_ne!(ours.chain(t), theirs.chain(t));
                }
            }
        }
    }

    #[test]
    fn ticks_ascend_with_gaps_and_the_chain_restarts_per_block() {
        let mut c = HashChain::new(4);
        c.push(Tick::new(10), 1).unwrap();
        assert_eq!(
            c.push(Tick::new(10), 2),
            Err(ChainError::NotAscending {
                got: Tick::new(10),
                last: Tick::new(10)
            })
        );
        c.push(Tick::new(12), 2).unwrap();
        for t in [20, 30, 40, 50] {
            c.push(Tick::new(t), 3).unwrap();
        }
        assert_eq!(c.hash(Tick::new(12)), None);
        assert_eq!(c.hash(Tick::new(20)), Some(3));
        assert_eq!(c.last(), Some(Tick::new(50)));
        // Equal histories from a block's first report on give equal chains,
        // whatever came before.
        let (mut a, mut b) = (HashChain::new(8), HashChain::new(8));
        a.push(Tick::new(60), 1).unwrap();
        b.push(Tick::new(61), 2).unwrap();
        for t in 64..70 {
            a.push(Tick::new(t), 5).unwrap();
            b.push(Tick::new(t), 5).unwrap();
        }
        assert_eq!(a.chain(Tick::new(69)), b.chain(Tick::new(69)));
    }
}
