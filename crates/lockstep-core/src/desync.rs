//! Finding where a game stops being deterministic, down to the tick and the
//! field.
//!
//! A lockstep game must compute the same state from the same frames on
//! every machine, and restore a snapshot to exactly the state it was taken
//! from. [`SelfCheck`] tests both in one process, before any network is
//! involved: it runs two copies of the game on the same frames, round-trips
//! one of them through its snapshot every few ticks, compares their hashes
//! after every tick and, at the first difference, names the tick, what was
//! happening (a step, a round trip) and, if the game shows its fields
//! ([`Checked::fields`]), which ones differ. It catches iteration over a
//! `HashMap` (each copy has its own random order), state a snapshot forgets,
//! a value a restore computes differently (a float rebuilt from a rounded
//! copy), and anything else that makes two runs part.
//!
//! ```
//! use lockstep_core::desync::{Checked, Fields, SelfCheck};
//! use lockstep_core::{Frame, Tick};
//!
//! /// A counter that forgets its `bonus` in snapshots.
//! #[derive(Default)]
//! struct Counter { total: u64, bonus: u64 }
//!
//! impl Checked for Counter {
//!     type Input = u8;
//!     fn step(&mut self, frame: &Frame<u8>) {
//!         self.bonus += 1;
//!         self.total += frame.inputs.iter().flatten().map(|&i| u64::from(i)).sum::<u64>() + self.bonus;
//!     }
//!     fn hash(&self) -> u64 { self.total ^ (self.bonus << 32) }
//!     fn save(&self) -> Vec<u8> { self.total.to_le_bytes().to_vec() }
//!     fn restore(bytes: &[u8]) -> Result<Self, String> {
//!         let total = u64::from_le_bytes(bytes.try_into().map_err(|_| "8 bytes")?);
//!         Ok(Counter { total, bonus: 0 })
//!     }
//!     fn fields(&self, out: &mut Fields) {
//!         out.push("total", self.total);
//!         out.push("bonus", self.bonus);
//!     }
//! }
//!
//! let frames = (0..100).map(|t| Frame { tick: Tick::new(t), inputs: vec![Some(1u8)], events: vec![] });
//! let found = SelfCheck::every(10).run(Counter::default, frames).unwrap_err();
//! assert_eq!(found.tick, Tick::new(9));
//! assert_eq!(found.fields[0].path, "bonus");
//! ```

use crate::{Frame, Input, Tick};
use core::fmt;
use std::collections::{HashMap, VecDeque};

/// Frames a [`Run`] keeps, the last run, for a report.
const RECENT: usize = 8;

/// A game as [`SelfCheck`] runs it.
pub trait Checked: Sized {
    /// The input a frame carries.
    type Input: Input;
    /// Runs one frame.
    fn step(&mut self, frame: &Frame<Self::Input>);
    /// A hash of the whole state: equal states, equal hashes.
    fn hash(&self) -> u64;
    /// The state as a snapshot.
    fn save(&self) -> Vec<u8>;
    /// The state a snapshot holds, or why it is not one.
    fn restore(bytes: &[u8]) -> Result<Self, String>;
    /// The state's fields as (path, value) pairs, in a stable order, to
    /// name what differs. The default shows none: a divergence is then
    /// found by tick alone.
    fn fields(&self, out: &mut Fields) {
        let _ = out;
    }
}

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
struct FieldList<'a>(&'a [FieldDiff]);

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
/// differ (see the [module](self) documentation).
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
    pub fn run<G: Checked>(
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
    pub fn start<G: Checked>(&self, mut new_game: impl FnMut() -> G) -> Result<Run<G>, Divergence> {
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
pub struct Run<G: Checked> {
    every: u32,
    reference: G,
    other: G,
    /// The last frames run, oldest first.
    recent: VecDeque<Frame<G::Input>>,
    passed: Passed,
}

impl<G: Checked> Run<G> {
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
            let restored = G::restore(&self.other.save()).map_err(|why| Divergence {
                tick: frame.tick,
                cause: Cause::Restore(why),
                expected: self.reference.hash(),
                found: self.other.hash(),
                fields: Vec::new(),
            })?;
            self.other = restored;
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

/// The version of the [`Report`] layout; a reader refuses one it does not
/// know.
pub const REPORT_VERSION: u32 = 2;
/// A report's hashes when the first divergent tick was not found.
const UNKNOWN: &str = "unknown";

/// A desync explained, to keep and to read later: where two states parted,
/// why, both hashes, the fields that differ and the frames that led there.
/// With the `serde` feature it serializes; as JSON it is the desync report
/// file `lockstep desync show` prints.
///
/// ```
/// use lockstep_core::desync::{Cause, Divergence, FieldDiff, Report};
/// use lockstep_core::{Frame, Tick};
/// let d = Divergence {
///     tick: Tick::new(41),
///     cause: Cause::Step,
///     expected: 1,
///     found: 2,
///     fields: vec![FieldDiff { path: "hp".into(), expected: Some("3".into()), found: Some("4".into()) }],
/// };
/// let frames = [Frame { tick: Tick::new(41), inputs: vec![Some(7u8), None], events: vec![] }];
/// let r = Report::from_divergence(&d, "self-check", "my game 1.2", &frames);
/// let text = r.render();
/// assert!(text.starts_with("hp: 3 != 4"));
/// assert!(text.contains("tick 41"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Report {
    /// [`REPORT_VERSION`] when written.
    pub version: u32,
    /// What found it (`"self-check"`).
    pub found_by: String,
    /// The first tick after which the states differ.
    pub tick: u32,
    /// What was happening, in words.
    pub cause: String,
    /// The reference state's hash, 16 hex digits.
    pub expected_hash: String,
    /// The other state's hash.
    pub found_hash: String,
    /// The fields that differ.
    pub fields: Vec<ReportField>,
    /// The frames run up to and including `tick`, oldest first.
    pub frames: Vec<ReportFrame>,
    /// The engine that wrote it (`lockstep-core` and its version).
    pub engine: String,
    /// What the game says of itself (its name, version, fingerprint).
    pub game: String,
    /// Found in a match: the checkpoint that differed (version 2).
    #[cfg_attr(feature = "serde", serde(default))]
    pub checkpoint: Option<u32>,
    /// The tick the fields were compared after, when not `tick` (in a
    /// match: the tick of the majority's state received to heal, the
    /// diverged machine's own state at that tick beside it) (version 2).
    #[cfg_attr(feature = "serde", serde(default))]
    pub fields_tick: Option<u32>,
}

/// A field in a [`Report`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ReportField {
    /// Its path.
    pub path: String,
    /// The reference state's value, if it has the field.
    pub expected: Option<String>,
    /// The other state's value, if it has the field.
    pub found: Option<String>,
}

/// A frame in a [`Report`]: each seat's input as the game's `Debug` prints
/// it (`None` for an empty seat) and its membership events.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ReportFrame {
    /// The tick.
    pub tick: u32,
    /// Per seat.
    pub inputs: Vec<Option<String>>,
    /// Membership events.
    pub events: Vec<String>,
}

impl Report {
    /// The report of `divergence`, found by `found_by`, in `game` (the
    /// game's own description), after `frames` (the last few run).
    pub fn from_divergence<'a, I: Input>(
        divergence: &Divergence,
        found_by: &str,
        game: &str,
        frames: impl IntoIterator<Item = &'a Frame<I>>,
    ) -> Self {
        Self {
            version: REPORT_VERSION,
            found_by: found_by.into(),
            tick: divergence.tick.get(),
            cause: divergence.cause.to_string(),
            expected_hash: format!("{:016x}", divergence.expected),
            found_hash: format!("{:016x}", divergence.found),
            fields: divergence
                .fields
                .iter()
                .map(|d| ReportField {
                    path: d.path.clone(),
                    expected: d.expected.clone(),
                    found: d.found.clone(),
                })
                .collect(),
            frames: frames
                .into_iter()
                .map(|f| ReportFrame {
                    tick: f.tick.get(),
                    inputs: f
                        .inputs
                        .iter()
                        .map(|i| i.as_ref().map(|i| format!("{i:?}")))
                        .collect(),
                    events: f.events.iter().map(|e| format!("{e:?}")).collect(),
                })
                .collect(),
            engine: format!("lockstep-core {}", env!("CARGO_PKG_VERSION")),
            game: game.into(),
            checkpoint: None,
            fields_tick: None,
        }
    }

    /// The report of a desync found in a match, written by the machine
    /// that diverged: the checkpoint that differed, the first divergent
    /// tick and both hashes after it, if the search found them, and the
    /// fields that differ between its own state and the majority's after
    /// `fields_tick` (the state it received to heal), the majority's value
    /// first; `frames` are the last few run up to the first divergent tick.
    ///
    /// ```
    /// use lockstep_core::desync::{FieldDiff, FirstDifference, Report};
    /// use lockstep_core::{Frame, Tick};
    /// let first = FirstDifference { tick: Tick::new(120), local: 9, remote: 7 };
    /// let fields = vec![FieldDiff { path: "ships[1].score".into(), expected: Some("3".into()), found: Some("1003".into()) }];
    /// let frames: [Frame<u8>; 0] = [];
    /// let r = Report::from_match("bot1, against the relay's majority", "swarm", Tick::new(127), Some(first), Tick::new(131), fields, &frames);
    /// assert_eq!(r.tick, 120);
    /// assert!(r.render().starts_with("ships[1].score: 3 != 1003"));
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn from_match<'a, I: Input>(
        found_by: &str,
        game: &str,
        checkpoint: Tick,
        first: Option<FirstDifference>,
        fields_tick: Tick,
        fields: Vec<FieldDiff>,
        frames: impl IntoIterator<Item = &'a Frame<I>>,
    ) -> Self {
        let divergence = Divergence {
            tick: first.map_or(checkpoint, |f| f.tick),
            cause: Cause::Match,
            expected: first.map_or(0, |f| f.remote),
            found: first.map_or(0, |f| f.local),
            fields,
        };
        let mut r = Self::from_divergence(&divergence, found_by, game, frames);
        r.checkpoint = Some(checkpoint.get());
        r.fields_tick = Some(fields_tick.get());
        if first.is_none() {
            r.cause = "the state differs from the majority's; the first divergent tick could not be found".into();
            r.expected_hash = UNKNOWN.into();
            r.found_hash = UNKNOWN.into();
        }
        r
    }

    /// The report as text: the fields that differ first, then the tick and
    /// cause, the hashes, the frames, and who wrote it.
    pub fn render(&self) -> String {
        use fmt::Write as _;
        let mut out = String::new();
        let side = |v: &Option<String>| v.clone().unwrap_or_else(|| "(absent)".into());
        if self.fields.is_empty() {
            out.push_str("(no field differs, or the game lists none)\n");
        }
        for f in &self.fields {
            let _ = writeln!(
                out,
                "{}: {} != {}",
                f.path,
                side(&f.expected),
                side(&f.found)
            );
        }
        if let Some(t) = self.fields_tick {
            let _ = writeln!(out, "(fields compared after tick {t})");
        }
        if self.expected_hash == UNKNOWN {
            let _ = writeln!(out, "\nnot located: {}", self.cause);
        } else {
            let _ = writeln!(
                out,
                "\nfirst different after tick {}: {}",
                self.tick, self.cause
            );
        }
        if let Some(c) = self.checkpoint {
            let _ = writeln!(out, "found at the checkpoint through tick {c}");
        }
        let _ = writeln!(
            out,
            "state hash {} (reference), {} (other)",
            self.expected_hash, self.found_hash
        );
        if !self.frames.is_empty() {
            out.push_str("\nframes up to it:\n");
        }
        for f in &self.frames {
            let inputs: Vec<String> = f
                .inputs
                .iter()
                .enumerate()
                .map(|(seat, i)| format!("P{seat}={}", i.as_deref().unwrap_or("-")))
                .collect();
            let _ = write!(out, "  tick {}: {}", f.tick, inputs.join(" | "));
            if !f.events.is_empty() {
                let _ = write!(out, "  [{}]", f.events.join(", "));
            }
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "\nfound by {} in {}, {}; report version {}",
            self.found_by, self.game, self.engine, self.version
        );
        out
    }
}

/// The first tick whose state differs between this machine and another,
/// found by comparing their hash chains after a checkpoint mismatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstDifference {
    /// The tick.
    pub tick: Tick,
    /// Our state hash after it.
    pub local: u64,
    /// Theirs.
    pub remote: u64,
}

/// Ticks per block. The chain restarts at the first tick reported in each
/// block (so a machine that joined, or restored a state, has a complete chain
/// from its first whole block on), and the checkpoint closing a block is
/// sent in full.
pub const BLOCK: u32 = 64;

/// Ticks per checkpoint interval: a machine sends one checkpoint, the chain
/// through the last tick it reported in the interval, per interval.
pub const CHECK_INTERVAL: u32 = 8;

/// The block `tick` is in.
pub(crate) fn block_of(tick: Tick) -> u32 {
    tick.get() / BLOCK
}

/// The state hashes of the last ticks reported, and the chain over them that
/// checkpoints compare between machines.
///
/// The chain folds each reported tick's hash into the one before,
/// `C(t) = xxh3-64(C(p) ‖ t ‖ hash(t))` (`C(p)` the chain through the tick
/// reported before `t`, as `u64` little-endian, or 0 when `t` is the first
/// reported in its [`BLOCK`]; `t` as `u32` little-endian; `hash(t)` as `u64`
/// little-endian). Two machines whose states part at tick `t*` have equal
/// chains before it and different ones from `t*` to the end of its block
/// (but for a 2^-64 collision), even if the states become equal again. So a
/// short piece of the chain sent now and then still catches a divergence:
/// each 16-bit checkpoint misses with probability 2^-16, and the full one
/// closing the block never does; and "where do the chains first differ" is
/// a search over the window ([`first_difference`](Self::first_difference)):
/// one question per block, then a binary search inside the first block that
/// differs, rather than a dump of every hash.
///
/// Ticks need not follow one another (a game may report every tick, or
/// every tenth), but every machine must report the same ones.
///
/// ```
/// use lockstep_core::desync::HashChain;
/// use lockstep_core::Tick;
/// let (mut ours, mut theirs) = (HashChain::new(256), HashChain::new(256));
/// for t in 0..200u32 {
///     ours.push(Tick::new(t), u64::from(t))?;
///     // Their state parts from ours at tick 137.
///     theirs.push(Tick::new(t), u64::from(t) + u64::from(t >= 137))?;
/// }
/// assert_ne!(ours.chain(Tick::new(199)), theirs.chain(Tick::new(199)));
/// let mut asked = 0;
/// let first = ours.first_difference(Tick::new(0), Tick::new(199), |t| {
///     asked += 1;
///     theirs.chain(t)
/// });
/// assert_eq!(first, Some(Tick::new(137)));
/// assert!(asked <= 10);
/// # Ok::<(), lockstep_core::desync::ChainError>(())
/// ```
#[derive(Debug, Clone)]
pub struct HashChain {
    window: usize,
    /// Per reported tick, oldest first: the tick, its hash and the chain
    /// through it.
    links: VecDeque<Link>,
}

#[derive(Debug, Clone, Copy)]
struct Link {
    tick: Tick,
    hash: u64,
    chain: u64,
}

/// Why a hash was not added to a [`HashChain`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChainError {
    /// Ticks ascend: this one is not after the last.
    #[error("tick {got} is not after the last one reported ({last})")]
    NotAscending {
        /// The tick given.
        got: Tick,
        /// The last tick reported.
        last: Tick,
    },
}

impl HashChain {
    /// An empty chain keeping the last `window` reported ticks (at least 1).
    pub fn new(window: usize) -> Self {
        Self {
            window: window.max(1),
            links: VecDeque::new(),
        }
    }

    /// The last tick reported.
    pub fn last(&self) -> Option<Tick> {
        self.links.back().map(|l| l.tick)
    }

    /// How many ticks are held.
    pub fn len(&self) -> usize {
        self.links.len()
    }

    /// Whether no tick is held.
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// The oldest tick held.
    pub fn oldest(&self) -> Option<Tick> {
        self.links.front().map(|l| l.tick)
    }

    /// Adds the state hash after `tick`, which must come after the last one
    /// added. The oldest beyond the window goes.
    pub fn push(&mut self, tick: Tick, hash: u64) -> Result<(), ChainError> {
        let prev = match self.links.back() {
            Some(l) if l.tick >= tick => {
                return Err(ChainError::NotAscending {
                    got: tick,
                    last: l.tick,
                });
            }
            Some(l) if block_of(l.tick) == block_of(tick) => l.chain,
            _ => 0,
        };
        let mut bytes = [0u8; 20];
        bytes[..8].copy_from_slice(&prev.to_le_bytes());
        bytes[8..12].copy_from_slice(&tick.get().to_le_bytes());
        bytes[12..].copy_from_slice(&hash.to_le_bytes());
        self.links.push_back(Link {
            tick,
            hash,
            chain: xxhash_rust::xxh3::xxh3_64(&bytes),
        });
        if self.links.len() > self.window {
            self.links.pop_front();
        }
        Ok(())
    }

    /// Forgets everything: the machine's state was replaced, so the chain
    /// starts over (complete again from the next block).
    pub fn clear(&mut self) {
        self.links.clear();
    }

    fn link(&self, tick: Tick) -> Option<&Link> {
        let i = self.links.binary_search_by_key(&tick, |l| l.tick).ok()?;
        self.links.get(i)
    }

    /// The state hash after `tick`, if held.
    pub fn hash(&self, tick: Tick) -> Option<u64> {
        self.link(tick).map(|l| l.hash)
    }

    /// The chain through `tick`, if held.
    pub fn chain(&self, tick: Tick) -> Option<u64> {
        self.link(tick).map(|l| l.chain)
    }

    /// The ticks held in `lo..=hi`, ascending.
    pub fn ticks_in(&self, lo: Tick, hi: Tick) -> impl Iterator<Item = Tick> + '_ {
        let from = self.links.partition_point(|l| l.tick < lo);
        self.links
            .range(from..)
            .map(|l| l.tick)
            .take_while(move |t| *t <= hi)
    }

    /// The first tick in `lo..=hi` whose state differs from the other
    /// machine's, asking `theirs(t)` for its chain through `t` (`None`: it
    /// does not hold it) once per block in the range, then as often as a
    /// binary search in the first block that differs needs. Ticks before
    /// `lo` must agree. `None` if the chains agree through `hi`, or a tick
    /// needed is not held on either side.
    pub fn first_difference(
        &self,
        lo: Tick,
        hi: Tick,
        mut theirs: impl FnMut(Tick) -> Option<u64>,
    ) -> Option<Tick> {
        let mut search = Search::new(lo, hi);
        loop {
            let questions = search.questions(self, 1);
            let answers: Vec<_> = questions.iter().map(|&t| (t, theirs(t))).collect();
            match search.answer(self, &answers) {
                Step::Ask => {}
                Step::Found(t) => return Some(t),
                Step::Agree | Step::Unknown => return None,
            }
        }
    }
}

/// A search for the first divergent tick between this machine's chain and
/// another's, one round of questions at a time: the form the search takes
/// between machines, where each round is a message there and back.
///
/// ```
/// use lockstep_core::desync::{HashChain, Search, Step};
/// use lockstep_core::Tick;
/// let (mut ours, mut theirs) = (HashChain::new(256), HashChain::new(256));
/// for t in 0..64u32 {
///     ours.push(Tick::new(t), 7)?;
///     theirs.push(Tick::new(t), if t == 41 { 8 } else { 7 })?;
/// }
/// // The checkpoint through tick 63 differed: the search is within its block.
/// let mut search = Search::within_block(Tick::new(0), Tick::new(63));
/// let mut rounds = 0;
/// let found = loop {
///     rounds += 1;
///     let asked = search.questions(&ours, 8);
///     let answers: Vec<_> = asked.iter().map(|&t| (t, theirs.chain(t))).collect();
///     match search.answer(&ours, &answers) {
///         Step::Ask => continue,
///         Step::Found(t) => break t,
///         other => panic!("{other:?}"),
///     }
/// };
/// assert_eq!(found, Tick::new(41));
/// assert_eq!(rounds, 2);
/// # Ok::<(), lockstep_core::desync::ChainError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Search {
    /// Every tick before it agrees.
    lo: Tick,
    /// It differs (or is the end of the range, before the first answer).
    hi: Tick,
    /// `lo..=hi` lies in one block whose chain differs at `hi`.
    narrowed: bool,
}

/// What a [`Search`] round found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Ask the next round's questions.
    Ask,
    /// The first tick whose state differs.
    Found(Tick),
    /// The chains agree through the end of the range.
    Agree,
    /// The other side does not hold the ticks needed (or this one does
    /// not): the search cannot go on.
    Unknown,
}

impl Search {
    /// A search over `lo..=hi`, every tick before `lo` agreeing.
    pub fn new(lo: Tick, hi: Tick) -> Self {
        Self {
            lo,
            hi: hi.max(lo),
            narrowed: false,
        }
    }

    /// A search over `lo..=hi` where the chain through `hi` is known to
    /// differ (a checkpoint did), so the first divergent tick is in `hi`'s
    /// block: ticks before that block are not asked about.
    pub fn within_block(lo: Tick, hi: Tick) -> Self {
        Self {
            lo: lo.max(Tick::new(block_of(hi) * BLOCK)).min(hi),
            hi,
            narrowed: true,
        }
    }

    /// The range still searched.
    pub fn range(&self) -> (Tick, Tick) {
        (self.lo, self.hi)
    }

    /// The next round's questions, at most `most` (at least 1): ticks whose
    /// chain the other machine is asked for.
    pub fn questions(&self, ours: &HashChain, most: usize) -> Vec<Tick> {
        let most = most.max(1);
        if !self.narrowed {
            // The last tick held in each block of the range.
            let mut ends: Vec<Tick> = Vec::new();
            for t in ours.ticks_in(self.lo, self.hi) {
                match ends.last_mut() {
                    Some(e) if block_of(*e) == block_of(t) => *e = t,
                    _ => ends.push(t),
                }
            }
            ends.truncate(most);
            return ends;
        }
        // Inside the block: ticks before `hi`, evenly spread.
        let held: Vec<Tick> = ours
            .ticks_in(self.lo, self.hi)
            .filter(|t| *t < self.hi)
            .collect();
        if held.len() <= most {
            return held;
        }
        (1..=most)
            .map(|k| held[k * held.len() / (most + 1)])
            .collect()
    }

    /// Takes the answers to the last questions (`None`: the other side
    /// does not hold that tick).
    pub fn answer(&mut self, ours: &HashChain, answers: &[(Tick, Option<u64>)]) -> Step {
        let mut answers: Vec<(Tick, bool)> = answers
            .iter()
            .filter_map(|&(t, theirs)| Some((t, ours.chain(t)? != theirs?)))
            .filter(|(t, _)| (self.lo..=self.hi).contains(t))
            .collect();
        answers.sort_unstable_by_key(|(t, _)| *t);
        if answers.is_empty() && !(self.narrowed && self.done(ours)) {
            return Step::Unknown;
        }
        if !self.narrowed {
            // The first block whose end differs holds the first divergent
            // tick; every block before it agrees.
            for (end, differs) in answers {
                if differs {
                    self.lo = self.lo.max(Tick::new(block_of(end) * BLOCK));
                    self.hi = end;
                    self.narrowed = true;
                    break;
                }
                if end >= self.hi {
                    return Step::Agree;
                }
                self.lo = self.lo.max(end.saturating_add(1));
            }
            if !self.narrowed {
                return if ours.ticks_in(self.lo, self.hi).next().is_some() {
                    Step::Ask
                } else {
                    Step::Agree
                };
            }
        } else {
            for (t, differs) in answers {
                if differs {
                    self.hi = self.hi.min(t);
                } else if t < self.hi {
                    self.lo = self.lo.max(t.saturating_add(1));
                }
            }
        }
        if self.done(ours) {
            Step::Found(self.hi)
        } else {
            Step::Ask
        }
    }

    /// No tick held between the agreed ones and `hi`: `hi` is the first.
    fn done(&self, ours: &HashChain) -> bool {
        self.narrowed && ours.ticks_in(self.lo, self.hi).next() == Some(self.hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Two machines whose states part at `split` (for one reported
        /// tick or for good): the search names exactly `split` when the
        /// window still holds it, in one question per block and at most
        /// log2(block) + 1 more, the memory stays within the window, and the
        /// chain differs from the split to the end of its block (for these
        /// seeds).
        #[test]
        fn the_first_difference_is_found_exactly_in_few_questions(
            first in prop_oneof![Just(0u32), 65_500u32..65_600, (u32::MAX - 30_000)..(u32::MAX - 29_000)],
            len in 2u32..1_500,
            window in 1usize..600,
            split in 0u32..1_500,
            every in prop_oneof![Just(1u32), 1u32..12],
            lasting in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let (mut ours, mut theirs) = (HashChain::new(window), HashChain::new(window));
            let mut rng = crate::sim::SimRng::new(seed);
            for k in 0..len {
                let t = Tick::new(first).saturating_add(k * every);
                let h = rng.next_u64();
                ours.push(t, h).unwrap();
                // Their state differs at `split` only, or from it on.
                let differs = k == split || (k > split && lasting);
                theirs.push(t, if differs { h ^ 1 } else { h }).unwrap();
                prop_assert!(ours.links.len() <= window);
            }
            let last = ours.last().unwrap();
            let lo = ours.oldest().unwrap();
            let mut asked = 0u32;
            let found = ours.first_difference(lo, last, |t| {
                asked += 1;
                theirs.chain(t)
            });
            let blocks = block_of(last) - block_of(lo) + 1;
            let per_block = BLOCK.div_ceil(every);
            prop_assert!(
                asked <= blocks + 32 - per_block.leading_zeros() + 1,
                "{asked} questions for {blocks} blocks"
            );
            let held = len.min(window as u32);
            if split >= len {
                prop_assert_eq!(found, None);
            } else if split >= len - held {
                let split_tick = Tick::new(first).saturating_add(split * every);
                prop_assert_eq!(found, Some(split_tick));
                // Its block's chain differs from the split on.
                for t in ours.ticks_in(split_tick, last).filter(|t| block_of(*t) == block_of(split_tick)) {
                    prop_assert_ne!(ours.chain(t), theirs.chain(t));
                }
            }
        }
    }

    #[test]
    fn ticks_ascend_with_gaps_and_the_chain_restarts_per_block() {
        let mut c = HashChain::new(4);
        c.push(Tick::new(10), 1).unwrap();
        assert_eq!(
            c.push(Tick::new(10), 2),
            Err(ChainError::NotAscending {
                got: Tick::new(10),
                last: Tick::new(10)
            })
        );
        c.push(Tick::new(12), 2).unwrap();
        for t in [20, 30, 40, 50] {
            c.push(Tick::new(t), 3).unwrap();
        }
        assert_eq!(c.hash(Tick::new(12)), None);
        assert_eq!(c.hash(Tick::new(20)), Some(3));
        assert_eq!(c.last(), Some(Tick::new(50)));
        // Equal histories from a block's first report on give equal chains,
        // whatever came before.
        let (mut a, mut b) = (HashChain::new(8), HashChain::new(8));
        a.push(Tick::new(60), 1).unwrap();
        b.push(Tick::new(61), 2).unwrap();
        for t in 64..70 {
            a.push(Tick::new(t), 5).unwrap();
            b.push(Tick::new(t), 5).unwrap();
        }
        assert_eq!(a.chain(Tick::new(69)), b.chain(Tick::new(69)));
    }
}
