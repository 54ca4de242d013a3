//! `lockstep relay --directory` and `lockstep fleet status` as a user runs
//! them, against a real `redis-server` the test starts and stops: three
//! relay processes share the directory, rooms spread over them, and the
//! fleet lives through a relay killed, a relay drained and Redis
//! restarted.

use crate::common::{RelayProcess, UDP_ONLY, UdpClient};
use lockstep_core::sequenced::{ClientConfig, CloseReason, HostedConfig, HostedSession};
use lockstep_core::{Event, StreamHash};
use lockstep_net::{Buffers, Clock, UdpTransport, drive_hosted};
use lockstep_relay::directory::LocalRedis;
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

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

/// A client of the relay at `udp` in `room`, driven until it plays 30
/// ticks or is refused: the refusal, if any, and where it was redirected.
fn join_at(udp: SocketAddr, room: &str) -> (Option<CloseReason>, Vec<SocketAddr>) {
    let mut client = UdpClient::new(udp, room);
    client.until("no progress", |c| {
        c.frame().get() >= 30 || c.closed().is_some()
    });
    (client.session.closed().cloned(), client.redirected)
}

/// A failover match's player: a hosted session on a socket of its own
/// (so a relay it is sent to, and the players of a takeover, are peers of
/// it), its running hash after each frame.
struct Hosted {
    session: HostedSession<u8>,
    udp: UdpTransport,
    buffers: Buffers,
    stream: StreamHash,
    /// The stream's hash after each frame.
    hashes: Vec<u64>,
    redirected: usize,
}

impl Hosted {
    fn new(relay: SocketAddr, room: &str, k: usize, clock: &Clock) -> Self {
        let mut udp = UdpTransport::bind("127.0.0.1:0")
            .expect("bind")
            .accept_unknown(16);
        let server = udp.add_peer(relay);
        let config = HostedConfig {
            client: ClientConfig {
                room: room.into(),
                name: format!("{room}-{k}"),
                secret: Some(lockstep_net::session_secret().expect("randomness")),
                ..HostedConfig::default().client
            },
            ..HostedConfig::default()
        };
        Self {
            session: HostedSession::join(config, server, clock.now()).expect("config"),
            udp,
            buffers: Buffers::default(),
            stream: StreamHash::new(),
            hashes: Vec::new(),
            redirected: 0,
        }
    }

    fn step(&mut self, clock: &Clock, input: u8) {
        drive_hosted(
            &mut self.session,
            &mut self.udp,
            clock.now(),
            &mut self.buffers,
        )
        .expect("udp");
        if self.session.input_due() {
            let _ = self.session.commit_local(input);
        }
        while let Some(f) = self.session.advance() {
            self.stream.push(&f);
            self.hashes.push(self.stream.value());
        }
        while let Some(e) = self.session.poll_event() {
            self.redirected += usize::from(matches!(e, Event::Redirected { .. }));
        }
    }
}

/// The failover matches a test runs, stepped together.
struct Matches {
    clock: Clock,
    rooms: Vec<(String, Vec<Hosted>)>,
    turn: u8,
}

impl Matches {
    /// Two players for `room`, asking the relay at `relay` first.
    fn open(&mut self, relay: SocketAddr, room: &str) {
        let players = (0..2)
            .map(|k| Hosted::new(relay, room, k, &self.clock))
            .collect();
        self.rooms.push((room.into(), players));
    }

    fn room(&self, room: &str) -> &[Hosted] {
        &self
            .rooms
            .iter()
            .find(|(r, _)| r == room)
            .expect("a match of that room")
            .1
    }

    fn frames(&self, room: &str) -> usize {
        self.room(room)
            .iter()
            .map(|p| p.hashes.len())
            .min()
            .unwrap_or(0)
    }

    /// Steps every match until `done` holds (60 s at most).
    fn until(&mut self, what: &str, mut done: impl FnMut(&Self) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut checked = Instant::now();
        while !(checked.elapsed() >= Duration::from_millis(50) && {
            checked = Instant::now();
            done(self)
        }) {
            assert!(Instant::now() < deadline, "{what}: not in time");
            self.turn = self.turn.wrapping_add(1);
            for (_, players) in &mut self.rooms {
                for (k, p) in players.iter_mut().enumerate() {
                    p.step(&self.clock, self.turn ^ k as u8);
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Steps every match until `room` has run `more` frames more.
    fn play(&mut self, room: &str, more: usize) {
        let at = self.frames(room) + more;
        self.until(&format!("{room} plays {more} frames"), |m| {
            m.frames(room) >= at
        });
    }

    /// Asserts the players of `room` ran one stream, and none left it.
    fn one_stream(&self, room: &str) {
        let players = self.room(room);
        let n = self.frames(room);
        let first = &players[0].hashes[..n];
        for p in players {
            assert_eq!(&p.hashes[..n], first, "{room}: one stream");
            assert!(
                p.session.client().closed().is_none(),
                "{room}: nobody dropped"
            );
        }
    }
}

/// The relay (by id) serving each room, as the directory says.
fn owners(redis: &LocalRedis) -> Vec<(String, String)> {
    let s = status(redis);
    ids(&s, "rooms", "room")
        .into_iter()
        .zip(ids(&s, "rooms", "relay"))
        .collect()
}

fn owner(redis: &LocalRedis, room: &str) -> Option<String> {
    owners(redis)
        .into_iter()
        .find(|(r, _)| r == room)
        .map(|(_, o)| o)
}

/// Three relay processes on one real Redis, the way a studio runs a fleet:
/// failover rooms spread across them, clients asking the wrong relay are
/// redirected and play; one relay killed with SIGKILL: its match goes on
/// among its players, its leases lapse within 2.5 s (lease 1 s), and a new
/// room goes to a survivor; one relay drained: its match plays to its end,
/// nobody dropped, and it exits after; Redis stopped and restarted: the
/// running match is untouched, a new room is refused by name meanwhile and
/// admitted after.
#[test]
fn three_relay_processes_share_a_directory() {
    let mut redis = LocalRedis::start().expect("a redis-server (scripts/test-deps installs it)");
    let dir = std::env::temp_dir().join(format!("lockstep-fleet-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let file = dir.join("failover.toml");
    std::fs::write(&file, "[room_defaults]\nfailover = true\n").expect("writes");
    let url = redis.url();
    let start = |id: &str| {
        let mut args: Vec<&str> = UDP_ONLY.to_vec();
        args.extend(["--config", file.to_str().expect("utf-8")]);
        args.extend(["--directory", &url, "--relay-id", id, "--lease", "1"]);
        args.extend(["--drain-secs", "30"]);
        RelayProcess::start(&args)
    };
    let mut relays: Vec<(String, RelayProcess)> = ["relay-a", "relay-b", "relay-c"]
        .into_iter()
        .map(|id| (id.to_owned(), start(id)))
        .collect();
    until("three relays in the directory", || {
        ids(&status(&redis), "relays", "id").len() == 3
    });
    let udp = |relays: &[(String, RelayProcess)], id: &str| {
        relays
            .iter()
            .find(|(r, _)| r == id)
            .expect("a relay of that id")
            .1
            .addr("udp")
    };
    let mut m = Matches {
        clock: Clock::new(),
        rooms: Vec::new(),
        turn: 0,
    };

    // Three rooms, all asked of relay a: each goes to the least loaded
    // relay once the directory shows where the others went.
    for (k, room) in ["m0", "m1", "m2"].into_iter().enumerate() {
        m.open(udp(&relays, "relay-a"), room);
        m.play(room, 60);
        m.until("the room's load in the directory", |_| {
            status(&redis)["relays"]
                .as_array()
                .is_some_and(|r| r.iter().filter(|e| e["rooms"] == 1).count() == k + 1)
        });
    }
    let placed = owners(&redis);
    println!("placed: {placed:?}");
    let mut holders: Vec<&str> = placed.iter().map(|(_, o)| o.as_str()).collect();
    holders.sort_unstable();
    assert_eq!(holders, ["relay-a", "relay-b", "relay-c"], "one room each");
    let redirected: usize = m
        .rooms
        .iter()
        .flat_map(|(_, p)| p.iter().map(|p| p.redirected))
        .sum();
    assert_eq!(
        redirected, 4,
        "the players of the two rooms placed elsewhere"
    );
    for room in ["m0", "m1", "m2"] {
        m.one_stream(room);
    }

    // SIGKILL the relay of m0: its players carry m0 on between themselves;
    // the relay's entry and claims lapse; a new room goes to a survivor.
    let dead = owner(&redis, "m0").expect("m0 placed");
    let (_, mut killed) = relays.remove(relays.iter().position(|(r, _)| *r == dead).expect("runs"));
    let died = Instant::now();
    killed.child.kill().expect("kill");
    let _ = killed.child.wait();
    m.until("the dead relay lapses", |_| {
        !ids(&status(&redis), "relays", "id").contains(&dead)
    });
    let lapsed = died.elapsed();
    println!("{dead} out of the directory {lapsed:?} after SIGKILL (lease 1 s)");
    assert!(lapsed < Duration::from_millis(2500), "{lapsed:?}");
    m.play("m0", 120);
    m.one_stream("m0");
    assert!(
        m.room("m0").iter().any(|p| p.session.hosting()),
        "a player hosts m0 now"
    );
    let survivor = relays[0].0.clone();
    m.open(udp(&relays, &survivor), "m3");
    m.play("m3", 60);
    let m3 = owner(&redis, "m3").expect("m3 placed");
    assert!(relays.iter().any(|(r, _)| *r == m3), "{m3} survives");

    // Drain the survivor that m3 did not go to: its match plays on and
    // nobody is dropped; once its players leave, the relay exits.
    let draining = relays
        .iter()
        .map(|(r, _)| r.clone())
        .find(|r| *r != m3)
        .expect("two survivors");
    let drained_room = ["m1", "m2"]
        .into_iter()
        .find(|room| owner(&redis, room).as_deref() == Some(draining.as_str()))
        .expect("a match on it");
    let kept_room = if drained_room == "m1" { "m2" } else { "m1" };
    let at = relays
        .iter()
        .position(|(r, _)| *r == draining)
        .expect("runs");
    let pid = relays[at].1.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill")
            .success()
    );
    m.until("the relay says it drains", |_| {
        status(&redis)["relays"].as_array().is_some_and(|r| {
            r.iter()
                .any(|e| e["id"] == draining.as_str() && e["state"] == "draining")
        })
    });
    m.play(drained_room, 120);
    m.one_stream(drained_room);
    assert!(
        relays[at].1.child.try_wait().expect("waits").is_none(),
        "still draining"
    );
    let (_, mut drained) = relays.remove(at);
    for (room, players) in &mut m.rooms {
        if room == drained_room {
            for p in players {
                p.session.leave();
            }
        }
    }
    let asked = Instant::now();
    m.until("the drained relay exits", |_| {
        drained.child.try_wait().expect("waits").is_some()
    });
    println!(
        "{draining} exited {:?} after its players left",
        asked.elapsed()
    );
    let exited = asked.elapsed();
    assert!(drained.child.wait().expect("exits").success());
    assert!(
        exited < Duration::from_secs(10),
        "{exited:?}: not at the 30 s deadline"
    );
    m.rooms.retain(|(r, _)| r != drained_room);

    // Redis stops: the running matches go on; a new room is refused by
    // name. Redis comes back (empty): the relays register again and new
    // rooms open.
    let port = redis.port();
    drop(redis);
    for room in [kept_room, "m3"] {
        m.play(room, 60);
        m.one_stream(room);
    }
    let living = relays[0].1.addr("udp");
    let (closed, _) = join_at(living, "m4");
    let why = format!("{closed:?}");
    assert!(why.contains("directory is unavailable"), "{why}");
    redis = LocalRedis::start_on(port).expect("redis again");
    m.until("the survivors register again", |_| {
        ids(&status(&redis), "relays", "id").len() == relays.len()
    });
    assert_eq!(join_at(living, "m4").0, None, "a new room opens again");
    for room in [kept_room, "m3"] {
        m.play(room, 30);
        m.one_stream(room);
    }
    let _ = std::fs::remove_dir_all(&dir);
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
    let ports: Vec<SocketAddr> = s["relays"]
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
