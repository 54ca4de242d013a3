//! Raw bytes into the frame-list and canonical-frame decoders.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockstep_core::wire::{FrameRef, decode_frames_body, encode_frame, encode_frames_body};
use lockstep_core::{PlayerInputs, Tick};

fuzz_target!(|data: &[u8]| {
    let [count, seats, held, bytes @ ..] = data else { return };
    let (count, seats) = (usize::from(*count), usize::from(*seats) % 16);
    // A reference frame of up to 8 seats: each empty or a pressed button.
    let reference: Vec<Option<PlayerInputs>> = (0..held % 9)
        .map(|s| (held & (1 << (s % 8)) != 0).then(|| PlayerInputs::default().with_button(s, true)))
        .collect();
    for r in [None, Some(reference.as_slice())] {
        if let Ok(frames) = decode_frames_body::<PlayerInputs>(Tick::new(7), count, seats, r, bytes) {
            let mut out = Vec::new();
            encode_frames_body(&frames, seats, r, &mut out);
            let again = decode_frames_body::<PlayerInputs>(Tick::new(7), count, seats, r, &out);
            assert_eq!(again.as_ref(), Ok(&frames));
        }
    }
    if let Ok(f) = FrameRef::decode(bytes) {
        if let Ok(frame) = f.to_frame::<Vec<u8>>() {
            let mut out = Vec::new();
            encode_frame(&frame, &mut out);
            assert_eq!(out, bytes, "canonical frames re-encode identically");
        }
    }
});
