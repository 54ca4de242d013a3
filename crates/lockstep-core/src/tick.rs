//! Simulation ticks.

use core::fmt;

/// A simulation step number.
///
/// Ticks count up from [`Tick::ZERO`], one per simulation step, and are the
/// only clock that matters to a deterministic simulation: wall time paces the
/// loop, ticks order the world. A `Tick` is a full `u32` in memory (at 60 Hz
/// that is more than two years of play); arithmetic that could leave that
/// range is checked and never wraps silently.
///
/// ```
/// use lockstep_core::Tick;
/// let t = Tick::new(41);
/// assert_eq!(t.next(), Some(Tick::new(42)));
/// assert_eq!(Tick::new(50).since(t), 9);
/// assert_eq!(Tick::MAX.next(), None);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Tick(u32);

impl Tick {
    /// The first tick of every session.
    pub const ZERO: Self = Self(0);
    /// The last representable tick.
    pub const MAX: Self = Self(u32::MAX);

    /// The tick numbered `n`.
    pub const fn new(n: u32) -> Self {
        Self(n)
    }

    /// The tick number.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// The following tick, or `None` at [`Tick::MAX`].
    pub const fn next(self) -> Option<Self> {
        self.checked_add(1)
    }

    /// `n` ticks later, or `None` past [`Tick::MAX`].
    pub const fn checked_add(self, n: u32) -> Option<Self> {
        match self.0.checked_add(n) {
            Some(v) => Some(Self(v)),
            None => None,
        }
    }

    /// `n` ticks later, stopping at [`Tick::MAX`].
    pub const fn saturating_add(self, n: u32) -> Self {
        Self(self.0.saturating_add(n))
    }

    /// `n` ticks earlier, stopping at [`Tick::ZERO`].
    pub const fn saturating_sub(self, n: u32) -> Self {
        Self(self.0.saturating_sub(n))
    }

    /// How many ticks `self` is after `earlier`; zero if it is not after it.
    pub const fn since(self, earlier: Self) -> u32 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Debug for Tick {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tick({})", self.0)
    }
}

impl fmt::Display for Tick {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<u32> for Tick {
    fn from(n: u32) -> Self {
        Self(n)
    }
}

impl From<Tick> for u32 {
    fn from(t: Tick) -> Self {
        t.0
    }
}
