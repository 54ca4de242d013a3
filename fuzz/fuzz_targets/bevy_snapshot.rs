//! A Bevy app's snapshot, as a donor sends it to a joiner: arbitrary bytes
//! restored into a world that plays (the golden test's fixture: serde,
//! mapped and reflected components, resources). It never panics; on an
//! error the world is as it was; on success what it holds saves to bytes
//! that load into a fresh world as the same state.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockstep_bevy::{restore_state, state_bytes};

#[allow(dead_code)]
#[path = "../../crates/lockstep-bevy/tests/golden.rs"]
mod golden;

/// The snapshot to restore: the bytes as they come (first byte 0), or the
/// fixture's own snapshot edited by them, three bytes an edit (a place,
/// big-endian, and a byte to XOR there; 0xff cuts the snapshot there; past
/// the end appends), so the fuzzer starts from a snapshot that loads.
fn snapshot(data: &[u8], own: &[u8]) -> Option<Vec<u8>> {
    let (&mode, rest) = data.split_first()?;
    if mode == 0 {
        return Some(rest.to_vec());
    }
    let mut b = own.to_vec();
    for edit in rest.chunks_exact(3) {
        let at = usize::from(u16::from_be_bytes([edit[0], edit[1]])) % (b.len() + 1);
        match (at == b.len(), edit[2]) {
            (true, v) => b.push(v),
            (false, 0xff) => b.truncate(at),
            (false, v) => b[at] ^= v,
        }
    }
    Some(b)
}

fuzz_target!(|data: &[u8]| {
    let mut a = golden::fixture();
    let before = state_bytes(a.world()).expect("the fixture saves");
    let Some(data) = snapshot(data, &before) else {
        return;
    };
    let data = data.as_slice();
    match restore_state(a.world_mut(), data) {
        Err(_) => {
            let after = state_bytes(a.world()).expect("still saves");
            assert_eq!(before, after, "a refused snapshot changed the world");
        }
        Ok(()) => {
            let saved = state_bytes(a.world()).expect("a restored world saves");
            assert_eq!(saved, data, "a restored snapshot saves as its bytes");
            let mut b = golden::app();
            restore_state(b.world_mut(), &saved).expect("its own save loads");
            assert_eq!(
                state_bytes(b.world()).expect("saves"),
                saved,
                "a save loads as the same state"
            );
        }
    }
});
