//! Small pieces every session uses the same way: rates, and the bounded
//! event queue.

use crate::Instant;
use core::time::Duration;
use std::collections::VecDeque;

/// Events per second over the last full second: a window closes at the
/// first event a second or more after it opened. A window left open two
/// seconds or more (nothing happens any more) counts as it stands.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Rate {
    opened: Option<Instant>,
    count: u64,
    last: Option<f64>,
}

impl Rate {
    /// `n` more events at `now`.
    pub(crate) fn add(&mut self, now: Instant, n: u64) {
        let opened = *self.opened.get_or_insert(now);
        let open_for = now - opened;
        if open_for >= Duration::from_secs(1) {
            self.last = Some(self.count as f64 / open_for.as_secs_f64());
            self.opened = Some(now);
            self.count = 0;
        }
        self.count = self.count.saturating_add(n);
    }

    /// Events per second as of `now`, once a window closed.
    pub(crate) fn per_sec(&self, now: Instant) -> Option<f64> {
        let open_for = now - self.opened?;
        if open_for >= Duration::from_secs(2) {
            return Some(self.count as f64 / open_for.as_secs_f64());
        }
        self.last
    }
}

/// Events for the caller, bounded: past `cap`, the oldest is dropped (a
/// caller that never drains its events must not grow memory).
#[derive(Debug, Clone)]
pub(crate) struct Events<E> {
    queue: VecDeque<E>,
    cap: usize,
    dropped: u64,
}

impl<E> Events<E> {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            queue: VecDeque::new(),
            cap: cap.max(1),
            dropped: 0,
        }
    }

    pub(crate) fn push(&mut self, ev: E) {
        if self.queue.len() >= self.cap {
            self.queue.pop_front();
            self.dropped += 1;
        }
        self.queue.push_back(ev);
    }

    pub(crate) fn pop(&mut self) -> Option<E> {
        self.queue.pop_front()
    }

    /// Events dropped unread.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_count_the_last_full_second() {
        let mut r = Rate::default();
        let at = |ms| Instant::from_millis(ms);
        assert_eq!(r.per_sec(at(0)), None);
        for k in 0..30u64 {
            r.add(at(k * 33), 1);
        }
        // The first window closes at the first event a second on.
        r.add(at(1_000), 1);
        let rate = r.per_sec(at(1_000)).expect("a closed window");
        assert!((rate - 30.0).abs() < 0.01, "{rate}");
        // Nothing for long: the open window counts as it stands.
        let idle = r.per_sec(at(5_000)).expect("a rate");
        assert!(idle < 0.3, "{idle}");
    }

    #[test]
    fn events_drop_the_oldest_past_the_cap() {
        let mut e = Events::new(2);
        for i in 0..5 {
            e.push(i);
        }
        assert_eq!(
            (e.pop(), e.pop(), e.pop(), e.dropped()),
            (Some(3), Some(4), None, 3)
        );
    }
}
