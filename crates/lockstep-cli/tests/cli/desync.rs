//! `lockstep desync show`: a report of a real divergence (a game whose
//! restore forgets a field), written as the demo writes it, printed with
//! the differing field first; and files that are not reports refused by
//! name.

use lockstep_core::desync::{Fields, Report, SelfCheck};
use lockstep_core::{Frame, Tick};
use std::path::PathBuf;
use std::process::Command;

/// A score whose snapshot forgets the multiplier.
#[derive(Default)]
struct Game {
    score: u64,
    multiplier: u64,
}

impl lockstep_core::Game for Game {
    type Input = u8;
    fn step(&mut self, frame: &Frame<u8>) {
        self.multiplier += 1;
        self.score += frame
            .inputs
            .iter()
            .flatten()
            .map(|&i| u64::from(i))
            .sum::<u64>()
            * self.multiplier;
    }
    fn hash(&self) -> u64 {
        self.score ^ (self.multiplier << 40)
    }
    fn save(&self) -> Vec<u8> {
        self.score.to_le_bytes().to_vec()
    }
    fn restore(bytes: &[u8]) -> Result<Self, String> {
        let score = u64::from_le_bytes(bytes.try_into().map_err(|_| "not 8 bytes")?);
        Ok(Self {
            score,
            multiplier: 0,
        })
    }
    fn fields(&self, out: &mut Fields) {
        out.push("score", self.score);
        out.push("multiplier", self.multiplier);
    }
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("lockstep-desync-{}-{name}", std::process::id()))
}

fn show(file: &PathBuf) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["desync", "show"])
        .arg(file)
        .output()
        .expect("run lockstep desync show")
}

#[test]
fn a_report_of_a_real_divergence_reads_with_the_field_first() {
    let frames: Vec<Frame<u8>> = (0..50)
        .map(|t| Frame {
            tick: Tick::new(t),
            inputs: vec![Some(2), None],
            events: vec![],
        })
        .collect();
    let mut run = SelfCheck::every(12).start(Game::default).unwrap();
    let d = frames
        .iter()
        .find_map(|f| run.step(f).err())
        .expect("the forgotten multiplier");
    let report = Report::from_divergence(&d, "self-check", "a test game", run.recent());
    let file = temp("report.json");
    std::fs::write(&file, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    let out = show(&file);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.starts_with("multiplier: 12 != 0\n"), "{text}");
    assert!(
        text.contains("state hash 00000c000000009c (reference), 000000000000009c (other)"),
        "{text}"
    );
    assert!(text.contains("  tick 4: P0=2 | P1=-\n"), "{text}");
    assert!(
        text.contains(
            "first different after tick 11: a snapshot restored is not the state it was taken from"
        ),
        "{text}"
    );
    assert!(text.contains("tick 11: P0=2 | P1=-"), "{text}");
    assert!(
        text.contains("found by self-check in a test game, lockstep-core"),
        "{text}"
    );
    // The JSON reads back to the same report.
    let back: Report = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(back, report);
    let _ = std::fs::remove_file(&file);
}

#[test]
fn files_that_are_not_reports_are_refused_by_name() {
    let cases = [
        ("garbage.json", "not json at all", "is not a desync report"),
        (
            "newer.json",
            r#"{"version": 9, "anything": 1}"#,
            "is a version 9 report",
        ),
        (
            "partial.json",
            r#"{"version": 1, "tick": 3}"#,
            "is not a desync report",
        ),
    ];
    for (name, body, says) in cases {
        let file = temp(name);
        std::fs::write(&file, body).unwrap();
        let out = show(&file);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}");
        assert!(err.contains(says), "{name}: {err}");
        let _ = std::fs::remove_file(&file);
    }
    let out = show(&temp("missing.json"));
    assert!(!out.status.success());
}
