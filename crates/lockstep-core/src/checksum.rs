//! Checkpoints: catching a divergence between machines cheaply.
//!
//! Each machine reports the hash of its game state after the ticks it runs
//! (every tick, or the same subset on every machine) into a
//! [`HashChain`]. Once per [`CHECK_INTERVAL`] it sends a checkpoint: the
//! chain through the last tick it reported in the interval, 16 bits of it,
//! or all 64 when the checkpoint closes a [`BLOCK`]. The chain folds in
//! every hash since the block began, so a checkpoint that arrives catches
//! any divergence since, even one the states recovered from. A short
//! checkpoint is sent once (the next one covers it); the full ones of the
//! last four blocks are acknowledged and resent until they are, since only
//! they cover the end of a block.
//!
//! The first mismatch with each remote is reported once (every later
//! checkpoint in the block will differ too), with the last checkpoint both
//! agreed on: the search for the first divergent tick starts after it.

use crate::desync::{
    BLOCK, CHECK_INTERVAL, ChainError, FirstDifference, HashChain, Search, Step, block_of,
};
use crate::rate::TokenBucket;
use crate::wire::{Checkpoint, DatagramWriter, MAX_CHAIN_QUESTIONS, Message};
use crate::{Instant, PeerId, PlayerId, Tick};
use core::time::Duration;
use std::collections::{BTreeMap, VecDeque};

/// Checkpoints of the remote's kept for ticks we have not reported yet.
const PENDING: usize = 32;
/// Checkpoints made and kept for sending.
const MADE: usize = 4;
/// Checkpoints (and acknowledgements) one datagram carries at most, and a
/// reader takes.
const PER_DATAGRAM: usize = 4;
/// A remote's checkpoints kept once compared with ours (two blocks'
/// worth): which of the differing states a majority holds.
const RECENT: usize = 2 * (BLOCK / CHECK_INTERVAL) as usize;

/// The checkpoint value for the chain `chain` through `tick`: the whole
/// chain when `full`, else its low 16 bits.
pub(crate) fn truncate(chain: u64, full: bool) -> u64 {
    if full { chain } else { chain & 0xFFFF }
}

/// One answered tick: the tick, the chain through it, the state hash
/// after it.
pub(crate) type Link = (Tick, u64, u64);
/// An answer: the question's id and the ticks answered.
pub(crate) type Answer = (u32, Vec<Link>);

/// A mismatch found while comparing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mismatch {
    /// The checkpoint's tick.
    pub(crate) tick: Tick,
    /// Our checkpoint value.
    pub(crate) local: u64,
    /// Theirs.
    pub(crate) remote: u64,
    /// The last checkpoint both agreed on before it, in the same run of
    /// comparisons.
    pub(crate) agreed: Option<Tick>,
}

/// This machine's chain and the checkpoints it made from it.
#[derive(Debug, Clone)]
pub(crate) struct LocalChecks {
    chain: HashChain,
    /// The first tick reported since the chain (re)started: a block that
    /// began before it may have had reports we never saw.
    origin: Option<Tick>,
    /// The session's first tick, while the chain runs from it: every
    /// machine starts there, so its first block is complete too.
    start: Option<Tick>,
    /// Checkpoints made, oldest first.
    made: VecDeque<Checkpoint>,
    /// The latest full checkpoints made (kept for resending until
    /// delivered, even once newer ones were made).
    fulls: VecDeque<Checkpoint>,
    /// `made` and `fulls` together, ascending: what is offered to every
    /// remote, kept rather than rebuilt for each.
    kept: Vec<Checkpoint>,
    /// The chain as it was before the last restart: a remote still
    /// searching where it parted from the state replaced is answered from
    /// it.
    before: Option<Box<Self>>,
}

impl LocalChecks {
    pub(crate) fn new(window: usize) -> Self {
        Self {
            chain: HashChain::new(window),
            origin: None,
            start: None,
            made: VecDeque::new(),
            fulls: VecDeque::new(),
            kept: Vec::new(),
            before: None,
        }
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
    fn complete(&self, tick: Tick) -> bool {
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

    fn compare(&self, remote: &mut RemoteChecks, cp: Checkpoint) -> Option<Mismatch> {
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

/// How long a question waits for its answer before it is asked again.
pub(crate) const ASK_AGAIN: Duration = Duration::from_millis(250);
/// How many times a round's question is asked before the search gives up
/// (ten seconds: a question and its answer may cross four lossy links).
const TRIES: u8 = 40;
/// The most rounds a search asks (a window of 512 ticks needs 4).
const ROUNDS: u8 = 12;
/// Answers given to one remote per second (a burst of as many).
pub(crate) const ANSWERS_PER_SEC: u32 = 8;

/// The search for the first divergent tick with one remote, after a
/// mismatch: rounds of [`ChainQuery`](crate::wire::Message::ChainQuery),
/// each narrowing the range between the last agreed checkpoint and the one
/// that differed.
#[derive(Debug, Clone)]
pub(crate) struct Bisect {
    search: Search,
    /// The checkpoint that differed.
    pub(crate) checkpoint: Tick,
    id: u32,
    asked: Vec<Tick>,
    due: Instant,
    tries: u8,
    /// Their state hashes from the answers so far (a few per round).
    theirs: Vec<(Tick, u64)>,
    /// Our chain as it was when the checkpoint differed: the state may be
    /// replaced (resynced) before the search ends.
    ours: HashChain,
    /// The short checkpoint agreed on, asked again in full: 16 bits agree
    /// by chance once in 65,536, and the search must not start after a
    /// tick that differs.
    verify: Option<Tick>,
    /// Rounds asked so far.
    rounds: u8,
}

/// How a search round ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Located {
    /// The first divergent tick, or `None` when it cannot be told (the
    /// ticks needed are no longer held on one side, or it stopped
    /// answering).
    Done(Option<FirstDifference>),
    /// Still searching.
    Searching,
}

impl Bisect {
    /// Starts searching from the mismatch `m`; `id` tells this search's
    /// answers from a stale one's.
    pub(crate) fn start(m: &Mismatch, local: &LocalChecks, id: u32, now: Instant) -> Self {
        let mut verify = None;
        // From the checkpoint agreed on: within the block when it is in the
        // same one, else from there (a lost full checkpoint may have hidden
        // the block where the states parted).
        let search = match m.agreed {
            Some(a) if block_of(a) == block_of(m.tick) => {
                verify = Some(a);
                Search::within_block(a.saturating_add(1), m.tick)
            }
            Some(a) => Search::new(a.saturating_add(1), m.tick),
            None => Search::new(local.chain.oldest().unwrap_or(m.tick), m.tick),
        };
        let mut b = Self {
            search,
            checkpoint: m.tick,
            id,
            asked: Vec::new(),
            due: now,
            tries: 0,
            theirs: Vec::new(),
            ours: local.chain.clone(),
            verify,
            rounds: 0,
        };
        b.next_round();
        b
    }

    /// This round's questions: the search's, and the end of the range
    /// while its hash is not known (the first divergent tick may be it).
    fn next_round(&mut self) {
        let room = MAX_CHAIN_QUESTIONS - 1 - usize::from(self.verify.is_some());
        let mut asked = self.search.questions(&self.ours, room);
        let (_, hi) = self.search.range();
        if !self.theirs.iter().any(|(t, _)| *t == hi) {
            asked.push(hi);
        }
        asked.extend(self.verify);
        asked.sort_unstable();
        asked.dedup();
        self.asked = asked;
        self.rounds += 1;
    }

    /// The question to send now, if one is due: `(id, ticks)`.
    pub(crate) fn question(&mut self, now: Instant) -> Option<(u32, Vec<Tick>)> {
        if now < self.due || self.tries >= TRIES {
            return None;
        }
        self.tries += 1;
        self.due = now + ASK_AGAIN;
        Some((self.id, self.asked.clone()))
    }

    /// When the next question is due or, once every try is spent, when
    /// the search gives up.
    pub(crate) fn due(&self) -> Instant {
        self.due
    }

    /// Whether the remote stopped answering.
    pub(crate) fn gave_up(&self, now: Instant) -> bool {
        self.tries >= TRIES && now >= self.due
    }

    /// Takes an answer; answers to another search or round are ignored.
    pub(crate) fn answer(
        &mut self,
        id: u32,
        entries: &[(Tick, u64, u64)],
        now: Instant,
    ) -> Located {
        if id != self.id {
            return Located::Searching;
        }
        let answers: Vec<(Tick, Option<u64>)> = self
            .asked
            .iter()
            .map(|&t| {
                let theirs = entries.iter().find(|e| e.0 == t);
                if let Some(e) = theirs
                    && self.theirs.len() < 4 * MAX_CHAIN_QUESTIONS
                {
                    self.theirs.push((t, e.2));
                }
                (t, theirs.map(|e| e.1))
            })
            .collect();
        // The agreed checkpoint, in full: if it differs after all, the
        // search covers its whole block.
        if let Some(a) = self.verify.take() {
            let theirs = answers.iter().find(|(t, _)| *t == a).and_then(|(_, c)| *c);
            if theirs.is_some_and(|c| self.ours.chain(a) != Some(c)) {
                let (_, hi) = self.search.range();
                self.search = Search::within_block(Tick::ZERO, hi);
                return self.again(now);
            }
        }
        if self.rounds >= ROUNDS {
            return Located::Done(None);
        }
        let step = self.search.answer(&self.ours, &answers);
        let found = match step {
            Step::Found(tick) => Some(tick),
            Step::Ask => None,
            Step::Agree | Step::Unknown => return Located::Done(None),
        };
        let (_, hi) = self.search.range();
        let remote = self.theirs.iter().find(|(t, _)| *t == hi).map(|e| e.1);
        match (found, remote) {
            (Some(tick), Some(remote)) => {
                Located::Done(self.ours.hash(tick).map(|local| FirstDifference {
                    tick,
                    local,
                    remote,
                }))
            }
            // Found, but its hash is still to be asked: one more round.
            _ => self.again(now),
        }
    }

    /// Another round, asked at once.
    fn again(&mut self, now: Instant) -> Located {
        self.id = self.id.wrapping_add(1);
        self.next_round();
        self.due = now;
        self.tries = 0;
        Located::Searching
    }
}

/// Answers a [`ChainQuery`](crate::wire::Message::ChainQuery) from what we
/// hold: the ticks asked about whose block is complete here.
pub(crate) fn answer_query(local: &LocalChecks, ticks: &[Tick]) -> Vec<(Tick, u64, u64)> {
    let from = |l: &LocalChecks, t: Tick| Some((t, l.value(t, true)?, l.chain.hash(t)?));
    ticks
        .iter()
        .take(MAX_CHAIN_QUESTIONS)
        .filter_map(|&t| {
            from(local, t).or_else(|| local.before.as_deref().and_then(|b| from(b, t)))
        })
        .collect()
}

/// How long an unacknowledged checkpoint waits before it is sent again.
const RESEND: Duration = Duration::from_millis(250);

/// Full checkpoints kept until acknowledged (four blocks' worth).
const FULLS: usize = 4;

/// Checkpoints on their way to one remote, and our acknowledgements of
/// its. Each checkpoint is sent once: a lost one costs the wait for the
/// next, which covers it (the chain folds in every tick of the block so
/// far). Only the full one closing a block covers the block's end, so the
/// full ones of the last [`FULLS`] blocks are acknowledged, each on its
/// own, and sent again every [`RESEND`] until they are.
#[derive(Debug, Clone, Default)]
pub(crate) struct Delivery {
    /// The newest checkpoint sent.
    sent: Option<Tick>,
    /// The full ones it acknowledged, newest last.
    acked_fulls: VecDeque<Tick>,
    /// When full ones were last sent again.
    fulls_at: Option<Instant>,
    /// Its full ones received and not acknowledged yet.
    full_acks_owed: Vec<Tick>,
}

impl Delivery {
    /// Its checkpoint arrived: a full one is acknowledged in the next
    /// datagram.
    fn took(&mut self, cp: Checkpoint) {
        if cp.full && !self.full_acks_owed.contains(&cp.tick) && self.full_acks_owed.len() < FULLS {
            self.full_acks_owed.push(cp.tick);
        }
    }

    /// Its acknowledgement of `tick`, one of `kept`.
    fn acked(&mut self, tick: Tick, kept: &[Checkpoint]) {
        if kept.iter().any(|c| c.tick == tick && c.full) && !self.acked_fulls.contains(&tick) {
            if self.acked_fulls.len() >= FULLS {
                self.acked_fulls.pop_front();
            }
            self.acked_fulls.push_back(tick);
        }
    }

    /// Whether `c` is to be sent now: never sent, or, when a resend is
    /// due, a full one still unacknowledged.
    fn is_due(&self, c: &Checkpoint, now: Instant) -> bool {
        let sent = self.sent.is_some_and(|s| c.tick <= s);
        let resend = self.fulls_at.is_none_or(|t| now >= t + RESEND);
        !sent || (resend && c.full && !self.acked_fulls.contains(&c.tick))
    }

    fn has_news(&self, kept: &[Checkpoint], now: Instant) -> bool {
        !self.full_acks_owed.is_empty() || kept.iter().any(|c| self.is_due(c, now))
    }

    /// Writes what is due of `kept`, an acknowledgement riding on each
    /// checkpoint (the rest alone).
    fn write(&mut self, kept: &[Checkpoint], w: &mut DatagramWriter<'_>, now: Instant) {
        let mut due: Vec<Checkpoint> = kept
            .iter()
            .filter(|c| self.is_due(c, now))
            .copied()
            .collect();
        // A reader takes 4 a datagram: the newest (an older full one waits
        // for the next resend).
        if due.len() > PER_DATAGRAM {
            due.drain(..due.len() - PER_DATAGRAM);
        }
        let resent = due.iter().any(|c| self.sent.is_some_and(|s| c.tick <= s));
        for mut cp in due {
            cp.ack = self.full_acks_owed.first().copied();
            if w.push(&Message::Checkpoint(cp)).is_ok() {
                if cp.ack.is_some() {
                    self.full_acks_owed.remove(0);
                }
                self.sent = self.sent.max(Some(cp.tick));
            }
        }
        if resent || self.fulls_at.is_none() {
            self.fulls_at = Some(now);
        }
        while let Some(&tick) = self.full_acks_owed.first() {
            if w.push(&Message::CheckpointAck { tick }).is_err() {
                break;
            }
            self.full_acks_owed.remove(0);
        }
    }
}

/// One remote's side of the exchange.
#[derive(Debug, Clone, Default)]
pub(crate) struct RemoteChecks {
    /// Its checkpoints for ticks we have not reported yet.
    pending: BTreeMap<Tick, Checkpoint>,
    /// The last checkpoint we agreed on.
    pub(crate) agreed: Option<Tick>,
    /// The first mismatch, once found.
    pub(crate) mismatch: Option<Mismatch>,
    /// Its checkpoints from this tick on describe a stream nobody else runs
    /// (its seat was abandoned there): not compared.
    ignore_from: Option<Tick>,
    /// Where its state agreed with ours again after a mismatch: its
    /// checkpoints before it are not compared.
    healed_from: Option<Tick>,
    /// How many times a mismatch with it ended so.
    pub(crate) healed: u32,
    /// Its latest checkpoints compared with ours, oldest first.
    recent: VecDeque<Compared>,
    /// Our checkpoints on the way to it, and our acknowledgements of its.
    delivery: Delivery,
    /// Our search for where we parted, after a mismatch.
    pub(crate) bisect: Option<Bisect>,
    /// Its latest question to us, to answer in the next datagram.
    pub(crate) owed: Option<Answer>,
    /// Answers it may still get (`None` until it first asks).
    answers: Option<TokenBucket>,
    /// The id of our next search.
    next_id: u32,
}

/// One of a remote's checkpoints, compared with ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Compared {
    pub(crate) tick: Tick,
    /// Whether it was sent as a block's full checkpoint.
    pub(crate) full: bool,
    /// Its value (all 64 bits when full).
    pub(crate) value: u64,
    /// Whether ours differed.
    pub(crate) differs: bool,
}

/// What came of a remote's checkpoints and answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A checkpoint differed (the search for the first divergent tick has
    /// begun).
    Mismatch(Mismatch),
    /// The search ended.
    Located {
        checkpoint: Tick,
        first: Option<FirstDifference>,
    },
    /// A mismatch ended: a later block's full checkpoint agrees (its state,
    /// or ours, was replaced), compared afresh from this tick on.
    Agreed { from: Tick },
}

/// The checks messages of one datagram.
#[derive(Debug, Default)]
pub(crate) struct Incoming<'a> {
    pub(crate) checkpoints: Vec<Checkpoint>,
    pub(crate) query: Option<(u32, &'a [Tick])>,
    pub(crate) answer: Option<(u32, &'a [Link])>,
    /// Our checkpoints acknowledged (a few).
    pub(crate) acks: Vec<Tick>,
}

impl<'a> Incoming<'a> {
    fn ack(&mut self, tick: Option<Tick>) {
        if let Some(t) = tick
            && self.acks.len() < PER_DATAGRAM
        {
            self.acks.push(t);
        }
    }

    /// Takes `m` if it is a checks message; returns whether it was.
    pub(crate) fn take(&mut self, m: &'a Message<'a>) -> bool {
        match m {
            // A few per datagram: more is noise (or an attack).
            Message::Checkpoint(c) => {
                if self.checkpoints.len() < PER_DATAGRAM {
                    // The acknowledgement rides along; it is no part of
                    // the checkpoint compared.
                    self.checkpoints.push(Checkpoint { ack: None, ..*c });
                }
                self.ack(c.ack);
            }
            Message::CheckpointAck { tick } => self.ack(Some(*tick)),
            Message::ChainQuery { id, ticks } => self.query = Some((*id, ticks)),
            Message::ChainAnswer { id, entries } => self.answer = Some((*id, entries)),
            _ => return false,
        }
        true
    }
}

impl RemoteChecks {
    pub(crate) fn len(&self) -> usize {
        self.pending.len()
    }

    /// Stops comparing checkpoints for `tick` and later.
    pub(crate) fn ignore_from(&mut self, tick: Tick) {
        self.ignore_from = Some(self.ignore_from.map_or(tick, |t| t.min(tick)));
        self.pending.retain(|t, _| *t < tick);
        self.recent.retain(|c| c.tick < tick);
    }

    /// Notes a checkpoint of its compared with ours (`local`), once.
    fn compared(&mut self, cp: Checkpoint, local: u64) {
        if self.recent.iter().any(|c| c.tick == cp.tick) {
            return;
        }
        if self.recent.len() >= RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(Compared {
            tick: cp.tick,
            full: cp.full,
            value: cp.value,
            differs: cp.value != local,
        });
    }

    /// Its latest checkpoints compared with ours (two blocks' worth).
    pub(crate) fn recent(&self) -> impl Iterator<Item = &Compared> + '_ {
        self.recent.iter()
    }

    /// Whether it sent `c` lately (the same tick, width and value), and it
    /// differed from ours: a short value passed off as a full one never
    /// counts with the short ones it copies.
    pub(crate) fn sent(&self, c: &Compared) -> bool {
        self.recent
            .iter()
            .any(|e| e.tick == c.tick && e.full == c.full && e.value == c.value && e.differs)
    }

    fn ignored(&self, tick: Tick) -> bool {
        self.ignore_from.is_some_and(|t| tick >= t) || self.healed_from.is_some_and(|t| tick < t)
    }

    /// Starts comparing afresh: our state was replaced. A search under way
    /// goes on (it holds the chain it needs).
    pub(crate) fn restart(&mut self) {
        self.pending.clear();
        self.recent.clear();
        self.agreed = None;
        self.mismatch = None;
        self.healed_from = None;
    }

    /// Takes what one of its datagrams carried: its checkpoints are
    /// compared with ours, its question answered, its answer taken.
    pub(crate) fn receive(
        &mut self,
        local: &LocalChecks,
        msgs: &Incoming<'_>,
        now: Instant,
    ) -> Vec<Outcome> {
        let mut out = Vec::new();
        for &cp in &msgs.checkpoints {
            self.delivery.took(cp);
            let healed = self.healed;
            if let Some(m) = local.receive(self, cp) {
                out.push(self.mismatched(local, m, now));
            }
            out.extend(self.agreed_again(healed));
        }
        for &t in &msgs.acks {
            self.delivery.acked(t, &local.kept);
        }
        if let Some((id, ticks)) = msgs.query {
            self.asked(local, id, ticks, now);
        }
        if let (Some((id, entries)), Some(b)) = (msgs.answer, self.bisect.as_mut()) {
            let checkpoint = b.checkpoint;
            if let Located::Done(first) = b.answer(id, entries, now) {
                self.bisect = None;
                out.push(Outcome::Located { checkpoint, first });
            }
        }
        out
    }

    /// Compares what it sent for ticks we have now reported.
    pub(crate) fn catch_up(&mut self, local: &LocalChecks, now: Instant) -> Vec<Outcome> {
        let healed = self.healed;
        let m = local.catch_up(self);
        let mut out: Vec<Outcome> = self.agreed_again(healed).into_iter().collect();
        if let Some(m) = m {
            out.push(self.mismatched(local, m, now));
        }
        out
    }

    /// The mismatch that ended since `healed` was read, if one did.
    fn agreed_again(&self, healed: u32) -> Option<Outcome> {
        let from = self.healed_from.filter(|_| self.healed != healed)?;
        Some(Outcome::Agreed { from })
    }

    fn mismatched(&mut self, local: &LocalChecks, m: Mismatch, now: Instant) -> Outcome {
        // Each round of a search takes the next id: searches never share one.
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(u32::from(ROUNDS) + 2);
        self.bisect = Some(Bisect::start(&m, local, id, now));
        Outcome::Mismatch(m)
    }

    /// Ends a search whose remote stopped answering.
    pub(crate) fn progress(&mut self, now: Instant) -> Option<Outcome> {
        let b = self.bisect.as_ref().filter(|b| b.gave_up(now))?;
        let checkpoint = b.checkpoint;
        self.bisect = None;
        Some(Outcome::Located {
            checkpoint,
            first: None,
        })
    }

    /// Whether something for it is due: a checkpoint not sent, an answer,
    /// a question.
    pub(crate) fn has_news(&self, local: &LocalChecks, now: Instant) -> bool {
        self.owed.is_some()
            || self.delivery.has_news(&local.kept, now)
            || self.question_due().is_some_and(|d| d <= now)
    }

    /// Whether something for it cannot wait for the next datagram: an
    /// answer to its question, or our question due (a search is a few
    /// round trips; checkpoints and acknowledgements ride along with
    /// whatever goes next).
    pub(crate) fn urgent(&self, now: Instant) -> bool {
        self.owed.is_some() || self.question_due().is_some_and(|d| d <= now)
    }

    /// When the search next asks or gives up.
    pub(crate) fn question_due(&self) -> Option<Instant> {
        self.bisect.as_ref().map(Bisect::due)
    }

    /// Writes our checkpoints it has not had, the answer owed and the
    /// question due.
    pub(crate) fn write(&mut self, local: &LocalChecks, w: &mut DatagramWriter<'_>, now: Instant) {
        self.delivery.write(&local.kept, w, now);
        if let Some((id, entries)) = self.owed.take() {
            w.put(Message::ChainAnswer { id, entries });
        }
        if let Some((id, ticks)) = self.bisect.as_mut().and_then(|b| b.question(now)) {
            w.put(Message::ChainQuery { id, ticks });
        }
    }

    /// Takes its question, answered in the next datagram if it has not
    /// asked too often.
    fn asked(&mut self, local: &LocalChecks, id: u32, ticks: &[Tick], now: Instant) {
        let bucket = self
            .answers
            .get_or_insert_with(|| TokenBucket::full(ANSWERS_PER_SEC, now));
        if bucket.take(1, now) {
            self.owed = Some((id, answer_query(local, ticks)));
        }
    }
}

/// Verdicts the sequencer keeps and sends.
const VERDICTS: usize = 8;
/// Routes of forwarded questions the sequencer keeps.
const ROUTES: usize = 64;

/// A checkpoint the sequencer holds as the reference: a strict majority of
/// the seated players sent it, or its own simulation made it.
#[derive(Debug, Clone)]
struct Verdict {
    cp: Checkpoint,
    /// Who sent it (none for the simulation's): asked when a client that
    /// differs searches for its first divergent tick.
    voters: Vec<PeerId>,
}

/// A question forwarded from one client to another, for the answer's way
/// back.
#[derive(Debug, Clone)]
struct Route {
    id: u32,
    asker: PeerId,
    asker_id: u32,
    /// Asked: two clients when there are two, so no one of them decides
    /// the answer alone.
    to: Vec<PeerId>,
    ticks: Vec<Tick>,
    /// The first answer, while the other is awaited.
    first: Option<(PeerId, Vec<Link>)>,
}

/// What the sequencer concluded from a client's checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdicted {
    /// `peer`'s checkpoint differs from the verdict.
    Desync {
        verdict: Checkpoint,
        peer: PeerId,
        got: u64,
    },
    /// Every seated player sent one and no value has a majority.
    Split { tick: Tick, hashes: usize },
}

/// Where a client's question goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Routed {
    /// To these clients (one or two), with this id.
    Forward { to: Vec<PeerId>, id: u32 },
    /// Answered at once from the sequencer's own simulation.
    Answer(Vec<(Tick, u64, u64)>),
    /// Nobody can answer.
    Nowhere,
}

/// The sequencer's side of the checks: votes, verdicts, its own
/// simulation's chain when it has one (then the authority), and questions
/// passed between clients.
#[derive(Debug, Clone, Default)]
pub(crate) struct Referee {
    verdicts: VecDeque<Verdict>,
    votes: BTreeMap<Tick, Vec<(PlayerId, PeerId, Checkpoint)>>,
    sim: Option<LocalChecks>,
    routes: VecDeque<Route>,
    next_route: u32,
    window: usize,
    /// The verdicts' checkpoints, ascending: what every client is sent.
    kept: Vec<Checkpoint>,
}

impl Referee {
    pub(crate) fn new(window: usize, simulated: bool) -> Self {
        Self {
            sim: simulated.then(|| LocalChecks::new(window)),
            window: window.max(1),
            ..Self::default()
        }
    }

    fn verdict(&self, tick: Tick) -> Option<&Verdict> {
        self.verdicts.iter().find(|v| v.cp.tick == tick)
    }

    fn settle(&mut self, cp: Checkpoint, voters: Vec<PeerId>) {
        let at = self.verdicts.partition_point(|v| v.cp.tick < cp.tick);
        self.verdicts.insert(at, Verdict { cp, voters });
        // The oldest short verdicts go first: the full ones are resent
        // until delivered.
        while self.verdicts.len() > VERDICTS {
            let fulls = self.verdicts.iter().filter(|v| v.cp.full).count();
            let drop = self
                .verdicts
                .iter()
                .position(|v| !v.cp.full || fulls > FULLS)
                .unwrap_or(0);
            self.verdicts.remove(drop);
        }
        self.kept = self.verdicts.iter().map(|v| v.cp).collect();
    }

    /// The server's own game's hash after `tick`: its checkpoints are the
    /// references.
    pub(crate) fn simulated(&mut self, tick: Tick, hash: u64) {
        let Some(sim) = self.sim.as_mut() else { return };
        if let Ok(Some(cp)) = sim.report(tick, hash) {
            self.settle(cp, Vec::new());
        }
    }

    /// Takes a client's checkpoint. Only seated players vote: a spectator's
    /// state counts for nobody but itself, but it is still judged against
    /// a reference. No single player can plant a reference.
    pub(crate) fn vote(
        &mut self,
        seat: Option<PlayerId>,
        peer: PeerId,
        cp: Checkpoint,
        seated: usize,
    ) -> Vec<Verdicted> {
        let differs = |expected: Checkpoint| {
            (expected.full == cp.full && expected.value != cp.value).then_some(Verdicted::Desync {
                verdict: Checkpoint {
                    ack: None,
                    ..expected
                },
                peer,
                got: cp.value,
            })
        };
        if let Some(sim) = &self.sim {
            // The server's own game is the authority.
            let expected = sim
                .value(cp.tick, cp.full)
                .map(|value| Checkpoint { value, ..cp });
            return expected.and_then(differs).into_iter().collect();
        }
        if let Some(v) = self.verdict(cp.tick) {
            return differs(v.cp).into_iter().collect();
        }
        let Some(seat) = seat else { return Vec::new() };
        // A newer verdict covers the older checkpoints of its block; a full
        // one, closing an older block, still gets its own.
        if !cp.full && self.verdicts.back().is_some_and(|v| cp.tick <= v.cp.tick) {
            return Vec::new();
        }
        let list = self.votes.entry(cp.tick).or_default();
        if list.iter().any(|(s, ..)| *s == seat) {
            return Vec::new();
        }
        list.push((seat, peer, cp));
        let agree = list.iter().filter(|(.., c)| *c == cp).count();
        let mut out = Vec::new();
        if agree * 2 > seated {
            let list = self.votes.remove(&cp.tick).unwrap_or_default();
            let voters = list
                .iter()
                .filter(|(.., c)| *c == cp)
                .map(|(_, p, _)| *p)
                .collect();
            for (_, p, c) in list.iter().filter(|(.., c)| *c != cp) {
                out.push(Verdicted::Desync {
                    verdict: cp,
                    peer: *p,
                    got: c.value,
                });
            }
            self.settle(cp, voters);
            // Older ticks can no longer get a verdict, but for full ones:
            // the newer one covers them.
            self.votes
                .retain(|t, list| *t > cp.tick || list.first().is_some_and(|(.., c)| c.full));
        } else if list.len() >= seated {
            let hashes = list.len();
            self.votes.remove(&cp.tick);
            out.push(Verdicted::Split {
                tick: cp.tick,
                hashes,
            });
        }
        while self.votes.len() > self.window {
            self.votes.pop_first();
        }
        out
    }

    /// Forgets `peer`'s votes: its state is being replaced, and what it
    /// said of the old one must not count against the new.
    pub(crate) fn forget(&mut self, peer: PeerId) {
        for list in self.votes.values_mut() {
            list.retain(|(_, p, _)| *p != peer);
        }
        self.votes.retain(|_, list| !list.is_empty());
    }

    /// Who sent the verdicts held (the simulation's have none).
    pub(crate) fn voters(&self) -> Vec<PeerId> {
        let mut v: Vec<PeerId> = self
            .verdicts
            .iter()
            .flat_map(|v| v.voters.iter().copied())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Routes `asker`'s question: answered from the simulation, or passed to
    /// a client that sent the latest verdict (`live` says who is still
    /// connected).
    pub(crate) fn route(
        &mut self,
        asker: PeerId,
        asker_id: u32,
        ticks: &[Tick],
        live: impl Fn(PeerId) -> bool,
    ) -> Routed {
        if let Some(sim) = &self.sim {
            return Routed::Answer(answer_query(sim, ticks));
        }
        // The same question again (an answer was lost): to whoever has not
        // answered it yet, under the same route.
        if let Some(r) = self
            .routes
            .iter()
            .find(|r| r.asker == asker && r.asker_id == asker_id && r.ticks == ticks)
        {
            let answered = r.first.as_ref().map(|(p, _)| *p);
            let to: Vec<PeerId> =
                r.to.iter()
                    .copied()
                    .filter(|p| Some(*p) != answered)
                    .collect();
            return Routed::Forward { to, id: r.id };
        }
        // Two voters of the latest verdict, in turn: an answer passes on
        // only as far as they agree.
        let voters: Vec<PeerId> = self
            .verdicts
            .back()
            .map(|v| {
                v.voters
                    .iter()
                    .copied()
                    .filter(|p| *p != asker && live(*p))
                    .collect()
            })
            .unwrap_or_default();
        if voters.is_empty() {
            return Routed::Nowhere;
        }
        let start = self.next_route as usize % voters.len();
        let to: Vec<PeerId> = (0..voters.len().min(2))
            .map(|k| voters[(start + k) % voters.len()])
            .collect();
        let id = self.next_route;
        self.next_route = self.next_route.wrapping_add(1);
        if self.routes.len() >= ROUTES {
            self.routes.pop_front();
        }
        self.routes.push_back(Route {
            id,
            asker,
            asker_id,
            to: to.clone(),
            ticks: ticks.iter().copied().take(MAX_CHAIN_QUESTIONS).collect(),
            first: None,
        });
        Routed::Forward { to, id }
    }

    /// An answer from `from` to a forwarded question: once every client
    /// asked has answered, for whom, with which id, and the entries for
    /// ticks that were asked on which the answers agree (a tick they differ
    /// on is left out: the asker cannot tell, rather than be misled).
    pub(crate) fn answered(
        &mut self,
        from: PeerId,
        id: u32,
        entries: &[Link],
    ) -> Option<(PeerId, Answer)> {
        let i = self
            .routes
            .iter()
            .position(|r| r.id == id && r.to.contains(&from))?;
        let route = &mut self.routes[i];
        let entries: Vec<Link> = entries
            .iter()
            .filter(|e| route.ticks.contains(&e.0))
            .copied()
            .collect();
        let agreed = match route.first.take() {
            _ if route.to.len() < 2 => entries,
            None => {
                route.first = Some((from, entries));
                return None;
            }
            Some((first, earlier)) if first == from => {
                route.first = Some((first, earlier));
                return None;
            }
            Some((_, earlier)) => entries
                .into_iter()
                .filter(|e| earlier.contains(e))
                .collect(),
        };
        let route = self.routes.remove(i)?;
        Some((route.asker, (route.asker_id, agreed)))
    }
}

/// The sequencer's side of one client.
#[derive(Debug, Clone, Default)]
pub(crate) struct Relayed {
    /// Verdicts on the way to it, and our acknowledgements of its
    /// checkpoints.
    delivery: Delivery,
    /// A question passed on to it.
    pub(crate) query: Option<(u32, Vec<Tick>)>,
    /// An answer passed back to it.
    pub(crate) answer: Option<Answer>,
    /// Questions it may still ask (`None` until it first does).
    asks: Option<TokenBucket>,
}

impl Relayed {
    /// Whether it may ask another question now.
    pub(crate) fn may_ask(&mut self, now: Instant) -> bool {
        self.asks
            .get_or_insert_with(|| TokenBucket::full(ANSWERS_PER_SEC, now))
            .take(1, now)
    }

    /// Its checkpoint arrived, or its acknowledgement of a verdict.
    pub(crate) fn took(&mut self, msgs: &Incoming<'_>, referee: &Referee) {
        for &cp in &msgs.checkpoints {
            self.delivery.took(cp);
        }
        for &t in &msgs.acks {
            self.delivery.acked(t, &referee.kept);
        }
    }

    /// Whether something for it is waiting; `verdicts: false` for a client
    /// that cannot use them yet.
    pub(crate) fn has_news(&self, referee: &Referee, verdicts: bool, now: Instant) -> bool {
        self.query.is_some()
            || self.answer.is_some()
            || !self.delivery.full_acks_owed.is_empty()
            || (verdicts && self.delivery.has_news(&referee.kept, now))
    }

    /// Writes the verdicts it has not had and what is passed on to it;
    /// `verdicts: false` for a client that cannot use them yet.
    pub(crate) fn write(
        &mut self,
        referee: &Referee,
        w: &mut DatagramWriter<'_>,
        verdicts: bool,
        now: Instant,
    ) {
        let kept: &[Checkpoint] = if verdicts { &referee.kept } else { &[] };
        self.delivery.write(kept, w, now);
        if let Some((id, ticks)) = self.query.take() {
            w.put(Message::ChainQuery { id, ticks });
        }
        if let Some((id, entries)) = self.answer.take() {
            w.put(Message::ChainAnswer { id, entries });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        checks: &mut LocalChecks,
        ticks: impl Iterator<Item = u32>,
        hash: impl Fn(u32) -> u64,
    ) -> Vec<Checkpoint> {
        ticks
            .filter_map(|t| checks.report(Tick::new(t), hash(t)).unwrap())
            .collect()
    }

    #[test]
    fn one_checkpoint_per_interval_full_at_each_block_end() {
        let mut c = LocalChecks::new(256);
        let made = run(&mut c, 0..200, |_| 1);
        let ticks: Vec<u32> = made.iter().map(|c| c.tick.get()).collect();
        assert_eq!(ticks, (0..24).map(|k| k * 8 + 7).collect::<Vec<_>>());
        for cp in &made {
            assert_eq!(cp.full, cp.tick.get() % 64 == 63, "{cp:?}");
            assert!(cp.full || cp.value <= 0xFFFF);
        }
        // Every tenth tick: one per interval it falls in, the last of a block
        // in full.
        let mut c = LocalChecks::new(256);
        let made = run(&mut c, (0..20).map(|k| k * 10), |_| 1);
        let full: Vec<u32> = made
            .iter()
            .filter(|c| c.full)
            .map(|c| c.tick.get())
            .collect();
        assert_eq!(full, vec![60, 120]);
    }

    #[test]
    fn a_late_starter_checks_from_its_first_whole_block() {
        let mut a = LocalChecks::new(256);
        let mut b = LocalChecks::new(256);
        run(&mut a, 0..300, u64::from);
        let made = run(&mut b, 100..300, u64::from);
        assert!(made.iter().all(|c| c.tick.get() >= 128), "{made:?}");
        let mut r = RemoteChecks::default();
        for cp in made {
            assert_eq!(a.receive(&mut r, cp), None);
        }
        assert_eq!(r.agreed, Some(Tick::new(295)));
    }

    #[test]
    fn mismatch_found_whichever_side_reports_first_and_once() {
        let mut a = LocalChecks::new(256);
        let mut b = LocalChecks::new(256);
        let theirs = run(&mut b, 0..100, |t| u64::from(t == 50));
        // Theirs arrive before we run: they wait.
        let mut r = RemoteChecks::default();
        for cp in &theirs {
            assert_eq!(a.receive(&mut r, *cp), None);
        }
        assert_eq!(r.len(), theirs.len());
        run(&mut a, 0..100, |_| 0);
        let m = a.catch_up(&mut r).unwrap();
        assert_eq!(m.tick, Tick::new(55));
        assert_eq!(m.agreed, Some(Tick::new(47)));
        assert_eq!(a.catch_up(&mut r), None);
        // Ours first: found on arrival, once.
        let mut r = RemoteChecks::default();
        let found: Vec<_> = theirs
            .iter()
            .filter_map(|cp| a.receive(&mut r, *cp))
            .collect();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].tick, Tick::new(55));
    }

    #[test]
    fn a_divergence_the_states_recover_from_is_still_caught() {
        let mut a = LocalChecks::new(256);
        let mut b = LocalChecks::new(256);
        run(&mut a, 0..65, |_| 0);
        let theirs = run(&mut b, 0..65, |t| u64::from(t == 57));
        let mut r = RemoteChecks::default();
        let found: Vec<_> = theirs
            .iter()
            .filter_map(|cp| a.receive(&mut r, *cp))
            .collect();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].tick, Tick::new(63));
        assert!(theirs.last().unwrap().full);
    }

    #[test]
    fn storage_is_capped() {
        let mut c = LocalChecks::new(4);
        run(&mut c, 0..100, |_| 0);
        assert_eq!(c.len(), 4);
        let mut r = RemoteChecks::default();
        for t in 1000..1100 {
            c.receive(
                &mut r,
                Checkpoint {
                    tick: Tick::new(t),
                    full: false,
                    value: 0,
                    ack: None,
                },
            );
        }
        assert_eq!(r.len(), PENDING);
    }
}
