//! A recipient's record of the inputs it took from one seat's sender, by
//! the tick stamped: what it acknowledges is the first tick it still
//! lacks, so inputs may arrive in any order (a sender repeats each a few
//! times and resends what is not acknowledged, see [`Resend`](super::Resend))
//! and none is acknowledged before it arrived.
//!
//! A sender that will never send some ticks (it stamped further ahead, or
//! dropped inputs unsent) says so with its *floor*, the first tick it
//! still has an input to deliver for: the ticks before it are given up.

use crate::Tick;
use std::collections::VecDeque;

/// The most ticks tracked past the first one lacking: a sender that leaves
/// a tick out for that long (only possible where ticks are sealed without
/// waiting for it) gives it up.
pub(crate) const MAX_TRACKED: u32 = 8192;

/// The ticks taken from one sender (see the [module](self)).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Taken {
    /// The first tick lacking: every tick before it was taken or given up.
    first: Tick,
    /// Whether tick `first + k` was taken, at index `k`; never starts or
    /// ends with `true` and `false` respectively.
    held: VecDeque<bool>,
}

impl Taken {
    /// Nothing taken; ticks before `first` are not expected.
    pub(crate) fn new(first: Tick) -> Self {
        Self {
            first,
            held: VecDeque::new(),
        }
    }

    /// The first tick lacking: what the recipient acknowledges.
    pub(crate) fn first(&self) -> Tick {
        self.first
    }

    /// One past the highest tick taken, or the first lacking when none
    /// after it was: how far its sender's inputs reach.
    pub(crate) fn end(&self) -> Tick {
        self.first.saturating_add(self.held.len() as u32)
    }

    /// Whether `tick` was taken or given up.
    pub(crate) fn has(&self, tick: Tick) -> bool {
        tick < self.first
            || self
                .held
                .get(tick.since(self.first) as usize)
                .copied()
                .unwrap_or(false)
    }

    /// Takes `tick`: `false` if it was already taken or given up. A tick
    /// [`MAX_TRACKED`] or more past the first lacking gives up those that
    /// far behind it.
    pub(crate) fn take(&mut self, tick: Tick) -> bool {
        if self.has(tick) {
            return false;
        }
        if tick.since(self.first) >= MAX_TRACKED {
            self.skip_to(tick.saturating_sub(MAX_TRACKED - 1));
        }
        let k = tick.since(self.first) as usize;
        if self.held.len() <= k {
            self.held.resize(k + 1, false);
        }
        self.held[k] = true;
        self.settle();
        true
    }

    /// Ticks before `tick` will not come: every one lacking is given up.
    pub(crate) fn skip_to(&mut self, tick: Tick) {
        if tick <= self.first {
            return;
        }
        let n = tick.since(self.first) as usize;
        self.held.drain(..n.min(self.held.len()));
        self.first = tick;
        self.settle();
    }

    /// Nothing from `tick` on was taken (its sender stamps those ticks
    /// again): the first lacking goes back there if it was past it.
    pub(crate) fn forget_from(&mut self, tick: Tick) {
        if tick <= self.first {
            self.first = tick;
            self.held.clear();
            return;
        }
        self.held.truncate(tick.since(self.first) as usize);
        self.settle();
    }

    /// Moves `first` past the ticks taken from it on, and drops the ticks
    /// lacking at the end.
    fn settle(&mut self) {
        while self.held.front() == Some(&true) {
            self.held.pop_front();
            self.first = self.first.saturating_add(1);
        }
        while self.held.back() == Some(&false) {
            self.held.pop_back();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: u32) -> Tick {
        Tick::new(n)
    }

    #[test]
    fn the_first_lacking_moves_only_over_ticks_taken() {
        let mut k = Taken::new(t(10));
        assert!(!k.take(t(9)), "before the start");
        assert!(k.take(t(12)));
        assert!(!k.take(t(12)), "twice");
        assert_eq!(k.first(), t(10));
        assert!(k.take(t(10)));
        assert_eq!(k.first(), t(11));
        assert!(k.has(t(12)) && !k.has(t(11)) && !k.has(t(13)));
        assert!(k.take(t(11)));
        assert_eq!(k.first(), t(13));
        assert!(k.held.is_empty());
    }

    #[test]
    fn a_floor_gives_up_what_lacks_before_it() {
        let mut k = Taken::new(t(0));
        k.take(t(3));
        k.take(t(6));
        k.skip_to(t(3));
        assert_eq!(k.first(), t(4), "3 was taken");
        k.skip_to(t(2));
        assert_eq!(k.first(), t(4), "never back");
        k.skip_to(t(5));
        assert_eq!(k.first(), t(5));
        assert!(k.has(t(6)) && !k.has(t(5)));
        k.skip_to(t(100));
        assert_eq!((k.first(), k.held.len()), (t(100), 0));
    }

    #[test]
    fn forgetting_takes_the_first_lacking_back() {
        let mut k = Taken::new(t(0));
        for n in [0, 1, 2, 4, 5] {
            k.take(t(n));
        }
        assert_eq!(k.first(), t(3));
        k.forget_from(t(5));
        assert!(k.has(t(4)) && !k.has(t(5)));
        k.forget_from(t(1));
        assert_eq!(k.first(), t(1));
        assert!(!k.has(t(4)));
    }

    #[test]
    fn what_is_tracked_is_bounded() {
        let mut k = Taken::new(t(0));
        let far = MAX_TRACKED * 3 + 7;
        assert!(k.take(t(far)));
        assert_eq!(k.first(), t(far - MAX_TRACKED + 1));
        assert!(k.held.len() <= MAX_TRACKED as usize);
        for n in (far - 20..far).rev() {
            k.take(t(n));
        }
        assert!(k.held.len() <= MAX_TRACKED as usize);
        assert!(!k.take(t(0)));
    }
}
