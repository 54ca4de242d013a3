//! Checkpoints exchanged with one remote: delivery of ours until
//! acknowledged, comparison of theirs, and the search when they differ.

use super::*;

/// Full checkpoints kept until acknowledged (four blocks' worth).
pub(super) const FULLS: usize = 4;

/// The checkpoints one remote is sent, each list ascending: ours, or a
/// sequencer's verdicts and the splits it told this client of, read as
/// one without being merged into a new list.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sent<'a>(pub(super) &'a [Checkpoint], pub(super) &'a [Checkpoint]);

impl<'a> Sent<'a> {
    /// One list.
    pub(super) fn one(kept: &'a [Checkpoint]) -> Self {
        Self(kept, &[])
    }

    fn iter(self) -> impl Iterator<Item = &'a Checkpoint> {
        self.0.iter().chain(self.1)
    }
}

/// Checkpoints on their way to one remote, and our acknowledgements of
/// its. Each checkpoint is sent once: a lost one costs the wait for the
/// next, which covers it (the chain folds in every tick of the block so
/// far). Only the full one closing a block covers the block's end, so the
/// full ones of the last [`FULLS`] blocks are acknowledged, each on its
/// own, and sent again every resend period (the session's
/// `keepalive_interval`) until they are.
#[derive(Debug, Clone, Default)]
pub(crate) struct Delivery {
    /// The newest checkpoint sent.
    pub(super) sent: Option<Tick>,
    /// The full ones it acknowledged, newest last.
    pub(super) acked_fulls: VecDeque<Tick>,
    /// When full ones were last sent again.
    pub(super) fulls_at: Option<Instant>,
    /// Its full ones received and not acknowledged yet.
    pub(super) full_acks_owed: Vec<Tick>,
}

impl Delivery {
    /// Its checkpoint arrived: a full one is acknowledged in the next
    /// datagram.
    pub(super) fn took(&mut self, cp: Checkpoint) {
        if cp.full && !self.full_acks_owed.contains(&cp.tick) && self.full_acks_owed.len() < FULLS {
            self.full_acks_owed.push(cp.tick);
        }
    }

    /// Its acknowledgement of `tick`, one of `kept`. The oldest
    /// acknowledgement goes once more are held than [`FULLS`] or the full
    /// checkpoints `kept` holds, whichever is more: `kept` may hold more
    /// full ones than `FULLS` (a sequencer's verdicts and the splits it
    /// tells one client of), and an acknowledgement pushed out for another
    /// would have its checkpoint sent again and again.
    pub(super) fn acked(&mut self, tick: Tick, kept: Sent<'_>) {
        if kept.iter().any(|c| c.tick == tick && c.full) && !self.acked_fulls.contains(&tick) {
            let slots = FULLS.max(kept.iter().filter(|c| c.full).count());
            if self.acked_fulls.len() >= slots {
                self.acked_fulls.pop_front();
            }
            self.acked_fulls.push_back(tick);
        }
    }

    /// Whether `c` is to be sent now: never sent, or, when a resend is
    /// due, a full one still unacknowledged.
    pub(super) fn is_due(&self, c: &Checkpoint, now: Instant, resend: Duration) -> bool {
        let sent = self.sent.is_some_and(|s| c.tick <= s);
        let resend = self.fulls_at.is_none_or(|t| now >= t + resend);
        !sent || (resend && c.full && !self.acked_fulls.contains(&c.tick))
    }

    pub(super) fn has_news(&self, kept: Sent<'_>, now: Instant, resend: Duration) -> bool {
        !self.full_acks_owed.is_empty() || kept.iter().any(|c| self.is_due(c, now, resend))
    }

    /// When [`has_news`](Self::has_news) turns true by time passing alone,
    /// if it may: a full one sent and unacknowledged is due again `resend`
    /// after full ones last went.
    pub(super) fn news_at(&self, kept: Sent<'_>, resend: Duration) -> Option<Instant> {
        let at = self.fulls_at? + resend;
        let sent = |c: &Checkpoint| self.sent.is_some_and(|s| c.tick <= s);
        kept.iter()
            .any(|c| c.full && sent(c) && !self.acked_fulls.contains(&c.tick))
            .then_some(at)
    }

    /// Writes what is due of `kept`, an acknowledgement riding on each
    /// checkpoint (the rest alone).
    pub(super) fn write(
        &mut self,
        kept: Sent<'_>,
        w: &mut DatagramWriter<'_>,
        now: Instant,
        resend: Duration,
    ) {
        let mut due: Vec<Checkpoint> = kept
            .iter()
            .filter(|c| self.is_due(c, now, resend))
            .copied()
            .collect();
        if !kept.1.is_empty() {
            due.sort_by_key(|c| c.tick);
        }
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
    pub(super) pending: BTreeMap<Tick, Checkpoint>,
    /// The last checkpoint we agreed on.
    pub(crate) agreed: Option<Tick>,
    /// The first mismatch, once found.
    pub(crate) mismatch: Option<Mismatch>,
    /// Its checkpoints from this tick on describe a stream nobody else runs
    /// (its seat was abandoned there): not compared.
    pub(super) ignore_from: Option<Tick>,
    /// Where its state agreed with ours again after a mismatch: its
    /// checkpoints before it are not compared.
    pub(super) healed_from: Option<Tick>,
    /// How many times a mismatch with it ended so.
    pub(crate) healed: u32,
    /// Its latest checkpoints compared with ours, oldest first.
    pub(super) recent: VecDeque<Compared>,
    /// Our checkpoints on the way to it, and our acknowledgements of its.
    pub(super) delivery: Delivery,
    /// Our search for where we parted, after a mismatch.
    pub(crate) bisect: Option<Bisect>,
    /// Its latest question to us, to answer in the next datagram.
    pub(crate) owed: Option<Answer>,
    /// Answers it may still get (`None` until it first asks).
    pub(super) answers: Option<TokenBucket>,
    /// The id of our next search.
    pub(super) next_id: u32,
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
    pub(super) fn ack(&mut self, tick: Option<Tick>) {
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
    pub(super) fn compared(&mut self, cp: Checkpoint, local: u64) {
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

    pub(super) fn ignored(&self, tick: Tick) -> bool {
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
            self.delivery.acked(t, Sent::one(&local.kept));
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
    pub(super) fn agreed_again(&self, healed: u32) -> Option<Outcome> {
        let from = self.healed_from.filter(|_| self.healed != healed)?;
        Some(Outcome::Agreed { from })
    }

    pub(super) fn mismatched(&mut self, local: &LocalChecks, m: Mismatch, now: Instant) -> Outcome {
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
            || self
                .delivery
                .has_news(Sent::one(&local.kept), now, local.resend)
            || self.question_due().is_some_and(|d| d <= now)
    }

    /// Whether something for it cannot wait for the next datagram: an
    /// answer to its question, or our question due (a search is a few
    /// round trips; checkpoints and acknowledgements ride along with
    /// whatever goes next).
    pub(crate) fn urgent(&self, now: Instant) -> bool {
        self.owed.is_some() || self.question_due().is_some_and(|d| d <= now)
    }

    /// When [`has_news`](Self::has_news) turns true by time passing alone,
    /// if it may (a question due is a timer of its own).
    pub(crate) fn news_at(&self, local: &LocalChecks) -> Option<Instant> {
        self.delivery.news_at(Sent::one(&local.kept), local.resend)
    }

    /// When the search next asks or gives up.
    pub(crate) fn question_due(&self) -> Option<Instant> {
        self.bisect.as_ref().map(Bisect::due)
    }

    /// Writes our checkpoints it has not had, the answer owed and the
    /// question due.
    pub(crate) fn write(&mut self, local: &LocalChecks, w: &mut DatagramWriter<'_>, now: Instant) {
        self.delivery
            .write(Sent::one(&local.kept), w, now, local.resend);
        if let Some((id, entries)) = self.owed.take() {
            w.put(Message::ChainAnswer { id, entries });
        }
        if let Some((id, ticks)) = self.bisect.as_mut().and_then(|b| b.question(now)) {
            w.put(Message::ChainQuery { id, ticks });
        }
    }

    /// Takes its question, answered in the next datagram if it has not
    /// asked too often.
    pub(super) fn asked(&mut self, local: &LocalChecks, id: u32, ticks: &[Tick], now: Instant) {
        let bucket = self
            .answers
            .get_or_insert_with(|| TokenBucket::full(ANSWERS_PER_SEC, now));
        if bucket.take(1, now) {
            self.owed = Some((id, answer_query(local, ticks)));
        }
    }
}
