//! `lockstep netsim` over real loopback sockets: datagrams through it arrive
//! as often and as late as asked, each client keeps its own address towards
//! the server, and a script changes the link while it runs.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A UDP echo server on loopback, answering each datagram with itself
/// followed by the sender's port (so a client can tell which address the
/// server saw).
fn echo_server() -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind echo");
    let addr = socket.local_addr().expect("echo addr");
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((len, from)) = socket.recv_from(&mut buf) {
            let mut reply = buf[..len].to_vec();
            reply.extend_from_slice(&from.port().to_le_bytes());
            let _ = socket.send_to(&reply, from);
        }
    });
    addr
}

/// Starts `lockstep netsim` in front of `upstream`; returns it and the
/// address it listens on (from its first line).
fn netsim(
    upstream: SocketAddr,
    extra: &[&str],
) -> (Child, SocketAddr, BufReader<std::process::ChildStdout>) {
    let up = upstream.to_string();
    let mut args = vec![
        "netsim",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        up.as_str(),
        "--duration",
        "60",
    ];
    args.extend_from_slice(extra);
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn netsim");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("first line");
    let addr = line
        .strip_prefix("netsim: listening on ")
        .and_then(|rest| rest.split(',').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    (child, addr, out)
}

/// Sends `n` numbered datagrams to `to` from `socket`; collects echoes
/// until all came back or `deadline` passed. Returns, per number, the
/// round trip and the port the server saw.
fn ping(
    socket: &UdpSocket,
    to: SocketAddr,
    n: u32,
    deadline: Duration,
) -> Vec<(u32, Duration, u16)> {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    let mut take = |socket: &UdpSocket, got: &mut Vec<(u32, Duration, u16)>| {
        while let Ok((len, _)) = socket.recv_from(&mut buf) {
            if len == 6 {
                let k = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
                let port = u16::from_le_bytes([buf[4], buf[5]]);
                got.push((k, start.elapsed(), port));
            }
            if got.len() == n as usize {
                break;
            }
        }
    };
    // Paced (20 per 2 ms), and read meanwhile, so that no socket buffer on
    // the way overflows: any loss is netsim's.
    socket.set_nonblocking(true).expect("nonblocking");
    for k in 0..n {
        socket.send_to(&k.to_le_bytes(), to).expect("send");
        if k % 20 == 19 {
            take(socket, &mut got);
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    socket.set_nonblocking(false).expect("blocking");
    socket
        .set_read_timeout(Some(Duration::from_millis(20)))
        .expect("timeout");
    while start.elapsed() < deadline && got.len() < n as usize {
        take(socket, &mut got);
    }
    got
}

#[test]
fn datagrams_through_netsim_are_lost_and_delayed_as_asked() {
    let echo = echo_server();
    let (mut child, addr, _out) = netsim(echo, &["--latency", "30", "--loss", "10", "--seed", "7"]);
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let got = ping(&socket, addr, 1000, Duration::from_secs(2));
    let _ = child.kill();
    let _ = child.wait();
    // 10% each way: 81% come back (1000 × 0.81 ± 4 standard deviations).
    assert!(
        (760..=860).contains(&got.len()),
        "{} of 1000 came back at 10% loss each way",
        got.len()
    );
    // Every one 30 ms each way at least.
    let fastest = got
        .iter()
        .map(|(_, rtt, _)| *rtt)
        .min()
        .expect("some came back");
    assert!(
        fastest >= Duration::from_millis(60),
        "a round trip of {fastest:?}"
    );
}

#[test]
fn each_client_reaches_the_server_from_its_own_address() {
    let echo = echo_server();
    let (mut child, addr, _out) = netsim(echo, &[]);
    let a = UdpSocket::bind("127.0.0.1:0").expect("bind a");
    let b = UdpSocket::bind("127.0.0.1:0").expect("bind b");
    let from_a = ping(&a, addr, 5, Duration::from_secs(5));
    let from_b = ping(&b, addr, 5, Duration::from_secs(5));
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        (from_a.len(), from_b.len()),
        (5, 5),
        "nothing lost on a clean link"
    );
    let (pa, pb) = (from_a[0].2, from_b[0].2);
    assert!(from_a.iter().all(|x| x.2 == pa) && from_b.iter().all(|x| x.2 == pb));
    assert_ne!(pa, pb, "the server saw both clients on one address");
}

#[test]
fn a_script_changes_the_link_while_it_runs() {
    let echo = echo_server();
    let (mut child, addr, mut out) = netsim(
        echo,
        &[
            "--latency",
            "10",
            "--script",
            "after 1s: latency=150ms",
            "--report-every",
            "0",
        ],
    );
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let before = ping(&socket, addr, 3, Duration::from_secs(5));
    // Wait for the change as netsim announces it (no sleeping).
    let mut line = String::new();
    while !line.contains("now latency 150 ms") {
        line.clear();
        if out.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
    }
    let after = ping(&socket, addr, 3, Duration::from_secs(5));
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        line.contains("now latency 150 ms"),
        "never announced: {line:?}"
    );
    let slowest_before = before.iter().map(|x| x.1).max().expect("before");
    let fastest_after = after.iter().map(|x| x.1).min().expect("after");
    assert!(
        slowest_before < Duration::from_millis(150),
        "{slowest_before:?}"
    );
    assert!(
        fastest_after >= Duration::from_millis(300),
        "{fastest_after:?}"
    );
}

#[test]
fn a_bad_script_is_refused_with_where_it_went_wrong() {
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args([
            "netsim",
            "--upstream",
            "127.0.0.1:9",
            "--listen",
            "127.0.0.1:0",
            "--script",
            "after 2s: speed=3",
        ])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--script: step 1: unknown setting `speed`"),
        "{err}"
    );
}
