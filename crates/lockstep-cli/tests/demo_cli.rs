//! `lockstep demo` end to end: a relay and bot clients over real loopback
//! sockets, through impairment, ending on one state.

use std::process::Command;

/// Runs the demo and returns the state hash every client printed.
fn demo(args: &[&str]) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .arg("demo")
        .args(args)
        .output()
        .expect("run lockstep demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("OK: "), "no verdict:\n{stdout}");
    let hashes: Vec<String> = stdout
        .lines()
        .filter(|l| l.starts_with("bot"))
        .filter_map(|l| l.split_whitespace().last().map(str::to_owned))
        .collect();
    hashes
}

#[test]
fn bots_over_mixed_transports_through_loss_end_equal() {
    let hashes = demo(&[
        "--players",
        "4",
        "--ticks",
        "150",
        "--tick-rate",
        "60",
        "--loss",
        "10",
        "--latency",
        "20",
        "--jitter",
        "10",
    ]);
    assert_eq!(hashes.len(), 4);
    assert!(hashes.windows(2).all(|w| w[0] == w[1]), "{hashes:?}");
}

#[test]
fn the_deadline_policy_over_websocket_ends_equal() {
    let hashes = demo(&[
        "--players",
        "3",
        "--ticks",
        "120",
        "--tick-rate",
        "60",
        "--policy",
        "deadline",
        "--transport",
        "ws",
        "--seed",
        "7",
    ]);
    assert_eq!(hashes.len(), 3);
    assert!(hashes.windows(2).all(|w| w[0] == w[1]), "{hashes:?}");
}

#[test]
fn late_joiners_get_the_state_catch_up_and_end_equal() {
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args([
            "demo",
            "--players",
            "3",
            "--late-joiners",
            "2",
            "--ticks",
            "400",
            "--tick-rate",
            "60",
            "--loss",
            "5",
        ])
        .output()
        .expect("run lockstep demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "demo failed:\n{stdout}");
    let playing = stdout
        .lines()
        .filter(|l| l.starts_with("late join:") && l.contains("playing"))
        .count();
    assert_eq!(playing, 2, "{stdout}");
    let hashes: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("bot"))
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    assert_eq!(hashes.len(), 5, "{stdout}");
    assert!(hashes.windows(2).all(|w| w[0] == w[1]), "{stdout}");
}

#[test]
fn bots_that_lose_their_connection_reconnect_and_end_equal() {
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args([
            "demo",
            "--players",
            "3",
            "--drop-reconnect",
            "2",
            "--ticks",
            "400",
            "--tick-rate",
            "60",
        ])
        .output()
        .expect("run lockstep demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "demo failed:\n{stdout}");
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("drop:")).count(),
        2,
        "{stdout}"
    );
    let back = stdout
        .lines()
        .filter(|l| l.starts_with("late join:") && l.contains("playing"))
        .count();
    assert_eq!(back, 2, "{stdout}");
    let hashes: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("bot"))
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    assert_eq!(hashes.len(), 3, "{stdout}");
    assert!(hashes.windows(2).all(|w| w[0] == w[1]), "{stdout}");
}

#[test]
fn a_relay_that_runs_the_game_hands_joiners_its_state() {
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args([
            "demo",
            "--players",
            "2",
            "--late-joiners",
            "1",
            "--server-sim",
            "--ticks",
            "300",
            "--tick-rate",
            "60",
        ])
        .output()
        .expect("run lockstep demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "demo failed:\n{stdout}");
    assert!(stdout.contains("late join: bot2 playing"), "{stdout}");
    let hashes: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("bot"))
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    assert_eq!(hashes.len(), 3, "{stdout}");
    assert!(hashes.windows(2).all(|w| w[0] == w[1]), "{stdout}");
}
