//! `lockstep relay` as a process: it listens where told, serves a client,
//! reports metrics, and on SIGTERM says goodbye and exits cleanly.

use crate::common;
use lockstep_core::sequenced::CloseReason;
use lockstep_core::wire::ByeReason;
use lockstep_net::WsClientTransport;

use common::{RelayProcess, UdpClient};
use std::io::{Read, Write};
use std::process::Command;
use std::time::Duration;

#[test]
fn the_relay_binary_serves_and_shuts_down_gracefully() {
    let mut relay = RelayProcess::start(&[
        "--udp",
        "127.0.0.1:0",
        "--ws",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
    ]);
    let (udp, http) = (relay.addr("udp"), relay.addr("http"));

    // A client plays a few ticks.
    let mut client = UdpClient::new(udp, "cli");
    assert_eq!(client.server, WsClientTransport::SERVER);
    client.until("no progress", |c| c.frame().get() >= 30);

    // Metrics count it.
    let mut s = std::net::TcpStream::connect(http).expect("http");
    write!(s, "GET /metrics HTTP/1.1\r\n\r\n").expect("write");
    let mut body = String::new();
    s.read_to_string(&mut body).expect("read");
    assert!(body.contains("lockstep_ticks_total"), "{body}");

    // SIGTERM: goodbye, then a clean exit.
    let status = Command::new("kill")
        .args(["-TERM", &relay.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    client.until("no goodbye", |c| c.closed().is_some());
    assert!(
        matches!(
            client.session.closed(),
            Some(CloseReason::Bye(ByeReason::Shutdown, _))
        ),
        "{:?}",
        client.session.closed()
    );
    relay.terminate();
}

#[test]
fn a_bad_config_file_is_reported_in_words() {
    let dir = std::env::temp_dir().join(format!("lockstep-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let path = dir.join("relay.toml");
    std::fs::write(&path, "[limits]\nmax_romos = 3\n").expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args([
            "relay",
            "--udp",
            "127.0.0.1:0",
            "--ws",
            "off",
            "--http",
            "off",
            "--config",
        ])
        .arg(&path)
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad configuration") && err.contains("max_romos"),
        "{err}"
    );
}

/// The CPU time (user and system) a process has used, from
/// `/proc/PID/stat`, in clock ticks.
#[cfg(target_os = "linux")]
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    // The fields after the command name, which is in parentheses and may
    // hold spaces: state is field 3, utime 14 and stime 15.
    let after = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| fields[n - 3].parse::<u64>().expect("a count");
    field(14) + field(15)
}

/// An idle relay, with every combination of listeners, sleeps: over a
/// second with no client it uses next to no CPU (a loop that polled a
/// closed channel used a whole core with the WebSocket listener off).
#[cfg(target_os = "linux")]
#[test]
fn an_idle_relay_uses_no_cpu_whatever_it_listens_on() {
    let on = |on: bool, addr: &'static str| if on { addr } else { "off" };
    let mut relays = Vec::new();
    for mask in 1u8..8 {
        let (udp, ws, http) = (mask & 1 != 0, mask & 2 != 0, mask & 4 != 0);
        let args = [
            "--udp",
            on(udp, "127.0.0.1:0"),
            "--ws",
            on(ws, "127.0.0.1:0"),
            "--http",
            on(http, "127.0.0.1:0"),
        ];
        relays.push((args, RelayProcess::start(&args)));
    }
    // Every relay printed its listening line: it is up, though it may
    // still be finishing its start (seven relays start at once on two
    // cores). Measured together, a second at a time: a relay passes with
    // its first quiet second, and one still busy after three seconds
    // fails. Clock ticks are 10 ms on Linux: a relay waking every 250 ms
    // to look at its timers uses well under one over a second; a spinning
    // one tens (it shares the cores with the others).
    let mut busy: Vec<Option<u64>> = vec![Some(u64::MAX); relays.len()];
    for _ in 0..3 {
        let before: Vec<u64> = relays
            .iter()
            .map(|(_, r)| cpu_ticks(r.child.id()))
            .collect();
        std::thread::sleep(Duration::from_secs(1));
        for (i, (_, r)) in relays.iter().enumerate() {
            let used = cpu_ticks(r.child.id()) - before[i];
            if let Some(least) = busy[i] {
                busy[i] = (used > 5).then_some(least.min(used));
            }
        }
        if busy.iter().all(Option::is_none) {
            break;
        }
    }
    for ((args, _), busy) in relays.iter().zip(busy) {
        assert!(
            busy.is_none(),
            "relay {args:?} used at least {} CPU ticks (of 10 ms) in every idle second of three",
            busy.unwrap_or_default()
        );
    }
}
