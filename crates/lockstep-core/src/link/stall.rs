//! The stall meter: when the picture stopped moving, and for how long.

use crate::Instant;
use core::time::Duration;

/// Counts stalls the way every session does: a stall is no frame for two
/// tick periods (steady latency beyond the input delay is not one), from
/// the last frame run until the next.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct StallMeter {
    /// When the game last got a frame.
    last_frame: Option<Instant>,
    /// When the stall under way began.
    started: Option<Instant>,
    stalls: u64,
    stalled_for: Duration,
}

impl StallMeter {
    /// The game asked for a frame at `now` and there was none: a stall
    /// begins (counted once) when none came for `two_ticks`.
    pub(crate) fn no_frame(&mut self, now: Instant, two_ticks: Duration) {
        if let (Some(last), None) = (self.last_frame, self.started)
            && now - last > two_ticks
        {
            self.started = Some(last + two_ticks);
            self.stalls += 1;
        }
    }

    /// When a stall begins if no frame comes first (just past two tick
    /// periods after the last frame ran): `None` before the first frame or
    /// while one is under way. Sessions keep a timer for it, so a game loop
    /// that only asks for a frame once one is there (a pacer's) still has
    /// its stalls counted, and shown while they last.
    pub(crate) fn begins_at(&self, two_ticks: Duration) -> Option<Instant> {
        match (self.last_frame, self.started) {
            (Some(last), None) => Some(last + two_ticks + Duration::from_micros(1)),
            _ => None,
        }
    }

    /// The game got a frame at `now`: any stall is over.
    pub(crate) fn ran(&mut self, now: Instant) {
        self.last_frame = Some(now);
        if let Some(since) = self.started.take() {
            self.stalled_for += now - since;
        }
    }

    /// Whether a stall is under way.
    pub(crate) fn stalled(&self) -> bool {
        self.started.is_some()
    }

    /// Stalls so far.
    pub(crate) fn stalls(&self) -> u64 {
        self.stalls
    }

    /// Time spent stalled, in stalls that ended.
    pub(crate) fn stalled_for(&self) -> Duration {
        self.stalled_for
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stall_is_two_tick_periods_without_a_frame() {
        let two = Duration::from_millis(66);
        let mut m = StallMeter::default();
        m.no_frame(Instant::from_millis(500), two);
        assert_eq!(m.stalls(), 0, "no frame ever: nothing to stall from");
        m.ran(Instant::from_millis(1_000));
        m.no_frame(Instant::from_millis(1_066), two);
        assert!(!m.stalled());
        m.no_frame(Instant::from_millis(1_067), two);
        m.no_frame(Instant::from_millis(1_500), two);
        assert_eq!((m.stalls(), m.stalled()), (1, true));
        m.ran(Instant::from_millis(2_066));
        assert_eq!(m.stalled_for(), Duration::from_millis(1_000));
        assert!(!m.stalled());
    }
}
