//! The roster a room shares with its seated clients: each seat's holder
//! by name, ready or not, a commitment to its token, and (host mode) its
//! contact.

use super::*;

/// One seat's entry in the roster, as last shared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct RosterEntry {
    /// The roster version when it last changed (0: never shared).
    pub(super) version: u32,
    pub(super) holder: Option<RosterHolder>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RosterHolder {
    pub(super) playing: bool,
    pub(super) hosts: bool,
    /// The token it was shared for (the commitment is made once per token).
    pub(super) token: ResumeToken,
    pub(super) commitment: [u8; 16],
    pub(super) contact: Vec<u8>,
    pub(super) name: String,
    pub(super) ready: bool,
}

impl<I: Input> Sequencer<I> {
    /// Brings the shared roster up to date with the seats: an entry whose
    /// holder, playing state, token, name, readiness or contact changed
    /// gets the next version, and goes out to every seated client until
    /// acknowledged.
    pub(super) fn refresh_roster(&mut self) {
        let contacts = self.config.share_roster;
        // Runs before every datagram: compares in place, and hashes and
        // copies only what changed.
        for k in 0..self.seats.len() {
            let current = self.seats[k].as_ref().map(|s| {
                // The host's own seat, also while held for the host's
                // client after a takeover (before its Hello, which comes
                // across inside the host's process whenever the session
                // is next called: the entry must not depend on when).
                let hosts = s.conn.or(s.bound) == Some(crate::sequenced::HOST_PEER);
                // Nobody reaches the host's own client but the host.
                let contact: &[u8] = s
                    .conn
                    .filter(|_| !hosts && contacts)
                    .and_then(|p| self.conn_index(p))
                    .map_or(&[], |i| &self.conns[i].contact);
                // The token its holder surely has: the one before, until
                // it shows it got its new one (its Welcome may be lost).
                (
                    (s.live, hosts, s.ready),
                    s.previous.unwrap_or(s.token),
                    contact,
                    s.name.as_str(),
                )
            });
            let e = &self.roster[k];
            let same = match (&e.holder, &current) {
                (None, None) => true,
                (Some(h), Some(((playing, hosts, ready), token, contact, name))) => {
                    h.playing == *playing
                        && h.hosts == *hosts
                        && h.ready == *ready
                        && h.token == *token
                        && h.contact == *contact
                        && h.name == *name
                }
                _ => false,
            };
            // An empty seat never shared needs no entry.
            if same || (e.version == 0 && current.is_none()) {
                continue;
            }
            let holder =
                current.map(
                    |((playing, hosts, ready), token, contact, name)| RosterHolder {
                        playing,
                        hosts,
                        token,
                        commitment: admission::token_commitment(&token),
                        contact: contact.to_vec(),
                        name: name.to_owned(),
                        ready,
                    },
                );
            self.roster_version = self.roster_version.wrapping_add(1).max(1);
            let e = &mut self.roster[k];
            e.version = self.roster_version;
            e.holder = holder;
        }
    }

    /// The roster entries `c` has not acknowledged, by seat (none for a
    /// spectator of a room that shares contacts).
    pub(super) fn roster_unacked<'a>(&'a self, c: &'a Conn) -> impl Iterator<Item = usize> + 'a {
        let shared = (c.seat.is_some() || !self.config.share_roster) && c.closing.is_none();
        // Nothing to walk in a room that does not share (has_news asks for
        // every connection).
        let n = if shared { self.roster.len() } else { 0 };
        self.roster[..n]
            .iter()
            .enumerate()
            .filter(move |(k, e)| e.version > c.roster_acked.get(*k).copied().unwrap_or(0))
            .map(|(k, _)| k)
    }

    /// Connection `i` acknowledged `seat`'s entry at `version` (a version
    /// it was never sent changes nothing it is owed).
    pub(super) fn roster_acked(&mut self, i: usize, seat: PlayerId, version: u32) {
        let Some(e) = self.roster.get(seat.index()) else {
            return;
        };
        if version != e.version {
            return;
        }
        let c = &mut self.conns[i];
        if c.roster_acked.len() < self.roster.len() {
            c.roster_acked.resize(self.roster.len(), 0);
        }
        c.roster_acked[seat.index()] = version;
    }
}
