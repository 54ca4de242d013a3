//! States in a replay: a recording machine that parted from the match and
//! was resynced, one that came back without its state, keyframes, and
//! seeking from them.

use super::{frames, header};
use lockstep_core::desync::Fields;
use lockstep_core::replay::{
    Index, Playback, RecordConfig, Recorder, Replay, ReplayError, StateKind, VerifyError, verify,
};
use lockstep_core::{Frame, Game, Tick};
use proptest::prelude::*;

/// A game with two fields; a machine whose `broken_at` tick comes adds a
/// thousand to its `count` there (its state parts from the match's).
#[derive(Debug, Clone, Default, PartialEq)]
struct Acc {
    acc: u64,
    count: u64,
    broken_at: Option<u32>,
}

impl Game for Acc {
    type Input = u16;
    fn step(&mut self, f: &Frame<u16>) {
        for i in f.inputs.iter().flatten() {
            self.acc = (self.acc ^ u64::from(*i)).wrapping_mul(0x100_0000_01B3);
        }
        self.count += f.events.len() as u64 + 1;
        if self.broken_at == Some(f.tick.get()) {
            self.count += 1_000;
        }
    }
    fn hash(&self) -> u64 {
        self.acc ^ self.count.rotate_left(32)
    }
    fn save(&self) -> Vec<u8> {
        [self.acc.to_le_bytes(), self.count.to_le_bytes()].concat()
    }
    fn restore(b: &[u8]) -> Result<Self, String> {
        if b.len() != 16 {
            return Err("16 bytes".into());
        }
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        Ok(Self {
            acc: word(0),
            count: word(8),
            broken_at: None,
        })
    }
    fn fields(&self, out: &mut Fields) {
        out.push("acc", self.acc);
        out.push("count", self.count);
    }
}

/// How the recording machine's match went.
#[derive(Debug, Clone)]
struct Story {
    /// Its state parts at this tick...
    broken: Option<u32>,
    /// ...which the match finds this many ticks later (every tick's hash
    /// of the last 512 then goes into the file)...
    found_after: u32,
    /// ...and a resync replaces it after this many more (none: never).
    resync_after: Option<u32>,
    /// It is cut off after this tick and comes back without its state
    /// after the second, sent the match's state then.
    gap: Option<(u32, u32)>,
    /// A keyframe every this many ticks (0: none).
    keyframes: u32,
    chunk: u32,
}

/// A story's file, the frames it should hold, and the match's true state
/// hash after every tick.
type Played = (Vec<u8>, Vec<Frame<u16>>, Vec<(Tick, u64)>);

/// Plays the story.
fn play(fs: &[Frame<u16>], story: &Story) -> Played {
    let config = RecordConfig {
        chunk_frames: story.chunk,
        keyframe_every: story.keyframes,
        ..RecordConfig::default()
    };
    let mut rec =
        Recorder::<u16, _>::with_config(header(3, 0), Vec::new(), config).expect("a recorder");
    let mut truth = Acc::default();
    let mut ours = Acc {
        broken_at: story.broken,
        ..Acc::default()
    };
    let mut truths = Vec::new();
    let mut kept = Vec::new();
    let found = story.broken.map(|b| b + story.found_after);
    let resync = found.and_then(|f| story.resync_after.map(|r| f + r));
    for f in fs {
        truth.step(f);
        truths.push((f.tick, truth.hash()));
        let t = f.tick.get();
        if let Some((from, to)) = story.gap
            && (from..=to).contains(&t)
        {
            if t == to {
                let state = truth.save();
                rec.state(StateKind::Rejoin, f.tick, truth.hash(), &state)
                    .expect("a rejoin");
                ours = Acc::restore(&state).expect("restores");
            }
            continue;
        }
        ours.step(f);
        rec.record(f).expect("recorded");
        kept.push(f.clone());
        rec.state_hash(f.tick, ours.hash());
        let parted = ours.hash() != truth.hash();
        if rec.wants_keyframe(f.tick) && !parted {
            rec.state(StateKind::Keyframe, f.tick, ours.hash(), &ours.save())
                .expect("a keyframe");
        }
        if found == Some(t) {
            rec.keep_recent_hashes();
        }
        if resync == Some(t) {
            rec.state(StateKind::Replaced, f.tick, ours.hash(), &ours.save())
                .expect("the state replaced");
            let state = truth.save();
            rec.state(StateKind::Resync, f.tick, truth.hash(), &state)
                .expect("the resync");
            ours = Acc::restore(&state).expect("restores");
        }
    }
    (rec.finish().expect("finished"), kept, truths)
}

fn story() -> impl Strategy<Value = (u64, u32, Story)> {
    (
        any::<u64>(),
        400u32..1_200,
        proptest::option::of(20u32..300),
        1u32..200,
        proptest::option::of(1u32..60),
        proptest::option::of((0u32..80, 1u32..60)),
        prop_oneof![Just(0u32), 10u32..200],
        1u32..400,
    )
        .prop_map(
            |(seed, ticks, broken, found_after, resync_after, gap, keyframes, chunk)| {
                // The gap after the healing, if any: the story's ticks in order.
                let after = broken.map_or(0, |b| b + found_after + resync_after.unwrap_or(0) + 2);
                let gap = gap.map(|(at, len)| (after + at + 2, after + at + 2 + len));
                (
                    seed,
                    ticks,
                    Story {
                        broken,
                        found_after,
                        resync_after,
                        gap,
                        keyframes,
                        chunk,
                    },
                )
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    /// Any story: the file reads back whole with the frames the machine
    /// ran and its states; verifying names the tick it parted exactly
    /// and the field, healed when a resync came; every seek lands on the
    /// match's true state.
    #[test]
    fn a_machine_that_parted_or_came_back_records_a_replay_that_verifies(
        (seed, ticks, story) in story(),
        seeks in proptest::collection::vec(any::<u32>(), 1..12),
    ) {
        let fs = frames(seed, 3, ticks, 0);
        let (file, kept, truths) = play(&fs, &story);
        let r = Replay::<u16>::read(&file);
        prop_assert!(r.stopped.is_none(), "{:?}", r.stopped);
        prop_assert_eq!(&r.frames().collect::<Vec<_>>(), &kept);
        prop_assert_eq!(r.end.expect("an end").frames, kept.len() as u64);

        let v = verify(&r, Acc::default()).expect("the states restore");
        prop_assert_eq!(v.frames, kept.len());
        let broken = story.broken.filter(|b| *b < ticks);
        match broken {
            None => prop_assert!(v.matches() && v.parted.is_empty(), "{:?}", v),
            Some(b) => {
                let p = &v.parted[0];
                prop_assert_eq!(p.first, Tick::new(b), "{:?}", v);
                let found = b + story.found_after;
                if found < ticks {
                    prop_assert!(p.exact, "{:?}", v);
                }
                let resync = story.resync_after.map(|r| found + r).filter(|r| *r < ticks);
                // A rejoin replaces the machine's state too.
                let healed = resync.or(story.gap.map(|g| g.1)).filter(|r| *r < ticks);
                prop_assert_eq!(p.resynced, healed.map(Tick::new), "{:?}", v);
                prop_assert_eq!(v.matches(), healed.is_some(), "{:?}", v);
                if resync.is_some() {
                    prop_assert_eq!(v.parted.len(), 1, "{:?}", v);
                    prop_assert_eq!(p.fields.len(), 1);
                    prop_assert_eq!(p.fields[0].path.as_str(), "count");
                }
            }
        }

        let mut playback = Playback::new(&r, Acc::default()).expect("a start");
        if story.keyframes == 0 {
            playback.index(50).expect("indexed");
        }
        for s in seeks {
            let f = &kept[s as usize % kept.len()];
            let ran = playback.seek(f.tick).expect("seeks");
            let every = if story.keyframes == 0 { 50 } else { story.keyframes };
            // Keyframes are missing where the machine had parted.
            if broken.is_none() && story.gap.is_none() {
                prop_assert!(ran < every as usize, "{ran} frames for a seek");
            }
            let truth = truths.iter().find(|(t, _)| *t == f.tick).expect("a tick").1;
            prop_assert_eq!(playback.game().hash(), truth, "tick {}", f.tick);
        }
    }
}

/// A file with states cut at every byte reads a prefix of its frames and
/// states; every flipped bit is found.
#[test]
fn a_file_with_states_cut_or_flipped_reads_a_prefix() {
    let fs = frames(17, 3, 120, 0);
    let story = Story {
        broken: Some(30),
        found_after: 5,
        resync_after: Some(5),
        gap: Some((70, 80)),
        keyframes: 25,
        chunk: 20,
    };
    let (file, kept, _) = play(&fs, &story);
    let whole = Replay::<u16>::read(&file);
    assert!(whole.stopped.is_none());
    assert_eq!(
        whole.states.iter().map(|s| s.kind).collect::<Vec<_>>(),
        [
            StateKind::Keyframe,
            StateKind::Replaced,
            StateKind::Resync,
            StateKind::Keyframe,
            StateKind::Rejoin,
            StateKind::Keyframe,
        ]
    );
    for cut in 0..file.len() {
        let r = Replay::<u16>::read(&file[..cut]);
        assert_eq!(
            &kept[..r.frame_count()],
            &r.frames().collect::<Vec<_>>()[..],
            "cut {cut}"
        );
        assert_eq!(&whole.states[..r.states.len()], &r.states[..], "cut {cut}");
    }
    for i in (0..file.len()).step_by(3) {
        let mut bad = file.clone();
        bad[i] ^= 1 << (i % 8);
        let r = Replay::<u16>::read(&bad);
        assert!(r.stopped.is_some(), "byte {i}");
        assert_eq!(
            &kept[..r.frame_count()],
            &r.frames().collect::<Vec<_>>()[..],
            "byte {i}"
        );
    }
}

/// A keyframe whose state does not give its hash is named; a state that
/// does not follow the frames recorded is refused as it is recorded.
#[test]
fn a_keyframe_that_lies_is_named() {
    let fs = frames(4, 3, 60, 0);
    let mut rec = Recorder::<u16, _>::new(header(3, 0), Vec::new()).expect("a recorder");
    let mut g = Acc::default();
    for f in &fs[..30] {
        g.step(f);
        rec.record(f).expect("recorded");
    }
    assert!(matches!(
        rec.state(StateKind::Keyframe, Tick::new(28), g.hash(), &g.save()),
        Err(ReplayError::Frame { .. })
    ));
    rec.state(StateKind::Keyframe, Tick::new(29), g.hash() ^ 1, &g.save())
        .expect("written");
    for f in &fs[30..] {
        rec.record(f).expect("recorded");
    }
    let r = Replay::<u16>::read(&rec.finish().expect("finished"));
    assert!(matches!(
        verify(&r, Acc::default()),
        Err(VerifyError::BadState { kind: StateKind::Keyframe, tick, .. }) if tick == Tick::new(29)
    ));
    let mut p = Playback::new(&r, Acc::default()).expect("a start");
    assert!(p.seek(Tick::new(40)).is_err());
}

/// An index is for one replay: it reads back for it, and is refused for
/// another or cut off.
#[test]
fn an_index_belongs_to_its_replay() {
    let fs = frames(8, 3, 500, 0);
    let (file, _, truths) = play(&fs, &story_none());
    let r = Replay::<u16>::read(&file);
    let mut p = Playback::new(&r, Acc::default()).expect("a start");
    p.index(100).expect("indexed");
    let index = Index::write(&r, &p).expect("written");
    let mut q = Playback::new(&r, Acc::default()).expect("a start");
    q.add_keyframes(Index::read(&index, &r).expect("reads").keyframes())
        .expect("fits");
    assert_eq!(q.keyframes(), 6);
    assert_eq!(q.seek(Tick::new(450)).expect("seeks"), 51);
    assert_eq!(q.game().hash(), truths[450].1);

    // The same header, other frames.
    let other = Replay::<u16>::read(&play(&frames(10, 3, 500, 0), &story_none()).0);
    let refused = Index::read(&index, &other);
    assert!(
        matches!(refused, Err(ReplayError::BadHeader(_))),
        "{refused:?}"
    );
    assert!(Index::read(&index[..index.len() - 1], &r).is_err());
}

fn story_none() -> Story {
    Story {
        broken: None,
        found_after: 0,
        resync_after: None,
        gap: None,
        keyframes: 0,
        chunk: 300,
    }
}

/// A keyframe right after a rejoin's gap stands where the gap is among the
/// frames: a seek to the tick before the gap does not land on it, and the
/// state taken across the gap is reported unchecked.
#[test]
fn a_keyframe_after_a_gap_is_not_a_seek_before_it() {
    let fs = frames(12, 3, 30, 0);
    let mut rec = Recorder::<u16, _>::new(header(3, 0), Vec::new()).expect("a recorder");
    let mut truth = Acc::default();
    for f in &fs {
        truth.step(f);
        let t = f.tick.get();
        if (10..20).contains(&t) {
            if t == 19 {
                rec.state(StateKind::Rejoin, f.tick, truth.hash(), &truth.save())
                    .expect("a rejoin");
                rec.state(StateKind::Keyframe, f.tick, truth.hash(), &truth.save())
                    .expect("a keyframe");
            }
            continue;
        }
        rec.record(f).expect("recorded");
    }
    let r = Replay::<u16>::read(&rec.finish().expect("finished"));
    assert!(r.stopped.is_none(), "{:?}", r.stopped);
    let v = verify(&r, Acc::default()).expect("verifies");
    assert!(v.matches());
    assert_eq!(v.unchecked, [(StateKind::Rejoin, Tick::new(19))]);
    let mut p = Playback::new(&r, Acc::default()).expect("a start");
    p.seek(Tick::new(25)).expect("seeks");
    p.seek(Tick::new(9)).expect("seeks");
    assert_eq!(p.tick(), Some(Tick::new(9)));
    let mut alone = Acc::default();
    fs[..10].iter().for_each(|f| alone.step(f));
    assert_eq!(p.game().hash(), alone.hash());
}

/// Indexing with a game that does not run the replay as recorded (another
/// start here) is refused at the first recorded hash, rather than keyframes
/// of another match.
#[test]
fn indexing_with_another_game_is_refused() {
    let fs = frames(21, 3, 200, 0);
    let (file, ..) = play(&fs, &story_none());
    let r = Replay::<u16>::read(&file);
    let other = Acc {
        count: 5,
        ..Acc::default()
    };
    let mut p = Playback::new(&r, other).expect("a start");
    assert!(matches!(
        p.index(50),
        Err(VerifyError::NotThisGame { tick, .. }) if tick == Tick::new(29)
    ));
    let mut p = Playback::new(&r, Acc::default()).expect("a start");
    p.index(50).expect("the right game indexes");
}
