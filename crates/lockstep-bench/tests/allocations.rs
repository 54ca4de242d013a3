//! The compact-input codec allocates nothing per datagram: a sender that
//! keeps its chain writer and a receiver that keeps its decoder and
//! buffers encode and decode every datagram in memory they already hold;
//! nor does a relay's player sending its inputs (5.4 allocations a
//! datagram before its runs' buffers were kept); nor does a sequencer
//! decode a player's runs past its input rate.
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

/// A sequencer (peer 0) and two clients of it (peers 1 and 2), not yet
/// connected.
fn room<I: lockstep_core::Input>() -> (
    lockstep_core::sequenced::Sequencer<I>,
    Vec<(
        lockstep_core::PeerId,
        lockstep_core::sequenced::ClientSession<I>,
    )>,
) {
    use lockstep_core::sequenced::{ClientConfig, ClientSession, Sequencer, SequencerConfig};
    use lockstep_core::{Instant, PeerId};
    let server = Sequencer::new(SequencerConfig::default(), Instant::ZERO).expect("a config");
    let clients = (1..=2)
        .map(|k| {
            let config = ClientConfig {
                name: format!("p{k}"),
                ..ClientConfig::default()
            };
            let c = ClientSession::new(config, PeerId(0), Instant::ZERO).expect("a config");
            (PeerId(k), c)
        })
        .collect();
    (server, clients)
}

/// Two clients and a sequencer for 900 ticks, every `lose_every`th
/// datagram either way lost: the client datagrams sent over the last 600,
/// and the allocations their `poll_transmit` made.
fn client_sends(lose_every: Option<usize>) -> (u64, u64) {
    use lockstep_core::{Instant, PeerId, PlayerInputs};
    use std::time::Duration;

    let server_id = PeerId(0);
    let (mut server, mut clients) = room::<PlayerInputs>();
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

/// A seated player's datagram of long runs of unchanged inputs decodes to
/// far more than its bytes: four chains of a 128-byte input and 1,023
/// unchanged ones, about a kilobyte on the wire, are 4,096 inputs, half a
/// megabyte in 4,096 copies. The sequencer weighs the runs' headers
/// against the player's input rate (4,000 a second) before decoding any:
/// it refuses the datagram and drops the player having copied nothing
/// (it decoded every input first, then refused them), and the other
/// player plays on.
#[test]
fn a_sequencer_decodes_no_more_inputs_than_the_rate_allows() {
    use lockstep_core::sequenced::{ClientSession, Sequencer, SequencerError};
    use lockstep_core::wire::{ChainWriter, DatagramWriter, ErrorCode, InputRun, Inputs, Message};
    use lockstep_core::{Instant, PeerId, Tick};
    use std::time::Duration;

    let server_id = PeerId(0);
    let (mut server, mut clients) = room::<Vec<u8>>();
    let mut now = Instant::ZERO;
    let mut step_buf = Vec::with_capacity(2048);
    let mut step = |server: &mut Sequencer<Vec<u8>>,
                    clients: &mut Vec<(PeerId, ClientSession<Vec<u8>>)>,
                    now: Instant| {
        for (id, c) in clients.iter_mut() {
            if c.seat().is_some() {
                let _ = c.commit_local(vec![id.0 as u8; 8]);
            }
            while c.advance().is_some() {}
            while c.poll_event().is_some() {}
            c.handle_timeout(now);
            while let Some(t) = {
                step_buf.clear();
                c.poll_transmit(&mut step_buf)
            } {
                let _ = server.handle_datagram(*id, &step_buf[..t.len], now);
            }
        }
        server.handle_timeout(now);
        while let Some(t) = {
            step_buf.clear();
            server.poll_transmit(&mut step_buf)
        } {
            if let Some((_, c)) = clients.iter_mut().find(|(id, _)| *id == t.destination) {
                let _ = c.handle_datagram(server_id, &step_buf[..t.len], now);
            }
        }
    };
    // Past tick 1,024, so that runs of 1,024 inputs end before the open
    // tick, within the horizon.
    while server.open_tick() < Tick::new(1_100) {
        now += Duration::from_millis(33);
        step(&mut server, &mut clients, now);
    }
    let seat = clients[1].1.seat().expect("seated");
    let mut chain = ChainWriter::new();
    let wide = vec![0x5a_u8; 128];
    for _ in 0..1024 {
        assert!(chain.push(&wide, usize::MAX));
    }
    let mut bytes = Vec::new();
    chain.write(&mut bytes);
    let mut buf = Vec::with_capacity(2048);
    let start = Tick::new(server.open_tick().get() - 1_050);
    let runs: Vec<InputRun<'_>> = (0..4)
        .map(|_| InputRun {
            seat,
            start,
            count: 1024,
            back: 0,
            check: 0,
            chain: &bytes,
        })
        .collect();
    buf.clear();
    let mut w = DatagramWriter::new(&mut buf, server.open_tick(), 1200);
    w.push(&Message::Inputs(Inputs {
        acks: lockstep_core::wire::List::EMPTY,
        runs: (&runs).into(),
    }))
    .expect("fits");
    let len = w.finish();
    assert!(len <= 1200, "{len} bytes");
    COUNTING.with(|f| f.set(true));
    let before = allocations();
    let refused = server.handle_datagram(PeerId(2), &buf, now);
    let counted = allocations() - before;
    COUNTING.with(|f| f.set(false));
    assert!(
        matches!(
            refused,
            Err(SequencerError::Dropped {
                code: ErrorCode::RateLimited,
                ..
            })
        ),
        "{refused:?}"
    );
    assert!(
        counted < 64,
        "{counted} allocations refusing a {len}-byte datagram of 4,096 inputs"
    );
    // The other player plays on.
    clients.truncate(1);
    let at = clients[0].1.frame();
    for _ in 0..60 {
        now += Duration::from_millis(33);
        step(&mut server, &mut clients, now);
    }
    assert!(
        clients[0].1.frame().since(at) >= 50,
        "the other player plays on"
    );
}
