//! The relay recording every match: one file per match, the frames every
//! player ran, finished when the match ends; a disk that fails stops the
//! recording, never the room.

use crate::common::TestRelay;
use crate::common::fold::{Fold, Shared, client};
use lockstep_core::Game;
use lockstep_core::replay::{Header, Replay, Topology};
use lockstep_core::runner::Status;
use lockstep_net::RelayClient;
use lockstep_relay::{RecordSink, RelayConfig};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn run_until(
    clients: &mut [RelayClient<Fold>],
    secs: u64,
    what: &str,
    done: impl Fn(&[RelayClient<Fold>]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done(clients) {
        assert!(Instant::now() < deadline, "{what}: not within {secs} s");
        for c in clients.iter_mut() {
            // The neutral input every fifth tick: a game's input going back
            // to its neutral is coded as a change, which a relay reads as
            // bytes (a file it recorded failed its stream hash as the game
            // read it).
            c.turn(|g| (g.next % 5) as u16).expect("the turn goes on");
        }
        if let Some(c) = clients.first_mut() {
            c.wait(Duration::from_millis(5)).expect("waits");
        }
    }
}

/// Bytes a sink's files are written into, by file name.
type Files = Arc<Mutex<Vec<(String, Arc<Mutex<Vec<u8>>>)>>>;

/// A writer into shared bytes that fails, as a full disk, past `fail_at`.
struct Disk {
    bytes: Arc<Mutex<Vec<u8>>>,
    fail_at: usize,
}

impl Write for Disk {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let mut bytes = self.bytes.lock().expect("not poisoned");
        if bytes.len() + b.len() > self.fail_at {
            return Err(std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                "no space left on device",
            ));
        }
        bytes.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn sink(fail_at: usize) -> (RecordSink, Files) {
    let files: Files = Arc::default();
    let f = files.clone();
    let sink = RecordSink::new(move |name| {
        let bytes = Arc::new(Mutex::new(Vec::new()));
        f.lock()
            .expect("not poisoned")
            .push((name.to_owned(), bytes.clone()));
        Ok(Box::new(Disk { bytes, fail_at }) as Box<dyn Write + Send>)
    });
    (sink, files)
}

/// Two players record the match as they play it, and so does the relay,
/// into a directory: once both leave, the relay's file is whole, names
/// the room, the match and both players, and holds every frame the
/// players ran (the same frames, with the same stream hash over them).
#[test]
fn the_relay_records_every_match_into_a_file_of_its_own() {
    let dir = std::env::temp_dir().join(format!("lockstep-relay-record-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut config = RelayConfig::default();
    config.record.dir = Some(dir.clone());
    config.record.chunk_frames = 50;
    // A lobby: the match starts with both seated, and the file names both.
    config.room_defaults.start = lockstep_relay::StartName::Seated;
    config.room_defaults.start_players = 2;
    let relay = TestRelay::start(config);
    let mut clients = vec![
        client(&relay, "rec/1 room", "ann"),
        client(&relay, "rec/1 room", "bob"),
    ];
    let mine = Shared::default();
    clients[0]
        .runner_mut()
        .record(
            Header::new(0, "fold", 30, 1, Topology::Relay),
            Box::new(mine.clone()),
        )
        .expect("recording");
    run_until(&mut clients, 30, "both playing", |c| {
        c.iter().all(|c| c.game().next > 150)
    });
    clients[0]
        .runner_mut()
        .stop_recording()
        .expect("recording")
        .expect("written");
    for c in &mut clients {
        c.leave();
    }
    // The match is over once both have left: the relay finishes its file.
    let deadline = Instant::now() + Duration::from_secs(10);
    let file = loop {
        let found = std::fs::read_dir(&dir)
            .ok()
            .and_then(|d| d.filter_map(Result::ok).map(|e| e.path()).next());
        if let Some(path) = found
            && let Ok(bytes) = std::fs::read(&path)
            && Replay::<u16>::read(&bytes).end.is_some()
        {
            break (path, bytes);
        }
        assert!(
            Instant::now() < deadline,
            "no finished recording in {dir:?}"
        );
        for c in &mut clients {
            let _ = c.turn(|_| 1);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (path, bytes) = file;
    let name = path.file_name().and_then(|n| n.to_str()).expect("a name");
    assert!(
        name.starts_with("rec_1_room-") && name.ends_with(".lkrp"),
        "{name}"
    );
    let theirs = Replay::<u16>::read(&bytes);
    assert!(theirs.stopped.is_none(), "{:?}", theirs.stopped);
    let ours = Replay::<u16>::read(&mine.0.lock().expect("not poisoned"));
    let (h, o) = (
        theirs.header.as_ref().expect("a header"),
        ours.header.as_ref().expect("a header"),
    );
    assert_eq!(h.recorder, "relay");
    assert_eq!(h.match_id, o.match_id);
    assert_eq!(&h.names[..2], ["ann", "bob"]);
    assert!(ours.frame_count() > 150);
    assert_eq!(
        &theirs.frames().collect::<Vec<_>>()[..ours.frame_count()],
        &ours.frames().collect::<Vec<_>>()[..]
    );
    let found = lockstep_core::replay::verify(&theirs, Fold::default()).expect("verifies");
    assert!(found.matches());
    relay.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The disk fills 400 bytes into the recording: the recording stops, counted
/// in the metrics, and the two players play on to the same state.
#[test]
fn a_full_disk_stops_the_recording_and_the_match_plays_on() {
    let (sink, files) = sink(400);
    let mut config = RelayConfig::default();
    config.record.sink = Some(sink);
    config.record.chunk_frames = 10;
    let relay = TestRelay::start(config);
    let mut clients = vec![client(&relay, "full", "ann"), client(&relay, "full", "bob")];
    run_until(&mut clients, 30, "the recording failing", |_| {
        relay
            .http_get("/metrics")
            .contains("lockstep_recording_failures_total 1")
    });
    let at = clients[0].game().next;
    run_until(&mut clients, 30, "the match going on", |c| {
        c.iter()
            .all(|c| c.game().next > at + 90 && c.status() == Status::Playing)
    });
    let written = files.lock().expect("not poisoned");
    assert_eq!(written.len(), 1, "one file for the match");
    let bytes = written[0].1.lock().expect("not poisoned").clone();
    // What was written before the disk filled reads, up to its last whole
    // chunk.
    let r = Replay::<u16>::read(&bytes);
    assert!(
        r.header.is_some() && r.frame_count() >= 20,
        "{:?}",
        r.stopped
    );
    drop(written);
    // Both end on one state.
    let last = clients.iter().map(|c| c.game().next).max().unwrap_or(0) + 30;
    for c in &mut clients {
        c.set_last_tick(Some(lockstep_core::Tick::new(last)));
    }
    run_until(&mut clients, 10, "both at the last tick", |c| {
        c.iter().all(|c| c.status() == Status::Finished)
    });
    assert_eq!(clients[0].game().hash(), clients[1].game().hash());
    relay.stop();
}
