//! The room directory's contract, held by both implementations: in memory
//! (on a test clock) and in a real `redis-server` this test starts on a
//! loopback port of its own (and stops).

use lockstep_relay::directory::{
    Claim, Directory, DirectoryError, LocalRedis, MemoryDirectory, RedisDirectory, RelayEntry,
    RelayState, least_loaded,
};
use std::future::Future;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn relay(id: &str, clients: u32) -> RelayEntry {
    RelayEntry {
        id: id.into(),
        udp: Some(([127, 0, 0, 1], 7777).into()),
        ws: None,
        clients,
        rooms: 0,
        state: RelayState::Ready,
    }
}

/// Polls `check` until it holds, for a few seconds at most.
async fn until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(5);
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not in time");
        tokio::task::yield_now().await;
    }
}

/// The contract. `lapse` makes leases of `ttl` lapse (the test clock
/// moves, or real time passes: the checks after it poll).
async fn contract<D: Directory>(d: &D, ttl: Duration, lapse: impl Fn()) {
    // Relays register, renew, and go when their lease lapses.
    d.register(&relay("r1", 5), ttl).await.expect("registers");
    d.register(&relay("r2", 3), ttl).await.expect("registers");
    let mut r3 = relay("r3", 1);
    r3.state = RelayState::Draining;
    d.register(&r3, ttl).await.expect("registers");
    let relays = d.relays().await.expect("lists");
    assert_eq!(relays.len(), 3);
    assert_eq!(
        least_loaded(&relays, None).map(|r| r.id.as_str()),
        Some("r2"),
        "the least loaded relay taking rooms"
    );
    assert!(matches!(
        d.register(&relay("bad id", 0), ttl).await,
        Err(DirectoryError::BadRelayId(_))
    ));

    // A room has one owner under an epoch; another relay's claim fails.
    let Claim::Ours { epoch: e1 } = d.claim("alpha", "r1", ttl).await.expect("claims") else {
        panic!("a free room is ours");
    };
    assert_eq!(
        d.claim("alpha", "r1", ttl).await.expect("claims"),
        Claim::Ours { epoch: e1 },
        "claiming again keeps the epoch"
    );
    match d.claim("alpha", "r2", ttl).await.expect("claims") {
        Claim::Taken(o) => assert_eq!((o.relay.as_str(), o.epoch), ("r1", e1)),
        other => panic!("{other:?}"),
    }
    let Claim::Ours { epoch: b1 } = d.claim("beta", "r2", ttl).await.expect("claims") else {
        panic!("a free room is ours");
    };
    assert_ne!(b1, e1, "no epoch is given twice");
    assert!(d.renew("alpha", "r1", e1, ttl).await.expect("renews"));
    assert!(!d.renew("alpha", "r2", e1, ttl).await.expect("renews"));
    assert!(!d.renew("alpha", "r1", e1 + 100, ttl).await.expect("renews"));
    let rooms = d.rooms().await.expect("lists");
    assert_eq!(
        rooms
            .iter()
            .map(|(r, o)| (r.as_str(), o.relay.as_str()))
            .collect::<Vec<_>>(),
        [("alpha", "r1"), ("beta", "r2")]
    );

    // A release with another's epoch does nothing; with its own, frees.
    assert!(!d.release("beta", "r1", b1).await.expect("releases"));
    assert!(d.release("beta", "r2", b1).await.expect("releases"));
    assert_eq!(d.owner("beta").await.expect("reads"), None);
    d.deregister("r3").await.expect("deregisters");
    assert_eq!(d.relays().await.expect("lists").len(), 2);

    // r1's leases lapse (it stopped renewing: killed); r2 renews its own.
    lapse();
    until("r1's room lapses", || async {
        d.owner("alpha").await.expect("reads").is_none()
    })
    .await;
    until("r1 lapses", || async {
        d.relays()
            .await
            .expect("lists")
            .iter()
            .all(|r| r.id != "r1")
    })
    .await;
    // r2 takes the room over under a new epoch; r1, back, cannot renew,
    // release or take it back.
    let Claim::Ours { epoch: e2 } = d.claim("alpha", "r2", ttl).await.expect("claims") else {
        panic!("a lapsed room is free");
    };
    assert!(e2 > e1, "a later claim has a later epoch");
    assert!(!d.renew("alpha", "r1", e1, ttl).await.expect("renews"));
    assert!(!d.release("alpha", "r1", e1).await.expect("releases"));
    assert!(matches!(
        d.claim("alpha", "r1", ttl).await.expect("claims"),
        Claim::Taken(o) if o.relay == "r2" && o.epoch == e2
    ));
}

#[tokio::test]
async fn in_memory() {
    let now = Arc::new(Mutex::new(Instant::now()));
    let clock = now.clone();
    let d = MemoryDirectory::with_clock(move || *clock.lock().expect("clock"));
    let ttl = Duration::from_secs(3);
    contract(&d, ttl, || {
        *now.lock().expect("clock") += ttl + Duration::from_millis(1);
    })
    .await;
}

#[tokio::test]
async fn in_redis() {
    let redis = LocalRedis::start().expect("a redis-server");
    let d = RedisDirectory::open(&redis.url(), "test:").expect("a client");
    // Real leases, short: the lapse is real time, polled for.
    contract(&d, Duration::from_millis(300), || {}).await;
}

/// With Redis gone, calls fail as Unavailable within the timeout (nothing
/// hangs); a relay can start before Redis does, and the same directory
/// works once it is up.
#[tokio::test]
async fn redis_down_then_up() {
    let port = free_port();
    let d = RedisDirectory::open(&format!("redis://127.0.0.1:{port}/"), "test:")
        .expect("opens without Redis");
    let t = Instant::now();
    assert!(matches!(
        d.claim("room", "r1", Duration::from_secs(5)).await,
        Err(DirectoryError::Unavailable(_))
    ));
    println!("a call with Redis down failed in {:?}", t.elapsed());
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert!(matches!(
        RedisDirectory::open("http://nowhere/", "test:"),
        Err(DirectoryError::BadUrl(_))
    ));
    let _redis = LocalRedis::start_on(port).expect("a redis-server");
    until("the directory works once Redis is up", || async {
        matches!(
            d.claim("room", "r1", Duration::from_secs(5)).await,
            Ok(Claim::Ours { .. })
        )
    })
    .await;
}

/// Relays on runtimes of their own sharing one directory by cloning it:
/// the first relay's runtime ends (the relay stopped), and the other's
/// clone still answers, on a connection of its own.
#[test]
fn a_clone_outlives_the_runtime_of_the_first() {
    let redis = LocalRedis::start().expect("a redis-server");
    let d = RedisDirectory::open(&redis.url(), "test:").expect("a client");
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    };
    let other = d.clone();
    runtime().block_on(async {
        d.register(&relay("r1", 0), Duration::from_secs(5))
            .await
            .expect("registers");
    });
    // That runtime is gone; the clone is used in another.
    let relays = runtime().block_on(async { other.relays().await });
    assert_eq!(relays.expect("answers").len(), 1);
}
