//! `lockstep netsim`: a UDP link conditioner between clients and a server,
//! so any client and relay can be tried over a bad network without root or
//! kernel modules.
//!
//! Clients send to `--listen` as if it were the server. Each client address
//! gets a socket of its own towards `--upstream` (so the server sees one
//! address per client, as through a NAT), and what the server answers goes
//! back to that client. Both directions are impaired alike, each by its own
//! [`ImpairedLink`], and a [`FaultScript`] may change the impairment over
//! time.

use clap::Args;
use lockstep_net::{FaultScript, Faults, ImpairedLink, LinkCounts, ScriptError};
use std::collections::HashMap;
use std::future::Future;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Clients served at once; datagrams from more are dropped.
const MAX_CLIENTS: usize = 1024;
/// A client silent this long (both ways) is forgotten.
const CLIENT_IDLE: Duration = Duration::from_secs(60);
/// Datagrams from the server waiting for the proxy's loop at most.
const FROM_SERVER_QUEUE: usize = 4096;

#[derive(Debug, Args)]
#[command(after_help = "Changes over time (--script): steps separated by `;`, \
each `after DURATION:` (from the start) then KEY=VALUE settings separated by \
spaces (no spaces around `=`), each step starting from the one before; the \
first step may leave out `after` to change the start. Keys: loss, duplicate, \
reorder (percent: 5 or 5%), latency, jitter (with a unit: 40ms, 1.5s), \
bandwidth (512kbit, 2mbit, 64kB, or off). Example: --latency 40 --script \
'after 20s: latency=200ms; after 40s: latency=40ms'

Reports count since the start, each way: datagrams in, lost (at random), \
dropped (a full queue at --bandwidth, or over 4,096 held or 16 MiB), \
duplicated, delivered, and still in flight.")]
pub(crate) struct NetsimArgs {
    /// Where clients send, as if it were the server (port 0: any free one;
    /// the address taken is printed first).
    #[arg(long, default_value = "127.0.0.1:7001")]
    listen: SocketAddr,
    /// The server datagrams go on to (IP:port).
    #[arg(long)]
    upstream: SocketAddr,
    /// Loss each way, in percent (0 to 100).
    #[arg(long, default_value_t = 0.0, value_parser = percent)]
    loss: f64,
    /// Added one-way latency, in milliseconds (at most 60,000).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    latency: u64,
    /// Latency varies by up to this much either way, in milliseconds (at
    /// most 60,000); this also reorders datagrams.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    jitter: u64,
    /// Datagrams delivered twice, in percent (0 to 100).
    #[arg(long, default_value_t = 0.0, value_parser = percent)]
    duplicate: f64,
    /// Datagrams delayed by a further random time up to `--latency` plus
    /// `--jitter` (so they arrive after later ones), in percent (0 to
    /// 100).
    #[arg(long, default_value_t = 0.0, value_parser = percent)]
    reorder: f64,
    /// Capacity each way, in kilobits per second (1 to 100,000,000;
    /// unlimited if not given), shared by every client behind this proxy:
    /// one queue to the server and one to the clients, as on one shared
    /// line (run a proxy per client for a link each). What would queue for
    /// more than a second is dropped.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    bandwidth: Option<u64>,
    /// Changes over time (see below).
    #[arg(long)]
    script: Option<String>,
    /// Seeds the impairment.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Stop after this many seconds (runs until Ctrl-C if not given).
    #[arg(long)]
    duration: Option<f64>,
    /// Print what each direction did every this many seconds (0: only when
    /// stopping).
    #[arg(long, default_value_t = 5)]
    report_every: u64,
}

fn percent(s: &str) -> Result<f64, String> {
    percent_up_to(s, 100.0)
}

/// A command-line percentage from 0 to `max`.
pub(crate) fn percent_up_to(s: &str, max: f64) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if (0.0..=max).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not a percentage from 0 to {max}"))
    }
}

/// Why `lockstep netsim` stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NetsimError {
    /// The script does not read.
    #[error("--script: {0}")]
    Script(#[from] ScriptError),
    /// A bad `--duration`.
    #[error("--duration must be a positive number of seconds")]
    Duration,
    /// The listening socket could not be bound.
    #[error("cannot listen on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
    /// The listening socket failed.
    #[error("the listening socket failed: {0}")]
    Io(#[from] std::io::Error),
}

/// One client: its own socket towards the server, and the task reading it.
struct Client {
    socket: Arc<UdpSocket>,
    reader: JoinHandle<()>,
    last: Instant,
}

impl Drop for Client {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

pub(crate) fn main(args: NetsimArgs) -> Result<(), NetsimError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(args))
}

async fn run(a: NetsimArgs) -> Result<(), NetsimError> {
    let base = Faults {
        loss: a.loss / 100.0,
        latency: Duration::from_millis(a.latency),
        jitter: Duration::from_millis(a.jitter),
        duplicate: a.duplicate / 100.0,
        reorder: a.reorder / 100.0,
        bandwidth: a.bandwidth.map(|k| k * 1000 / 8),
    };
    let script = match &a.script {
        Some(text) => FaultScript::parse(&base, text)?,
        None => FaultScript::constant(base),
    };
    let stop_after = match a.duration {
        Some(s) if s.is_finite() && s > 0.0 => Some(Duration::from_secs_f64(s.min(1e9))),
        Some(_) => return Err(NetsimError::Duration),
        None => None,
    };
    let listen = UdpSocket::bind(a.listen)
        .await
        .map_err(|e| NetsimError::Listen(a.listen, e))?;
    let local = listen.local_addr()?;
    let first = script.at(Duration::ZERO).clone();
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "netsim: listening on {local}, forwarding to {}: {}",
            a.upstream,
            describe(&first)
        );
        for (at, f) in script.steps().iter().skip(1) {
            let _ = writeln!(
                out,
                "netsim: after {:.1} s: {}",
                at.as_secs_f64(),
                describe(f)
            );
        }
        let _ = out.flush();
    }
    let report_every = (a.report_every > 0).then(|| Duration::from_secs(a.report_every));
    serve(
        listen,
        a.upstream,
        &script,
        a.seed,
        stop_after,
        report_every,
        tokio::signal::ctrl_c(),
    )
    .await;
    Ok(())
}

/// Carries datagrams between clients sending to `listen` and `upstream`,
/// impaired as `script` says, until `stop_after` or `stop`; reports every
/// `report_every` (and at the end) on stdout. Returns what each direction
/// did: (to the server, to the clients).
pub(crate) async fn serve<F: Future>(
    listen: UdpSocket,
    upstream: SocketAddr,
    script: &FaultScript,
    seed: u64,
    stop_after: Option<Duration>,
    report_every: Option<Duration>,
    stop: F,
) -> (LinkCounts, LinkCounts) {
    let start = Instant::now();
    let first = script.at(Duration::ZERO).clone();
    let mut up: ImpairedLink<SocketAddr> = ImpairedLink::new(first.clone(), seed);
    let mut down: ImpairedLink<SocketAddr> =
        ImpairedLink::new(first.clone(), seed ^ 0x9E37_79B9_7F4A_7C15);
    let mut current = first;
    let mut clients: HashMap<SocketAddr, Client> = HashMap::new();
    let (tx, mut rx) = mpsc::channel::<(SocketAddr, Vec<u8>)>(FROM_SERVER_QUEUE);
    let mut refused = 0u64;
    let mut next_report = report_every.map(|d| start + d);
    let mut next_sweep = start;
    let mut buf = vec![0u8; 65_536];
    tokio::pin!(stop);
    loop {
        let now = Instant::now();
        let elapsed = now - start;
        if stop_after.is_some_and(|d| elapsed >= d) {
            break;
        }
        let faults = script.at(elapsed);
        if *faults != current {
            current = faults.clone();
            println!(
                "netsim: {:.1} s: now {}",
                elapsed.as_secs_f64(),
                describe(&current)
            );
            up.set_faults(current.clone());
            down.set_faults(current.clone());
        }
        if next_report.is_some_and(|t| now >= t) {
            report(elapsed, &up, &down, clients.len(), refused);
            next_report = report_every.map(|d| now + d);
        }
        // Forget clients silent both ways (their reader ends with them),
        // looking once a second, not at every datagram.
        if now >= next_sweep {
            clients.retain(|_, c| now - c.last < CLIENT_IDLE);
            next_sweep = now + Duration::from_secs(1);
        }
        let wake = [
            up.next_due(),
            down.next_due(),
            script.next_change(elapsed).map(|t| start + t),
            next_report,
            stop_after.map(|d| start + d),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(now + Duration::from_secs(1));
        tokio::select! {
            r = listen.recv_from(&mut buf) => {
                // A client's ICMP error (it went away) is no reason to stop.
                let Ok((len, from)) = r else { continue };
                let now = Instant::now();
                if !clients.contains_key(&from) {
                    if clients.len() >= MAX_CLIENTS {
                        refused += 1;
                        continue;
                    }
                    match connect(upstream, from, tx.clone()).await {
                        Ok(c) => {
                            clients.insert(from, c);
                        }
                        Err(e) => {
                            eprintln!("netsim: no socket towards {upstream} for {from}: {e}");
                            continue;
                        }
                    }
                }
                if let Some(c) = clients.get_mut(&from) {
                    c.last = now;
                }
                up.push(now, from, &buf[..len]);
            }
            Some((client, bytes)) = rx.recv() => {
                let now = Instant::now();
                if let Some(c) = clients.get_mut(&client) {
                    c.last = now;
                }
                down.push(now, client, &bytes);
            }
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(wake)) => {}
            _ = &mut stop => break,
        }
        let now = Instant::now();
        while let Some((client, bytes)) = up.pop_due(now) {
            if let Some(c) = clients.get(&client) {
                // A refused send (the server is not there yet) is a loss.
                let _ = c.socket.send(&bytes).await;
            }
        }
        while let Some((client, bytes)) = down.pop_due(now) {
            let _ = listen.send_to(&bytes, client).await;
        }
    }
    report(start.elapsed(), &up, &down, clients.len(), refused);
    (up.counts(), down.counts())
}

/// A netsim in a thread of its own, for the demo: on `127.0.0.1`, any free
/// port, in front of `upstream`.
pub(crate) struct BackgroundNetsim {
    /// Where clients send.
    pub(crate) addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<(LinkCounts, LinkCounts)>>,
}

impl BackgroundNetsim {
    /// Starts one impairing as `script` says.
    pub(crate) fn start(
        upstream: SocketAddr,
        script: FaultScript,
        seed: u64,
    ) -> Result<Self, NetsimError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let socket = runtime.block_on(UdpSocket::bind("127.0.0.1:0"))?;
        let addr = socket.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("netsim".into())
            .spawn(move || {
                runtime.block_on(serve(socket, upstream, &script, seed, None, None, stopped))
            })?;
        Ok(Self {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// Stops it; returns what each direction did (to the server, to the
    /// clients).
    pub(crate) fn stop(mut self) -> Option<(LinkCounts, LinkCounts)> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.thread.take().and_then(|t| t.join().ok())
    }
}

impl Drop for BackgroundNetsim {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// A socket towards `upstream` for `client`, and a task handing what the
/// server answers on it to the loop.
async fn connect(
    upstream: SocketAddr,
    client: SocketAddr,
    tx: mpsc::Sender<(SocketAddr, Vec<u8>)>,
) -> std::io::Result<Client> {
    let any = match upstream.ip() {
        IpAddr::V4(ip) if ip.is_loopback() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(ip) if ip.is_loopback() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    let socket = Arc::new(UdpSocket::bind(SocketAddr::new(any, 0)).await?);
    socket.connect(upstream).await?;
    let reading = Arc::clone(&socket);
    let reader = tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        loop {
            match reading.recv(&mut buf).await {
                // A full queue drops the datagram, as a congested link would.
                Ok(len) => {
                    let _ = tx.try_send((client, buf[..len].to_vec()));
                }
                // Nobody listening upstream yet (ICMP refused): keep reading.
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
                Err(_) => break,
            }
        }
    });
    Ok(Client {
        socket,
        reader,
        last: Instant::now(),
    })
}

fn describe(f: &Faults) -> String {
    format!(
        "latency {} ms ± {} ms, loss {}%, duplicate {}%, reorder {}%, bandwidth {} (each way)",
        f.latency.as_millis(),
        f.jitter.as_millis(),
        f.loss * 100.0,
        f.duplicate * 100.0,
        f.reorder * 100.0,
        f.bandwidth.map_or("unlimited".to_owned(), |b| format!(
            "{} kbit/s",
            b * 8 / 1000
        )),
    )
}

fn counts(link: &ImpairedLink<SocketAddr>) -> String {
    let c = link.counts();
    format!(
        "{} in, {} lost, {} dropped, {} duplicated, {} delivered, {} in flight",
        c.sent,
        c.lost,
        c.dropped,
        c.duplicated,
        c.delivered,
        link.held()
    )
}

fn report(
    elapsed: Duration,
    up: &ImpairedLink<SocketAddr>,
    down: &ImpairedLink<SocketAddr>,
    clients: usize,
    refused: u64,
) {
    let mut line = format!(
        "netsim: {:.1} s: to the server {}; to the clients {}; {clients} client{}",
        elapsed.as_secs_f64(),
        counts(up),
        counts(down),
        if clients == 1 { "" } else { "s" },
    );
    if refused > 0 {
        line += &format!(" ({refused} datagrams from clients over {MAX_CLIENTS} dropped)");
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
