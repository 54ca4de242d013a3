//! A survivor's part in a takeover: its report to the candidate, and
//! moving on to the next candidate when one fails it.

use super::*;

/// The seat a `TakeoverAck` names when `host` is all it says (the
/// collecting mark, or a candidate passing a seat on).
pub(super) fn bare_host(m: &Message<'_>) -> Option<PlayerId> {
    match *m {
        Message::TakeoverAck {
            ready: false,
            want: None,
            late: false,
            alive: false,
            host,
            ..
        } => host,
        _ => None,
    }
}

impl<I: Input> HostedSession<I> {
    /// Reports to the candidate on `seat` from now on.
    pub(super) fn report_to(&mut self, seat: PlayerId) {
        let contact = self
            .roster
            .iter()
            .find(|e| e.seat == seat)
            .map(|e| e.contact.clone())
            .unwrap_or_default();
        let peer = self.peers.get(&contact).copied();
        self.sent_at = None;
        self.takeover = Some(Takeover::Reporting {
            seat,
            peer,
            acked: false,
            since: self.now,
            want: None,
        });
    }

    /// Ends the takeover under way before anything was sealed anew: the
    /// host was only out of reach.
    pub(super) fn call_off(&mut self) {
        self.old_host = None;
        self.takeover = None;
        self.epoch = self.epoch_before;
        self.sent_at = None;
    }

    /// Reports to the next candidate, or collects if it is us.
    pub(super) fn next_candidate(&mut self) {
        let now = self.now;
        self.sent_at = None;
        let first = self.candidates().next();
        match first {
            Some(seat) if Some(seat) == self.seat() => {
                // The waits count from the first time we collected in this
                // takeover, however often we yielded meanwhile.
                let since = *self.collecting_since.get_or_insert(now);
                self.takeover = Some(Takeover::Collecting {
                    since,
                    reports: BTreeMap::new(),
                    progress: now,
                    distrusted: Vec::new(),
                    contested: Vec::new(),
                });
                self.probed_at = None;
            }
            Some(seat) => self.report_to(seat),
            // Nobody can take over now (we do not play, and every
            // candidate failed): we try again when the host is still gone.
            None => self.takeover = None,
        }
    }

    /// Queues this takeover's datagrams: a survivor's report to the
    /// candidate; a candidate's answers.
    pub(super) fn queue_takeover(&mut self) {
        let now = self.now;
        let epoch = self.epoch;
        match &self.takeover {
            Some(Takeover::Reporting {
                peer: Some(to),
                want,
                ..
            }) => {
                let (to, want) = (*to, *want);
                if let Some(bytes) = self.report(want, false) {
                    self.out.push_back((to, bytes));
                }
            }
            Some(Takeover::Collecting { reports, since, .. }) => {
                let since = *since;
                let own = self.client().lacks();
                let ask = self.asked();
                for r in reports.values() {
                    let want = (Some(r.peer) == ask).then_some(own);
                    self.out.push_back((
                        r.peer,
                        answer(epoch, Reply::Wait(want), self.client().frame()),
                    ));
                }
                // Everyone else is asked where it stands: a candidate
                // earlier in the order that counts us, a new host, or a
                // player that follows one is yielded to; one that still
                // hears the host keeps us from going on alone.
                // Every resend interval at first, then every `host_timeout`
                // (a candidate told the host lives may wait long).
                let every = if now < since + self.config.takeover_wait {
                    self.resend()
                } else {
                    self.config.host_timeout
                };
                let probed: Vec<PeerId> = self
                    .probed()
                    .filter_map(|e| self.peers.get(&e.contact).copied())
                    .collect();
                if !probed.is_empty()
                    && self.probed_at.is_none_or(|t| now >= t + every)
                    && let Some(bytes) = self.report(None, true)
                {
                    self.probed_at = Some(now);
                    for to in probed {
                        self.out.push_back((to, bytes.clone()));
                    }
                }
            }
            _ => {}
        }
        // The new host: tell the survivors to come back, until they do.
        let base = self.client().frame();
        let quiet = self.config.takeover_alone;
        self.ready.retain(|_, since| now < *since + quiet);
        for &peer in self.ready.keys() {
            self.out
                .push_back((peer, answer(epoch, Reply::Ready, base)));
        }
        // Whether or not anything went: the next try is a resend
        // interval away.
        self.sent_at = Some(now);
    }

    /// A survivor's report: its `Takeover`, its inputs for the ticks it has
    /// not run, and the frames asked for.
    /// A collecting candidate's probe carries, after its report, a
    /// `TakeoverAck` naming its own seat as `host` (not `alive`): "I
    /// collect". A later candidate collecting too yields to it.
    pub(super) fn report(&self, want: Option<Tick>, probe: bool) -> Option<Vec<u8>> {
        let (seat, token, width) = self.me()?;
        let c = self.client();
        let mut buf = Vec::new();
        let mut w = DatagramWriter::new(&mut buf, c.frame(), self.config.client.max_datagram);
        w.push(&Message::Takeover {
            epoch: self.epoch,
            seat,
            token,
            lacks: c.lacks(),
        })
        .ok()?;
        // The token before, for a candidate whose roster still commits to
        // it (it proves the seat as well; the new host then takes either).
        if let Some(earlier) = self.earlier.filter(|t| *t != token) {
            w.push(&Message::Takeover {
                epoch: self.epoch,
                seat,
                token: earlier,
                lacks: c.lacks(),
            })
            .ok()?;
        }
        if probe {
            w.push(&Message::TakeoverAck {
                epoch: self.epoch,
                ready: false,
                want: None,
                late: false,
                alive: false,
                host: Some(seat),
            })
            .ok()?;
        }
        let inputs = c.inputs_after(c.frame().saturating_sub(1));
        let mut chain = ChainWriter::new();
        let start = inputs.first().map(|(t, _)| *t);
        let mut expect = start;
        for (t, i) in &inputs {
            if Some(*t) != expect || !chain.push(i, 400) {
                break;
            }
            expect = t.next();
        }
        if let Some(start) = start
            && !chain.is_empty()
        {
            let mut bytes = Vec::new();
            chain.write(&mut bytes);
            let _ = w.push(&Message::Inputs(Inputs {
                acks: wire::List::EMPTY,
                runs: (&[InputRun {
                    seat,
                    start,
                    count: chain.count() as u32,
                    back: 0,
                    check: 0,
                    chain: &bytes,
                }])
                    .into(),
            }));
        }
        if let Some(from) = want {
            let frames = c.frames_held(from, 32);
            let mut n = frames.len();
            let mut body = Vec::new();
            while n > 0 {
                body.clear();
                wire::encode_frames_body(&frames[..n], width as usize, None, &mut body);
                let m = Message::Frames(Frames {
                    start: from,
                    count: n as u32,
                    seats: width,
                    reference: None,
                    body: &body,
                });
                if w.push(&m).is_ok() {
                    break;
                }
                n /= 2;
            }
        }
        w.finish();
        Some(buf)
    }
}
