//! When a client whose connection was lost takes its seat back on a new
//! one: the rule [`RelayClient`](crate::RelayClient) follows, for any
//! client loop that can open a new transport.

use lockstep_core::Game;
use lockstep_core::Instant;
use lockstep_core::runner::{Played, Runner};
use std::time::Duration;

/// How long the server may be silent (from its last datagram) before a new
/// connection is tried; a relay holds a player's seat 30 s from its last
/// packet.
pub const RECONNECT_AFTER: Duration = Duration::from_secs(3);
/// How long after the connection was lost new ones are tried: past it the
/// relay has given the seat up.
pub const RECONNECT_FOR: Duration = Duration::from_secs(30);

/// What [`Reconnect::due`] says to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// The connection stands.
    None,
    /// It is lost; not now (tried less than a second ago, or given up).
    Later,
    /// Open a new transport and take the seat back now.
    Now,
    /// It has been lost for the rule's `give_up`: stop, ending the session
    /// with `ClientSession::give_up` (so that it says why).
    GiveUp,
}

/// When to take a seat back on a new connection: once the server has been
/// silent for `after` (counted from the later of its last datagram and our
/// last try, since a handshake takes two round trips), or the session
/// closed while the seat may be held, or the transport failed; at most
/// once a second; for `give_up` after the connection was lost.
///
/// ```
/// use lockstep_net::Reconnect;
/// let mut rule = Reconnect::default();
/// // Each turn, before the runner's: when rule.due(&runner, broken, now) is
/// // Attempt::Now, open a transport, session.reconnect(..), and on success
/// // rule.reconnected(); on Attempt::GiveUp, session.give_up().
/// assert_eq!(rule.reconnects(), 0);
/// ```
#[derive(Debug, Clone)]
pub struct Reconnect {
    after: Duration,
    give_up: Duration,
    /// When the connection was first lost, while it is.
    outage: Option<Instant>,
    /// When a new connection was last tried.
    tried: Option<Instant>,
    /// A new connection was tried and has not connected yet.
    pending: bool,
    reconnects: u32,
}

impl Default for Reconnect {
    fn default() -> Self {
        Self::new(RECONNECT_AFTER, RECONNECT_FOR)
    }
}

impl Reconnect {
    /// Tries after `after` of silence, for `give_up` after the loss.
    pub fn new(after: Duration, give_up: Duration) -> Self {
        Self {
            after,
            give_up,
            outage: None,
            tried: None,
            pending: false,
            reconnects: 0,
        }
    }

    /// Sets when to try and for how long.
    pub fn set(&mut self, after: Duration, give_up: Duration) {
        self.after = after;
        self.give_up = give_up;
    }

    /// What to do now: [`Attempt::Now`] to open a new transport and take
    /// the seat back (the connection is lost, as the type says, and the
    /// seat can be taken back; the last try was a second ago or more; it
    /// was lost less than `give_up` ago), which counts as a try;
    /// [`Attempt::Later`] while lost otherwise; [`Attempt::GiveUp`] once it
    /// has been lost for `give_up` without connecting again;
    /// [`Attempt::None`] while the connection stands.
    pub fn due<G: Game, S: Played<G::Input>>(
        &mut self,
        runner: &Runner<G, S>,
        broken: bool,
        now: Instant,
    ) -> Attempt {
        let session = runner.session();
        // Lost for `give_up`, not connected, the seat still one to take
        // back: the loop ends the session (then it is no longer).
        if !session.connected()
            && session.can_reconnect()
            && self.outage.is_some_and(|t| now - t >= self.give_up)
        {
            return Attempt::GiveUp;
        }
        let silent = runner
            .interrupted_since()
            .map(|t| self.tried.map_or(t, |tried| t.max(tried)))
            .is_some_and(|t| now - t >= self.after);
        let lost = (session.closed() || silent || broken) && session.can_reconnect();
        if !lost {
            if session.connected() {
                self.outage = None;
                if core::mem::take(&mut self.pending) {
                    self.reconnects += 1;
                }
            }
            return Attempt::None;
        }
        let since = *self.outage.get_or_insert(now);
        let retry = self.tried.is_none_or(|t| now - t >= Duration::from_secs(1));
        if now - since >= self.give_up || !retry {
            return Attempt::Later;
        }
        self.tried = Some(now);
        Attempt::Now
    }

    /// A new connection was tried (the session's `reconnect` took it): it
    /// counts in [`reconnects`](Self::reconnects) once it connects.
    pub fn reconnected(&mut self) {
        self.pending = true;
    }

    /// Seats taken back on a new connection after one was lost (tries that
    /// never connected do not count).
    pub fn reconnects(&self) -> u32 {
        self.reconnects
    }
}
