//! The replay format: what is recorded reads back as it was, a file cut
//! off anywhere reads up to its last whole chunk, and any changed bit is
//! found and named.

use lockstep_core::replay::{Header, RecordConfig, Recorder, Replay, ReplayError, Topology};
use lockstep_core::{Frame, PlayerId, SystemEvent, Tick};
use proptest::prelude::*;

mod states;

/// A match of `ticks` frames over `seats` seats from a seed: inputs held
/// for a while then changed, seats empty now and then, membership, delay
/// and pause events.
fn frames(seed: u64, seats: usize, ticks: u32, first: u32) -> Vec<Frame<u16>> {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut held: Vec<Option<u16>> = vec![Some(0); seats];
    (first..first + ticks)
        .map(|t| {
            for h in held.iter_mut() {
                match next() % 16 {
                    0 => *h = None,
                    1..=3 => *h = Some(next() as u16),
                    _ => {}
                }
            }
            let mut events = Vec::new();
            match next() % 40 {
                0 => events.push(SystemEvent::Joined {
                    player: PlayerId((next() % seats as u64) as u16),
                }),
                1 => events.push(SystemEvent::Left {
                    player: PlayerId((next() % seats as u64) as u16),
                }),
                2 => events.push(SystemEvent::DelayChanged {
                    delay: (next() % 16 + 1) as u32,
                }),
                _ => {}
            }
            Frame {
                tick: Tick::new(t),
                inputs: held.clone(),
                events,
            }
        })
        .collect()
}

fn header(seats: u16, first: u32) -> Header {
    let mut h = Header::new(0x5eed, "test game 1", 30, seats, Topology::Other);
    h.names = (0..seats).map(|k| format!("p{k}")).collect();
    h.recorder = "tests".into();
    h.first_tick = Tick::new(first);
    if first > 0 {
        h.snapshot = Some((Tick::new(first - 1), vec![7; 100]));
    }
    h
}

/// Records `frames` with a checkpoint every 8 ticks, `chunk` frames a
/// chunk.
fn record(h: Header, frames: &[Frame<u16>], chunk: u32) -> Vec<u8> {
    let mut rec = Recorder::<u16, _>::new(h, Vec::new()).expect("a recorder");
    rec.set_chunk_frames(chunk);
    for f in frames {
        rec.record(f).expect("recorded");
        if f.tick.get() % 8 == 7 {
            rec.checkpoint(f.tick, u64::from(f.tick.get()) * 0x9E37);
        }
    }
    rec.finish().expect("finished")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    /// Any match, any chunk size, from the first tick or mid-match with a
    /// snapshot: the same frames, checkpoints and stream hash read back.
    #[test]
    fn a_recorded_match_reads_back_as_it_was(
        seed in any::<u64>(),
        seats in 1u16..12,
        ticks in 0u32..700,
        chunk in 1u32..400,
        first in prop_oneof![Just(0u32), 1u32..100_000],
    ) {
        let fs = frames(seed, usize::from(seats), ticks, first);
        let h = header(seats, first);
        let file = record(h.clone(), &fs, chunk);
        let r = Replay::<u16>::read(&file);
        prop_assert!(r.stopped.is_none(), "{:?}", r.stopped);
        prop_assert_eq!(r.header.as_ref(), Some(&h));
        prop_assert_eq!(&r.frames().collect::<Vec<_>>(), &fs);
        // The same frames recorded in the same chunks: the same stream hash.
        let again = Replay::<u16>::read(&record(h.clone(), &fs, chunk));
        let end = r.end.expect("an end");
        prop_assert_eq!(Some(end.stream_hash), again.end.map(|e| e.stream_hash));
        prop_assert_eq!(end.frames, u64::from(ticks));
        prop_assert_eq!(end.last_tick, fs.last().map(|f| f.tick));
        prop_assert_eq!(r.checkpoints.len(), fs.iter().filter(|f| f.tick.get() % 8 == 7).count());
        prop_assert_eq!(r.valid_len, file.len());
    }
}

/// A small file cut at every byte: never a panic; what reads is the
/// frames of the whole chunks before the cut, and it says the file ends
/// inside a record.
#[test]
fn a_file_cut_anywhere_reads_up_to_its_last_whole_chunk() {
    let fs = frames(3, 3, 50, 0);
    let file = record(header(3, 0), &fs, 8);
    let whole = Replay::<u16>::read(&file);
    assert!(whole.stopped.is_none());
    let mut prefixes = 0;
    for cut in 0..file.len() {
        let r = Replay::<u16>::read(&file[..cut]);
        assert!(r.valid_len <= cut, "cut {cut}");
        assert!(r.end.is_none(), "cut {cut}");
        // The frames read are a prefix of the match, in whole chunks of 8.
        assert_eq!(
            &fs[..r.frame_count()],
            &r.frames().collect::<Vec<_>>()[..],
            "cut {cut}"
        );
        assert!(
            r.frame_count().is_multiple_of(8) || r.frame_count() == fs.len(),
            "cut {cut}: {}",
            r.frame_count()
        );
        match (&r.stopped, cut) {
            (None, _) => assert_eq!(r.valid_len, cut, "cut {cut}: clean only at a record's end"),
            (Some(ReplayError::NotAReplay), 0) => {}
            (Some(ReplayError::Truncated { .. }), _) => {}
            (other, _) => panic!("cut {cut}: {other:?}"),
        }
        if r.stopped.is_none() {
            prefixes += 1;
        }
    }
    // Clean cuts: right after the header, and after each of the 7 chunks.
    assert_eq!(prefixes, 8);
}

/// Every single bit of a small file flipped: each is found, as a record
/// (or the header) that fails its checksum or does not read, never as
/// other frames.
#[test]
fn every_flipped_bit_is_found_and_named() {
    let fs = frames(5, 2, 40, 0);
    let file = record(header(2, 0), &fs, 10);
    for i in 0..file.len() {
        for bit in 0..8 {
            let mut bad = file.clone();
            bad[i] ^= 1 << bit;
            let r = Replay::<u16>::read(&bad);
            assert!(
                r.stopped.is_some(),
                "byte {i} bit {bit}: read whole ({} frames)",
                r.frame_count()
            );
            assert_eq!(
                &fs[..r.frame_count()],
                &r.frames().collect::<Vec<_>>()[..],
                "byte {i} bit {bit}"
            );
        }
    }
}

/// A record claiming gigabytes, another format, a stranger's bytes: each
/// a typed error, nothing allocated for the claim.
#[test]
fn hostile_files_are_refused_by_name() {
    let fs = frames(9, 2, 20, 0);
    let file = record(header(2, 0), &fs, 10);
    let r = Replay::<u16>::read(b"GIF89a and so on");
    assert!(matches!(r.stopped, Some(ReplayError::NotAReplay)));
    let mut newer = file.clone();
    newer[4] = 2;
    let r = Replay::<u16>::read(&newer);
    assert!(matches!(
        r.stopped,
        Some(ReplayError::UnsupportedFormat { found: 2 })
    ));
    // The first chunk's stored length, set to 3 GB.
    let header_len = u32::from_le_bytes([file[5], file[6], file[7], file[8]]) as usize;
    let first = 17 + header_len;
    let mut huge = file.clone();
    huge[first + 1..first + 5].copy_from_slice(&3_000_000_000u32.to_le_bytes());
    let r = Replay::<u16>::read(&huge);
    assert!(
        matches!(r.stopped, Some(ReplayError::TooLarge { record: 1, .. })),
        "{:?}",
        r.stopped
    );
    assert_eq!(r.frame_count(), 0);
}

/// Frames out of order, or of the wrong width, are refused as they are
/// recorded.
#[test]
fn a_recorder_takes_frames_in_order_only() {
    let mut rec = Recorder::<u16, _>::new(header(2, 0), Vec::new()).expect("a recorder");
    let f = |t: u32, n: usize| Frame {
        tick: Tick::new(t),
        inputs: vec![Some(1u16); n],
        events: Vec::new(),
    };
    rec.record(&f(0, 2)).expect("the first");
    assert!(matches!(
        rec.record(&f(2, 2)),
        Err(ReplayError::Frame { .. })
    ));
    assert!(matches!(
        rec.record(&f(1, 3)),
        Err(ReplayError::Frame { .. })
    ));
    rec.record(&f(1, 2)).expect("the next");
}

/// A game folding every input, whose build `odd` parts from the others at
/// tick 77.
#[derive(Default)]
struct Fold {
    acc: u64,
    odd: bool,
}

impl lockstep_core::Game for Fold {
    type Input = u16;
    fn step(&mut self, f: &Frame<u16>) {
        for i in f.inputs.iter().flatten() {
            self.acc = (self.acc ^ u64::from(*i)).wrapping_mul(0x100_0000_01B3);
        }
        if self.odd && f.tick == Tick::new(77) {
            self.acc += 1;
        }
    }
    fn hash(&self) -> u64 {
        self.acc
    }
    fn save(&self) -> Vec<u8> {
        self.acc.to_le_bytes().to_vec()
    }
    fn restore(b: &[u8]) -> Result<Self, String> {
        Ok(Self {
            acc: u64::from_le_bytes(b.try_into().map_err(|_| "8 bytes")?),
            odd: false,
        })
    }
}

/// A recording made by a game whose state parted at tick 77, run again by
/// the game that did not: the first checkpoint after the parting is named,
/// with both hashes; run by the same build, every checkpoint matches.
#[test]
fn verify_names_the_first_checkpoint_that_differs() {
    use lockstep_core::Game as _;
    use lockstep_core::replay::verify;
    let fs = frames(11, 3, 200, 0);
    let mut rec = Recorder::<u16, _>::new(header(3, 0), Vec::new()).expect("a recorder");
    let mut odd = Fold { acc: 0, odd: true };
    for f in &fs {
        odd.step(f);
        rec.record(f).expect("recorded");
        if f.tick.get() % 10 == 9 {
            rec.checkpoint(f.tick, odd.hash());
        }
    }
    let file = rec.finish().expect("finished");
    let r = Replay::<u16>::read(&file);
    let found = verify(&r, Fold::default()).expect("states restore");
    assert!(!found.matches());
    let p = &found.parted[0];
    assert_eq!(
        (p.first, p.exact, p.last_agreed),
        (Tick::new(79), false, Some(Tick::new(69)))
    );
    assert_ne!(p.recorded, p.ran);
    let same = verify(&r, Fold { acc: 0, odd: true }).expect("states restore");
    assert!(same.matches() && same.parted.is_empty());
    assert_eq!((same.checkpoints, same.frames), (20, 200));
}

/// Inputs as large as the wire takes, random, from sixteen seats: the
/// recorder writes a chunk early rather than one over the reader's limit,
/// and the file reads whole (it wrote a 5 MB chunk the reader refused).
#[test]
fn the_largest_inputs_record_a_file_that_reads() {
    let mut x = 7u64;
    let mut rec =
        Recorder::<Vec<u8>, _>::new(Header::new(1, "big", 30, 16, Topology::Other), Vec::new())
            .expect("a recorder");
    for t in 0..300u32 {
        let inputs = (0..16)
            .map(|_| {
                Some(
                    (0..lockstep_core::wire::MAX_INPUT_LEN)
                        .map(|_| {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            x as u8
                        })
                        .collect(),
                )
            })
            .collect();
        rec.record(&Frame {
            tick: Tick::new(t),
            inputs,
            events: Vec::new(),
        })
        .expect("recorded");
    }
    let file = rec.finish().expect("finished");
    let r = Replay::<Vec<u8>>::read(&file);
    assert!(r.stopped.is_none(), "{:?}", r.stopped);
    assert_eq!(r.frame_count(), 300);
}

/// A 256-seat match of empty seats compresses to almost nothing: the
/// reader keeps its chunks compressed and decodes one at a time, so
/// 65,536 frames of a file of a few kilobytes are read and walked through
/// without being held.
#[test]
fn a_small_file_of_many_frames_is_walked_a_chunk_at_a_time() {
    let config = RecordConfig {
        chunk_frames: 1024,
        ..RecordConfig::default()
    };
    let mut rec = Recorder::<Vec<u8>, _>::with_config(
        Header::new(1, "empty", 30, 256, Topology::Other),
        Vec::new(),
        config,
    )
    .expect("a recorder");
    for t in 0..65_536u32 {
        rec.record(&Frame {
            tick: Tick::new(t),
            inputs: vec![None; 256],
            events: Vec::new(),
        })
        .expect("recorded");
    }
    let file = rec.finish().expect("finished");
    assert!(file.len() < 8_000, "{} bytes", file.len());
    let r = Replay::<Vec<u8>>::read(&file);
    assert!(r.stopped.is_none());
    assert_eq!(r.frame_count(), 65_536);
    assert_eq!(r.frames().count(), 65_536);
    assert_eq!(r.tick_of(40_000), Some(Tick::new(40_000)));
    assert_eq!(
        r.frames_from(65_535).next().map(|f| f.tick),
        Some(Tick::new(65_535))
    );
}

/// The last tick there is: a frame at u32::MAX is the last, nothing
/// records after it, and no reader takes two frames of one tick.
#[test]
fn nothing_follows_the_last_tick() {
    let mut h = Header::new(1, "end of time", 30, 1, Topology::Other);
    h.first_tick = Tick::new(u32::MAX - 1);
    let mut rec = Recorder::<u8, _>::new(h, Vec::new()).expect("a recorder");
    rec.set_chunk_frames(1);
    let f = |t: u32| Frame {
        tick: Tick::new(t),
        inputs: vec![Some(1u8)],
        events: Vec::new(),
    };
    rec.record(&f(u32::MAX - 1))
        .expect("the one before the last");
    rec.record(&f(u32::MAX)).expect("the last");
    assert_eq!(rec.next_tick(), None);
    assert!(rec.record(&f(u32::MAX)).is_err());
    let r = Replay::<u8>::read(&rec.finish().expect("finished"));
    assert!(r.stopped.is_none(), "{:?}", r.stopped);
    assert_eq!(r.frame_count(), 2);
}

/// A relay's recording of an opaque room holds its bytes: the game reads
/// them as its clients ran them, each input its bytes XOR the neutral
/// input's encoding, and bytes that do not decode as its input as the
/// neutral input (it stopped there as malformed, where every client had
/// played on; found in review).
#[test]
fn a_relays_recording_reads_as_its_clients_ran_it() {
    let header = Header::new(0, "a relay", 30, 2, Topology::Relay);
    let mut rec = Recorder::<Vec<u8>, _>::new(header, Vec::new()).expect("a recorder");
    for t in 0..40u32 {
        let odd = if t % 10 == 5 {
            vec![1, 2, 3]
        } else {
            vec![t as u8, 1]
        };
        let frame = Frame {
            tick: Tick::new(t),
            inputs: vec![Some(vec![t as u8, 0]), Some(odd)],
            events: Vec::new(),
        };
        rec.record(&frame).expect("recorded");
    }
    let bytes = rec.finish().expect("finished");
    let replay = Replay::<u16>::read(&bytes);
    assert!(
        replay.stopped.is_none() && replay.end.is_some(),
        "{:?}",
        replay.stopped
    );
    let frames: Vec<Frame<u16>> = replay.frames().collect();
    assert_eq!(frames.len(), 40);
    for (t, f) in frames.iter().enumerate() {
        let odd = if t % 10 == 5 { 0 } else { t as u16 | 0x100 };
        assert_eq!(f.inputs, vec![Some(t as u16), Some(odd)], "tick {t}");
    }
}
