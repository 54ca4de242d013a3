//! The desync report: a versioned JSON record of where two machines
//! parted, written by the machine that found it.

use super::*;

/// The version of the [`Report`] layout; a reader refuses one it does not
/// know.
pub const REPORT_VERSION: u32 = 2;
/// A report's hashes when the first divergent tick was not found.
pub(super) const UNKNOWN: &str = "unknown";

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
