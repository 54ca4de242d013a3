//! `lockstep bench relay`: how many clients relays on this machine serve
//! with frames reaching their players in time, measured at the players.
//!
//! The relays run as a `lockstep relay` process of their own (one relay,
//! or `--relays N` behind a room directory in a Redis this benchmark
//! starts); the players run in this process, on as many threads as the
//! machine has cores, each a real `ClientSession` on its own loopback UDP
//! socket, woken by the operating system when a datagram arrives. Rooms of
//! `room_size` run `Deadline` at `tick_rate`: a room seals tick `T` at a
//! fixed moment, its clock's start plus `T` periods. A player times each
//! frame from that moment to the frame's arrival: the start is inferred
//! as the earliest arrival over the measured window (taken as on time)
//! less the way from relay to player, half the quickest loopback round
//! trip. The load doubles
//! step by step while the p99 of that time stays under the target; the
//! relay's CPU time per client-tick comes from the operating system.

use clap::{Args, Subcommand};
use lockstep_core::sequenced::{ClientConfig, ClientSession};
use lockstep_core::{PeerId, PlayerInputs};
use lockstep_relay::directory::{Directory, LocalRedis, RedisDirectory};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, Subcommand)]
enum What {
    /// Find the most clients relays serve with p99 end-to-end latency at
    /// the players under the target, for one relay and for several behind
    /// a room directory.
    Relay(RelayBench),
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
    #[arg(long, default_value_t = 64)]
    start: usize,
    /// Stop after this many clients.
    #[arg(long, default_value_t = 4096)]
    max_clients: usize,
    /// Seconds measured per step (after the players joined).
    #[arg(long, default_value_t = 5)]
    step_secs: u64,
    /// The p99 end-to-end target at the players, in microseconds.
    #[arg(long, default_value_t = 2000)]
    target_p99_us: u64,
    /// Plain UDP datagrams instead of sealed ones (to compare their cost).
    #[arg(long)]
    plain: bool,
    /// How many relays to measure, in one run, comma-separated: 1 is a
    /// relay alone; more are one process of that many relays (one per
    /// core) behind a room directory in Redis.
    #[arg(long, value_delimiter = ',', default_value = "1,2", value_parser = clap::value_parser!(u16).range(1..=64))]
    relays: Vec<u16>,
    /// Player threads (one per core unless told).
    #[arg(long)]
    threads: Option<usize>,
}

fn seats(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=256).contains(&n) => Ok(n),
        _ => Err(format!("{s:?} is not a room size from 1 to 256")),
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum BenchError {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("the relay failed: {0}")]
    Relay(String),
    #[error("the players failed: {0}")]
    Clients(String),
}

pub(crate) fn main(args: BenchArgs) -> Result<(), BenchError> {
    match args.what {
        What::Relay(a) => relay(&a),
    }
}

/// One step's figures.
struct Step {
    clients: usize,
    /// End-to-end at the players, microseconds.
    p50: Option<u32>,
    p99: Option<u32>,
    /// The relays' CPU time per client-tick (one frame reaching one
    /// player), nanoseconds.
    cpu_per_client_tick: Option<f64>,
    /// The relays' CPU, in cores busy.
    cores: Option<f64>,
    /// The share of expected frames the players ran in the window.
    on_time: f64,
    /// The share of ticks the players committed input for.
    commits: f64,
    /// Rooms on each relay, as the directory says (a fleet only).
    spread: Vec<u32>,
}

fn relay(a: &RelayBench) -> Result<(), BenchError> {
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, usize::from))
        .max(1);
    println!(
        "relay capacity: rooms of {} at {} Hz ({}), players on {threads} threads of this process over loopback UDP; target p99 end to end at the players < {} us",
        a.room_size,
        a.tick_rate,
        if a.plain {
            "plain datagrams"
        } else {
            "sealed datagrams"
        },
        a.target_p99_us
    );
    let redis = if a.relays.iter().any(|n| *n > 1) {
        match LocalRedis::start() {
            Ok(r) => Some(r),
            Err(e) => {
                println!("no redis-server ({e}; scripts/test-deps installs it): one relay only");
                None
            }
        }
    } else {
        None
    };
    let mut found = Vec::new();
    for &n in &a.relays {
        if n > 1 && redis.is_none() {
            continue;
        }
        println!();
        if n == 1 {
            println!("### One relay");
        } else {
            println!("### {n} relays (one process, a thread each) behind the room directory");
        }
        println!();
        println!(
            "| clients | rooms | p50 | p99 | relay CPU per client-tick | relay cores busy | frames on time | rooms per relay |"
        );
        println!("|---:|---:|---:|---:|---:|---:|---:|---|");
        let best = search(a, n, threads, redis.as_ref())?;
        found.push((n, best));
    }
    println!();
    let base = found.iter().find(|(n, _)| *n == 1).and_then(|(_, b)| *b);
    for (n, best) in &found {
        let ratio = match (best, base) {
            (Some(b), Some(base)) if base > 0 => {
                format!(" ({:.2}x one relay)", *b as f64 / base as f64)
            }
            _ => String::new(),
        };
        match best {
            Some(b) => println!(
                "{n} relay(s): {b} clients at p99 end to end under {} us{ratio}",
                a.target_p99_us
            ),
            None => println!("{n} relay(s): no step passed"),
        }
    }
    Ok(())
}

/// Doubles the load until a step fails (twice in a row), then bisects (in
/// whole rooms) between the last good load and the first bad one; the
/// best load.
fn search(
    a: &RelayBench,
    relays: u16,
    threads: usize,
    redis: Option<&LocalRedis>,
) -> Result<Option<usize>, BenchError> {
    let mut best: Option<usize> = None;
    let mut failed: Option<usize> = None;
    let mut n = a.start.max(a.room_size);
    let mut again = false;
    while n <= a.max_clients {
        let s = run_step(a, relays, threads, redis, n)?;
        let us = |q: Option<u32>| q.map_or("n/a".into(), |us| format!("{us} us"));
        println!(
            "| {} | {} | {} | {} | {} | {} | {:.1}% | {} |",
            s.clients,
            s.clients.div_ceil(a.room_size),
            us(s.p50),
            us(s.p99),
            s.cpu_per_client_tick
                .map_or("n/a".into(), |ns| format!("{:.1} us", ns / 1000.0)),
            s.cores.map_or("n/a".into(), |c| format!("{c:.2}")),
            s.on_time * 100.0,
            if s.spread.is_empty() {
                "-".to_owned()
            } else {
                s.spread
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(" / ")
            },
        );
        let verdict = if s.commits < 0.95 {
            Some(format!(
                "the players committed only {:.0}% of their inputs: the load generator is the limit",
                s.commits * 100.0
            ))
        } else if s.p99.is_none_or(|p| u64::from(p) >= a.target_p99_us) {
            Some("p99 over the target".to_owned())
        } else if s.on_time < 0.95 {
            Some("players fell behind the tick rate".to_owned())
        } else {
            None
        };
        match verdict {
            None => best = Some(n),
            // A step that fails is run once more: a moment of this shared
            // machine's (another process, a page fault storm) puts a
            // hundred milliseconds into every player's p99.
            Some(why) if !again => {
                println!("|   | ({why}: once more) | | | | | | |");
                again = true;
                continue;
            }
            Some(why) => {
                println!("|   | ({why}) | | | | | | |");
                failed = Some(n);
            }
        }
        again = false;
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
    Ok(best)
}

/// The relays under test: a `lockstep relay` process.
struct Relays {
    child: Child,
    udp: Vec<SocketAddr>,
    file: PathBuf,
}

impl Relays {
    /// `relays` relays for up to `clients` players (in a fleet on `redis`
    /// when more than one).
    fn start(
        a: &RelayBench,
        relays: u16,
        clients: usize,
        redis: Option<&LocalRedis>,
    ) -> Result<Self, BenchError> {
        // Every player comes from one loopback address: no per-address caps.
        let file = std::env::temp_dir().join(format!(
            "lockstep-bench-relay-{}-{clients}.toml",
            std::process::id()
        ));
        let config = format!(
            "plain_udp = {plain}\n\
             [limits]\n\
             max_rooms = {rooms}\n\
             max_connections = {conns}\n\
             max_udp_per_addr = {conns}\n\
             handshakes_per_addr = {max}\n\
             handshakes_per_sec = {max}\n\
             stranger_replies_per_addr = {max}\n\
             stranger_replies_per_sec = {max}\n\
             [room_defaults]\n\
             policy = \"deadline\"\n\
             tick_rate = {rate}\n\
             max_seats = {seats}\n",
            plain = a.plain,
            rooms = clients.max(1),
            conns = clients * 2 + 16,
            max = u32::MAX,
            rate = a.tick_rate,
            seats = a.room_size,
        );
        std::fs::write(&file, config)?;
        let exe = std::env::current_exe()?;
        let mut cmd = Command::new(exe);
        cmd.args([
            "relay",
            "--udp",
            "127.0.0.1:0",
            "--ws",
            "off",
            "--http",
            "off",
        ])
        .arg("--config")
        .arg(&file);
        let url = redis.map(LocalRedis::url);
        if let Some(url) = &url {
            let n = relays.to_string();
            cmd.args(["--directory", url, "--relay-id", "bench", "--relays", &n])
                .args(["--lease", "1"]);
        }
        let mut child = cmd
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let mut out = BufReader::new(
            child
                .stdout
                .take()
                .ok_or_else(|| BenchError::Relay("no stdout".into()))?,
        );
        let mut udp = Vec::new();
        for _ in 0..relays {
            let mut line = String::new();
            out.read_line(&mut line)?;
            let addr = line
                .split_whitespace()
                .find_map(|f| f.strip_prefix("udp="))
                .and_then(|a| a.parse().ok())
                .ok_or_else(|| BenchError::Relay(format!("no UDP address in {line:?}")))?;
            udp.push(addr);
        }
        Ok(Self { child, udp, file })
    }

    /// CPU time the relay process has used, in nanoseconds: the sum of
    /// its threads' time on a CPU (Linux's schedstat); `None` elsewhere.
    fn cpu_ns(&self) -> Option<u64> {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.child.id())).ok()?;
        let mut sum = 0u64;
        for t in tasks.flatten() {
            let stat = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
            sum += stat.split_whitespace().next()?.parse::<u64>().ok()?;
        }
        Some(sum)
    }
}

impl Drop for Relays {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.file);
    }
}

fn run_step(
    a: &RelayBench,
    relays: u16,
    threads: usize,
    redis: Option<&LocalRedis>,
    n: usize,
) -> Result<Step, BenchError> {
    // Fresh relays and a fresh directory each step: no room outlives it.
    let prefix = format!("bench-{n}-");
    let under_test = Relays::start(a, relays, n, redis)?;
    // Joining takes a second, and in a fleet a claim and a redirect more.
    let join = Duration::from_millis(if relays > 1 { 2500 } else { 1500 });
    let window = Duration::from_secs(a.step_secs);
    let t0 = Instant::now();
    let plan = Plan {
        relays: under_test.udp.clone(),
        clients: n,
        room_size: a.room_size,
        period: Duration::from_secs(1) / a.tick_rate,
        plain: a.plain,
        prefix,
        start: t0,
        way: loopback_way()?,
        window_start: t0 + join,
        end: t0 + join + window,
    };
    let players: Vec<_> = (0..threads)
        .map(|k| {
            let plan = plan.clone();
            std::thread::spawn(move || players(&plan, k, threads))
        })
        .collect();
    std::thread::sleep(plan.window_start.saturating_duration_since(Instant::now()));
    let cpu0 = under_test.cpu_ns();
    std::thread::sleep(plan.end.saturating_duration_since(Instant::now()));
    let cpu1 = under_test.cpu_ns();
    let spread = match redis {
        Some(r) if relays > 1 => spread(r).unwrap_or_default(),
        _ => Vec::new(),
    };
    let mut all = Outcome::default();
    for t in players {
        let o = t
            .join()
            .map_err(|_| BenchError::Clients("a player thread panicked".into()))??;
        all.merge(o);
    }
    drop(under_test);
    all.e2e_us.sort_unstable();
    let q = |p: f64| {
        (!all.e2e_us.is_empty()).then(|| all.e2e_us[((all.e2e_us.len() - 1) as f64 * p) as usize])
    };
    let secs = window.as_secs_f64();
    let expected = n as f64 * secs / plan.period.as_secs_f64();
    let cpu = cpu0.zip(cpu1).map(|(a, b)| b.saturating_sub(a));
    Ok(Step {
        clients: n,
        p50: q(0.50),
        p99: q(0.99),
        cpu_per_client_tick: cpu
            .filter(|_| all.frames > 0)
            .map(|ns| ns as f64 / all.frames as f64),
        cores: cpu.map(|ns| ns as f64 / 1e9 / secs),
        on_time: (all.frames as f64 / expected).min(1.0),
        commits: if all.wanted == 0 {
            0.0
        } else {
            (all.committed as f64 / all.wanted as f64).min(1.0)
        },
        spread,
    })
}

/// Half the quickest of 200 round trips between two loopback UDP
/// sockets: what the kernel's path from the relay to a player costs at
/// least. (A session's own round trip counts both ends' loops, hundreds of
/// microseconds more.)
fn loopback_way() -> Result<Duration, BenchError> {
    let a = std::net::UdpSocket::bind("127.0.0.1:0")?;
    let b = std::net::UdpSocket::bind("127.0.0.1:0")?;
    a.connect(b.local_addr()?)?;
    b.connect(a.local_addr()?)?;
    for s in [&a, &b] {
        s.set_read_timeout(Some(Duration::from_secs(1)))?;
    }
    let mut buf = [0u8; 64];
    let mut best = Duration::MAX;
    for _ in 0..200 {
        let t = Instant::now();
        a.send(&[1; 60])?;
        let n = b.recv(&mut buf)?;
        b.send(&buf[..n])?;
        a.recv(&mut buf)?;
        best = best.min(t.elapsed());
    }
    Ok(best / 2)
}

/// Rooms on each relay, as the directory says.
fn spread(redis: &LocalRedis) -> Option<Vec<u32>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    rt.block_on(async {
        let dir = RedisDirectory::open(&redis.url(), "lockstep:").ok()?;
        let relays = dir.relays().await.ok()?;
        Some(relays.iter().map(|r| r.rooms).collect())
    })
}

/// How long after its first frame a player's frames are timed.
const SETTLE: Duration = Duration::from_millis(500);

/// What every player thread is told.
#[derive(Debug, Clone)]
struct Plan {
    relays: Vec<SocketAddr>,
    clients: usize,
    room_size: usize,
    period: Duration,
    plain: bool,
    prefix: String,
    start: Instant,
    /// The way from the relay to a player: half the quickest loopback
    /// round trip (see [`loopback_way`]).
    way: Duration,
    /// Frames arriving from here to `end` are measured.
    window_start: Instant,
    end: Instant,
}

/// What the players of a thread measured.
#[derive(Debug, Default)]
struct Outcome {
    /// Each measured frame's time from its tick's seal to its arrival.
    e2e_us: Vec<u32>,
    /// Frames run in the window.
    frames: u64,
    committed: u64,
    wanted: u64,
}

impl Outcome {
    fn merge(&mut self, o: Self) {
        self.e2e_us.extend(o.e2e_us);
        self.frames += o.frames;
        self.committed += o.committed;
        self.wanted += o.wanted;
    }
}

/// The players of thread `k` of `threads`: every `threads`-th client,
/// each a task on this thread's runtime, woken when its socket is
/// readable.
fn players(plan: &Plan, k: usize, threads: usize) -> Result<Outcome, BenchError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        let tasks: Vec<_> = (k..plan.clients)
            .step_by(threads)
            .map(|i| tokio::task::spawn_local(player(plan.clone(), i)))
            .collect();
        let mut all = Outcome::default();
        for t in tasks {
            let o = t.await.map_err(|e| BenchError::Clients(e.to_string()))??;
            all.merge(o);
        }
        Ok(all)
    })
}

/// Player `i`: joins its room (players join spread over the first second,
/// as a crowd would), commits an input every tick, and times each frame
/// that arrives in the window from its tick's seal (see the module docs).
async fn player(plan: Plan, i: usize) -> Result<Outcome, BenchError> {
    let join_at =
        plan.start + Duration::from_secs(1).mul_f64(i as f64 / plan.clients.max(1) as f64);
    tokio::time::sleep_until(join_at.into()).await;
    let room = i / plan.room_size;
    let relay = plan.relays[room % plan.relays.len()];
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await?;
    sock.connect(relay).await?;
    let secret = if plan.plain {
        None
    } else {
        Some(lockstep_net::session_secret().map_err(|e| BenchError::Clients(e.to_string()))?)
    };
    let config = ClientConfig {
        room: format!("{}{room}", plan.prefix),
        name: format!("bot{i}"),
        secret,
        ..ClientConfig::default()
    };
    let core = |at: Instant| {
        lockstep_core::Instant::from_duration(at.saturating_duration_since(plan.start))
    };
    let mut session = ClientSession::<PlayerInputs>::new(config, PeerId(0), core(join_at))
        .map_err(|e| BenchError::Clients(e.to_string()))?;
    let mut out = Outcome::default();
    let mut seen: Vec<(u32, Instant)> = Vec::new();
    let mut first_frame: Option<Instant> = None;
    let (mut buf, mut tx) = (vec![0u8; 2048], Vec::new());
    let mut next_commit = join_at;
    let mut tick = 0u64;
    loop {
        while let Some(t) = session.poll_transmit(&mut tx) {
            let _ = sock.try_send(&tx[..t.len]);
        }
        // A redirect from a relay of the fleet: the room's relay instead.
        if let Some(to) = session.redirect() {
            sock.connect(to).await?;
            session.follow_redirect(PeerId(0), core(Instant::now()));
            continue;
        }
        let wake = session
            .poll_timeout()
            .map_or(plan.end, |t| {
                plan.start + (t - lockstep_core::Instant::ZERO)
            })
            .min(next_commit)
            .min(plan.end);
        tokio::select! {
            r = sock.recv(&mut buf) => {
                let at = Instant::now();
                let Ok(n) = r else { continue };
                let _ = session.handle_datagram(PeerId(0), &buf[..n], core(at));
                while let Some(f) = session.advance() {
                    // Frames that catch a joiner up come in a burst, late
                    // by design: timed from half a second after the first.
                    let settled = *first_frame.get_or_insert(at) + SETTLE;
                    if at >= plan.window_start && at < plan.end {
                        out.frames += 1;
                        if at >= settled {
                            seen.push((f.tick.get(), at));
                        }
                    }
                }
            }
            () = tokio::time::sleep_until(wake.into()) => {
                let now = Instant::now();
                if now >= plan.end {
                    break;
                }
                session.handle_timeout(core(now));
                if now >= next_commit {
                    if session.seat().is_some() {
                        let input = PlayerInputs::default()
                            .with_movement(((tick + i as u64) % 7) as f32 / 7.0, 0.0);
                        if now >= plan.window_start {
                            out.wanted += 1;
                        }
                        if session.commit_local(input).is_ok() && now >= plan.window_start {
                            out.committed += 1;
                        }
                        tick += 1;
                    }
                    next_commit += plan.period;
                }
            }
        }
    }
    // No goodbye: the step's relays are stopped with it.
    // The seal of tick T is its room's clock start plus T periods: the
    // start, on our clock, is where the earliest frame arrived (taken as
    // on time) less the way here.
    let way = plan.way;
    let offset = |(t, at): &(u32, Instant)| {
        at.saturating_duration_since(plan.start)
            .as_nanos()
            .saturating_sub(plan.period.as_nanos() * u128::from(*t))
    };
    if let Some(earliest) = seen.iter().map(offset).min() {
        out.e2e_us = seen
            .iter()
            .map(|s| {
                let late = Duration::from_nanos((offset(s) - earliest) as u64) + way;
                u32::try_from(late.as_micros()).unwrap_or(u32::MAX)
            })
            .collect();
    }
    Ok(out)
}
