//! The confirmed frame stream: what every machine runs, identically.

use crate::input::Input;
use crate::{PlayerId, Tick};
use xxhash_rust::xxh3::Xxh3;

/// Something that changes who plays, carried in the frame stream so that it
/// takes effect at the same tick on every machine.
///
/// Membership is game state: a ship spawns when its seat joins and leaves
/// when it is abandoned, at exactly the same tick everywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum SystemEvent {
    /// A player took this seat; its inputs appear from this frame on.
    Joined {
        /// The seat.
        player: PlayerId,
    },
    /// The player left on purpose: from this frame on the seat's entry is
    /// `None` on every machine.
    Left {
        /// The seat.
        player: PlayerId,
    },
    /// The player stopped sending and was given up on: from this frame on
    /// the seat's entry is `None` on every machine. What takes over the
    /// seat (an AI, nothing) is the game's decision.
    Abandoned {
        /// The seat.
        player: PlayerId,
    },
    /// A player that joined a running game from a snapshot has caught up:
    /// its inputs count from this frame plus the input delay. Until then
    /// the seat ran on neutral input and held nobody up.
    CaughtUp {
        /// The seat.
        player: PlayerId,
    },
    /// Host mode: the host left, and the player on this seat sequences the
    /// match from this frame on. Nothing about the game changes (the
    /// departed host's seat empties by its own `Left` or `Abandoned` in
    /// the same frame); a game may show who hosts now.
    HostChanged {
        /// The new host's seat.
        player: PlayerId,
    },
    /// The input delay changed: from this frame on, input committed while
    /// a frame runs is stamped `delay` ticks after it. Nothing about the
    /// game changes (every tick still has one input per seat, none is run
    /// twice or skipped); a game may show the delay, and a replay keeps it.
    /// See [`AdaptiveDelay`](crate::AdaptiveDelay).
    DelayChanged {
        /// The input delay from this frame on, in ticks.
        delay: u32,
    },
}

impl SystemEvent {
    /// The seat the event is about, if it is about one.
    pub const fn player(&self) -> Option<PlayerId> {
        match *self {
            Self::Joined { player }
            | Self::Left { player }
            | Self::Abandoned { player }
            | Self::CaughtUp { player }
            | Self::HostChanged { player } => Some(player),
            Self::DelayChanged { .. } => None,
        }
    }
}

/// One confirmed tick: every seat's input and the system events that take
/// effect at it.
///
/// `inputs[p.index()]` is seat `p`'s input, or `None` when the seat has no
/// player at this tick (never taken, or abandoned). Two machines that
/// confirmed the same tick hold equal frames.
///
/// ```
/// use lockstep_core::{Frame, PlayerId, Tick};
/// let frame = Frame { tick: Tick::new(7), inputs: vec![Some(3u8), None], events: vec![] };
/// assert_eq!(frame.input(PlayerId(0)), Some(&3));
/// assert_eq!(frame.input(PlayerId(1)), None);
/// assert_eq!(frame.input(PlayerId(9)), None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame<I> {
    /// The tick this frame is for.
    pub tick: Tick,
    /// One entry per seat, in seat order.
    pub inputs: Vec<Option<I>>,
    /// Membership and other system changes taking effect at this tick, in
    /// the order they apply.
    pub events: Vec<SystemEvent>,
}

impl<I> Frame<I> {
    /// The input of `player`, if the seat is occupied at this tick.
    pub fn input(&self, player: PlayerId) -> Option<&I> {
        self.inputs.get(player.index()).and_then(Option::as_ref)
    }

    /// Occupied seats and their inputs, in seat order.
    pub fn players(&self) -> impl Iterator<Item = (PlayerId, &I)> + '_ {
        self.inputs
            .iter()
            .enumerate()
            .filter_map(|(i, v)| Some((PlayerId(u16::try_from(i).ok()?), v.as_ref()?)))
    }
}

/// A running hash of a confirmed frame stream.
///
/// Two machines whose streams hash equal ran the same ticks with the same
/// inputs. The hash is xxh3-64 over each frame's canonical encoding (see
/// [`wire::encode_frame`](crate::wire::encode_frame)), stable across runs,
/// builds and platforms.
///
/// ```
/// use lockstep_core::{Frame, StreamHash, Tick};
/// let mut a = StreamHash::new();
/// let mut b = StreamHash::new();
/// let f = Frame { tick: Tick::ZERO, inputs: vec![Some(1u32)], events: vec![] };
/// a.push(&f);
/// b.push(&f);
/// assert_eq!(a.value(), b.value());
/// assert_eq!(a.frames(), 1);
/// ```
#[derive(Clone)]
pub struct StreamHash {
    hasher: Xxh3,
    frames: u64,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for StreamHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamHash")
            .field("frames", &self.frames)
            .field("value", &format_args!("{:016x}", self.value()))
            .finish()
    }
}

impl Default for StreamHash {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamHash {
    /// The hash of the empty stream.
    pub fn new() -> Self {
        Self {
            hasher: Xxh3::new(),
            frames: 0,
            scratch: Vec::new(),
        }
    }

    /// Folds the next frame in.
    pub fn push<I: Input>(&mut self, frame: &Frame<I>) {
        self.scratch.clear();
        crate::wire::encode_frame(frame, &mut self.scratch);
        self.hasher.update(&self.scratch);
        self.frames += 1;
    }

    /// The hash of every frame pushed so far.
    pub fn value(&self) -> u64 {
        self.hasher.digest()
    }

    /// How many frames were pushed.
    pub fn frames(&self) -> u64 {
        self.frames
    }
}
