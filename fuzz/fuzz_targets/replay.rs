//! The replay reader: a real recording, some of its bytes altered or cut by
//! the fuzzer, or the fuzzer's bytes alone. It never panics, reads no more
//! than the file holds, and every frame it returns is one recorded.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockstep_core::replay::{Header, Recorder, Replay, Topology};
use lockstep_core::{Frame, Tick};

fuzz_target!(|data: &[u8]| {
    // The fuzzer's bytes alone.
    let r = Replay::<u16>::read(data);
    assert!(r.valid_len <= data.len());
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
    for f in &frames {
        let _ = rec.record(f);
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
    assert_eq!(&frames[..r.frames.len().min(frames.len())], &r.frames[..]);
});
