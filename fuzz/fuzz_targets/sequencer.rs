//! A sequencer with two honest clients, fed arbitrary datagrams from
//! arbitrary peers in between, the clients reconnecting on new addresses
//! and the room joining from snapshots or not: no panic, buffers within
//! bounds, and the honest clients agree on every frame both ran.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use lockstep_core::sequenced::{ClientConfig, ClientSession, Policy, MissingInput, Sequencer, SequencerConfig};
use lockstep_core::{Event, Instant, PeerId, StreamHash};
use std::time::Duration;

#[derive(Arbitrary, Debug)]
enum Op {
    Step { millis: u8 },
    Commit { client: bool, input: u16 },
    Garbage { from: u8, bytes: Vec<u8> },
    Replay { index: u8, from: u8 },
    Drop { index: u8 },
    Pause,
    Resume,
    Leave { client: bool },
    Reconnect { client: bool },
}

fuzz_target!(|input: (bool, bool, Vec<Op>)| {
    let (deadline, snapshots, ops) = input;
    let config = SequencerConfig {
        policy: if deadline {
            Policy::Deadline { missing: MissingInput::RepeatLast }
        } else {
            Policy::WaitForAll { abandon_after: Duration::from_secs(2) }
        },
        max_seats: 3,
        snapshot_join: snapshots,
        snapshot_join_after: 20,
        // The roster (host mode) rides along in half the runs.
        share_roster: deadline != snapshots,
        history: 64,
        timeout: Duration::from_secs(3),
        seat_grace: Duration::from_secs(8),
        ..SequencerConfig::default()
    };
    let mut now = Instant::ZERO;
    let mut server = Sequencer::<u16>::new(config, now).expect("config");
    let server_id = PeerId(0);
    let mut clients: Vec<ClientSession<u16>> = (0..2)
        .map(|k| {
            let config = ClientConfig { keep_frames: k * 32, ..ClientConfig::default() };
            ClientSession::new(config, server_id, now).expect("config")
        })
        .collect();
    // Each client's address (a reconnect moves it to a new one).
    let mut ids = [1u32, 2];
    let mut next_id = 10u32;
    let mut hashes = vec![StreamHash::new(); 2];
    // Each client's running hash after every frame, so their streams are
    // compared on the prefix both ran, whatever their lengths.
    let mut running: Vec<Vec<u64>> = vec![Vec::new(); 2];
    let mut seen: Vec<(u32, Vec<u8>)> = Vec::new();
    let mut buf = Vec::new();
    for op in ops.into_iter().take(1000) {
        match op {
            Op::Step { millis } => {
                now += Duration::from_millis(u64::from(millis));
                for (i, c) in clients.iter_mut().enumerate() {
                    c.handle_timeout(now);
                    while let Some(t) = c.poll_transmit(&mut buf) {
                        if seen.len() < 64 {
                            seen.push((ids[i], buf[..t.len].to_vec()));
                        }
                        let _ = server.handle_datagram(PeerId(ids[i]), &buf[..t.len], now);
                    }
                }
                for id in ids {
                    let _ = server.set_contact(PeerId(id), &id.to_le_bytes());
                }
                server.handle_timeout(now);
                while let Some(t) = server.poll_transmit(&mut buf) {
                    if let Some(k) = ids.iter().position(|id| *id == t.destination.0) {
                        let _ = clients[k].handle_datagram(server_id, &buf[..t.len], now);
                    }
                }
                for ((c, h), r) in clients.iter_mut().zip(hashes.iter_mut()).zip(running.iter_mut()) {
                    // Taken back without its state: its stream starts over.
                    while let Some(ev) = c.poll_event() {
                        if matches!(ev, Event::Reconnected { kept: false, .. }) {
                            *h = StreamHash::new();
                            r.clear();
                        }
                    }
                    while let Some(f) = c.advance() {
                        h.push(&f);
                        r.push(h.value());
                    }
                }
            }
            Op::Commit { client, input } => {
                let _ = clients[usize::from(client)].commit_local(input);
            }
            Op::Garbage { from, bytes } => {
                let _ = server.handle_datagram(PeerId(u32::from(from % 8)), &bytes, now);
            }
            Op::Replay { index, from } => {
                if !seen.is_empty() {
                    let (_, d) = &seen[usize::from(index) % seen.len()];
                    let _ = server.handle_datagram(PeerId(u32::from(from % 8)), d, now);
                }
            }
            Op::Drop { index } => {
                if !seen.is_empty() {
                    let k = usize::from(index) % seen.len();
                    seen.swap_remove(k);
                }
            }
            Op::Pause => server.pause(),
            Op::Resume => server.resume(),
            Op::Leave { client } => clients[usize::from(client)].leave(),
            Op::Reconnect { client } => {
                let k = usize::from(client);
                if clients[k].reconnect(server_id, None, now).is_ok() {
                    ids[k] = next_id;
                    next_id += 1;
                }
            }
        }
        let st = server.stats();
        // Kept for joiners and replaying clients up to eight times.
        assert!(st.history <= server.config().history as usize * 8);
        assert!(st.pending_inputs <= 3 * 64);
        for c in &clients {
            assert!(c.stats().buffered_frames <= c.buffer_bound());
        }
    }
    // Forged datagrams from an honest client's id may be taken as its own
    // (identity is the address, below any sealing), which can only change
    // what that seat played: the sequencer is one authority, so both
    // honest clients ran one stream, compared on the prefix both ran.
    let n = running[0].len().min(running[1].len());
    if n > 0 {
        assert_eq!(running[0][n - 1], running[1][n - 1], "streams differ by frame {n}");
    }
});
