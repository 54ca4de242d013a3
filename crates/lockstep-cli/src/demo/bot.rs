//! One bot of the relay demo: its client session, game and bot, the
//! turn of the game loop it runs, and what it heard of a desync.

use super::*;

/// A bot's new transport, whether it is a WebSocket, and the key that
/// seals its datagrams if not.
pub(super) type Opened = (Box<dyn Transport>, bool, Option<[u8; 32]>);

pub(super) struct Client {
    pub(super) name: String,
    pub(super) kind: &'static str,
    pub(super) transport: Box<dyn Transport>,
    /// Its session and game: ticks on a steady clock (or catching up),
    /// state handed over and restored, checksums, the last tick.
    pub(super) runner: Runner<Swarm, ClientSession<PlayerInputs>>,
    /// Its seat, shared with its game (which injects a desync into it).
    pub(super) seat: Seat,
    pub(super) bot: Option<Bot>,
    /// The input delay in force, as last seen.
    pub(super) delay: u32,
    pub(super) buffers: Buffers,
    pub(super) desyncs: u32,
    /// Joined the match under way: when it asked, and when it caught up.
    pub(super) joined: Option<(Instant, Option<Instant>)>,
    /// Reconnected: whether its state was kept (else it came back from a
    /// snapshot).
    pub(super) reconnected: Option<bool>,
    /// Its connection is cut until then; then it reconnects.
    pub(super) offline: Option<Instant>,
    pub(super) failure: Option<String>,
    pub(super) desync: Notes,
    /// `--record` with `--inject-desync`: the recording to start once this
    /// bot is seated, if its seat is the one whose game breaks.
    pub(super) record_if_seat: Option<(u16, Recording)>,
}

impl Client {
    /// The game it runs.
    pub(super) fn game(&self) -> &Game {
        &self.runner.game().game
    }

    /// Its session.
    pub(super) fn session(&self) -> &ClientSession<PlayerInputs> {
        self.runner.session()
    }
}

/// What a bot heard of its own desync.
#[derive(Debug, Default)]
pub(super) struct Notes {
    /// The checkpoint that differed.
    pub(super) checkpoint: Option<Tick>,
    /// Where the search ended.
    pub(super) located: Option<Option<lockstep_core::desync::FirstDifference>>,
    /// It is being resynced.
    pub(super) resyncing: bool,
    /// It was resynced (the snapshot's tick).
    pub(super) resynced: Option<Tick>,
    /// The report written.
    pub(super) report: Option<std::path::PathBuf>,
    /// Healed before the search ended: the fields compared and the frames,
    /// for the report once it does.
    pub(super) pending: Option<Pending>,
}

/// A report waiting for the search's result.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) tick: Tick,
    pub(super) fields: Vec<lockstep_core::desync::FieldDiff>,
    pub(super) frames: Vec<lockstep_core::Frame<PlayerInputs>>,
}

/// Drains a bot's events: desyncs are counted and located, a resync's
/// report written, and a joiner's catching up timed.
pub(super) fn take_events(c: &mut Client) {
    while let Some(ev) = c.runner.poll_event() {
        match ev {
            lockstep_core::Event::Desync { tick, .. } => {
                c.desyncs += 1;
                c.desync.checkpoint = Some(tick);
            }
            lockstep_core::Event::DesyncLocated { first, .. } => {
                c.desync.located = Some(first);
                if let Some(p) = c.desync.pending.take() {
                    write_report(c, p);
                }
                let line = match first {
                    Some(f) => format!(
                        "desync: {} found where it parted from the others: after tick {} (its hash {:016x}, theirs {:016x})",
                        c.name, f.tick, f.local, f.remote
                    ),
                    None => format!("desync: {} could not find the first divergent tick", c.name),
                };
                println!("{line}");
            }
            lockstep_core::Event::Resyncing => {
                c.desync.resyncing = true;
                println!(
                    "desync: the relay found {}'s state different (checkpoint through tick {}); resyncing it from another's state",
                    c.name,
                    c.desync.checkpoint.map_or("?".into(), |t| t.to_string())
                );
            }
            // The runner restored the majority's state over ours.
            lockstep_core::Event::Snapshot { tick } if c.desync.resyncing => {
                if let Some(ours) = c.runner.take_replaced() {
                    healed(c, tick, &ours);
                }
            }
            lockstep_core::Event::CaughtUp { .. }
            | lockstep_core::Event::Reconnected { kept: true, .. } => {
                if let Some((_, live)) = &mut c.joined {
                    *live = Some(Instant::now());
                }
            }
            // Back without our state: the runner started the game over; a
            // snapshot follows.
            lockstep_core::Event::Reconnected { kept: false, .. } => {
                c.reconnected = Some(false);
            }
            _ => {}
        }
    }
}

/// One game-loop iteration of one bot client: its runner's turn, with the
/// bot's input for the tick `delay` ahead whenever one is due (so the
/// delay is the latency the bot plays with).
pub(super) fn step_client(c: &mut Client, clock: &Clock) {
    if c.bot.is_none()
        && let Some(s) = c.runner.session().seat()
    {
        c.seat.set(s);
        c.bot = Some(Bot::new(s, u64::from(s.0) + 1));
        if let Some((seat, rec)) = c.record_if_seat.take()
            && seat == s.0
            && let Err(e) = rec.start(&mut c.runner)
        {
            c.failure = Some(e.to_string());
        }
    }
    let mut committed = false;
    let bot = &mut c.bot;
    let turned = turn(
        &mut c.runner,
        &mut c.transport,
        clock.now(),
        &mut c.buffers,
        |g| {
            committed = true;
            bot.as_mut()
                .map_or_else(PlayerInputs::default, |b| b.input(&g.game))
        },
    );
    if let Err(TurnError::Runner(e)) = turned {
        c.failure = Some(e.to_string());
        return;
    }
    // A joiner plays once its input is taken: after catching up from a
    // snapshot, or at once when it replays the match.
    if committed && let Some((_, live @ None)) = &mut c.joined {
        *live = Some(Instant::now());
    }
    if let Some(w) = c.runner.session().welcome() {
        c.delay = w.delay;
    }
    take_events(c);
}

/// A bot being resynced restored the majority's state after `tick` over
/// `ours`: it compares the two after that tick, writes the report and
/// plays on.
pub(super) fn healed(c: &mut Client, tick: Tick, ours: &Swarm) {
    use lockstep_core::Game as _;
    use lockstep_core::desync::Fields;
    c.desync.resyncing = false;
    c.desync.resynced = Some(tick);
    let mut theirs = Fields::new();
    c.game().fields(&mut theirs);
    let after = tick.saturating_add(1);
    let fields = match ours.history.iter().find(|g| g.tick == after) {
        Some(ours) => {
            let mut mine = Fields::new();
            ours.fields(&mut mine);
            theirs.diff(&mine)
        }
        None => Vec::new(),
    };
    // The frames up to the first divergent tick, once it is known.
    let frames: Vec<_> = ours.frames.iter().cloned().collect();
    let pending = Pending {
        tick,
        fields,
        frames,
    };
    println!(
        "desync: {} resynced from the state after tick {tick}",
        c.name
    );
    if c.desync.located.is_some() {
        write_report(c, pending);
    } else {
        c.desync.pending = Some(pending);
    }
}

/// Writes the report of a bot's desync, once healed and located.
pub(super) fn write_report(c: &mut Client, p: Pending) {
    use lockstep_core::desync::Report;
    let checkpoint = c.desync.checkpoint.unwrap_or(p.tick);
    let first = c.desync.located.flatten();
    let upto = first.map_or(checkpoint, |f| f.tick);
    let frames: Vec<_> = p
        .frames
        .iter()
        .filter(|f| f.tick <= upto && upto.since(f.tick) < 8)
        .collect();
    let report = Report::from_match(
        &format!("{}, against the relay's majority", c.name),
        "swarm",
        checkpoint,
        first,
        p.tick,
        p.fields,
        frames,
    );
    let file = std::path::PathBuf::from(format!(
        "desync-report-{}-tick-{}.json",
        c.name, report.tick
    ));
    match crate::desync::write(&report, &file) {
        Ok(()) => {
            println!(
                "desync: {}'s report written to {} (read it with `lockstep desync show {}`)",
                c.name,
                file.display(),
                file.display()
            );
            c.desync.report = Some(file);
        }
        Err(e) => eprintln!("{e}"),
    }
}
