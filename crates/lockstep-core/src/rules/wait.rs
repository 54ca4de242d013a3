//! Whom a tick waits on, and when that is worth saying: inputs for one
//! tick arrive a little apart, so a tick names the seats it waits on only
//! once it has waited a tick period. A sequencer's open tick and a mesh
//! peer's next one follow the same rule (their `Status`'s `waiting`).

use crate::{Instant, PlayerId};
use core::time::Duration;

/// The seats a tick waits on, named once the wait is worth naming (see the
/// [module](self)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Waits {
    /// Since when the tick has waited on someone.
    since: Option<Instant>,
    /// The seats named.
    named: Vec<PlayerId>,
}

impl Waits {
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

    /// At `now` the tick waits on `blocked` (empty: on nobody), with ticks
    /// every `period`. Returns the seats named before, when that changed.
    pub(crate) fn update(
        &mut self,
        blocked: Vec<PlayerId>,
        now: Instant,
        period: Duration,
    ) -> Option<Vec<PlayerId>> {
        let since = (!blocked.is_empty()).then(|| *self.since.get_or_insert(now));
        self.since = since;
        let shown = if since.is_some_and(|t| now - t >= period) {
            blocked
        } else {
            Vec::new()
        };
        (self.named != shown).then(|| core::mem::replace(&mut self.named, shown))
    }

    /// When a wait under way becomes worth naming, if it is not yet, with
    /// ticks every `period`.
    pub(crate) fn names_at(&self, period: Duration) -> Option<Instant> {
        self.since
            .map(|t| t + period)
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
        assert_eq!(w.update(one.clone(), at(0), PERIOD), None);
        assert_eq!(w.names_at(PERIOD), Some(at(33)));
        assert_eq!(
            w.update(one.clone(), at(32), PERIOD),
            None,
            "a little apart"
        );
        assert_eq!(w.update(one.clone(), at(33), PERIOD), Some(vec![]));
        assert_eq!(w.named(), &one[..]);
        assert_eq!(w.names_at(PERIOD), None, "named already");
        // Someone else too: the change is said.
        let two = vec![PlayerId(1), PlayerId(2)];
        assert_eq!(w.update(two.clone(), at(40), PERIOD), Some(one));
        // The input came: named no more, and a new wait starts over.
        assert_eq!(w.update(vec![], at(50), PERIOD), Some(two));
        assert_eq!(w.update(vec![PlayerId(3)], at(60), PERIOD), None);
        assert_eq!(w.names_at(PERIOD), Some(at(93)));
        w.clear();
        assert_eq!((w.named(), w.names_at(PERIOD)), (&[][..], None));
    }
}
