//! The compact-input codec allocates nothing per datagram: a sender that
//! keeps its chain writer and a receiver that keeps its decoder and
//! buffers encode and decode every datagram in memory they already hold.
//! Counted with a global allocator that counts (the only unsafe code here:
//! the allocator interface is unsafe to implement).

use lockstep_bench::{Codec, LockstepCodec, Trace};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;

thread_local! {
    /// Whether this thread's allocations are counted (the test harness's
    /// own threads are not).
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

fn counting() -> bool {
    COUNTING.try_with(Cell::get).unwrap_or(false)
}

// SAFETY: every call is passed to the system allocator unchanged; the
// counter is only read and bumped.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if counting() {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if counting() {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn the_codec_allocates_nothing_per_datagram() {
    let trace = Trace::generate(8, 600, 0x5EED);
    let mut codec = LockstepCodec::default();
    let mut buf = Vec::with_capacity(2048);
    let mut run = |ticks: std::ops::Range<usize>| {
        let mut decoded = 0;
        for tick in ticks {
            for p in 0..trace.players() {
                buf.clear();
                let held = trace.held(p, tick);
                codec.encode(p, tick as u32, trace.window(p, tick), held, &mut buf);
                decoded += codec.decode(&buf, held);
            }
        }
        decoded
    };
    // The first datagrams grow the buffers; then nothing more is needed.
    assert!(run(0..60) > 0);
    COUNTING.with(|c| c.set(true));
    let decoded = run(60..600);
    COUNTING.with(|c| c.set(false));
    assert_eq!(decoded, 540 * 8 * lockstep_bench::WINDOW);
    assert_eq!(ALLOCATIONS.load(Ordering::Relaxed), 0);
}
