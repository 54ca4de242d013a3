//! Joining a sequenced game under way, attacked, and in the corners honest
//! players reach, on the simulated network. Each test was written against
//! an earlier version that it broke.

use crate::common;
use common::join::{World, datagram};
use common::star::{Node, SERVER, SlowAck};
use lockstep_core::sequenced::{MissingInput, Policy, SequencerConfig, SequencerEvent};
use lockstep_core::sim::{LinkConditions, Outcome};
use lockstep_core::wire::{Message, SnapshotChunk};
use lockstep_core::{Instant, PeerId};
use std::time::Duration;

fn server_config(policy: Policy) -> SequencerConfig {
    SequencerConfig {
        policy,
        snapshot_join: true,
        // Players there from the start join by replay; later ones
        // (from tick 90, three seconds in) from a snapshot.
        snapshot_join_after: 90,
        history: 64,
        ..SequencerConfig::default()
    }
}

fn wait_for_all() -> Policy {
    Policy::WaitForAll {
        abandon_after: Duration::from_secs(10),
    }
}

fn deadline() -> Policy {
    Policy::Deadline {
        missing: MissingInput::RepeatLast,
    }
}

// ----- tests ---------------------------------------------------------------

/// Honest only. A donor whose state is a couple of megabytes (compressed
/// about as much) sends its chunks as fast as the sequencer acknowledges
/// them: 64 per round trip, far above `max_datagrams_per_sec` (400) on any
/// link under 160 ms. Neither it nor the joiner is closed for it: a
/// transfer has a rate of its own.
#[test]
fn an_honest_donor_of_a_large_state_is_not_closed_for_its_rate() {
    let seed = 3;
    let mut w = World::with_bulk(
        3,
        SequencerConfig {
            history: 4096,
            ..server_config(wait_for_all())
        },
        LinkConditions::default(),
        seed,
        2_000_000,
    );
    assert_eq!(w.run(Instant::from_millis(4_000)), Outcome::TimedOut);
    w.add_client(PeerId(4), true, false, seed);
    assert_eq!(w.run(Instant::from_millis(40_000)), Outcome::TimedOut);
    let closed = w.closed();
    assert!(
        closed.is_empty(),
        "honest clients closed: {closed:?}; log: {:?}",
        w.join_log()
    );
    assert!(w.apps[&PeerId(4)].caught_up(), "the joiner got in");
}

/// A malicious donor sends one valid chunk of a multi-chunk snapshot every
/// two seconds (the same one, even). Only chunks not seen before count as
/// progress, and a donor has ten donor timeouts in all: it is replaced and
/// the joiner gets in.
#[test]
fn a_donor_dripping_one_chunk_at_a_time_is_replaced() {
    let seed = 5;
    let mut w = World::new(
        3,
        server_config(deadline()),
        LinkConditions::default(),
        seed,
    );
    assert_eq!(w.run(Instant::from_millis(4_000)), Outcome::TimedOut);
    w.add_client(PeerId(4), true, false, seed);
    let (donor, tick, id) = w
        .run_until(10_000, |e| match e {
            SequencerEvent::SnapshotAsked { donor, tick, id } => Some((*donor, *tick, *id)),
            _ => None,
        })
        .expect("a donor was asked");
    // The donor turns hostile: it never donates for real.
    w.sim.freeze(donor);
    let data = [7u8; 100];
    let chunk = SnapshotChunk {
        id,
        tick,
        raw_len: 1 << 20,
        packed_len: 200,
        hash: 1,
        index: 0,
        count: 2,
        checksum: lockstep_core::snapshot::chunk_checksum(&data),
        data: &data,
    };
    let mut at = w.sim.now().as_micros() / 1000;
    let end = at + 40_000;
    while at < end && !w.apps[&PeerId(4)].caught_up() {
        let open = w.server().open_tick();
        w.sim.net.send(
            donor,
            SERVER,
            &datagram(open, &[Message::SnapshotChunk(chunk)]),
        );
        at += 2_000;
        assert_eq!(w.run(Instant::from_millis(at)), Outcome::TimedOut);
    }
    assert!(
        w.apps[&PeerId(4)].caught_up(),
        "the joiner never got in after 40 s: closed {:?}; log {:?}",
        w.closed(),
        w.join_log()
    );
}

/// A malicious joiner acknowledges one more chunk every 8 s (under the
/// 9 s "stopped acknowledging" limit) and sends nothing else. Resending the
/// whole window every 200 ms sent it 22.9 MB in a minute; now every resend
/// round halves the window, three rounds without progress leave only a
/// probe, no frames go out before the snapshot is whole, and a transfer has
/// twenty donor timeouts in all: what it is sent is little more than the
/// keepalives every client gets, and it is closed.
#[test]
fn a_joiner_acking_one_chunk_per_eight_seconds_gets_little_and_is_closed() {
    let seed = 7;
    let mut w = World::new(
        2,
        SequencerConfig {
            history: 4096,
            ..server_config(wait_for_all())
        },
        LinkConditions::default(),
        seed,
    );
    assert_eq!(w.run(Instant::from_millis(4_000)), Outcome::TimedOut);
    w.add_node(PeerId(3), true, false, seed, |c| {
        Node::SlowAck(c, SlowAck::new(Duration::from_secs(8)))
    });
    assert_eq!(w.run(Instant::from_millis(63_000)), Outcome::TimedOut);
    let Some(Node::SlowAck(_, s)) = w.sim.endpoint(PeerId(3)) else {
        unreachable!()
    };
    let (got, sent) = (s.got, s.sent);
    // Keepalives alone are some 2 KB a second.
    assert!(
        got <= 200_000,
        "the joiner sent {sent} bytes and was sent {got} in a minute"
    );
    assert_eq!(w.run(Instant::from_millis(70_000)), Outcome::TimedOut);
    assert!(
        !w.server().is_connected(PeerId(3)),
        "closed once its time is up"
    );
}

/// Honest only. In `WaitForAll`, when the last live player leaves while a
/// joiner's snapshot is on its way to it (its seat is not live yet), an
/// earlier version found nobody blocked and sealed without end: thousands
/// of neutral ticks in one call, until the joiner was closed for falling
/// behind. Nothing is sealed while nobody plays.
#[test]
fn the_last_player_leaving_while_one_catches_up_does_not_seal_thousands_of_ticks() {
    let seed = 9;
    let mut w = World::new(
        1,
        SequencerConfig {
            history: 1024,
            ..server_config(wait_for_all())
        },
        LinkConditions::default(),
        seed,
    );
    // A spectator keeps the room company.
    w.add_client(PeerId(2), false, true, seed);
    assert_eq!(w.run(Instant::from_millis(4_000)), Outcome::TimedOut);
    w.add_client(PeerId(3), true, false, seed);
    let mut at = 4_000;
    // Mid-transfer: the snapshot is at the sequencer, on its way.
    while !w
        .client(PeerId(3))
        .snapshot_progress()
        .is_some_and(|(have, of)| have > 0 && have < of)
    {
        at += 10;
        assert!(at < 15_000, "no transfer");
        assert_eq!(w.run(Instant::from_millis(at)), Outcome::TimedOut);
    }
    let before = w.server().open_tick();
    // The only live player leaves.
    w.sim
        .endpoint_mut(PeerId(1))
        .and_then(Node::client_mut)
        .unwrap()
        .leave();
    at += 500;
    assert_eq!(w.run(Instant::from_millis(at)), Outcome::TimedOut);
    let after = w.server().open_tick();
    assert!(
        after.since(before) < 100 && w.closed().iter().all(|(p, _)| *p == PeerId(1)),
        "sealed {} ticks in half a second (from {before} to {after}); closed: {:?}",
        after.since(before),
        w.closed()
    );
}

/// Honest only. A joiner whose connection changes mid-transfer takes its
/// seat back with its resume token. The new connection knows nothing of
/// the old one's snapshot: it starts its join over, and gets in.
#[test]
fn a_joiner_resuming_mid_transfer_still_gets_in() {
    let seed = 13;
    let mut w = World::new(
        2,
        SequencerConfig {
            history: 4096,
            ..server_config(wait_for_all())
        },
        LinkConditions::default(),
        seed,
    );
    assert_eq!(w.run(Instant::from_millis(4_000)), Outcome::TimedOut);
    w.add_client(PeerId(3), true, false, seed);
    let mut at = 4_000;
    loop {
        at += 10;
        assert_eq!(w.run(Instant::from_millis(at)), Outcome::TimedOut);
        let p = w.client(PeerId(3)).snapshot_progress();
        if p.is_some_and(|(have, of)| have > of / 2) {
            break;
        }
        assert!(at < 15_000, "no transfer");
    }
    assert!(w.server().replayable(), "resuming is allowed");
    let token = w.client(PeerId(3)).welcome().unwrap().token;
    w.sim.freeze(PeerId(3));
    at += 1_500;
    assert_eq!(w.run(Instant::from_millis(at)), Outcome::TimedOut);
    w.reconnect(PeerId(4), token, seed);
    assert_eq!(w.run(Instant::from_millis(at + 25_000)), Outcome::TimedOut);
    assert!(
        w.server_events
            .iter()
            .any(|e| matches!(e, SequencerEvent::Resumed { peer, .. } if *peer == PeerId(4))),
        "the seat was taken back: {:?}",
        w.join_log()
    );
    let app = &w.apps[&PeerId(4)];
    assert!(
        app.caught_up(),
        "the resumed joiner never got in: {:?}; progress {:?}; closed {:?}",
        app.events,
        w.client(PeerId(4)).snapshot_progress(),
        w.closed()
    );
}

/// One malicious donor claims an over-the-cap state twice (it is asked
/// again once every other candidate failed once, e.g. an honest donor that
/// hiccuped for `donor_timeout`). It counts once: the joiner is not refused
/// while an honest client could donate.
#[test]
fn one_donor_saying_too_large_twice_is_not_a_second_opinion() {
    let seed = 17;
    let mut w = World::new(
        2,
        SequencerConfig {
            history: 4096,
            ..server_config(deadline())
        },
        LinkConditions::default(),
        seed,
    );
    assert_eq!(w.run(Instant::from_millis(4_000)), Outcome::TimedOut);
    w.add_client(PeerId(3), true, false, seed);
    let (liar, tick, id) = w
        .run_until(10_000, |e| match e {
            SequencerEvent::SnapshotAsked { donor, tick, id } => Some((*donor, *tick, *id)),
            _ => None,
        })
        .expect("a donor was asked");
    let honest = if liar == PeerId(1) {
        PeerId(2)
    } else {
        PeerId(1)
    };
    w.sim.freeze(liar);
    let huge = |id, tick| SnapshotChunk {
        id,
        tick,
        raw_len: 60 << 20,
        packed_len: 100,
        hash: 1,
        index: 0,
        count: 1,
        checksum: lockstep_core::snapshot::chunk_checksum(&[0; 100]),
        data: &[0; 100],
    };
    let open = w.server().open_tick();
    w.sim.net.send(
        liar,
        SERVER,
        &datagram(open, &[Message::SnapshotChunk(huge(id, tick))]),
    );
    // The honest donor is asked next; it hiccups for a few seconds.
    let mut at = w.sim.now().as_micros() / 1000;
    let end = at + 30_000;
    let mut seen = w.server_events.len();
    let mut lied = 1;
    while at < end {
        at += 20;
        // The liar keeps its connection alive and its position current.
        if at.is_multiple_of(500) {
            let open = w.server().open_tick();
            w.sim
                .net
                .send(liar, SERVER, &datagram(open, &[Message::Ping { stamp: 0 }]));
        }
        assert_eq!(w.run(Instant::from_millis(at)), Outcome::TimedOut);
        let new: Vec<SequencerEvent> = w.server_events[seen..].to_vec();
        seen = w.server_events.len();
        for e in new {
            if let SequencerEvent::SnapshotAsked { donor, tick, id } = e {
                if donor == liar {
                    lied += 1;
                    let open = w.server().open_tick();
                    w.sim.net.send(
                        liar,
                        SERVER,
                        &datagram(open, &[Message::SnapshotChunk(huge(id, tick))]),
                    );
                } else if donor == honest && lied == 1 {
                    let now = w.sim.now();
                    w.sim.net.partition(
                        &[honest],
                        &[SERVER],
                        now,
                        now + Duration::from_millis(3_500),
                    );
                }
            }
        }
        if w.apps[&PeerId(3)].caught_up() {
            break;
        }
    }
    assert!(
        w.apps[&PeerId(3)].caught_up(),
        "the joiner was refused on one liar's word ({lied} claims): closed {:?}; log {:?}",
        w.closed(),
        w.join_log()
    );
}

/// Honest only: a `WaitForAll` room past tick 90 whose players left while a
/// spectator stays. A new player joins from the spectator's state (taken
/// after the last tick sealed, since nothing is sealed while nobody plays)
/// and plays.
#[test]
fn a_player_joining_a_room_only_a_spectator_is_left_in_gets_in() {
    let seed = 19;
    let mut w = World::new(
        1,
        SequencerConfig {
            history: 1024,
            ..server_config(wait_for_all())
        },
        LinkConditions::default(),
        seed,
    );
    w.add_client(PeerId(2), false, true, seed);
    assert_eq!(w.run(Instant::from_millis(4_000)), Outcome::TimedOut);
    w.sim
        .endpoint_mut(PeerId(1))
        .and_then(Node::client_mut)
        .unwrap()
        .leave();
    assert_eq!(w.run(Instant::from_millis(5_000)), Outcome::TimedOut);
    let before = w.server().open_tick();
    w.add_client(PeerId(3), true, false, seed);
    assert_eq!(w.run(Instant::from_millis(15_000)), Outcome::TimedOut);
    let after = w.server().open_tick();
    assert!(
        w.apps[&PeerId(3)].caught_up(),
        "the new player never got in; open {before} -> {after}; closed {:?}; log {:?}",
        w.closed(),
        w.join_log()
    );
}

/// One attacker joins a game under way (snapshot join), waits until a
/// donor is asked for the state, leaves and joins again as someone new,
/// over and over: each join makes an honest player serialize and upload
/// its whole state. The room asks at most about once per four seconds
/// (5 in 20 s measured), and the honest players' states agree.
#[test]
fn a_joiner_coming_and_going_is_given_few_states() {
    let seed = 11;
    let config = SequencerConfig {
        policy: Policy::WaitForAll {
            abandon_after: Duration::from_secs(10),
        },
        snapshot_join: true,
        snapshot_join_after: 90,
        history: 64,
        ..SequencerConfig::default()
    };
    let mut w = World::with_bulk(3, config, LinkConditions::default(), seed, 200_000);
    assert_eq!(w.run(Instant::from_millis(4_000)), Outcome::TimedOut);
    let mut asked = 0;
    let mut id = 100;
    let end = 24_000;
    while w.sim.now().as_micros() / 1000 < end {
        let joiner = PeerId(id);
        id += 1;
        w.add_client(joiner, true, false, seed);
        let limit = w.sim.now().as_micros() / 1000 + 5_000;
        if w.run_until(limit, |e| {
            matches!(e, SequencerEvent::SnapshotAsked { .. }).then_some(())
        })
        .is_some()
        {
            asked += 1;
        }
        // It goes, and comes back as someone new.
        w.sim.freeze(joiner);
        w.server_mut().disconnect(joiner);
        let at = w.sim.now().as_micros() / 1000 + 100;
        assert_eq!(w.run(Instant::from_millis(at)), Outcome::TimedOut);
    }
    let players: Vec<PeerId> = (1..=3).map(PeerId).collect();
    let common_ticks = w.assert_states_agree(&players, seed);
    assert!(common_ticks > 0);
    assert!(
        asked <= 6,
        "{asked} states asked of honest players in 20 s, each a 200 KB state serialized and uploaded"
    );
}
