//! One test per mesh rule, driving sessions by hand so each rule is seen in
//! isolation, plus hostile input.

use crate::common;
use common::{Session, exchange, exchange_for};
use lockstep_core::wire::{
    self, ChainWriter, Datagram, DatagramWriter, Hello, InputRun, Inputs, List, Message, WireError,
};
use lockstep_core::{
    AbandonError, ChecksumError, CommitError, ConfigError, DatagramError, Event, Instant,
    MeshConfig, PeerId, PlayerId, Roster, SystemEvent, Tick,
};
use proptest::prelude::*;
use std::time::Duration;

const T0: Instant = Instant::ZERO;

fn roster(players: u32, observers: u32) -> Roster {
    let mut r = Roster::new();
    for i in 0..players {
        r = r.player(PeerId(i), PlayerId(i as u16));
    }
    for i in players..players + observers {
        r = r.observer(PeerId(i));
    }
    r
}

fn config() -> MeshConfig {
    MeshConfig {
        abandon_after: None,
        ..MeshConfig::default()
    }
}

fn session(players: u32, observers: u32, local: u32) -> Session {
    Session::new(config(), roster(players, observers), PeerId(local), T0).expect("valid config")
}

fn mesh(players: u32, observers: u32) -> Vec<(PeerId, Session)> {
    (0..players + observers)
        .map(|i| (PeerId(i), session(players, observers, i)))
        .collect()
}

/// Every datagram `s` wants to send now, with its destination.
fn drain(s: &mut Session) -> Vec<(PeerId, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    s.handle_timeout(s.stats().peers.first().map_or(T0, |_| T0));
    while let Some(t) = s.poll_transmit(&mut buf) {
        out.push((t.destination, buf[..t.len].to_vec()));
    }
    out
}

fn packet_to(s: &mut Session, to: PeerId) -> Vec<u8> {
    drain(s)
        .into_iter()
        .find(|(d, _)| *d == to)
        .map(|(_, b)| b)
        .expect("a packet for the peer")
}

/// A datagram as a peer at tick `base` would send it: a Hello, then the
/// runs.
fn forged(base: u32, runs: Vec<(PlayerId, Tick, u32, Vec<u8>)>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = DatagramWriter::new(&mut out, Tick::new(base), 65_000);
    w.push(&Message::Hello(Hello::default())).unwrap();
    let runs: Vec<InputRun<'_>> = runs
        .iter()
        .map(|(seat, start, count, chain)| InputRun {
            seat: *seat,
            start: *start,
            count: *count,
            back: 0,
            check: 0,
            chain,
        })
        .collect();
    w.push(&Message::Inputs(Inputs {
        acks: List::EMPTY,
        runs: (&runs).into(),
    }))
    .unwrap();
    w.finish();
    out
}

/// The input runs of a datagram, decoded.
fn runs_in(bytes: &[u8]) -> Vec<(PlayerId, Tick, Vec<u16>)> {
    let d = Datagram::decode(bytes, Tick::ZERO).unwrap();
    d.messages
        .iter()
        .filter_map(|m| match m {
            Message::Inputs(i) => Some(i.runs),
            _ => None,
        })
        .flatten()
        .map(|r| (r.seat, r.start, r.decode::<u16>(None).unwrap()))
        .collect()
}

/// A run of `seat`'s inputs from `start`, chain-encoded.
fn run<I: lockstep_core::Input>(
    seat: u16,
    start: u32,
    inputs: &[I],
) -> (PlayerId, Tick, u32, Vec<u8>) {
    let mut w = ChainWriter::new();
    for i in inputs {
        assert!(w.push(i, usize::MAX));
    }
    let mut chain = Vec::new();
    w.write(&mut chain);
    (PlayerId(seat), Tick::new(start), inputs.len() as u32, chain)
}

fn advance_all(s: &mut Session) -> Vec<lockstep_core::Frame<u16>> {
    std::iter::from_fn(|| s.advance()).collect()
}

#[test]
fn opening_ticks_are_primed_neutral_with_the_membership() {
    let mut s = session(3, 0, 0);
    let frames = advance_all(&mut s);
    assert_eq!(frames.len(), 2, "delay 2 primes ticks 0 and 1");
    assert_eq!(frames[0].inputs, vec![Some(0), Some(0), Some(0)]);
    assert_eq!(
        frames[0].events,
        (0..3)
            .map(|p| SystemEvent::Joined {
                player: PlayerId(p)
            })
            .collect::<Vec<_>>()
    );
    assert!(frames[1].events.is_empty());
    assert_eq!(
        s.commit_local(5),
        Ok(Tick::new(2)),
        "input goes delay ticks ahead"
    );
}

#[test]
fn a_missing_input_stalls_and_names_who_is_missing() {
    let mut t = T0;
    let mut peers = mesh(3, 0);
    for (_, s) in peers.iter_mut() {
        advance_all(s);
    }
    peers[0].1.commit_local(1).unwrap();
    peers[1].1.commit_local(2).unwrap();
    exchange(&mut peers, &mut t);
    let a = &mut peers[0].1;
    assert_eq!(a.advance(), None, "never guessed");
    assert_eq!(a.awaiting(), vec![PlayerId(2)]);
    assert_eq!(
        a.awaiting(),
        vec![PlayerId(2)],
        "asking does not change anything"
    );
    assert_eq!(
        a.stats().stalls,
        0,
        "40 ms without a frame is not a stall at 30 Hz"
    );
    t += Duration::from_millis(30);
    a.handle_timeout(t);
    assert_eq!(a.advance(), None);
    assert_eq!(a.stats().stalls, 1, "70 ms, two tick periods, is");
    a.commit_local(1).unwrap();
    a.commit_local(1).unwrap();
    peers[2].1.commit_local(3).unwrap();
    exchange(&mut peers, &mut t);
    let frame = peers[0].1.advance().expect("all inputs in");
    assert_eq!(frame.inputs, vec![Some(1), Some(2), Some(3)]);
    // Tick 3: a committed it, the others have not.
    assert_eq!(peers[0].1.awaiting(), vec![PlayerId(1), PlayerId(2)]);
}

#[test]
fn commits_are_refused_beyond_the_lead_limit_and_resume_when_peers_catch_up() {
    let mut t = T0;
    let mut peers = mesh(2, 0);
    let limit = config().delay + config().max_lead;
    let a = &mut peers[0].1;
    let mut accepted = 0;
    let refusal = loop {
        match a.commit_local(7) {
            Ok(_) => accepted += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(refusal, CommitError::TooFarAhead { lead: limit, limit });
    assert_eq!(
        accepted,
        config().max_lead,
        "delay ticks are primed, max_lead more accepted"
    );
    assert!(a.stats().commits_refused >= 1);
    // The other peer catches up; so may we.
    for _ in 0..accepted {
        peers[1].1.commit_local(8).unwrap();
    }
    exchange(&mut peers, &mut t);
    for (_, s) in peers.iter_mut() {
        advance_all(s);
    }
    exchange(&mut peers, &mut t);
    assert!(peers[0].1.commit_local(7).is_ok());
}

#[test]
fn resends_start_from_the_peers_acknowledged_position_not_a_window() {
    let mut a = session(2, 0, 0);
    let mut b = session(2, 0, 1);
    let mut t = T0;
    // Commit a long run while every packet to b is lost.
    let mut committed = 0;
    while a.commit_local(committed).is_ok() {
        committed += 1;
        drain(&mut a);
    }
    // b has nothing beyond the primed ticks: its ack for seat 0 is tick 2.
    t += Duration::from_millis(100);
    a.handle_timeout(t);
    let bytes = packet_to(&mut a, PeerId(1));
    let runs = runs_in(&bytes);
    let own = runs.iter().find(|r| r.0 == PlayerId(0)).expect("inputs");
    assert_eq!(own.1, Tick::new(2), "resent from what b lacks");
    assert_eq!(
        own.2.len(),
        committed as usize,
        "every unacknowledged input"
    );
    b.handle_datagram(PeerId(0), &bytes, t).unwrap();
    // Once b acknowledges, a resends from the new position only.
    b.commit_local(0).unwrap();
    let ack = packet_to(&mut b, PeerId(0));
    a.handle_datagram(PeerId(1), &ack, t).unwrap();
    t += Duration::from_millis(100);
    a.handle_timeout(t);
    let bytes = packet_to(&mut a, PeerId(1));
    let again = runs_in(&bytes);
    assert!(
        again.iter().all(|r| r.0 != PlayerId(0)),
        "nothing left to resend: {again:?}"
    );
}

#[test]
fn duplicates_and_late_copies_never_change_a_decided_tick() {
    let mut b = session(2, 0, 1);
    b.commit_local(9).unwrap();
    // The real input for a's tick 2, then a forged different copy.
    b.handle_datagram(PeerId(0), &forged(0, vec![run(0, 2, &[1u16])]), T0)
        .unwrap();
    b.handle_datagram(PeerId(0), &forged(0, vec![run(0, 2, &[99u16])]), T0)
        .unwrap();
    let frames = advance_all(&mut b);
    assert_eq!(frames[2].inputs, vec![Some(1), Some(9)]);
    // A copy for a tick already run is dropped, not an error.
    let before = b.stats().inputs_redundant;
    b.handle_datagram(PeerId(0), &forged(0, vec![run(0, 2, &[5u16])]), T0)
        .unwrap();
    assert_eq!(b.stats().inputs_redundant, before + 1);
}

#[test]
fn far_future_and_flooded_inputs_cannot_grow_memory() {
    let mut b = session(2, 0, 1);
    let horizon = config().delay + config().max_lead;
    let before = b.stats().buffered_ticks;
    let window = wire::MAX_TICK_DELTA as u32;
    for start in [horizon, horizon + 1, 1_000, window - 1, window] {
        let d = forged(0, vec![run(0, start, &[1u16])]);
        b.handle_datagram(PeerId(0), &d, T0).unwrap();
    }
    assert_eq!(b.stats().buffered_ticks, before);
    assert_eq!(b.stats().inputs_refused, 5);
    // Further from its datagram's base than any tick field may reach.
    for start in [window + 1, u32::MAX - 3, u32::MAX] {
        let d = forged(0, vec![run(0, start, &[1u16])]);
        assert_eq!(
            b.handle_datagram(PeerId(0), &d, T0),
            Err(DatagramError::Wire(WireError::TickOutOfWindow))
        );
    }
    // A flood of every tick a peer could name.
    let mut rng = lockstep_core::sim::SimRng::new(1);
    for _ in 0..5_000 {
        let start = rng.next_u64() as u32 & 0x000f_ffff;
        let base = rng.next_u64() as u32 & 0x000f_ffff;
        let d = forged(base, vec![run(0, start, &[1u16, 2])]);
        let _ = b.handle_datagram(PeerId(0), &d, T0);
    }
    assert!(b.stats().buffered_ticks <= b.buffer_bound());
    // The one tick just inside the horizon is accepted.
    let d = forged(0, vec![run(0, horizon - 1, &[1u16])]);
    let refused = b.stats().inputs_refused;
    b.handle_datagram(PeerId(0), &d, T0).unwrap();
    assert_eq!(b.stats().inputs_refused, refused);
}

#[test]
fn a_peer_may_only_send_its_own_seat() {
    let mut b = session(3, 0, 1);
    // Peer 0 claims to carry seat 2's input.
    let d = forged(0, vec![run(2, 2, &[1u16])]);
    b.handle_datagram(PeerId(0), &d, T0).unwrap();
    assert_eq!(b.stats().inputs_refused, 1);
    // Or ours.
    let d = forged(0, vec![run(1, 2, &[1u16])]);
    b.handle_datagram(PeerId(0), &d, T0).unwrap();
    assert_eq!(b.stats().inputs_refused, 2);
}

#[test]
fn history_is_pruned_once_every_peer_has_it_even_while_stalled() {
    let mut t = T0;
    let mut peers = mesh(3, 0);
    for round in 0..200u16 {
        for (_, s) in peers.iter_mut().take(2) {
            let _ = s.commit_local(round);
            advance_all(s);
        }
        // Peer 2 runs frames but commits only every fifth round: the others
        // stall on it, and must still prune what everyone has.
        if round % 5 == 0 {
            let _ = peers[2].1.commit_local(round);
        }
        advance_all(&mut peers[2].1);
        exchange(&mut peers, &mut t);
        for (_, s) in peers.iter() {
            // What is ahead, and the abandon window behind.
            let lead = (config().delay + config().max_lead) as usize;
            assert!(s.stats().buffered_ticks <= lead + s.abandon_window() as usize + 2);
        }
    }
    assert!(peers[0].1.frame().get() > 30);
}

#[test]
fn observers_run_the_same_frames_commit_nothing_and_hold_nobody_up() {
    let mut t = T0;
    let mut peers = mesh(2, 1);
    assert_eq!(peers[2].1.commit_local(1), Err(CommitError::Observer));
    assert!(peers[2].1.watching());
    // The observer never speaks; the players run 50 ticks regardless.
    let mut a_frames = Vec::new();
    for i in 0..50u16 {
        for (_, s) in peers.iter_mut().take(2) {
            let _ = s.commit_local(i);
        }
        let (players, _) = peers.split_at_mut(2);
        exchange(players, &mut t);
        a_frames.extend(advance_all(&mut players[0].1));
        advance_all(&mut players[1].1);
    }
    assert!(a_frames.len() >= 45);
    // Once connected, the observer gets every frame the players all ran.
    for _ in 0..20 {
        exchange(&mut peers, &mut t);
        advance_all(&mut peers[0].1);
        advance_all(&mut peers[1].1);
    }
    let seen = advance_all(&mut peers[2].1);
    assert!(seen.len() >= 45, "observer ran {}", seen.len());
    assert_eq!(seen[..45], a_frames[..45]);
}

#[test]
fn pause_freezes_everyone_on_one_frame_and_resume_lifts_it() {
    let mut t = T0;
    let mut peers = mesh(2, 0);
    for (_, s) in peers.iter_mut() {
        s.commit_local(1).unwrap();
    }
    // a commits past the frame b is about to freeze on.
    peers[0].1.commit_local(1).unwrap();
    exchange(&mut peers, &mut t);
    let frame = peers[1].1.request_pause().unwrap();
    assert_eq!(frame, Tick::new(3), "b's next commit");
    assert!(matches!(
        peers[1].1.commit_local(1),
        Err(CommitError::Paused { frame: f }) if f == frame
    ));
    exchange(&mut peers, &mut t);
    for (_, s) in peers.iter_mut() {
        advance_all(s);
        assert!(s.paused());
        assert!(
            s.frozen(),
            "resting on {:?} at {}",
            s.pause_frame(),
            s.frame()
        );
        assert_eq!(s.frame(), frame);
        assert_eq!(s.awaiting(), vec![], "frozen waits on nobody");
    }
    // a had committed past the freeze frame; it still may not run it.
    assert!(matches!(peers[0].1.poll_event(), Some(Event::Paused { frame: f }) if f == frame));
    assert_eq!(peers[0].1.resume(), Some(frame));
    exchange(&mut peers, &mut t);
    for (_, s) in peers.iter_mut() {
        assert!(!s.paused(), "resumed everywhere");
        assert_eq!(s.lifted_pause(), Some(frame));
    }
    peers[1].1.commit_local(2).unwrap();
    exchange(&mut peers, &mut t);
    assert!(peers[0].1.advance().is_some());
}

#[test]
fn a_peer_behind_the_freeze_frame_may_still_commit_up_to_it() {
    let mut t = T0;
    let mut peers = mesh(2, 0);
    // a commits well ahead and pauses at its next commit tick (5).
    for _ in 0..3 {
        peers[0].1.commit_local(1).unwrap();
    }
    let frame = peers[0].1.request_pause().unwrap();
    assert_eq!(frame, Tick::new(5));
    exchange(&mut peers, &mut t);
    // b has committed nothing: it owes ticks 2..5 and must be allowed to.
    let b = &mut peers[1].1;
    for t in 2..5 {
        assert_eq!(b.commit_local(2), Ok(Tick::new(t)));
    }
    assert!(matches!(b.commit_local(2), Err(CommitError::Paused { .. })));
    exchange(&mut peers, &mut t);
    for (_, s) in peers.iter_mut() {
        advance_all(s);
        assert!(s.frozen());
        assert_eq!(s.frame(), frame);
    }
}

#[test]
fn abandoning_a_silent_player_unsticks_the_waiting_tick() {
    let mut t = T0;
    let mut peers = mesh(3, 0);
    for (_, s) in peers.iter_mut() {
        s.commit_local(1).unwrap();
    }
    exchange(&mut peers, &mut t);
    // Seat 2 falls silent; the other two carry on and stall on it.
    let mut live: Vec<_> = peers.drain(..2).collect();
    for (_, s) in live.iter_mut() {
        s.commit_local(2).unwrap();
        advance_all(s);
    }
    exchange(&mut live, &mut t);
    assert_eq!(live[0].1.awaiting(), vec![PlayerId(2)]);
    // One vote of two is no majority: nothing changes.
    live[1].1.abandon(PlayerId(2)).unwrap();
    exchange(&mut live, &mut t);
    assert!(live.iter().all(|(_, s)| s.abandoned().is_empty()));
    assert_eq!(live[0].1.awaiting(), vec![PlayerId(2)]);
    // With the second vote, once the majority has stood for `vote_hold`,
    // the seat is frozen; the lowest seat proposes, the other endorses,
    // and both apply.
    live[0].1.abandon(PlayerId(2)).unwrap();
    exchange(&mut live, &mut t);
    assert!(
        live.iter().all(|(_, s)| s.abandoned().is_empty()),
        "not before the hold"
    );
    exchange_for(&mut live, &mut t, config().vote_hold);
    for (_, s) in live.iter_mut() {
        assert_eq!(s.abandoned(), &[(PlayerId(2), Tick::new(3))]);
        let frames = advance_all(s);
        assert_eq!(frames[0].tick, Tick::new(3));
        assert_eq!(frames[0].inputs, vec![Some(2), Some(2), None]);
        assert_eq!(
            frames[0].events,
            vec![SystemEvent::Abandoned {
                player: PlayerId(2)
            }]
        );
        let evs: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
        assert!(evs.contains(&Event::Abandoned {
            player: PlayerId(2),
            from: Tick::new(3)
        }));
    }
    // The seat stays empty; the two keep playing.
    for (_, s) in live.iter_mut() {
        s.commit_local(3).unwrap();
    }
    exchange(&mut live, &mut t);
    let f = live[0].1.advance().expect("runs without seat 2");
    assert_eq!(f.inputs[2], None);
}

#[test]
fn abandonment_uses_input_only_some_peers_hold() {
    let mut t = T0;
    // Seat 2's input for tick 3 reached peer 1 but not peer 0 (the decider).
    // Peer 1 may even have run tick 3 with it: the decision must not empty
    // tick 3, and peer 0 must get the input from peer 1.
    let mut peers = mesh(3, 0);
    for (_, s) in peers.iter_mut() {
        s.commit_local(1).unwrap();
        s.commit_local(1).unwrap();
    }
    let mut c = peers.remove(2).1;
    let to_b = packet_to(&mut c, PeerId(1));
    peers[1].1.handle_datagram(PeerId(2), &to_b, t).unwrap();
    // Peer 0 only ever heard seat 2's first input.
    let seat2 = runs_in(&to_b)
        .into_iter()
        .find(|r| r.0 == PlayerId(2))
        .unwrap();
    let d = forged(0, vec![run(2, seat2.1.get(), &seat2.2[..1])]);
    peers[0].1.handle_datagram(PeerId(2), &d, t).unwrap();
    exchange(&mut peers, &mut t);
    let b_ran: Vec<_> = advance_all(&mut peers[1].1);
    assert_eq!(
        b_ran.last().map(|f| f.tick),
        Some(Tick::new(3)),
        "b ran tick 3 with seat 2's input"
    );
    peers[0].1.abandon(PlayerId(2)).unwrap();
    peers[1].1.abandon(PlayerId(2)).unwrap();
    exchange_for(&mut peers, &mut t, config().vote_hold);
    assert_eq!(peers[0].1.abandoned(), &[(PlayerId(2), Tick::new(4))]);
    let a_ran = advance_all(&mut peers[0].1);
    assert_eq!(a_ran[..b_ran.len()], b_ran[..]);
}

#[test]
fn abandon_is_refused_for_nonsense() {
    let mut s = session(3, 1, 0);
    assert_eq!(s.abandon(PlayerId(0)), Err(AbandonError::Local));
    assert_eq!(
        s.abandon(PlayerId(7)),
        Err(AbandonError::NoSuchPlayer(PlayerId(7)))
    );
    let mut o = session(3, 1, 3);
    assert_eq!(o.abandon(PlayerId(1)), Err(AbandonError::Observer));
}

#[test]
fn mismatching_checkpoints_raise_desync_on_both_sides_and_find_the_first_tick() {
    let mut t = T0;
    let mut peers = mesh(2, 0);
    // Peer 1's state parts from peer 0's at tick 13, for good.
    let hash =
        |peer: usize, tick: Tick| u64::from(tick.get()) + u64::from(peer == 1 && tick.get() >= 13);
    let mut events: Vec<Vec<Event>> = vec![Vec::new(), Vec::new()];
    for _ in 0..40 {
        for (k, (_, s)) in peers.iter_mut().enumerate() {
            if s.commit_local(0).is_err() {
                continue;
            }
            for f in advance_all(s) {
                s.report_checksum(f.tick, hash(k, f.tick)).unwrap();
            }
        }
        exchange(&mut peers, &mut t);
        for (k, (_, s)) in peers.iter_mut().enumerate() {
            events[k].extend(std::iter::from_fn(|| s.poll_event()));
        }
    }
    for (k, other) in [(0, 1u32), (1, 0)] {
        let desyncs: Vec<_> = events[k]
            .iter()
            .filter(|e| matches!(e, Event::Desync { .. } | Event::DesyncLocated { .. }))
            .collect();
        // Found at the first checkpoint after the split (the chain through
        // tick 15, 16 bits of it), once, and the search names tick 13.
        assert_eq!(desyncs.len(), 2, "{k}: {desyncs:?}");
        assert!(
            matches!(desyncs[0], Event::Desync { tick, peer, local, remote }
                if *tick == Tick::new(15) && *peer == PeerId(other) && local != remote && *local <= 0xFFFF),
            "{desyncs:?}"
        );
        let Event::DesyncLocated {
            peer,
            checkpoint,
            first,
        } = desyncs[1]
        else {
            panic!("{desyncs:?}")
        };
        assert_eq!((*peer, *checkpoint), (PeerId(other), Tick::new(15)));
        let first = first.expect("located");
        assert_eq!(first.tick, Tick::new(13));
        assert_eq!(first.local, hash(k, Tick::new(13)));
        assert_eq!(first.remote, hash(other as usize, Tick::new(13)));
    }
    let s = &mut peers[0].1;
    let last = s.frame().saturating_sub(1);
    assert_eq!(
        s.report_checksum(last, 0),
        Err(ChecksumError::NotAscending { tick: last, last })
    );
    assert_eq!(
        s.report_checksum(last.saturating_add(9), 0),
        Err(ChecksumError::NotRun {
            tick: last.saturating_add(9),
            next: last.saturating_add(1)
        })
    );
}

#[test]
fn bad_configurations_are_refused() {
    let r = roster(2, 0);
    let bad = |c: MeshConfig| Session::new(c, r.clone(), PeerId(0), T0).err();
    assert!(matches!(
        bad(MeshConfig {
            max_lead: 0,
            ..config()
        }),
        Some(ConfigError::Invalid(_))
    ));
    assert!(matches!(
        bad(MeshConfig {
            max_datagram: 100,
            ..config()
        }),
        Some(ConfigError::Invalid(_))
    ));
    assert_eq!(
        Session::new(config(), r.clone(), PeerId(5), T0).err(),
        Some(ConfigError::LocalNotInRoster(PeerId(5)))
    );
    let dup = Roster::new()
        .player(PeerId(0), PlayerId(0))
        .player(PeerId(1), PlayerId(0));
    assert_eq!(
        Session::new(config(), dup, PeerId(0), T0).err(),
        Some(ConfigError::DuplicateSeat(PlayerId(0)))
    );
    let none = Roster::new().observer(PeerId(0));
    assert_eq!(
        Session::new(config(), none, PeerId(0), T0).err(),
        Some(ConfigError::NoPlayers)
    );
}

#[test]
fn oversized_inputs_are_refused_both_ways() {
    let mut s =
        lockstep_core::MeshSession::<Vec<u8>>::new(config(), roster(2, 0), PeerId(0), T0).unwrap();
    assert_eq!(
        s.commit_local(vec![0; 300]),
        Err(CommitError::InputTooLarge { len: 300, max: 256 })
    );
    let d = forged(0, vec![run(1, 2, &[vec![7u8; 300]])]);
    assert_eq!(
        s.handle_datagram(PeerId(1), &d, T0),
        Err(DatagramError::Violation("input over the size limit"))
    );
}

#[test]
fn every_truncation_of_a_real_packet_is_rejected_without_effect() {
    let mut a = session(2, 0, 0);
    for i in 0..5 {
        a.commit_local(i).unwrap();
    }
    a.report_checksum(Tick::ZERO, 5).err();
    let full = packet_to(&mut a, PeerId(1));
    let whole = Datagram::decode(&full, Tick::ZERO).unwrap().messages;
    assert!(whole.len() >= 2);
    for cut in 0..full.len() {
        // A cut at a message boundary is a shorter datagram of whole
        // messages; anything else is refused and changes nothing.
        if let Ok(d) = Datagram::decode(&full[..cut], Tick::ZERO) {
            assert_eq!(d.messages[..], whole[..d.messages.len()], "cut at {cut}");
            continue;
        }
        let mut b = session(2, 0, 1);
        let before = b.stats();
        let r = b.handle_datagram(PeerId(0), &full[..cut], T0);
        assert!(r.is_err(), "a packet cut to {cut} bytes was accepted");
        let after = b.stats();
        assert_eq!(after.datagrams_rejected, 1);
        assert_eq!(after.buffered_ticks, before.buffered_ticks);
        assert_eq!(
            after.peers, before.peers,
            "no state change from a rejected datagram"
        );
    }
    let mut b = session(2, 0, 1);
    assert!(b.handle_datagram(PeerId(0), &full, T0).is_ok());
}

#[test]
fn foreign_and_incompatible_datagrams_get_typed_errors() {
    let mut b = session(2, 0, 1);
    let good = forged(0, vec![]);
    assert_eq!(
        b.handle_datagram(PeerId(9), &good, T0),
        Err(DatagramError::UnknownPeer(PeerId(9)))
    );
    assert_eq!(
        b.handle_datagram(PeerId(0), b"GET / HTTP/1.1\r\n", T0),
        Err(DatagramError::Wire(WireError::BadMagic))
    );
    let mut unknown = good.clone();
    unknown[wire::HEADER_LEN] = 0x7f;
    assert_eq!(
        b.handle_datagram(PeerId(0), &unknown, T0),
        Err(DatagramError::Wire(WireError::UnknownMessage(0x7f)))
    );
    let mut trailing = good.clone();
    trailing.push(0);
    assert_eq!(
        b.handle_datagram(PeerId(0), &trailing, T0),
        Err(DatagramError::Wire(WireError::UnknownMessage(0)))
    );
    // Before its Hello, nothing from a peer is taken.
    let mut bare = Vec::new();
    let mut w = DatagramWriter::new(&mut bare, Tick::ZERO, 1200);
    w.push(&Message::Ping { stamp: 1 }).unwrap();
    w.finish();
    assert_eq!(
        b.handle_datagram(PeerId(0), &bare, T0),
        Err(DatagramError::Violation("datagram before hello"))
    );
    // Another protocol version is refused, and said so once as an event.
    let mut v2 = good;
    v2[2] = wire::VERSION + 1;
    let mismatch = WireError::UnsupportedVersion {
        ours: wire::VERSION,
        theirs: wire::VERSION + 1,
    };
    assert_eq!(
        b.handle_datagram(PeerId(0), &v2, T0),
        Err(DatagramError::Wire(mismatch))
    );
    let evs: Vec<_> = std::iter::from_fn(|| b.poll_event()).collect();
    let reason = lockstep_core::Incompatibility::Protocol {
        ours: wire::VERSION,
        theirs: wire::VERSION + 1,
    };
    assert_eq!(
        evs,
        vec![Event::Incompatible {
            peer: PeerId(0),
            reason
        }]
    );
    assert_eq!(
        reason.to_string(),
        format!(
            "the other side runs protocol {}, we run {}",
            wire::VERSION + 1,
            wire::VERSION
        )
    );
}

#[test]
fn peers_running_another_game_build_refuse_each_other() {
    let r = roster(2, 0);
    let mut a = Session::new(
        MeshConfig {
            fingerprint: 1,
            ..config()
        },
        r.clone(),
        PeerId(0),
        T0,
    )
    .unwrap();
    let mut b = Session::new(
        MeshConfig {
            fingerprint: 2,
            ..config()
        },
        r,
        PeerId(1),
        T0,
    )
    .unwrap();
    a.commit_local(1).unwrap();
    let to_b = packet_to(&mut a, PeerId(1));
    let reason = lockstep_core::Incompatibility::Game { ours: 2, theirs: 1 };
    assert_eq!(
        b.handle_datagram(PeerId(0), &to_b, T0),
        Err(DatagramError::Incompatible(reason))
    );
    // b tells a why; a reports it too, and neither takes the other's input.
    let back = packet_to(&mut b, PeerId(0));
    assert!(a.handle_datagram(PeerId(1), &back, T0).is_err());
    let a_events: Vec<_> = std::iter::from_fn(|| a.poll_event()).collect();
    assert!(a_events.contains(&Event::Incompatible {
        peer: PeerId(1),
        reason: lockstep_core::Incompatibility::Game { ours: 1, theirs: 2 },
    }));
    assert!(reason.to_string().contains("different game build"));
    advance_all(&mut b);
    assert_eq!(b.advance(), None);
}

/// A peer refused for running another game build (or anyone forging its
/// Hello) is told why once a resend interval, and sent nothing else: our
/// inputs never go to it, nor make a datagram go to it on their own
/// schedule (they did, every half tick: a reply rate set by our inputs).
#[test]
fn a_refused_peer_is_only_told_why_once_a_resend_interval() {
    let r = roster(3, 0);
    let mut a = Session::new(config(), r.clone(), PeerId(0), T0).unwrap();
    let mut b = Session::new(
        MeshConfig {
            fingerprint: 2,
            ..config()
        },
        r,
        PeerId(1),
        T0,
    )
    .unwrap();
    b.commit_local(1).unwrap();
    let hello = packet_to(&mut b, PeerId(0));
    assert!(a.handle_datagram(PeerId(1), &hello, T0).is_err());
    let mut buf = Vec::new();
    let mut to_b = 0;
    let mut t = T0;
    for _ in 0..2_000 {
        t += Duration::from_millis(1);
        a.handle_timeout(t);
        let _ = a.commit_local(1);
        while let Some(tx) = a.poll_transmit(&mut buf) {
            if tx.destination == PeerId(1) {
                to_b += 1;
                let d = Datagram::decode(&buf[..tx.len], a.frame()).unwrap();
                assert!(
                    d.messages.iter().all(|m| matches!(m, Message::Reject(_))),
                    "{:?}",
                    d.messages
                );
            }
        }
    }
    // 2 s at a resend interval of 40 ms, and one with each of the few
    // inputs committed before the lead limit held (125 when our inputs set
    // the pace).
    assert!(to_b <= 60, "{to_b} datagrams to the refused peer in 2 s");
}

/// A player that says goodbye is emptied at once (no silence to wait
/// for), and the stream says it left (`Left`, not `Abandoned`) at one
/// tick on every peer.
#[test]
fn a_peer_that_leaves_is_left_without_waiting_for_silence() {
    let mut t = T0;
    let mut peers = mesh(3, 0);
    for (_, s) in peers.iter_mut() {
        s.commit_local(1).unwrap();
    }
    exchange(&mut peers, &mut t);
    peers[2].1.leave();
    assert_eq!(peers[2].1.commit_local(1), Err(CommitError::Left));
    exchange(&mut peers, &mut t);
    let left: Vec<_> = peers.drain(2..).collect();
    drop(left);
    exchange(&mut peers, &mut t);
    for (_, s) in peers.iter_mut() {
        let evs: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
        assert!(evs.contains(&Event::PeerLeft {
            peer: PeerId(2),
            player: Some(PlayerId(2))
        }));
        assert_eq!(s.abandoned().len(), 1, "decided within a few exchanges");
    }
    let mut marks = Vec::new();
    for _ in 0..10 {
        for (_, s) in peers.iter_mut() {
            let _ = s.commit_local(1);
        }
        exchange(&mut peers, &mut t);
        for (id, s) in peers.iter_mut() {
            for f in advance_all(s) {
                for e in f.events {
                    marks.push((*id, f.tick, e));
                }
            }
        }
    }
    let gone: Vec<_> = marks
        .iter()
        .filter(|(_, _, e)| {
            e.player() == Some(PlayerId(2)) && !matches!(e, SystemEvent::Joined { .. })
        })
        .collect();
    assert_eq!(gone.len(), 2, "{marks:?}");
    assert!(
        gone.iter().all(|(_, t, e)| *e
            == SystemEvent::Left {
                player: PlayerId(2)
            }
            && *t == gone[0].1),
        "{gone:?}"
    );
}

#[test]
fn tick_runs_past_u32_max_are_malformed() {
    // The writer refuses such a run, so craft the bytes below it.
    let (seat, start, count, chain) = run(0, u32::MAX - 1, &[1u16, 2, 3]);
    let base = Tick::new(u32::MAX - 2);
    let runs = [InputRun {
        seat,
        start,
        count,
        back: 0,
        check: 0,
        chain: &chain,
    }];
    let bad = Message::Inputs(Inputs {
        acks: List::EMPTY,
        runs: (&runs).into(),
    });
    let mut d = Vec::new();
    assert!(DatagramWriter::new(&mut d, base, 1200).push(&bad).is_err());
    d.clear();
    DatagramWriter::new(&mut d, base, 1200).finish();
    bad.encode(base, &mut d);
    assert_eq!(
        Datagram::decode(&d, Tick::new(u32::MAX - 2)),
        Err(WireError::Invalid("input run passes the last tick"))
    );
    let ok = forged(u32::MAX - 2, vec![run(0, u32::MAX - 1, &[1u16, 2])]);
    assert!(Datagram::decode(&ok, Tick::new(u32::MAX - 10)).is_ok());
    // Seen from tick 0 the same bytes name ticks near 65 535: far future.
    let mut b = session(2, 0, 1);
    b.handle_datagram(PeerId(0), &ok, T0).unwrap();
    assert_eq!(b.stats().inputs_refused, 2, "far future");
    // A peer claiming to be far ahead holds nobody back.
    assert!(b.commit_local(1).is_ok());
}

/// A tick inside the window of a session that just started, two times in
/// three (where hostile datagrams can do harm), else anywhere up to 2M.
fn tick_near_or_far() -> impl Strategy<Value = u32> {
    prop_oneof![2 => 0u32..48, 1 => 0u32..2_000_000]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    /// Arbitrary bytes never panic a session, whatever header they carry.
    #[test]
    fn garbage_never_panics(mut bytes in proptest::collection::vec(any::<u8>(), 0..600), header in any::<bool>()) {
        if header && bytes.len() >= 6 {
            bytes[..3].copy_from_slice(&[b'L', b'K', wire::VERSION]);
            bytes[5] %= 0x10;
        }
        let mut s = session(3, 1, 1);
        let _ = s.handle_datagram(PeerId(0), &bytes, T0);
        let _ = s.handle_datagram(PeerId(3), &bytes, T0);
        let mut o = session(3, 1, 3);
        let _ = o.handle_datagram(PeerId(0), &bytes, T0);
        prop_assert!(s.stats().buffered_ticks <= s.buffer_bound());
    }

    /// Well-formed datagrams with arbitrary contents never panic either, and
    /// never grow the store past its bound.
    #[test]
    fn arbitrary_well_formed_datagrams_are_survived(
        base in tick_near_or_far(),
        start in tick_near_or_far(),
        seat in 0u16..4,
        inputs in proptest::collection::vec(any::<u16>(), 1..20),
        pause in proptest::option::of(tick_near_or_far()),
        lifted in proptest::option::of(tick_near_or_far()),
        wanted in proptest::collection::vec(0u16..4, 0..3),
        decisions in proptest::collection::vec((0u16..4, tick_near_or_far(), any::<u64>()), 0..3),
    ) {
        let near = |t: u32| Tick::new(t.clamp(base.saturating_sub(1 << 19), base + (1 << 19)));
        let (p, st, n, chain) = run(seat, near(start).get(), &inputs);
        let mut d = Vec::new();
        let mut w = DatagramWriter::new(&mut d, Tick::new(base), 65_000);
        w.push(&Message::Hello(Hello::default())).unwrap();
        if let Some(f) = pause { w.push(&Message::Pause { frame: near(f) }).unwrap(); }
        if let Some(l) = lifted { w.push(&Message::Resume { lifted: near(l) }).unwrap(); }
        w.push(&Message::Abandon(wire::Abandon {
            votes: wanted.iter().copied().map(PlayerId).collect(),
            frozen: wanted.into_iter().map(|s| (PlayerId(s), near(base))).collect(),
            endorsements: decisions
                .into_iter()
                .map(|(s, t, digest)| wire::Endorsement { seat: PlayerId(s), from: near(t), digest, left: false })
                .collect(),
        })).unwrap();
        w.push(&Message::Inputs(Inputs {
            acks: List::EMPTY,
            runs: (&[InputRun { seat: p, start: st, count: n, back: 0, check: 0, chain: &chain }]).into(),
        })).unwrap();
        w.finish();
        let back = Datagram::decode(&d, Tick::new(base)).unwrap();
        prop_assert_eq!(back.base, Tick::new(base));
        let mut s = session(3, 0, 1);
        let _ = s.handle_datagram(PeerId(0), &d, T0);
        s.handle_timeout(Instant::from_millis(5));
        let _ = s.commit_local(1);
        while s.advance().is_some() {}
        prop_assert!(s.stats().buffered_ticks <= s.buffer_bound());
    }
}

/// `bytes` with the same messages, re-based on `base`: the sender claims
/// another position while every tick inside keeps its meaning.
fn rebased(bytes: &[u8], reference: Tick, base: Tick) -> Vec<u8> {
    let d = Datagram::decode(bytes, reference).expect("decodes");
    let mut out = Vec::new();
    let mut w = DatagramWriter::new(&mut out, base, 65_000);
    for m in &d.messages {
        w.push(m).expect("fits");
    }
    w.finish();
    out
}

#[test]
fn a_peer_lying_about_its_position_cannot_get_an_honest_one_abandoned() {
    let config = MeshConfig {
        abandon_after: Some(Duration::from_secs(2)),
        ..MeshConfig::default()
    };
    let mut peers: Vec<(PeerId, Session)> = (0..3)
        .map(|i| {
            let s = Session::new(config.clone(), roster(3, 0), PeerId(i), T0).expect("config");
            (PeerId(i), s)
        })
        .collect();
    let mut now = T0;
    let mut buf = Vec::new();
    let mut frozen: Option<Tick> = None;
    for step in 0..400u32 {
        now += Duration::from_millis(33);
        for (i, (_, s)) in peers.iter_mut().enumerate() {
            let _ = s.commit_local(step as u16 + i as u16);
            while s.advance().is_some() {}
        }
        for i in 0..peers.len() {
            peers[i].1.handle_timeout(now);
            let mut out = Vec::new();
            while let Some(t) = peers[i].1.poll_transmit(&mut buf) {
                out.push((t.destination, buf[..t.len].to_vec()));
            }
            let from = peers[i].0;
            for (to, mut bytes) in out {
                // Peer 2 lies to peer 0 about where it is from step 60 on.
                if from == PeerId(2) && to == PeerId(0) && step >= 60 {
                    let at = *frozen.get_or_insert(peers[2].1.frame());
                    bytes = rebased(&bytes, peers[2].1.frame(), at);
                }
                if let Some((_, s)) = peers.iter_mut().find(|(id, _)| *id == to) {
                    let _ = s.handle_datagram(from, &bytes, now);
                }
            }
        }
    }
    for (id, s) in &peers {
        assert!(
            !s.abandoned().iter().any(|(p, _)| *p == PlayerId(0)),
            "{id} abandoned the honest player 0: {:?}",
            s.abandoned()
        );
    }
}

#[test]
fn after_a_resume_idle_peers_fall_quiet_and_a_new_pause_is_not_an_echo() {
    let mut t = T0;
    let mut peers = mesh(2, 0);
    for (_, s) in peers.iter_mut() {
        s.commit_local(1).unwrap();
    }
    exchange(&mut peers, &mut t);
    let frame = peers[1].1.request_pause().unwrap();
    exchange(&mut peers, &mut t);
    for (_, s) in peers.iter_mut() {
        advance_all(s);
    }
    assert_eq!(peers[0].1.resume(), Some(frame));
    for _ in 0..5 {
        exchange(&mut peers, &mut t);
    }
    // Nobody commits: two seconds of idling cost keepalives, not resends.
    let before = peers[0].1.stats().datagrams_sent;
    for _ in 0..50 {
        exchange(&mut peers, &mut t);
    }
    let sent = peers[0].1.stats().datagrams_sent - before;
    assert!(sent <= 12, "{sent} datagrams in 2 s of idling");
    // The same peer pauses again before committing anything: everyone
    // freezes, none takes it for an echo of the lifted pause.
    let again = peers[1].1.request_pause().unwrap();
    assert!(again > frame, "{again:?} after {frame:?}");
    exchange(&mut peers, &mut t);
    for (_, s) in peers.iter() {
        assert_eq!(s.pause_frame(), Some(again));
    }
}

#[test]
fn only_players_in_the_game_can_pause() {
    let mut t = T0;
    let mut peers = mesh(2, 1);
    exchange(&mut peers, &mut t);
    let pause = |base: u32| {
        let mut d = Vec::new();
        let mut w = DatagramWriter::new(&mut d, Tick::new(base), 1200);
        w.push(&Message::Hello(Hello::default())).unwrap();
        w.push(&Message::Pause {
            frame: Tick::new(base + 3),
        })
        .unwrap();
        w.finish();
        d
    };
    // An observer asking for a pause is ignored.
    let from_observer = pause(peers[0].1.frame().get());
    peers[0]
        .1
        .handle_datagram(PeerId(2), &from_observer, t)
        .unwrap();
    assert!(!peers[0].1.paused());
    // So is an abandoned player (two players: one vote decides).
    peers[0].1.abandon(PlayerId(1)).unwrap();
    assert_eq!(peers[0].1.abandoned().len(), 1);
    let from_abandoned = pause(peers[0].1.frame().get());
    peers[0]
        .1
        .handle_datagram(PeerId(1), &from_abandoned, t)
        .unwrap();
    assert!(!peers[0].1.paused());
    // A player in the game pauses everyone.
    let mut peers = mesh(2, 0);
    exchange(&mut peers, &mut t);
    let from_player = pause(peers[0].1.frame().get());
    peers[0]
        .1
        .handle_datagram(PeerId(1), &from_player, t)
        .unwrap();
    assert!(peers[0].1.paused());
}

/// What `bytes` says the sender's next tick waits on, if it says.
fn waiting_in(bytes: &[u8]) -> Option<Vec<PlayerId>> {
    let d = Datagram::decode(bytes, Tick::ZERO).expect("a datagram");
    d.messages.into_iter().find_map(|m| match m {
        Message::Status(s) => Some(s.waiting),
        _ => None,
    })
}

/// Inputs for one tick arrive a little apart: a peer says whom its next
/// tick waits on only once it has waited a tick period, not in every
/// datagram of a mesh in step; and then those it names hear it at once.
#[test]
fn a_peer_names_whom_it_waits_on_only_once_it_waited_a_tick() {
    use common::hand::Net;
    let mut net = Net::new(3, &config());
    let mut said = Vec::new();
    for _ in 0..60 {
        net.tick(&mut |from, to, bytes, _| {
            if let Some(w) = waiting_in(&bytes) {
                said.push((from, w));
            }
            vec![(from, to, bytes)]
        });
    }
    assert_eq!(said, [], "a mesh in step names nobody");
    // Peer 2 goes quiet: the others' next tick waits on its seat, and they
    // say so once the inputs it sent ahead are used up, and a tick more.
    for _ in 0..8 {
        net.tick(&mut |from, to, bytes, _| {
            if let Some(w) = waiting_in(&bytes) {
                said.push((from, w));
            }
            if from == 2 {
                vec![]
            } else {
                vec![(from, to, bytes)]
            }
        });
    }
    assert!(
        said.iter()
            .any(|(from, w)| *from == 0 && *w == [PlayerId(2)]),
        "{said:?}"
    );
}

/// A wait worth naming is due from its instant on, even when a datagram
/// moved the session's clock past that instant before any timeout saw it:
/// a loop that sleeps until `poll_timeout` names whom it waits on then, not
/// at the next keepalive (it was dropped from the timers once passed).
#[test]
fn a_wait_a_datagram_passed_is_still_due() {
    let slow = Duration::from_secs(2);
    let config = MeshConfig {
        resend_interval: slow,
        keepalive_interval: slow,
        ping_interval: slow,
        interrupt_after: Duration::from_secs(5),
        ..config()
    };
    let mut peers: Vec<(PeerId, Session)> = (0..2)
        .map(|i| {
            let s = Session::new(config.clone(), roster(2, 0), PeerId(i), T0).unwrap();
            (PeerId(i), s)
        })
        .collect();
    let mut t = T0;
    let mut stale = Vec::new();
    for _ in 0..6 {
        for (_, s) in peers.iter_mut() {
            s.commit_local(1).unwrap();
            advance_all(s);
        }
        stale = packet_to(&mut peers[1].1, PeerId(0));
        peers[0].1.handle_datagram(PeerId(1), &stale, t).unwrap();
        exchange(&mut peers, &mut t);
    }
    // Peer 1 goes quiet but for a copy of a datagram already taken; peer 0
    // runs until its next tick waits on seat 1.
    let a = &mut peers[0].1;
    for _ in 0..4 {
        let _ = a.commit_local(1);
        advance_all(a);
    }
    a.handle_timeout(t);
    assert_eq!(a.awaiting(), [PlayerId(1)]);
    let mut buf = Vec::new();
    while a.poll_transmit(&mut buf).is_some() {}
    // Past when the wait is worth naming (at most a period and twice the
    // largest jitter allowed), before any other timer.
    let late = t + Duration::from_millis(600);
    assert!(a.poll_timeout().is_some_and(|d| d <= late));
    let _ = a.handle_datagram(PeerId(1), &stale, late);
    assert!(
        a.poll_timeout().is_some_and(|d| d <= late),
        "the naming is due at {late:?}, the session says {:?}",
        a.poll_timeout()
    );
    a.handle_timeout(late);
    let named = std::iter::from_fn(|| {
        a.poll_transmit(&mut buf)
            .map(|tx| (tx, buf[..tx.len].to_vec()))
    })
    .find(|(tx, _)| tx.destination == PeerId(1))
    .and_then(|(_, bytes)| waiting_in(&bytes));
    assert_eq!(named, Some(vec![PlayerId(1)]));
}

/// Whether `bytes` carries a full checkpoint.
fn full_checkpoint_in(bytes: &[u8]) -> bool {
    let d = Datagram::decode(bytes, Tick::ZERO).expect("a datagram");
    d.messages
        .iter()
        .any(|m| matches!(m, Message::Checkpoint(c) if c.full))
}

/// Whether `bytes` acknowledges a checkpoint.
fn acknowledges_checkpoint(bytes: &[u8]) -> bool {
    let d = Datagram::decode(bytes, Tick::ZERO).expect("a datagram");
    d.messages.iter().any(|m| match m {
        Message::CheckpointAck { .. } => true,
        Message::Checkpoint(c) => c.ack.is_some(),
        _ => false,
    })
}

/// A full checkpoint a peer has not acknowledged is due again after the
/// resend period even in a match at rest, and `poll_timeout` says when: a
/// loop that sleeps until it sends it again at the instant a loop polling
/// every millisecond does (it sent it at the next keepalive instead).
#[test]
fn an_unacknowledged_checkpoint_is_due_at_the_instant_poll_timeout_says() {
    let config = MeshConfig {
        keepalive_interval: Duration::from_secs(1),
        ..config()
    };
    // Two peers play past a full checkpoint that peer 1's acknowledgement
    // of never reaches peer 0, then stop committing; peer 0 then hears
    // nothing more.
    let at_rest = || {
        let mut net = common::hand::Net::new(2, &config);
        let mut full_sent = false;
        while !full_sent || net.now < Instant::from_millis(3_000) {
            net.tick(&mut |from, to, bytes, _| {
                full_sent |= from == 0 && full_checkpoint_in(&bytes);
                if from == 1 && acknowledges_checkpoint(&bytes) {
                    vec![]
                } else {
                    vec![(from, to, bytes)]
                }
            });
        }
        let mut buf = Vec::new();
        let mut now = net.now;
        for _ in 0..20 {
            now += Duration::from_millis(5);
            for i in 0..2 {
                net.s[i].handle_timeout(now);
                while let Some(t) = net.s[i].poll_transmit(&mut buf) {
                    let bytes = buf[..t.len].to_vec();
                    if i == 1 && acknowledges_checkpoint(&bytes) {
                        continue;
                    }
                    let _ = net.s[1 - i].handle_datagram(PeerId(i as u32), &bytes, now);
                }
            }
        }
        // Half a period on, peer 1 commits once more: peer 0 acknowledges
        // it, sending after the checkpoint last went.
        now += Duration::from_millis(500);
        net.s[1].handle_timeout(now);
        net.s[1]
            .commit_local(common::hand::INPUT)
            .expect("a lead to commit");
        while let Some(t) = net.s[1].poll_transmit(&mut buf) {
            let bytes = buf[..t.len].to_vec();
            if !acknowledges_checkpoint(&bytes) {
                let _ = net.s[0].handle_datagram(PeerId(1), &bytes, now);
            }
        }
        net.s[0].handle_timeout(now);
        let mut sent_after = false;
        while let Some(t) = net.s[0].poll_transmit(&mut buf) {
            sent_after |= !full_checkpoint_in(&buf[..t.len]);
        }
        assert!(sent_after, "peer 0 sent after the checkpoint last went");
        (net.s.swap_remove(0), now)
    };
    let resent = |s: &mut Session, buf: &mut Vec<u8>| {
        std::iter::from_fn(|| s.poll_transmit(buf).map(|t| buf[..t.len].to_vec()))
            .any(|b| full_checkpoint_in(&b))
    };
    let end = |from: Instant| from + Duration::from_secs(3);
    let mut buf = Vec::new();
    // Sleeping until poll_timeout.
    let (mut a, from) = at_rest();
    let mut slept = None;
    while let Some(t) = a.poll_timeout().filter(|t| *t < end(from)) {
        a.handle_timeout(t);
        if resent(&mut a, &mut buf) {
            slept = Some(t);
            break;
        }
    }
    // Polling every millisecond.
    let (mut b, from) = at_rest();
    let mut polled = None;
    let mut t = from;
    while t < end(from) {
        t += Duration::from_millis(1);
        b.handle_timeout(t);
        if resent(&mut b, &mut buf) {
            polled = Some(t);
            break;
        }
    }
    assert!(polled.is_some(), "the checkpoint goes again");
    assert_eq!(slept, polled);
}

/// The first input run of `bytes`: its seat, start, `back` and chain.
fn first_run(bytes: &[u8]) -> Option<(PlayerId, Tick, u32, Vec<u8>)> {
    let d = Datagram::decode(bytes, Tick::ZERO).unwrap();
    d.messages.into_iter().find_map(|m| match m {
        Message::Inputs(i) => i
            .runs
            .first()
            .map(|r| (r.seat, r.start, r.back, r.chain.to_vec())),
        _ => None,
    })
}

/// A lone input the peer lacks is coded against the one it acknowledged
/// last: unchanged, it costs one bit (the whole chain one byte), not the
/// input.
#[test]
fn a_lone_unchanged_input_costs_a_bit_against_the_acknowledged_one() {
    let mut peers = mesh(2, 0);
    let mut t = T0;
    for _ in 0..5 {
        for (_, s) in peers.iter_mut() {
            s.commit_local(0x1234).unwrap();
            advance_all(s);
        }
        exchange(&mut peers, &mut t);
    }
    peers[0].1.commit_local(0x1234).unwrap();
    let bytes = packet_to(&mut peers[0].1, PeerId(1));
    let (seat, start, back, chain) = first_run(&bytes).expect("a run");
    assert_eq!(
        (seat, back),
        (PlayerId(0), 1),
        "coded against tick {start} - 1"
    );
    assert_eq!(chain, [0], "one bit: unchanged");
    // The peer reads it against the input it holds, and runs it.
    peers[1].1.handle_datagram(PeerId(0), &bytes, t).unwrap();
    let mut ran = Vec::new();
    for _ in 0..4 {
        peers[1].1.commit_local(0x1234).unwrap();
        exchange(&mut peers, &mut t);
        ran.extend(advance_all(&mut peers[1].1));
    }
    let f = ran.iter().find(|f| f.tick == start).expect("ran the tick");
    assert_eq!(f.inputs[0], Some(0x1234));
}

/// A peer's forwarded copy of another seat's input is never coded against
/// a reference: a datagram that does so is refused, and the session goes
/// on.
#[test]
fn forwarded_input_coded_against_a_reference_is_refused() {
    let mut b = session(3, 0, 1);
    let mut out = Vec::new();
    let mut w = DatagramWriter::new(&mut out, Tick::new(2), 65_000);
    w.push(&Message::Hello(Hello::default())).unwrap();
    let (_, _, _, c) = run(0, 3, &[4u16]);
    w.push(&Message::Inputs(Inputs {
        acks: List::EMPTY,
        runs: (&[InputRun {
            seat: PlayerId(0),
            start: Tick::new(3),
            count: 1,
            back: 1,
            check: 0,
            chain: &c,
        }])
            .into(),
    }))
    .unwrap();
    w.finish();
    assert!(matches!(
        b.handle_datagram(PeerId(2), &out, T0),
        Err(DatagramError::Violation(_))
    ));
}
