//! `lockstep demo --topology host`: the first bot's process sequences the
//! match, the others connect to it over loopback UDP; with `--kill-host-at`
//! its process dies mid-match and the others carry the match on under one
//! of them. `lockstep demo --kill-relay-at`: a relay sequences a room with
//! failover on, and dies mid-match; the bots carry the match on the same
//! way, directly between themselves.

use super::swarm::{Seat, Swarm};
use super::{DemoArgs, DemoError, TransportKind, game_config, runner_config};
use lockstep_core::runner::Runner;
use lockstep_core::sequenced::{
    ClientConfig, HostedConfig, HostedSession, MissingInput, Policy, SequencerConfig, Start,
};
use lockstep_core::{PlayerInputs, Tick};
use lockstep_demo::{Bot, Game};
use lockstep_net::{Buffers, Clock, Faults, FaultyTransport, TurnError, UdpTransport, turn_hosted};
use lockstep_relay::{BackgroundRelay, Bind, RelayConfig, StartName};
use std::time::{Duration, Instant};

struct HostBot {
    name: String,
    /// Its session and game: ticks on a steady clock (or catching up),
    /// checksums, a takeover carried through, the last tick.
    runner: Runner<Swarm, HostedSession<PlayerInputs>>,
    /// Its socket, impaired as `--loss`, `--latency` and `--jitter` say.
    udp: FaultyTransport<UdpTransport>,
    bot: Option<Bot>,
    buffers: Buffers,
    /// The host changes of its game it has told of.
    told: usize,
}

impl HostBot {
    fn game(&self) -> &Game {
        &self.runner.game().game
    }

    fn session(&self) -> &HostedSession<PlayerInputs> {
        self.runner.session()
    }
}

pub(crate) fn main(a: &DemoArgs) -> Result<(), DemoError> {
    let failover = a.kill_relay_at.is_some();
    check_flags(a, failover)?;
    let clock = Clock::new();
    let mut relay = start_relay(a, failover)?;
    let mut bots = start_bots(a, relay.as_ref().and_then(|r| r.udp), failover, &clock)?;
    announce(a);
    let started = Instant::now();
    let ran = play(a, &mut bots, &mut relay, &clock)?;
    let hashes = print_table(&bots);
    println!();
    if let Some(r) = relay.take() {
        let _ = r.stop();
    }
    judge(a, &hashes, &ran, started)
}

/// Flags host mode and failover cannot honour as given.
fn check_flags(a: &DemoArgs, failover: bool) -> Result<(), DemoError> {
    let mode = if failover {
        "--kill-relay-at"
    } else {
        "--topology host"
    };
    let refuse = |what: &str| {
        Err(DemoError::Setup(format!(
            "{what} is not available with {mode} yet"
        )))
    };
    if a.late_joiners > 0 {
        return refuse("--late-joiners");
    }
    if a.drop_reconnect > 0 {
        return refuse("--drop-reconnect");
    }
    if a.server_sim {
        return refuse("--server-sim");
    }
    if a.inject_desync.is_some() {
        return refuse("--inject-desync");
    }
    if a.transport == TransportKind::Ws {
        return refuse("--transport ws (players reach each other over UDP)");
    }
    for (flag, at) in [
        ("--kill-host-at", a.kill_host_at),
        ("--kill-relay-at", a.kill_relay_at),
    ] {
        let Some(t) = at else { continue };
        if a.players < 2 {
            return Err(DemoError::Setup(format!(
                "{flag} needs --players 2 or more: somebody must carry on"
            )));
        }
        if t + 100 > a.ticks {
            return Err(DemoError::Setup(format!(
                "{flag} {t}: the match must run 100 ticks past it (--ticks {} or more)",
                t + 100
            )));
        }
    }
    Ok(())
}

/// Each bot's session configuration.
fn hosted_config(a: &DemoArgs, name: String) -> Result<HostedConfig, DemoError> {
    let fingerprint = super::fingerprint(a);
    let policy = match a.policy {
        crate::relay::Policy::WaitForAll => Policy::WaitForAll {
            abandon_after: Duration::from_secs(10),
        },
        crate::relay::Policy::Deadline => Policy::Deadline {
            missing: MissingInput::RepeatLast,
        },
    };
    Ok(HostedConfig {
        sequencer: SequencerConfig {
            policy,
            tick_rate: a.tick_rate,
            delay: a.delay,
            max_seats: a.players,
            fingerprint: Some(fingerprint),
            // Through the lobby: the match starts once every bot is
            // seated and ready.
            start: Start::Ready { min: a.players },
            // Keys the seats' tokens and the match's id.
            secret: lockstep_net::session_secret().map_err(|e| DemoError::Setup(e.to_string()))?,
            ..SequencerConfig::default()
        },
        client: ClientConfig {
            name,
            room: "demo".into(),
            fingerprint,
            ..HostedConfig::default().client
        },
        ..HostedConfig::default()
    })
}

/// With `--kill-relay-at`, the relay that sequences (its room fails over
/// to the players); otherwise none: the first bot hosts.
fn start_relay(a: &DemoArgs, failover: bool) -> Result<Option<BackgroundRelay>, DemoError> {
    if !failover {
        return Ok(None);
    }
    let mut config = RelayConfig::default();
    config.room_defaults.tick_rate = a.tick_rate;
    config.room_defaults.delay = a.delay;
    config.room_defaults.max_seats = a.players;
    config.room_defaults.policy = a.policy.into();
    config.room_defaults.failover = true;
    config.room_defaults.start = StartName::Ready;
    config.room_defaults.start_players = a.players;
    config.limits.max_udp_per_addr = 256;
    config.limits.handshakes_per_addr = 1000;
    config.limits.stranger_replies_per_addr = 1000;
    let bind = Bind {
        ws: None,
        http: None,
        ..Bind::loopback()
    };
    BackgroundRelay::start(config, bind)
        .map(Some)
        .map_err(|e| DemoError::Setup(e.to_string()))
}

/// The bots, each on a socket of its own: the first hosts unless a relay
/// (at `host_addr`) sequences.
fn start_bots(
    a: &DemoArgs,
    mut host_addr: Option<std::net::SocketAddr>,
    failover: bool,
    clock: &Clock,
) -> Result<Vec<Option<HostBot>>, DemoError> {
    let setup = |e: &dyn std::fmt::Display| DemoError::Setup(e.to_string());
    let mut bots: Vec<Option<HostBot>> = Vec::new();
    for i in 0..usize::from(a.players) {
        let name = format!("bot{i}");
        let mut udp = UdpTransport::bind("127.0.0.1:0")
            .map_err(|e| setup(&e))?
            .accept_unknown(usize::from(a.players) * 2);
        let faults = Faults {
            loss: a.loss / 100.0,
            latency: Duration::from_millis(a.latency),
            jitter: Duration::from_millis(a.jitter),
            ..Faults::default()
        };
        let seed = a.seed.wrapping_mul(31).wrapping_add(i as u64);
        let mut session = match host_addr {
            None => {
                host_addr = Some(udp.local_addr().map_err(|e| setup(&e))?);
                HostedSession::host(hosted_config(a, name.clone())?, clock.now())
            }
            Some(addr) => {
                let host = udp.add_peer(addr);
                let mut config = hosted_config(a, name.clone())?;
                if failover {
                    // Sealed to the relay, as any UDP client of it.
                    config.client.secret =
                        Some(lockstep_net::session_secret().map_err(|e| setup(&e))?);
                }
                HostedSession::join(config, host, clock.now())
            }
        }
        .map_err(|e| setup(&e))?;
        session.set_ready(true);
        let game = Swarm::new(
            Game::with_config(a.seed, game_config(a)),
            None,
            Seat::default(),
        );
        let mut runner = Runner::new(session, game, runner_config()).map_err(|e| setup(&e))?;
        runner.set_last_tick(Some(Tick::new(a.ticks.saturating_sub(1))));
        bots.push(Some(HostBot {
            name,
            runner,
            udp: FaultyTransport::new(udp, faults, seed),
            bot: None,
            buffers: Buffers::default(),
            told: 0,
        }));
    }
    Ok(bots)
}

/// Says what is about to be played.
fn announce(a: &DemoArgs) {
    let link = if a.loss > 0.0 || a.latency > 0 || a.jitter > 0 {
        format!(
            " ({}% loss, {} ± {} ms each way)",
            a.loss, a.latency, a.jitter
        )
    } else {
        String::new()
    };
    match a.kill_relay_at {
        Some(t) => println!(
            "failover: a relay sequences {} bots over loopback UDP{link} in a room with failover on, {} ticks at {} Hz; the relay stops dead at tick {t}",
            a.players, a.ticks, a.tick_rate
        ),
        None => println!(
            "host mode: bot0 hosts {} bots over loopback UDP{link}, {} ticks at {} Hz{}",
            a.players,
            a.ticks,
            a.tick_rate,
            a.kill_host_at.map_or(String::new(), |t| format!(
                "; bot0's process dies at tick {t}"
            ))
        ),
    }
}

/// What the match showed besides the bots' states.
#[derive(Debug, Default)]
struct Ran {
    /// How long after the host (or relay) died the match went on.
    pause: Option<Duration>,
    /// Takeover messages the bots did not act on, by reason.
    ignored: std::collections::BTreeMap<String, u32>,
}

/// Plays the match, killing the host or the relay when the flags say,
/// until every bot left has run `--ticks` ticks.
fn play(
    a: &DemoArgs,
    bots: &mut [Option<HostBot>],
    relay: &mut Option<BackgroundRelay>,
    clock: &Clock,
) -> Result<Ran, DemoError> {
    let failover = a.kill_relay_at.is_some();
    let gone = if failover { "the relay" } else { "the host" };
    let period = Duration::from_secs(1) / a.tick_rate;
    let deadline = Instant::now() + period * a.ticks * 3 + Duration::from_secs(30);
    let mut killed: Option<Instant> = None;
    let mut pause: Option<Duration> = None;
    // Takeover messages the bots did not act on, by reason.
    let mut ignored: std::collections::BTreeMap<String, u32> = std::collections::BTreeMap::new();
    loop {
        let all_done = bots
            .iter()
            .flatten()
            .all(|b| b.game().tick.get() >= a.ticks);
        if all_done {
            break;
        }
        if Instant::now() > deadline {
            println!("FAILED: not every bot reached tick {}", a.ticks);
            return Err(DemoError::Timeout);
        }
        // A kill waits until every bot is seated and knows the roster (who
        // could take over): before that there is no match to carry on.
        let seated = bots
            .iter()
            .flatten()
            .all(|b| b.session().client().roster().count() >= usize::from(a.players));
        for (i, slot) in bots.iter_mut().enumerate() {
            let Some(b) = slot else { continue };
            if i == 0
                && killed.is_none()
                && seated
                && a.kill_relay_at.is_some_and(|t| b.game().tick.get() >= t)
                && let Some(r) = relay.take()
            {
                println!(
                    "tick {}: the relay stops dead (no goodbye, as if its process died)",
                    b.game().tick.get()
                );
                let _ = r.kill();
                killed = Some(Instant::now());
            }
            if i == 0
                && killed.is_none()
                && seated
                && a.kill_host_at.is_some_and(|t| b.game().tick.get() >= t)
            {
                println!(
                    "tick {}: bot0's process dies (the host: session and socket gone, no goodbye)",
                    b.game().tick.get()
                );
                *slot = None;
                killed = Some(Instant::now());
                continue;
            }
            if b.bot.is_none() {
                b.bot = b.session().seat().map(|s| Bot::new(s, u64::from(s.0) + 1));
            }
            // One commit per tick run, on a steady clock (see the relay
            // demo's bots); far behind, catching up without it.
            let bot = &mut b.bot;
            let turned = turn_hosted(
                &mut b.runner,
                &mut b.udp,
                clock.now(),
                &mut b.buffers,
                |g| {
                    bot.as_mut()
                        .map_or_else(PlayerInputs::default, |bot| bot.input(&g.game))
                },
            );
            if let Err(TurnError::Runner(e)) = turned {
                return Err(DemoError::Refused(b.name.clone(), e.to_string()));
            }
            let changes = &b.runner.game().host_changes;
            for &(tick, player) in &changes[b.told..] {
                if b.runner.session().hosting() {
                    let after = killed.map(|k| k.elapsed());
                    pause = pause.or(after);
                    println!(
                        "tick {tick}: {} hosts now (seat {}){}",
                        b.name,
                        player.0,
                        after.map_or(String::new(), |d| format!(
                            ", {} ms after {gone} died",
                            d.as_millis()
                        ))
                    );
                }
            }
            b.told = changes.len();
            while b.runner.poll_event().is_some() {}
            while let Some((_, why)) = b.runner.session_mut().poll_ignored() {
                *ignored.entry(why.to_string()).or_insert(0u32) += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(Ran { pause, ignored })
}

/// The table of every bot left; returns their state hashes.
fn print_table(bots: &[Option<HostBot>]) -> Vec<u64> {
    println!();
    println!(
        "{:<6} {:>4} {:>6} {:>7}  state hash",
        "player", "seat", "tick", "hosts"
    );
    let mut hashes = Vec::new();
    for b in bots.iter().flatten() {
        let hash = b.game().hash();
        println!(
            "{:<6} {:>4} {:>6} {:>7}  {:016x}",
            b.name,
            b.session().seat().map_or("-".into(), |s| s.0.to_string()),
            b.game().tick.get(),
            if b.session().hosting() { "yes" } else { "" },
            hash
        );
        hashes.push(hash);
    }
    hashes
}

/// Whether the match went on after its host (or relay) died, on one state.
fn judge(a: &DemoArgs, hashes: &[u64], ran: &Ran, started: Instant) -> Result<(), DemoError> {
    let failover = a.kill_relay_at.is_some();
    let (pause, ignored) = (ran.pause, &ran.ignored);
    for (why, n) in ignored {
        println!("ignored {n} time{}: {why}", if *n == 1 { "" } else { "s" });
    }
    if (a.kill_host_at.is_some() || failover) && pause.is_none() {
        println!("FAILED: nobody took the match over");
        return Err(DemoError::Desync);
    }
    if !hashes.windows(2).all(|w| w[0] == w[1]) {
        println!("FAILED: the bots ended on different states");
        return Err(DemoError::Desync);
    }
    if hashes.len() == 1 {
        println!("(one bot left: nothing to compare its state with)");
    }
    println!(
        "OK: {} bot{} ran {} ticks and ended on the same state {:016x}{}; {:.1} s",
        hashes.len(),
        if hashes.len() == 1 { "" } else { "s" },
        a.ticks,
        hashes.first().copied().unwrap_or(0),
        pause.map_or(String::new(), |p| format!(
            " (the match went on {} ms after {} died)",
            p.as_millis(),
            if failover { "its relay" } else { "its host" }
        )),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
