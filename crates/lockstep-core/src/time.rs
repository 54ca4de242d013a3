//! Time as a value.
//!
//! The core never reads a clock. Every method that needs to know the time
//! takes an [`Instant`] from the caller, which makes sessions reproducible
//! under a virtual clock and portable to targets without `std::time`.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};
use core::time::Duration;

/// A point in time, in microseconds since an origin the caller chooses.
///
/// Only differences between instants mean anything; a game usually takes
/// the process start as the origin.
///
/// ```
/// use lockstep_core::Instant;
/// use std::time::Duration;
/// let t = Instant::from_millis(1_000);
/// assert_eq!(t + Duration::from_millis(5), Instant::from_millis(1_005));
/// assert_eq!(Instant::from_millis(1_005) - t, Duration::from_millis(5));
/// // Subtracting a later instant saturates to zero rather than panicking.
/// assert_eq!(t - Instant::from_millis(2_000), Duration::ZERO);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant {
    micros: u64,
}

impl Instant {
    /// The origin.
    pub const ZERO: Self = Self { micros: 0 };

    /// `micros` microseconds after the origin.
    pub const fn from_micros(micros: u64) -> Self {
        Self { micros }
    }

    /// `millis` milliseconds after the origin.
    pub const fn from_millis(millis: u64) -> Self {
        Self {
            micros: millis.saturating_mul(1_000),
        }
    }

    /// `since_origin` after the origin, saturating at the far end of time:
    /// how a loop turns its monotonic clock's elapsed time into an instant.
    ///
    /// ```
    /// use lockstep_core::Instant;
    /// use std::time::Duration;
    /// assert_eq!(Instant::from_duration(Duration::from_millis(5)), Instant::from_millis(5));
    /// assert_eq!(Instant::from_duration(Duration::MAX).as_micros(), u64::MAX);
    /// ```
    pub fn from_duration(since_origin: Duration) -> Self {
        Self::from_micros(u64::try_from(since_origin.as_micros()).unwrap_or(u64::MAX))
    }

    /// Microseconds since the origin.
    pub const fn as_micros(self) -> u64 {
        self.micros
    }

    /// Milliseconds since the origin (rounded down).
    pub const fn as_millis(self) -> u64 {
        self.micros / 1_000
    }

    /// The time from `earlier` to `self`, or zero if `earlier` is later.
    pub const fn saturating_duration_since(self, earlier: Self) -> Duration {
        Duration::from_micros(self.micros.saturating_sub(earlier.micros))
    }

    /// `self + d`, or `None` on overflow.
    pub fn checked_add(self, d: Duration) -> Option<Self> {
        let d = u64::try_from(d.as_micros()).ok()?;
        self.micros.checked_add(d).map(Self::from_micros)
    }
}

impl Add<Duration> for Instant {
    type Output = Self;

    /// Saturates at the far end of time instead of overflowing.
    fn add(self, d: Duration) -> Self {
        self.checked_add(d).unwrap_or(Self::from_micros(u64::MAX))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub for Instant {
    type Output = Duration;

    /// Saturates to zero if `rhs` is later.
    fn sub(self, rhs: Self) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Instant({}.{:06}s)",
            self.micros / 1_000_000,
            self.micros % 1_000_000
        )
    }
}

/// A session's timer table: every timer it keeps, named, with when it
/// comes, worked out from the state each serves (so none outlives it).
pub(crate) trait TimerTable {
    /// What a timer is for (and whose).
    type Timer;

    /// Calls `timer` with every timer kept and when it comes.
    fn each_timer(&self, timer: impl FnMut(Self::Timer, Instant));

    /// The earliest timer and when it comes (the first listed of those
    /// due at the same instant).
    fn next_timer(&self) -> Option<(Instant, Self::Timer)> {
        let mut next = Earliest::default();
        self.each_timer(|timer, at| next.consider(at, timer));
        next.get()
    }
}

/// The earliest of a session's timers, and which one it is: on a tie, the
/// first considered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Earliest<K> {
    next: Option<(Instant, K)>,
}

impl<K> Default for Earliest<K> {
    fn default() -> Self {
        Self { next: None }
    }
}

impl<K> Earliest<K> {
    /// `kind` comes at `at`.
    pub(crate) fn consider(&mut self, at: Instant, kind: K) {
        if self.next.as_ref().is_none_or(|(t, _)| at < *t) {
            self.next = Some((at, kind));
        }
    }

    /// The earliest considered.
    pub(crate) fn get(self) -> Option<(Instant, K)> {
        self.next
    }
}
