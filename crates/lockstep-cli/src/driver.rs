//! The game loop every CLI player runs, once: the demo's bots (relay and
//! host mode) and `play`. Each turn it commits the input that is due,
//! runs the frames that are due (on a steady clock, or catching up), and
//! after each frame commits the input for the tick `delay` ahead, so the
//! delay is the latency the player plays with.

use lockstep_core::sequenced::{ClientSession, HostedSession};
use lockstep_core::{CatchUp, CommitError, Frame, Instant, Pacer, PacerConfig, PlayerInputs, Tick};

/// What the driver needs of a session: a relay's client, or a host-mode
/// player.
pub(crate) trait Played {
    /// See [`ClientSession::input_due`].
    fn input_due(&self) -> bool;
    /// See [`ClientSession::commit_local`].
    fn commit_local(&mut self, input: PlayerInputs) -> Result<Tick, CommitError>;
    /// See [`ClientSession::advance`].
    fn advance(&mut self) -> Option<Frame<PlayerInputs>>;
}

/// `Played` for a session type with the three methods of the same names.
macro_rules! played {
    ($session:ty) => {
        impl Played for $session {
            fn input_due(&self) -> bool {
                <$session>::input_due(self)
            }
            fn commit_local(&mut self, input: PlayerInputs) -> Result<Tick, CommitError> {
                <$session>::commit_local(self, input)
            }
            fn advance(&mut self) -> Option<Frame<PlayerInputs>> {
                <$session>::advance(self)
            }
        }
    };
}
played!(ClientSession<PlayerInputs>);
played!(HostedSession<PlayerInputs>);

/// Frames ready beyond the delay's worth past which a bot runs them
/// without its clock.
const CATCH_UP: usize = 8;
/// The most frames a bot runs in one turn when it catches up.
const MAX_PER_STEP: u32 = 64;

/// How a player catches up when it is far behind (joining, or after a
/// stall).
#[derive(Debug)]
enum CatchingUp {
    /// A bot: up to [`MAX_PER_STEP`] frames a turn.
    Frames,
    /// A player with a screen to draw: as many frames as fit a time budget
    /// per render frame.
    Budget(CatchUp),
}

/// The loop's clock and catching up (see the [module](self)).
#[derive(Debug)]
pub(crate) struct Driver {
    /// Runs ticks on a steady clock, one frame kept in hand (once the
    /// tick rate is known).
    pacer: Option<Pacer>,
    catching_up: CatchingUp,
}

/// A pacer for `tick_rate` that keeps one frame in hand: what
/// `ready_to_pace` counts towards.
fn pacer(tick_rate: u32) -> Option<Pacer> {
    Pacer::new(
        tick_rate,
        PacerConfig {
            target: 1,
            ..PacerConfig::default()
        },
    )
    .ok()
}

impl Driver {
    /// A bot's loop at `tick_rate`.
    pub(crate) fn bot(tick_rate: u32) -> Result<Self, String> {
        let pacer = pacer(tick_rate).ok_or_else(|| format!("no pacer for {tick_rate} Hz"))?;
        Ok(Self {
            pacer: Some(pacer),
            catching_up: CatchingUp::Frames,
        })
    }

    /// A player's loop, which learns the tick rate from its Welcome and
    /// catches up within a time budget per render frame.
    pub(crate) fn player() -> Self {
        Self {
            pacer: None,
            catching_up: CatchingUp::Budget(CatchUp::default()),
        }
    }

    /// How many frames to run now.
    fn due(&mut self, s: &ClientSession<PlayerInputs>, now: Instant) -> usize {
        if self.pacer.is_none() {
            self.pacer = s.welcome().and_then(|w| pacer(w.tick_rate));
        }
        let ready = s.stats().buffered_frames;
        let delay = s.welcome().map_or(0, |w| w.delay);
        match (&mut self.catching_up, self.pacer.as_mut()) {
            (CatchingUp::Frames, Some(p)) => {
                if s.joining() || ready > delay as usize + CATCH_UP {
                    MAX_PER_STEP as usize
                } else {
                    p.ticks_due(now, s.ready_to_pace()) as usize
                }
            }
            (CatchingUp::Frames, None) => MAX_PER_STEP as usize,
            (CatchingUp::Budget(c), Some(p)) => {
                let paced = p.ticks_due(now, s.ready_to_pace());
                let behind = ready as u32 >= delay + p.config().catch_up_beyond;
                if behind || s.joining() {
                    c.ticks(ready).max(1)
                } else {
                    paced as usize
                }
            }
            (CatchingUp::Budget(c), None) => c.ticks(ready).max(1),
        }
    }

    /// Begins one turn of the loop: how many of the frames ready to run
    /// now. The caller commits the input due (a commit refused when its
    /// frame ran, in a pause say, is made now: the next frame may wait on
    /// it), runs each frame [`Turn::next`] hands out, commits the input due
    /// after each, and ends the turn with [`finish`](Self::finish).
    pub(crate) fn turn(&mut self, s: &ClientSession<PlayerInputs>, now: Instant) -> Turn {
        Turn {
            due: self.due(s, now),
            ran: 0,
            started: std::time::Instant::now(),
        }
    }

    /// Ends a turn: a budgeted catch-up learns how long its frames took.
    pub(crate) fn finish(&mut self, turn: Turn) {
        if let CatchingUp::Budget(c) = &mut self.catching_up {
            c.ran(turn.ran, turn.started.elapsed());
        }
    }
}

/// One turn's frames (see [`Driver::turn`]).
#[derive(Debug)]
pub(crate) struct Turn {
    due: usize,
    ran: usize,
    started: std::time::Instant,
}

impl Turn {
    /// The next frame to run this turn, if one is due and has arrived.
    pub(crate) fn next<S: Played>(&mut self, s: &mut S) -> Option<Frame<PlayerInputs>> {
        if self.ran >= self.due {
            return None;
        }
        let frame = s.advance()?;
        self.ran += 1;
        Some(frame)
    }
}

/// Commits `input()` if an input is due: the tick `delay` ahead of the
/// next frame. Returns what the commit said, if one was made.
pub(crate) fn commit_due<S: Played>(
    s: &mut S,
    input: impl FnOnce() -> PlayerInputs,
) -> Option<Result<Tick, CommitError>> {
    s.input_due().then(|| s.commit_local(input()))
}
