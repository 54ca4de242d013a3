//! Network impairment for tests, demos and the `lockstep netsim` proxy.

use crate::{Transport, TransportError};
use lockstep_core::PeerId;
use lockstep_core::sim::{Fate, LinkConditions, LinkModel};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

/// What an impaired link does to every datagram, each way.
#[derive(Debug, Clone, PartialEq)]
pub struct Faults {
    /// Probability a datagram is lost.
    pub loss: f64,
    /// One-way delay added.
    pub latency: Duration,
    /// The delay varies uniformly by up to this much either way (which also
    /// reorders datagrams); a delay that would fall below zero is zero.
    pub jitter: Duration,
    /// Probability a datagram is delivered twice.
    pub duplicate: f64,
    /// Probability a datagram is held back by up to an extra `latency +
    /// jitter`.
    pub reorder: f64,
    /// The link's capacity in bytes per second (`None`: unlimited).
    /// Datagrams queue behind each other at this rate; one that would wait
    /// more than [`MAX_QUEUE_DELAY`] in the queue is dropped, as a router's
    /// full buffer drops it.
    pub bandwidth: Option<u64>,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            loss: 0.0,
            latency: Duration::ZERO,
            jitter: Duration::ZERO,
            duplicate: 0.0,
            reorder: 0.0,
            bandwidth: None,
        }
    }
}

/// The longest a datagram waits in a bandwidth-limited link's queue before
/// the link drops it instead.
pub const MAX_QUEUE_DELAY: Duration = lockstep_core::sim::MAX_QUEUE_DELAY;

impl Faults {
    /// The same impairment as the simulated network's conditions: one
    /// [`LinkModel`] decides every datagram's fate for both.
    pub fn conditions(&self) -> LinkConditions {
        LinkConditions {
            latency: self.latency,
            jitter: self.jitter,
            loss: self.loss,
            duplicate: self.duplicate,
            reorder: self.reorder,
            max_datagram: None,
            bandwidth: self.bandwidth,
        }
    }
}

/// Datagrams held at most by one direction of a link; beyond that new ones
/// are lost.
pub const HELD_CAP: usize = 4096;

/// Bytes held at most by one direction of a link; beyond that new
/// datagrams are lost.
pub const HELD_BYTES_CAP: usize = 16 << 20;

/// A held datagram: when it is due, its order, where it goes, its bytes.
type Held<K> = (Instant, u64, K, Vec<u8>);

/// One direction of an impaired link, without a clock of its own: datagrams
/// go in with [`push`](Self::push) and come out when due with
/// [`pop_due`](Self::pop_due). `K` says where each one goes.
///
/// ```
/// use lockstep_net::{Faults, ImpairedLink};
/// use std::time::{Duration, Instant};
///
/// let faults = Faults { latency: Duration::from_millis(40), ..Faults::default() };
/// let mut link = ImpairedLink::new(faults, 7);
/// let t0 = Instant::now();
/// link.push(t0, "server", b"hello");
/// assert!(link.pop_due(t0).is_none());
/// let (to, bytes) = link.pop_due(t0 + Duration::from_millis(40)).unwrap();
/// assert_eq!((to, bytes.as_slice()), ("server", &b"hello"[..]));
/// ```
#[derive(Debug)]
pub struct ImpairedLink<K> {
    faults: Faults,
    /// What happens to each datagram (the simulated network's rules).
    model: LinkModel,
    /// The first datagram's time: the model counts from it.
    origin: Option<Instant>,
    held: BinaryHeap<Reverse<Held<K>>>,
    seq: u64,
    held_bytes: usize,
    counts: LinkCounts,
}

/// What one direction of a link did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkCounts {
    /// Datagrams that came in to be carried.
    pub sent: u64,
    /// Datagrams lost at random.
    pub lost: u64,
    /// Datagrams dropped by a full queue (bandwidth) or the held caps.
    pub dropped: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Datagrams (and copies) handed on.
    pub delivered: u64,
}

impl<K: Ord> ImpairedLink<K> {
    /// A link impairing with `faults`, randomised from `seed`.
    pub fn new(faults: Faults, seed: u64) -> Self {
        Self {
            model: LinkModel::new(faults.conditions(), seed),
            faults,
            origin: None,
            held: BinaryHeap::new(),
            seq: 0,
            held_bytes: 0,
            counts: LinkCounts::default(),
        }
    }

    /// The impairment in force.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Changes the impairment for datagrams pushed from now on.
    pub fn set_faults(&mut self, faults: Faults) {
        self.model.set_conditions(faults.conditions());
        self.faults = faults;
    }

    /// What the link did so far.
    pub fn counts(&self) -> LinkCounts {
        self.counts
    }

    /// Datagrams held, not yet due.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Decides the fate of one datagram sent at `now` to `to`: when each
    /// copy is due, if any.
    pub fn push(&mut self, now: Instant, to: K, datagram: &[u8])
    where
        K: Clone,
    {
        self.counts.sent += 1;
        let origin = *self.origin.get_or_insert(now);
        let at = lockstep_core::Instant::from_duration(now.saturating_duration_since(origin));
        let (after, copy) = match self.model.fate(at, datagram.len()) {
            Fate::Arrives { after, copy } => (after, copy),
            Fate::Lost => {
                self.counts.lost += 1;
                return;
            }
            Fate::QueueFull | Fate::TooLarge => {
                self.counts.dropped += 1;
                return;
            }
        };
        for (k, delay) in core::iter::once(after).chain(copy).enumerate() {
            if self.held.len() >= HELD_CAP || self.held_bytes + datagram.len() > HELD_BYTES_CAP {
                self.counts.dropped += 1;
                continue;
            }
            if k > 0 {
                self.counts.duplicated += 1;
            }
            self.seq += 1;
            self.held_bytes += datagram.len();
            self.held.push(Reverse((
                now + delay,
                self.seq,
                to.clone(),
                datagram.to_vec(),
            )));
        }
    }

    /// When the next held datagram is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.held.peek().map(|Reverse((at, ..))| *at)
    }

    /// The next datagram due by `now`, and where it goes.
    pub fn pop_due(&mut self, now: Instant) -> Option<(K, Vec<u8>)> {
        if self.next_due().is_some_and(|at| at <= now) {
            let Reverse((_, _, to, bytes)) = self.held.pop()?;
            self.held_bytes -= bytes.len();
            self.counts.delivered += 1;
            return Some((to, bytes));
        }
        None
    }
}

/// Wraps a transport and impairs everything it sends and receives, from a
/// seed, in real time. Held datagrams move on whenever `send` or `recv` is
/// called, which a game loop does every iteration.
///
/// At most [`HELD_CAP`] datagrams ([`HELD_BYTES_CAP`] bytes) are held each
/// way; beyond that new ones are lost.
#[derive(Debug)]
pub struct FaultyTransport<T> {
    inner: T,
    outgoing: ImpairedLink<PeerId>,
    incoming: ImpairedLink<PeerId>,
}

impl<T: Transport> FaultyTransport<T> {
    /// Impairs `inner` with `faults`, randomised from `seed`.
    pub fn new(inner: T, faults: Faults, seed: u64) -> Self {
        Self {
            inner,
            outgoing: ImpairedLink::new(faults.clone(), seed),
            incoming: ImpairedLink::new(faults, seed ^ 0x5DEE_CE66_D1CE_5EED),
        }
    }

    /// The wrapped transport.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// The wrapped transport, mutably.
    pub fn inner_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    /// Changes the impairment from now on.
    pub fn set_faults(&mut self, faults: Faults) {
        self.outgoing.set_faults(faults.clone());
        self.incoming.set_faults(faults);
    }

    /// What each direction did so far: (outgoing, incoming).
    pub fn counts(&self) -> (LinkCounts, LinkCounts) {
        (self.outgoing.counts(), self.incoming.counts())
    }

    fn release_outgoing(&mut self) -> Result<(), TransportError> {
        let now = Instant::now();
        while let Some((to, bytes)) = self.outgoing.pop_due(now) {
            self.inner.send(to, &bytes)?;
        }
        Ok(())
    }
}

impl<T: Transport> Transport for FaultyTransport<T> {
    fn send(&mut self, to: PeerId, datagram: &[u8]) -> Result<(), TransportError> {
        self.outgoing.push(Instant::now(), to, datagram);
        self.release_outgoing()
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<Option<(PeerId, usize)>, TransportError> {
        self.release_outgoing()?;
        while let Some((from, len)) = self.inner.recv(buf)? {
            self.incoming.push(Instant::now(), from, &buf[..len]);
        }
        if let Some((from, bytes)) = self.incoming.pop_due(Instant::now()) {
            let len = bytes.len().min(buf.len());
            buf[..len].copy_from_slice(&bytes[..len]);
            return Ok(Some((from, len)));
        }
        Ok(None)
    }

    /// Waits on the inner transport, but no later than the next datagram
    /// held back either way falls due.
    fn wait(&mut self, timeout: Duration) -> Result<(), TransportError> {
        self.release_outgoing()?;
        let now = Instant::now();
        let due = [self.incoming.next_due(), self.outgoing.next_due()]
            .into_iter()
            .flatten()
            .map(|t| t.saturating_duration_since(now))
            .fold(timeout, Duration::min);
        self.inner.wait(due)
    }
}

/// Impairments that change over time: `Faults` from the start, then the
/// changes each step makes, at its time. Parsed from text such as
///
/// ```text
/// latency=40ms loss=2%; after 20s: latency=200ms; after 40s: latency=40ms
/// ```
///
/// Steps are separated by `;`. A step is an optional `after DURATION:` (time
/// from the start; steps in increasing order; the first step without one
/// changes the start) and then settings `KEY=VALUE` separated by spaces (no
/// spaces around `=`):
/// `loss`, `duplicate`, `reorder` in percent (`5` or `5%`, 0 to 100);
/// `latency`, `jitter` as durations (`40ms`, `1.5s`, at most 60 s);
/// `bandwidth` as a rate (`512kbit`, `2mbit`, `64kB`, `1MB`, per second) or
/// `off`. Each step starts from the one before.
///
/// ```
/// use lockstep_net::{FaultScript, Faults};
/// use std::time::Duration;
///
/// let s = FaultScript::parse(&Faults::default(), "latency=40ms; after 20s: latency=200ms").unwrap();
/// assert_eq!(s.at(Duration::from_secs(5)).latency, Duration::from_millis(40));
/// assert_eq!(s.at(Duration::from_secs(25)).latency, Duration::from_millis(200));
/// assert_eq!(s.next_change(Duration::from_secs(5)), Some(Duration::from_secs(20)));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct FaultScript {
    /// (from when, what holds from then), in order; the first from zero.
    steps: Vec<(Duration, Faults)>,
}

/// Why a [`FaultScript`] could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    /// A setting that is not `KEY=VALUE`.
    #[error("step {step}: `{text}` is not KEY=VALUE")]
    NotASetting {
        /// The step, from 1.
        step: usize,
        /// The text.
        text: String,
    },
    /// A key that is not known.
    #[error(
        "step {step}: unknown setting `{key}` (loss, latency, jitter, duplicate, reorder, bandwidth)"
    )]
    UnknownKey {
        /// The step, from 1.
        step: usize,
        /// The key.
        key: String,
    },
    /// A value that does not read, or is out of range.
    #[error("step {step}: bad value `{value}` for {key}: {why}")]
    BadValue {
        /// The step, from 1.
        step: usize,
        /// The key (or `after`).
        key: String,
        /// The value.
        value: String,
        /// What was expected.
        why: &'static str,
    },
    /// A step at or before the one before it.
    #[error("step {step}: `after` must come later than the step before")]
    OutOfOrder {
        /// The step, from 1.
        step: usize,
    },
    /// A step that changes nothing.
    #[error("step {step} changes nothing")]
    Empty {
        /// The step, from 1.
        step: usize,
    },
    /// More than [`FaultScript::MAX_STEPS`] steps.
    #[error("more than {} steps", FaultScript::MAX_STEPS)]
    TooLong,
    /// Nothing in it.
    #[error("the script is empty")]
    Nothing,
}

impl FaultScript {
    /// Steps a script may have at most.
    pub const MAX_STEPS: usize = 256;

    /// The same `faults` all the time.
    pub fn constant(faults: Faults) -> Self {
        Self {
            steps: vec![(Duration::ZERO, faults)],
        }
    }

    /// Reads `text` (see the type's docs), starting from `base`.
    pub fn parse(base: &Faults, text: &str) -> Result<Self, ScriptError> {
        let mut steps = vec![(Duration::ZERO, base.clone())];
        let mut any_step = false;
        for (i, raw) in text.split(';').enumerate() {
            let step = i + 1;
            let raw = raw.trim();
            if raw.is_empty() {
                continue;
            }
            if steps.len() > Self::MAX_STEPS {
                return Err(ScriptError::TooLong);
            }
            let (at, settings) = match raw.strip_prefix("after") {
                Some(rest) => {
                    let (when, settings) = rest.split_once(':').ok_or(ScriptError::BadValue {
                        step,
                        key: "after".into(),
                        value: rest.trim().into(),
                        why: "a `:` after the duration (`after 20s: latency=200ms`)",
                    })?;
                    let at = duration(step, "after", when.trim())?;
                    if steps.last().is_some_and(|(t, _)| at <= *t) {
                        return Err(ScriptError::OutOfOrder { step });
                    }
                    (Some(at), settings)
                }
                None if i == 0 => (None, raw),
                None => {
                    return Err(ScriptError::BadValue {
                        step,
                        key: "after".into(),
                        value: raw.into(),
                        why: "every step but the first starts with `after DURATION:`",
                    });
                }
            };
            let mut faults = steps.last().map(|(_, f)| f.clone()).unwrap_or_default();
            let mut any = false;
            for setting in settings.split_whitespace() {
                let (key, value) =
                    setting
                        .split_once('=')
                        .ok_or_else(|| ScriptError::NotASetting {
                            step,
                            text: setting.into(),
                        })?;
                apply(&mut faults, step, key, value)?;
                any = true;
            }
            if !any {
                return Err(ScriptError::Empty { step });
            }
            match at {
                Some(at) => steps.push((at, faults)),
                None => steps[0].1 = faults,
            }
            any_step = true;
        }
        if !any_step {
            return Err(ScriptError::Nothing);
        }
        Ok(Self { steps })
    }

    /// What holds `elapsed` after the start.
    pub fn at(&self, elapsed: Duration) -> &Faults {
        let k = self.steps.partition_point(|(t, _)| *t <= elapsed);
        &self.steps[k.saturating_sub(1)].1
    }

    /// When the next change after `elapsed` comes, if any.
    pub fn next_change(&self, elapsed: Duration) -> Option<Duration> {
        self.steps.iter().map(|(t, _)| *t).find(|t| *t > elapsed)
    }

    /// The steps: from when, what holds.
    pub fn steps(&self) -> &[(Duration, Faults)] {
        &self.steps
    }
}

fn apply(f: &mut Faults, step: usize, key: &str, value: &str) -> Result<(), ScriptError> {
    match key {
        "loss" => f.loss = percent(step, key, value)?,
        "duplicate" => f.duplicate = percent(step, key, value)?,
        "reorder" => f.reorder = percent(step, key, value)?,
        "latency" => f.latency = duration(step, key, value)?,
        "jitter" => f.jitter = duration(step, key, value)?,
        "bandwidth" => f.bandwidth = rate(step, key, value)?,
        _ => {
            return Err(ScriptError::UnknownKey {
                step,
                key: key.into(),
            });
        }
    }
    Ok(())
}

fn bad(step: usize, key: &str, value: &str, why: &'static str) -> ScriptError {
    ScriptError::BadValue {
        step,
        key: key.into(),
        value: value.into(),
        why,
    }
}

/// `5`, `5%` or `0.5%`: a probability.
fn percent(step: usize, key: &str, value: &str) -> Result<f64, ScriptError> {
    let n: f64 = value
        .strip_suffix('%')
        .unwrap_or(value)
        .parse()
        .map_err(|_| bad(step, key, value, "a percentage, 0 to 100"))?;
    if !(0.0..=100.0).contains(&n) {
        return Err(bad(step, key, value, "a percentage, 0 to 100"));
    }
    Ok(n / 100.0)
}

/// `40ms`, `1.5s`: at most 60 s.
fn duration(step: usize, key: &str, value: &str) -> Result<Duration, ScriptError> {
    const WHY: &str = "a duration such as 40ms or 1.5s, at most 60s";
    let (n, scale) = if let Some(n) = value.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = value.strip_suffix('s') {
        (n, 1.0)
    } else {
        return Err(bad(step, key, value, WHY));
    };
    let secs = n
        .trim()
        .parse::<f64>()
        .map_err(|_| bad(step, key, value, WHY))?
        * scale;
    if !(0.0..=60.0).contains(&secs) {
        return Err(bad(step, key, value, WHY));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// `512kbit`, `2mbit`, `64kB`, `1MB`, `800B` per second, or `off`.
fn rate(step: usize, key: &str, value: &str) -> Result<Option<u64>, ScriptError> {
    const WHY: &str = "a rate such as 512kbit, 2mbit, 64kB or 1MB (per second), or off";
    if value == "off" {
        return Ok(None);
    }
    let units: [(&str, f64); 5] = [
        ("kbit", 1_000.0 / 8.0),
        ("mbit", 1_000_000.0 / 8.0),
        ("kB", 1_000.0),
        ("MB", 1_000_000.0),
        ("B", 1.0),
    ];
    let (n, scale) = units
        .iter()
        .find_map(|(u, s)| value.strip_suffix(u).map(|n| (n, *s)))
        .ok_or_else(|| bad(step, key, value, WHY))?;
    let bytes = n.parse::<f64>().map_err(|_| bad(step, key, value, WHY))? * scale;
    if !(1.0..=1e12).contains(&bytes) {
        return Err(bad(step, key, value, WHY));
    }
    Ok(Some(bytes as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn loss_and_latency_are_what_was_asked() {
        let faults = Faults {
            loss: 0.1,
            latency: ms(30),
            jitter: ms(10),
            ..Faults::default()
        };
        let mut link = ImpairedLink::new(faults, 3);
        let mut got = 0;
        // In batches: a link holds at most HELD_CAP.
        for batch in 0..5u64 {
            let t0 = Instant::now() + ms(100 * batch);
            for k in 0..2_000u32 {
                link.push(t0, k, &[0; 100]);
            }
            assert!(link.pop_due(t0 + ms(19)).is_none(), "nothing before 20 ms");
            while link.pop_due(t0 + ms(40)).is_some() {
                got += 1;
            }
        }
        assert!((8_800..9_200).contains(&got), "{got} of 10,000 at 10% loss");
        assert_eq!(link.counts().lost + got, 10_000);
    }

    #[test]
    fn bandwidth_serialises_and_a_full_queue_drops() {
        // 10 kB/s: a 1,000-byte datagram takes 100 ms on the wire.
        let faults = Faults {
            bandwidth: Some(10_000),
            ..Faults::default()
        };
        let mut link = ImpairedLink::new(faults, 1);
        let t0 = Instant::now();
        for k in 0..20u32 {
            link.push(t0, k, &[0; 1000]);
        }
        // 1 s of queue holds 11 (the one on the wire and ten waiting).
        assert_eq!(link.held(), 11);
        assert_eq!(link.counts().dropped, 9);
        assert!(link.pop_due(t0 + ms(99)).is_none());
        assert_eq!(link.pop_due(t0 + ms(100)).map(|(k, _)| k), Some(0));
        assert!(link.pop_due(t0 + ms(199)).is_none());
        assert_eq!(link.pop_due(t0 + ms(200)).map(|(k, _)| k), Some(1));
    }

    #[test]
    fn big_datagrams_are_held_up_to_a_byte_cap() {
        let faults = Faults {
            latency: ms(10),
            ..Faults::default()
        };
        let mut link = ImpairedLink::new(faults, 1);
        let t0 = Instant::now();
        let big = vec![0u8; 65_000];
        for k in 0..1000u32 {
            link.push(t0, k, &big);
        }
        assert_eq!(link.held(), HELD_BYTES_CAP / 65_000);
        while link.pop_due(t0 + ms(10)).is_some() {}
        link.push(t0 + ms(10), 0, &big);
        assert_eq!(link.held(), 1, "room again once delivered");
    }

    #[test]
    fn duplicates_are_counted_and_delivered() {
        let faults = Faults {
            duplicate: 1.0,
            ..Faults::default()
        };
        let mut link = ImpairedLink::new(faults, 1);
        let t0 = Instant::now();
        link.push(t0, 1u8, b"x");
        assert_eq!(link.pop_due(t0).map(|(k, _)| k), Some(1));
        assert_eq!(link.pop_due(t0).map(|(k, _)| k), Some(1));
        assert_eq!(link.counts().duplicated, 1);
    }

    #[test]
    fn a_script_reads_and_changes_over_time() {
        let s = FaultScript::parse(
            &Faults::default(),
            "latency=40ms loss=2%; after 20s: latency=200ms bandwidth=512kbit; after 40.5s: latency=40ms bandwidth=off",
        )
        .unwrap();
        assert_eq!(s.steps().len(), 3);
        let at = |secs: f64| s.at(Duration::from_secs_f64(secs)).clone();
        assert_eq!(at(0.0).latency, ms(40));
        assert!((at(0.0).loss - 0.02).abs() < 1e-12);
        assert_eq!(at(19.9).latency, ms(40));
        assert_eq!(at(20.0).latency, ms(200));
        assert_eq!(at(20.0).bandwidth, Some(64_000));
        assert!(
            (at(20.0).loss - 0.02).abs() < 1e-12,
            "later steps keep the rest"
        );
        assert_eq!(at(41.0).bandwidth, None);
        assert_eq!(s.next_change(Duration::ZERO), Some(Duration::from_secs(20)));
        assert_eq!(s.next_change(Duration::from_secs(41)), None);
    }

    #[test]
    fn a_bad_script_says_where() {
        let base = Faults::default();
        for (text, want) in [
            ("latency=40", "step 1: bad value `40` for latency"),
            ("speed=3", "step 1: unknown setting `speed`"),
            ("loss=101", "step 1: bad value `101` for loss"),
            ("latency=1ms; latency=2ms", "step 2: bad value"),
            (
                "after 2s: loss=1; after 1s: loss=2",
                "step 2: `after` must come later",
            ),
            ("after 2s:", "step 1 changes nothing"),
            ("loss", "step 1: `loss` is not KEY=VALUE"),
            ("bandwidth=fast", "step 1: bad value `fast` for bandwidth"),
            (" ; ", "the script is empty"),
            (
                "after 2s loss=1",
                "step 1: bad value `2s loss=1` for after: a `:`",
            ),
        ] {
            let e = FaultScript::parse(&base, text).unwrap_err().to_string();
            assert!(e.starts_with(want), "{text}: {e}");
        }
    }
}
