//! The roster the sequencer shares (host mode): each seat's latest
//! entry, acknowledged.

use super::*;

impl<I: Input> ClientSession<I> {
    /// A roster entry: kept if newer than the one held, acknowledged
    /// either way (a repeat means our acknowledgement was lost).
    pub(super) fn take_member(&mut self, m: &wire::Member<'_>) {
        let newer = self.roster.get(&m.seat).is_none_or(|(v, _)| m.version > *v);
        if newer {
            let info = m.holder.map(|h| SeatInfo {
                seat: m.seat,
                playing: h.playing,
                hosts: h.hosts,
                commitment: h.commitment,
                contact: h.contact.to_vec(),
                name: h.name.to_owned(),
                ready: h.ready,
            });
            self.roster.insert(m.seat, (m.version, info));
            self.roster_changes += 1;
        }
        if !self.member_acks.contains(&(m.seat, m.version)) {
            if self.member_acks.len() >= MEMBER_ACKS {
                self.member_acks.pop_front();
            }
            self.member_acks.push_back((m.seat, m.version));
        }
        self.link.flush = true;
    }

    /// The room's roster, as the sequencer shared it: every seat held, in
    /// seat order, with its player's name and whether it is ready (and,
    /// in a room that shares them, as a host-mode room does, contacts).
    /// A spectator of a room that shares contacts is sent none.
    pub fn roster(&self) -> impl Iterator<Item = &SeatInfo> + '_ {
        self.roster.values().filter_map(|(_, s)| s.as_ref())
    }

    /// Every roster entry received, the empty seats included (`None`).
    pub(crate) fn roster_entries(
        &self,
    ) -> impl Iterator<Item = (PlayerId, Option<&SeatInfo>)> + '_ {
        self.roster.iter().map(|(k, (_, s))| (*k, s.as_ref()))
    }

    /// Changes to the roster so far: a new value says look again.
    pub(crate) fn roster_changes(&self) -> u64 {
        self.roster_changes
    }
}
