//! Two hundred spectators of one room over loopback UDP, sealed, watching
//! a second behind: none holds a frame (or is told of a tick) the players
//! had not run a second before, each has its first picture within a
//! second past the delay (twenty of them join mid-match, from a snapshot
//! held until it is old enough), and when the players leave at the
//! match's end every spectator is sent the rest and ends on their state;
//! one spectator saves the match as it watches, and its file verifies.
//! The relay's bytes out per spectator are printed.

use crate::common::TestRelay;
use crate::common::fold::{Fold, Shared};
use lockstep_core::runner::{RunnerConfig, Status};
use lockstep_core::sequenced::ClientConfig;
use lockstep_core::{Game, Tick};
use lockstep_net::RelayClient;
use lockstep_relay::RelayConfig;
use std::time::{Duration, Instant};

const SPECTATORS: usize = 200;
/// Of the spectators, those who join once the match has run three seconds.
const LATE: usize = 20;
const LAST: u32 = 240;

#[test]
fn two_hundred_spectators_watch_a_second_behind() {
    let mut config = RelayConfig::default();
    config.room_defaults.max_spectators = 256;
    config.room_defaults.spectator_delay_secs = 1;
    config.room_defaults.snapshot_join = true;
    config.room_defaults.snapshot_join_after = 0;
    // Every client comes from this machine's one loopback address.
    config.limits.max_udp_per_addr = 512;
    config.limits.handshakes_per_addr = 2_000;
    config.limits.handshakes_per_sec = 4_000;
    config.limits.stranger_replies_per_addr = 2_000;
    let relay = TestRelay::start(config);
    let client = |name: &str, spectator: bool| {
        let config = ClientConfig {
            room: "crowd".into(),
            name: name.into(),
            spectator,
            ..ClientConfig::default()
        };
        let mut c =
            RelayClient::connect(relay.udp, config, Fold::default(), RunnerConfig::default())
                .expect("a client");
        c.set_last_tick(Some(Tick::new(LAST)));
        c
    };
    let mut players = vec![client("ann", false), client("bob", false)];
    let mut crowd: Vec<RelayClient<Fold>> = (0..SPECTATORS - LATE)
        .map(|k| client(&format!("fan{k}"), true))
        .collect();
    // When each spectator connected, and when it first had a picture.
    let mut joined: Vec<Instant> = vec![Instant::now(); crowd.len()];
    let mut pictured: Vec<Option<Instant>> = vec![None; SPECTATORS];
    // A spectator saves the match as it watches.
    let saved = Shared::default();
    crowd[0]
        .runner_mut()
        .record(
            lockstep_core::replay::Header::new(
                0,
                "fold",
                30,
                1,
                lockstep_core::replay::Topology::Relay,
            ),
            Box::new(saved.clone()),
        )
        .expect("recording");
    let started = Instant::now();
    let deadline = started + Duration::from_secs(60);
    // The room's open tick as the players last heard it, by when: a
    // spectator may hold nothing past what it was a second before.
    let mut sealed: Vec<(Instant, u32)> = Vec::new();
    loop {
        for p in &mut players {
            p.turn(|g| (g.next % 7) as u16).expect("a player's turn");
            // The match over for a player: it leaves, and the spectators
            // are sent the last second they were held back from.
            if p.status() == Status::Finished && p.session().closed().is_none() {
                p.leave();
            }
        }
        let newest = players.iter().map(|p| p.game().next).max().unwrap_or(0);
        let open = players
            .iter()
            .map(|p| p.session().stats().server_open.get())
            .max()
            .unwrap_or(0);
        sealed.push((Instant::now(), open));
        if joined.len() < SPECTATORS && newest >= 90 {
            for k in crowd.len()..SPECTATORS {
                crowd.push(client(&format!("fan{k}"), true));
                joined.push(Instant::now());
            }
        }
        for (k, s) in crowd.iter_mut().enumerate() {
            s.turn(|_| 0).expect("a spectator's turn");
            if pictured[k].is_none() && s.game().next > 0 {
                pictured[k] = Some(Instant::now());
            }
        }
        // While the match goes on, a spectator never held a frame, nor was
        // told of a tick, the room had not opened a second (the delay)
        // before, give or take a few ticks of the players' hearing of it:
        // checked after every turn, so on whatever datagrams it took in.
        let over = players.iter().any(|p| p.session().closed().is_some());
        let now = Instant::now();
        let a_second_ago = sealed
            .iter()
            .rev()
            .find(|(t, _)| now.duration_since(*t) >= Duration::from_millis(1_000))
            .map_or(0, |(_, n)| *n);
        for (k, s) in crowd.iter().enumerate().filter(|_| !over) {
            let held = s.session().lacks().get();
            let told = s.session().stats().server_open.get();
            assert!(
                held.max(told) <= a_second_ago + 4,
                "spectator {k} held frames to {held} and was told of {told} with the room open at \
                 {a_second_ago} a second before (the players at {newest})",
            );
        }
        if crowd.iter().all(|s| s.status() == Status::Finished) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not done in 60 s: {} of {SPECTATORS} spectators finished, the players at {newest}",
            crowd
                .iter()
                .filter(|s| s.status() == Status::Finished)
                .count()
        );
        players[0].wait(Duration::from_millis(2)).expect("waits");
    }
    let took = started.elapsed();
    // Each spectator's first picture came within a second past the delay
    // of its connecting (the delay is the least it can be: the first
    // frame it may see is a second old).
    let waits: Vec<Duration> = joined
        .iter()
        .zip(&pictured)
        .map(|(j, p)| p.expect("every spectator had a picture").duration_since(*j))
        .collect();
    let (early, late) = waits.split_at(SPECTATORS - LATE);
    let slowest = |w: &[Duration]| w.iter().max().copied().unwrap_or_default();
    assert!(slowest(&waits) < Duration::from_secs(2), "{waits:?}");
    let received: u64 = crowd
        .iter()
        .map(|s| s.session().stats().bytes_received)
        .sum();
    let player = players[0].session().stats().bytes_received;
    eprintln!(
        "{SPECTATORS} spectators, {LAST} ticks in {took:.1?}: first picture at most {} ms after \
         connecting from the start, {} ms mid-match (delay 1 s); the relay sent each spectator \
         {} bytes on average ({} a second of match), a player {player}",
        slowest(early).as_millis(),
        slowest(late).as_millis(),
        received / SPECTATORS as u64,
        received / SPECTATORS as u64 * 30 / u64::from(LAST),
    );
    let hash = players[0].game().hash();
    assert_eq!(players[1].game().hash(), hash);
    for (k, s) in crowd.iter().enumerate() {
        assert_eq!(s.game().hash(), hash, "spectator {k}");
    }
    // The spectator's file holds the match to its last tick and verifies.
    crowd[0]
        .runner_mut()
        .stop_recording()
        .expect("recording")
        .expect("written");
    let bytes = saved.0.lock().expect("not poisoned").clone();
    let replay = lockstep_core::replay::Replay::<u16>::read(&bytes);
    assert!(replay.is_whole(), "{:?}", replay.stopped);
    let last = replay
        .frame_count()
        .checked_sub(1)
        .and_then(|k| replay.tick_of(k));
    assert_eq!(last, Some(Tick::new(LAST)));
    let found = lockstep_core::replay::verify(&replay, Fold::default()).expect("verifies");
    assert!(found.matches() && found.checkpoints >= 7, "{found:?}");
    // 240 ticks at 30 Hz is 8 s; the crowd a second behind, joining first.
    assert!(took < Duration::from_secs(20), "took {took:?}");
    relay.stop();
}

/// A newcomer names the room the moment its match is over: the spectators
/// watching two seconds behind still get the match's last two seconds,
/// and the newcomer then plays a new match under the name (it could cut
/// their drain short at once).
#[test]
fn a_newcomer_waits_for_the_spectators_to_see_the_end() {
    let mut config = RelayConfig::default();
    config.room_defaults.spectator_delay_secs = 2;
    let relay = TestRelay::start(config);
    let client = |name: &str, spectator: bool| {
        let config = ClientConfig {
            room: "drain".into(),
            name: name.into(),
            spectator,
            ..ClientConfig::default()
        };
        let mut c =
            RelayClient::connect(relay.udp, config, Fold::default(), RunnerConfig::default())
                .expect("a client");
        c.set_last_tick(Some(Tick::new(LAST)));
        c
    };
    let mut players = vec![client("ann", false), client("bob", false)];
    let mut crowd: Vec<RelayClient<Fold>> =
        (0..3).map(|k| client(&format!("fan{k}"), true)).collect();
    let mut newcomer: Option<RelayClient<Fold>> = None;
    let deadline = Instant::now() + Duration::from_secs(40);
    let first_match = loop {
        for p in &mut players {
            p.turn(|g| (g.next % 7) as u16).expect("a player's turn");
            if p.status() == Status::Finished && p.session().closed().is_none() {
                p.leave();
            }
        }
        for s in &mut crowd {
            s.turn(|_| 0).expect("a spectator's turn");
        }
        if newcomer.is_none() && players.iter().all(|p| p.session().closed().is_some()) {
            newcomer = Some(client("cat", false));
        }
        if let Some(n) = newcomer.as_mut() {
            n.turn(|g| (g.next % 3) as u16)
                .expect("the newcomer's turn");
        }
        let watched = crowd.iter().all(|s| s.status() == Status::Finished);
        let playing = newcomer
            .as_ref()
            .is_some_and(|n| n.status() == Status::Playing && n.game().next > 30);
        if watched && playing {
            break players[0].session().match_id();
        }
        assert!(
            Instant::now() < deadline,
            "spectators finished: {watched}, the newcomer playing: {playing}"
        );
        crowd[0].wait(Duration::from_millis(2)).expect("waits");
    };
    let hash = players[0].game().hash();
    for s in &crowd {
        assert_eq!(s.game().hash(), hash, "every spectator saw the end");
    }
    let n = newcomer.expect("the newcomer");
    assert_ne!(n.session().match_id(), first_match, "a new match");
    relay.stop();
}
