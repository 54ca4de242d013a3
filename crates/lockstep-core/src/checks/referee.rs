//! The sequencer's referee: votes, verdicts from the majority (or the
//! room's own simulation), and questions passed between two clients.

use super::*;

/// Verdicts the sequencer keeps and sends.
pub(super) const VERDICTS: usize = 8;
/// Routes of forwarded questions the sequencer keeps.
pub(super) const ROUTES: usize = 64;

/// A checkpoint the sequencer holds as the reference: a strict majority of
/// the seated players sent it, or its own simulation made it.
#[derive(Debug, Clone)]
pub(super) struct Verdict {
    pub(super) cp: Checkpoint,
    /// Who sent it (none for the simulation's): asked when a client that
    /// differs searches for its first divergent tick.
    pub(super) voters: Vec<PeerId>,
}

/// A question forwarded from one client to another, for the answer's way
/// back.
#[derive(Debug, Clone)]
pub(super) struct Route {
    pub(super) id: u32,
    pub(super) asker: PeerId,
    pub(super) asker_id: u32,
    /// Asked: two clients when there are two, so no one of them decides
    /// the answer alone.
    pub(super) to: Vec<PeerId>,
    pub(super) ticks: Vec<Tick>,
    /// The first answer, while the other is awaited.
    pub(super) first: Option<(PeerId, Vec<Link>)>,
}

/// What the sequencer concluded from a client's checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdicted {
    /// `peer`'s checkpoint differs from the verdict.
    Desync {
        verdict: Checkpoint,
        peer: PeerId,
        got: u64,
    },
    /// Every seated player sent one and no value has a majority: each of
    /// them is told a value another sent that differs from its own.
    Split {
        tick: Tick,
        hashes: usize,
        told: Vec<(PeerId, Checkpoint)>,
    },
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
    pub(super) verdicts: VecDeque<Verdict>,
    pub(super) votes: BTreeMap<Tick, Vec<(PlayerId, PeerId, Checkpoint)>>,
    pub(super) sim: Option<LocalChecks>,
    pub(super) routes: VecDeque<Route>,
    pub(super) next_route: u32,
    pub(super) window: usize,
    /// The verdicts' checkpoints, ascending: what every client is sent.
    pub(super) kept: Vec<Checkpoint>,
    /// The latest checkpoints no value had a majority at, with who sent
    /// them, oldest first: a client told of one asks the others where it
    /// parted from them.
    pub(super) splits: VecDeque<(Tick, Vec<PeerId>)>,
    /// How long an unacknowledged verdict waits before it goes again.
    pub(super) resend: Duration,
}

impl Referee {
    /// Votes over a chain of `window` ticks, the sequencer's own game's
    /// too when `simulated`; what is unacknowledged goes again every
    /// `resend`.
    pub(crate) fn new(window: usize, simulated: bool, resend: Duration) -> Self {
        Self {
            sim: simulated.then(|| LocalChecks::new(window, resend)),
            resend,
            window: window.max(1),
            ..Self::default()
        }
    }

    pub(super) fn verdict(&self, tick: Tick) -> Option<&Verdict> {
        self.verdicts.iter().find(|v| v.cp.tick == tick)
    }

    pub(super) fn settle(&mut self, cp: Checkpoint, voters: Vec<PeerId>) {
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
            let list = self.votes.remove(&cp.tick).unwrap_or_default();
            // Each is told the first value another seat sent that differs
            // from its own (of the same width: a tick's checkpoints are
            // all full or all short).
            let told = list
                .iter()
                .filter_map(|(_, p, mine)| {
                    let other = list.iter().find(|(.., c)| c.value != mine.value)?;
                    Some((
                        *p,
                        Checkpoint {
                            ack: None,
                            ..other.2
                        },
                    ))
                })
                .collect();
            if self.splits.len() >= VERDICTS {
                self.splits.pop_front();
            }
            self.splits
                .push_back((cp.tick, list.iter().map(|(_, p, _)| *p).collect()));
            out.push(Verdicted::Split {
                tick: cp.tick,
                hashes: list.len(),
                told,
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
        // only as far as they agree. Past the latest verdict, where no
        // value had a majority, the others who sent a checkpoint there.
        let verdict = self.verdicts.back().map(|v| (v.cp.tick, &v.voters));
        let split = self.splits.back().map(|(t, v)| (*t, v));
        let latest = match (verdict, split) {
            (Some(v), Some(s)) => Some(if s.0 > v.0 { s } else { v }),
            (v, s) => v.or(s),
        };
        let voters: Vec<PeerId> = latest
            .map(|(_, voters)| {
                voters
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
    pub(super) delivery: Delivery,
    /// A question passed on to it.
    pub(crate) query: Option<(u32, Vec<Tick>)>,
    /// An answer passed back to it.
    pub(crate) answer: Option<Answer>,
    /// Questions it may still ask (`None` until it first does).
    pub(super) asks: Option<TokenBucket>,
    /// Checkpoints no value had a majority at, each with another seat's
    /// value that differs from its own, ascending: sent to it as the
    /// verdicts are.
    pub(crate) split: Vec<Checkpoint>,
}

impl Relayed {
    /// Tells it another seat's value at a checkpoint no value had a
    /// majority at (the newest [`FULLS`] kept).
    pub(crate) fn tell_split(&mut self, cp: Checkpoint) {
        let at = self.split.partition_point(|c| c.tick < cp.tick);
        if self.split.get(at).is_some_and(|c| c.tick == cp.tick) {
            return;
        }
        self.split.insert(at, cp);
        if self.split.len() > FULLS {
            self.split.remove(0);
        }
    }

    /// What it is sent of the checks: the verdicts, and the splits it was
    /// told of, of ticks before `before` (a spectator watching with a delay
    /// hears of no state newer than it may see).
    fn sent<'a>(&'a self, referee: &'a Referee, before: Tick) -> Sent<'a> {
        let kept = &referee.kept[..referee.kept.partition_point(|c| c.tick < before)];
        let split = &self.split[..self.split.partition_point(|c| c.tick < before)];
        Sent(kept, split)
    }

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
            self.delivery.acked(t, Sent(&referee.kept, &self.split));
        }
    }

    /// Whether something for it is waiting; `verdicts: false` for a client
    /// that cannot use them yet.
    pub(crate) fn has_news(
        &self,
        referee: &Referee,
        verdicts: bool,
        before: Tick,
        now: Instant,
    ) -> bool {
        self.query.is_some()
            || self.answer.is_some()
            || !self.delivery.full_acks_owed.is_empty()
            || (verdicts
                && self
                    .delivery
                    .has_news(self.sent(referee, before), now, referee.resend))
    }

    /// When [`has_news`](Self::has_news) turns true by time passing alone,
    /// if it may: a full verdict it has not acknowledged goes again.
    pub(crate) fn news_at(
        &self,
        referee: &Referee,
        verdicts: bool,
        before: Tick,
    ) -> Option<Instant> {
        verdicts
            .then(|| {
                self.delivery
                    .news_at(self.sent(referee, before), referee.resend)
            })
            .flatten()
    }

    /// Writes the verdicts it has not had and what is passed on to it;
    /// `verdicts: false` for a client that cannot use them yet.
    pub(crate) fn write(
        &mut self,
        referee: &Referee,
        w: &mut DatagramWriter<'_>,
        verdicts: bool,
        before: Tick,
        now: Instant,
    ) {
        let split = core::mem::take(&mut self.split);
        let upto = |l: &[Checkpoint]| l.partition_point(|c| c.tick < before);
        let sent = if verdicts {
            Sent(&referee.kept[..upto(&referee.kept)], &split[..upto(&split)])
        } else {
            Sent(&[], &[])
        };
        self.delivery.write(sent, w, now, referee.resend);
        self.split = split;
        if let Some((id, ticks)) = self.query.take() {
            w.put(Message::ChainQuery { id, ticks });
        }
        if let Some((id, entries)) = self.answer.take() {
            w.put(Message::ChainAnswer { id, entries });
        }
    }
}
