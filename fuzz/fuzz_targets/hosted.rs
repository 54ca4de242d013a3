//! Host mode through takeovers: four `HostedSession`s (one hosting) on an
//! in-process network, fed arbitrary datagrams from arbitrary peers,
//! replays of what they sent to anyone, crashes and one-way cuts. No
//! panic, and what a session queues stays bounded. (Host mode is not
//! sealed: a forged datagram from the host's address may feed a player
//! made-up frames, so the streams are not compared here.)
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use lockstep_core::sequenced::{HostedConfig, HostedSession};
use lockstep_core::{Instant, PeerId};
use std::time::Duration;

#[derive(Arbitrary, Debug)]
enum Op {
    Step { millis: u8 },
    Commit { node: u8, input: u16 },
    Garbage { to: u8, from: u8, bytes: Vec<u8> },
    Replay { index: u8, to: u8, from: u8 },
    Crash { node: u8 },
    Cut { from: u8, to: u8 },
    Leave { node: u8 },
}

const NODES: usize = 4;

fuzz_target!(|ops: Vec<Op>| {
    let mut now = Instant::ZERO;
    let config = HostedConfig::default();
    let mut nodes: Vec<Option<HostedSession<u16>>> = (0..NODES)
        .map(|k| {
            Some(if k == 0 {
                HostedSession::host(config.clone(), now).expect("config")
            } else {
                HostedSession::join(config.clone(), PeerId(0), now).expect("config")
            })
        })
        .collect();
    let mut cut = [[false; NODES]; NODES];
    let mut seen: Vec<Vec<u8>> = Vec::new();
    let mut buf = Vec::new();
    for op in ops.into_iter().take(400) {
        match op {
            Op::Step { millis } => now += Duration::from_millis(u64::from(millis)),
            Op::Commit { node, input } => {
                if let Some(s) = nodes[node as usize % NODES].as_mut() {
                    let _ = s.commit_local(input);
                }
            }
            Op::Garbage { to, from, bytes } => {
                if let Some(s) = nodes[to as usize % NODES].as_mut() {
                    let _ = s.handle_datagram(PeerId(u32::from(from)), &bytes, now);
                }
            }
            Op::Replay { index, to, from } => {
                if let (Some(d), Some(s)) = (
                    seen.get(index as usize % seen.len().max(1)),
                    nodes[to as usize % NODES].as_mut(),
                ) {
                    let _ = s.handle_datagram(PeerId(u32::from(from) % 8), d, now);
                }
            }
            Op::Crash { node } => {
                let k = node as usize % NODES;
                nodes[k] = None;
            }
            Op::Cut { from, to } => {
                let (a, b) = (from as usize % NODES, to as usize % NODES);
                cut[a][b] = !cut[a][b];
            }
            Op::Leave { node } => {
                if let Some(s) = nodes[node as usize % NODES].as_mut() {
                    s.leave();
                }
            }
        }
        // Every node: contacts, timers, and what it sends delivered.
        let mut out: Vec<(usize, usize, Vec<u8>)> = Vec::new();
        for k in 0..NODES {
            let Some(s) = nodes[k].as_mut() else { continue };
            if let Some(seq) = s.sequencer() {
                let peers: Vec<PeerId> = seq.connections().map(|(p, _)| p).collect();
                for p in peers {
                    let _ = seq.set_contact(p, &p.0.to_le_bytes());
                }
            }
            for _ in 0..NODES * 2 {
                let Some(c) = s.contact_wanted().map(<[u8]>::to_vec) else {
                    break;
                };
                let Ok(b) = <[u8; 4]>::try_from(&c[..]) else {
                    break;
                };
                s.resolved(&c, PeerId(u32::from_le_bytes(b)));
            }
            s.handle_timeout(now);
            while s.advance().is_some() {}
            while s.poll_event().is_some() {}
            while s.poll_ignored().is_some() {}
            let mut sent = 0;
            while let Some(t) = s.poll_transmit(&mut buf) {
                sent += 1;
                assert!(sent < 4096, "a session sends without end");
                let to = t.destination.0 as usize;
                if to < NODES && !cut[k][to] {
                    out.push((k, to, buf[..t.len].to_vec()));
                }
            }
        }
        for (from, to, d) in out {
            if seen.len() < 256 {
                seen.push(d.clone());
            }
            if let Some(s) = nodes[to].as_mut() {
                let _ = s.handle_datagram(PeerId(from as u32), &d, now);
            }
        }
    }
});
