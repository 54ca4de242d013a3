//! Playing a replay back: frame by frame, and to any tick, forwards or
//! backwards, from the nearest keyframe.

use super::check::{VerifyError, first_state, restore_bytes, skips};
use super::read::Frames;
use super::{Replay, State, StateKind};
use crate::{Frame, Game, Tick};

/// A replay played back through the game: [`step`](Self::step) runs the
/// next frame, [`seek`](Self::seek) goes to the state after any tick,
/// restoring the nearest keyframe at or before it and running at most the
/// frames from there. Keyframes come from the file (recorded with
/// [`keyframe_every`](super::RecordConfig::keyframe_every)), from a
/// sidecar index ([`Index`]), or from a first pass
/// ([`index`](Self::index)); without any, a seek backwards runs from the
/// match's start.
///
/// ```
/// use lockstep_core::replay::{Header, Playback, Recorder, Replay, Topology};
/// use lockstep_core::{Frame, Game, Tick};
/// #[derive(Default)] struct Sum(u64);
/// impl Game for Sum {
///     type Input = u8;
///     fn step(&mut self, f: &Frame<u8>) { self.0 += f.inputs.iter().flatten().map(|i| u64::from(*i)).sum::<u64>(); }
///     fn hash(&self) -> u64 { self.0 }
///     fn save(&self) -> Vec<u8> { self.0.to_le_bytes().to_vec() }
///     fn restore(b: &[u8]) -> Result<Self, String> { Ok(Sum(u64::from_le_bytes(b.try_into().map_err(|_| "8 bytes")?))) }
/// }
/// let mut rec = Recorder::<u8, _>::new(Header::new(1, "sum", 30, 1, Topology::Other), Vec::new())?;
/// for t in 0..1_000u32 {
///     rec.record(&Frame { tick: Tick::new(t), inputs: vec![Some(1)], events: vec![] })?;
/// }
/// let replay = Replay::<u8>::read(&rec.finish()?);
/// let mut playback = Playback::new(&replay, Sum::default())?;
/// playback.index(100)?;
/// playback.seek(Tick::new(899))?;
/// assert_eq!(playback.game().0, 900);
/// playback.seek(Tick::new(9))?; // backwards: from the start, 10 frames
/// assert_eq!(playback.game().0, 10);
/// assert_eq!(playback.step()?.map(|f| f.tick), Some(Tick::new(10)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
pub struct Playback<'r, G: Game> {
    replay: &'r Replay<G::Input>,
    game: G,
    /// The next frame to run, and the frames from it.
    next: usize,
    frames: Frames<'r, G::Input>,
    /// The tick the game's state follows.
    last: Option<Tick>,
    /// Where a run may start: the first state, then keyframes, by position.
    keyframes: Vec<Keyframe>,
    /// The next state of the replay's to look at.
    state: usize,
}

/// A state a playback can restore to start from.
#[derive(Clone)]
struct Keyframe {
    /// Frames before it.
    at: usize,
    /// The tick it follows.
    tick: Option<Tick>,
    hash: u64,
    bytes: Bytes,
}

/// Where a keyframe's state is.
#[derive(Clone)]
enum Bytes {
    /// Held: built by a first pass, read from an index, the start.
    Held(Vec<u8>),
    /// In the replay: its state record (decompressed when used).
    File(usize),
}

impl<G: Game> core::fmt::Debug for Playback<'_, G> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Playback")
            .field("next", &self.next)
            .field("last", &self.last)
            .field("keyframes", &self.keyframes.len())
            .finish_non_exhaustive()
    }
}

impl<'r, G: Game> Playback<'r, G> {
    /// Plays `replay` back from its start (`start` is the game at the
    /// match's first tick, as for [`verify`](super::verify)), with the
    /// keyframes the file holds. Their hashes are checked as they are
    /// used.
    pub fn new(replay: &'r Replay<G::Input>, start: G) -> Result<Self, VerifyError> {
        let (game, last) = first_state(replay, start)?;
        let first = Keyframe {
            at: 0,
            tick: last,
            hash: game.hash(),
            bytes: Bytes::Held(game.save()),
        };
        let mut keyframes = vec![first];
        for (k, s) in replay.states.iter().enumerate() {
            if matches!(s.kind, StateKind::Keyframe) && s.at > 0 {
                keyframes.push(Keyframe {
                    at: s.at,
                    tick: Some(s.tick),
                    hash: s.hash,
                    bytes: Bytes::File(k),
                });
            }
        }
        keyframes.sort_by_key(|k| k.at);
        keyframes.dedup_by_key(|k| k.at);
        Ok(Self {
            replay,
            game,
            next: 0,
            frames: replay.frames(),
            last,
            keyframes,
            state: 0,
        })
    }

    /// The game as it stands.
    pub fn game(&self) -> &G {
        &self.game
    }

    /// The tick the game's state follows (`None` before the first frame of
    /// a match recorded from its start).
    pub fn tick(&self) -> Option<Tick> {
        self.last
    }

    /// The replay played.
    pub fn replay(&self) -> &'r Replay<G::Input> {
        self.replay
    }

    /// Whether every frame has run.
    pub fn at_end(&self) -> bool {
        self.next >= self.replay.frame_count()
    }

    /// Keyframes a seek may start from (the replay's start included).
    pub fn keyframes(&self) -> usize {
        self.keyframes.len()
    }

    /// Runs the next frame (restoring first a state the recording machine
    /// took instead of running frames: a reconnect), and returns it;
    /// `None` at the end.
    pub fn step(&mut self) -> Result<Option<Frame<G::Input>>, VerifyError> {
        let states = &self.replay.states;
        while let Some(s) = states.get(self.state).filter(|s| s.at <= self.next) {
            self.state += 1;
            if s.at == self.next
                && matches!(s.kind, StateKind::Resync | StateKind::Rejoin)
                && skips(s, self.last)
            {
                self.game = restore_bytes::<G>(s, &self.replay.state_bytes(s))?;
                self.last = Some(s.tick);
            }
        }
        let Some(frame) = self.frames.next() else {
            return Ok(None);
        };
        self.game.step(&frame);
        self.next += 1;
        self.last = Some(frame.tick);
        Ok(Some(frame))
    }

    /// Goes to the game's state right after `tick` (the replay's last
    /// frame at most; before its first, the first state): from where it
    /// stands if that is on the way, else from the nearest keyframe at or
    /// before it. Returns the frames run.
    pub fn seek(&mut self, tick: Tick) -> Result<usize, VerifyError> {
        let target = self.replay.frames_through(tick);
        // The nearest keyframe before the target, and not past the tick (a
        // keyframe after a gap stands at the gap's frame position).
        let key = self
            .keyframes
            .iter()
            .rposition(|k| k.at <= target && k.tick.is_none_or(|t| t <= tick))
            .unwrap_or(0);
        let from = self.keyframes[key].at;
        let on_the_way =
            self.next <= target && self.next >= from && self.last.is_none_or(|l| l <= tick);
        if !on_the_way {
            self.restore(key)?;
        }
        let mut ran = 0;
        while self.next < target {
            self.step()?;
            ran += 1;
        }
        Ok(ran)
    }

    /// Restores keyframe `key` and goes on from it.
    fn restore(&mut self, key: usize) -> Result<(), VerifyError> {
        let k = &self.keyframes[key];
        let state = State {
            kind: StateKind::Keyframe,
            tick: k.tick.unwrap_or(Tick::ZERO),
            hash: k.hash,
            at: k.at,
            stored: (0, 0, 0),
        };
        let bytes = match &k.bytes {
            Bytes::Held(b) => b.clone(),
            Bytes::File(i) => self.replay.state_bytes(&self.replay.states[*i]),
        };
        self.game = restore_bytes::<G>(&state, &bytes)?;
        self.next = k.at;
        self.last = k.tick;
        self.frames = self.replay.frames_from(k.at);
        self.state = self.replay.states.partition_point(|s| s.at < k.at);
        Ok(())
    }

    /// Runs the whole replay once from its start, keeping a keyframe every
    /// `every` ticks (at least 1) beside those it has, so that a seek runs
    /// fewer than `every` frames; ends back at the start. Memory: one state
    /// per keyframe. The first state hash the file recorded is compared on
    /// the way: a game that does not run this replay as recorded (another
    /// game, build or start) is refused with
    /// [`VerifyError::NotThisGame`], instead of keyframes of something else.
    pub fn index(&mut self, every: u32) -> Result<(), VerifyError> {
        let every = every.max(1);
        self.restore(0)?;
        let mut built = Vec::new();
        let first = self
            .replay
            .checkpoints
            .iter()
            .min_by_key(|c| c.tick)
            .copied();
        while let Some(f) = self.step()? {
            if let Some(c) = first.filter(|c| c.tick == f.tick) {
                let ran = self.game.hash();
                if ran != c.value {
                    return Err(VerifyError::NotThisGame {
                        tick: c.tick,
                        recorded: c.value,
                        ran,
                    });
                }
            }
            if f.tick.get() % every == every - 1 {
                built.push(Keyframe {
                    at: self.next,
                    tick: self.last,
                    hash: self.game.hash(),
                    bytes: Bytes::Held(self.game.save()),
                });
            }
        }
        self.merge(built);
        self.restore(0)
    }

    /// Adds keyframes, keeping one per position (the one there first).
    fn merge(&mut self, more: Vec<Keyframe>) {
        self.keyframes.extend(more);
        self.keyframes.sort_by_key(|k| k.at);
        self.keyframes.dedup_by_key(|k| k.at);
    }

    /// The keyframes built or read beyond the file's (for [`Index`]):
    /// each the tick it follows, its hash and its state.
    ///
    /// [`Index`]: super::Index
    pub fn built_keyframes(&self) -> impl Iterator<Item = (Tick, u64, &[u8])> {
        self.keyframes
            .iter()
            .skip(1)
            .filter_map(|k| match &k.bytes {
                Bytes::Held(b) => Some((k.tick?, k.hash, b.as_slice())),
                Bytes::File(_) => None,
            })
    }

    /// Adds keyframes (from an [`Index`](super::Index)): each must stand
    /// right after a frame of the replay.
    pub fn add_keyframes<'a>(
        &mut self,
        keys: impl IntoIterator<Item = (Tick, u64, &'a [u8])>,
    ) -> Result<(), VerifyError> {
        let mut more = Vec::new();
        for (tick, hash, bytes) in keys {
            let at = self.replay.frames_through(tick);
            if at == 0 || self.replay.tick_of(at - 1) != Some(tick) {
                return Err(VerifyError::BadState {
                    kind: StateKind::Keyframe,
                    tick,
                    reason: "stands after no frame of this replay".into(),
                });
            }
            if more.len() > self.replay.frame_count() {
                break;
            }
            more.push(Keyframe {
                at,
                tick: Some(tick),
                hash,
                bytes: Bytes::Held(bytes.to_vec()),
            });
        }
        self.merge(more);
        Ok(())
    }
}
