//! Input runs coded against an input the recipient acknowledged (`back`),
//! when what the recipient holds for that tick is not what the sender
//! coded against: the run is skipped, never misread. Here, honestly: a
//! resynced client stamps its ticks again, and the datagram carrying its
//! old input for one of them, crossing the `Resync`, is lost, so the relay
//! takes the new input for that tick while the client might code against
//! the old one.

use lockstep_core::sequenced::{ClientConfig, ClientSession, Policy, Sequencer, SequencerConfig};
use lockstep_core::wire::{Datagram, Message};
use lockstep_core::{Event, Instant, PeerId, PlayerId, Tick};
use std::collections::BTreeMap;
use std::time::Duration;

const SERVER: PeerId = PeerId(0);
const VICTIM: usize = 2; // client index (PeerId 3)

struct Game {
    c: ClientSession<u16>,
    state: u64,
    after: BTreeMap<Tick, u64>,
    owed: Option<Tick>,
    corrupt_at: Option<Tick>,
    resynced: bool,
    committed: BTreeMap<Tick, u16>,
    closed: Option<String>,
}

impl Game {
    fn frame_loop(&mut self, commit: bool) {
        if let Some(s) = self.c.take_snapshot() {
            self.state = u64::from_le_bytes(s.bytes[..8].try_into().expect("ok"));
            self.after.retain(|t, _| *t <= s.tick);
        }
        if commit && self.c.seat().is_some() {
            let t = self.c.next_commit();
            let base = if self.resynced { 3000 } else { 1000 };
            let input = base + (t.get() % 50) as u16;
            if let Ok(t) = self.c.commit_local(input)
                && self.resynced
            {
                self.committed.insert(t, input);
            }
        }
        while let Some(f) = self.c.advance() {
            for i in f.inputs.iter().flatten() {
                self.state = self.state.wrapping_mul(31).wrapping_add(u64::from(*i) + 1);
            }
            if self.corrupt_at == Some(f.tick) {
                self.state ^= 0xdead;
            }
            self.after.insert(f.tick, self.state);
            let _ = self.c.report_checksum(f.tick, self.state);
        }
        while let Some(ev) = self.c.poll_event() {
            match ev {
                Event::SnapshotRequested { tick } => self.owed = Some(tick),
                Event::Resyncing => self.resynced = true,
                Event::Closed { .. } => self.closed = Some(format!("{:?}", self.c.closed())),
                _ => {}
            }
        }
        if let Some(t) = self.owed
            && let Some(s) = self.after.get(&t)
        {
            self.owed = None;
            let _ = self.c.provide_snapshot(t, s.to_le_bytes().to_vec());
        }
    }
}

#[test]
fn an_input_lost_crossing_a_resync_never_makes_the_relay_misread_the_next_run() {
    let config = SequencerConfig {
        policy: Policy::WaitForAll {
            abandon_after: Duration::from_secs(30),
        },
        max_seats: 3,
        snapshot_join: true,
        snapshot_join_after: 0,
        ..SequencerConfig::default()
    };
    let mut now = Instant::ZERO;
    let mut server: Sequencer<u16> = Sequencer::new(config, now).expect("ok");
    let mut games: Vec<Game> = (0..3)
        .map(|i| Game {
            c: ClientSession::new(ClientConfig::default(), SERVER, now).expect("ok"),
            state: 0,
            after: BTreeMap::new(),
            owed: None,
            corrupt_at: (i == VICTIM).then(|| Tick::new(40)),
            resynced: false,
            committed: BTreeMap::new(),
            closed: None,
        })
        .collect();
    let peer = |i: usize| PeerId(i as u32 + 1);
    let mut buf = Vec::new();
    // Until the Resync, the victim's uplink takes one step (33 ms): what it
    // sent this step is delivered at the next (so a datagram can cross the
    // Resync). After it, delivery is immediate (round trip under a tick).
    let mut in_flight: Vec<Vec<u8>> = Vec::new();
    let mut held_resync: Option<Vec<u8>> = None;
    let mut tricked = false;
    let mut hitch = 0;
    let mut lost: Vec<Tick> = Vec::new();
    let mut server_events = Vec::new();
    for step in 0..600u32 {
        now += Duration::from_millis(33);
        for d in in_flight.drain(..) {
            let _ = server.handle_datagram(peer(VICTIM), &d, now);
        }
        // Player 0 commits every other tick: the room waits on it, the
        // others run ahead to their lead limit.
        let mut victim_committed = None;
        for (i, g) in games.iter_mut().enumerate() {
            let mut commit = i != 0 || step % 2 == 0;
            // A frame hitch of the victim's game right after its first
            // input since the resync: the acknowledgement of that input
            // arrives before its next one is committed (any link whose
            // round trip is under a tick or two).
            if i == VICTIM && g.committed.len() == 1 && hitch < 3 {
                hitch += 1;
                commit = false;
            }
            let before = g.c.next_commit();
            g.frame_loop(commit);
            if i == VICTIM && g.c.next_commit() > before {
                victim_committed = Some(before);
            }
        }
        for _ in 0..50 {
            let mut moved = false;
            for (i, g) in games.iter_mut().enumerate() {
                g.c.handle_timeout(now);
                while let Some(t) = g.c.poll_transmit(&mut buf) {
                    moved = true;
                    if i == VICTIM && !tricked {
                        in_flight.push(buf[..t.len].to_vec());
                    } else {
                        let _ = server.handle_datagram(peer(i), &buf[..t.len], now);
                    }
                }
            }
            server.handle_timeout(now);
            while let Some(t) = server.poll_transmit(&mut buf) {
                moved = true;
                let i = t.destination.0 as usize - 1;
                let bytes = &buf[..t.len];
                if i == VICTIM && !tricked {
                    let resync = Datagram::decode(bytes, games[i].c.frame()).is_ok_and(|d| {
                        d.messages
                            .iter()
                            .any(|m| matches!(m, Message::Resync { .. }))
                    });
                    if resync {
                        // Held (its repeats too) until the trick.
                        if held_resync.is_none() {
                            held_resync = Some(bytes.to_vec());
                        }
                        continue;
                    }
                }
                let _ = games[i].c.handle_datagram(SERVER, bytes, now);
            }
            if !moved {
                break;
            }
        }
        // The Resync reaches the victim in a step where it committed; the
        // datagram carrying that input, crossing it, is lost.
        if held_resync.is_some()
            && let Some(t) = victim_committed
        {
            lost.push(t);
            tricked = true;
            in_flight.clear();
            let d = held_resync.take().expect("ok");
            let _ = games[VICTIM].c.handle_datagram(SERVER, &d, now);
        }
        while let Some(e) = server.poll_event() {
            server_events.push(format!("{e:?}"));
        }
    }
    assert!(
        !lost.is_empty(),
        "the datagram crossing the resync was lost"
    );
    let v = &games[VICTIM];
    assert_eq!(v.closed, None, "the honest client was dropped");
    assert!(
        !server_events.iter().any(|e| e.contains("Malformed")),
        "{server_events:?}"
    );
    // What the room ran for the victim's seat is what it committed, every
    // tick since the resync.
    let seat = v.c.seat().unwrap_or(PlayerId(VICTIM as u16));
    let wrong: Vec<(u32, u16, Option<u16>)> = v
        .committed
        .iter()
        .filter_map(|(t, i)| {
            let ran = server.frame(*t).and_then(|f| f.inputs[seat.index()]);
            ran.is_some_and(|r| r != *i).then_some((t.get(), *i, ran))
        })
        .collect();
    assert_eq!(
        wrong,
        vec![],
        "inputs sealed with another value than committed"
    );
    let ran_since = v
        .committed
        .keys()
        .filter(|t| server.frame(**t).is_some())
        .count();
    assert!(
        ran_since > 100,
        "the victim played on: {ran_since} inputs ran"
    );
    // And every machine ran the same states.
    let last = games
        .iter()
        .map(|g| g.after.keys().next_back().copied())
        .min()
        .flatten();
    let last = last.expect("frames ran");
    let states: Vec<Option<u64>> = games.iter().map(|g| g.after.get(&last).copied()).collect();
    assert!(
        states.iter().all(|s| s.is_some() && *s == states[0]),
        "{states:?}"
    );
}
