//! Snapshot reassembly: a real snapshot's chunks, some altered by the
//! fuzzer (bytes flipped, fields changed, chunks dropped, repeated or
//! reordered), into one receiver. It never panics, never allocates past the
//! cap, and whatever it returns is exactly the snapshot sent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockstep_core::snapshot::{Snapshot, SnapshotLimits, SnapshotReceiver, SnapshotSender};
use lockstep_core::wire::SnapshotChunk;
use lockstep_core::{Instant, Tick};

fuzz_target!(|data: &[u8]| {
    let Some((&[len_lo, len_hi, chunk], ops)) = data.split_first_chunk::<3>() else {
        return;
    };
    let len = usize::from(u16::from_le_bytes([len_lo, len_hi]));
    let state = Snapshot::new(
        Tick::new(77),
        (0..len).map(|i| (i as u8).wrapping_mul(31) ^ (i >> 5) as u8).collect(),
    );
    let limits = SnapshotLimits {
        max_len: 40_000,
        ..SnapshotLimits::default()
    };
    let chunk_len = 64 + usize::from(chunk) * 4;
    let Ok(mut tx) = SnapshotSender::new(3, &state, chunk_len, &limits) else {
        assert!(len > 40_000);
        return;
    };
    let mut chunks: Vec<(SnapshotChunk<'static>, Vec<u8>)> = Vec::new();
    while let Some(c) = tx.next_chunk(Instant::ZERO) {
        let m = c.as_message();
        chunks.push((SnapshotChunk { data: &[], ..m }, m.data.to_vec()));
    }
    let mut rx = SnapshotReceiver::new(limits);
    for op in ops.chunks(4) {
        let [which, what, a, b] = match *op {
            [w, x, a, b] => [w, x, a, b],
            _ => return,
        };
        let (meta, bytes) = &chunks[usize::from(which) % chunks.len()];
        let mut bytes = bytes.clone();
        let mut m = *meta;
        match what % 8 {
            0 | 1 | 2 => {}
            3 => {
                if !bytes.is_empty() {
                    let i = usize::from(a) % bytes.len();
                    bytes[i] ^= b | 1;
                }
            }
            4 => m.index = u32::from(a) << 8 | u32::from(b),
            5 => m.count = u32::from(a) << 8 | u32::from(b),
            6 => m.packed_len = m.packed_len.wrapping_add(u32::from(a)).wrapping_sub(u32::from(b)),
            _ => m.raw_len = u32::from(a) << 16 | u32::from(b) << 4,
        }
        let c = SnapshotChunk { data: &bytes, ..m };
        if let Ok(Some(done)) = rx.take(&c) {
            assert_eq!(done, state, "a snapshot came out that was not sent");
        }
        let _ = rx.ack();
    }
});
