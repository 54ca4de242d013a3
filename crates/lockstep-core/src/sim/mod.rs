//! A seeded, simulated network with a virtual clock, for tests and tools.
//!
//! [`SimNetwork`] carries datagrams between [`PeerId`]s with per-link
//! latency, jitter, loss, duplication, reordering, a size limit and timed
//! partitions. [`Sim`] drives any number of [`Endpoint`]s over it: the clock
//! jumps straight to the next delivery, timer or game-loop tick, so a minute
//! of play takes milliseconds and no test ever sleeps.
//!
//! Everything random comes from one seed. Each link direction has its own
//! generator derived from the seed and the two peer ids, so a run is exactly
//! reproducible from its seed, and traffic on one link never changes what
//! happens on another.
//!
//! ```
//! use lockstep_core::sim::{LinkConditions, Outcome, Sim, SimNetwork};
//! use lockstep_core::{Instant, MeshConfig, MeshSession, PeerId, PlayerId, Roster};
//! use std::time::Duration;
//!
//! let roster = Roster::new().player(PeerId(0), PlayerId(0)).player(PeerId(1), PlayerId(1));
//! let lossy = LinkConditions { latency: Duration::from_millis(40), loss: 0.2, ..LinkConditions::default() };
//! let mut sim = Sim::new(SimNetwork::new(7, lossy));
//! for id in [PeerId(0), PeerId(1)] {
//!     sim.add(id, MeshSession::<u8>::new(MeshConfig::default(), roster.clone(), id, Instant::ZERO)?);
//! }
//! let outcome = sim.run(
//!     Instant::from_millis(60_000),
//!     Duration::from_millis(33),
//!     |_, s, _| {
//!         let _ = s.commit_local(1);
//!         while s.advance().is_some() {}
//!     },
//!     |sim| sim.endpoints().all(|(_, s)| s.frame().get() >= 100),
//! );
//! assert_eq!(outcome, Outcome::Done);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::{Endpoint, Instant, PeerId};
use core::time::Duration;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

/// A small, fast, seedable generator (SplitMix64). Good statistics for
/// simulation; not for cryptography.
#[derive(Debug, Clone)]
pub struct SimRng(u64);

impl SimRng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The generator's whole state: [`SimRng::new`] of it draws the same
    /// numbers from here on (what a snapshot of a simulation keeps).
    pub fn state(&self) -> u64 {
        self.0
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
        }
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }

    /// Uniform in `[0, max]`.
    pub fn duration_up_to(&mut self, max: Duration) -> Duration {
        let micros = u64::try_from(max.as_micros()).unwrap_or(u64::MAX);
        Duration::from_micros(self.below(micros.saturating_add(1)))
    }
}

/// What one direction of a link does to datagrams.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConditions {
    /// One-way delay.
    pub latency: Duration,
    /// Each datagram's delay varies uniformly by up to this much either way.
    pub jitter: Duration,
    /// Probability a datagram is lost.
    pub loss: f64,
    /// Probability a datagram is delivered twice (independently delayed).
    pub duplicate: f64,
    /// Probability a datagram is held back by up to an extra `latency +
    /// jitter`, so that later ones overtake it.
    pub reorder: f64,
    /// Datagrams larger than this are dropped, like an MTU.
    pub max_datagram: Option<usize>,
    /// The link's capacity in bytes per second (`None`: unlimited).
    /// Datagrams queue behind each other at this rate; one that would wait
    /// more than [`MAX_QUEUE_DELAY`] to start is dropped, as a router's
    /// full buffer drops it.
    pub bandwidth: Option<u64>,
}

/// The longest a datagram waits in a bandwidth-limited link's queue before
/// the link drops it instead (the same as `lockstep-net`'s link
/// conditioner).
pub const MAX_QUEUE_DELAY: Duration = Duration::from_secs(1);

impl Default for LinkConditions {
    fn default() -> Self {
        Self {
            latency: Duration::from_millis(20),
            jitter: Duration::ZERO,
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            max_datagram: None,
            bandwidth: None,
        }
    }
}

/// Counters for the whole network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NetStats {
    /// Datagrams handed to the network.
    pub sent: u64,
    /// Datagrams delivered (duplicates count twice).
    pub delivered: u64,
    /// Datagrams dropped by loss, partition, size limit or a frozen receiver.
    pub dropped: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Bytes handed to the network.
    pub bytes: u64,
}

/// A datagram arriving.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The sender.
    pub from: PeerId,
    /// The receiver.
    pub to: PeerId,
    /// The bytes.
    pub bytes: Vec<u8>,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct InFlight {
    at: Instant,
    seq: u64,
    from: PeerId,
    to: PeerId,
    bytes: Vec<u8>,
}

/// One direction of a link: decides what happens to each datagram sent
/// on it under its [`LinkConditions`]. The simulated network and
/// `lockstep-net`'s link conditioner (`ImpairedLink`, behind `lockstep
/// netsim` and the fault-injecting transport) both ask it, so a network
/// tried in one behaves the same in the other.
///
/// The rules, in order: a datagram over `max_datagram` is dropped; one is
/// lost with probability `loss`; with `bandwidth`, datagrams go out one
/// after another at that rate, and one that would wait more than
/// [`MAX_QUEUE_DELAY`] to start is dropped; it is duplicated with
/// probability `duplicate`; each copy arrives `latency` (plus its time in
/// the queue) later, varied uniformly by up to `jitter` either way, and,
/// with probability `reorder`, held back by up to `latency + jitter` more.
///
/// ```
/// use lockstep_core::sim::{Fate, LinkConditions, LinkModel};
/// use lockstep_core::Instant;
/// use std::time::Duration;
/// let mut link = LinkModel::new(LinkConditions::default(), 7);
/// let fate = link.fate(Instant::ZERO, 100);
/// assert_eq!(fate, Fate::Arrives { after: Duration::from_millis(20), copy: None });
/// ```
#[derive(Debug, Clone)]
pub struct LinkModel {
    conditions: LinkConditions,
    rng: SimRng,
    /// When the datagrams queued so far have all gone out (with
    /// `bandwidth`).
    busy_until: Instant,
}

/// What a link does with one datagram (see [`LinkModel`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Larger than the link's `max_datagram`.
    TooLarge,
    /// Lost at random.
    Lost,
    /// The link's queue would hold it too long: dropped.
    QueueFull,
    /// It arrives `after` it was sent, and a duplicate `copy` after.
    Arrives {
        /// When it arrives, after it was sent.
        after: Duration,
        /// When its duplicate arrives, if it is duplicated.
        copy: Option<Duration>,
    },
}

impl LinkModel {
    /// A link with `conditions`, its randomness from `seed`.
    pub fn new(conditions: LinkConditions, seed: u64) -> Self {
        Self {
            conditions,
            rng: SimRng::new(seed),
            busy_until: Instant::ZERO,
        }
    }

    /// The conditions in force.
    pub fn conditions(&self) -> &LinkConditions {
        &self.conditions
    }

    /// Changes the conditions for datagrams sent from now on.
    pub fn set_conditions(&mut self, conditions: LinkConditions) {
        self.conditions = conditions;
    }

    /// The fate of a datagram of `len` bytes sent at `now` (times never
    /// going backwards).
    pub fn fate(&mut self, now: Instant, len: usize) -> Fate {
        let c = &self.conditions;
        if c.max_datagram.is_some_and(|m| len > m) {
            return Fate::TooLarge;
        }
        if self.rng.chance(c.loss) {
            return Fate::Lost;
        }
        let mut queued = Duration::ZERO;
        if let Some(rate) = c.bandwidth.filter(|r| *r > 0) {
            let start = self.busy_until.max(now);
            if start - now > MAX_QUEUE_DELAY {
                return Fate::QueueFull;
            }
            let nanos = (len as u128 * 1_000_000_000) / u128::from(rate);
            let wire = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
            self.busy_until = start + wire;
            queued = self.busy_until - now;
        }
        let copies = if self.rng.chance(c.duplicate) { 2 } else { 1 };
        let mut delays = [Duration::ZERO; 2];
        for d in delays.iter_mut().take(copies) {
            let spread = self.rng.duration_up_to(c.jitter * 2);
            *d = (c.latency + queued + spread).saturating_sub(c.jitter);
            if self.rng.chance(c.reorder) {
                *d += self.rng.duration_up_to(c.latency + c.jitter);
            }
        }
        Fate::Arrives {
            after: delays[0],
            copy: (copies > 1).then_some(delays[1]),
        }
    }
}

#[derive(Debug, Clone)]
struct Partition {
    side_a: Vec<PeerId>,
    side_b: Vec<PeerId>,
    from: Instant,
    until: Instant,
}

impl Partition {
    fn cuts(&self, a: PeerId, b: PeerId, at: Instant) -> bool {
        at >= self.from
            && at < self.until
            && ((self.side_a.contains(&a) && self.side_b.contains(&b))
                || (self.side_a.contains(&b) && self.side_b.contains(&a)))
    }
}

/// Datagrams in flight between peers, under a virtual clock.
#[derive(Debug)]
pub struct SimNetwork {
    now: Instant,
    seed: u64,
    default: LinkConditions,
    links: BTreeMap<(PeerId, PeerId), LinkModel>,
    queue: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    partitions: Vec<Partition>,
    stats: NetStats,
}

impl SimNetwork {
    /// A network where every link has `default` conditions, randomised
    /// from `seed`.
    pub fn new(seed: u64, default: LinkConditions) -> Self {
        Self {
            now: Instant::ZERO,
            seed,
            default,
            links: BTreeMap::new(),
            queue: BinaryHeap::new(),
            seq: 0,
            partitions: Vec::new(),
            stats: NetStats::default(),
        }
    }

    /// The virtual time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// The seed this network was built from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Counters so far.
    pub fn stats(&self) -> NetStats {
        self.stats
    }

    fn link(&mut self, from: PeerId, to: PeerId) -> &mut LinkModel {
        let (seed, default) = (self.seed, &self.default);
        self.links.entry((from, to)).or_insert_with(|| {
            let mut mix = SimRng::new(
                seed ^ (u64::from(from.0) << 32 | u64::from(to.0))
                    .wrapping_mul(0xA24B_AED4_963E_E407),
            );
            LinkModel::new(default.clone(), mix.next_u64())
        })
    }

    /// Sets the conditions of the link from `from` to `to` (one direction).
    pub fn set_link(&mut self, from: PeerId, to: PeerId, conditions: LinkConditions) {
        self.link(from, to).set_conditions(conditions);
    }

    /// Sets both directions between `a` and `b`.
    pub fn set_link_both(&mut self, a: PeerId, b: PeerId, conditions: LinkConditions) {
        self.set_link(a, b, conditions.clone());
        self.set_link(b, a, conditions);
    }

    /// Drops every datagram sent between a peer of `side_a` and a peer of
    /// `side_b` (both ways) from `from` until `until`.
    pub fn partition(
        &mut self,
        side_a: &[PeerId],
        side_b: &[PeerId],
        from: Instant,
        until: Instant,
    ) {
        self.partitions.push(Partition {
            side_a: side_a.to_vec(),
            side_b: side_b.to_vec(),
            from,
            until,
        });
    }

    /// Hands a datagram to the network at the current time.
    pub fn send(&mut self, from: PeerId, to: PeerId, bytes: &[u8]) {
        self.stats.sent += 1;
        self.stats.bytes += bytes.len() as u64;
        let now = self.now;
        if self.partitions.iter().any(|p| p.cuts(from, to, now)) {
            self.stats.dropped += 1;
            return;
        }
        let (after, copy) = match self.link(from, to).fate(now, bytes.len()) {
            Fate::Arrives { after, copy } => (after, copy),
            Fate::TooLarge | Fate::Lost | Fate::QueueFull => {
                self.stats.dropped += 1;
                return;
            }
        };
        let delays: Vec<Duration> = core::iter::once(after).chain(copy).collect();
        let copies = delays.len();
        self.stats.duplicated += copies as u64 - 1;
        for d in delays {
            self.seq += 1;
            self.queue.push(Reverse(InFlight {
                at: now + d,
                seq: self.seq,
                from,
                to,
                bytes: bytes.to_vec(),
            }));
        }
    }

    /// When the next datagram arrives, if any is in flight.
    pub fn next_delivery(&self) -> Option<Instant> {
        self.queue.peek().map(|Reverse(f)| f.at)
    }

    /// Moves the clock forward to `t` (never backwards).
    pub fn advance_to(&mut self, t: Instant) {
        self.now = self.now.max(t);
    }

    /// The next datagram due by now, if any.
    pub fn pop_due(&mut self) -> Option<Delivery> {
        if self.next_delivery()? > self.now {
            return None;
        }
        let Reverse(f) = self.queue.pop()?;
        self.stats.delivered += 1;
        Some(Delivery {
            from: f.from,
            to: f.to,
            bytes: f.bytes,
        })
    }

    fn count_dropped(&mut self) {
        self.stats.delivered -= 1;
        self.stats.dropped += 1;
    }
}

/// How [`Sim::run`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The `done` condition held.
    Done,
    /// The deadline passed first.
    TimedOut,
    /// Time stopped moving: some endpoint keeps asking for a timeout at or
    /// before the current time without its state changing (an endpoint bug).
    Livelock {
        /// The instant the clock stuck at.
        at: Instant,
    },
}

#[derive(Debug)]
struct Node<E> {
    endpoint: E,
    frozen: bool,
    rejected: u64,
}

/// Several endpoints on one [`SimNetwork`], driven under its virtual clock.
#[derive(Debug)]
pub struct Sim<E> {
    /// The network; adjust links and partitions at any time.
    pub net: SimNetwork,
    nodes: BTreeMap<PeerId, Node<E>>,
    buf: Vec<u8>,
    next_app: Option<Instant>,
}

impl<E: Endpoint> Sim<E> {
    /// A simulation over `net` with no endpoints yet.
    pub fn new(net: SimNetwork) -> Self {
        Self {
            net,
            nodes: BTreeMap::new(),
            buf: Vec::new(),
            next_app: None,
        }
    }

    /// Adds an endpoint reachable as `id`.
    pub fn add(&mut self, id: PeerId, endpoint: E) {
        self.nodes.insert(
            id,
            Node {
                endpoint,
                frozen: false,
                rejected: 0,
            },
        );
    }

    /// Takes endpoint `id` out (to add it again under another id, as a
    /// process that moved to a new socket).
    pub fn remove(&mut self, id: PeerId) -> Option<E> {
        self.nodes.remove(&id).map(|n| n.endpoint)
    }

    /// The virtual time.
    pub fn now(&self) -> Instant {
        self.net.now()
    }

    /// The endpoint `id`, if there is one.
    pub fn endpoint(&self, id: PeerId) -> Option<&E> {
        self.nodes.get(&id).map(|n| &n.endpoint)
    }

    /// The endpoint `id`, mutably.
    pub fn endpoint_mut(&mut self, id: PeerId) -> Option<&mut E> {
        self.nodes.get_mut(&id).map(|n| &mut n.endpoint)
    }

    /// Every endpoint, frozen or not, in id order.
    pub fn endpoints(&self) -> impl Iterator<Item = (PeerId, &E)> + '_ {
        self.nodes.iter().map(|(id, n)| (*id, &n.endpoint))
    }

    /// Endpoints that are not frozen, in id order.
    pub fn live(&self) -> impl Iterator<Item = (PeerId, &E)> + '_ {
        self.nodes
            .iter()
            .filter(|(_, n)| !n.frozen)
            .map(|(id, n)| (*id, &n.endpoint))
    }

    /// Stops `id` dead, as if its process hung or its cable was cut: it
    /// receives nothing, sends nothing, and its timers and game loop stop.
    pub fn freeze(&mut self, id: PeerId) {
        if let Some(n) = self.nodes.get_mut(&id) {
            n.frozen = true;
        }
    }

    /// Whether `id` is frozen.
    pub fn is_frozen(&self, id: PeerId) -> bool {
        self.nodes.get(&id).is_some_and(|n| n.frozen)
    }

    /// Datagrams `id` rejected so far.
    pub fn rejected(&self, id: PeerId) -> u64 {
        self.nodes.get(&id).map_or(0, |n| n.rejected)
    }

    /// Runs until `done` holds or the clock passes `until`.
    ///
    /// Every `period` of virtual time, `app` is called for each live
    /// endpoint, as a game loop would run (commit input, run frames). Between
    /// those calls the clock jumps to the next delivery or timer. `done` is
    /// checked before every step.
    pub fn run(
        &mut self,
        until: Instant,
        period: Duration,
        mut app: impl FnMut(PeerId, &mut E, Instant),
        mut done: impl FnMut(&Self) -> bool,
    ) -> Outcome {
        let mut last = self.now();
        let mut same_instant = 0u32;
        loop {
            if done(self) {
                return Outcome::Done;
            }
            let next_app = *self.next_app.get_or_insert(self.now());
            let mut t = next_app;
            if let Some(d) = self.net.next_delivery() {
                t = t.min(d);
            }
            for n in self.nodes.values().filter(|n| !n.frozen) {
                if let Some(w) = n.endpoint.poll_timeout() {
                    t = t.min(w);
                }
            }
            let t = t.max(self.now());
            if t > until {
                self.net.advance_to(until);
                return Outcome::TimedOut;
            }
            if t == last {
                same_instant += 1;
                if same_instant > 100_000 {
                    return Outcome::Livelock { at: t };
                }
            } else {
                same_instant = 0;
                last = t;
            }
            self.step(t, period, &mut app);
        }
    }

    fn step(
        &mut self,
        t: Instant,
        period: Duration,
        app: &mut impl FnMut(PeerId, &mut E, Instant),
    ) {
        self.net.advance_to(t);
        let now = self.now();
        while let Some(d) = self.net.pop_due() {
            match self.nodes.get_mut(&d.to) {
                Some(n) if !n.frozen => {
                    if n.endpoint.handle_datagram(d.from, &d.bytes, now).is_err() {
                        n.rejected += 1;
                    }
                }
                _ => self.net.count_dropped(),
            }
        }
        for n in self.nodes.values_mut().filter(|n| !n.frozen) {
            if n.endpoint.poll_timeout().is_some_and(|w| w <= now) {
                n.endpoint.handle_timeout(now);
            }
        }
        if self.next_app.is_some_and(|a| a <= now) {
            for (id, n) in self.nodes.iter_mut().filter(|(_, n)| !n.frozen) {
                n.endpoint.handle_timeout(now);
                app(*id, &mut n.endpoint, now);
            }
            self.next_app = Some(now + period);
        }
        for (id, n) in self.nodes.iter_mut().filter(|(_, n)| !n.frozen) {
            while let Some(tx) = n.endpoint.poll_transmit(&mut self.buf) {
                self.net.send(*id, tx.destination, &self.buf[..tx.len]);
            }
        }
    }
}

/// Either end of the star topology, as one [`Endpoint`] for a [`Sim`]: a
/// sequencer and its clients on one simulated network.
///
/// ```
/// use lockstep_core::sequenced::{ClientConfig, ClientSession, Sequencer, SequencerConfig};
/// use lockstep_core::sim::{LinkConditions, Sim, SimNetwork, StarNode};
/// use lockstep_core::{Instant, PeerId};
/// let mut sim = Sim::new(SimNetwork::new(7, LinkConditions::default()));
/// let server = Sequencer::<u8>::new(SequencerConfig::default(), Instant::ZERO)?;
/// sim.add(PeerId(0), StarNode::Server(Box::new(server)));
/// let client = ClientSession::new(ClientConfig::default(), PeerId(0), Instant::ZERO)?;
/// sim.add(PeerId(1), StarNode::Client(Box::new(client)));
/// # Ok::<(), lockstep_core::ConfigError>(())
/// ```
#[derive(Debug)]
pub enum StarNode<I: crate::Input> {
    /// The sequencer.
    Server(Box<crate::sequenced::Sequencer<I>>),
    /// A client.
    Client(Box<crate::sequenced::ClientSession<I>>),
}

impl<I: crate::Input> StarNode<I> {
    /// The client, if this is one.
    pub fn client(&self) -> Option<&crate::sequenced::ClientSession<I>> {
        match self {
            Self::Client(c) => Some(c),
            Self::Server(_) => None,
        }
    }

    /// The bytes this end has sent.
    pub fn bytes_sent(&self) -> u64 {
        match self {
            Self::Server(s) => s.stats().bytes_sent,
            Self::Client(c) => c.stats().bytes_sent,
        }
    }
}

impl<I: crate::Input> Endpoint for StarNode<I> {
    type Error = String;

    fn handle_datagram(&mut self, from: PeerId, d: &[u8], now: Instant) -> Result<(), String> {
        match self {
            Self::Server(s) => s.handle_datagram(from, d, now).map_err(|e| e.to_string()),
            Self::Client(c) => c.handle_datagram(from, d, now).map_err(|e| e.to_string()),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        match self {
            Self::Server(s) => s.handle_timeout(now),
            Self::Client(c) => c.handle_timeout(now),
        }
    }

    fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<crate::Transmit> {
        match self {
            Self::Server(s) => s.poll_transmit(buf),
            Self::Client(c) => c.poll_transmit(buf),
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self {
            Self::Server(s) => s.poll_timeout(),
            Self::Client(c) => c.poll_timeout(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_reproducible_and_roughly_uniform() {
        let mut a = SimRng::new(42);
        let mut b = SimRng::new(42);
        assert_eq!(a.next_u64(), b.next_u64());
        let hits = (0..10_000).filter(|_| a.chance(0.25)).count();
        assert!((2_200..2_800).contains(&hits), "{hits}");
        assert!((0..1000).all(|_| a.below(7) < 7));
    }

    #[test]
    fn network_delays_drops_and_partitions() {
        let (a, b) = (PeerId(1), PeerId(2));
        let mut net = SimNetwork::new(1, LinkConditions::default());
        net.send(a, b, b"hi");
        assert_eq!(net.next_delivery(), Some(Instant::from_millis(20)));
        assert_eq!(net.pop_due(), None);
        net.advance_to(Instant::from_millis(20));
        assert_eq!(net.pop_due().map(|d| d.bytes), Some(b"hi".to_vec()));

        net.partition(&[a], &[b], Instant::ZERO, Instant::from_millis(100));
        net.send(b, a, b"cut");
        assert_eq!(net.next_delivery(), None);
        net.advance_to(Instant::from_millis(100));
        net.send(b, a, b"healed");
        assert!(net.next_delivery().is_some());

        net.set_link(
            a,
            b,
            LinkConditions {
                loss: 1.0,
                ..LinkConditions::default()
            },
        );
        net.send(a, b, b"lost");
        assert_eq!(net.stats().dropped, 2);
    }

    #[test]
    fn a_limited_link_queues_datagrams_and_drops_past_a_second() {
        let (a, b) = (PeerId(1), PeerId(2));
        let slow = LinkConditions {
            latency: Duration::from_millis(10),
            bandwidth: Some(10_000),
            ..LinkConditions::default()
        };
        let mut net = SimNetwork::new(1, slow);
        // 1,000 bytes at 10 kB/s: 100 ms each, one after another; one that
        // would wait more than a second to start is dropped (the one on the
        // wire and ten waiting are held).
        for _ in 0..20 {
            net.send(a, b, &[0; 1000]);
        }
        assert_eq!(net.stats().dropped, 9);
        let mut arrivals = Vec::new();
        while let Some(at) = net.next_delivery() {
            net.advance_to(at);
            while net.pop_due().is_some() {
                arrivals.push(at);
            }
        }
        let expected: Vec<Instant> = (1..=11)
            .map(|k| Instant::from_millis(100 * k + 10))
            .collect();
        assert_eq!(arrivals, expected);
        // The queue drained: a datagram now goes at once.
        net.send(a, b, &[0; 10]);
        assert_eq!(
            net.next_delivery(),
            Some(net.now() + Duration::from_millis(11))
        );
    }

    #[test]
    fn links_have_independent_randomness() {
        // Traffic on one link must not change the fate of another link's
        // datagrams.
        let lossy = LinkConditions {
            loss: 0.5,
            ..LinkConditions::default()
        };
        let fate = |extra: usize| {
            let mut net = SimNetwork::new(9, lossy.clone());
            for _ in 0..extra {
                net.send(PeerId(3), PeerId(4), b"x");
            }
            let before = net.stats().dropped;
            for _ in 0..64 {
                net.send(PeerId(1), PeerId(2), b"y");
            }
            net.stats().dropped - before
        };
        assert_eq!(fate(0), fate(17));
    }
}
