//! Bad input on the command line: each gets a clear message and a non-zero
//! exit, never a panic or a silent wait.

use crate::common;
use common::UDP_ONLY;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// Runs `lockstep` with `args`; returns the exit code and stderr.
fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run lockstep");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn refused(args: &[&str], says: &str) {
    let (code, err) = run(args);
    assert_ne!(code, 0, "{args:?} succeeded: {err}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    assert!(err.contains(says), "{args:?}: expected {says:?} in {err}");
}

#[test]
fn out_of_range_numbers_are_refused_in_words() {
    refused(&["demo", "--delay", "5000"], "5000");
    refused(&["demo", "--jitter", "18446744073709551615"], "jitter");
    refused(&["demo", "--loss", "150"], "percentage");
    refused(&["demo", "--loss", "100"], "from 0 to 95");
    refused(&["demo", "--players", "0"], "players");
    refused(
        &["demo", "--netsim", "loss=5%"],
        "--netsim carries UDP only",
    );
    refused(
        &["demo", "--transport", "udp", "--netsim", "lag=5ms"],
        "--netsim: step 1: unknown setting `lag`",
    );
    refused(
        &[
            "demo",
            "--transport",
            "udp",
            "--loss",
            "5",
            "--netsim",
            "loss=5%",
        ],
        "put loss=, latency= and jitter= in its script",
    );
    refused(
        &["demo", "--transport", "udp", "--netsim", ""],
        "--netsim: the script is empty",
    );
    refused(
        &["demo", "--topology", "host", "--netsim", "loss=5%"],
        "--netsim goes in front of a relay",
    );
    refused(
        &["netsim", "--upstream", "127.0.0.1:9", "--loss", "101"],
        "percentage",
    );
    refused(
        &["netsim", "--upstream", "127.0.0.1:9", "--duration", "0"],
        "--duration must be a positive number",
    );
    refused(
        &["bench", "relay", "--room-size", "0"],
        "room size from 1 to 256",
    );
    refused(&["relay", "--tick-rate", "0"], "tick-rate");
    // The workspace's build has no Agones (its SDK's build needs protoc).
    refused(
        &[
            "relay",
            "--agones",
            "--udp",
            "127.0.0.1:0",
            "--ws",
            "off",
            "--http",
            "off",
        ],
        "built without Agones",
    );
    refused(&["play", "--ticket", "not hex"], "hex digits");
    refused(
        &["play", "--relay", "http://127.0.0.1:7777"],
        "http:// is not a relay address",
    );
}

#[test]
fn host_mode_options_that_cannot_work_are_refused() {
    refused(&["demo", "--kill-host-at", "100"], "needs --topology host");
    refused(
        &[
            "demo",
            "--topology",
            "host",
            "--players",
            "1",
            "--kill-host-at",
            "100",
        ],
        "somebody must carry on",
    );
    refused(
        &["demo", "--topology", "host", "--late-joiners", "1"],
        "not available with --topology host",
    );
    refused(
        &["demo", "--topology", "host", "--kill-relay-at", "100"],
        "needs --topology relay",
    );
    refused(
        &["demo", "--kill-relay-at", "100", "--transport", "ws"],
        "not available with --kill-relay-at",
    );
    refused(
        &["demo", "--kill-relay-at", "550"],
        "must run 100 ticks past it",
    );
}

#[test]
fn a_desync_two_players_cannot_settle_is_refused_up_front() {
    refused(
        &["demo", "--players", "2", "--inject-desync", "1@200"],
        "two players have no majority",
    );
}

#[test]
fn a_relay_address_without_a_port_says_so() {
    refused(&["play", "--relay", "127.0.0.1"], "has no port");
}

#[test]
fn play_without_a_terminal_says_so() {
    refused(&["play"], "needs an interactive terminal");
}

#[test]
fn a_name_too_long_is_a_bad_option_not_an_unreachable_relay() {
    let name = "n".repeat(40);
    refused(
        &["play", "--name", &name],
        "bad option: invalid configuration: name over 32 bytes",
    );
}

#[test]
fn a_relay_configuration_that_cannot_run_stops_before_listening() {
    let dir = std::env::temp_dir().join(format!("lockstep-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("relay.toml");
    std::fs::write(&file, "[room_defaults]\ntick_rate = 0\n").expect("write");
    let path = file.to_string_lossy().into_owned();
    refused(
        &[&["relay", "--config", &path][..], &UDP_ONLY].concat(),
        "tick_rate must be 1 to 1000",
    );
    refused(
        &[&["relay", "--ticket-secret", "short"][..], &UDP_ONLY].concat(),
        "at least 16",
    );
    refused(
        &[
            "relay",
            "--ws-cert",
            "/nonexistent/cert.pem",
            "--ws-key",
            "/nonexistent/key.pem",
            "--udp",
            "127.0.0.1:0",
            "--ws",
            "127.0.0.1:0",
            "--http",
            "off",
        ],
        "TLS: /nonexistent/cert.pem",
    );
    refused(
        &["ticket", "--secret", "short", "--room", "r", "--name", "n"],
        "at least 16",
    );
    // Refused as an option, before anything listens (it said `listening`
    // first, which a script waiting for that line took for a start; found
    // by a newcomer).
    let (code, err) = run(&[
        &[
            "relay",
            "--directory",
            "redis://127.0.0.1:1/",
            "--relay-id",
            "eu 1",
        ][..],
        &UDP_ONLY,
    ]
    .concat());
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("bad relay id") && !err.contains("listening"),
        "{err}"
    );
}

#[test]
fn the_relay_takes_a_host_name_and_logs_plain_text_to_a_file() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args([
            "relay",
            "--udp",
            "localhost:0",
            "--ws",
            "off",
            "--http",
            "off",
        ])
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("listening line");
    // Logs up to the line saying it listens (written just after stdout's).
    let mut logs = String::new();
    let mut err = BufReader::new(child.stderr.take().expect("stderr"));
    while !logs.contains("relay listening") {
        if err.read_line(&mut logs).unwrap_or(0) == 0 {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.starts_with("listening udp="), "{line}");
    assert!(!line.contains("udp=off"), "{line}");
    assert!(logs.contains("relay listening"), "{logs}");
    assert!(
        !logs.contains('\u{1b}'),
        "colour codes in a log file: {logs:?}"
    );
}
