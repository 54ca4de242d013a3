//! Hostile clients against desync detection and healing (sequenced), while
//! honest clients play in the same room: none of them may be resynced more
//! than its own state calls for, dropped, or cut off.

use crate::common;
use common::star::{Node, SERVER, StarScenario, play};
use common::{Record, secs};
use lockstep_core::sequenced::{ClientConfig, ClientSession, Sequencer, SequencerEvent};
use lockstep_core::sim::{LinkConditions, Outcome, Sim, SimNetwork};
use lockstep_core::wire::{Datagram, DatagramWriter, MAX_TICK_DELTA, Message};
use lockstep_core::{Endpoint, Event, Instant, PeerId, Tick, Transmit};
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Honest,
    /// Plays honestly, but donates a wrong state when asked for a snapshot.
    Poisoner,
    /// Plays honestly, but answers every forwarded ChainQuery with lies.
    Liar,
}

#[derive(Debug)]
struct Actor {
    node: Node,
    role: Role,
}

impl Endpoint for Actor {
    type Error = String;
    fn handle_datagram(&mut self, from: PeerId, d: &[u8], now: Instant) -> Result<(), String> {
        self.node.handle_datagram(from, d, now)
    }
    fn handle_timeout(&mut self, now: Instant) {
        self.node.handle_timeout(now);
    }
    fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<Transmit> {
        let t = self.node.poll_transmit(buf)?;
        if self.role != Role::Liar {
            return Some(t);
        }
        let c = self.node.client()?;
        let d = Datagram::decode(&buf[..t.len], c.frame()).ok()?;
        let mut out = Vec::new();
        let mut w = DatagramWriter::new(&mut out, d.base, usize::MAX);
        for m in &d.messages {
            match m {
                // Every tick asked "differs": the search walks down to the
                // first tick of its range.
                Message::ChainAnswer { id, entries } => {
                    let entries = entries
                        .iter()
                        .map(|&(t, chain, hash)| (t, chain ^ 1, hash ^ 0xBAD))
                        .collect();
                    w.push(&Message::ChainAnswer { id: *id, entries }).unwrap();
                }
                m => w.push(m).unwrap(),
            }
        }
        w.finish();
        buf.clear();
        buf.extend_from_slice(&out);
        Some(Transmit {
            destination: t.destination,
            len: buf.len(),
        })
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.node.poll_timeout()
    }
}

struct World {
    sim: Sim<Actor>,
    records: BTreeMap<PeerId, Record>,
    period: Duration,
    server_events: Vec<SequencerEvent>,
}

fn build(sc: &StarScenario, roles: &[(PeerId, Role)]) -> World {
    let mut sim = Sim::new(SimNetwork::new(sc.seed, sc.link.clone()));
    let server = Sequencer::new(sc.server.clone(), Instant::ZERO).unwrap();
    sim.add(
        SERVER,
        Actor {
            node: Node::Server(server),
            role: Role::Honest,
        },
    );
    let mut records = BTreeMap::new();
    for (k, id) in sc.client_ids().into_iter().enumerate() {
        let config = ClientConfig {
            spectator: k >= sc.players,
            name: format!("c{}", id.0),
            ..sc.client.clone()
        };
        let c = ClientSession::new(config, SERVER, Instant::ZERO).unwrap();
        let role = roles
            .iter()
            .find(|(p, _)| *p == id)
            .map_or(Role::Honest, |r| r.1);
        sim.add(
            id,
            Actor {
                node: Node::Client(c),
                role,
            },
        );
        records.insert(
            id,
            Record::new(sc.seed ^ (u64::from(id.0) * 0x51), sc.server.first_tick),
        );
    }
    World {
        sim,
        records,
        period: sc.period(),
        server_events: Vec::new(),
    }
}

/// `play`, but the state donated is not the one run.
fn play_poison(c: &mut ClientSession<u16>, rec: &mut Record) {
    if let Some(snap) = c.take_snapshot() {
        rec.restore(snap.tick, &snap.bytes);
    }
    if c.seat().is_some() {
        let input = rec.input();
        if c.commit_local(input).is_ok() {
            rec.committed();
        }
    }
    while let Some(frame) = c.advance() {
        rec.record(&frame);
        let _ = c.report_checksum(frame.tick, rec.reported(frame.tick));
    }
    while let Some(ev) = c.poll_event() {
        if let Event::SnapshotRequested { tick } = ev {
            rec.owed = Some(tick);
        }
        rec.events.push(ev);
    }
    if let Some(tick) = rec.owed
        && let Some(mut bytes) = rec.snapshot_at(tick)
    {
        rec.owed = None;
        bytes[0] ^= 0x5A; // a state nobody else has
        let _ = c.provide_snapshot(tick, bytes);
    }
}

impl World {
    fn run(
        &mut self,
        until: Instant,
        mut hook: impl FnMut(PeerId, &mut Actor, Instant),
        mut done: impl FnMut(&Sim<Actor>, &BTreeMap<PeerId, Record>) -> bool,
    ) -> Outcome {
        let records = std::cell::RefCell::new(std::mem::take(&mut self.records));
        let events = &mut self.server_events;
        let outcome = self.sim.run(
            until,
            self.period,
            |id, a, now| {
                hook(id, a, now);
                let role = a.role;
                match &mut a.node {
                    Node::Client(c) => {
                        let mut recs = records.borrow_mut();
                        let rec = recs.get_mut(&id).unwrap();
                        if role == Role::Poisoner {
                            play_poison(c, rec);
                        } else {
                            play(c, rec);
                        }
                    }
                    Node::Server(s) => {
                        while let Some(e) = s.poll_event() {
                            events.push(e);
                        }
                    }
                    _ => {}
                }
            },
            |sim| done(sim, &records.borrow()),
        );
        self.records = records.into_inner();
        outcome
    }

    fn client(&self, id: PeerId) -> &ClientSession<u16> {
        self.sim.endpoint(id).and_then(|a| a.node.client()).unwrap()
    }

    fn open(&self) -> Tick {
        self.sim
            .endpoint(SERVER)
            .and_then(|a| a.node.server())
            .unwrap()
            .open_tick()
    }
}

fn fast() -> LinkConditions {
    LinkConditions {
        latency: Duration::from_millis(2),
        ..LinkConditions::default()
    }
}

/// The honest clients `ids` ran the same frames to the same state.
fn agree(w: &World, ids: &[PeerId]) {
    common::assert_streams_agree(w.sim.net.seed(), &w.records, ids);
}

fn closed(rec: &Record) -> bool {
    rec.events.iter().any(|e| matches!(e, Event::Closed { .. }))
}

fn count(rec: &Record, f: impl Fn(&Event) -> bool) -> usize {
    rec.events.iter().filter(|e| f(e)).count()
}

/// An honest client whose state diverged once (a single bad tick) is
/// resynced. A malicious player (or spectator) that wins the donor pick
/// (nearest the open tick, lowest round trip: both claimed by the attacker)
/// hands it a wrong state: it is blamed when the client diverges again at
/// once, and the next resync comes from someone else; a spectator never
/// donates once the majority has spoken. The honest client is never
/// dropped.
#[test]
fn a_poisoning_donor_gets_an_honest_client_dropped() {
    let mut failures = Vec::new();
    // The attacker plays seat 1, or only watches (PeerId 4, a spectator).
    for (poison, m) in [(false, PeerId(1)), (true, PeerId(1)), (true, PeerId(4))] {
        let mut sc = StarScenario::new(3, 11);
        sc.spectators = 1;
        sc.server.snapshot_join = true;
        let victim = PeerId(3);
        let role = if poison { Role::Poisoner } else { Role::Honest };
        let mut w = build(&sc, &[(m, role)]);
        // The attacker just has the lowest latency to the server.
        w.sim.net.set_link_both(m, SERVER, fast());
        // The victim's game glitches once, at tick 200.
        w.records.get_mut(&victim).unwrap().corrupt = Some(Tick::new(200));
        let outcome = w.run(
            secs(90),
            |_, _, _| {},
            |sim, _| {
                [PeerId(1), PeerId(2)].iter().all(|id| {
                    sim.endpoint(*id)
                        .and_then(|a| a.node.client())
                        .is_some_and(|c| c.stats().frames >= 2_500)
                })
            },
        );
        assert_eq!(outcome, Outcome::Done);
        agree(&w, &[PeerId(1), PeerId(2), victim]);
        let rec = &w.records[&victim];
        let resyncs = count(rec, |e| matches!(e, Event::Resyncing));
        eprintln!(
            "poison={poison} by {m}: victim resynced {resyncs} times, closed {}: {:?}",
            closed(rec),
            rec.events
                .iter()
                .filter(|e| matches!(e, Event::Closed { .. }))
                .collect::<Vec<_>>()
        );
        let donors: Vec<_> = w
            .server_events
            .iter()
            .filter_map(|e| match e {
                SequencerEvent::SnapshotAsked { donor, .. } => Some(*donor),
                _ => None,
            })
            .collect();
        eprintln!("  donors asked: {donors:?}");
        if !poison {
            assert_eq!(resyncs, 1);
            assert!(!closed(rec));
        } else if closed(rec) {
            failures.push((m, resyncs));
        }
    }
    assert!(
        failures.is_empty(),
        "the honest victim was dropped (attacker, resyncs before the drop): {failures:?}"
    );
}

/// A spectator whose checkpoints always differ is resynced `max_resyncs`
/// times, then dropped: it cannot make the players upload their state for
/// ever.
#[test]
fn a_spectator_is_resynced_without_limit() {
    let mut sc = StarScenario::new(3, 5);
    sc.spectators = 1;
    sc.server.snapshot_join = true;
    let mut w = build(&sc, &[]);
    let spectator = PeerId(4);
    for rec in w.records.values_mut() {
        rec.bulk = 100_000;
    }
    // It lies about its state, always.
    w.records.get_mut(&spectator).unwrap().skew = Some((Tick::new(0), true));
    let outcome = w.run(secs(60), |_, _, _| {}, |_, _| false);
    agree(&w, &[PeerId(1), PeerId(2), PeerId(3)]);
    assert_eq!(outcome, Outcome::TimedOut);
    let resyncs = w
        .server_events
        .iter()
        .filter(|e| matches!(e, SequencerEvent::Resync { peer, .. } if *peer == spectator))
        .count();
    let donated: usize = w
        .server_events
        .iter()
        .filter_map(|e| match e {
            SequencerEvent::SnapshotReady { bytes, .. } => Some(*bytes),
            _ => None,
        })
        .sum();
    eprintln!(
        "spectator resynced {resyncs} times in 60 s; players donated {donated} bytes of state; closed: {}",
        closed(&w.records[&spectator])
    );
    assert!(
        resyncs <= sc.server.max_resyncs as usize + 1,
        "spectator resynced {resyncs} times (max_resyncs {}), {donated} bytes donated",
        sc.server.max_resyncs
    );
}

/// A seated client asks about a tick 2^20 past a base it shifted 30,000
/// ticks ahead. Passed on as it came, the question would be written into a
/// datagram based on the sequencer's open tick, more than MAX_TICK_DELTA
/// away, and the honest client it went to could not decode that datagram
/// (frames, acks and all). Only a client found diverged asks, and only
/// about ticks the clients still hold.
#[test]
fn a_forwarded_question_poisons_an_honest_clients_datagrams() {
    let sc = StarScenario::new(3, 9);
    let mut w = build(&sc, &[]);
    let (m, others) = (PeerId(1), [PeerId(2), PeerId(3)]);
    // Play until there are verdicts.
    let outcome = w.run(
        secs(30),
        |_, _, _| {},
        |sim, _| {
            sim.endpoints()
                .filter_map(|(_, a)| a.node.client())
                .all(|c| c.stats().frames >= 200)
        },
    );
    assert_eq!(outcome, Outcome::Done);
    let before: Vec<u64> = others.iter().map(|p| w.sim.rejected(*p)).collect();
    let mut at = w.sim.now().as_micros() / 1000;
    for k in 0..80u32 {
        let open = w.open();
        let base = open.saturating_add(30_000);
        let far = base.saturating_add(MAX_TICK_DELTA as u32);
        let mut out = Vec::new();
        let mut dw = DatagramWriter::new(&mut out, base, 1200);
        dw.push(&Message::ChainQuery {
            id: k,
            ticks: vec![far],
        })
        .unwrap();
        dw.finish();
        w.sim.net.send(m, SERVER, &out);
        at += 125;
        w.run(Instant::from_millis(at), |_, _, _| {}, |_, _| false);
    }
    let after: Vec<u64> = others.iter().map(|p| w.sim.rejected(*p)).collect();
    eprintln!("honest clients' rejected datagrams: before {before:?}, after {after:?}");
    assert!(
        !w.records[&m]
            .events
            .iter()
            .any(|e| matches!(e, Event::Closed { .. })),
        "a question passed on to nobody got its asker dropped"
    );
    agree(&w, &[m, others[0], others[1]]);
    assert_eq!(
        before, after,
        "honest clients could not decode datagrams the sequencer built from the attacker's question"
    );
}

/// A malicious player that votes first (lowest latency) answers searches
/// with lies. Each question goes to two voters and passes on only as far as
/// their answers agree: the search names the right tick or none, never a
/// wrong one.
#[test]
fn a_lying_majority_voter_makes_the_search_name_a_wrong_tick() {
    for lie in [false, true] {
        let sc = StarScenario::new(3, 21);
        let (m, victim) = (PeerId(1), PeerId(3));
        let role = if lie { Role::Liar } else { Role::Honest };
        let mut w = build(&sc, &[(m, role)]);
        w.sim.net.set_link_both(m, SERVER, fast());
        let at = Tick::new(150);
        w.records.get_mut(&victim).unwrap().skew = Some((at, true));
        let outcome = w.run(
            secs(60),
            |_, _, _| {},
            |_, recs| {
                recs[&victim]
                    .events
                    .iter()
                    .any(|e| matches!(e, Event::DesyncLocated { .. }))
            },
        );
        assert_eq!(outcome, Outcome::Done);
        agree(&w, &[m, PeerId(2), victim]);
        let located = w.records[&victim]
            .events
            .iter()
            .find_map(|e| match e {
                Event::DesyncLocated { first, .. } => Some(*first),
                _ => None,
            })
            .unwrap();
        eprintln!("lie={lie}: the victim's search says {located:?} (injected at {at})");
        let named = located.map(|f| f.tick);
        if lie {
            assert!(named.is_none_or(|t| t == at), "a wrong tick: {named:?}");
        } else {
            assert_eq!(named, Some(at));
        }
    }
}

/// Plain mode only (it needs a spoofed server address): a forged Resync
/// with the largest id puts a healthy client into "resyncing"; no snapshot
/// ever starts, so it gives the resync up after a few seconds, and a real
/// Resync later is still taken.
#[test]
fn a_forged_resync_freezes_a_healthy_client_for_good() {
    let sc = StarScenario::new(3, 13);
    let mut w = build(&sc, &[]);
    let victim = PeerId(2);
    let outcome = w.run(
        secs(30),
        |_, _, _| {},
        |sim, _| {
            sim.endpoints()
                .filter_map(|(_, a)| a.node.client())
                .all(|c| c.stats().frames >= 120)
        },
    );
    assert_eq!(outcome, Outcome::Done);
    let open = w.open();
    let mut out = Vec::new();
    let mut dw = DatagramWriter::new(&mut out, open, 1200);
    dw.push(&Message::Resync {
        id: u32::MAX,
        verdict: lockstep_core::wire::Checkpoint::default(),
    })
    .unwrap();
    dw.finish();
    w.sim.net.send(SERVER, victim, &out);
    let refused = w.records[&victim].refused;
    let now = w.sim.now().as_micros() / 1000;
    w.run(
        Instant::from_millis(now + 20_000),
        |_, _, _| {},
        |_, _| false,
    );
    let rec = &w.records[&victim];
    eprintln!(
        "victim: joining {} 20 s later, commits refused {} more; frames run by each client: {:?}",
        w.client(victim).joining(),
        rec.refused - refused,
        (1..=3)
            .map(|k| w.client(PeerId(k)).stats().frames)
            .collect::<Vec<_>>()
    );
    let n = w.records[&victim].events.len();
    eprintln!(
        "victim's last events: {:?}",
        &w.records[&victim].events[n.saturating_sub(8)..]
    );
    eprintln!(
        "server events: {:?}",
        w.server_events.iter().rev().take(6).collect::<Vec<_>>()
    );
    assert!(
        !w.client(victim).joining(),
        "a single forged Resync left the victim refusing commits for 20 s ({} refused)",
        rec.refused - refused
    );
    agree(&w, &[PeerId(1), victim, PeerId(3)]);
}

/// A player that takes the seat of one dropped for diverging starts with a
/// clean record: resynced at its own first divergence, not dropped.
#[test]
fn a_new_player_inherits_a_dropped_players_resync_count() {
    let mut sc = StarScenario::new(3, 17);
    sc.server.snapshot_join = true;
    let mut w = build(&sc, &[]);
    let bad = PeerId(1);
    w.records.get_mut(&bad).unwrap().skew = Some((Tick::new(40), true));
    let outcome = w.run(secs(120), |_, _, _| {}, |_, recs| closed(&recs[&bad]));
    assert_eq!(outcome, Outcome::Done);
    // A newcomer takes the free seat; its game glitches once.
    let newcomer = PeerId(9);
    let c = ClientSession::new(
        ClientConfig {
            name: "newcomer".into(),
            ..sc.client.clone()
        },
        SERVER,
        w.sim.now(),
    )
    .unwrap();
    w.sim.add(
        newcomer,
        Actor {
            node: Node::Client(c),
            role: Role::Honest,
        },
    );
    let mut rec = Record::new(99, sc.server.first_tick);
    let glitch = w.open().saturating_add(400);
    rec.corrupt = Some(glitch);
    w.records.insert(newcomer, rec);
    let now = w.sim.now().as_micros() / 1000;
    w.run(
        Instant::from_millis(now + 40_000),
        |_, _, _| {},
        |_, _| false,
    );
    let rec = &w.records[&newcomer];
    let seat = rec.events.iter().find_map(|e| match e {
        Event::Connected { seat, .. } => Some(*seat),
        _ => None,
    });
    let resyncs = count(rec, |e| matches!(e, Event::Resyncing));
    let closes: Vec<_> = rec
        .events
        .iter()
        .filter(|e| matches!(e, Event::Closed { .. }))
        .collect();
    eprintln!("newcomer seat {seat:?} (glitch at {glitch}): resynced {resyncs} times, {closes:?}");
    assert!(
        closes.is_empty(),
        "the newcomer was dropped at its first divergence: {closes:?}"
    );
    agree(&w, &[PeerId(2), PeerId(3), newcomer]);
}
