//! Moving a game state over the network: compressed, cut into chunks that
//! each carry a checksum, acknowledged and resent on loss, paced, and
//! bounded on both sides.
//!
//! A [`Snapshot`] is the game's state right after a confirmed tick, as bytes
//! only the game understands. The engine moves it: a [`SnapshotSender`]
//! compresses it (LZ4) and hands out chunks as datagram space allows; a
//! [`SnapshotReceiver`] checks every chunk, reassembles, checks the whole
//! and gives the snapshot back. Between them, [`SnapshotAck`]s say which
//! chunks arrived. Both are sans-IO: the session that owns them decides
//! which datagram a chunk rides in.
//!
//! ```
//! use lockstep_core::snapshot::{Snapshot, SnapshotReceiver, SnapshotSender, SnapshotLimits};
//! use lockstep_core::{Instant, Tick};
//!
//! let state = Snapshot::new(Tick::new(90), vec![7; 5_000]);
//! let limits = SnapshotLimits::default();
//! let mut tx = SnapshotSender::new(1, &state, 1_000, &limits)?;
//! let mut rx = SnapshotReceiver::new(limits);
//! let now = Instant::ZERO;
//! let mut done = None;
//! while done.is_none() {
//!     while let Some(chunk) = tx.next_chunk(now) {
//!         done = rx.take(&chunk.as_message())?;
//!     }
//!     if let Some(ack) = rx.ack() {
//!         tx.take_ack(&ack, now);
//!     }
//! }
//! assert_eq!(done, Some(state));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::wire::{DatagramWriter, Message, SnapshotAck, SnapshotChunk};
use crate::{Instant, Tick};
use core::time::Duration;
use std::sync::Arc;
use xxhash_rust::xxh3::xxh3_64;

pub(crate) mod donor;
mod receive;
mod send;

pub use receive::SnapshotReceiver;
pub use send::SnapshotSender;

/// The game's state right after `tick` ran, as bytes the game produced and
/// alone can restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The last tick the state includes.
    pub tick: Tick,
    /// The state.
    pub bytes: Vec<u8>,
}

impl Snapshot {
    /// A snapshot of the state after `tick`.
    pub fn new(tick: Tick, bytes: Vec<u8>) -> Self {
        Self { tick, bytes }
    }

    /// xxh3-64 of the bytes: what the whole is checked against.
    pub fn hash(&self) -> u64 {
        xxh3_64(&self.bytes)
    }
}

/// Bounds on snapshots, the same for sending and receiving.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotLimits {
    /// The largest snapshot (uncompressed) sent or taken.
    pub max_len: usize,
    /// Chunks sent and not yet acknowledged, at most.
    pub window: u32,
    /// How long an unacknowledged chunk waits before it is sent again.
    pub resend_after: Duration,
}

impl Default for SnapshotLimits {
    fn default() -> Self {
        Self {
            max_len: 16 << 20,
            window: 64,
            resend_after: Duration::from_millis(200),
        }
    }
}

/// Why a snapshot could not be sent or was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// The snapshot is larger than the configured cap.
    #[error("snapshot of {len} bytes over the {max}-byte cap")]
    TooLarge {
        /// Its size (uncompressed).
        len: u64,
        /// The cap.
        max: usize,
    },
    /// No room for a chunk of at least 64 bytes in a datagram.
    #[error("chunks of {0} bytes are too small")]
    ChunkTooSmall(usize),
    /// A chunk's bytes do not match its checksum.
    #[error("snapshot {id} chunk {index}: checksum mismatch")]
    BadChunk {
        /// The snapshot.
        id: u32,
        /// The chunk.
        index: u32,
    },
    /// A chunk disagrees with the snapshot's earlier chunks (size, count,
    /// tick or hash), or its length does not fit its position.
    #[error("snapshot {id} chunk {index}: {what}")]
    Inconsistent {
        /// The snapshot.
        id: u32,
        /// The chunk.
        index: u32,
        /// What does not fit.
        what: &'static str,
    },
    /// Every chunk arrived, but the whole does not decompress to its size
    /// or does not match its hash.
    #[error("snapshot {id}: the reassembled state does not match its hash")]
    BadWhole {
        /// The snapshot.
        id: u32,
    },
    /// `provide_snapshot` was handed a state the session has no use for,
    /// and dropped it: none is wanted now, or not the state after `tick`.
    /// A sequenced session wants exactly the state right after the tick
    /// [`Event::SnapshotRequested`](crate::Event::SnapshotRequested) named
    /// (run that frame, then hand the state over before running the next;
    /// a game that ran past it cannot answer, and the sequencer asks
    /// someone else); a mesh, any state from that tick up to the last
    /// frame run.
    #[error("the state after tick {tick} was not asked for ({})", wanted(*asked))]
    NotAsked {
        /// The tick of the state handed over.
        tick: Tick,
        /// The tick the state asked for follows, if one is asked for.
        asked: Option<Tick>,
    },
}

/// What [`SnapshotError::NotAsked`] says is wanted.
fn wanted(asked: Option<Tick>) -> String {
    match asked {
        Some(t) => format!("the state after tick {t} is"),
        None => "no state is wanted now".into(),
    }
}

/// A chunk to send, borrowed from its [`SnapshotSender`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutgoingChunk<'a> {
    msg: SnapshotChunk<'a>,
}

impl<'a> OutgoingChunk<'a> {
    /// The wire message carrying it.
    pub fn as_message(&self) -> SnapshotChunk<'a> {
        self.msg
    }
}

/// The checksum of one chunk: the low 32 bits of xxh3-64 over its bytes.
pub fn chunk_checksum(data: &[u8]) -> u32 {
    xxh3_64(data) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::SimRng;

    fn pseudo_state(rng: &mut SimRng, len: usize) -> Vec<u8> {
        // Compressible like a game state: runs and repeats, some noise.
        let mut v = Vec::with_capacity(len);
        while v.len() < len {
            let b = rng.next_u64() as u8;
            let run = 1 + rng.below(12) as usize;
            v.extend(std::iter::repeat_n(b, run));
        }
        v.truncate(len);
        v
    }

    /// Sends `state` through a lossy, duplicating, reordering channel;
    /// returns the snapshot received and the chunks sent.
    fn transfer(seed: u64, state: &Snapshot, loss: f64) -> (Snapshot, usize) {
        let limits = SnapshotLimits::default();
        let mut tx = SnapshotSender::new(9, state, 1_100, &limits).unwrap();
        let mut rx = SnapshotReceiver::new(limits);
        let mut rng = SimRng::new(seed);
        let mut now = Instant::ZERO;
        let mut sent = 0;
        let mut in_flight: Vec<Vec<u8>> = Vec::new();
        for _ in 0..100_000 {
            now += Duration::from_millis(10);
            while let Some(c) = tx.next_chunk(now) {
                sent += 1;
                let mut buf = Vec::new();
                let mut w = DatagramWriter::new(&mut buf, Tick::ZERO, 1_200);
                w.push(&Message::SnapshotChunk(c.as_message())).unwrap();
                w.finish();
                if !rng.chance(loss) {
                    in_flight.push(buf.clone());
                }
                if rng.chance(0.1) {
                    in_flight.push(buf);
                }
            }
            // Deliver in a shuffled order.
            while !in_flight.is_empty() {
                let i = rng.below(in_flight.len() as u64) as usize;
                let buf = in_flight.swap_remove(i);
                let d = crate::wire::Datagram::decode(&buf, Tick::ZERO).unwrap();
                for m in &d.messages {
                    if let Message::SnapshotChunk(c) = m
                        && let Some(done) = rx.take(c).unwrap()
                    {
                        return (done, sent);
                    }
                }
            }
            if !rng.chance(loss)
                && let Some(a) = rx.ack()
            {
                tx.take_ack(&a, now);
            }
        }
        panic!("transfer did not finish");
    }

    #[test]
    fn a_snapshot_crosses_loss_duplication_and_reordering_intact() {
        for seed in 0..40u64 {
            let mut rng = SimRng::new(seed);
            let len = rng.below(300_000) as usize;
            let state = Snapshot::new(Tick::new(seed as u32 * 7), pseudo_state(&mut rng, len));
            let loss = (seed % 5) as f64 * 0.1;
            let (got, _) = transfer(seed, &state, loss);
            assert_eq!(got, state, "seed {seed}");
        }
    }

    #[test]
    fn an_empty_state_still_travels() {
        let state = Snapshot::new(Tick::new(1), Vec::new());
        let (got, sent) = transfer(1, &state, 0.0);
        assert_eq!(got, state);
        assert_eq!(sent, 1);
    }

    #[test]
    fn without_loss_each_chunk_goes_once() {
        let mut rng = SimRng::new(3);
        let state = Snapshot::new(Tick::new(5), pseudo_state(&mut rng, 200_000));
        let tx = SnapshotSender::new(1, &state, 1_100, &SnapshotLimits::default()).unwrap();
        let count = tx.count() as usize;
        assert!(tx.packed_len() < 200_000, "compressed: {}", tx.packed_len());
        let (got, sent) = transfer(3, &state, 0.0);
        assert_eq!(got, state);
        // Duplicates in the channel do not make the sender repeat itself.
        assert_eq!(sent, count);
    }

    #[test]
    fn a_receiver_that_never_acknowledges_gets_four_chunks_then_probes() {
        let mut rng = SimRng::new(4);
        let state = Snapshot::new(Tick::new(5), pseudo_state(&mut rng, 200_000));
        let mut tx = SnapshotSender::new(1, &state, 1_100, &SnapshotLimits::default()).unwrap();
        let mut sent = 0;
        let mut now = Instant::ZERO;
        // A minute of silence from the receiver (its address forged, say).
        for _ in 0..600 {
            while tx.next_chunk(now).is_some() {
                sent += 1;
            }
            now += Duration::from_millis(100);
        }
        // Four at first, resent in three rounds of a halving window (4, 2,
        // 1), then one probe every 1.6 s: 48 chunks of 1.1 KB in a minute.
        assert!(
            sent <= 4 + 4 + 2 + 1 + 60 / 2 * 10 / 8 + 1,
            "{sent} chunks for no acknowledgement"
        );
        assert!(sent >= 4);
    }

    /// A chunk held with its own bytes.
    struct Owned {
        meta: SnapshotChunk<'static>,
        data: Vec<u8>,
    }

    impl Owned {
        fn view(&self) -> SnapshotChunk<'_> {
            SnapshotChunk {
                data: &self.data,
                ..self.meta
            }
        }
    }

    fn chunks_of(state: &Snapshot) -> Vec<Owned> {
        let mut tx = SnapshotSender::new(4, state, 100, &SnapshotLimits::default()).unwrap();
        let mut out = Vec::new();
        while !tx.done() {
            while let Some(c) = tx.next_chunk(Instant::ZERO) {
                let m = c.as_message();
                out.push(Owned {
                    meta: SnapshotChunk { data: &[], ..m },
                    data: m.data.to_vec(),
                });
            }
            // Acknowledged, the window opens on the next chunks.
            let next = out.len() as u32;
            tx.take_ack(
                &SnapshotAck {
                    id: 4,
                    next,
                    bits: 0,
                },
                Instant::ZERO,
            );
        }
        out
    }

    #[test]
    fn bad_chunks_get_typed_errors_and_change_nothing() {
        let mut rng = SimRng::new(8);
        let state = Snapshot::new(
            Tick::new(40),
            (0..2_000).map(|_| rng.next_u64() as u8).collect(),
        );
        let chunks = chunks_of(&state);
        assert!(chunks.len() > 3);
        let mut rx = SnapshotReceiver::new(SnapshotLimits::default());
        assert_eq!(rx.take(&chunks[0].view()), Ok(None));
        // A flipped byte: the chunk checksum catches it.
        let mut flipped = chunks[1].data.clone();
        flipped[0] ^= 1;
        let bad = SnapshotChunk {
            data: &flipped,
            ..chunks[1].view()
        };
        assert_eq!(
            rx.take(&bad),
            Err(SnapshotError::BadChunk { id: 4, index: 1 })
        );
        // A chunk claiming another tick for the same snapshot.
        let other_tick = SnapshotChunk {
            tick: Tick::new(41),
            ..chunks[1].view()
        };
        assert!(matches!(
            rx.take(&other_tick),
            Err(SnapshotError::Inconsistent { .. })
        ));
        // Over the cap.
        let mut small = SnapshotReceiver::new(SnapshotLimits {
            max_len: 1_000,
            ..SnapshotLimits::default()
        });
        assert!(matches!(
            small.take(&chunks[0].view()),
            Err(SnapshotError::TooLarge { len: 2_000, .. })
        ));
        // A consistent set whose whole does not match its hash.
        let mut liar = SnapshotReceiver::new(SnapshotLimits::default());
        let mut last = Err(SnapshotError::BadWhole { id: 0 });
        for c in &chunks {
            last = liar.take(&SnapshotChunk {
                hash: c.meta.hash ^ 1,
                ..c.view()
            });
        }
        assert_eq!(last, Err(SnapshotError::BadWhole { id: 4 }));
        // The good receiver still completes with the rest.
        let mut done = None;
        for c in &chunks[1..] {
            done = rx.take(&c.view()).unwrap().or(done);
        }
        assert_eq!(done, Some(state.clone()));
        // Sending over the cap is refused before any work.
        let big = Snapshot::new(Tick::ZERO, vec![0; 2_000]);
        let limits = SnapshotLimits {
            max_len: 1_000,
            ..SnapshotLimits::default()
        };
        assert!(matches!(
            SnapshotSender::new(1, &big, 1_000, &limits),
            Err(SnapshotError::TooLarge { .. })
        ));
    }
}
