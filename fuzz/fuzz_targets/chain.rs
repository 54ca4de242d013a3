//! Raw bytes into the input-chain decoder for three kinds of input; a chain
//! that decodes must re-encode to the same bytes (the encoding is
//! canonical).
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockstep_core::wire::{ChainWriter, decode_chain};
use lockstep_core::{Input, PlayerInputs};

fn check<I: Input>(bytes: &[u8], count: usize) {
    let Ok(inputs) = decode_chain::<I>(bytes, count) else {
        return;
    };
    let mut w = ChainWriter::new();
    for i in &inputs {
        assert!(w.push(i, usize::MAX));
    }
    let mut out = Vec::new();
    w.write(&mut out);
    assert_eq!(out, bytes, "chains are canonical");
}

fuzz_target!(|data: &[u8]| {
    let [kind, count, bytes @ ..] = data else { return };
    let count = usize::from(*count);
    match kind % 3 {
        0 => check::<u16>(bytes, count),
        1 => check::<Vec<u8>>(bytes, count),
        _ => check::<PlayerInputs>(bytes, count),
    }
});
