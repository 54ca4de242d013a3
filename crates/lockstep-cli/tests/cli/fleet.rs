//! `lockstep relay --directory` and `lockstep fleet status` as a user runs
//! them, against a real `redis-server` the test starts and stops: two relay
//! processes share the directory, a room opens on one of them only, and a
//! relay killed with SIGKILL drops out of the directory within its lease.

use crate::common::{RelayProcess, UDP_ONLY, UdpClient};
use lockstep_core::sequenced::CloseReason;
use lockstep_relay::directory::LocalRedis;
use std::process::Command;
use std::time::{Duration, Instant};

fn relay(redis: &LocalRedis, id: &str) -> RelayProcess {
    let url = redis.url();
    let mut args: Vec<&str> = UDP_ONLY.to_vec();
    args.extend(["--directory", &url, "--relay-id", id, "--lease", "1"]);
    RelayProcess::start(&args)
}

/// `lockstep fleet status --json`, parsed.
fn status(redis: &LocalRedis) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["fleet", "status", "--json", "--directory", &redis.url()])
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn ids(v: &serde_json::Value, list: &str, field: &str) -> Vec<String> {
    v[list]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|r| r[field].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not in time");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A client of `relay` in `room`, driven until it plays 30 ticks or is
/// refused; the refusal, if any.
fn join(relay: &RelayProcess, room: &str) -> Option<CloseReason> {
    join_at(relay.addr("udp"), room).0
}

/// [`join`] at a relay's UDP address; also where it was redirected.
fn join_at(
    udp: std::net::SocketAddr,
    room: &str,
) -> (Option<CloseReason>, Vec<std::net::SocketAddr>) {
    let mut client = UdpClient::new(udp, room);
    client.until("no progress", |c| {
        c.frame().get() >= 30 || c.closed().is_some()
    });
    (client.session.closed().cloned(), client.redirected)
}

#[test]
fn two_relay_processes_share_a_directory_and_one_dies() {
    let redis = LocalRedis::start().expect("a redis-server (scripts/test-deps installs it)");
    let one = relay(&redis, "relay-one");
    let two = relay(&redis, "relay-two");
    until("both relays in the directory", || {
        ids(&status(&redis), "relays", "id") == ["relay-one", "relay-two"]
    });

    assert_eq!(join(&one, "arena"), None, "arena plays on relay one");
    let s = status(&redis);
    assert_eq!(ids(&s, "rooms", "room"), ["arena"]);
    assert_eq!(ids(&s, "rooms", "relay"), ["relay-one"]);
    // Asked of relay two, it is sent to relay one, and plays there.
    let (closed, redirected) = join_at(two.addr("udp"), "arena");
    assert_eq!(closed, None);
    assert_eq!(redirected, [one.addr("udp")]);

    // SIGKILL: relay one's entry and claim lapse (lease 1 s).
    let mut one = one;
    let died = Instant::now();
    one.child.kill().expect("kill");
    let _ = one.child.wait();
    until("relay one lapses", || {
        let s = status(&redis);
        ids(&s, "relays", "id") == ["relay-two"] && ids(&s, "rooms", "room").is_empty()
    });
    let lapsed = died.elapsed();
    println!("relay one out of the directory {lapsed:?} after SIGKILL (lease 1 s)");
    assert!(lapsed < Duration::from_millis(2500), "{lapsed:?}");
    assert_eq!(join(&two, "arena"), None, "arena plays on relay two now");

    // The table a person reads.
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["fleet", "status", "--directory", &redis.url()])
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("relay-two") && text.contains("arena"),
        "{text}"
    );
}

/// `--relays 2`: one process runs two relays (each on its own thread and
/// core) behind one directory; new rooms spread over both; SIGTERM takes
/// both out of the directory at once.
#[test]
fn one_process_runs_a_relay_per_core() {
    let redis = LocalRedis::start().expect("a redis-server (scripts/test-deps installs it)");
    let url = redis.url();
    let mut args: Vec<&str> = UDP_ONLY.to_vec();
    args.extend([
        "--directory",
        &url,
        "--relay-id",
        "box",
        "--relays",
        "2",
        "--lease",
        "1",
    ]);
    let mut process = RelayProcess::start(&args);
    until("two relays in the directory", || {
        ids(&status(&redis), "relays", "id") == ["box-0", "box-1"]
    });
    let s = status(&redis);
    let ports: Vec<std::net::SocketAddr> = s["relays"]
        .as_array()
        .expect("relays")
        .iter()
        .filter_map(|r| r["udp"].as_str().and_then(|a| a.parse().ok()))
        .collect();
    assert_eq!(ports.len(), 2);
    assert_ne!(ports[0], ports[1], "a port each");
    // Both rooms asked of box-0: the second goes to box-1, the least
    // loaded once box-0's first room shows in the directory.
    assert_eq!(join_at(ports[0], "room-0"), (None, vec![]));
    until("box-0's room in the directory", || {
        status(&redis)["relays"]
            .as_array()
            .is_some_and(|r| r.iter().any(|e| e["id"] == "box-0" && e["rooms"] == 1))
    });
    assert_eq!(join_at(ports[0], "room-1"), (None, vec![ports[1]]));
    let s = status(&redis);
    assert_eq!(ids(&s, "rooms", "relay"), ["box-0", "box-1"]);
    process.terminate();
    let s = status(&redis);
    assert!(ids(&s, "relays", "id").is_empty(), "{s}");
}
