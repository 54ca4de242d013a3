//! The search for the first divergent tick between two hash chains.

use super::*;

/// A search for the first divergent tick between this machine's chain and
/// another's, one round of questions at a time: the form the search takes
/// between machines, where each round is a message there and back.
///
/// ```
/// use lockstep_core::desync::{HashChain, Search, Step};
/// use lockstep_core::Tick;
/// let (mut ours, mut theirs) = (HashChain::new(256), HashChain::new(256));
/// for t in 0..64u32 {
///     ours.push(Tick::new(t), 7)?;
///     theirs.push(Tick::new(t), if t == 41 { 8 } else { 7 })?;
/// }
/// // The checkpoint through tick 63 differed: the search is within its block.
/// let mut search = Search::within_block(Tick::new(0), Tick::new(63));
/// let mut rounds = 0;
/// let found = loop {
///     rounds += 1;
///     let asked = search.questions(&ours, 8);
///     let answers: Vec<_> = asked.iter().map(|&t| (t, theirs.chain(t))).collect();
///     match search.answer(&ours, &answers) {
///         Step::Ask => continue,
///         Step::Found(t) => break t,
///         other => panic!("{other:?}"),
///     }
/// };
/// assert_eq!(found, Tick::new(41));
/// assert_eq!(rounds, 2);
/// # Ok::<(), lockstep_core::desync::ChainError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Search {
    /// Every tick before it agrees.
    lo: Tick,
    /// It differs (or is the end of the range, before the first answer).
    hi: Tick,
    /// `lo..=hi` lies in one block whose chain differs at `hi`.
    narrowed: bool,
}

/// What a [`Search`] round found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Ask the next round's questions.
    Ask,
    /// The first tick whose state differs.
    Found(Tick),
    /// The chains agree through the end of the range.
    Agree,
    /// The other side does not hold the ticks needed (or this one does
    /// not): the search cannot go on.
    Unknown,
}

impl Search {
    /// A search over `lo..=hi`, every tick before `lo` agreeing.
    pub fn new(lo: Tick, hi: Tick) -> Self {
        Self {
            lo,
            hi: hi.max(lo),
            narrowed: false,
        }
    }

    /// A search over `lo..=hi` where the chain through `hi` is known to
    /// differ (a checkpoint did), so the first divergent tick is in `hi`'s
    /// block: ticks before that block are not asked about.
    pub fn within_block(lo: Tick, hi: Tick) -> Self {
        Self {
            lo: lo.max(Tick::new(block_of(hi) * BLOCK)).min(hi),
            hi,
            narrowed: true,
        }
    }

    /// The range still searched.
    pub fn range(&self) -> (Tick, Tick) {
        (self.lo, self.hi)
    }

    /// The next round's questions, at most `most` (at least 1): ticks whose
    /// chain the other machine is asked for.
    pub fn questions(&self, ours: &HashChain, most: usize) -> Vec<Tick> {
        let most = most.max(1);
        if !self.narrowed {
            // The last tick held in each block of the range.
            let mut ends: Vec<Tick> = Vec::new();
            for t in ours.ticks_in(self.lo, self.hi) {
                match ends.last_mut() {
                    Some(e) if block_of(*e) == block_of(t) => *e = t,
                    _ => ends.push(t),
                }
            }
            ends.truncate(most);
            return ends;
        }
        // Inside the block: ticks before `hi`, evenly spread.
        let held: Vec<Tick> = ours
            .ticks_in(self.lo, self.hi)
            .filter(|t| *t < self.hi)
            .collect();
        if held.len() <= most {
            return held;
        }
        (1..=most)
            .map(|k| held[k * held.len() / (most + 1)])
            .collect()
    }

    /// Takes the answers to the last questions (`None`: the other side
    /// does not hold that tick).
    pub fn answer(&mut self, ours: &HashChain, answers: &[(Tick, Option<u64>)]) -> Step {
        let mut answers: Vec<(Tick, bool)> = answers
            .iter()
            .filter_map(|&(t, theirs)| Some((t, ours.chain(t)? != theirs?)))
            .filter(|(t, _)| (self.lo..=self.hi).contains(t))
            .collect();
        answers.sort_unstable_by_key(|(t, _)| *t);
        if answers.is_empty() && !(self.narrowed && self.done(ours)) {
            return Step::Unknown;
        }
        if !self.narrowed {
            // The first block whose end differs holds the first divergent
            // tick; every block before it agrees.
            for (end, differs) in answers {
                if differs {
                    self.lo = self.lo.max(Tick::new(block_of(end) * BLOCK));
                    self.hi = end;
                    self.narrowed = true;
                    break;
                }
                if end >= self.hi {
                    return Step::Agree;
                }
                self.lo = self.lo.max(end.saturating_add(1));
            }
            if !self.narrowed {
                return if ours.ticks_in(self.lo, self.hi).next().is_some() {
                    Step::Ask
                } else {
                    Step::Agree
                };
            }
        } else {
            for (t, differs) in answers {
                if differs {
                    self.hi = self.hi.min(t);
                } else if t < self.hi {
                    self.lo = self.lo.max(t.saturating_add(1));
                }
            }
        }
        if self.done(ours) {
            Step::Found(self.hi)
        } else {
            Step::Ask
        }
    }

    /// No tick held between the agreed ones and `hi`: `hi` is the first.
    fn done(&self, ours: &HashChain) -> bool {
        self.narrowed && ours.ticks_in(self.lo, self.hi).next() == Some(self.hi)
    }
}
