//! Raw bytes into PlayerInputs' whole and delta decoders.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockstep_core::{Input, PlayerInputs};

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = PlayerInputs::decode(data) {
        let mut out = Vec::new();
        v.encode(&mut out);
        assert_eq!(out, data, "whole encoding is canonical");
    }
    let prev = PlayerInputs::default().with_movement(0.5, -1.0).with_button(2, true);
    let mut cursor = data;
    if let Ok(next) = PlayerInputs::decode_delta(&prev, &mut cursor) {
        assert_ne!(next, prev);
        let mut out = Vec::new();
        next.encode_delta(&prev, &mut out);
        assert_eq!(&out[..], &data[..data.len() - cursor.len()]);
        assert_eq!(prev.apply(&next.changed_since(&prev).expect("changed")), next);
    }
});
