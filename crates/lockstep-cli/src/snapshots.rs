//! A swarm client's part in late join: restoring the state it joins from,
//! and handing over its own when the relay asks for it.

use lockstep_core::sequenced::ClientSession;
use lockstep_core::{Event, PlayerInputs, Tick};
use lockstep_demo::Game;

/// What a client owes the relay in snapshots.
#[derive(Debug, Default)]
pub(crate) struct Snapshots {
    /// The tick whose state the relay asked for, until handed over.
    asked: Option<Tick>,
}

impl Snapshots {
    /// Notes a request for our state.
    pub(crate) fn on_event(&mut self, ev: &Event) {
        if let Event::SnapshotRequested { tick } = ev {
            self.asked = Some(*tick);
        }
    }

    /// Restores the state we join from (or are resynced to), once it has
    /// arrived; `Ok(Some(tick))` when it just did, the state being the one
    /// after `tick`.
    pub(crate) fn restore(
        &mut self,
        session: &mut ClientSession<PlayerInputs>,
        game: &mut Game,
    ) -> Result<Option<Tick>, String> {
        let Some(s) = session.take_snapshot() else {
            return Ok(None);
        };
        let restored =
            Game::restore(&s.bytes).map_err(|e| format!("the state we joined from: {e}"))?;
        if restored.tick != s.tick.saturating_add(1) {
            return Err(format!(
                "the state we joined from is at tick {}, not after tick {}",
                restored.tick, s.tick
            ));
        }
        *game = restored;
        Ok(Some(s.tick))
    }

    /// Hands our state over once the game has run the tick asked for (call
    /// after every frame). A request for a tick already behind us is
    /// dropped: the relay asks someone else.
    pub(crate) fn donate(&mut self, session: &mut ClientSession<PlayerInputs>, game: &Game) {
        let Some(t) = self.asked else { return };
        let after = t.saturating_add(1);
        if game.tick == after {
            self.asked = None;
            // Over the cap: the relay times out and tells the joiners.
            let _ = session.provide_snapshot(t, game.snapshot());
        } else if game.tick > after {
            self.asked = None;
        }
    }
}
