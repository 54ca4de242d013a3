//! Mesh sessions with observers joining and catching up: the helpers the
//! observer tests share.

use super::{Harness, Record, Scenario, Session, outcome_ok};
use lockstep_core::sim::LinkConditions;
use lockstep_core::wire::{DatagramWriter, Message};
use lockstep_core::{PeerId, PlayerId, Roster, Tick};
use std::time::Duration;

/// Every live peer has run `ticks` frames.
pub fn all_reached(h: &Harness, ticks: u32) -> bool {
    h.sim.live().all(|(_, s)| s.frame().since(h.first) >= ticks)
}

pub fn live_ids(h: &Harness) -> Vec<PeerId> {
    h.sim.live().map(|(id, _)| id).collect()
}

/// Buffers stay within their stated bounds, observers and donors included.
pub fn assert_bounded(h: &Harness, seed: u64) {
    for (id, s) in h.sim.live() {
        let st = s.stats();
        assert!(
            st.buffered_ticks <= s.buffer_bound(),
            "seed {seed}: {id} holds {} ticks, bound {}",
            st.buffered_ticks,
            s.buffer_bound()
        );
    }
}

/// Adds observer `id` to a mesh under way: its own session lists the
/// players and itself; every player adds it.
pub fn join_observer(h: &mut Harness, sc: &Scenario, id: PeerId) {
    let mut roster = Roster::new();
    for i in 0..sc.players {
        roster = roster.player(PeerId(i as u32), PlayerId(i as u16));
    }
    roster = roster.observer(id);
    let now = h.sim.now();
    let s = Session::join_under_way(sc.config.clone(), roster, id, now).unwrap();
    h.sim.add(id, s);
    let mut rec = Record::new(sc.seed ^ 0xABCD, sc.config.first_tick);
    rec.bulk = h.records[&PeerId(0)].bulk;
    h.records.insert(id, rec);
    for p in sc.player_ids() {
        if let Some(s) = h.sim.endpoint_mut(p) {
            s.add_observer(id).unwrap();
        }
    }
}

/// Two players on a clean 5 ms link, ticking every `period_ms`.
pub fn clean(players: usize, seed: u64, period_ms: u64) -> Scenario {
    let mut sc = Scenario::new(players, seed);
    sc.link = LinkConditions {
        latency: Duration::from_millis(5),
        max_datagram: Some(1200),
        ..LinkConditions::default()
    };
    sc.period = Duration::from_millis(period_ms);
    sc.config.abandon_after = Some(Duration::from_secs(2));
    sc
}

/// Runs until every live peer has run `ticks` frames, or panics.
pub fn reach(h: &mut Harness, ticks: u32, within: Duration, what: &str) {
    let first = h.first;
    let until = h.sim.now() + within;
    let seed = h.sim.net.seed();
    let o = h.run(
        until,
        |_, _, _, _| {},
        |sim| sim.live().all(|(_, s)| s.frame().since(first) >= ticks),
    );
    outcome_ok(o, what, seed);
}

/// Writes one datagram from `from`'s side, as a hostile player would.
pub fn forged(base: Tick, messages: &[Message<'_>]) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut w = DatagramWriter::new(&mut buf, base, 1200);
    for m in messages {
        w.push(m).unwrap();
    }
    w.finish();
    buf
}

/// Runs until `observer`'s session satisfies `done`, or panics with `what`.
pub fn wait_for(
    h: &mut Harness,
    observer: PeerId,
    within: Duration,
    what: &str,
    done: impl Fn(&Session) -> bool,
) {
    let until = h.sim.now() + within;
    let seed = h.sim.net.seed();
    let o = h.run(
        until,
        |_, _, _, _| {},
        |sim| sim.endpoint(observer).is_some_and(&done),
    );
    outcome_ok(o, what, seed);
}

/// Runs until `observer` is within `slack` ticks of `leader`, or panics
/// with `what`.
pub fn until_caught_up(
    h: &mut Harness,
    observer: PeerId,
    leader: PeerId,
    slack: u32,
    within: Duration,
    what: &str,
) {
    let until = h.sim.now() + within;
    let (seed, first) = (h.sim.net.seed(), h.first);
    let o = h.run(
        until,
        |_, _, _, _| {},
        |sim| {
            let lead = sim.endpoint(leader).map_or(first, |s| s.frame());
            sim.endpoint(observer)
                .is_some_and(|s| s.frame().saturating_add(slack) >= lead)
        },
    );
    outcome_ok(o, what, seed);
}

/// Runs until `observer` holds 20 chunks of a snapshot and not all of them
/// (a transfer under way, to cut), or panics with `what`.
pub fn mid_transfer(h: &mut Harness, observer: PeerId, what: &str) {
    wait_for(h, observer, Duration::from_secs(10), what, |s| {
        s.snapshot_progress()
            .is_some_and(|(have, of)| have >= 20 && have < of)
    });
}
