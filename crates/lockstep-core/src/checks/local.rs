//! This machine's hash chain and the checkpoints it makes from it.

use super::*;
use crate::error::ChecksumError;

/// This machine's chain and the checkpoints it made from it.
#[derive(Debug, Clone)]
pub(crate) struct LocalChecks {
    pub(super) chain: HashChain,
    /// The first tick reported since the chain (re)started: a block that
    /// began before it may have had reports we never saw.
    pub(super) origin: Option<Tick>,
    /// The session's first tick, while the chain runs from it: every
    /// machine starts there, so its first block is complete too.
    pub(super) start: Option<Tick>,
    /// Checkpoints made, oldest first.
    pub(super) made: VecDeque<Checkpoint>,
    /// The latest full checkpoints made (kept for resending until
    /// delivered, even once newer ones were made).
    pub(super) fulls: VecDeque<Checkpoint>,
    /// `made` and `fulls` together, ascending: what is offered to every
    /// remote, kept rather than rebuilt for each.
    pub(super) kept: Vec<Checkpoint>,
    /// The chain as it was before the last restart: a remote still
    /// searching where it parted from the state replaced is answered from
    /// it.
    pub(super) before: Option<Box<Self>>,
    /// How long what is unacknowledged or unanswered waits before it goes
    /// again (the session's `keepalive_interval`).
    pub(super) resend: Duration,
}

impl LocalChecks {
    /// A chain of `window` ticks, resending every `resend`.
    pub(crate) fn new(window: usize, resend: Duration) -> Self {
        Self {
            resend,
            chain: HashChain::new(window),
            origin: None,
            start: None,
            made: VecDeque::new(),
            fulls: VecDeque::new(),
            kept: Vec::new(),
            before: None,
        }
    }

    /// Whether the game may report its hash after `tick` now, `next` the
    /// next frame it runs: a tick it ran, above the last reported.
    pub(crate) fn may_report(&self, tick: Tick, next: Tick) -> Result<(), ChecksumError> {
        if tick >= next {
            return Err(ChecksumError::NotRun { tick, next });
        }
        if let Some(last) = self.latest().filter(|l| tick <= *l) {
            return Err(ChecksumError::NotAscending { tick, last });
        }
        Ok(())
    }

    /// The last tick reported.
    pub(crate) fn latest(&self) -> Option<Tick> {
        self.chain.last()
    }

    pub(crate) fn len(&self) -> usize {
        self.chain.len()
    }

    /// The latest checkpoint made.
    pub(crate) fn last_made(&self) -> Option<Checkpoint> {
        self.made.back().copied()
    }

    /// Every machine runs the session from `tick`: reports from it on
    /// cover its block, though the block began earlier.
    pub(crate) fn starts_at(&mut self, tick: Tick) {
        self.start = Some(tick);
    }

    /// Whether the chain through `tick` covers its whole block.
    pub(super) fn complete(&self, tick: Tick) -> bool {
        self.origin.is_some_and(|o| {
            o.get() <= block_of(tick) * BLOCK || self.start.is_some_and(|s| o <= s)
        })
    }

    /// The checkpoint value we hold for `tick`, if the chain through it is
    /// held and complete.
    pub(crate) fn value(&self, tick: Tick, full: bool) -> Option<u64> {
        if !self.complete(tick) {
            return None;
        }
        Some(truncate(self.chain.chain(tick)?, full))
    }

    /// Records the hash after `tick`; returns the checkpoint it closed, if
    /// any (the one for the interval of the tick reported before).
    pub(crate) fn report(
        &mut self,
        tick: Tick,
        hash: u64,
    ) -> Result<Option<Checkpoint>, ChainError> {
        let before = self.chain.last();
        self.chain.push(tick, hash)?;
        self.origin.get_or_insert(tick);
        let Some(prev) = before else { return Ok(None) };
        if prev.get() / CHECK_INTERVAL == tick.get() / CHECK_INTERVAL {
            return Ok(None);
        }
        let full = block_of(prev) != block_of(tick);
        let Some(value) = self.value(prev, full) else {
            return Ok(None);
        };
        let cp = Checkpoint {
            tick: prev,
            full,
            value,
            ack: None,
        };
        if self.made.len() >= MADE {
            self.made.pop_front();
        }
        self.made.push_back(cp);
        if full {
            if self.fulls.len() >= FULLS {
                self.fulls.pop_front();
            }
            self.fulls.push_back(cp);
        }
        self.kept = self.fulls.iter().chain(&self.made).copied().collect();
        self.kept.sort_unstable_by_key(|c| c.tick);
        self.kept.dedup();
        Ok(Some(cp))
    }

    /// Starts over: the game's state was replaced, and its chain is
    /// complete again from the next block.
    pub(crate) fn restart(&mut self) {
        self.before = None;
        self.before = Some(Box::new(self.clone()));
        self.chain.clear();
        self.origin = None;
        self.start = None;
        self.made.clear();
        self.fulls.clear();
        self.kept.clear();
    }

    /// Compares a remote's checkpoint with ours; returns the first mismatch
    /// with that remote. Checkpoints for ticks we have not reported yet
    /// wait (a few of them).
    pub(crate) fn receive(&self, remote: &mut RemoteChecks, cp: Checkpoint) -> Option<Mismatch> {
        if remote.ignored(cp.tick) {
            return None;
        }
        if self.latest().is_none_or(|l| cp.tick > l) {
            if remote.pending.len() >= PENDING {
                remote.pending.pop_first();
            }
            remote.pending.insert(cp.tick, cp);
            return None;
        }
        self.compare(remote, cp)
    }

    /// Compares what `remote` sent for ticks up to our latest; returns the
    /// first mismatch.
    pub(crate) fn catch_up(&self, remote: &mut RemoteChecks) -> Option<Mismatch> {
        let latest = self.latest()?;
        let mut found = None;
        while let Some((&t, &cp)) = remote.pending.first_key_value() {
            if t > latest {
                break;
            }
            remote.pending.pop_first();
            if let Some(m) = self.compare(remote, cp) {
                found.get_or_insert(m);
            }
        }
        found
    }

    pub(super) fn compare(&self, remote: &mut RemoteChecks, cp: Checkpoint) -> Option<Mismatch> {
        let local = self.value(cp.tick, cp.full)?;
        remote.compared(cp, local);
        if local == cp.value {
            match remote.mismatch {
                None => remote.agreed = remote.agreed.max(Some(cp.tick)),
                // A whole block after the one that differed agrees: the
                // remote's state was replaced by one equal to ours (or ours
                // by one equal to its). Compared afresh from that block on;
                // its older checkpoints, late, are not.
                Some(m) if cp.full && block_of(cp.tick) > block_of(m.tick) => {
                    let from = Tick::new(block_of(cp.tick) * BLOCK);
                    remote.mismatch = None;
                    remote.agreed = Some(cp.tick);
                    remote.healed_from = Some(from);
                    remote.recent.retain(|c| c.tick >= from);
                    remote.healed += 1;
                }
                Some(_) => {}
            }
            return None;
        }
        if remote.mismatch.is_some() {
            return None;
        }
        let m = Mismatch {
            tick: cp.tick,
            local,
            remote: cp.value,
            agreed: remote.agreed.filter(|a| *a < cp.tick),
        };
        remote.mismatch = Some(m);
        Some(m)
    }
}
