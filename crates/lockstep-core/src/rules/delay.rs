//! How the delay a room or a mesh agrees on moves, given the largest delay
//! its players want: a rise at once (a frame late is a stall everybody
//! feels), a fall a tick at a time, each once the wants stayed below the
//! delay for a second of play (`tick_rate` ticks), so that a player wanting
//! low and high in turn cannot make every lead fall and fill again.
//!
//! The time is counted in ticks, never on a clock: a mesh decides at each
//! tick it runs and every peer must decide alike, and a sequencer decides
//! at the tick it is about to seal, so a room held up (waiting on a player,
//! or nobody playing) does not count the wait as a second of steady play.

use crate::Tick;

/// Where the delay's fall is counted from.
#[derive(Debug, Clone, Default)]
pub(crate) struct DelayStep {
    /// Since which tick the largest want has stayed below the delay.
    low_since: Option<Tick>,
}

impl DelayStep {
    /// The delay is `delay` and the largest want, already kept within the
    /// adaptive bounds, is `wanted` at `tick`: the delay from `tick` on, if
    /// it changes there. `period` is the ticks in a second.
    pub(crate) fn decide(
        &mut self,
        delay: u32,
        wanted: u32,
        tick: Tick,
        period: u32,
    ) -> Option<u32> {
        if wanted > delay {
            self.low_since = None;
            return Some(wanted);
        }
        if wanted == delay {
            self.low_since = None;
            return None;
        }
        let since = *self.low_since.get_or_insert(tick);
        if tick.since(since) < period {
            return None;
        }
        // Down by one; the next step after another second below.
        self.low_since = Some(tick);
        Some(delay - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u32) -> Tick {
        Tick::new(n)
    }

    #[test]
    fn a_rise_is_at_once_and_a_fall_one_tick_a_second() {
        let mut s = DelayStep::default();
        assert_eq!(s.decide(3, 6, t(0), 30), Some(6));
        // Below from tick 10: nothing until 40, then one tick down.
        assert_eq!(s.decide(6, 2, t(10), 30), None);
        assert_eq!(s.decide(6, 2, t(39), 30), None);
        assert_eq!(s.decide(6, 2, t(40), 30), Some(5));
        assert_eq!(s.decide(5, 2, t(69), 30), None);
        assert_eq!(s.decide(5, 2, t(70), 30), Some(4));
    }

    #[test]
    fn a_want_back_at_the_delay_restarts_the_count() {
        let mut s = DelayStep::default();
        assert_eq!(s.decide(6, 2, t(0), 30), None);
        assert_eq!(s.decide(6, 6, t(20), 30), None);
        assert_eq!(s.decide(6, 2, t(25), 30), None);
        assert_eq!(s.decide(6, 2, t(54), 30), None);
        assert_eq!(s.decide(6, 2, t(55), 30), Some(5));
    }
}
