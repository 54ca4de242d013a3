//! A relay as an Agones game server, against a fake SDK server (no cluster
//! runs here): Ready once listening, health while its loop runs, rooms and
//! players as Counters while a match plays, the draining label when told
//! to stop, and Shutdown once the drained relay has stopped.

mod fake_sdk;

use lockstep_agones::{AgonesConfig, DRAINING_LABEL, GameServer, PLAYERS_COUNTER, ROOMS_COUNTER};
use lockstep_core::runner::{RunnerConfig, Status};
use lockstep_core::sequenced::ClientConfig;
use lockstep_core::{Frame, Game, Tick};
use lockstep_net::RelayClient;
use lockstep_relay::{Listeners, Metrics, RelayConfig, SOCKET_BUFFER, bind_udp, run_with_metrics};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A fold of every input, with its value after each tick (not state).
#[derive(Debug, Default)]
struct Sum(u64, Vec<u64>);

impl Game for Sum {
    type Input = u16;
    fn step(&mut self, frame: &Frame<u16>) {
        for i in &frame.inputs {
            self.0 = (self.0 ^ u64::from(i.unwrap_or(0))).wrapping_mul(0x100_0000_01B3);
        }
        self.1.push(self.0);
    }
    fn hash(&self) -> u64 {
        self.0
    }
    fn save(&self) -> Vec<u8> {
        self.0.to_le_bytes().to_vec()
    }
    fn restore(b: &[u8]) -> Result<Self, String> {
        let v = u64::from_le_bytes(b.try_into().map_err(|_| "eight bytes")?);
        Ok(Self(v, Vec::new()))
    }
}

/// Polls `check` for ten seconds at most.
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not in time");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn told(state: &fake_sdk::Shared) -> fake_sdk::Told {
    state.lock().expect("not poisoned").told.clone()
}

/// Two players on their own threads: each plays to tick 300 (10 s at
/// 30 Hz, longer than the test needs) unless told to leave first.
fn players(
    relay: SocketAddr,
    leave: Arc<std::sync::atomic::AtomicBool>,
    ran: Arc<[AtomicUsize; 2]>,
) -> Vec<std::thread::JoinHandle<Vec<u64>>> {
    (0..2u16)
        .map(|k| {
            let (leave, ran) = (leave.clone(), ran.clone());
            std::thread::spawn(move || {
                let config = ClientConfig {
                    room: "arena".into(),
                    name: format!("p{k}"),
                    ..ClientConfig::default()
                };
                let mut c =
                    RelayClient::connect(relay, config, Sum::default(), RunnerConfig::default())
                        .expect("a client");
                c.set_last_tick(Some(Tick::new(300)));
                let deadline = Instant::now() + Duration::from_secs(30);
                while c.status() != Status::Finished && Instant::now() < deadline {
                    if leave.load(Ordering::Relaxed) {
                        break;
                    }
                    c.turn(|_| k + 1).expect("the turn goes on");
                    ran[usize::from(k)].store(c.game().1.len(), Ordering::Relaxed);
                    c.wait(Duration::from_millis(5)).expect("waits");
                }
                c.leave();
                let hashes = c.game().1.clone();
                drop(c);
                hashes
            })
        })
        .collect()
}

/// A runtime of two workers: the relay's loop, the SDK's calls.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A relay serving under the fake SDK server.
struct Started {
    state: fake_sdk::Shared,
    relay: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    serving: tokio::task::JoinHandle<
        Result<
            Result<lockstep_relay::RelayReport, lockstep_relay::RelayError>,
            lockstep_agones::AgonesError,
        >,
    >,
}

/// A fake SDK server (declaring the counters or not) and a relay on
/// loopback UDP under it, reporting every `health_every`.
async fn start(counters_declared: bool, config: RelayConfig, health_every: Duration) -> Started {
    let (sdk, state) = fake_sdk::start(counters_declared).await;
    let udp = bind_udp("127.0.0.1:0".parse().expect("an address"), SOCKET_BUFFER).expect("bind");
    let relay = udp.local_addr().expect("an address");
    let listeners = Listeners {
        udp: Some(udp),
        ..Listeners::default()
    };
    let metrics = Arc::new(Metrics::default());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut agones = AgonesConfig::default();
    agones.port = Some(sdk.port());
    agones.health_every = health_every;
    let server = GameServer::connect(agones).await.expect("the SDK answers");
    let run = run_with_metrics(config, listeners, metrics.clone(), async {
        let _ = stopped.await;
    });
    let serving = tokio::spawn(server.serve(metrics, run));
    Started {
        state,
        relay,
        stop,
        serving,
    }
}

#[test]
fn a_relay_is_an_agones_game_server() {
    let rt = runtime();
    rt.block_on(async {
        let config = RelayConfig {
            drain_secs: 30,
            ..RelayConfig::default()
        };
        let Started {
            state,
            relay: relay_addr,
            stop,
            serving,
        } = start(true, config, Duration::from_millis(100)).await;

        until("ready", || told(&state).ready == 1).await;
        until("health while the loop runs", || told(&state).health >= 3).await;

        // A match: the counters follow it.
        let leave = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ran = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
        let least = || {
            ran.iter()
                .map(|r| r.load(Ordering::Relaxed))
                .min()
                .unwrap_or(0)
        };
        let match_ = players(relay_addr, leave.clone(), ran.clone());
        until("rooms and players counted", || {
            let t = told(&state);
            t.counters.get(ROOMS_COUNTER) == Some(&1) && t.counters.get(PLAYERS_COUNTER) == Some(&2)
        })
        .await;

        // Told to stop with a match on: it drains, and says so.
        let _ = stop.send(());
        until("labelled draining", || {
            told(&state).labels.get(DRAINING_LABEL).map(String::as_str) == Some("true")
        })
        .await;
        assert_eq!(told(&state).shutdown, 0, "no shutdown while a match plays");
        // The match plays on through the drain.
        let at = least();
        until("the match plays on", || least() >= at + 30).await;

        // The players leave: the relay stops, and Agones is told to shut down.
        leave.store(true, Ordering::Relaxed);
        let runs: Vec<Vec<u64>> = match_
            .into_iter()
            .map(|t| t.join().expect("a player"))
            .collect();
        // Each left at its own tick: the ticks both ran are one stream.
        let both = runs[0].len().min(runs[1].len());
        assert!(both >= at + 30, "{both} ticks");
        assert_eq!(runs[0][..both], runs[1][..both], "one stream");
        let report = tokio::time::timeout(Duration::from_secs(10), serving)
            .await
            .expect("the relay stops once drained")
            .expect("joins")
            .expect("Ready and Shutdown taken")
            .expect("the relay ran");
        assert_eq!(
            report.said_goodbye, 0,
            "drained: nobody was left to tell goodbye"
        );
        let t = told(&state);
        assert_eq!(t.calls, ["ready", "shutdown"]);
        assert_eq!(t.counters_refused, 0);
        println!("health pings: {}; counters {:?}", t.health, t.counters);
    });
}

/// A `GameServer` whose spec declares no counters: they are refused once,
/// not tried again, and the relay serves on.
#[test]
fn counters_missing_from_the_spec_are_not_fatal() {
    let rt = runtime();
    rt.block_on(async {
        let Started {
            state,
            stop,
            serving,
            ..
        } = start(false, RelayConfig::default(), Duration::from_millis(50)).await;
        until("health goes on", || told(&state).health >= 5).await;
        assert_eq!(told(&state).counters_refused, 1, "tried once");
        let _ = stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(10), serving)
            .await
            .expect("stops")
            .expect("joins")
            .expect("Ready and Shutdown taken");
        assert_eq!(told(&state).calls, ["ready", "shutdown"]);
    });
}

/// No SDK server: `connect` fails by name rather than hang (the SDK waits
/// 30 s for one; here a port nothing listens on refuses at once, and the
/// SDK keeps trying until its 30 s are up).
#[test]
fn no_sdk_server_is_an_error() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let err = rt.block_on(async {
        // Paused time: the SDK's 30 s of retries pass at once.
        tokio::time::pause();
        let free = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("an address")
            .port();
        let mut agones = AgonesConfig::default();
        agones.port = Some(free);
        GameServer::connect(agones).await
    });
    let e = err.expect_err("nothing listens");
    assert!(e.to_string().contains("no Agones SDK server"), "{e}");
}
