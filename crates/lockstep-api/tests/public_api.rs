//! Each library crate's public API against the list checked in for it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The library crates a game links, whose public API is a contract.
const CRATES: [&str; 3] = ["lockstep-core", "lockstep-net", "lockstep-bevy"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Builds `krate`'s rustdoc JSON in a target directory of its own (the
/// test's own build holds the usual one) and returns its path.
fn rustdoc_json(krate: &str) -> PathBuf {
    let target = workspace().join("target").join("public-api");
    let out = Command::new(env!("CARGO"))
        .current_dir(workspace())
        .env("RUSTC_BOOTSTRAP", "1")
        .env_remove("RUSTFLAGS")
        .args(["rustdoc", "--quiet", "--lib", "-p", krate, "--target-dir"])
        .arg(&target)
        .args(["--", "-Z", "unstable-options", "--output-format", "json"])
        .output()
        .expect("run cargo rustdoc");
    assert!(
        out.status.success(),
        "cargo rustdoc -p {krate} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    target
        .join("doc")
        .join(format!("{}.json", krate.replace('-', "_")))
}

#[test]
fn every_library_crates_public_api_is_the_one_checked_in() {
    let bless = std::env::var_os("LOCKSTEP_BLESS").is_some();
    let mut changed = Vec::new();
    for krate in CRATES {
        let json = rustdoc_json(krate);
        // Blanket impls (`Into`, `From<T> for T`, a dependency's own) are
        // the standard library's and the dependencies' API, not ours.
        let api = public_api::Builder::from_rustdoc_json(&json)
            .omit_blanket_impls(true)
            .build()
            .unwrap_or_else(|e| panic!("{krate}: {e}"));
        // Kept sorted and without repeats, so that splitting an `impl`
        // block across files or reordering items (which changes nothing a
        // game can call) does not show as a change.
        let mut lines: Vec<String> = api.to_string().lines().map(str::to_owned).collect();
        lines.sort();
        lines.dedup();
        let now = lines.join("\n") + "\n";
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("{krate}.txt"));
        if bless {
            std::fs::write(&path, &now).expect("write the list");
            continue;
        }
        let kept = std::fs::read_to_string(&path).unwrap_or_default();
        if kept != now {
            let added: Vec<&str> = now
                .lines()
                .filter(|l| !kept.lines().any(|k| k == *l))
                .collect();
            let removed: Vec<&str> = kept
                .lines()
                .filter(|l| !now.lines().any(|k| k == *l))
                .collect();
            changed.push(format!(
                "{krate}: {} added, {} removed\n+ {}\n- {}",
                added.len(),
                removed.len(),
                added.join("\n+ "),
                removed.join("\n- ")
            ));
        }
    }
    assert!(
        changed.is_empty(),
        "the public API changed; if that is meant, write the lists again with \
         LOCKSTEP_BLESS=1 cargo test -p lockstep-api and commit them:\n{}",
        changed.join("\n")
    );
}
