//! Host mode on the simulated network: what an application does for a
//! [`HostedSession`] besides playing (naming contacts while hosting,
//! resolving the one it must reach while taking over).

use lockstep_core::PeerId;
use lockstep_core::sequenced::HostedSession;

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
