//! The compact-input codec allocates nothing per datagram: a sender that
//! keeps its chain writer and a receiver that keeps its decoder and
//! buffers encode and decode every datagram in memory they already hold;
//! nor does a relay's player sending its inputs (5.4 allocations a
//! datagram before its runs' buffers were kept).
//! Counted with a global allocator that counts (the only unsafe code here:
//! the allocator interface is unsafe to implement).

use lockstep_bench::{Codec, LockstepCodec, Trace};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    /// Whether this thread's allocations are counted (the test harness's
    /// own threads are not).
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    /// This thread's allocations while counting: each test counts its own,
    /// whatever the others running beside it do.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn counting() -> bool {
    COUNTING.try_with(Cell::get).unwrap_or(false)
}

fn count_one() {
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

// SAFETY: every call is passed to the system allocator unchanged; the
// counter is only read and bumped.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if counting() {
            count_one();
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
            count_one();
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
    assert_eq!(allocations(), 0);
}

/// A relay's players send their inputs in memory they already hold: once a
/// match is under way, a client's `poll_transmit` (its runs of inputs, the
/// chains, the datagram) allocates nothing on a clean link. On one that
/// loses datagrams (acknowledgements late, runs longer, inputs sent again)
/// its buffers grow a few times more, to bursts larger than any before,
/// and no more (before they were kept: 5.4 allocations a datagram); the
/// sequencer takes every datagram it is sent.
#[test]
fn a_client_sends_its_inputs_without_allocating() {
    for lose_every in [None, Some(4), Some(3)] {
        let (sends, counted) = client_sends(lose_every);
        assert!(sends > 600, "{sends} datagrams sent while counting");
        let most = if lose_every.is_some() { 8 } else { 0 };
        assert!(
            counted <= most,
            "{counted} allocations over {sends} datagrams sent, losing one in {lose_every:?}"
        );
    }
}

/// Two clients and a sequencer for 900 ticks, every `lose_every`th
/// datagram either way lost: the client datagrams sent over the last 600,
/// and the allocations their `poll_transmit` made.
fn client_sends(lose_every: Option<usize>) -> (u64, u64) {
    use lockstep_core::sequenced::{ClientConfig, ClientSession, Sequencer, SequencerConfig};
    use lockstep_core::{Instant, PeerId, PlayerInputs};
    use std::time::Duration;

    let server_id = PeerId(0);
    let mut server = Sequencer::<PlayerInputs>::new(SequencerConfig::default(), Instant::ZERO)
        .expect("a valid config");
    let mut clients: Vec<(PeerId, ClientSession<PlayerInputs>)> = (1..=2)
        .map(|k| {
            let config = ClientConfig {
                name: format!("p{k}"),
                ..ClientConfig::default()
            };
            let c = ClientSession::new(config, server_id, Instant::ZERO).expect("a valid config");
            (PeerId(k), c)
        })
        .collect();
    let trace = Trace::generate(2, 900, 0x5EED);
    let mut buf = Vec::with_capacity(2048);
    let (mut sends, mut counted, mut n) = (0u64, 0u64, 0usize);
    let mut lost = || {
        n += 1;
        lose_every.is_some_and(|k| n.is_multiple_of(k))
    };
    let mut now = Instant::ZERO;
    for step in 0..900usize {
        now += Duration::from_millis(33);
        let count = step >= 300;
        for (k, (id, c)) in clients.iter_mut().enumerate() {
            if c.seat().is_some() {
                let _ = c.commit_local(trace.inputs[k][step].clone());
            }
            while c.advance().is_some() {}
            while c.poll_event().is_some() {}
            c.handle_timeout(now);
            loop {
                buf.clear();
                COUNTING.with(|f| f.set(count));
                let before = allocations();
                let sent = c.poll_transmit(&mut buf);
                counted += allocations() - before;
                COUNTING.with(|f| f.set(false));
                let Some(t) = sent else { break };
                sends += u64::from(count);
                if !lost() {
                    let taken = server.handle_datagram(*id, &buf[..t.len], now);
                    assert!(taken.is_ok(), "the sequencer refused a datagram: {taken:?}");
                }
            }
        }
        server.handle_timeout(now);
        loop {
            buf.clear();
            let Some(t) = server.poll_transmit(&mut buf) else {
                break;
            };
            if let Some((_, c)) = clients.iter_mut().find(|(id, _)| *id == t.destination)
                && !lost()
            {
                let _ = c.handle_datagram(server_id, &buf[..t.len], now);
            }
        }
    }
    assert!(clients.iter().all(|(_, c)| c.seat().is_some()), "both play");
    (sends, counted)
}
