//! A guard against the next bandwidth regression: bytes per player per
//! tick in fixed scenarios on the simulated network (deterministic, no
//! timing), each against a stated budget. A change that sends more fails
//! here; one that sends less lowers the budget with it.
//!
//! The test harness's players change their input most ticks, so frames
//! here cost more than in `--bench bandwidth`, whose players act like a
//! game's. Figures when the budgets were set (down, up): loopback 70.6 and
//! 22.0, 250 ms with 1% loss 90.4 and 36.3 (the engine before per-frame
//! copies sent 235.5 down there); the mesh 65.6. Since input runs carry a
//! check of their reference (one byte a run): up 22.8 and 37.1, the mesh
//! 68.0. Since a client's inputs go a few times each, not in every
//! datagram until acknowledged: up at 250 ms 26.3. A mesh at 250 ms with
//! 1% loss: 111.9 while each peer sent every input not acknowledged in
//! every datagram, 78.9 since they go a few times each.

use crate::common::star::StarScenario;
use crate::common::{Scenario, secs};
use lockstep_core::Instant;
use lockstep_core::sim::LinkConditions;
use std::time::Duration;

/// Bytes down and up per client per frame run in an 8-player room, over
/// 30 s of play after 10 s to settle.
fn room(link: LinkConditions, seed: u64) -> (f64, f64) {
    let mut sc = StarScenario::new(8, seed);
    sc.link = link;
    let mut h = sc.build();
    let ids = sc.client_ids();
    let totals = |h: &crate::common::star::StarHarness| {
        ids.iter().fold((0, 0, 0), |(f, d, u), id| {
            let s = h.client(*id).stats();
            (f + s.frames, d + s.bytes_received, u + s.bytes_sent)
        })
    };
    h.run(secs(10), |_, _, _| {}, |_| false);
    let (f0, d0, u0) = totals(&h);
    h.run(secs(40), |_, _, _| {}, |_| false);
    let (f1, d1, u1) = totals(&h);
    h.assert_streams_agree(&ids);
    let frames = (f1 - f0) as f64;
    assert!(
        frames > 8.0 * 30.0 * 29.0,
        "the room played: {frames} frames"
    );
    ((d1 - d0) as f64 / frames, (u1 - u0) as f64 / frames)
}

fn lossy(rtt_ms: u64, loss: f64) -> LinkConditions {
    LinkConditions {
        latency: Duration::from_millis(rtt_ms / 2),
        jitter: Duration::from_millis(rtt_ms / 20),
        loss,
        ..LinkConditions::default()
    }
}

fn within(what: &str, got: f64, budget: f64) {
    eprintln!("{what}: {got:.1} B per player per tick (budget {budget})");
    assert!(
        got <= budget,
        "{what}: {got:.1} B per player per tick, over the budget of {budget}"
    );
}

#[test]
fn an_eight_player_room_on_loopback_stays_in_its_budget() {
    let (down, up) = room(LinkConditions::default(), 7);
    within("room, loopback, down", down, 72.0);
    within("room, loopback, up", up, 23.0);
}

#[test]
fn an_eight_player_room_at_250_ms_with_loss_stays_in_its_budget() {
    let (down, up) = room(lossy(250, 0.01), 11);
    within("room, 250 ms 1%, down", down, 92.0);
    within("room, 250 ms 1%, up", up, 27.0);
}

/// Bytes each player of a 4-player mesh sends per frame it runs, over
/// 30 s of play after 10 s to settle.
fn mesh(link: LinkConditions, seed: u64) -> f64 {
    let mut sc = Scenario::new(4, seed);
    sc.link = link;
    let mut h = sc.build();
    let ids = sc.player_ids();
    let totals = |h: &crate::common::Harness| {
        ids.iter().fold((0, 0), |(f, b), id| {
            let s = h.session(*id).stats();
            (f + s.frames, b + s.bytes_sent)
        })
    };
    h.run(Instant::from_millis(10_000), |_, _, _, _| {}, |_| false);
    let (f0, b0) = totals(&h);
    h.run(Instant::from_millis(40_000), |_, _, _, _| {}, |_| false);
    let (f1, b1) = totals(&h);
    h.assert_streams_agree(&ids);
    let frames = (f1 - f0) as f64;
    assert!(
        frames > 4.0 * 29.0 * 29.0,
        "the mesh played: {frames} frames"
    );
    (b1 - b0) as f64 / frames
}

#[test]
fn a_four_player_mesh_on_a_clean_link_stays_in_its_budget() {
    within(
        "mesh, clean, sent",
        mesh(LinkConditions::default(), 5),
        69.0,
    );
}

#[test]
fn a_four_player_mesh_at_250_ms_with_loss_stays_in_its_budget() {
    within("mesh, 250 ms 1%, sent", mesh(lossy(250, 0.01), 13), 80.0);
}
