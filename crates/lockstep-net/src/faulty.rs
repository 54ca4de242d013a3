//! Network impairment for tests and demos.

use crate::{Transport, TransportError};
use lockstep_core::PeerId;
use lockstep_core::sim::SimRng;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

/// What a [`FaultyTransport`] does to every datagram, each way.
#[derive(Debug, Clone, PartialEq)]
pub struct Faults {
    /// Probability a datagram is lost.
    pub loss: f64,
    /// One-way delay added.
    pub latency: Duration,
    /// The delay varies uniformly by up to this much either way (which also
    /// reorders datagrams).
    pub jitter: Duration,
    /// Probability a datagram is delivered twice.
    pub duplicate: f64,
    /// Probability a datagram is held back by up to an extra `latency`.
    pub reorder: f64,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            loss: 0.0,
            latency: Duration::ZERO,
            jitter: Duration::ZERO,
            duplicate: 0.0,
            reorder: 0.0,
        }
    }
}

type Held = BinaryHeap<Reverse<(Instant, u64, PeerId, Vec<u8>)>>;

/// Wraps a transport and impairs everything it sends and receives, from a
/// seed, in real time. Held datagrams move on whenever `send` or `recv` is
/// called, which a game loop does every iteration.
///
/// At most 4096 datagrams are held each way; beyond that new ones are lost.
#[derive(Debug)]
pub struct FaultyTransport<T> {
    inner: T,
    faults: Faults,
    rng: SimRng,
    outgoing: Held,
    incoming: Held,
    seq: u64,
}

const HELD_CAP: usize = 4096;

impl<T: Transport> FaultyTransport<T> {
    /// Impairs `inner` with `faults`, randomised from `seed`.
    pub fn new(inner: T, faults: Faults, seed: u64) -> Self {
        Self {
            inner,
            faults,
            rng: SimRng::new(seed),
            outgoing: BinaryHeap::new(),
            incoming: BinaryHeap::new(),
            seq: 0,
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
        self.faults = faults;
    }

    /// Decides the fate of one datagram: when each copy is due, if any.
    fn schedule(&mut self, held: Held, peer: PeerId, datagram: &[u8]) -> Held {
        let mut held = held;
        let f = self.faults.clone();
        if self.rng.chance(f.loss) {
            return held;
        }
        let copies = if self.rng.chance(f.duplicate) { 2 } else { 1 };
        for _ in 0..copies {
            let jitter = self.rng.duration_up_to(f.jitter * 2);
            let mut delay = (f.latency + jitter).saturating_sub(f.jitter);
            if self.rng.chance(f.reorder) {
                delay += self.rng.duration_up_to(f.latency);
            }
            if held.len() < HELD_CAP {
                self.seq += 1;
                held.push(Reverse((
                    Instant::now() + delay,
                    self.seq,
                    peer,
                    datagram.to_vec(),
                )));
            }
        }
        held
    }

    fn release_outgoing(&mut self) -> Result<(), TransportError> {
        let now = Instant::now();
        while self
            .outgoing
            .peek()
            .is_some_and(|Reverse((at, ..))| *at <= now)
        {
            if let Some(Reverse((_, _, to, bytes))) = self.outgoing.pop() {
                self.inner.send(to, &bytes)?;
            }
        }
        Ok(())
    }
}

impl<T: Transport> Transport for FaultyTransport<T> {
    fn send(&mut self, to: PeerId, datagram: &[u8]) -> Result<(), TransportError> {
        let held = std::mem::take(&mut self.outgoing);
        self.outgoing = self.schedule(held, to, datagram);
        self.release_outgoing()
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<Option<(PeerId, usize)>, TransportError> {
        self.release_outgoing()?;
        while let Some((from, len)) = self.inner.recv(buf)? {
            let held = std::mem::take(&mut self.incoming);
            let bytes = buf[..len].to_vec();
            self.incoming = self.schedule(held, from, &bytes);
        }
        let now = Instant::now();
        if self
            .incoming
            .peek()
            .is_some_and(|Reverse((at, ..))| *at <= now)
            && let Some(Reverse((_, _, from, bytes))) = self.incoming.pop()
        {
            let len = bytes.len().min(buf.len());
            buf[..len].copy_from_slice(&bytes[..len]);
            return Ok(Some((from, len)));
        }
        Ok(None)
    }
}
