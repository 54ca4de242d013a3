//! Attacks on the mesh's adaptive input delay (`DelayWants`), found in a
//! hostile review: honest peers play in the same session, and either end
//! with the same `DelayChanged` events at the same ticks or, where a liar
//! can make them differ, find out through their checkpoints.

use crate::common;
use common::hand::{INPUT, Net, adaptive_mesh as config, datagram, set_wants};
use lockstep_core::wire::{Abandon, ChainWriter, Datagram, InputRun, Inputs, List, Message};
use lockstep_core::{Frame, MeshConfig, PeerId, PlayerId, Tick};
use std::time::Duration;

/// Equivocation: player 1 stamps a want of 16 on its input to peer 0 and
/// none to peer 2. Its inputs are the same to both, so their games agree,
/// but their delays part; the checkpoints carry the delay, so they find
/// out.
#[test]
fn wants_sent_differently_to_two_honest_peers_are_found_out() {
    let mut net = Net::new(3, &config());
    for _ in 0..300 {
        net.tick(&mut |from, to, b, net| {
            let r = net.s[to].frame();
            match (from, to) {
                (1, 0) => vec![(1, 0, set_wants(&b, r, PlayerId(1), false, &|_| Some(16)))],
                (1, _) => vec![(1, to, set_wants(&b, r, PlayerId(1), false, &|_| None))],
                _ => vec![(from, to, b)],
            }
        });
    }
    assert!(net.frames[0].len() > 200 && net.frames[2].len() > 200);
    net.assert_inputs_agree(0, 2);
    let (a, b) = net.common_changes(0, 2);
    assert_ne!(a, b, "the liar split their delays");
    assert!(net.desynced(0) || net.desynced(2), "and they found out");
}

/// A want-less copy of a player's input raced ahead of the real one from
/// the player's address (four players V, P, M, Y; P wants 16 from tick
/// 30; M strips the wants from P's runs and races them to V, which hears P
/// a tick late). V takes the input without its wants; its delay parts
/// from Y's, and the checkpoints tell them.
#[test]
fn a_wantless_copy_raced_ahead_is_found_out() {
    const V: usize = 0;
    const P: usize = 1;
    const M: usize = 2;
    const Y: usize = 3;
    let mut net = Net::new(4, &config());
    for _ in 0..30 {
        net.tick(&mut |from, to, b, _| vec![(from, to, b)]);
    }
    let mut late: Vec<Vec<u8>> = Vec::new();
    for _ in 0..300 {
        net.tick(&mut |from, to, b, net| {
            if from != P {
                return vec![(from, to, b)];
            }
            let b = set_wants(&b, net.s[to].frame(), PlayerId(P as u16), false, &|_| {
                Some(16)
            });
            if to == V {
                let out = late.drain(..).map(|d| (P, V, d)).collect();
                late.push(b);
                return out;
            }
            let mut out = vec![(P, to, b.clone())];
            if to == M {
                let d = Datagram::decode(&b, net.s[M].frame()).expect("a datagram");
                let runs: Vec<InputRun<'_>> = d
                    .messages
                    .iter()
                    .filter_map(|m| match m {
                        Message::Inputs(i) => Some(i.runs),
                        _ => None,
                    })
                    .flatten()
                    .filter(|r| r.seat == PlayerId(P as u16))
                    .collect();
                if !runs.is_empty() {
                    let copy = datagram(
                        d.base,
                        &[Message::Inputs(Inputs {
                            acks: List::EMPTY,
                            runs: (&runs).into(),
                        })],
                    );
                    out.push((P, V, copy));
                }
            }
            out
        });
    }
    assert!(net.frames[V].len() > 250 && net.frames[Y].len() > 250);
    net.assert_inputs_agree(V, Y);
    let (v, y) = net.common_changes(V, Y);
    assert_ne!(v, y, "the copy split their delays");
    assert!(net.desynced(V) || net.desynced(Y), "and they found out");
}

/// Four players: the liar L, V, Y and C. With one datagram forged from Y's
/// address (a vote against C) and one of its own (its vote, and C's next
/// inputs "forwarded", with a want of 16 on the first), L gets V to freeze
/// C for a moment and take the copy and the want (V takes every
/// datagram's word at once here, `vote_hold` zero: with the default hold
/// the forged vote is taken back before V freezes anything, see
/// `vote_forgery_attacks.rs`). At the next datagrams the majority is gone
/// and V thaws C: C's own input replaces the copies, and brings its own
/// want (none), not L's.
#[test]
fn a_want_forwarded_during_a_brief_freeze_does_not_outlive_the_thaw() {
    brief_freeze(true);
}

/// The control: the same brief freeze with the forwarded input alone.
#[test]
fn a_brief_freeze_with_forwarded_input_alone_leaves_no_trace() {
    brief_freeze(false);
}

fn brief_freeze(with_want: bool) {
    const L: usize = 0;
    const V: usize = 1;
    const Y: usize = 2;
    const C: usize = 3;
    let config = MeshConfig {
        vote_hold: Duration::ZERO,
        ..config()
    };
    let mut net = Net::new(4, &config);
    let mut honest = |from: usize, to: usize, b: Vec<u8>, _: &Net| vec![(from, to, b)];
    for _ in 0..60 {
        net.tick(&mut honest);
    }
    let seat_c = PlayerId(C as u16);
    let base = net.s[V].frame();
    let vote = Abandon {
        votes: vec![seat_c],
        frozen: vec![],
        endorsements: vec![],
    };
    let from_y = datagram(base, &[Message::Abandon(vote.clone())]);
    net.s[V]
        .handle_datagram(PeerId(Y as u32), &from_y, net.now)
        .expect("taken");
    let next = net.s[C].stats().next_commit;
    let mut chain = ChainWriter::new();
    for _ in 0..6 {
        assert!(chain.push(&INPUT, usize::MAX));
    }
    let mut bytes = Vec::new();
    chain.write(&mut bytes);
    let mut msgs = vec![Message::Abandon(vote)];
    if with_want {
        msgs.push(Message::DelayWants {
            seat: seat_c,
            changes: vec![(next, 16)],
        });
    }
    let runs = [InputRun {
        seat: seat_c,
        start: next,
        count: 6,
        back: 0,
        check: 0,
        chain: &bytes,
    }];
    msgs.push(Message::Inputs(Inputs {
        acks: List::EMPTY,
        runs: (&runs).into(),
    }));
    let from_l = datagram(base, &msgs);
    net.s[V]
        .handle_datagram(PeerId(L as u32), &from_l, net.now)
        .expect("taken");
    for _ in 0..300 {
        net.tick(&mut honest);
    }
    for i in [V, Y, C] {
        assert!(net.frames[i].len() > 250, "{i} plays on");
    }
    net.assert_inputs_agree(V, Y);
    let (v, y) = net.common_changes(V, Y);
    assert_eq!(v, y, "V and Y ran different DelayChanged events");
    assert!(!net.desynced(V) && !net.desynced(Y));
}

/// The equivocation above, then the equivocator goes silent for good and
/// both honest players vote it out. Their wants for it differ, but wants
/// are not in the abandon digest: they agree on where its seat ends and
/// play on.
#[test]
fn an_equivocator_that_then_goes_silent_is_abandoned() {
    silent_player_is_abandoned(true);
}

/// The control: without the equivocation.
#[test]
fn a_player_that_goes_silent_is_abandoned() {
    silent_player_is_abandoned(false);
}

fn silent_player_is_abandoned(equivocate: bool) {
    let mut net = Net::new(3, &config());
    for _ in 0..200 {
        net.tick(&mut |from, to, b, net| {
            let r = net.s[to].frame();
            match (from, to) {
                (1, 0) if equivocate => {
                    vec![(1, 0, set_wants(&b, r, PlayerId(1), false, &|_| Some(16)))]
                }
                (1, _) if equivocate => {
                    vec![(1, to, set_wants(&b, r, PlayerId(1), false, &|_| None))]
                }
                _ => vec![(from, to, b)],
            }
        });
    }
    let stuck = [net.s[0].frame(), net.s[2].frame()];
    for i in [0, 2] {
        net.s[i].abandon(PlayerId(1)).expect("a vote");
    }
    for _ in 0..600 {
        net.tick(&mut |from, to, b, _| {
            if from == 1 || to == 1 {
                vec![]
            } else {
                vec![(from, to, b)]
            }
        });
    }
    for (k, i) in [0, 2].into_iter().enumerate() {
        assert!(
            net.s[i].frame().since(stuck[k]) >= 100,
            "{i} stuck at {} ({} before the vote)",
            net.s[i].frame(),
            stuck[k]
        );
    }
}

/// A griefer wanting the least delay for half a second, then the most,
/// over and over, the same to everyone. Each fall would hold every honest
/// player's commits back and each rise fill its lead with neutral input;
/// the delay falls only once the wants stayed lower for a second, and by
/// one tick, so at most a tick a second of anyone's input is neutral.
#[test]
fn a_griefer_oscillating_its_want_blanks_no_more_than_a_tick_a_second() {
    let mut net = Net::new(3, &config());
    let want = |t: Tick| Some(if t.get() % 30 < 15 { 1 } else { 16 });
    for _ in 0..900 {
        net.tick(&mut |from, to, b, net| {
            if from == 1 {
                let r = net.s[to].frame();
                vec![(1, to, set_wants(&b, r, PlayerId(1), true, &want))]
            } else {
                vec![(from, to, b)]
            }
        });
    }
    let (a, b) = net.common_changes(0, 2);
    assert_eq!(a, b, "the honest peers agree");
    let ran: Vec<&Frame<u16>> = net.frames[0].iter().skip(30).collect();
    let blank = ran.iter().filter(|f| f.inputs[0] == Some(0)).count();
    let seconds = ran.len() as f64 / 30.0;
    assert!(
        (blank as f64) <= seconds + 16.0,
        "{blank} of player 0's {} ticks ran neutral input it never committed",
        ran.len()
    );
}
