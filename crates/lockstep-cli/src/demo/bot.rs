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
    pub(super) session: ClientSession<PlayerInputs>,
    pub(super) game: Game,
    pub(super) bot: Option<Bot>,
    /// Runs the bot's ticks on a steady clock, or catching up.
    pub(super) driver: Driver,
    /// The input delay in force, as last seen.
    pub(super) delay: u32,
    pub(super) buffers: Buffers,
    pub(super) desyncs: u32,
    pub(super) snapshots: crate::snapshots::Snapshots,
    /// Joined the match under way: when it asked, and when it caught up.
    pub(super) joined: Option<(Instant, Option<Instant>)>,
    /// Reconnected: whether its state was kept (else it came back from a
    /// snapshot).
    pub(super) reconnected: Option<bool>,
    /// Its connection is cut until then; then it reconnects.
    pub(super) offline: Option<Instant>,
    /// The game as it starts, for a reconnect that does not keep the state.
    pub(super) start: Game,
    pub(super) failure: Option<String>,
    /// Its recent states, newest last: when it is resynced, its own state
    /// at the snapshot's tick, beside the majority's, shows what differs.
    pub(super) history: std::collections::VecDeque<Game>,
    /// Its recent frames, for a desync report.
    pub(super) frames: std::collections::VecDeque<lockstep_core::Frame<PlayerInputs>>,
    /// The seat whose bot breaks its own state, and the tick when
    /// (`--inject-desync`).
    pub(super) inject: Option<(u16, u32)>,
    pub(super) desync: Notes,
}

/// What a bot heard of its own desync.
#[derive(Debug, Default)]
pub(super) struct Notes {
    /// The checkpoint that differed.
    pub(super) checkpoint: Option<lockstep_core::Tick>,
    /// Where the search ended.
    pub(super) located: Option<Option<lockstep_core::desync::FirstDifference>>,
    /// It is being resynced.
    pub(super) resyncing: bool,
    /// It was resynced (the snapshot's tick).
    pub(super) resynced: Option<lockstep_core::Tick>,
    /// The report written.
    pub(super) report: Option<std::path::PathBuf>,
    /// Healed before the search ended: the fields compared and the frames,
    /// for the report once it does.
    pub(super) pending: Option<Pending>,
}

/// A report waiting for the search's result.
#[derive(Debug)]
pub(super) struct Pending {
    pub(super) tick: lockstep_core::Tick,
    pub(super) fields: Vec<lockstep_core::desync::FieldDiff>,
    pub(super) frames: Vec<lockstep_core::Frame<PlayerInputs>>,
}

/// States and frames a bot keeps for a desync report.
pub(super) const KEEP: usize = 64;

/// Drains a bot's events: desyncs are counted, snapshot requests noted,
/// and a joiner's catching up timed.
pub(super) fn take_events(c: &mut Client) {
    while let Some(ev) = c.session.poll_event() {
        c.snapshots.on_event(&ev);
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
            lockstep_core::Event::CaughtUp { .. }
            | lockstep_core::Event::Reconnected { kept: true, .. } => {
                if let Some((_, live)) = &mut c.joined {
                    *live = Some(Instant::now());
                }
            }
            // Back without our state: start over; a snapshot follows.
            lockstep_core::Event::Reconnected { kept: false, .. } => {
                c.game = c.start.clone();
                c.reconnected = Some(false);
            }
            _ => {}
        }
    }
}

/// The bot's input for the tick `delay` ahead, if it is due.
pub(super) fn commit_due(c: &mut Client) {
    let Some(bot) = &mut c.bot else { return };
    // A joiner plays once its input is taken: after catching up from a
    // snapshot, or at once when it replays the match.
    if let Some(Ok(_)) = driver::commit_due(&mut c.session, || bot.input(&c.game))
        && let Some((_, live @ None)) = &mut c.joined
    {
        *live = Some(Instant::now());
    }
}

/// One game-loop iteration of one bot client.
pub(super) fn step_client(c: &mut Client, clock: &Clock, ticks: u32) {
    let _ = drive(
        &mut c.session,
        &mut c.transport,
        clock.now(),
        &mut c.buffers,
    );
    if c.bot.is_none() {
        c.bot = c.session.seat().map(|s| Bot::new(s, u64::from(s.0) + 1));
    }
    take_events(c);
    match c.snapshots.restore(&mut c.session, &mut c.game) {
        Err(e) => {
            c.failure = Some(e);
            return;
        }
        Ok(Some(tick)) if c.desync.resyncing => healed(c, tick),
        Ok(_) => {}
    }
    c.snapshots.donate(&mut c.session, &c.game);
    // Ticks run on a steady clock (a little faster with frames in hand, a
    // little slower without), and each one commits the input for the
    // tick `delay` ahead, so the delay is the latency the bot plays with;
    // far behind (joining, or after a stall), it catches up without it.
    let delay = c.session.welcome().map_or(0, |w| w.delay);
    if c.session.welcome().is_some() {
        c.delay = delay;
    }
    // A commit the loop could not make when its frame ran (refused in a
    // pause, say) is made now: the next frame may wait on it.
    commit_due(c);
    let mut turn = c.driver.turn(&c.session, clock.now());
    while c.game.tick.get() < ticks {
        let Some(frame) = turn.next(&mut c.session) else {
            break;
        };
        c.game.step(&frame);
        // At the tick asked, or the first after it that the seat's ship is
        // in the game.
        if let Some((target, at)) = c.inject
            && frame.tick.get() >= at
            && let Some(seat) = c.bot.as_ref().map(Bot::seat).filter(|s| s.0 == target)
            && let Some(ship) = c.game.ships.iter_mut().find(|s| s.player == seat)
        {
            // The injected desync: this client alone changes a field.
            ship.score += 1000;
            c.inject = None;
        }
        let _ = c.session.report_checksum(frame.tick, c.game.hash());
        c.snapshots.donate(&mut c.session, &c.game);
        if c.history.len() >= KEEP {
            c.history.pop_front();
            c.frames.pop_front();
        }
        c.history.push_back(c.game.clone());
        c.frames.push_back(frame);
        commit_due(c);
    }
    c.driver.finish(turn);
    take_events(c);
    let _ = drive(
        &mut c.session,
        &mut c.transport,
        clock.now(),
        &mut c.buffers,
    );
}

/// A bot being resynced restored the majority's state after `tick`: it
/// compares it with its own state after that tick, writes the report and
/// plays on.
pub(super) fn healed(c: &mut Client, tick: lockstep_core::Tick) {
    use lockstep_core::Game as _;
    use lockstep_core::desync::Fields;
    c.desync.resyncing = false;
    c.desync.resynced = Some(tick);
    let mut theirs = Fields::new();
    c.game.fields(&mut theirs);
    let after = tick.saturating_add(1);
    let fields = match c.history.iter().find(|g| g.tick == after) {
        Some(ours) => {
            let mut mine = Fields::new();
            ours.fields(&mut mine);
            theirs.diff(&mine)
        }
        None => Vec::new(),
    };
    // The frames up to the first divergent tick, once it is known.
    let frames: Vec<_> = c.frames.iter().cloned().collect();
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
    // The states kept describe the old game.
    c.history.clear();
    c.frames.clear();
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
