//! Running a replay's frames through the game again, and comparing what it
//! computes with what the recording machine computed.

use super::{Replay, ReplayCheckpoint, State, StateKind};
use crate::desync::{FieldDiff, Fields};
use crate::{Game, Tick};

/// What running a replay's frames through the game found (see [`verify`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Verification {
    /// Frames run.
    pub frames: usize,
    /// Checkpoints compared (those of ticks this run ran).
    pub checkpoints: usize,
    /// States compared or restored (keyframes, resyncs, rejoins).
    pub states: usize,
    /// Where the recording machine's state parted from this run's, in
    /// order: none when the match ran here exactly as it ran there.
    pub parted: Vec<Parted>,
    /// States the run took without checking them: each stands after frames
    /// the file does not hold (the recording machine was sent it after a
    /// reconnect, or a resync), so nothing here says it is the match's
    /// state. The run goes on from it; a state from a dishonest donor would
    /// go unnoticed.
    pub unchecked: Vec<(StateKind, Tick)>,
    /// Whether the file is whole: its end record read, and nothing in it
    /// stopped the reading. A file cut short (its process killed, or a
    /// recording still being written) verifies as far as it goes.
    pub whole: bool,
    /// Why reading stopped at a record that did not read (a corrupt file,
    /// or another game's inputs; not one the file ends inside): nothing
    /// after it was checked, and the replay does not [match](Self::matches).
    pub unread: Option<String>,
}

impl Verification {
    /// Whether the replay verifies: every checkpoint matched, save where
    /// the recording machine's state had parted from the match's and a
    /// resync replaced it (the match itself ran on as recorded; that
    /// machine's divergence is still listed in [`parted`](Self::parted)).
    /// States taken across a gap are trusted: see
    /// [`unchecked`](Self::unchecked). A record that did not read is no
    /// match ([`unread`](Self::unread)); a file that merely ends early
    /// verifies as far as it goes: see [`whole`](Self::whole), and
    /// [`checkpoints`](Self::checkpoints) (none compared, nothing was
    /// checked).
    pub fn matches(&self) -> bool {
        self.unread.is_none() && self.parted.iter().all(|p| p.resynced.is_some())
    }
}

/// A stretch where the recording machine's state was not the one this run
/// computes from the same frames.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Parted {
    /// The first tick whose recorded hash differs.
    pub first: Tick,
    /// Whether `first` is exact: the hash of the tick before it was
    /// recorded and matched (a recorder writes every tick's hash around a
    /// divergence the match found live; elsewhere one tick in 30).
    pub exact: bool,
    /// The last tick before `first` whose recorded hash matched.
    pub last_agreed: Option<Tick>,
    /// The hash recorded for `first`.
    pub recorded: u64,
    /// The hash this run computes for it.
    pub ran: u64,
    /// The tick after which a resync replaced the recording machine's
    /// state, ending the stretch.
    pub resynced: Option<Tick>,
    /// The tick whose recorded hash matched again without a resync.
    pub agreed_again: Option<Tick>,
    /// Where the game shows its fields ([`Game::fields`]) and the file
    /// holds the state a resync replaced: the fields that differed then,
    /// this run's value as `expected`, the recording machine's as `found`.
    pub fields: Vec<FieldDiff>,
}

/// A state a replay holds that is not what it claims (see [`verify`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The game given does not run the replay as it was recorded: the
    /// first recorded hash, after `tick`, is not the one it computes (a
    /// replay of another game or build, or another starting state).
    #[error(
        "this game does not run the replay as recorded: after tick {tick} it computes {ran:016x}, the file says {recorded:016x} (another game, build or start?)"
    )]
    NotThisGame {
        /// The first tick a hash was recorded after.
        tick: Tick,
        /// The recorded hash.
        recorded: u64,
        /// The hash the game computes.
        ran: u64,
    },
    /// The replay's header did not read: there is nothing to verify (see
    /// the replay's `stopped`).
    #[error("the replay's header did not read")]
    NoHeader,
    /// A state does not restore, or restores to another hash than the one
    /// recorded with it (a keyframe that would seek to the wrong state).
    #[error("the {kind:?} state after tick {tick} {reason}")]
    BadState {
        /// The state's kind.
        kind: StateKind,
        /// Its tick.
        tick: Tick,
        /// What is wrong.
        reason: String,
    },
}

impl VerifyError {
    fn bad(s: &State, reason: impl Into<String>) -> Self {
        Self::BadState {
            kind: s.kind,
            tick: s.tick,
            reason: reason.into(),
        }
    }
}

/// Restores a state a replay holds, checking it gives the hash recorded
/// with it.
pub(super) fn restore<G: Game>(replay: &Replay<G::Input>, s: &State) -> Result<G, VerifyError> {
    restore_bytes::<G>(s, &replay.state_bytes(s))
}

/// Restores `bytes`, the state `s` names, checking its hash.
pub(super) fn restore_bytes<G: Game>(s: &State, bytes: &[u8]) -> Result<G, VerifyError> {
    let game =
        G::restore(bytes).map_err(|e| VerifyError::bad(s, format!("does not restore: {e}")))?;
    let hash = game.hash();
    if hash != s.hash {
        return Err(VerifyError::bad(
            s,
            format!(
                "restores to hash {hash:016x}, not the {:016x} recorded",
                s.hash
            ),
        ));
    }
    Ok(game)
}

/// The game a replay's first frame runs on: its header's snapshot when the
/// recording starts mid-match, else `start`; and the tick that state
/// follows.
pub(super) fn first_state<G: Game>(
    replay: &Replay<G::Input>,
    start: G,
) -> Result<(G, Option<Tick>), VerifyError> {
    let header = replay.header.as_ref();
    match header.and_then(|h| h.snapshot.as_ref()) {
        Some((tick, bytes)) => {
            G::restore(bytes)
                .map(|g| (g, Some(*tick)))
                .map_err(|e| VerifyError::BadState {
                    kind: StateKind::Rejoin,
                    tick: *tick,
                    reason: format!("(the header's) does not restore: {e}"),
                })
        }
        None => {
            let first = header.map_or(Tick::ZERO, |h| h.first_tick);
            Ok((start, first.get().checked_sub(1).map(Tick::new)))
        }
    }
}

/// Whether a state stands after frames it was not run from: the machine
/// took it instead of running up to it, so a run must restore it.
pub(super) fn skips(s: &State, last: Option<Tick>) -> bool {
    last.is_none_or(|l| s.tick > l)
}

/// Runs a replay's frames through the game (`start` is the game at the
/// match's first tick; a recording that starts mid-match restores its
/// header's snapshot instead, and a state the recording machine took
/// instead of running frames is restored where it stands) and compares
/// the state hash with every checkpoint and state recorded: the stretches
/// where the recording machine's state differs from this run's are
/// [`Parted`], named to the tick (exactly where the match found the
/// divergence live) and, where the game shows its fields and the file
/// holds the state a resync replaced, to the field. A state that does not
/// restore to its recorded hash is an error. Only what read is run: the
/// caller checks [`Replay::is_whole`] (a file cut off verifies up to its
/// cut) and the header's fingerprint first (another build's replay would
/// differ, and say little).
///
/// ```
/// use lockstep_core::replay::{verify, Header, Recorder, Replay, Topology};
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
/// let mut game = Sum::default();
/// for t in 0..90u32 {
///     let f = Frame { tick: Tick::new(t), inputs: vec![Some(3)], events: vec![] };
///     game.step(&f);
///     rec.record(&f)?;
///     rec.state_hash(f.tick, game.hash());
/// }
/// let file = rec.finish()?;
/// let replay = Replay::<u8>::read(&file);
/// let found = verify(&replay, Sum::default())?;
/// assert!(found.matches());
/// assert_eq!((found.frames, found.checkpoints), (90, 3));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn verify<G: Game>(replay: &Replay<G::Input>, start: G) -> Result<Verification, VerifyError> {
    if replay.header.is_none() {
        return Err(VerifyError::NoHeader);
    }
    let (mut game, mut last) = first_state(replay, start)?;
    let mut checks: Vec<ReplayCheckpoint> = replay.checkpoints.clone();
    checks.sort_by_key(|c| c.tick);
    checks.dedup();
    let mut run = Run {
        found: Verification {
            frames: 0,
            checkpoints: 0,
            states: 0,
            parted: Vec::new(),
            unchecked: Vec::new(),
            whole: replay.end.is_some() && replay.stopped.is_none(),
            // A file cut off mid-record is only short.
            unread: replay
                .stopped
                .as_ref()
                .filter(|e| !matches!(e, super::ReplayError::Truncated { .. }))
                .map(ToString::to_string),
        },
        open: None,
        last_agreed: None,
    };
    let (mut ci, mut si) = (0, 0);
    let states = &replay.states;
    let mut frames = replay.frames();
    for i in 0..=replay.frame_count() {
        while let Some(s) = states.get(si).filter(|s| s.at == i) {
            si += 1;
            run.found.states += 1;
            let gap = skips(s, last);
            match s.kind {
                StateKind::Keyframe => {
                    restore::<G>(replay, s)?;
                    if !gap {
                        run.compare(s.tick, s.hash, game.hash());
                    }
                }
                StateKind::Replaced => {
                    // The recording machine's own state: what parted.
                    if !gap && let Ok(theirs) = G::restore(&replay.state_bytes(s)) {
                        run.compare(s.tick, s.hash, game.hash());
                        if let Some(p) = run.open.as_mut().filter(|p| p.fields.is_empty()) {
                            let (mut ours, mut found) = (Fields::new(), Fields::new());
                            game.fields(&mut ours);
                            theirs.fields(&mut found);
                            p.fields = ours.diff(&found);
                        }
                    }
                }
                StateKind::Resync | StateKind::Rejoin => {
                    if let Some(mut p) = run.open.take() {
                        p.resynced = Some(s.tick);
                        run.found.parted.push(p);
                    }
                    if gap {
                        game = restore::<G>(replay, s)?;
                        last = Some(s.tick);
                        run.found.unchecked.push((s.kind, s.tick));
                    } else {
                        // The state received should be the match's.
                        run.compare(s.tick, s.hash, game.hash());
                    }
                }
            }
        }
        let Some(frame) = frames.next() else {
            break;
        };
        let frame = &frame;
        game.step(frame);
        last = Some(frame.tick);
        run.found.frames += 1;
        let mut hash = None;
        while let Some(c) = checks.get(ci).filter(|c| c.tick <= frame.tick) {
            ci += 1;
            if c.tick == frame.tick {
                let ran = *hash.get_or_insert_with(|| game.hash());
                run.found.checkpoints += 1;
                run.compare(c.tick, c.value, ran);
            }
        }
    }
    if let Some(p) = run.open.take() {
        run.found.parted.push(p);
    }
    Ok(run.found)
}

struct Run {
    found: Verification,
    open: Option<Parted>,
    last_agreed: Option<Tick>,
}

impl Run {
    fn compare(&mut self, tick: Tick, recorded: u64, ran: u64) {
        if recorded == ran {
            if let Some(mut p) = self.open.take() {
                p.agreed_again = Some(tick);
                self.found.parted.push(p);
            }
            self.last_agreed = Some(tick);
        } else if self.open.is_none() {
            self.open = Some(Parted {
                first: tick,
                exact: self
                    .last_agreed
                    .is_some_and(|a| a.saturating_add(1) == tick),
                last_agreed: self.last_agreed,
                recorded,
                ran,
                resynced: None,
                agreed_again: None,
                fields: Vec::new(),
            });
        }
    }
}
