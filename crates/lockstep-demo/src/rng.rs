//! A small seeded generator whose whole state is two numbers, so it can be
//! part of a snapshot and a state hash.

/// PCG-XSH-RR 32 (O'Neill): 64-bit state, 32-bit output.
///
/// ```
/// use lockstep_demo::Pcg32;
/// let mut a = Pcg32::new(42);
/// let mut b = Pcg32::new(42);
/// assert_eq!(a.next_u32(), b.next_u32());
/// assert!(a.below(10) < 10);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pcg32 {
    state: u64,
    inc: u64,
}

const MULTIPLIER: u64 = 6_364_136_223_846_793_005;

impl Pcg32 {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        let mut g = Self {
            state: 0,
            inc: (seed.rotate_left(17) << 1) | 1,
        };
        g.next_u32();
        g.state = g.state.wrapping_add(seed);
        g.next_u32();
        g
    }

    /// Rebuilds a generator from [`state`](Self::state).
    pub fn from_state(state: u64, inc: u64) -> Self {
        Self {
            state,
            inc: inc | 1,
        }
    }

    /// The whole state.
    pub fn state(&self) -> (u64, u64) {
        (self.state, self.inc)
    }

    /// The next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        let old = self.state;
        self.state = old.wrapping_mul(MULTIPLIER).wrapping_add(self.inc);
        let xorshifted = (((old >> 18) ^ old) >> 27) as u32;
        let rot = (old >> 59) as u32;
        xorshifted.rotate_right(rot)
    }

    /// Uniform in `0..n` (0 when `n` is 0), without modulo bias worth noting
    /// for a game.
    pub fn below(&mut self, n: u32) -> u32 {
        ((u64::from(self.next_u32()) * u64::from(n)) >> 32) as u32
    }
}
