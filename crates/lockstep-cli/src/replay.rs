//! `lockstep replay`: what a replay file holds, and whether it is whole and
//! true to the game.

use clap::{Args, Subcommand};
use lockstep_core::PlayerInputs;
use lockstep_core::replay::{Index, Parted, Playback, Replay, Topology, verify};
use lockstep_demo::{Game, GameConfig};
use std::path::{Path, PathBuf};

/// Read and check replay files.
#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    #[command(subcommand)]
    command: ReplayCommand,
}

#[derive(Debug, Subcommand)]
enum ReplayCommand {
    /// The header (game, players, who recorded it), the frames and their
    /// ticks, the size and the stream hash.
    Info {
        /// The replay file.
        file: PathBuf,
    },
    /// Checks the file's structure and checksums; with `--seed`, runs its
    /// frames through swarm (the demo game) again and compares every state
    /// hash recorded. Exits non-zero on anything wrong.
    Verify {
        /// The replay file.
        file: PathBuf,
        /// The demo's game seed (as `lockstep demo --seed`).
        #[arg(long)]
        seed: Option<u64>,
        /// The demo's `--creeps`, if it was given.
        #[arg(long)]
        creeps: Option<u32>,
        /// Runs a replay of another game build anyway.
        #[arg(long)]
        force: bool,
        /// Prints the verdict as one JSON object.
        #[arg(long)]
        json: bool,
        /// Fails also when the recording machine parted from the match,
        /// healed or not, or took a state it could not check (for CI: a
        /// build that diverges is a bug even when a resync hid it).
        #[arg(long)]
        strict: bool,
    },
    /// Runs the replay through swarm once and keeps a keyframe every
    /// `--every` ticks beside it (FILE.idx), so that playback seeks to any
    /// tick by running fewer than that many.
    Index {
        /// The replay file.
        file: PathBuf,
        #[command(flatten)]
        game: GameArgs,
        /// Ticks between keyframes.
        #[arg(long, default_value_t = 300)]
        every: u32,
    },
    /// Plays the replay in this terminal: space pauses, + and - change the
    /// speed (0.25x to 64x), . steps a tick, the arrows seek 5 s (left,
    /// right) or 30 s (down, up), Home and End go to the start and end, 0
    /// to 9 to a tenth of the way, q quits. Uses FILE.idx if there is one,
    /// else indexes first.
    Play {
        /// The replay file.
        file: PathBuf,
        #[command(flatten)]
        game: GameArgs,
    },
}

/// Which swarm the replay is of.
#[derive(Debug, Args)]
pub(crate) struct GameArgs {
    /// The demo's game seed (as `lockstep demo --seed`).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The demo's `--creeps`, if it was given.
    #[arg(long)]
    creeps: Option<u32>,
    /// Runs a replay of another game build anyway.
    #[arg(long)]
    force: bool,
}

impl GameArgs {
    /// Swarm as the replay's header names it, or why not.
    pub(crate) fn game(&self, r: &Replay<PlayerInputs>) -> Result<Game, String> {
        let h = r.header.as_ref().ok_or_else(|| {
            r.stopped
                .as_ref()
                .map_or("no header".into(), |e| e.to_string())
        })?;
        swarm(h.fingerprint, self.seed, self.creeps, self.force)
    }
}

/// Swarm for `seed` and `creeps`, unless the replay's fingerprint is
/// another's and not `force`d.
fn swarm(fingerprint: u64, seed: u64, creeps: Option<u32>, force: bool) -> Result<Game, String> {
    let want = crate::demo::swarm_fingerprint(seed, creeps);
    if fingerprint != want && !force {
        return Err(format!(
            "another game build or seed (the replay's fingerprint {fingerprint:016x}, swarm --seed {seed}'s {want:016x}): not run (--force runs it)"
        ));
    }
    let config = creeps.map_or_else(GameConfig::default, |n| GameConfig {
        max_creeps: n,
        first_wave: n,
    });
    Ok(Game::with_config(seed, config))
}

/// Where a replay's index is kept.
pub(crate) fn index_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".idx");
    PathBuf::from(name)
}

pub(crate) fn main(a: ReplayArgs) -> Result<(), String> {
    match a.command {
        ReplayCommand::Info { file } => info(&file),
        ReplayCommand::Verify {
            file,
            seed,
            creeps,
            force,
            json,
            strict,
        } => verify_file(&file, seed, creeps, force, json, strict),
        ReplayCommand::Index { file, game, every } => index(&file, &game, every),
        ReplayCommand::Play { file, game } => crate::replay_play::main(&file, &game),
    }
}

fn index(file: &Path, args: &GameArgs, every: u32) -> Result<(), String> {
    let (_, r) = read(file)?;
    let game = args.game(&r)?;
    let started = std::time::Instant::now();
    let mut playback = Playback::new(&r, game).map_err(|e| e.to_string())?;
    playback.index(every).map_err(|e| e.to_string())?;
    let bytes = Index::write(&r, &playback).map_err(|e| e.to_string())?;
    let out = index_path(file);
    std::fs::write(&out, &bytes).map_err(|e| format!("{}: {e}", out.display()))?;
    println!(
        "{}: {} keyframes every {every} ticks over {} frames, {} bytes, in {:.2} s",
        out.display(),
        playback.keyframes() - 1,
        r.frame_count(),
        bytes.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

pub(crate) fn read(file: &Path) -> Result<(Vec<u8>, Replay<PlayerInputs>), String> {
    let bytes = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let replay = Replay::read(&bytes);
    Ok((bytes, replay))
}

/// A replay file read as swarm's (`PlayerInputs`), or, where its inputs
/// do not read as those, as opaque bytes (another game's, coded as any
/// input is by default): whichever reads further.
enum AnyReplay {
    Swarm(Replay<PlayerInputs>),
    Opaque(Replay<Vec<u8>>),
}

fn read_any(file: &Path) -> Result<(Vec<u8>, AnyReplay), String> {
    let (bytes, swarm) = read(file)?;
    if swarm.stopped.is_none() {
        return Ok((bytes, AnyReplay::Swarm(swarm)));
    }
    let opaque = Replay::<Vec<u8>>::read(&bytes);
    if opaque.valid_len > swarm.valid_len {
        Ok((bytes, AnyReplay::Opaque(opaque)))
    } else {
        Ok((bytes, AnyReplay::Swarm(swarm)))
    }
}

fn info(file: &Path) -> Result<(), String> {
    match read_any(file)? {
        (bytes, AnyReplay::Swarm(r)) => info_of(file, &bytes, &r, "PlayerInputs (as swarm's)"),
        (bytes, AnyReplay::Opaque(r)) => info_of(file, &bytes, &r, "another game's, read as bytes"),
    }
}

fn info_of<I: lockstep_core::Input>(
    file: &Path,
    bytes: &[u8],
    r: &Replay<I>,
    inputs: &str,
) -> Result<(), String> {
    let Some(h) = &r.header else {
        return Err(format!(
            "{}: {}",
            file.display(),
            r.stopped
                .as_ref()
                .map_or("no header".into(), |e| e.to_string())
        ));
    };
    println!("{}: {} bytes", file.display(), bytes.len());
    println!(
        "game: {} (fingerprint {:016x}, protocol {})",
        h.game, h.fingerprint, h.protocol
    );
    let topology = match h.topology {
        Topology::Mesh => "mesh",
        Topology::Relay => "relay",
        Topology::Host => "host mode",
        _ => "other",
    };
    let by = if h.recorder.is_empty() {
        String::new()
    } else {
        format!(", recorded by {}", h.recorder)
    };
    println!(
        "match: {:016x}, {} seats at {} Hz, {topology}{by}",
        h.match_id, h.seats, h.tick_rate
    );
    println!("inputs: {inputs}");
    if !h.names.is_empty() {
        println!("players: {}", h.names.join(", "));
    }
    let last = r.frame_count().checked_sub(1).and_then(|k| r.tick_of(k));
    let seconds = r.frame_count() as f64 / f64::from(h.tick_rate.max(1));
    println!(
        "frames: {} (ticks {} to {}, {seconds:.1} s){}",
        r.frame_count(),
        h.first_tick,
        last.map_or("-".into(), |t| t.to_string()),
        if h.snapshot.is_some() {
            ", from a snapshot (the recording starts mid-match)"
        } else {
            ""
        }
    );
    println!("state hashes recorded: {}", r.checkpoints.len());
    match (&r.end, &r.stopped) {
        (Some(end), None) => println!("stream hash: {:016x} (whole)", end.stream_hash),
        (_, Some(e)) => {
            println!("not whole: {e} (the {} bytes before read)", r.valid_len);
            return Err("the replay does not read whole".into());
        }
        (None, None) => println!(
            "no end record: the recording is still being written, or was cut off at a chunk's end"
        ),
    }
    Ok(())
}

fn verify_file(
    file: &Path,
    seed: Option<u64>,
    creeps: Option<u32>,
    force: bool,
    json: bool,
    strict: bool,
) -> Result<(), String> {
    let (_, any) = read_any(file)?;
    let (stopped, whole, frames) = match &any {
        AnyReplay::Swarm(r) => (r.stopped.as_ref(), r.end.is_some(), r.frame_count()),
        AnyReplay::Opaque(r) => (r.stopped.as_ref(), r.end.is_some(), r.frame_count()),
    };
    let structure = match stopped {
        None if whole => Ok(()),
        None => Err("no end record (cut off at a chunk's end)".to_owned()),
        Some(e) => Err(e.to_string()),
    };
    let game = match (seed, &any) {
        (Some(seed), AnyReplay::Swarm(r)) => r
            .header
            .as_ref()
            .map(|h| swarm(h.fingerprint, seed, creeps, force).map(|game| verify(r, game))),
        (Some(_), AnyReplay::Opaque(_)) => Some(Err(
            "the inputs are not swarm's: verify them with the game's own `replay::verify`".into(),
        )),
        (None, _) => None,
    };
    let ok = structure.is_ok()
        && match &game {
            None => true,
            Some(Ok(Ok(v))) => {
                v.matches() && !(strict && (!v.parted.is_empty() || !v.unchecked.is_empty()))
            }
            Some(_) => false,
        };
    if json {
        let verdict = match &game {
            None => serde_json::Value::Null,
            Some(Err(e)) => serde_json::json!({ "refused": e }),
            Some(Ok(Err(e))) => serde_json::json!({ "matches": false, "error": e.to_string() }),
            Some(Ok(Ok(v))) => serde_json::json!({
                "matches": v.matches(),
                "frames": v.frames,
                "checkpoints": v.checkpoints,
                "states": v.states,
                "unchecked": v.unchecked.iter().map(|(kind, tick)| serde_json::json!({
                    "kind": format!("{kind:?}"), "tick": tick.get(),
                })).collect::<Vec<_>>(),
                "parted": v.parted.iter().map(|p| serde_json::json!({
                    "tick": p.first.get(),
                    "exact": p.exact,
                    "last_agreed": p.last_agreed.map(|t| t.get()),
                    "recorded": format!("{:016x}", p.recorded),
                    "ran": format!("{:016x}", p.ran),
                    "resynced": p.resynced.map(|t| t.get()),
                    "agreed_again": p.agreed_again.map(|t| t.get()),
                    "fields": p.fields.iter().map(|f| serde_json::json!({
                        "path": f.path, "expected": f.expected, "found": f.found,
                    })).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            }),
        };
        println!(
            "{}",
            serde_json::json!({
                "file": file.display().to_string(),
                "ok": ok,
                "frames": frames,
                "structure": structure.as_ref().err(),
                "game": verdict,
            })
        );
    } else {
        match &structure {
            Ok(()) => println!(
                "structure: whole, every checksum and the stream hash match ({} frames)",
                frames
            ),
            Err(e) => println!("structure: {e} ({frames} frames read before it)"),
        }
        match &game {
            None => println!("game: not run (give --seed to run swarm again)"),
            Some(Err(e)) => println!("game: {e}"),
            Some(Ok(Err(e))) => println!("game: {e}"),
            Some(Ok(Ok(v))) => {
                for p in &v.parted {
                    print_parted(p);
                }
                for (kind, tick) in &v.unchecked {
                    println!(
                        "unchecked: a {kind:?} state after tick {tick} stands after frames the file does not hold; the run went on from it as recorded"
                    );
                }
                if v.checkpoints == 0 {
                    println!(
                        "game: no state hash recorded (a relay that does not run the game records none): {} frames run, nothing to compare",
                        v.frames
                    );
                }
                if v.matches() {
                    println!(
                        "game: {} frames run; every one of {} recorded state hashes matches{}",
                        v.frames,
                        v.checkpoints,
                        if v.parted.is_empty() {
                            String::new()
                        } else {
                            format!(
                                " but where the recording machine parted and was resynced ({} times)",
                                v.parted.len()
                            )
                        }
                    )
                } else {
                    println!(
                        "game: the recorded states differ from this run's, and no resync explains it"
                    )
                }
            }
        }
    }
    if ok {
        Ok(())
    } else {
        Err("the replay does not verify".into())
    }
}

fn print_parted(p: &Parted) {
    let when = if p.exact {
        format!(
            "from tick {} (tick {} agreed)",
            p.first,
            p.first.get().wrapping_sub(1)
        )
    } else {
        match p.last_agreed {
            Some(a) => format!("after tick {a} and by tick {}", p.first),
            None => format!("by tick {}", p.first),
        }
    };
    println!(
        "parted: the recording machine's state differs {when} (recorded {:016x}, this run {:016x})",
        p.recorded, p.ran
    );
    for f in p.fields.iter().take(8) {
        println!("  field {f} (this run != the recording machine)");
    }
    if p.fields.len() > 8 {
        println!("  and {} more fields", p.fields.len() - 8);
    }
    match (p.resynced, p.agreed_again) {
        (Some(t), _) => println!("  healed: a resync replaced its state after tick {t}"),
        (None, Some(t)) => println!("  its state matched again at tick {t}, with no resync"),
        (None, None) => println!("  never healed"),
    }
}
