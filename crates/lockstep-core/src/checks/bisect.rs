//! The search for the first divergent tick, as the asker runs it, and
//! the answers a machine gives about its own chain.

use super::*;

/// How many times a round's question is asked, a resend period apart (the
/// session's `keepalive_interval`), before the search gives up (ten
/// seconds at the default 250 ms: a question and its answer may cross four
/// lossy links).
pub(super) const TRIES: u8 = 40;
/// The most rounds a search asks (a window of 512 ticks needs 4).
pub(super) const ROUNDS: u8 = 12;
/// Answers given to one remote per second (a burst of as many).
pub(crate) const ANSWERS_PER_SEC: u32 = 8;

/// The search for the first divergent tick with one remote, after a
/// mismatch: rounds of [`ChainQuery`](crate::wire::Message::ChainQuery),
/// each narrowing the range between the last agreed checkpoint and the one
/// that differed.
#[derive(Debug, Clone)]
pub(crate) struct Bisect {
    pub(super) search: Search,
    /// The checkpoint that differed.
    pub(crate) checkpoint: Tick,
    pub(super) id: u32,
    pub(super) asked: Vec<Tick>,
    pub(super) due: Instant,
    /// How long a question waits for its answer before it is asked again.
    pub(super) ask_again: Duration,
    pub(super) tries: u8,
    /// Their state hashes from the answers so far (a few per round).
    pub(super) theirs: Vec<(Tick, u64)>,
    /// Our chain as it was when the checkpoint differed: the state may be
    /// replaced (resynced) before the search ends.
    pub(super) ours: HashChain,
    /// The short checkpoint agreed on, asked again in full: 16 bits agree
    /// by chance once in 65,536, and the search must not start after a
    /// tick that differs.
    pub(super) verify: Option<Tick>,
    /// Rounds asked so far.
    pub(super) rounds: u8,
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
            ask_again: local.resend,
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
    pub(super) fn next_round(&mut self) {
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
        self.due = now + self.ask_again;
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
    pub(super) fn again(&mut self, now: Instant) -> Located {
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
