//! `lockstep bench relay`: how many clients this machine's relay serves in
//! time.
//!
//! The relay runs in this process; the clients run in a second process (this
//! same binary, `bench relay-clients`), each on its own loopback UDP socket,
//! in rooms of `room_size` at `tick_rate`. The load doubles step by step
//! while the p99 time from sealing a tick to its last send stays under the
//! target.

use clap::{Args, Subcommand};
use lockstep_core::PlayerInputs;
use lockstep_core::sequenced::{ClientConfig, ClientSession};
use lockstep_core::wire::InputCodec;
use lockstep_net::{Clock, UdpTransport, drive};
use lockstep_relay::{BackgroundRelay, Bind, Metrics, PolicyName, RelayConfig};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, Subcommand)]
enum What {
    /// Find the most clients the relay serves with p99 seal-to-send under
    /// the target.
    Relay(RelayBench),
    /// (internal) Drive clients against a relay for the benchmark.
    #[command(hide = true)]
    RelayClients(Clients),
}

#[derive(Debug, Args)]
struct RelayBench {
    /// Players per room (1 to 256).
    #[arg(long, default_value_t = 8, value_parser = seats)]
    room_size: usize,
    /// Ticks per second (1 to 1000).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=1000))]
    tick_rate: u32,
    /// Clients in the first step (doubled each step).
    #[arg(long, default_value_t = 8)]
    start: usize,
    /// Stop after this many clients.
    #[arg(long, default_value_t = 4096)]
    max_clients: usize,
    /// Seconds measured per step (after a second of joining).
    #[arg(long, default_value_t = 5)]
    step_secs: u64,
    /// The p99 seal-to-last-send target, in microseconds.
    #[arg(long, default_value_t = 2000)]
    target_p99_us: u64,
    /// Plain UDP datagrams instead of sealed ones (to compare their cost).
    #[arg(long)]
    plain: bool,
}

fn seats(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=256).contains(&n) => Ok(n),
        _ => Err(format!("{s:?} is not a room size from 1 to 256")),
    }
}

#[derive(Debug, Args)]
struct Clients {
    #[arg(long)]
    addr: SocketAddr,
    #[arg(long)]
    clients: usize,
    #[arg(long)]
    room_size: usize,
    #[arg(long)]
    tick_rate: u32,
    #[arg(long)]
    secs: u64,
    /// Room names start after this step number, so steps never share rooms.
    #[arg(long)]
    step: usize,
    /// Plain datagrams instead of sealed ones.
    #[arg(long)]
    plain: bool,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum BenchError {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("the relay failed: {0}")]
    Relay(String),
    #[error("the client process failed: {0}")]
    Clients(String),
}

pub(crate) fn main(args: BenchArgs) -> Result<(), BenchError> {
    match args.what {
        What::Relay(a) => relay(a),
        What::RelayClients(c) => clients(c),
    }
}

/// One step's figures.
struct Step {
    clients: usize,
    p50: Option<u64>,
    p99: Option<u64>,
    ticks_per_sec: f64,
    in_per_sec: f64,
    out_per_sec: f64,
    on_time: f64,
    /// The share of ticks the client process managed to commit input for.
    commits: f64,
}

fn relay(a: RelayBench) -> Result<(), BenchError> {
    let mut config = RelayConfig::default();
    config.room_defaults.policy = PolicyName::Deadline;
    config.room_defaults.tick_rate = a.tick_rate;
    config.room_defaults.max_seats = a.room_size.min(256) as u16;
    config.limits.max_connections = a.max_clients * 2;
    config.limits.max_rooms = a.max_clients;
    // Every client comes from one loopback address.
    config.limits.max_udp_per_addr = a.max_clients * 2;
    config.limits.handshakes_per_addr = u32::MAX;
    config.limits.handshakes_per_sec = u32::MAX;
    config.limits.stranger_replies_per_addr = u32::MAX;
    config.limits.stranger_replies_per_sec = u32::MAX;
    config.plain_udp = a.plain;
    let bind = Bind {
        udp: Bind::loopback().udp,
        ..Bind::default()
    };
    let relay =
        BackgroundRelay::start(config, bind).map_err(|e| BenchError::Relay(e.to_string()))?;
    let addr = relay
        .udp
        .ok_or_else(|| BenchError::Relay("no UDP listener".into()))?;
    let metrics = relay.metrics().clone();
    println!(
        "relay capacity: rooms of {} at {} Hz, clients in a separate process over loopback UDP ({}); target p99 seal-to-last-send < {} us",
        a.room_size,
        a.tick_rate,
        if a.plain {
            "plain datagrams"
        } else {
            "sealed datagrams"
        },
        a.target_p99_us
    );
    println!();
    println!(
        "| clients | rooms | p50 | p99 | ticks/s | datagrams in/s | datagrams out/s | clients on time |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    let exe = std::env::current_exe()?;
    let mut best: Option<usize> = None;
    let mut failed: Option<usize> = None;
    let mut n = a.start.max(a.room_size);
    let mut step = 0;
    // Double until a step fails, then bisect (in whole rooms) between the
    // last good load and the first bad one.
    while n <= a.max_clients {
        let s = run_step(&exe, addr, &a, n, step, &metrics)?;
        step += 1;
        let show = |q: Option<u64>| q.map_or("> 10 ms".into(), |us| format!("<= {us} us"));
        println!(
            "| {} | {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.1}% |",
            s.clients,
            s.clients.div_ceil(a.room_size),
            show(s.p50),
            show(s.p99),
            s.ticks_per_sec,
            s.in_per_sec,
            s.out_per_sec,
            s.on_time * 100.0
        );
        // Every committed input is one datagram: fewer arriving means the
        // relay is dropping input, however fast it sends.
        let expected_in = s.clients as f64 * f64::from(a.tick_rate) * s.commits;
        let verdict = if s.commits < 0.95 {
            Some(format!(
                "the client process committed only {:.0}% of its inputs: the load generator is the limit",
                s.commits * 100.0
            ))
        } else if s.in_per_sec < expected_in * 0.95 {
            Some(format!(
                "the relay took {:.0} of {:.0} input datagrams per second: it is dropping input",
                s.in_per_sec, expected_in
            ))
        } else if s.p99.is_none_or(|p| p >= a.target_p99_us) {
            Some("p99 over the target".to_owned())
        } else if s.on_time < 0.95 {
            Some("clients fell behind the tick rate".to_owned())
        } else {
            None
        };
        match verdict {
            None => best = Some(n),
            Some(why) => {
                println!("|   | ({why}) | | | | | | |");
                failed = Some(n);
            }
        }
        let rooms = |c: usize| c.div_ceil(a.room_size);
        n = match (best, failed) {
            (Some(b), Some(f)) if rooms(f) - rooms(b) > rooms(b) / 8 + 1 => {
                (rooms(b) + rooms(f)) / 2 * a.room_size
            }
            (_, Some(_)) => break,
            (Some(b), None) => b * 2,
            (None, None) => break,
        };
    }
    relay.stop().map_err(|e| BenchError::Relay(e.to_string()))?;
    Ok(())
}

fn run_step(
    exe: &std::path::Path,
    addr: SocketAddr,
    a: &RelayBench,
    n: usize,
    step: usize,
    metrics: &Metrics,
) -> Result<Step, BenchError> {
    // Start from an empty relay: the last step's rooms must be gone.
    let deadline = Instant::now() + Duration::from_secs(30);
    while (metrics.players.load(Ordering::Relaxed) > 0
        || metrics.spectators.load(Ordering::Relaxed) > 0)
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut child = Command::new(exe)
        .args(["bench", "relay-clients", "--addr", &addr.to_string()])
        .args([
            "--clients",
            &n.to_string(),
            "--room-size",
            &a.room_size.to_string(),
        ])
        .args([
            "--tick-rate",
            &a.tick_rate.to_string(),
            "--secs",
            &(a.step_secs + 2).to_string(),
        ])
        .args(["--step", &step.to_string()])
        .args(a.plain.then_some("--plain"))
        .stdout(Stdio::piped())
        .spawn()?;
    // Let everyone join and settle, then measure.
    std::thread::sleep(Duration::from_millis(1500));
    let lat0 = metrics.latency_snapshot();
    let ticks0 = metrics.ticks.load(Ordering::Relaxed);
    let in0 = metrics.datagrams_in.load(Ordering::Relaxed);
    let out0 = metrics.datagrams_out.load(Ordering::Relaxed);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(a.step_secs));
    let secs = t0.elapsed().as_secs_f64();
    let lat: Vec<u64> = metrics
        .latency_snapshot()
        .iter()
        .zip(&lat0)
        .map(|(b, a)| b - a)
        .collect();
    let ticks = metrics.ticks.load(Ordering::Relaxed) - ticks0;
    let din = metrics.datagrams_in.load(Ordering::Relaxed) - in0;
    let dout = metrics.datagrams_out.load(Ordering::Relaxed) - out0;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        BufReader::new(out).read_line(&mut line)?;
    }
    let status = child.wait()?;
    if !status.success() {
        return Err(BenchError::Clients(format!("exit status {status}")));
    }
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(name))
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| BenchError::Clients(format!("unexpected output {line:?}")))
    };
    let on_time = field("on_time=")?;
    let commits = field("commits=")?;
    Ok(Step {
        clients: n,
        p50: Metrics::quantile_of(&lat, 0.50),
        p99: Metrics::quantile_of(&lat, 0.99),
        ticks_per_sec: ticks as f64 / secs,
        in_per_sec: din as f64 / secs,
        out_per_sec: dout as f64 / secs,
        on_time,
        commits,
    })
}

/// The client process: `clients` players, paced at the tick rate, for
/// `secs` seconds; prints the share of expected frames they ran.
fn clients(c: Clients) -> Result<(), BenchError> {
    let clock = Clock::new();
    let mut players = Vec::with_capacity(c.clients);
    for i in 0..c.clients {
        let mut t = UdpTransport::bind("127.0.0.1:0")?;
        let server = t.add_peer(c.addr);
        let config = ClientConfig {
            room: format!("bench-{}-{}", c.step, i / c.room_size.max(1)),
            name: format!("bot{i}"),
            codec: InputCodec::PlayerInputs,
            secret: if c.plain {
                None
            } else {
                Some(
                    lockstep_net::session_secret()
                        .map_err(|e| BenchError::Clients(e.to_string()))?,
                )
            },
            ..ClientConfig::default()
        };
        let s = ClientSession::<PlayerInputs>::new(config, server, clock.now())
            .map_err(|e| BenchError::Clients(e.to_string()))?;
        players.push((t, s, 0u64));
    }
    let period = Duration::from_secs(1) / c.tick_rate.max(1);
    let start = Instant::now();
    let end = start + Duration::from_secs(c.secs);
    let mut scratch = lockstep_net::Buffers::default();
    let mut tick = 0u64;
    let mut next = start;
    let mut sent = 0u64;
    while Instant::now() < end {
        let now = clock.now();
        let due = Instant::now() >= next;
        for (k, (t, s, frames)) in players.iter_mut().enumerate() {
            let _ = drive(s, t, now, &mut scratch);
            if due {
                let input = PlayerInputs::default()
                    .with_movement(((tick + k as u64) % 7) as f32 / 7.0, 0.0);
                if s.commit_local(input).is_ok() {
                    sent += 1;
                }
            }
            while s.advance().is_some() {
                *frames += 1;
            }
            let _ = drive(s, t, now, &mut scratch);
        }
        if due {
            tick += 1;
            next += period;
        }
        std::thread::sleep(Duration::from_micros(300));
    }
    let elapsed = start.elapsed().as_secs_f64();
    // Say goodbye (thrice, against loss) so the relay frees the rooms at
    // once instead of sealing for nobody until they time out.
    for _ in 0..3 {
        for (t, s, _) in &mut players {
            s.leave();
            let _ = drive(s, t, clock.now(), &mut scratch);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Frames a client joined within the first second should have run.
    let expected = (elapsed - 1.0).max(0.1) * f64::from(c.tick_rate) * players.len() as f64;
    let ran: u64 = players.iter().map(|(_, _, f)| *f).sum();
    let wanted = elapsed * f64::from(c.tick_rate) * players.len() as f64;
    println!(
        "on_time={:.4} commits={:.4}",
        (ran as f64 / expected).min(1.0),
        (sent as f64 / wanted).min(1.0)
    );
    Ok(())
}
