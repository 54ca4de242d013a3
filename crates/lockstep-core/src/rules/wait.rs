//! Whom a tick waits on, and when that is worth saying: inputs for one
//! tick arrive a little apart, more so over links that jitter, so a tick
//! names the seats it waits on only once it has waited a tick period and
//! twice the jitter of their links, that jitter at most 250 ms
//! ([`worth_naming_after`]). A
//! sequencer's open tick and a mesh peer's next one follow the same rule
//! (their `Status`'s `waiting`).

use crate::{Instant, PlayerId};
use core::time::Duration;

/// The most jitter a wait allows for before naming whom it waits on. A
/// link's jitter is the remote's to make (it answers pings when it likes):
/// past this, a seat holding the room up would hide behind its own link's
/// noise.
pub(crate) const MAX_NAMING_JITTER: Duration = Duration::from_millis(250);

/// How long a tick waits on seats before it names them, with ticks every
/// `period` and `jitter` the largest round-trip jitter of their links (at
/// most [`MAX_NAMING_JITTER`]).
pub(crate) fn worth_naming_after(period: Duration, jitter: Duration) -> Duration {
    period + jitter.min(MAX_NAMING_JITTER) * 2
}

/// The seats a tick waits on, named once the wait is worth naming (see the
/// [module](self)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Waits {
    /// Since when the tick has waited on someone.
    since: Option<Instant>,
    /// How long a wait lasts before it is worth naming, as of the last
    /// update.
    after: Duration,
    /// The seats named.
    named: Vec<PlayerId>,
}

impl Waits {
    /// Whether no wait is under way (nothing named, nothing timed).
    pub(crate) fn idle(&self) -> bool {
        self.since.is_none() && self.named.is_empty()
    }

    /// The seats named (empty while no wait is worth naming).
    pub(crate) fn named(&self) -> &[PlayerId] {
        &self.named
    }

    /// Nothing waits any more (the tick ran, or nobody plays).
    pub(crate) fn clear(&mut self) {
        self.named.clear();
        self.since = None;
    }

    /// `seat` is gone: it is named no more.
    pub(crate) fn forget(&mut self, seat: PlayerId) {
        self.named.retain(|s| *s != seat);
    }

    /// At `now` the tick waits on `blocked` (empty: on nobody), and a wait
    /// is worth naming `after` it began (see [`worth_naming_after`]).
    /// Returns the seats named before, when that changed.
    pub(crate) fn update(
        &mut self,
        blocked: &[PlayerId],
        now: Instant,
        after: Duration,
    ) -> Option<Vec<PlayerId>> {
        let since = (!blocked.is_empty()).then(|| *self.since.get_or_insert(now));
        self.since = since;
        self.after = after;
        // In the instant arithmetic `names_at` reports, so a call at that
        // instant names.
        let shown = if since.is_some_and(|t| now >= t + after) {
            blocked
        } else {
            &[]
        };
        (self.named != shown).then(|| core::mem::replace(&mut self.named, shown.to_vec()))
    }

    /// When a wait under way becomes worth naming, if it is not yet.
    pub(crate) fn names_at(&self) -> Option<Instant> {
        self.since
            .map(|t| t + self.after)
            .filter(|_| self.named.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERIOD: Duration = Duration::from_millis(33);

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn a_wait_is_named_once_it_lasted_a_tick_period() {
        let mut w = Waits::default();
        let one = vec![PlayerId(1)];
        assert_eq!(w.update(&one, at(0), PERIOD), None);
        assert_eq!(w.names_at(), Some(at(33)));
        assert_eq!(w.update(&one, at(32), PERIOD), None, "a little apart");
        assert_eq!(w.update(&one, at(33), PERIOD), Some(vec![]));
        assert_eq!(w.named(), &one[..]);
        assert_eq!(w.names_at(), None, "named already");
        // Someone else too: the change is said.
        let two = vec![PlayerId(1), PlayerId(2)];
        assert_eq!(w.update(&two, at(40), PERIOD), Some(one));
        // The input came: named no more, and a new wait starts over.
        assert_eq!(w.update(&[], at(50), PERIOD), Some(two));
        assert_eq!(w.update(&[PlayerId(3)], at(60), PERIOD), None);
        assert_eq!(w.names_at(), Some(at(93)));
        w.clear();
        assert_eq!((w.named(), w.names_at()), (&[][..], None));
    }

    #[test]
    fn links_that_jitter_wait_longer_before_a_wait_is_named() {
        let ms = Duration::from_millis;
        assert_eq!(worth_naming_after(PERIOD, Duration::ZERO), PERIOD);
        assert_eq!(worth_naming_after(PERIOD, ms(20)), ms(73));
    }
}
