//! What a [`Runner`](super::Runner) needs of a session, for each topology.

use crate::sequenced::{ClientSession, HostSession, HostedSession, Lobby};
use crate::snapshot::{Snapshot, SnapshotError};
use crate::{ChecksumError, CommitError, Endpoint, Event, Frame, Input, MeshSession, Tick};

/// A session a [`Runner`](super::Runner) can drive: a mesh player or
/// observer ([`MeshSession`]), a relay's client ([`ClientSession`]), a
/// hosting player ([`HostSession`]) or a player of a hosted match that
/// survives its host ([`HostedSession`]). Each method is the session's own
/// method of the same name, which carries the docs.
pub trait Played<I: Input>: Endpoint {
    /// The next event.
    fn poll_event(&mut self) -> Option<Event>;
    /// Whether an input is due (see `ClientSession::input_due`).
    fn input_due(&self) -> bool;
    /// Commits the local input for the next tick.
    fn commit_local(&mut self, input: I) -> Result<Tick, CommitError>;
    /// The next confirmed frame, if it has arrived.
    fn advance(&mut self) -> Option<Frame<I>>;
    /// The frames ready, as a pacer counts them.
    fn ready_to_pace(&self) -> usize;
    /// Reports the state hash after `tick`.
    fn report_checksum(&mut self, tick: Tick, hash: u64) -> Result<(), ChecksumError>;
    /// Answers a state request.
    fn provide_snapshot(&mut self, tick: Tick, bytes: Vec<u8>) -> Result<(), SnapshotError>;
    /// The state announced by `Event::Snapshot`, once.
    fn take_snapshot(&mut self) -> Option<Snapshot>;
    /// While a snapshot arrives: chunks in, of how many.
    fn snapshot_progress(&self) -> Option<(u32, u32)>;
    /// The tick rate the match runs at, once known: one place sets it (the
    /// mesh's config, the sequencer's Welcome).
    fn tick_rate(&self) -> Option<u32>;
    /// Whether the session is joining a match under way (its frames are to
    /// be run as fast as they can be, and its commits wait).
    fn joining(&self) -> bool;
    /// Whether it has been let into the match (a mesh always is).
    fn connected(&self) -> bool;
    /// Whether the connection is over (a sequenced session closed or
    /// refused, until it reconnects; a mesh player's seat emptied).
    fn closed(&self) -> bool;
    /// Whether a seat is held that a new connection could take back (see
    /// `ClientSession::can_reconnect`; a host or a mesh player: never).
    fn can_reconnect(&self) -> bool;
    /// The next frame to run.
    fn frame(&self) -> Tick;
    /// Whether our state is being replaced with the others' (see
    /// `ClientSession::resyncing`).
    fn resyncing(&self) -> bool;
    /// Whether the match is paused.
    fn paused(&self) -> bool;
    /// How many frames behind the match the session is, as far as it
    /// knows (see `ClientSession::frames_behind`,
    /// `MeshSession::frames_ready`).
    fn frames_behind(&self) -> u32;
    /// The room's lobby, while its match has not started (see
    /// `ClientSession::lobby`; a mesh has none).
    fn lobby(&self) -> Option<Lobby>;
    /// The input delay in force, in ticks (0 before it is known).
    fn delay(&self) -> u32;
    /// Whether every player's clock sets the pace together (see
    /// `ClientSession::paced_together`).
    fn paced_together(&self) -> bool;
    /// The match's id, where the session has one (see
    /// `ClientSession::match_id`).
    fn match_id(&self) -> Option<u64>;
    /// Each seat's player's name, by seat, as far as known (the roster's;
    /// a mesh knows none).
    fn names(&self) -> Vec<String>;
    /// The game fingerprint the session speaks with (0 for none).
    fn fingerprint(&self) -> u64;
}

/// The roster's names by seat, up to the highest seat named.
fn roster_names(c: &ClientSession<impl Input>) -> Vec<String> {
    let mut names = Vec::new();
    for s in c.roster() {
        let k = s.seat.index();
        if names.len() <= k {
            names.resize(k + 1, String::new());
        }
        names[k] = s.name.clone();
    }
    names
}

/// `Played` for a session type whose inherent methods carry the names.
macro_rules! played {
    ($session:ident, $snapshot_progress:expr, $tick_rate:expr, $joining:expr, $connected:expr, $closed:expr, $can_reconnect:expr, $behind:expr, $resyncing:expr, $paused:expr, $lobby:expr, $delay:expr, $together:expr, $match_id:expr, $names:expr, $fingerprint:expr) => {
        impl<I: Input> Played<I> for $session<I> {
            fn poll_event(&mut self) -> Option<Event> {
                Self::poll_event(self)
            }
            fn input_due(&self) -> bool {
                Self::input_due(self)
            }
            fn commit_local(&mut self, input: I) -> Result<Tick, CommitError> {
                Self::commit_local(self, input)
            }
            fn advance(&mut self) -> Option<Frame<I>> {
                Self::advance(self)
            }
            fn ready_to_pace(&self) -> usize {
                Self::ready_to_pace(self)
            }
            fn report_checksum(&mut self, tick: Tick, hash: u64) -> Result<(), ChecksumError> {
                Self::report_checksum(self, tick, hash)
            }
            fn provide_snapshot(
                &mut self,
                tick: Tick,
                bytes: Vec<u8>,
            ) -> Result<(), SnapshotError> {
                Self::provide_snapshot(self, tick, bytes)
            }
            fn take_snapshot(&mut self) -> Option<Snapshot> {
                Self::take_snapshot(self)
            }
            fn snapshot_progress(&self) -> Option<(u32, u32)> {
                let f: fn(&Self) -> Option<(u32, u32)> = $snapshot_progress;
                f(self)
            }
            fn tick_rate(&self) -> Option<u32> {
                let f: fn(&Self) -> Option<u32> = $tick_rate;
                f(self)
            }
            fn joining(&self) -> bool {
                let f: fn(&Self) -> bool = $joining;
                f(self)
            }
            fn connected(&self) -> bool {
                let f: fn(&Self) -> bool = $connected;
                f(self)
            }
            fn closed(&self) -> bool {
                let f: fn(&Self) -> bool = $closed;
                f(self)
            }
            fn can_reconnect(&self) -> bool {
                let f: fn(&Self) -> bool = $can_reconnect;
                f(self)
            }
            fn frame(&self) -> Tick {
                Self::frame(self)
            }
            fn resyncing(&self) -> bool {
                let f: fn(&Self) -> bool = $resyncing;
                f(self)
            }
            fn paused(&self) -> bool {
                let f: fn(&Self) -> bool = $paused;
                f(self)
            }
            fn frames_behind(&self) -> u32 {
                let f: fn(&Self) -> u32 = $behind;
                f(self)
            }
            fn lobby(&self) -> Option<Lobby> {
                let f: fn(&Self) -> Option<Lobby> = $lobby;
                f(self)
            }
            fn delay(&self) -> u32 {
                let f: fn(&Self) -> u32 = $delay;
                f(self)
            }
            fn paced_together(&self) -> bool {
                let f: fn(&Self) -> bool = $together;
                f(self)
            }
            fn match_id(&self) -> Option<u64> {
                let f: fn(&Self) -> Option<u64> = $match_id;
                f(self)
            }
            fn names(&self) -> Vec<String> {
                let f: fn(&Self) -> Vec<String> = $names;
                f(self)
            }
            fn fingerprint(&self) -> u64 {
                let f: fn(&Self) -> u64 = $fingerprint;
                f(self)
            }
        }
    };
}

played!(
    ClientSession,
    |s| s.snapshot_progress(),
    |s| s.welcome().map(|w| w.tick_rate),
    |s| s.joining(),
    |s| s.connected(),
    |s| s.closed().is_some(),
    |s| s.can_reconnect(),
    |s| s.frames_behind(),
    |s| s.resyncing(),
    |s| s.paused(),
    |s| s.lobby(),
    |s| s.welcome().map_or(0, |w| w.delay),
    |s| s.paced_together(),
    |s| s.match_id(),
    |s| roster_names(s),
    |s| s.config().fingerprint
);
played!(
    HostSession,
    |s| s.client().snapshot_progress(),
    |s| s.client().welcome().map(|w| w.tick_rate),
    |s| s.client().joining(),
    |s| s.client().connected(),
    |s| s.client().closed().is_some(),
    |_| false,
    |s| s.client().frames_behind(),
    |s| s.client().resyncing(),
    |s| s.client().paused(),
    |s| s.client().lobby(),
    |s| s.client().welcome().map_or(0, |w| w.delay),
    |s| s.client().paced_together(),
    |s| s.client().match_id(),
    |s| roster_names(s.client()),
    |s| s.client().config().fingerprint
);
played!(
    HostedSession,
    |s| s.client().snapshot_progress(),
    |s| s.client().welcome().map(|w| w.tick_rate),
    |s| s.client().joining(),
    |s| s.client().connected(),
    |s| s.client().closed().is_some(),
    |s| s.client().can_reconnect(),
    |s| s.client().frames_behind(),
    |s| s.client().resyncing(),
    |s| s.client().paused(),
    |s| s.client().lobby(),
    |s| s.client().welcome().map_or(0, |w| w.delay),
    |s| s.client().paced_together(),
    |s| s.client().match_id(),
    |s| roster_names(s.client()),
    |s| s.client().config().fingerprint
);
played!(
    MeshSession,
    |s| s.snapshot_progress(),
    |s| Some(s.config().tick_rate),
    |s| s.snapshot_progress().is_some(),
    |_| true,
    // A mesh player is out once its own seat is empty: it left and the
    // others took its goodbye, or they voted it out.
    |s| s
        .seat()
        .is_some_and(|me| s.abandoned().iter().any(|(p, _)| *p == me)),
    |_| false,
    |s| u32::try_from(s.frames_ready()).unwrap_or(u32::MAX),
    |s| s.resyncing(),
    |s| s.paused(),
    |_| None,
    |s| s.delay(),
    |s| s.paced_together(),
    |_| None,
    |_| Vec::new(),
    |s| s.config().fingerprint
);
