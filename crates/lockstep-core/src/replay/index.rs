//! A sidecar index: keyframes for a replay that holds none, built by a
//! first pass (`lockstep replay index`), kept beside it.

use super::read::{decode_state, decompress, read_record};
use super::*;

/// The four bytes an index file starts with.
pub const INDEX_MAGIC: [u8; 4] = *b"LKRI";

/// Keyframes for one replay, kept beside it: `"LKRI"`, the format (1), the
/// replay header's checksum (u64 LE), the frames indexed (u32 LE) and
/// their stream hash (u64 LE), which name the replay it indexes, then
/// [`Keyframe`](StateKind::Keyframe) state records as in the replay
/// itself (see `docs/replay.md`).
///
/// ```
/// use lockstep_core::replay::{Header, Index, Playback, Recorder, Replay, Topology};
/// use lockstep_core::{Frame, Game, Tick};
/// #[derive(Default)] struct Sum(u64);
/// impl Game for Sum {
///     type Input = u8;
///     fn step(&mut self, f: &Frame<u8>) { self.0 += f.inputs.iter().flatten().map(|i| u64::from(*i)).sum::<u64>(); }
///     fn hash(&self) -> u64 { self.0 }
///     fn save(&self) -> Vec<u8> { self.0.to_le_bytes().to_vec() }
///     fn restore(b: &[u8]) -> Result<Self, String> { Ok(Sum(u64::from_le_bytes(b.try_into().map_err(|_| "8 bytes")?))) }
/// }
/// let mut rec = Recorder::<u8, _>::new(Header::new(1, "sum", 30, 1, Topology::Other), Vec::new())?;
/// for t in 0..1_000u32 {
///     rec.record(&Frame { tick: Tick::new(t), inputs: vec![Some(1)], events: vec![] })?;
/// }
/// let replay = Replay::<u8>::read(&rec.finish()?);
/// let mut first = Playback::new(&replay, Sum::default())?;
/// first.index(100)?;
/// let file = Index::write(&replay, &first)?;
///
/// let mut later = Playback::new(&replay, Sum::default())?;
/// later.add_keyframes(Index::read(&file, &replay)?.keyframes())?;
/// assert_eq!(later.keyframes(), 11);
/// assert_eq!(later.seek(Tick::new(950))?, 51);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct Index {
    keys: Vec<(Tick, u64, Vec<u8>)>,
}

/// What names the replay an index is for: its header's checksum, and the
/// stream hash through its first `frames` frames (where a chunk ends).
fn replay_id<I: Input>(replay: &Replay<I>, frames: usize) -> Result<(u64, u64), ReplayError> {
    let header = replay
        .header
        .as_ref()
        .ok_or(ReplayError::BadHeader(WireError::Invalid(
            "a replay whose header did not read",
        )))?;
    let mut body = Vec::new();
    header.encode(&mut body);
    let stream =
        replay
            .stream_through(frames)
            .ok_or(ReplayError::BadHeader(WireError::Invalid(
                "an index of another replay",
            )))?;
    Ok((xxhash_rust::xxh3::xxh3_64(&body), stream))
}

/// An index's head: magic, format, header checksum, frames, stream hash.
const HEAD: usize = 4 + 1 + 8 + 4 + 8;

impl Index {
    /// The index file of a playback's keyframes (those it built or was
    /// given beyond the replay's own).
    pub fn write<G: crate::Game>(
        replay: &Replay<G::Input>,
        playback: &Playback<'_, G>,
    ) -> Result<Vec<u8>, ReplayError> {
        let frames = replay.frame_count();
        let (id, stream) = replay_id(replay, frames)?;
        let mut out = Vec::new();
        out.extend_from_slice(&INDEX_MAGIC);
        out.push(FORMAT);
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&(frames as u32).to_le_bytes());
        out.extend_from_slice(&stream.to_le_bytes());
        let mut body = Vec::new();
        for (tick, hash, bytes) in playback.built_keyframes() {
            let stored = encode_state(StateKind::Keyframe, tick, hash, bytes, &mut body);
            frame_record(&mut out, TAG_STATE, body.len(), &stored);
        }
        Ok(out)
    }

    /// Reads an index for `replay`: one made for another replay is
    /// refused, and every keyframe must be whole (an index cut off is
    /// refused: build it again).
    pub fn read<I: Input>(bytes: &[u8], replay: &Replay<I>) -> Result<Self, ReplayError> {
        if bytes.len() < HEAD || bytes[..4] != INDEX_MAGIC {
            return Err(ReplayError::NotAReplay);
        }
        if bytes[4] != FORMAT {
            return Err(ReplayError::UnsupportedFormat { found: bytes[4] });
        }
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(w)
        };
        let frames = u32::from_le_bytes([bytes[13], bytes[14], bytes[15], bytes[16]]) as usize;
        let theirs = (word(5), word(17));
        if frames > replay.frame_count() || replay_id(replay, frames)? != theirs {
            return Err(ReplayError::BadHeader(WireError::Invalid(
                "an index of another replay",
            )));
        }
        let mut keys = Vec::new();
        let (mut at, mut record, mut raw) = (HEAD, 0u64, Vec::new());
        while at < bytes.len() {
            record += 1;
            let (tag, stored, raw_len, end) = read_record(bytes, at, record)?;
            if tag != TAG_STATE {
                return Err(ReplayError::Malformed {
                    record,
                    error: WireError::Invalid("an index holds keyframes only"),
                });
            }
            decompress(stored, raw_len, &mut raw, record)?;
            let (s, bytes) =
                decode_state(&raw).map_err(|error| ReplayError::Malformed { record, error })?;
            if s.kind != StateKind::Keyframe {
                return Err(ReplayError::Malformed {
                    record,
                    error: WireError::Invalid("an index holds keyframes only"),
                });
            }
            keys.push((s.tick, s.hash, bytes));
            at = end;
        }
        Ok(Self { keys })
    }

    /// Its keyframes: the tick each follows, its hash and its state, for
    /// [`Playback::add_keyframes`].
    pub fn keyframes(&self) -> impl Iterator<Item = (Tick, u64, &[u8])> {
        self.keys.iter().map(|(t, h, b)| (*t, *h, b.as_slice()))
    }
}
