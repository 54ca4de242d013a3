//! Pause agreement: one freeze frame everywhere, however messages interleave.
//!
//! A pause stops commits; the simulation then runs until it reaches the
//! *freeze frame* and rests there. A pause proposal names the proposer's next
//! commit tick: nobody can have run that frame (it needs the proposer's input,
//! which now will not come), so every peer can still stop on it.
//!
//! Rules, applied to every pause and resume a peer hears, its own included:
//!
//! * the earliest proposed freeze frame wins, so two players pausing at once
//!   converge on one frame whatever order their messages arrive in;
//! * a pause naming a frame already simulated here is an echo of a pause that
//!   is over (somebody committed past it) and is dropped;
//! * a pause naming a frame at or below the latest lifted one is an echo of a
//!   lifted pause and is dropped;
//! * a resume lifts whatever pause is in flight here, unless it is news of a
//!   pause this peer already knows was lifted, or of a pause that ended
//!   before this peer's current position: a peer that had not yet heard the
//!   earliest proposal is resuming the same pause under a later number.
//!
//! Lifting records the highest frame proposed during the pause, so late
//! echoes of every proposal that took part are recognised as stale.
//!
//! In a sequenced room the sequencer alone calls pauses (its own, or a
//! seat's it granted) and keeps its agreement with [`request`] and
//! [`resume`]; a client follows it with [`follow_pause`] and
//! [`follow_resume`], which apply the same echo rules to one authority's
//! word instead of merging proposals.
//!
//! [`request`]: PauseAgreement::request
//! [`resume`]: PauseAgreement::resume
//! [`follow_pause`]: PauseAgreement::follow_pause
//! [`follow_resume`]: PauseAgreement::follow_resume

use crate::Tick;

/// What changed when a pause or resume was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PauseChange {
    /// Nothing: a duplicate, a stale echo, or a later proposal.
    None,
    /// A pause began, freezing on this frame.
    Began(Tick),
    /// The pause in flight moved to an earlier frame.
    Moved(Tick),
    /// The pause was lifted; it was to freeze on this frame.
    Lifted(Tick),
}

#[derive(Debug, Clone, Default)]
pub(crate) struct PauseAgreement {
    /// The frame the current pause freezes on.
    frame: Option<Tick>,
    /// The highest frame proposed during the current pause.
    highest: Option<Tick>,
    /// The highest frame of any lifted pause.
    lifted: Option<Tick>,
}

impl PauseAgreement {
    pub(crate) fn frame(&self) -> Option<Tick> {
        self.frame
    }

    pub(crate) fn lifted(&self) -> Option<Tick> {
        self.lifted
    }

    fn merge(&mut self, proposal: Tick) -> PauseChange {
        self.highest = Some(self.highest.map_or(proposal, |h| h.max(proposal)));
        match self.frame {
            None => {
                self.frame = Some(proposal);
                PauseChange::Began(proposal)
            }
            Some(f) if proposal < f => {
                self.frame = Some(proposal);
                PauseChange::Moved(proposal)
            }
            Some(_) => PauseChange::None,
        }
    }

    /// A local pause proposing `proposal` (the local next commit tick).
    /// A proposal at or below the last lifted frame would read as an echo
    /// of that pause everywhere else, so it freezes one frame later: nobody
    /// can run that one either, since it needs this peer's input too.
    pub(crate) fn request(&mut self, proposal: Tick) -> PauseChange {
        let proposal = match self.lifted {
            Some(l) if proposal <= l => l.saturating_add(1),
            _ => proposal,
        };
        self.merge(proposal)
    }

    /// A peer's pause freezing on `frame`; `next_tick` is the next frame this
    /// peer will simulate.
    pub(crate) fn receive_pause(&mut self, frame: Tick, next_tick: Tick) -> PauseChange {
        if frame < next_tick || self.lifted.is_some_and(|l| frame <= l) {
            return PauseChange::None;
        }
        self.merge(frame)
    }

    /// Lifts the local pause, if any.
    pub(crate) fn resume(&mut self) -> PauseChange {
        match self.frame.take() {
            None => PauseChange::None,
            Some(f) => {
                let top = self.highest.take().unwrap_or(f);
                self.lifted = Some(self.lifted.map_or(top, |l| l.max(top)));
                PauseChange::Lifted(f)
            }
        }
    }

    /// A peer lifted the pause that was to freeze on `frame`.
    pub(crate) fn receive_resume(&mut self, frame: Tick, next_tick: Tick) -> PauseChange {
        if self.lifted.is_some_and(|l| frame <= l) {
            return PauseChange::None;
        }
        self.lifted = Some(frame);
        match self.frame {
            // The lifted pause ended before this peer's position, so the pause
            // in flight here was proposed after it: keep it.
            Some(_) if frame < next_tick => PauseChange::None,
            Some(_) => self.resume(),
            None => PauseChange::None,
        }
    }

    /// The authority's pause freezing on `frame`, heard by a follower whose
    /// next frame to simulate is `next_tick`: taken unless a pause is in
    /// flight already (the authority announces one at a time), the frame
    /// was simulated here, or it is an echo of a lifted pause.
    pub(crate) fn follow_pause(&mut self, frame: Tick, next_tick: Tick) -> PauseChange {
        let stale = self.lifted.is_some_and(|l| frame <= l);
        if self.frame.is_some() || frame < next_tick || stale {
            return PauseChange::None;
        }
        self.frame = Some(frame);
        self.highest = Some(frame);
        PauseChange::Began(frame)
    }

    /// The authority lifted the pause it knew as `lifted`: news if above
    /// every lifted pause known here, and then it lifts whatever pause is in
    /// flight, whichever frame that was to freeze on (an authority that took
    /// over the room may know the same pause by a lower frame than its
    /// predecessor did).
    pub(crate) fn follow_resume(&mut self, lifted: Tick) -> PauseChange {
        if self.lifted.is_some_and(|l| lifted <= l) {
            return PauseChange::None;
        }
        self.lifted = Some(lifted);
        self.highest = None;
        match self.frame.take() {
            Some(f) => PauseChange::Lifted(f),
            None => PauseChange::None,
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
    fn a_new_pause_right_after_a_resume_is_not_taken_for_its_echo() {
        let (mut a, mut b) = (PauseAgreement::default(), PauseAgreement::default());
        assert_eq!(a.request(t(10)), PauseChange::Began(t(10)));
        assert_eq!(b.receive_pause(t(10), t(8)), PauseChange::Began(t(10)));
        a.resume();
        assert_eq!(b.receive_resume(t(10), t(10)), PauseChange::Lifted(t(10)));
        // a pauses again before committing anything: its next commit is
        // still 10, which everyone knows as lifted.
        let again = a.request(t(10));
        assert_eq!(again, PauseChange::Began(t(11)));
        assert_eq!(b.receive_pause(t(11), t(10)), PauseChange::Began(t(11)));
    }

    #[test]
    fn earliest_proposal_wins_in_any_order() {
        let mut a = PauseAgreement::default();
        assert_eq!(a.request(t(12)), PauseChange::Began(t(12)));
        assert_eq!(a.receive_pause(t(10), t(5)), PauseChange::Moved(t(10)));
        assert_eq!(a.receive_pause(t(11), t(5)), PauseChange::None);
        let mut b = PauseAgreement::default();
        assert_eq!(b.receive_pause(t(10), t(5)), PauseChange::Began(t(10)));
        assert_eq!(b.request(t(12)), PauseChange::None);
        assert_eq!(a.frame(), b.frame());
    }

    #[test]
    fn pause_for_an_already_simulated_frame_is_an_echo() {
        let mut a = PauseAgreement::default();
        assert_eq!(a.receive_pause(t(9), t(10)), PauseChange::None);
        assert_eq!(a.frame(), None);
        // Resting exactly on the frame is not past it.
        assert_eq!(a.receive_pause(t(10), t(10)), PauseChange::Began(t(10)));
    }

    #[test]
    fn echoes_of_a_lifted_pause_are_dropped() {
        let mut a = PauseAgreement::default();
        a.request(t(12));
        a.receive_pause(t(10), t(5));
        assert_eq!(a.resume(), PauseChange::Lifted(t(10)));
        // Both proposals that took part are now stale.
        assert_eq!(a.lifted(), Some(t(12)));
        assert_eq!(a.receive_pause(t(10), t(5)), PauseChange::None);
        assert_eq!(a.receive_pause(t(12), t(5)), PauseChange::None);
        // A genuinely new pause later on is honoured.
        assert_eq!(a.receive_pause(t(20), t(15)), PauseChange::Began(t(20)));
    }

    #[test]
    fn resume_under_a_different_number_lifts_the_same_pause() {
        // b proposed 12 before hearing a's 10; a resumes "10".
        let mut b = PauseAgreement::default();
        b.request(t(12));
        assert_eq!(b.receive_resume(t(10), t(8)), PauseChange::Lifted(t(12)));
        assert_eq!(b.frame(), None);
        // a's late pause echo is now stale at b.
        assert_eq!(b.receive_pause(t(10), t(8)), PauseChange::None);
    }

    #[test]
    fn stale_resume_does_not_lift_a_newer_pause() {
        let mut a = PauseAgreement::default();
        a.request(t(10));
        a.resume();
        a.request(t(30));
        // The old resume is repeated: already known.
        assert_eq!(a.receive_resume(t(10), t(25)), PauseChange::None);
        assert_eq!(a.frame(), Some(t(30)));
        // A resume of a pause that ended before our position is old news too.
        let mut b = PauseAgreement::default();
        b.request(t(30));
        assert_eq!(b.receive_resume(t(12), t(20)), PauseChange::None);
        assert_eq!(b.frame(), Some(t(30)));
        assert_eq!(b.lifted(), Some(t(12)));
    }

    #[test]
    fn a_follower_takes_one_pause_at_a_time_and_drops_its_echoes() {
        let mut c = PauseAgreement::default();
        assert_eq!(c.follow_pause(t(4), t(5)), PauseChange::None);
        assert_eq!(c.follow_pause(t(10), t(5)), PauseChange::Began(t(10)));
        // Repeated, or another frame while one is in flight: no change.
        assert_eq!(c.follow_pause(t(10), t(6)), PauseChange::None);
        assert_eq!(c.follow_pause(t(8), t(6)), PauseChange::None);
        assert_eq!(c.follow_resume(t(10)), PauseChange::Lifted(t(10)));
        assert_eq!(c.follow_resume(t(10)), PauseChange::None);
        // An echo of the lifted pause, delayed past its resume.
        assert_eq!(c.follow_pause(t(10), t(10)), PauseChange::None);
        assert_eq!(c.follow_pause(t(11), t(10)), PauseChange::Began(t(11)));
    }

    #[test]
    fn a_new_authority_lifts_the_pause_under_its_own_number() {
        let mut c = PauseAgreement::default();
        c.follow_pause(t(20), t(15));
        // The new host paused the room at its open tick, 18, and resumes it.
        assert_eq!(c.follow_pause(t(18), t(15)), PauseChange::None);
        assert_eq!(c.follow_resume(t(18)), PauseChange::Lifted(t(20)));
        assert_eq!(c.frame(), None);
        assert_eq!(c.lifted(), Some(t(18)));
    }

    #[test]
    fn an_authority_never_reuses_a_lifted_frame() {
        let mut s = PauseAgreement::default();
        assert_eq!(s.request(t(7)), PauseChange::Began(t(7)));
        assert_eq!(s.request(t(7)), PauseChange::None);
        assert_eq!(s.resume(), PauseChange::Lifted(t(7)));
        // Nothing sealed since: the next pause is known by a new frame.
        assert_eq!(s.request(t(7)), PauseChange::Began(t(8)));
    }

    #[test]
    fn resume_when_not_paused_is_harmless() {
        let mut a = PauseAgreement::default();
        assert_eq!(a.resume(), PauseChange::None);
        assert_eq!(a.receive_resume(t(4), t(1)), PauseChange::None);
        assert_eq!(a.lifted(), Some(t(4)));
        assert_eq!(a.frame(), None);
    }
}
