//! Host mode on the simulated network: what an application does for a
//! [`HostedSession`] besides playing (naming contacts while hosting,
//! resolving the one it must reach while taking over).

use lockstep_core::sequenced::HostedSession;
use lockstep_core::sim::LinkConditions;
use lockstep_core::{Event, Frame, Instant, PeerId, Tick};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::time::Duration;

pub type Hosted = HostedSession<u16>;

/// A peer's contact in these tests: its id's bytes.
pub fn contact(p: PeerId) -> Vec<u8> {
    p.0.to_le_bytes().to_vec()
}

/// Names every connection's contact (hosting) and resolves the contact a
/// survivor must reach (taking over): once per game-loop iteration.
pub fn contacts(s: &mut Hosted) {
    if let Some(seq) = s.sequencer() {
        let peers: Vec<PeerId> = seq.connections().map(|(p, _)| p).collect();
        for p in peers {
            let _ = seq.set_contact(p, &contact(p));
        }
    }
    for _ in 0..256 {
        let Some(c) = s.contact_wanted().map(<[u8]>::to_vec) else {
            break;
        };
        let Ok(b) = <[u8; 4]>::try_from(&c[..]) else {
            break;
        };
        s.resolved(&c, PeerId(u32::from_le_bytes(b)));
    }
}

/// What a player's game ran, committed and heard.
#[derive(Default)]
pub struct Game {
    pub ran: BTreeMap<Tick, Frame<u16>>,
    pub committed: BTreeMap<Tick, u16>,
    /// When each tick was first run (virtual time).
    pub at: BTreeMap<Tick, Instant>,
    /// The game events heard.
    pub events: Vec<Event>,
}

/// One game-loop iteration: contacts, an input (from the clock and the
/// player's id), every frame run, every event heard.
pub fn play(id: PeerId, s: &mut Hosted, g: &mut Game, now: Instant) {
    contacts(s);
    let input = (now.as_millis() as u16)
        .wrapping_mul(8)
        .wrapping_add(id.0 as u16)
        | 1;
    if let Ok(t) = s.commit_local(input) {
        g.committed.insert(t, input);
    }
    while let Some(f) = s.advance() {
        g.at.entry(f.tick).or_insert(now);
        g.ran.insert(f.tick, f);
    }
    while let Some(e) = s.poll_event() {
        g.events.push(e);
    }
}

prop_compose! {
    /// A link 15 ms each way with some jitter, duplication and reordering,
    /// and loss below `max_loss`.
    pub fn lossy(max_loss: f64)(loss in 0.0..max_loss, jitter in 0u64..15, dup in 0.0f64..0.05) -> LinkConditions {
        LinkConditions {
            latency: Duration::from_millis(15),
            jitter: Duration::from_millis(jitter),
            loss,
            duplicate: dup,
            reorder: 0.05,
            max_datagram: Some(1200),
            bandwidth: None,
        }
    }
}
