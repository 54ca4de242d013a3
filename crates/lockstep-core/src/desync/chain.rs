//! The hash chain every machine keeps of its state hashes, and the
//! checkpoints' blocks and intervals.

use super::*;

/// The first tick whose state differs between this machine and another,
/// found by comparing their hash chains after a checkpoint mismatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstDifference {
    /// The tick.
    pub tick: Tick,
    /// Our state hash after it.
    pub local: u64,
    /// Theirs.
    pub remote: u64,
}

/// Ticks per block. The chain restarts at the first tick reported in each
/// block (so a machine that joined, or restored a state, has a complete chain
/// from its first whole block on), and the checkpoint closing a block is
/// sent in full.
pub const BLOCK: u32 = 64;

/// Ticks per checkpoint interval: a machine sends one checkpoint, the chain
/// through the last tick it reported in the interval, per interval.
pub const CHECK_INTERVAL: u32 = 8;

/// The block `tick` is in.
pub(crate) fn block_of(tick: Tick) -> u32 {
    tick.get() / BLOCK
}

/// The state hashes of the last ticks reported, and the chain over them that
/// checkpoints compare between machines.
///
/// The chain folds each reported tick's hash into the one before,
/// `C(t) = xxh3-64(C(p) ‖ t ‖ hash(t))` (`C(p)` the chain through the tick
/// reported before `t`, as `u64` little-endian, or 0 when `t` is the first
/// reported in its [`BLOCK`]; `t` as `u32` little-endian; `hash(t)` as `u64`
/// little-endian). Two machines whose states part at tick `t*` have equal
/// chains before it and different ones from `t*` to the end of its block
/// (but for a 2^-64 collision), even if the states become equal again. So a
/// short piece of the chain sent now and then still catches a divergence:
/// each 16-bit checkpoint misses with probability 2^-16, and the full one
/// closing the block never does; and "where do the chains first differ" is
/// a search over the window ([`first_difference`](Self::first_difference)):
/// one question per block, then a binary search inside the first block that
/// differs, rather than a dump of every hash.
///
/// Ticks need not follow one another (a game may report every tick, or
/// every tenth), but every machine must report the same ones.
///
/// ```
/// use lockstep_core::desync::HashChain;
/// use lockstep_core::Tick;
/// let (mut ours, mut theirs) = (HashChain::new(256), HashChain::new(256));
/// for t in 0..200u32 {
///     ours.push(Tick::new(t), u64::from(t))?;
///     // Their state parts from ours at tick 137.
///     theirs.push(Tick::new(t), u64::from(t) + u64::from(t >= 137))?;
/// }
/// assert_ne!(ours.chain(Tick::new(199)), theirs.chain(Tick::new(199)));
/// let mut asked = 0;
/// let first = ours.first_difference(Tick::new(0), Tick::new(199), |t| {
///     asked += 1;
///     theirs.chain(t)
/// });
/// assert_eq!(first, Some(Tick::new(137)));
/// assert!(asked <= 10);
/// # Ok::<(), lockstep_core::desync::ChainError>(())
/// ```
#[derive(Debug, Clone)]
pub struct HashChain {
    pub(super) window: usize,
    /// Per reported tick, oldest first: the tick, its hash and the chain
    /// through it.
    pub(super) links: VecDeque<Link>,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Link {
    tick: Tick,
    hash: u64,
    chain: u64,
}

/// Why a hash was not added to a [`HashChain`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChainError {
    /// Ticks ascend: this one is not after the last.
    #[error("tick {got} is not after the last one reported ({last})")]
    NotAscending {
        /// The tick given.
        got: Tick,
        /// The last tick reported.
        last: Tick,
    },
}

impl HashChain {
    /// An empty chain keeping the last `window` reported ticks (at least 1).
    pub fn new(window: usize) -> Self {
        Self {
            window: window.max(1),
            links: VecDeque::new(),
        }
    }

    /// The last tick reported.
    pub fn last(&self) -> Option<Tick> {
        self.links.back().map(|l| l.tick)
    }

    /// How many ticks are held.
    pub fn len(&self) -> usize {
        self.links.len()
    }

    /// Whether no tick is held.
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// The oldest tick held.
    pub fn oldest(&self) -> Option<Tick> {
        self.links.front().map(|l| l.tick)
    }

    /// Adds the state hash after `tick`, which must come after the last one
    /// added. The oldest beyond the window goes.
    pub fn push(&mut self, tick: Tick, hash: u64) -> Result<(), ChainError> {
        let prev = match self.links.back() {
            Some(l) if l.tick >= tick => {
                return Err(ChainError::NotAscending {
                    got: tick,
                    last: l.tick,
                });
            }
            Some(l) if block_of(l.tick) == block_of(tick) => l.chain,
            _ => 0,
        };
        let mut bytes = [0u8; 20];
        bytes[..8].copy_from_slice(&prev.to_le_bytes());
        bytes[8..12].copy_from_slice(&tick.get().to_le_bytes());
        bytes[12..].copy_from_slice(&hash.to_le_bytes());
        self.links.push_back(Link {
            tick,
            hash,
            chain: xxhash_rust::xxh3::xxh3_64(&bytes),
        });
        if self.links.len() > self.window {
            self.links.pop_front();
        }
        Ok(())
    }

    /// Forgets everything: the machine's state was replaced, so the chain
    /// starts over (complete again from the next block).
    pub fn clear(&mut self) {
        self.links.clear();
    }

    fn link(&self, tick: Tick) -> Option<&Link> {
        let i = self.links.binary_search_by_key(&tick, |l| l.tick).ok()?;
        self.links.get(i)
    }

    /// The state hash after `tick`, if held.
    pub fn hash(&self, tick: Tick) -> Option<u64> {
        self.link(tick).map(|l| l.hash)
    }

    /// The chain through `tick`, if held.
    pub fn chain(&self, tick: Tick) -> Option<u64> {
        self.link(tick).map(|l| l.chain)
    }

    /// The ticks held in `lo..=hi`, ascending.
    pub fn ticks_in(&self, lo: Tick, hi: Tick) -> impl Iterator<Item = Tick> + '_ {
        let from = self.links.partition_point(|l| l.tick < lo);
        self.links
            .range(from..)
            .map(|l| l.tick)
            .take_while(move |t| *t <= hi)
    }

    /// The first tick in `lo..=hi` whose state differs from the other
    /// machine's, asking `theirs(t)` for its chain through `t` (`None`: it
    /// does not hold it) once per block in the range, then as often as a
    /// binary search in the first block that differs needs. Ticks before
    /// `lo` must agree. `None` if the chains agree through `hi`, or a tick
    /// needed is not held on either side.
    pub fn first_difference(
        &self,
        lo: Tick,
        hi: Tick,
        mut theirs: impl FnMut(Tick) -> Option<u64>,
    ) -> Option<Tick> {
        let mut search = Search::new(lo, hi);
        loop {
            let questions = search.questions(self, 1);
            let answers: Vec<_> = questions.iter().map(|&t| (t, theirs(t))).collect();
            match search.answer(self, &answers) {
                Step::Ask => {}
                Step::Found(t) => return Some(t),
                Step::Agree | Step::Unknown => return None,
            }
        }
    }
}
