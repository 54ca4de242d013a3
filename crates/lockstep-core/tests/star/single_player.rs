//! Single-player mode: a player alone in a session runs its input at once,
//! with no input delay, and plays networked again at a tick boundary when
//! someone joins; no input is lost or run twice across either switch.

use lockstep_core::sequenced::{
    ClientConfig, ClientSession, HostSession, MissingInput, Policy, SequencerConfig,
};
use lockstep_core::{Frame, Instant, PeerId, Tick};
use std::collections::BTreeMap;
use std::time::Duration;

const GUEST: PeerId = PeerId(1);

/// A host and, for a while, a guest on an in-memory link with no latency,
/// stepped one tick period at a time.
struct Table {
    host: HostSession<u16>,
    guest: Option<ClientSession<u16>>,
    now: Instant,
    period: Duration,
    iteration: u64,
    /// The host's commits: tick -> (input, iteration committed).
    committed: BTreeMap<Tick, (u16, u64)>,
    /// The host's frames: tick -> (its input in the frame, iteration run).
    ran: BTreeMap<Tick, (Option<u16>, u64)>,
    next: Option<Tick>,
}

impl Table {
    fn new(policy: Policy) -> Self {
        let config = SequencerConfig {
            policy,
            tick_rate: 30,
            delay: 3,
            ..SequencerConfig::default()
        };
        Self {
            host: HostSession::new(config, ClientConfig::default(), Instant::ZERO).unwrap(),
            guest: None,
            now: Instant::ZERO,
            period: Duration::from_micros(33_333),
            iteration: 0,
            committed: BTreeMap::new(),
            ran: BTreeMap::new(),
            next: None,
        }
    }

    fn pump(&mut self) {
        let mut buf = Vec::new();
        for _ in 0..8 {
            while let Some(t) = self.host.poll_transmit(&mut buf) {
                if let Some(g) = self.guest.as_mut() {
                    let _ = g.handle_datagram(PeerId(0), &buf[..t.len], self.now);
                }
            }
            if let Some(g) = self.guest.as_mut() {
                g.handle_timeout(self.now);
                while let Some(t) = g.poll_transmit(&mut buf) {
                    let _ = self.host.handle_datagram(GUEST, &buf[..t.len], self.now);
                }
            }
        }
    }

    /// One game-loop iteration everywhere: time, commit, run frames.
    fn step(&mut self) {
        self.iteration += 1;
        self.now += self.period;
        self.host.handle_timeout(self.now);
        self.pump();
        let input = (self.iteration % 50_000) as u16 + 1;
        if let Ok(t) = self.host.commit_local(input) {
            assert!(self.committed.insert(t, (input, self.iteration)).is_none());
        }
        if let Some(g) = self.guest.as_mut() {
            if g.seat().is_some() {
                let _ = g.commit_local(7);
            }
            while g.advance().is_some() {}
        }
        self.pump();
        while let Some(f) = self.host.advance() {
            self.record(&f);
        }
        self.pump();
        while let Some(f) = self.host.advance() {
            self.record(&f);
        }
    }

    fn record(&mut self, f: &Frame<u16>) {
        if let Some(n) = self.next {
            assert_eq!(f.tick, n, "frames in order, each once");
        }
        self.next = f.tick.next();
        let mine = f.inputs[0];
        self.ran.insert(f.tick, (mine, self.iteration));
    }

    /// Iterations from commit to run for the host's inputs committed in
    /// `iterations`: the largest.
    fn latency(&self, iterations: std::ops::Range<u64>) -> u64 {
        self.committed
            .iter()
            .filter(|(_, (_, at))| iterations.contains(at))
            .filter_map(|(t, (_, at))| self.ran.get(t).map(|(_, run)| run - at))
            .max()
            .expect("inputs ran")
    }

    /// Every input the host committed ran exactly once, in the order
    /// committed, at its tick or (under a deadline, when it came late) a
    /// later one; nothing else of the host's ran.
    fn assert_inputs_exact(&self) {
        let ran: Vec<(Tick, u16)> = self
            .ran
            .iter()
            .filter_map(|(t, (v, _))| v.filter(|v| *v != 0).map(|v| (*t, v)))
            .collect();
        let committed: Vec<(Tick, u16)> = self
            .committed
            .iter()
            .map(|(t, (v, _))| (*t, *v))
            .filter(|(t, _)| self.ran.contains_key(t))
            .collect();
        assert_eq!(
            ran.iter().map(|r| r.1).collect::<Vec<_>>(),
            committed.iter().map(|c| c.1).collect::<Vec<_>>(),
            "each input once, in order"
        );
        for ((at, _), (stamped, _)) in ran.iter().zip(&committed) {
            assert!(at >= stamped, "run at {at}, stamped {stamped}");
        }
    }
}

fn solo_then_networked_then_solo(policy: Policy) -> (u64, u64, u64) {
    let mut table = Table::new(policy);
    for _ in 0..100 {
        table.step();
    }
    let alone = table.latency(20..100);
    let config = ClientConfig::default();
    table.guest = Some(ClientSession::new(config, PeerId(0), table.now).unwrap());
    for _ in 0..100 {
        table.step();
    }
    let together = table.latency(150..200);
    if let Some(g) = table.guest.as_mut() {
        g.leave();
    }
    for _ in 0..10 {
        table.step();
    }
    table.guest = None;
    for _ in 0..100 {
        table.step();
    }
    let alone_again = table.latency(240..310);
    table.assert_inputs_exact();
    (alone, together, alone_again)
}

#[test]
fn a_host_alone_under_wait_for_all_runs_its_input_at_once() {
    let (alone, together, again) = solo_then_networked_then_solo(Policy::WaitForAll {
        abandon_after: Duration::from_secs(10),
    });
    eprintln!("wait-for-all: alone {alone}, with a guest {together}, alone again {again}");
    assert_eq!((alone, again), (0, 0));
}

#[test]
fn a_host_alone_under_a_deadline_runs_its_input_at_once() {
    let (alone, together, again) = solo_then_networked_then_solo(Policy::Deadline {
        missing: MissingInput::Neutral,
    });
    eprintln!("deadline: alone {alone}, with a guest {together}, alone again {again}");
    assert_eq!((alone, again), (0, 0));
    assert!(together >= 3, "networked play keeps its input delay");
}

/// In a mesh, the last player left (the other was abandoned) runs each
/// input in the iteration it commits it, and every input it committed ran
/// once, in order, at its own tick.
#[test]
fn the_last_player_in_a_mesh_runs_its_input_at_once() {
    use lockstep_core::{MeshConfig, MeshSession, PlayerId, Roster};
    let (a, b) = (PeerId(0), PeerId(1));
    let roster = Roster::new().player(a, PlayerId(0)).player(b, PlayerId(1));
    let config = MeshConfig {
        delay: 3,
        abandon_after: None,
        ..MeshConfig::default()
    };
    let mut now = Instant::ZERO;
    let mut sa = MeshSession::<u16>::new(config.clone(), roster.clone(), a, now).unwrap();
    let mut sb = MeshSession::<u16>::new(config, roster, b, now).unwrap();
    let period = Duration::from_micros(33_333);
    let mut committed: BTreeMap<Tick, (u16, u64)> = BTreeMap::new();
    let mut ran: BTreeMap<Tick, (Option<u16>, u64)> = BTreeMap::new();
    let mut buf = Vec::new();
    for it in 1..=400u64 {
        now += period;
        let b_alive = it <= 100;
        sa.handle_timeout(now);
        if b_alive {
            sb.handle_timeout(now);
        }
        let input = it as u16;
        if let Ok(t) = sa.commit_local(input) {
            committed.insert(t, (input, it));
        }
        if b_alive {
            let _ = sb.commit_local(9);
        }
        for _ in 0..3 {
            while let Some(t) = sa.poll_transmit(&mut buf) {
                if b_alive {
                    let _ = sb.handle_datagram(a, &buf[..t.len], now);
                }
            }
            while let Some(t) = sb.poll_transmit(&mut buf) {
                if b_alive {
                    let _ = sa.handle_datagram(b, &buf[..t.len], now);
                }
            }
        }
        if it == 200 {
            sa.abandon(PlayerId(1)).unwrap();
        }
        while let Some(f) = sa.advance() {
            ran.insert(f.tick, (f.inputs[0], it));
        }
        while sb.advance().is_some() {}
    }
    // Alone from some tick after the vote: from then on, no delay.
    let late: Vec<u64> = committed
        .iter()
        .filter(|(_, (_, at))| *at > 250)
        .filter_map(|(t, (_, at))| ran.get(t).map(|(_, r)| r - at))
        .collect();
    assert!(late.len() > 100, "it ran on alone: {}", late.len());
    assert_eq!(late.iter().max(), Some(&0), "no delay alone");
    for (t, (input, _)) in &committed {
        if let Some((got, _)) = ran.get(t) {
            assert_eq!(*got, Some(*input), "tick {t}");
        }
    }
    let ticks: Vec<Tick> = ran.keys().copied().collect();
    assert!(ticks.windows(2).all(|w| w[1] == w[0].saturating_add(1)));
}

/// A lone player whose loop commits as fast as it is let (a cheat, or an
/// uncapped loop) runs no faster than the tick rate plus its lead (found in
/// review: 21,782 ticks in 10 s at 30 Hz, leaving joiners behind for good).
#[test]
fn a_player_alone_runs_no_faster_than_the_tick_rate() {
    let mut table = Table::new(Policy::Deadline {
        missing: MissingInput::Neutral,
    });
    for _ in 0..300 {
        table.step();
        for k in 0..50u16 {
            if table.host.commit_local(60_000 + k).is_err() {
                break;
            }
        }
        while let Some(f) = table.host.advance() {
            table.next = f.tick.next();
        }
    }
    let open = table.host.sequencer().open_tick().get();
    // 300 ticks of 33 ms, and the lead (delay 3 + max_lead 8).
    assert!(open <= 300 + 12, "{open} ticks in 10 s at 30 Hz");
}
