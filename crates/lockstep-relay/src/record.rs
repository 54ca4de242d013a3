//! Recording every match a relay sequences: one replay file per match
//! (see the repository's `docs/replay.md`), written by a thread of its own
//! so that a slow or full disk never holds a room up.
//!
//! A room starts its recording with its first sealed frame and feeds it
//! every frame it seals, and, where the relay runs the game itself, the
//! game's state hash every 30 ticks. A file that reaches its cap is
//! finished (its end written) and the match plays on unrecorded; so does
//! one whose disk fails or cannot keep up, with an error in the log and in
//! `lockstep_recording_failures_total`.

use lockstep_core::replay::{Header, Recorder, ReplayError, Topology};
use lockstep_core::{Frame, Input, Tick};
use serde::Deserialize;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

/// Where and how a relay records its matches.
///
/// ```
/// let config: lockstep_relay::RelayConfig = toml::from_str(r#"
///     [record]
///     dir = "/var/lib/lockstep/replays"
///     max_mib = 64
/// "#)?;
/// assert_eq!(config.record.max_mib, 64);
/// # Ok::<(), toml::de::Error>(())
/// ```
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RecordSettings {
    /// The directory every match's replay goes into, as
    /// `ROOM-MATCHID.lkrp` (the room's name with every character but
    /// letters, digits, `-` and `_` made `_`); unset, nothing is recorded.
    pub dir: Option<PathBuf>,
    /// A file is finished at this many MiB (256 by default), and the match
    /// plays on unrecorded.
    pub max_mib: u64,
    /// Frames per chunk (300 by default: 10 s at 30 Hz): a relay that
    /// dies loses at most this many of each match it was recording.
    pub chunk_frames: u32,
    /// Where files go instead of `dir` (set in code, not in the file: an
    /// object store, a test).
    #[serde(skip)]
    pub sink: Option<RecordSink>,
}

impl Default for RecordSettings {
    fn default() -> Self {
        Self {
            dir: None,
            max_mib: 256,
            chunk_frames: 300,
            sink: None,
        }
    }
}

impl RecordSettings {
    /// Whether matches are recorded.
    pub fn enabled(&self) -> bool {
        self.dir.is_some() || self.sink.is_some()
    }
}

/// Opens a match's file by name.
type Open = dyn Fn(&str) -> std::io::Result<Box<dyn Write + Send>> + Send + Sync;

/// A recording's failure on the recording thread, for it to find.
type Failure = Arc<Mutex<Option<String>>>;

/// Opens the writer a match's replay goes into, from its file name
/// (`ROOM-MATCHID.lkrp`). It is called on the recording thread.
#[derive(Clone)]
pub struct RecordSink(Arc<Open>);

impl RecordSink {
    /// A sink calling `open` for each match.
    pub fn new(
        open: impl Fn(&str) -> std::io::Result<Box<dyn Write + Send>> + Send + Sync + 'static,
    ) -> Self {
        Self(Arc::new(open))
    }
}

impl std::fmt::Debug for RecordSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecordSink(..)")
    }
}

impl PartialEq for RecordSink {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Bytes one recording may have waiting to be written: beyond, the disk
/// is not keeping up with it and it stops (the others go on).
const QUEUED_PER_RECORDING: usize = 8 << 20;
/// Bytes every recording together may have waiting.
const QUEUED: usize = 256 << 20;

/// What the recording thread is asked.
enum Job {
    /// Open `name` for recording `id`; failures go into `error`.
    Open {
        id: u64,
        name: String,
        error: Failure,
        queued: Arc<AtomicUsize>,
    },
    Write(u64, Vec<u8>),
    Close(u64),
}

/// Bytes waiting to be written: one recording's, and everyone's.
#[derive(Debug, Clone, Default)]
struct Queued {
    mine: Arc<AtomicUsize>,
    all: Arc<AtomicUsize>,
}

/// The recording thread, and the way to it.
#[derive(Debug)]
pub(crate) struct Disk {
    tx: Sender<Job>,
    /// Bytes waiting, over every recording.
    queued: Arc<AtomicUsize>,
    next: u64,
    max_bytes: u64,
    chunk_frames: u32,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Disk {
    /// Starts the recording thread for `settings`, if they record.
    pub(crate) fn start(settings: &RecordSettings) -> std::io::Result<Option<Self>> {
        if !settings.enabled() {
            return Ok(None);
        }
        let sink = match (&settings.sink, &settings.dir) {
            (Some(s), _) => s.clone(),
            (None, Some(dir)) => {
                std::fs::create_dir_all(dir)?;
                let dir = dir.clone();
                RecordSink::new(move |name| {
                    let file = std::fs::File::create(dir.join(name))?;
                    Ok(Box::new(std::io::BufWriter::new(file)) as Box<dyn Write + Send>)
                })
            }
            (None, None) => return Ok(None),
        };
        let (tx, rx) = channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let all = queued.clone();
        let thread = std::thread::Builder::new()
            .name("lockstep-record".into())
            .spawn(move || write_jobs(&rx, &sink, &all))?;
        Ok(Some(Self {
            tx,
            queued,
            next: 0,
            max_bytes: settings.max_mib.saturating_mul(1 << 20),
            chunk_frames: settings.chunk_frames,
            thread: Some(thread),
        }))
    }

    /// Waits for everything queued to be written, once every recording is
    /// finished (the relay stopping).
    pub(crate) fn stop(mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        drop(self);
        let _ = thread.join();
    }

    /// A recording for room `room`'s match `match_id`, from `header`.
    pub(crate) fn recording<I: Input>(
        &mut self,
        room: &str,
        header: Header,
    ) -> Result<Recording<I>, ReplayError> {
        self.next += 1;
        let id = self.next;
        let name = file_name(room, header.match_id);
        let error = Arc::new(Mutex::new(None));
        let queued = Queued {
            mine: Arc::new(AtomicUsize::new(0)),
            all: self.queued.clone(),
        };
        self.tx
            .send(Job::Open {
                id,
                name: name.clone(),
                error: error.clone(),
                queued: queued.mine.clone(),
            })
            .map_err(|_| stopped())?;
        let writer = DiskWriter {
            id,
            tx: self.tx.clone(),
            error,
            queued,
        };
        let mut recorder = Recorder::new(header, writer)?;
        recorder.set_chunk_frames(self.chunk_frames);
        Ok(Recording {
            recorder: Some(recorder),
            name,
            max_bytes: self.max_bytes,
            last_checkpoint: None,
        })
    }
}

fn stopped() -> ReplayError {
    ReplayError::Io(std::io::Error::other("the recording thread stopped"))
}

/// The file a match's replay goes into.
pub(crate) fn file_name(room: &str, match_id: u64) -> String {
    let room: String = room
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{room}-{match_id:016x}.lkrp")
}

/// The recording thread: opens, writes and closes files as asked, each
/// failure kept for its recording to find.
fn write_jobs(rx: &Receiver<Job>, sink: &RecordSink, all: &AtomicUsize) {
    type Open = (Box<dyn Write + Send>, Failure, Arc<AtomicUsize>);
    let mut open: std::collections::HashMap<u64, Open> = std::collections::HashMap::new();
    let fail = |error: &Failure, e: std::io::Error| {
        if let Ok(mut slot) = error.lock() {
            slot.get_or_insert(e.to_string());
        }
    };
    while let Ok(job) = rx.recv() {
        match job {
            Job::Open {
                id,
                name,
                error,
                queued,
            } => match (sink.0)(&name) {
                Ok(w) => {
                    open.insert(id, (w, error, queued));
                }
                Err(e) => fail(&error, e),
            },
            Job::Write(id, bytes) => {
                all.fetch_sub(bytes.len(), Ordering::Relaxed);
                if let Some((w, error, queued)) = open.get_mut(&id) {
                    queued.fetch_sub(bytes.len(), Ordering::Relaxed);
                    if let Err(e) = w.write_all(&bytes) {
                        fail(error, e);
                        open.remove(&id);
                    }
                }
            }
            Job::Close(id) => {
                if let Some((mut w, error, _)) = open.remove(&id)
                    && let Err(e) = w.flush()
                {
                    fail(&error, e);
                }
            }
        }
    }
}

/// A recording's bytes, on their way to the recording thread.
pub(crate) struct DiskWriter {
    id: u64,
    tx: Sender<Job>,
    error: Failure,
    queued: Queued,
}

impl DiskWriter {
    /// What failed on the recording thread, if anything.
    fn failed(&self) -> Option<std::io::Error> {
        let e = self.error.lock().ok()?.clone()?;
        Some(std::io::Error::other(e))
    }
}

impl Write for DiskWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Some(e) = self.failed() {
            return Err(e);
        }
        let (mine, all) = (&self.queued.mine, &self.queued.all);
        if mine.load(Ordering::Relaxed) + buf.len() > QUEUED_PER_RECORDING
            || all.load(Ordering::Relaxed) + buf.len() > QUEUED
        {
            return Err(std::io::Error::other(
                "the disk is not keeping up with the recordings",
            ));
        }
        mine.fetch_add(buf.len(), Ordering::Relaxed);
        all.fetch_add(buf.len(), Ordering::Relaxed);
        self.tx
            .send(Job::Write(self.id, buf.to_vec()))
            .map_err(|_| std::io::Error::other("the recording thread stopped"))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.failed().map_or(Ok(()), Err)
    }
}

impl Drop for DiskWriter {
    fn drop(&mut self) {
        // Never lost: the file is flushed and closed once written.
        let _ = self.tx.send(Job::Close(self.id));
    }
}

/// One match's recording.
pub(crate) struct Recording<I: Input> {
    recorder: Option<Recorder<I, DiskWriter>>,
    pub(crate) name: String,
    max_bytes: u64,
    last_checkpoint: Option<Tick>,
}

/// Why a recording stopped before its match ended.
#[derive(Debug)]
pub(crate) enum Stopped {
    /// It reached its cap (`max_mib`): finished, its end written.
    Cap(u64),
    /// Writing it failed.
    Failed(ReplayError),
}

impl<I: Input> Recording<I> {
    /// The tick the next frame must have, while recording.
    pub(crate) fn next_tick(&self) -> Option<Tick> {
        self.recorder.as_ref().and_then(Recorder::next_tick)
    }

    /// Records a sealed frame (and, from a room that runs the game, its
    /// state hash after it, kept every 30 ticks).
    pub(crate) fn record(&mut self, frame: &Frame<I>, hash: Option<u64>) -> Result<(), Stopped> {
        let Some(r) = self.recorder.as_mut() else {
            return Ok(());
        };
        let result = r.record(frame);
        if let Some(h) = hash
            && self
                .last_checkpoint
                .is_none_or(|c| frame.tick.since(c) >= 30)
        {
            r.checkpoint(frame.tick, h);
            self.last_checkpoint = Some(frame.tick);
        }
        // A failure on the recording thread shows at once, not at the
        // next chunk.
        let failed = r.get_ref().failed().map(ReplayError::Io);
        if let Some(e) = result.err().or(failed) {
            self.recorder = None;
            return Err(Stopped::Failed(e));
        }
        if r.written() >= self.max_bytes {
            let written = r.written();
            return match self.finish() {
                Ok(()) => Err(Stopped::Cap(written)),
                Err(e) => Err(Stopped::Failed(e)),
            };
        }
        Ok(())
    }

    /// Finishes the file (its last chunk and its end), if still recording.
    pub(crate) fn finish(&mut self) -> Result<(), ReplayError> {
        match self.recorder.take() {
            Some(r) => r.finish().map(drop),
            None => Ok(()),
        }
    }
}

/// A room's recording, of whichever inputs its clients send.
#[derive(Default)]
pub(crate) enum RoomRecording {
    /// Not started: the match has sealed nothing yet.
    #[default]
    Waiting,
    Opaque(Recording<Vec<u8>>),
    Player(Recording<lockstep_core::PlayerInputs>),
    /// Finished, stopped, or never to be.
    Done,
}

impl std::fmt::Debug for RoomRecording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Waiting => "Waiting",
            Self::Opaque(_) | Self::Player(_) => "Recording",
            Self::Done => "Done",
        })
    }
}

/// Feeds room `name`'s recording the frames it sealed since (starting it
/// with the match's first): what went wrong, for the log, if it stopped.
pub(crate) fn feed(
    disk: &mut Disk,
    name: &str,
    engine: &crate::room::Engine,
    recording: &mut RoomRecording,
) -> Option<Stopped> {
    use crate::room::Engine;
    let result = match (engine, &mut *recording) {
        (_, RoomRecording::Done) => return None,
        (Engine::Opaque(s), RoomRecording::Waiting) => {
            begin(disk, name, s).map(|r| r.map(RoomRecording::Opaque))
        }
        (Engine::Player(s), RoomRecording::Waiting) => {
            begin(disk, name, s).map(|r| r.map(RoomRecording::Player))
        }
        (Engine::Opaque(s), RoomRecording::Opaque(r)) => {
            return stop_on(recording_fed(s, r), recording);
        }
        (Engine::Player(s), RoomRecording::Player(r)) => {
            return stop_on(recording_fed(s, r), recording);
        }
        _ => return None,
    };
    match result? {
        Ok(started) => {
            *recording = started;
            feed(disk, name, engine, recording)
        }
        Err(e) => {
            *recording = RoomRecording::Done;
            Some(Stopped::Failed(e))
        }
    }
}

/// The recording ends when feeding it failed.
fn stop_on(result: Result<(), Stopped>, recording: &mut RoomRecording) -> Option<Stopped> {
    result.err().inspect(|_| *recording = RoomRecording::Done)
}

/// A room's recording once its match sealed a frame, logged.
fn begin<I: Input>(
    disk: &mut Disk,
    name: &str,
    s: &lockstep_core::sequenced::Sequencer<I>,
) -> Option<Result<Recording<I>, ReplayError>> {
    let started = start(disk, name, s)?;
    if let Ok(r) = &started {
        tracing::info!(room = %name, file = %r.name, "recording the match");
    }
    Some(started)
}

/// A recording for a room's match once it has sealed a frame.
fn start<I: Input>(
    disk: &mut Disk,
    name: &str,
    s: &lockstep_core::sequenced::Sequencer<I>,
) -> Option<Result<Recording<I>, ReplayError>> {
    let config = s.config();
    let first = s.frame(config.first_tick)?;
    let mut header = Header::new(
        s.fingerprint().unwrap_or(0),
        &format!("room {name}"),
        config.tick_rate,
        u16::try_from(first.inputs.len()).unwrap_or(u16::MAX),
        Topology::Relay,
    );
    header.recorder = "relay".into();
    header.match_id = s.match_id();
    header.first_tick = config.first_tick;
    let mut names = vec![String::new(); first.inputs.len()];
    for (seat, player, _) in s.players() {
        if let Some(n) = names.get_mut(seat.index()) {
            player.clone_into(n);
        }
    }
    while names.last().is_some_and(String::is_empty) {
        names.pop();
    }
    header.names = names;
    Some(disk.recording(name, header))
}

/// Records the frames sealed since the last call.
fn recording_fed<I: Input>(
    s: &lockstep_core::sequenced::Sequencer<I>,
    r: &mut Recording<I>,
) -> Result<(), Stopped> {
    let open = s.open_tick();
    while let Some(next) = r.next_tick().filter(|t| *t < open) {
        let Some(frame) = s.frame(next) else {
            return Err(Stopped::Failed(ReplayError::Frame {
                tick: next,
                what: "no longer in the room's history",
            }));
        };
        // The relay's own game has run every frame sealed: its hash is the
        // state after the last.
        let last = next.saturating_add(1) == open;
        let hash = s.simulation().filter(|_| last).map(|g| g.hash());
        r.record(frame, hash)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep_core::replay::Replay;

    type Shared = Arc<Mutex<Vec<u8>>>;

    struct Into(Shared);

    impl Write for Into {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("not poisoned").extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A file that reaches its cap is finished, whole, and says it stopped
    /// there; the name of a hostile room cannot leave the directory.
    #[test]
    fn a_recording_stops_whole_at_its_cap() {
        let bytes: Shared = Arc::default();
        let names: Arc<Mutex<Vec<String>>> = Arc::default();
        let (b, n) = (bytes.clone(), names.clone());
        let settings = RecordSettings {
            chunk_frames: 10,
            sink: Some(RecordSink::new(move |name| {
                n.lock().expect("not poisoned").push(name.to_owned());
                Ok(Box::new(Into(b.clone())) as Box<dyn Write + Send>)
            })),
            ..RecordSettings::default()
        };
        let mut disk = Disk::start(&settings).expect("starts").expect("records");
        disk.max_bytes = 2_000;
        let header = Header::new(7, "room ../../etc", 30, 2, Topology::Relay);
        let mut r = disk
            .recording::<Vec<u8>>("../../etc/passwd", header)
            .expect("a recording");
        let mut stopped = None;
        for t in 0..10_000u32 {
            let frame = Frame {
                tick: Tick::new(t),
                inputs: vec![Some(t.to_le_bytes().to_vec()), None],
                events: Vec::new(),
            };
            if let Err(e) = r.record(&frame, None) {
                stopped = Some((t, e));
                break;
            }
        }
        let (at, why) = stopped.expect("stopped at the cap");
        assert!(matches!(why, Stopped::Cap(n) if n >= 2_000), "{why:?}");
        assert!(at > 50, "{at} frames");
        drop(r);
        disk.stop();
        let file = Replay::<Vec<u8>>::read(&bytes.lock().expect("not poisoned"));
        assert!(
            file.stopped.is_none() && file.end.is_some(),
            "{:?}",
            file.stopped
        );
        assert_eq!(file.frame_count() as u32, at + 1);
        assert_eq!(
            names.lock().expect("not poisoned").as_slice(),
            ["______etc_passwd-0000000000000000.lkrp"]
        );
    }

    /// A writer that waits on `gate` before each write, and notes its flush.
    struct Slow {
        bytes: Shared,
        gate: Arc<Mutex<()>>,
        flushed: Arc<std::sync::atomic::AtomicBool>,
    }

    impl Write for Slow {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let _open = self.gate.lock().expect("not poisoned");
            self.bytes
                .lock()
                .expect("not poisoned")
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.flushed.store(true, Ordering::Relaxed);
            Ok(())
        }
    }

    /// One room's recording on a stalled disk stops at its own share of
    /// the queue (8 MiB); another room's recording, started then, is
    /// written whole once the disk moves, and the stopped one's file is
    /// still closed.
    #[test]
    fn a_flooding_recording_stops_alone_and_its_file_still_closes() {
        let gate = Arc::new(Mutex::new(()));
        type Files = Arc<Mutex<Vec<(String, Shared, Arc<std::sync::atomic::AtomicBool>)>>>;
        let files: Files = Arc::default();
        let (g, f) = (gate.clone(), files.clone());
        let settings = RecordSettings {
            chunk_frames: 50,
            sink: Some(RecordSink::new(move |name| {
                let bytes: Shared = Arc::default();
                let flushed = Arc::new(std::sync::atomic::AtomicBool::new(false));
                f.lock().expect("not poisoned").push((
                    name.to_owned(),
                    bytes.clone(),
                    flushed.clone(),
                ));
                Ok(Box::new(Slow {
                    bytes,
                    gate: g.clone(),
                    flushed,
                }) as Box<dyn Write + Send>)
            })),
            ..RecordSettings::default()
        };
        let mut disk = Disk::start(&settings).expect("starts").expect("records");
        let stalled = gate.lock().expect("not poisoned");
        let mut flood = disk
            .recording::<Vec<u8>>("flood", Header::new(1, "flood", 30, 16, Topology::Relay))
            .expect("a recording");
        let mut x = 1u64;
        let mut failed = false;
        for t in 0..100_000u32 {
            let inputs = (0..16)
                .map(|_| {
                    Some(
                        (0..1024)
                            .map(|_| {
                                x ^= x << 13;
                                x ^= x >> 7;
                                x ^= x << 17;
                                x as u8
                            })
                            .collect(),
                    )
                })
                .collect();
            let frame = Frame {
                tick: Tick::new(t),
                inputs,
                events: Vec::new(),
            };
            if let Err(e) = flood.record(&frame, None) {
                assert!(matches!(e, Stopped::Failed(_)), "{e:?}");
                failed = true;
                break;
            }
        }
        assert!(failed, "the flood stopped");
        let mut victim = disk
            .recording::<Vec<u8>>("victim", Header::new(1, "victim", 30, 2, Topology::Relay))
            .expect("a recording");
        for t in 0..200u32 {
            let frame = Frame {
                tick: Tick::new(t),
                inputs: vec![Some(vec![t as u8]), None],
                events: Vec::new(),
            };
            victim.record(&frame, None).expect("recorded");
        }
        victim.finish().expect("finished");
        drop(victim);
        drop(flood);
        drop(stalled);
        disk.stop();
        let files = files.lock().expect("not poisoned");
        let (_, bytes, _) = files
            .iter()
            .find(|(n, ..)| n.starts_with("victim"))
            .expect("its file");
        let r = Replay::<Vec<u8>>::read(&bytes.lock().expect("not poisoned"));
        assert!(r.is_whole(), "{:?}", r.stopped);
        assert_eq!(r.frame_count(), 200);
        assert!(
            files
                .iter()
                .all(|(_, _, flushed)| flushed.load(Ordering::Relaxed)),
            "every file closed"
        );
    }
}
