//! `lockstep demo` end to end: a relay and bot clients over real loopback
//! sockets, through impairment, ending on one state.

use std::process::Command;

/// Runs the demo, checks it succeeded, that every client printed the same
/// state hash, and that `clients` did; returns what it printed.
fn demo_ok(args: &[&str], clients: usize) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .arg("demo")
        .args(args)
        .output()
        .expect("run lockstep demo");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "demo failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("OK: "), "no verdict:\n{stdout}");
    let hashes: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("bot"))
        .filter_map(|l| l.split_whitespace().last())
        .collect();
    assert_eq!(hashes.len(), clients, "{stdout}");
    assert!(hashes.windows(2).all(|w| w[0] == w[1]), "{stdout}");
    stdout
}

/// Lines of `stdout` starting with `prefix` and containing `word`.
fn count(stdout: &str, prefix: &str, word: &str) -> usize {
    stdout
        .lines()
        .filter(|l| l.starts_with(prefix) && l.contains(word))
        .count()
}

#[test]
fn bots_over_mixed_transports_through_loss_end_equal() {
    demo_ok(
        &[
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
        ],
        4,
    );
}

/// Through `lockstep netsim` at 5% loss and 80 ms ± 20 ms each way: the
/// bots end equal, and netsim says it lost datagrams both ways.
#[test]
fn bots_through_netsim_end_equal() {
    let stdout = demo_ok(
        &[
            "--players",
            "3",
            "--ticks",
            "120",
            "--transport",
            "udp",
            "--netsim",
            "latency=80ms jitter=20ms loss=5%",
        ],
        3,
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("netsim: ") && l.contains("to the server"))
        .unwrap_or_else(|| panic!("no netsim counts:\n{stdout}"));
    let lost: Vec<u64> = line
        .split(" lost")
        .filter_map(|s| s.rsplit(' ').next()?.parse().ok())
        .collect();
    assert_eq!(lost.len(), 2, "{line}");
    assert!(lost.iter().all(|n| *n > 0), "nothing lost at 5%: {line}");
}

#[test]
fn the_deadline_policy_over_websocket_ends_equal() {
    demo_ok(
        &[
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
        ],
        3,
    );
}

#[test]
fn late_joiners_get_the_state_catch_up_and_end_equal() {
    let args = [
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
    ];
    let stdout = demo_ok(&args, 5);
    assert_eq!(count(&stdout, "late join:", "playing"), 2, "{stdout}");
}

#[test]
fn bots_that_lose_their_connection_reconnect_and_end_equal() {
    let args = [
        "--players",
        "3",
        "--drop-reconnect",
        "2",
        "--ticks",
        "400",
        "--tick-rate",
        "60",
    ];
    let stdout = demo_ok(&args, 3);
    assert_eq!(count(&stdout, "drop:", ""), 2, "{stdout}");
    assert_eq!(
        count(&stdout, "reconnect (state kept", "playing"),
        2,
        "{stdout}"
    );
}

#[test]
fn a_relay_that_runs_the_game_hands_joiners_its_state() {
    let args = [
        "--players",
        "2",
        "--late-joiners",
        "1",
        "--server-sim",
        "--ticks",
        "300",
        "--tick-rate",
        "60",
    ];
    let stdout = demo_ok(&args, 3);
    assert!(stdout.contains("late join: bot2 playing"), "{stdout}");
}

#[test]
fn self_check_runs_swarm_twice_and_finds_it_deterministic() {
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args([
            "demo",
            "--self-check",
            "7",
            "--players",
            "6",
            "--ticks",
            "900",
        ])
        .output()
        .expect("run lockstep demo --self-check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("OK: 900 ticks and 128 snapshot round trips"),
        "{stdout}"
    );
}

#[test]
fn an_injected_desync_is_detected_reported_and_healed() {
    // The report is written where the demo runs.
    let dir = std::env::temp_dir().join(format!("lockstep-inject-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .current_dir(&dir)
        .args([
            "demo",
            "--inject-desync",
            "2@150",
            "--ticks",
            "400",
            "--tick-rate",
            "60",
            "--loss",
            "5",
            "--record",
            "diverged.lkrp",
        ])
        .output()
        .expect("run lockstep demo --inject-desync");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("OK: 4 clients ran 400 ticks"), "{stdout}");
    // Found where it was injected, and healed.
    assert!(
        stdout.contains("found where it parted from the others: after tick 150"),
        "{stdout}"
    );
    assert!(
        stdout.contains("(seat 2): detected, located, healed"),
        "{stdout}"
    );
    let report = std::fs::read_dir(&dir)
        .expect("the scratch directory")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with("-tick-150.json"))
        .unwrap_or_else(|| panic!("no report written:\n{stdout}"));
    let shown = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["desync", "show"])
        .arg(&report)
        .output()
        .expect("run lockstep desync show");
    let text = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(shown.status.success(), "{text}");
    // The field the bot changed comes first, the majority's value before
    // the diverged one's.
    let first = text.lines().next().unwrap_or_default();
    assert!(first.starts_with("ships[2].score: "), "{text}");
    assert!(text.contains("first different after tick 150"), "{text}");
    // The diverged bot recorded the match: verifying its recording names
    // the injected tick and the field, healed by the resync.
    let verified = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["replay", "verify", "--seed", "1", "--json"])
        .arg(dir.join("diverged.lkrp"))
        .output()
        .expect("run lockstep replay verify");
    let text = String::from_utf8_lossy(&verified.stdout).into_owned();
    assert!(verified.status.success(), "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let parted = &v["game"]["parted"];
    assert_eq!(parted.as_array().map(Vec::len), Some(1), "{text}");
    assert_eq!(parted[0]["tick"], 150, "{text}");
    assert_eq!(parted[0]["exact"], true, "{text}");
    assert_eq!(parted[0]["fields"][0]["path"], "ships[2].score", "{text}");
    assert!(parted[0]["resynced"].as_u64().is_some(), "{text}");
    assert_eq!(v["ok"], true, "{text}");
    // Strict, as CI would run it: the divergence fails it, healed or not.
    let strict = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["replay", "verify", "--seed", "1", "--strict"])
        .arg(dir.join("diverged.lkrp"))
        .output()
        .expect("run lockstep replay verify --strict");
    assert!(
        !strict.status.success(),
        "{}",
        String::from_utf8_lossy(&strict.stdout)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A 300-tick demo at 60 Hz whose sequencer dies at tick 150 (`kill`,
/// plus `extra` options): exactly one bot takes over, and the `survivors`
/// end on one state. Returns what it printed.
fn takeover_demo(kill: &[&str], extra: &[&str], survivors: usize) -> String {
    let args: Vec<&str> = kill
        .iter()
        .chain(&["150", "--ticks", "300", "--tick-rate", "60"])
        .chain(extra)
        .copied()
        .collect();
    let stdout = demo_ok(&args, survivors);
    assert_eq!(count(&stdout, "tick ", "hosts now"), 1, "{stdout}");
    assert!(stdout.contains("the match went on"), "{stdout}");
    stdout
}

#[test]
fn a_match_in_host_mode_survives_its_host_process_dying() {
    let stdout = takeover_demo(&["--topology", "host", "--kill-host-at"], &[], 3);
    assert!(stdout.contains("bot0's process dies"), "{stdout}");
}

#[test]
fn a_match_whose_relay_dies_carries_on_between_the_players() {
    let stdout = takeover_demo(&["--kill-relay-at"], &[], 4);
    assert!(stdout.contains("the relay stops dead"), "{stdout}");
    assert!(stdout.contains("after its relay died"), "{stdout}");
}

#[test]
fn a_host_mode_match_over_an_impaired_link_survives_its_host() {
    let stdout = takeover_demo(
        &["--topology", "host", "--kill-host-at"],
        &["--loss", "5", "--latency", "20", "--jitter", "5"],
        3,
    );
    assert!(stdout.contains("(5% loss, 20 ± 5 ms each way)"), "{stdout}");
}
