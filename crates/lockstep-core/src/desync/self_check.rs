//! [`SelfCheck`]: a game's own determinism, checked by running every
//! frame twice and through a snapshot, with the field that differs named.

use super::*;
use crate::Game;

/// Frames a [`Run`] keeps, the last run, for a report.
pub(super) const RECENT: usize = 8;

/// A game state shown field by field: (path, value) pairs, in the game's
/// order. Paths are the game's own (`ships[2].pos.x`); values are compared
/// as text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fields {
    pairs: Vec<(String, String)>,
}

impl Fields {
    /// No fields.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a field.
    pub fn push(&mut self, path: impl Into<String>, value: impl fmt::Display) {
        self.pairs.push((path.into(), value.to_string()));
    }

    /// Every (path, value) pair, in order.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// The fields of `other` that differ from these: each path with a
    /// different value, or held by one side only, in this side's order
    /// (then `other`'s for paths only it has). A path repeated on one side
    /// counts by its last value.
    ///
    /// ```
    /// use lockstep_core::desync::Fields;
    /// let mut a = Fields::new();
    /// a.push("x", 1);
    /// a.push("y", 2);
    /// let mut b = Fields::new();
    /// b.push("x", 1);
    /// b.push("y", 3);
    /// b.push("z", 0);
    /// let d = a.diff(&b);
    /// assert_eq!(d.len(), 2);
    /// assert_eq!((d[0].path.as_str(), d[0].expected.as_deref(), d[0].found.as_deref()), ("y", Some("2"), Some("3")));
    /// assert_eq!((d[1].path.as_str(), d[1].expected.as_deref()), ("z", None));
    /// ```
    pub fn diff(&self, other: &Self) -> Vec<FieldDiff> {
        let index = |f: &Self| -> HashMap<String, String> { f.pairs.iter().cloned().collect() };
        let (mine, theirs) = (index(self), index(other));
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for (path, _) in &self.pairs {
            if !seen.insert(path.clone()) {
                continue;
            }
            let (a, b) = (mine.get(path), theirs.get(path));
            if a != b {
                out.push(FieldDiff {
                    path: path.clone(),
                    expected: a.cloned(),
                    found: b.cloned(),
                });
            }
        }
        for (path, value) in &other.pairs {
            if !mine.contains_key(path) && seen.insert(path.clone()) {
                out.push(FieldDiff {
                    path: path.clone(),
                    expected: None,
                    found: theirs.get(path).cloned().or_else(|| Some(value.clone())),
                });
            }
        }
        out
    }
}

/// One field that differs between two states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldDiff {
    /// The field's path.
    pub path: String,
    /// Its value in the reference state, if it has the field.
    pub expected: Option<String>,
    /// Its value in the other state, if it has the field.
    pub found: Option<String>,
}

impl fmt::Display for FieldDiff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let side = |v: &Option<String>| v.clone().unwrap_or_else(|| "(absent)".into());
        write!(
            f,
            "{}: {} != {}",
            self.path,
            side(&self.expected),
            side(&self.found)
        )
    }
}

/// What was happening when two runs of a game parted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cause {
    /// Two fresh games differ before any frame: construction is not
    /// deterministic.
    Construction,
    /// Both ran the same frame and came out different: the step is not
    /// deterministic (iteration order, uninitialised or global state, the
    /// clock...).
    Step,
    /// A snapshot, restored, is not the state it was taken from: the
    /// snapshot forgets something, or the restore computes it differently.
    RoundTrip,
    /// A snapshot of the game could not be restored at all.
    Restore(String),
    /// In a match: this machine's state differs from the majority's from
    /// this tick on.
    Match,
    /// The game's state could not be saved at all (the game says why).
    Unsavable(String),
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Construction => f.write_str("two new games differ"),
            Self::Step => f.write_str("the same frame gave two states"),
            Self::RoundTrip => {
                f.write_str("a snapshot restored is not the state it was taken from")
            }
            Self::Restore(why) => write!(f, "a snapshot could not be restored: {why}"),
            Self::Match => f.write_str("this machine's state differs from the majority's"),
            Self::Unsavable(why) => write!(f, "the state cannot be saved: {why}"),
        }
    }
}

/// Where two runs of a game parted: the first tick, why, both hashes, and
/// the fields that differ (empty if the game shows none).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not deterministic at tick {tick}: {cause} (hash {expected:016x}, then {found:016x}){}", FieldList(.fields))]
pub struct Divergence {
    /// The tick after which the states differ (or whose snapshot did not
    /// restore).
    pub tick: Tick,
    /// What was happening.
    pub cause: Cause,
    /// The reference run's hash.
    pub expected: u64,
    /// The other run's hash.
    pub found: u64,
    /// The fields that differ, the reference run's value first.
    pub fields: Vec<FieldDiff>,
}

/// Formats a divergence's fields after its headline.
pub(super) struct FieldList<'a>(&'a [FieldDiff]);

impl fmt::Display for FieldList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in self.0 {
            write!(f, "; {d}")?;
        }
        Ok(())
    }
}

/// What a [`SelfCheck`] that found nothing went through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Passed {
    /// Frames run by each copy.
    pub ticks: u64,
    /// Snapshot round trips made.
    pub round_trips: u64,
}

/// Runs a game twice on the same frames, one copy round-tripped through its
/// snapshot every `every` ticks, and reports the first tick at which they
/// differ (see the [module](crate::desync) documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelfCheck {
    every: u32,
}

impl SelfCheck {
    /// A check with a snapshot round trip every `ticks` ticks (at least 1).
    pub fn every(ticks: u32) -> Self {
        Self {
            every: ticks.max(1),
        }
    }

    /// Runs `frames` through two games made by `new_game`.
    pub fn run<G: Game>(
        &self,
        new_game: impl FnMut() -> G,
        frames: impl IntoIterator<Item = Frame<G::Input>>,
    ) -> Result<Passed, Divergence> {
        let mut run = self.start(new_game)?;
        for frame in frames {
            run.step(&frame)?;
        }
        Ok(run.passed())
    }

    /// Starts a check to feed frame by frame, for frames that depend on the
    /// game (bots that read it): [`Run::game`] is the reference copy.
    pub fn start<G: Game>(&self, mut new_game: impl FnMut() -> G) -> Result<Run<G>, Divergence> {
        let (reference, other) = (new_game(), new_game());
        let run = Run {
            every: self.every,
            reference,
            other,
            recent: VecDeque::with_capacity(RECENT),
            passed: Passed {
                ticks: 0,
                round_trips: 0,
            },
        };
        run.compare(Tick::ZERO, Cause::Construction)?;
        Ok(run)
    }
}

/// A [`SelfCheck`] under way.
#[derive(Debug)]
pub struct Run<G: Game> {
    every: u32,
    reference: G,
    other: G,
    /// The last frames run, oldest first.
    recent: VecDeque<Frame<G::Input>>,
    passed: Passed,
}

impl<G: Game> Run<G> {
    /// The reference copy of the game (the one never restored).
    pub fn game(&self) -> &G {
        &self.reference
    }

    /// What the check went through so far.
    pub fn passed(&self) -> Passed {
        self.passed
    }

    /// The last frames run (up to 8), oldest first: the ones a
    /// [`Report`] shows.
    pub fn recent(&self) -> impl Iterator<Item = &Frame<G::Input>> {
        self.recent.iter()
    }

    /// Runs one frame on both copies, compares them, and round-trips the
    /// other copy's snapshot when one is due.
    pub fn step(&mut self, frame: &Frame<G::Input>) -> Result<(), Divergence> {
        if self.recent.len() == RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(frame.clone());
        self.reference.step(frame);
        self.other.step(frame);
        self.passed.ticks += 1;
        self.compare(frame.tick, Cause::Step)?;
        if self.passed.ticks.is_multiple_of(u64::from(self.every)) {
            let saved = self.other.save();
            self.other.replace(&saved).map_err(|why| Divergence {
                tick: frame.tick,
                cause: Cause::Restore(why),
                expected: self.reference.hash(),
                found: self.other.hash(),
                fields: Vec::new(),
            })?;
            self.passed.round_trips += 1;
            self.compare(frame.tick, Cause::RoundTrip)?;
        }
        Ok(())
    }

    /// Compares the copies' hashes and, on a difference or a round trip,
    /// their fields too (fields also catch a hash that leaves one out).
    fn compare(&self, tick: Tick, cause: Cause) -> Result<(), Divergence> {
        let (expected, found) = (self.reference.hash(), self.other.hash());
        if expected == found && !matches!(cause, Cause::RoundTrip | Cause::Construction) {
            return Ok(());
        }
        let (mut a, mut b) = (Fields::new(), Fields::new());
        self.reference.fields(&mut a);
        self.other.fields(&mut b);
        let fields = a.diff(&b);
        if expected == found && fields.is_empty() {
            return Ok(());
        }
        Err(Divergence {
            tick,
            cause,
            expected,
            found,
            fields,
        })
    }
}
