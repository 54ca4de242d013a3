//! `lockstep demo --record` and `lockstep replay`: a match recorded by a
//! bot over real sockets verifies with the game, and a file altered or of
//! another seed is refused, exiting non-zero.

use std::process::Command;

fn lockstep(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(args)
        .output()
        .expect("run lockstep");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn a_recorded_demo_verifies_and_an_altered_one_does_not() {
    let dir = std::env::temp_dir().join(format!("lockstep-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let file = dir.join("match.lkrp");
    let path = file.to_str().expect("a path");
    let (ok, out) = lockstep(&[
        "demo",
        "--ticks",
        "240",
        "--late-joiners",
        "1",
        "--record",
        path,
        "--server-sim",
        "--relay-record",
        dir.to_str().expect("a path"),
    ]);
    assert!(ok, "{out}");
    let (ok, out) = lockstep(&["replay", "info", path]);
    assert!(ok, "{out}");
    assert!(out.contains("frames: 240 (ticks 0 to 239"), "{out}");
    assert!(out.contains("(whole)"), "{out}");
    let (ok, out) = lockstep(&["replay", "verify", path, "--seed", "1"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("every one of 8 recorded state hashes matches"),
        "{out}"
    );
    // The relay recorded the match too, its own game's hashes with it.
    let relay_file = std::fs::read_dir(&dir)
        .expect("the directory")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("demo-"))
        })
        .unwrap_or_else(|| panic!("no relay recording in {dir:?}"));
    let (ok, out) = lockstep(&["replay", "info", relay_file.to_str().expect("a path")]);
    assert!(
        ok && out.contains("recorded by relay") && out.contains("(whole)"),
        "{out}"
    );
    let (ok, out) = lockstep(&[
        "replay",
        "verify",
        relay_file.to_str().expect("a path"),
        "--seed",
        "1",
    ]);
    assert!(ok, "{out}");
    assert!(
        out.contains("recorded state hashes matches") && !out.contains("every one of 0 "),
        "{out}"
    );
    // Another seed is another game: refused by name.
    let (ok, out) = lockstep(&["replay", "verify", path, "--seed", "2", "--json"]);
    assert!(!ok, "{out}");
    assert!(out.contains("\"refused\""), "{out}");
    // A byte changed in the middle: found, exit non-zero.
    let mut bytes = std::fs::read(&file).expect("the file");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x10;
    std::fs::write(&file, &bytes).expect("written");
    let (ok, out) = lockstep(&["replay", "verify", path, "--seed", "1"]);
    assert!(!ok, "{out}");
    assert!(out.contains("checksum") || out.contains("record"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Another game's recording (`u16` inputs, coded as any input is by
/// default): `replay info` reads it whole and says whose inputs they are,
/// and `replay verify` checks its structure and says swarm cannot run it
/// (both called it malformed at its first record; found by a newcomer).
#[test]
fn another_games_replay_reads_whole() {
    use lockstep_core::replay::{Header, Recorder, Topology};
    use lockstep_core::{Frame, Tick};

    let dir = std::env::temp_dir().join(format!("lockstep-other-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let file = dir.join("other.lkrp");
    let path = file.to_str().expect("a path");
    let header = Header::new(0x51, "grid claim 0.1", 30, 2, Topology::Mesh);
    let mut rec = Recorder::<u16, _>::new(header, Vec::new()).expect("a recorder");
    for t in 0..90u32 {
        let frame = Frame {
            tick: Tick::new(t),
            inputs: vec![Some(t as u16 * 7), Some(300 + t as u16)],
            events: Vec::new(),
        };
        rec.record(&frame).expect("recorded");
    }
    std::fs::write(&file, rec.finish().expect("finished")).expect("written");
    let (ok, out) = lockstep(&["replay", "info", path]);
    assert!(ok, "{out}");
    assert!(
        out.contains("frames: 90 (ticks 0 to 89") && out.contains("(whole)"),
        "{out}"
    );
    assert!(out.contains("inputs: another game's"), "{out}");
    assert!(!out.contains("recorded by"), "no recorder named: {out}");
    let (ok, out) = lockstep(&["replay", "verify", path]);
    assert!(ok && out.contains("structure: whole"), "{out}");
    let (ok, out) = lockstep(&["replay", "verify", path, "--seed", "1"]);
    assert!(!ok && out.contains("not swarm's"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}
