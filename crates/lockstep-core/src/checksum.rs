//! State checksum exchange and comparison.
//!
//! Each machine reports a hash of its game state after some ticks; the
//! hashes travel to every peer, and a peer whose hash for the same tick
//! differs has diverged. The first mismatch with each peer is reported once
//! (every later tick will differ too).
//!
//! Delivery is acknowledged: a packet carries the reporter's checksums after
//! the latest one the recipient acknowledged, oldest first, so every
//! checksum reaches every peer despite loss and a divergence is found at the
//! first reported tick where it shows. All storage is capped.

use crate::Tick;
use std::collections::{BTreeMap, VecDeque};

/// Most checksums one packet carries.
pub(crate) const PER_PACKET: usize = 8;

/// A mismatch found while comparing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mismatch {
    pub(crate) tick: Tick,
    pub(crate) local: u64,
    pub(crate) remote: u64,
}

/// One remote's side of the exchange.
#[derive(Debug, Clone, Default)]
pub(crate) struct RemoteChecksums {
    /// The latest of our checksums the remote acknowledged.
    pub(crate) acked: Option<Tick>,
    /// The latest of the remote's checksums we received (what we ack).
    pub(crate) received: Option<Tick>,
    /// Remote checksums for ticks we have not reported yet.
    pending: BTreeMap<Tick, u64>,
    /// Whether a mismatch was already reported for this remote.
    pub(crate) diverged: bool,
    /// The remote's checksums from this tick on describe a stream nobody
    /// else runs (its seat was abandoned there): not compared.
    ignore_from: Option<Tick>,
}

impl RemoteChecksums {
    pub(crate) fn len(&self) -> usize {
        self.pending.len()
    }

    /// Stops comparing checksums for `tick` and later.
    pub(crate) fn ignore_from(&mut self, tick: Tick) {
        self.ignore_from = Some(self.ignore_from.map_or(tick, |t| t.min(tick)));
        self.pending.retain(|t, _| *t < tick);
    }

    fn ignored(&self, tick: Tick) -> bool {
        self.ignore_from.is_some_and(|t| tick >= t)
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Checksums {
    local: VecDeque<(Tick, u64)>,
    cap: usize,
}

impl Checksums {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            local: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.local.len()
    }

    /// The local checksum for `tick`, if held.
    pub(crate) fn get(&self, tick: Tick) -> Option<u64> {
        let i = self.local.binary_search_by_key(&tick, |(t, _)| *t).ok()?;
        Some(self.local[i].1)
    }

    pub(crate) fn latest(&self) -> Option<Tick> {
        self.local.back().map(|(t, _)| *t)
    }

    /// Records a local checksum (ticks strictly ascending, checked by the
    /// caller) and compares it with what `remotes` already sent.
    pub(crate) fn report<'a>(
        &mut self,
        tick: Tick,
        hash: u64,
        remotes: impl Iterator<Item = &'a mut RemoteChecksums>,
        mut mismatch: impl FnMut(usize, Mismatch),
    ) {
        if self.local.len() >= self.cap {
            self.local.pop_front();
        }
        self.local.push_back((tick, hash));
        for (i, r) in remotes.enumerate() {
            // Remote entries older than this tick will never be matched.
            while let Some((&t, &h)) = r.pending.first_key_value() {
                if t > tick {
                    break;
                }
                r.pending.pop_first();
                if t == tick && h != hash && !r.diverged {
                    r.diverged = true;
                    mismatch(
                        i,
                        Mismatch {
                            tick,
                            local: hash,
                            remote: h,
                        },
                    );
                }
            }
        }
    }

    /// Takes a remote's checksums; returns the first new mismatch.
    pub(crate) fn receive(
        &self,
        remote: &mut RemoteChecksums,
        entries: &[(Tick, u64)],
        cap: usize,
    ) -> Option<Mismatch> {
        let mut found = None;
        for &(tick, h) in entries {
            if remote.received.is_some_and(|r| tick <= r) {
                continue;
            }
            remote.received = Some(tick);
            if remote.ignored(tick) {
                continue;
            }
            match self.local.binary_search_by_key(&tick, |(t, _)| *t) {
                Ok(i) => {
                    let local = self.local[i].1;
                    if local != h && !remote.diverged {
                        remote.diverged = true;
                        found.get_or_insert(Mismatch {
                            tick,
                            local,
                            remote: h,
                        });
                    }
                }
                Err(_) if self.latest().is_none_or(|l| tick > l) => {
                    if remote.pending.len() >= cap {
                        remote.pending.pop_first();
                    }
                    remote.pending.insert(tick, h);
                }
                // A tick we passed without reporting: nothing to compare.
                Err(_) => {}
            }
        }
        found
    }

    /// Our checksums the remote has not acknowledged, oldest first.
    pub(crate) fn unacked(
        &self,
        remote: &RemoteChecksums,
    ) -> impl Iterator<Item = (Tick, u64)> + '_ {
        let from = remote.acked;
        self.local
            .iter()
            .copied()
            .filter(move |(t, _)| from.is_none_or(|a| *t > a))
            .take(PER_PACKET)
    }

    /// Forgets local checksums every remote acknowledged.
    pub(crate) fn prune<'a>(&mut self, remotes: impl Iterator<Item = &'a RemoteChecksums>) {
        let mut floor: Option<Option<Tick>> = None;
        for r in remotes {
            floor = Some(match floor {
                None => r.acked,
                Some(f) => f.min(r.acked),
            });
        }
        let Some(Some(floor)) = floor else { return };
        while self.local.front().is_some_and(|(t, _)| *t <= floor) && self.local.len() > 1 {
            self.local.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mismatch_found_whichever_side_reports_first() {
        let mut c = Checksums::new(16);
        let mut r = RemoteChecksums::default();
        // Remote first.
        assert_eq!(c.receive(&mut r, &[(Tick::new(5), 1)], 16), None);
        let mut seen = Vec::new();
        c.report(Tick::new(5), 2, std::iter::once(&mut r), |i, m| {
            seen.push((i, m))
        });
        assert_eq!(
            seen,
            vec![(
                0,
                Mismatch {
                    tick: Tick::new(5),
                    local: 2,
                    remote: 1
                }
            )]
        );
        // Reported once only.
        c.report(Tick::new(6), 3, std::iter::once(&mut r), |_, _| {
            panic!("again")
        });
        assert_eq!(c.receive(&mut r, &[(Tick::new(6), 9)], 16), None);

        // Local first.
        let mut c = Checksums::new(16);
        let mut r = RemoteChecksums::default();
        c.report(Tick::new(5), 2, std::iter::once(&mut r), |_, _| {});
        assert_eq!(
            c.receive(&mut r, &[(Tick::new(5), 7)], 16),
            Some(Mismatch {
                tick: Tick::new(5),
                local: 2,
                remote: 7
            })
        );
    }

    #[test]
    fn storage_is_capped() {
        let mut c = Checksums::new(4);
        let mut r = RemoteChecksums::default();
        for t in 0..100 {
            c.report(Tick::new(t), 0, std::iter::empty(), |_, _| {});
        }
        assert_eq!(c.len(), 4);
        let far: Vec<_> = (1000..1100).map(|t| (Tick::new(t), 0)).collect();
        c.receive(&mut r, &far, 4);
        assert_eq!(r.len(), 4);
    }

    #[test]
    fn unacked_resends_from_the_ack_and_prune_follows_it() {
        let mut c = Checksums::new(64);
        let mut r = RemoteChecksums::default();
        for t in 0..20 {
            c.report(Tick::new(t * 10), t.into(), std::iter::empty(), |_, _| {});
        }
        let first: Vec<_> = c.unacked(&r).map(|(t, _)| t.get()).collect();
        assert_eq!(first, vec![0, 10, 20, 30, 40, 50, 60, 70]);
        r.acked = Some(Tick::new(70));
        let next: Vec<_> = c.unacked(&r).map(|(t, _)| t.get()).collect();
        assert_eq!(next[0], 80);
        c.prune(std::iter::once(&r));
        assert_eq!(c.len(), 12);
    }
}
