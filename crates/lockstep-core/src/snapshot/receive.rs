//! Receiving a snapshot: chunks checked one by one and reassembled.

use super::*;

/// Reassembles one snapshot at a time from chunks, checking each.
#[derive(Debug, Clone)]
pub struct SnapshotReceiver {
    limits: SnapshotLimits,
    current: Option<Assembly>,
    /// The last snapshot completed, and its chunk count: its late chunks
    /// are ignored, and it is acknowledged whole.
    finished: Option<(u32, u32)>,
}

#[derive(Debug, Clone)]
pub(super) struct Assembly {
    id: u32,
    tick: Tick,
    raw_len: u32,
    packed_len: u32,
    hash: u64,
    count: u32,
    chunk_len: usize,
    packed: Vec<u8>,
    have: Vec<bool>,
    received: u32,
    /// A chunk arrived since the last acknowledgement.
    news: bool,
}

impl SnapshotReceiver {
    /// A receiver holding nothing.
    pub fn new(limits: SnapshotLimits) -> Self {
        Self {
            limits,
            current: None,
            finished: None,
        }
    }

    /// The snapshot being received: its id, tick, and how many of its
    /// chunks are in, of how many.
    pub fn progress(&self) -> Option<(u32, Tick, u32, u32)> {
        self.current
            .as_ref()
            .map(|a| (a.id, a.tick, a.received, a.count))
    }

    /// Forgets the snapshot being received (its sender is gone, or another
    /// one replaces it).
    pub fn reset(&mut self) {
        self.current = None;
    }

    /// Takes a chunk; returns the snapshot once it is whole and checked. A
    /// chunk of a different snapshot id replaces the one in progress (the
    /// sender restarted, or another took over). An error leaves what was
    /// received so far untouched.
    pub fn take(&mut self, c: &SnapshotChunk<'_>) -> Result<Option<Snapshot>, SnapshotError> {
        if self.finished.is_some_and(|(id, _)| id == c.id) {
            return Ok(None);
        }
        let bad = |what| SnapshotError::Inconsistent {
            id: c.id,
            index: c.index,
            what,
        };
        let max = self.limits.max_len.min(crate::wire::MAX_SNAPSHOT);
        if c.raw_len as usize > max {
            return Err(SnapshotError::TooLarge {
                len: u64::from(c.raw_len),
                max,
            });
        }
        // LZ4 never grows its input by more than this.
        if c.packed_len as usize > lz4_flex::block::get_maximum_output_size(c.raw_len as usize) {
            return Err(bad("compressed size impossible for its size"));
        }
        if c.count == 0 || c.index >= c.count {
            return Err(bad("index past the chunk count"));
        }
        if chunk_checksum(c.data) != c.checksum {
            return Err(SnapshotError::BadChunk {
                id: c.id,
                index: c.index,
            });
        }
        // Every chunk but the last is `ceil(packed_len / count)` bytes, and
        // the last is not empty.
        let chunk_len = (c.packed_len as usize).div_ceil(c.count as usize);
        let before_last = u64::from(c.count - 1) * chunk_len as u64;
        if c.packed_len == 0 || before_last >= u64::from(c.packed_len) {
            return Err(bad("chunk count does not fit the sizes"));
        }
        let fresh = self.current.as_ref().is_none_or(|a| a.id != c.id);
        if fresh {
            self.current = Some(Assembly {
                id: c.id,
                tick: c.tick,
                raw_len: c.raw_len,
                packed_len: c.packed_len,
                hash: c.hash,
                count: c.count,
                chunk_len,
                packed: Vec::new(),
                have: vec![false; c.count as usize],
                received: 0,
                news: false,
            });
        }
        let Some(a) = self.current.as_mut() else {
            return Ok(None);
        };
        if (a.tick, a.raw_len, a.packed_len, a.hash, a.count)
            != (c.tick, c.raw_len, c.packed_len, c.hash, c.count)
        {
            return Err(bad("disagrees with the snapshot's other chunks"));
        }
        let start = c.index as usize * a.chunk_len;
        let end = (start + a.chunk_len).min(a.packed_len as usize);
        if start >= a.packed_len as usize || c.data.len() != end - start {
            return Err(bad("length does not fit its position"));
        }
        a.news = true;
        if a.have[c.index as usize] {
            return Ok(None);
        }
        if a.packed.is_empty() {
            a.packed = vec![0; a.packed_len as usize];
        }
        a.packed[start..end].copy_from_slice(c.data);
        a.have[c.index as usize] = true;
        a.received += 1;
        if a.received < a.count {
            return Ok(None);
        }
        let id = a.id;
        let whole = lz4_flex::block::decompress(&a.packed, a.raw_len as usize)
            .ok()
            .filter(|raw| raw.len() == a.raw_len as usize && xxh3_64(raw) == a.hash);
        let (tick, count) = (a.tick, a.count);
        self.current = None;
        match whole {
            Some(bytes) => {
                self.finished = Some((id, count));
                Ok(Some(Snapshot { tick, bytes }))
            }
            None => Err(SnapshotError::BadWhole { id }),
        }
    }

    /// What to tell the sender, if a chunk arrived since the last call: the
    /// first chunk missing and which of the 64 after it are in.
    pub fn ack(&mut self) -> Option<SnapshotAck> {
        let a = self.current.as_mut()?;
        if !a.news {
            return None;
        }
        a.news = false;
        Some(Self::ack_of(a))
    }

    /// The acknowledgement of the snapshot in progress (or of the last one
    /// completed, whole), whether or not anything arrived since the last
    /// one: to repeat it on a timer.
    pub fn current_ack(&self) -> Option<SnapshotAck> {
        match (&self.current, self.finished) {
            (Some(a), _) => Some(Self::ack_of(a)),
            (None, Some((id, count))) => Some(SnapshotAck {
                id,
                next: count,
                bits: 0,
            }),
            (None, None) => None,
        }
    }

    fn ack_of(a: &Assembly) -> SnapshotAck {
        let next = a.have.iter().position(|h| !h).unwrap_or(a.have.len()) as u32;
        let mut bits = 0u64;
        for bit in 0..64u32 {
            let i = next as usize + 1 + bit as usize;
            if a.have.get(i).copied().unwrap_or(false) {
                bits |= 1 << bit;
            }
        }
        SnapshotAck {
            id: a.id,
            next,
            bits,
        }
    }
}
