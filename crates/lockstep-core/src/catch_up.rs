//! Running many ticks without freezing the picture.

use core::time::Duration;

/// Tells a game loop how many ready frames to run in this render frame so
/// that catching up (after joining from a snapshot, or after a long stall)
/// spends at most a time budget per render frame, and the screen keeps
/// drawing and can show progress.
///
/// The game times its own steps (the engine has no clock) and reports them
/// with [`ran`](Self::ran); the estimate of a tick's cost follows them.
///
/// ```
/// use lockstep_core::CatchUp;
/// use std::time::Duration;
///
/// let mut catch_up = CatchUp::new(Duration::from_millis(8));
/// // 500 frames are ready; ticks have been costing 1 ms each.
/// catch_up.ran(4, Duration::from_millis(4));
/// assert_eq!(catch_up.ticks(500), 8);
/// // Never fewer than one, never more than are ready.
/// assert_eq!(catch_up.ticks(3), 3);
/// catch_up.ran(1, Duration::from_millis(50));
/// assert_eq!(catch_up.ticks(500), 1);
/// ```
#[derive(Debug, Clone)]
pub struct CatchUp {
    budget: Duration,
    /// Smoothed cost of one tick, once measured.
    per_tick: Option<Duration>,
}

impl CatchUp {
    /// At most `budget` of ticks per render frame (8 ms leaves a 60 Hz
    /// frame room to draw).
    pub fn new(budget: Duration) -> Self {
        Self {
            budget,
            per_tick: None,
        }
    }

    /// How many of the `ready` frames to run now: as many as fit the budget
    /// at the cost measured so far, at least one, at most `ready`. Before
    /// any measurement, one.
    pub fn ticks(&self, ready: usize) -> usize {
        let fit = match self.per_tick {
            Some(t) if !t.is_zero() => (self.budget.as_nanos() / t.as_nanos()) as usize,
            Some(_) => ready,
            None => 1,
        };
        fit.clamp(1, ready.max(1)).min(ready)
    }

    /// Records that `n` ticks took `took` (the estimate moves a quarter of
    /// the way to what was measured).
    pub fn ran(&mut self, n: usize, took: Duration) {
        let Some(n) = u32::try_from(n).ok().filter(|n| *n > 0) else {
            return;
        };
        let each = took / n;
        self.per_tick = Some(match self.per_tick {
            None => each,
            Some(old) => (old * 3 + each) / 4,
        });
    }
}

impl Default for CatchUp {
    fn default() -> Self {
        Self::new(Duration::from_millis(8))
    }
}
