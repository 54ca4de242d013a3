//! Four peers of a mesh session over the simulated network with 10% loss.
//!
//! Each peer runs a tiny deterministic "game" (a counter folded from every
//! input) at 30 Hz for 600 ticks, reports checksums, and at the end the
//! example prints each peer's tick, stalls, traffic and final stream hash.
//! All hashes must be equal; the process exits non-zero otherwise.
//!
//! ```text
//! cargo run -p lockstep-core --example mesh -- [seed] [loss-percent]
//! ```

use lockstep_core::sim::{LinkConditions, Outcome, Sim, SimNetwork, SimRng};
use lockstep_core::{
    Event, Instant, MeshConfig, MeshSession, PeerId, PlayerId, Roster, StreamHash,
};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

const PEERS: u32 = 4;
const TICKS: u32 = 600;

/// What each peer's game keeps.
struct Game {
    stream: StreamHash,
    state: u64,
    input_rng: SimRng,
    held: Option<u16>,
    desyncs: u32,
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let seed: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let loss: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(10.0) / 100.0;

    let link = LinkConditions {
        latency: Duration::from_millis(40),
        jitter: Duration::from_millis(15),
        loss,
        duplicate: 0.02,
        reorder: 0.05,
        max_datagram: Some(1200),
        bandwidth: None,
    };
    println!(
        "{PEERS} peers, 30 Hz, {TICKS} ticks, seed {seed}; links: {} ms ± {} ms, {:.0}% loss, 2% duplicated, 5% reordered",
        link.latency.as_millis(),
        link.jitter.as_millis(),
        loss * 100.0
    );

    let mut roster = Roster::new();
    for i in 0..PEERS {
        roster = roster.player(PeerId(i), PlayerId(i as u16));
    }
    let config = MeshConfig {
        delay: 3,
        ..MeshConfig::default()
    };
    let mut sim = Sim::new(SimNetwork::new(seed, link));
    let mut games = BTreeMap::new();
    for i in 0..PEERS {
        let id = PeerId(i);
        match MeshSession::<u16>::new(config.clone(), roster.clone(), id, Instant::ZERO) {
            Ok(s) => sim.add(id, s),
            Err(e) => {
                eprintln!("bad configuration: {e}");
                return ExitCode::FAILURE;
            }
        }
        games.insert(
            id,
            Game {
                stream: StreamHash::new(),
                state: 0,
                input_rng: SimRng::new(seed ^ u64::from(i + 1)),
                held: None,
                desyncs: 0,
            },
        );
    }

    let outcome = sim.run(
        Instant::from_millis(600_000),
        Duration::from_millis(33),
        |id, session, _now| {
            let Some(game) = games.get_mut(&id) else {
                return;
            };
            // Sample input: a stick that moves now and then.
            let input = *game
                .held
                .get_or_insert_with(|| game.input_rng.next_u64() as u16 & 0x0fff);
            if session.commit_local(input).is_ok() {
                game.held = None;
            }
            while session.frame().get() < TICKS {
                let Some(frame) = session.advance() else {
                    break;
                };
                for (player, input) in frame.players() {
                    game.state = game
                        .state
                        .rotate_left(5)
                        .wrapping_add(u64::from(*input) * (u64::from(player.0) + 1));
                }
                game.stream.push(&frame);
                if frame.tick.get().is_multiple_of(30) {
                    let _ = session.report_checksum(frame.tick, game.state);
                }
            }
            while let Some(event) = session.poll_event() {
                if let Event::Desync { .. } = event {
                    game.desyncs += 1;
                }
            }
        },
        |sim| sim.endpoints().all(|(_, s)| s.frame().get() >= TICKS),
    );
    // Let the last acknowledgements settle so the figures are final.
    let _ = sim.run(
        sim.now() + Duration::from_millis(500),
        Duration::from_millis(33),
        |_, _, _| {},
        |_| false,
    );

    println!(
        "\n{:<8} {:>6} {:>7} {:>11} {:>9} {:>9} {:>8}  stream hash",
        "peer", "tick", "stalls", "stalled ms", "sent", "bytes/tk", "rtt ms"
    );
    let mut hashes = Vec::new();
    for (id, session) in sim.endpoints() {
        let st = session.stats();
        let game = &games[&id];
        let rtt = st
            .peers
            .iter()
            .filter_map(|p| p.rtt)
            .map(|r| r.as_millis())
            .max()
            .unwrap_or(0);
        println!(
            "{:<8} {:>6} {:>7} {:>11} {:>9} {:>9.1} {:>8}  {:016x}",
            id.to_string(),
            st.next_tick.get(),
            st.stalls,
            st.stalled_for.as_millis(),
            st.datagrams_sent,
            st.bytes_sent as f64 / f64::from(st.next_tick.get().max(1)),
            rtt,
            game.stream.value()
        );
        hashes.push((game.stream.value(), game.stream.frames(), game.desyncs));
    }
    let net = sim.net.stats();
    println!(
        "\nnetwork: {} datagrams sent, {} dropped, {} duplicated; {:.1} s of virtual time",
        net.sent,
        net.dropped,
        net.duplicated,
        sim.now().as_millis() as f64 / 1000.0
    );
    let first = hashes[0];
    let agree = hashes.iter().all(|h| h.0 == first.0 && h.1 == first.1);
    let desyncs: u32 = hashes.iter().map(|h| h.2).sum();
    match (outcome, agree, desyncs) {
        (Outcome::Done, true, 0) => {
            println!("OK: every peer ran the same {} frames", first.1);
            ExitCode::SUCCESS
        }
        _ => {
            println!("FAILED: outcome {outcome:?}, streams agree: {agree}, desyncs: {desyncs}");
            ExitCode::FAILURE
        }
    }
}
