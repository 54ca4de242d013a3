//! The replay reader, its verification, playback and index: a real
//! recording (frames, a keyframe, a gap a rejoin's state fills), some of its
//! bytes altered or cut by the fuzzer, or the fuzzer's bytes alone. Nothing
//! panics, the reader reads no more than the file holds, every frame it
//! returns is one recorded, and a verification or a seek over whatever
//! read ends in a verdict or a typed error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockstep_core::replay::{
    Header, Index, Playback, Recorder, Replay, StateKind, Topology, verify,
};
use lockstep_core::{Frame, Game, Tick};

/// A game summing its inputs.
#[derive(Default)]
struct Sum(u64);

impl Game for Sum {
    type Input = u16;
    fn step(&mut self, f: &Frame<u16>) {
        self.0 = self.0.wrapping_add(f.inputs.iter().flatten().map(|&i| u64::from(i)).sum());
    }
    fn hash(&self) -> u64 {
        self.0
    }
    fn save(&self) -> Vec<u8> {
        self.0.to_le_bytes().to_vec()
    }
    fn restore(b: &[u8]) -> Result<Self, String> {
        Ok(Sum(u64::from_le_bytes(b.try_into().map_err(|_| "8 bytes")?)))
    }
}

/// Verifies and seeks over what read: never a panic.
fn exercise(r: &Replay<u16>, index: &[u8]) {
    let _ = verify(r, Sum::default());
    let Ok(mut p) = Playback::new(r, Sum::default()) else {
        return;
    };
    if let Ok(i) = Index::read(index, r) {
        let _ = p.add_keyframes(i.keyframes());
    }
    for t in [45u32, 3, 59, 0, 31] {
        let _ = p.seek(Tick::new(t));
    }
}

fuzz_target!(|data: &[u8]| {
    // The fuzzer's bytes alone.
    let r = Replay::<u16>::read(data);
    assert!(r.valid_len <= data.len());
    exercise(&r, data);
    // A recording altered at the places the fuzzer names, then cut.
    let Some((&[cut_lo, cut_hi, chunk], edits)) = data.split_first_chunk::<3>() else {
        return;
    };
    let frames: Vec<Frame<u16>> = (0..60u32)
        .map(|t| Frame {
            tick: Tick::new(t),
            inputs: vec![Some((t / 7) as u16), None, Some(3)],
            events: Vec::new(),
        })
        .collect();
    let header = Header::new(1, "fuzz", 30, 3, Topology::Other);
    let Ok(mut rec) = Recorder::<u16, _>::new(header, Vec::new()) else {
        return;
    };
    rec.set_chunk_frames(u32::from(chunk % 32) + 1);
    let mut game = Sum::default();
    let mut kept = Vec::new();
    for f in &frames {
        game.step(f);
        match f.tick.get() {
            30..39 => continue,
            39 => {
                let _ = rec.state(StateKind::Rejoin, f.tick, game.hash(), &game.save());
                continue;
            }
            _ => {}
        }
        let _ = rec.record(f);
        kept.push(f.clone());
        if f.tick.get() == 20 {
            let _ = rec.state(StateKind::Keyframe, f.tick, game.hash(), &game.save());
        }
    }
    let Ok(mut file) = rec.finish() else {
        return;
    };
    for pair in edits.chunks_exact(3) {
        let at = usize::from(u16::from_le_bytes([pair[0], pair[1]])) % file.len();
        file[at] ^= pair[2];
    }
    let cut = usize::from(u16::from_le_bytes([cut_lo, cut_hi])) % (file.len() + 1);
    let r = Replay::<u16>::read(&file[..cut]);
    assert!(r.valid_len <= cut);
    assert_eq!(&kept[..r.frame_count().min(kept.len())], &r.frames().collect::<Vec<_>>()[..]);
    exercise(&r, edits);
});
