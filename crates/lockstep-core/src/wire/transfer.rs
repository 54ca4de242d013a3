//! Snapshot transfer: `SnapshotChunk`, `SnapshotRequest`, `SnapshotAck`
//! and `CaughtUp`, each encoded beside its decoder.

use super::codec::{Reader, put_bytes, put_tick, put_tick_delta, put_u64_le, put_varint};
use super::handshake::within;
use super::message::{MAX_CHUNKS, MAX_SNAPSHOT, Message};
use super::{MAX_DATAGRAM_LEN, WireError};
use crate::Tick;

/// One piece of a state snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotChunk<'a> {
    /// Which snapshot (chunks of different snapshots never mix).
    pub id: u32,
    /// The tick the snapshot was taken after.
    pub tick: Tick,
    /// The snapshot's size, uncompressed.
    pub raw_len: u32,
    /// The snapshot's size compressed (LZ4 block format): what the chunks
    /// carry, every one `ceil(packed_len / count)` bytes but the last.
    pub packed_len: u32,
    /// xxh3-64 of the uncompressed snapshot, checked after reassembly.
    pub hash: u64,
    /// This chunk's position, `0..count`.
    pub index: u32,
    /// How many chunks make the snapshot.
    pub count: u32,
    /// The low 32 bits of xxh3-64 over this chunk's bytes.
    pub checksum: u32,
    /// This chunk's bytes.
    pub data: &'a [u8],
}

/// Which chunks of a snapshot arrived: all before `next`, and of the 64
/// after it those whose bit is set (bit `i` is chunk `next + 1 + i`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SnapshotAck {
    /// The snapshot.
    pub id: u32,
    /// The first chunk missing.
    pub next: u32,
    /// Chunks received beyond it.
    pub bits: u64,
}

// ----- SnapshotChunk `0x0C` -------------------------------------------------

pub(super) fn check_chunk(c: &SnapshotChunk<'_>) -> Result<(), WireError> {
    within("snapshot", c.raw_len as usize, MAX_SNAPSHOT)?;
    within("compressed snapshot", c.packed_len as usize, MAX_SNAPSHOT)?;
    within("snapshot chunk", c.count as usize, MAX_CHUNKS)
}

pub(super) fn put_chunk(out: &mut Vec<u8>, c: &SnapshotChunk<'_>) {
    put_varint(out, u64::from(c.id));
    put_tick(out, c.tick);
    put_varint(out, u64::from(c.raw_len));
    put_varint(out, u64::from(c.packed_len));
    put_u64_le(out, c.hash);
    put_varint(out, u64::from(c.index));
    put_varint(out, u64::from(c.count));
    out.extend_from_slice(&c.checksum.to_le_bytes());
    put_bytes(out, c.data);
}

pub(super) fn read_chunk<'a>(r: &mut Reader<'a>) -> Result<Message<'a>, WireError> {
    let id = r.varint_u32()?;
    let tick = r.tick()?;
    let raw_len = r.len("snapshot", MAX_SNAPSHOT)? as u32;
    let packed_len = r.len("compressed snapshot", MAX_SNAPSHOT)? as u32;
    let hash = r.u64_le()?;
    let index = r.varint_u32()?;
    let count = r.len("snapshot chunk", MAX_CHUNKS)? as u32;
    if index >= count {
        return Err(WireError::Invalid("chunk index past the chunk count"));
    }
    let checksum = r.u32_le()?;
    let data = r.byte_string("chunk", MAX_DATAGRAM_LEN)?;
    if data.len() > packed_len as usize {
        return Err(WireError::Invalid("chunk larger than its snapshot"));
    }
    Ok(Message::SnapshotChunk(SnapshotChunk {
        id,
        tick,
        raw_len,
        packed_len,
        hash,
        index,
        count,
        checksum,
        data,
    }))
}

// ----- SnapshotRequest `0x12`, SnapshotAck `0x13` ---------------------------

pub(super) fn put_snapshot_request(out: &mut Vec<u8>, id: u32, tick: Tick) {
    put_varint(out, u64::from(id));
    put_tick(out, tick);
}

pub(super) fn read_snapshot_request<'a>(r: &mut Reader<'a>) -> Result<Message<'a>, WireError> {
    Ok(Message::SnapshotRequest {
        id: r.varint_u32()?,
        tick: r.tick()?,
    })
}

pub(super) fn put_snapshot_ack(out: &mut Vec<u8>, a: &SnapshotAck) {
    put_varint(out, u64::from(a.id));
    put_varint(out, u64::from(a.next));
    put_u64_le(out, a.bits);
}

pub(super) fn read_snapshot_ack<'a>(r: &mut Reader<'a>) -> Result<Message<'a>, WireError> {
    Ok(Message::SnapshotAck(SnapshotAck {
        id: r.varint_u32()?,
        next: r.varint_u32()?,
        bits: r.u64_le()?,
    }))
}

// ----- CaughtUp `0x14` ------------------------------------------------------

pub(super) fn put_caught_up(out: &mut Vec<u8>, base: Tick, tick: Tick) {
    put_tick_delta(out, base, tick);
}

pub(super) fn read_caught_up<'a>(r: &mut Reader<'a>, base: Tick) -> Result<Message<'a>, WireError> {
    Ok(Message::CaughtUp {
        tick: r.tick_delta(base)?,
    })
}
