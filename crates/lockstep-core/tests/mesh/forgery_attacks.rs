//! Datagrams forged from a player's address, on a mesh without sealing
//! (where a source address is all a peer has to go on): what one costs
//! must stay bounded, whatever it carries.

use lockstep_core::wire::{
    ChainWriter, DatagramWriter, Frames, Hello, InputRun, Inputs, List, Message,
};
use lockstep_core::{Frame, Instant, MeshConfig, MeshSession, PeerId, PlayerId, Roster, Tick};
use std::time::Duration;

fn mesh(n: u32) -> Vec<MeshSession<u16>> {
    let config = MeshConfig {
        abandon_after: None,
        ..MeshConfig::default()
    };
    let mut roster = Roster::new();
    for i in 0..n {
        roster = roster.player(PeerId(i), PlayerId(i as u16));
    }
    (0..n)
        .map(|i| {
            MeshSession::new(config.clone(), roster.clone(), PeerId(i), Instant::ZERO)
                .expect("a session")
        })
        .collect()
}

/// A datagram as from player 0, with base `base`: its input for tick `t`,
/// 7777, self-contained.
fn forged_input(base: Tick, t: Tick) -> Vec<u8> {
    let mut c = ChainWriter::new();
    c.push(&7777u16, usize::MAX);
    let mut chain = Vec::new();
    c.write(&mut chain);
    let mut d = Vec::new();
    let mut w = DatagramWriter::new(&mut d, base, 1200);
    w.push(&Message::Inputs(Inputs {
        acks: List::EMPTY,
        runs: (&[InputRun {
            seat: PlayerId(0),
            start: t,
            count: 1,
            back: 0,
            check: 0,
            chain: &chain,
        }])
            .into(),
    }))
    .expect("fits");
    w.finish();
    d
}

/// One forged input for player 0, racing its own to peer 1, is what peer 1
/// runs for that tick (a divergence its checkpoints catch). Player 0's
/// later runs to peer 1 are coded against its true input for that tick,
/// which peer 1 does not hold: peer 1 skips them (their check differs),
/// never misreading them, until player 0 sends them self-contained. Only
/// the forged tick differs between peers 1 and 2.
#[test]
fn one_forged_input_costs_one_tick_not_the_match() {
    let mut s = mesh(3);
    let mut frames: Vec<Vec<Frame<u16>>> = vec![Vec::new(); 3];
    let mut now = Instant::ZERO;
    let mut buf = Vec::new();
    let mut forged_at = None;
    for step in 0..300u32 {
        now += Duration::from_millis(33);
        for i in 0..3 {
            s[i].handle_timeout(now);
            let input = |t: u32| if i == 0 { 100 + (t % 50) as u16 } else { 1 };
            if s[i].input_due() {
                let t = s[i].next_commit().get();
                let _ = s[i].commit_local(input(t));
            }
            while let Some(f) = s[i].advance() {
                frames[i].push(f);
                if s[i].input_due() {
                    let t = s[i].next_commit().get();
                    let _ = s[i].commit_local(input(t));
                }
            }
            let mut out = Vec::new();
            while let Some(t) = s[i].poll_transmit(&mut buf) {
                out.push((t.destination.0 as usize, buf[..t.len].to_vec()));
            }
            for (to, b) in out {
                let _ = s[to].handle_datagram(PeerId(i as u32), &b, now);
            }
        }
        if step == 60 {
            // From player 0's address to peer 1: its input for the tick
            // after the one it commits next.
            let t = s[0].next_commit().saturating_add(1);
            let d = forged_input(s[0].frame(), t);
            s[1].handle_datagram(PeerId(0), &d, now).expect("taken");
            forged_at = Some(t);
        }
    }
    let forged = forged_at.expect("forged");
    let n = frames[1].len().min(frames[2].len());
    let differ: Vec<Tick> = (0..n)
        .filter(|&k| frames[1][k].inputs[0] != frames[2][k].inputs[0])
        .map(|k| frames[1][k].tick)
        .collect();
    assert_eq!(differ, vec![forged]);
    assert!(n > 250, "the peers played on: {n} frames");
}

/// A `Frames` message describes up to eight frames a byte: a player never
/// reads one (only observers take frames, from a player), so a forged one
/// costs it nothing, not even a look at the body.
#[test]
fn a_player_does_not_read_frames_sent_to_it() {
    let mut s = mesh(2);
    let now = Instant::ZERO;
    // A body that does not even decode: a player that read it would refuse
    // the datagram.
    let garbage = [0xFFu8; 40];
    let mut d = Vec::new();
    let mut w = DatagramWriter::new(&mut d, Tick::ZERO, 1200);
    w.push(&Message::Hello(Hello::default())).expect("fits");
    for _ in 0..8 {
        w.push(&Message::Frames(Frames {
            start: Tick::new(1),
            count: 1024,
            seats: 2,
            reference: None,
            body: &garbage,
        }))
        .expect("fits");
    }
    w.finish();
    assert_eq!(s[1].handle_datagram(PeerId(0), &d, now), Ok(()));
    assert_eq!(s[1].frame(), Tick::ZERO);
}

/// The same forgery at 120 ms each way, for the tick player 0 commits
/// next, and then 150 ms of player 0's datagrams to peer 1 lost: peer 1
/// acknowledges the forged tick as held, and every later run of player 0
/// to it is coded against the true input, which peer 1 skips. Player 0
/// sends them self-contained once the acknowledgement stands still while
/// it waits for it; as its inputs go a few times each, most of its
/// datagrams carry none, and each used to start that watch again (the
/// match stalled for good). It stalls a moment; only the forged tick
/// differs between peers 1 and 2.
#[test]
fn one_forged_input_then_a_lost_burst_costs_a_stall_not_the_match() {
    let mut s = mesh(3);
    let mut frames: Vec<Vec<Frame<u16>>> = vec![Vec::new(); 3];
    let latency = Duration::from_millis(120);
    let step = Duration::from_millis(5);
    let mut queue: Vec<(Instant, usize, usize, Vec<u8>)> = Vec::new();
    let mut now = Instant::ZERO;
    let mut buf = Vec::new();
    let mut forged_at = None;
    let mut after = 0;
    for k in 0..4_000u32 {
        now += step;
        for (_, f, t, b) in queue.extract_if(.., |(at, ..)| *at <= now) {
            let _ = s[t].handle_datagram(PeerId(f as u32), &b, now);
        }
        for i in 0..3 {
            s[i].handle_timeout(now);
            let input = |t: u32| if i == 0 { 100 + (t % 50) as u16 } else { 1 };
            if s[i].input_due() {
                let t = s[i].next_commit().get();
                let _ = s[i].commit_local(input(t));
            }
            while let Some(f) = s[i].advance() {
                frames[i].push(f);
                if s[i].input_due() {
                    let t = s[i].next_commit().get();
                    let _ = s[i].commit_local(input(t));
                }
            }
            let lost = forged_at.is_some() && k < 830 && i == 0;
            while let Some(t) = s[i].poll_transmit(&mut buf) {
                let to = t.destination.0 as usize;
                if !(lost && to == 1) {
                    queue.push((now + latency, i, to, buf[..t.len].to_vec()));
                }
            }
        }
        if k == 800 {
            let t = s[0].next_commit();
            let d = forged_input(s[0].frame(), t);
            s[1].handle_datagram(PeerId(0), &d, now).expect("taken");
            forged_at = Some(t);
            after = frames[1].len();
        }
    }
    let forged = forged_at.expect("forged");
    // The 16 s after the forgery at three quarters of the rate of the 4 s
    // before, at least (the default delay is short of this round trip).
    let ran = frames[1].len() - after;
    assert!(
        ran >= after * 3,
        "peer 1 ran {ran} frames in the 16 s after the forgery ({after} in the 4 s before)"
    );
    let n = frames[1].len().min(frames[2].len());
    let differ: Vec<Tick> = (0..n)
        .filter(|&k| frames[1][k].inputs[0] != frames[2][k].inputs[0])
        .map(|k| frames[1][k].tick)
        .collect();
    assert_eq!(differ, vec![forged]);
}
