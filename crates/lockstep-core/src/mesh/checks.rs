//! Checkpoints against every peer: mismatches and where the search for
//! the first divergent tick ended.

use super::*;

impl<I: Input> MeshSession<I> {
    /// Searches for the first divergent tick: a question due goes out, and a
    /// peer that stopped answering ends its search empty-handed.
    pub(super) fn progress_searches(&mut self) {
        let now = self.now;
        for i in 0..self.peers.len() {
            if let Some(o) = self.peers[i].checks.progress(now) {
                self.check_outcome(i, o);
            }
            if self.peers[i]
                .checks
                .question_due()
                .is_some_and(|d| d <= now)
            {
                self.peers[i].link.flush = true;
            }
        }
    }

    /// The game's state is being replaced: our chain starts over, and so
    /// does every comparison.
    pub(super) fn restart_checks(&mut self) {
        self.checks.restart();
        for p in &mut self.peers {
            p.checks.restart();
        }
    }

    /// What came of peer `i`'s checkpoints: the game hears of a mismatch
    /// and of where the search for the first divergent tick ended.
    pub(super) fn check_outcome(&mut self, i: usize, o: Outcome) {
        let peer = self.peers[i].id;
        self.peers[i].link.flush |= self.peers[i].checks.urgent(self.now);
        match o {
            Outcome::Mismatch(m) => self.push_desync(peer, m),
            Outcome::Located { checkpoint, first } => self.push_event(Event::DesyncLocated {
                peer,
                checkpoint,
                first,
            }),
            Outcome::Agreed { from } => self.push_event(Event::DesyncEnded { peer, from }),
        }
    }

    /// An abandoned player's checksums from `from` on describe a stream
    /// nobody else runs.
    pub(super) fn ignore_checksums_of(&mut self, seat: PlayerId, from: Tick) {
        for p in self.peers.iter_mut().filter(|p| p.seat == Some(seat)) {
            p.checks.ignore_from(from);
        }
    }

    pub(super) fn push_desync(&mut self, peer: PeerId, m: Mismatch) {
        self.push_event(Event::Desync {
            tick: m.tick,
            peer,
            local: m.local,
            remote: m.remote,
        });
    }
}
