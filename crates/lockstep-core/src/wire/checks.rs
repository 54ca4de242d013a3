//! Desync detection: `Checkpoint`, `CheckpointAck`, `Resync`, `ChainQuery`
//! and `ChainAnswer`, each encoded beside its decoder.

use super::WireError;
use super::codec::{Reader, put_tick_delta, put_u64_le, put_varint};
use super::handshake::within;
use super::message::{MAX_CHAIN_QUESTIONS, Message};
use crate::Tick;

/// A checkpoint of the sender's state-hash chain (see
/// [`HashChain`](crate::desync::HashChain)): the chain through `tick`, the
/// last tick the sender reported in its checkpoint interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Checkpoint {
    /// The tick the chain runs through.
    pub tick: Tick,
    /// Whether the checkpoint closes a block and carries all 64 bits;
    /// otherwise only the low 16.
    pub full: bool,
    /// The chain, or its low 16 bits.
    pub value: u64,
    /// A full checkpoint of the recipient's the sender received (each
    /// full one is acknowledged on its own).
    pub ack: Option<Tick>,
}

/// A checkpoint's value: all 64 bits when `full`, else the low 16.
fn put_value(out: &mut Vec<u8>, full: bool, value: u64) {
    if full {
        put_u64_le(out, value);
    } else {
        out.extend_from_slice(&(value as u16).to_le_bytes());
    }
}

fn read_value(r: &mut Reader<'_>, full: bool) -> Result<u64, WireError> {
    if full {
        r.u64_le()
    } else {
        Ok(u64::from(r.u16_le()?))
    }
}

// ----- Checkpoint `0x06`, CheckpointAck `0x17` -----------------------------

pub(super) fn check_checkpoint(c: &Checkpoint) -> Result<(), WireError> {
    if !c.full && c.value > 0xFFFF {
        return Err(WireError::Invalid("short checkpoint wider than 16 bits"));
    }
    Ok(())
}

pub(super) fn put_checkpoint(out: &mut Vec<u8>, base: Tick, c: &Checkpoint) {
    put_tick_delta(out, base, c.tick);
    out.push(u8::from(c.full) | u8::from(c.ack.is_some()) << 1);
    put_value(out, c.full, c.value);
    if let Some(a) = c.ack {
        put_tick_delta(out, base, a);
    }
}

pub(super) fn read_checkpoint<'a>(
    r: &mut Reader<'a>,
    base: Tick,
) -> Result<Message<'a>, WireError> {
    let tick = r.tick_delta(base)?;
    let flags = r.u8()?;
    if flags > 3 {
        return Err(WireError::Invalid("unknown checkpoint flags"));
    }
    let full = flags & 1 != 0;
    let value = read_value(r, full)?;
    let ack = if flags & 2 != 0 {
        Some(r.tick_delta(base)?)
    } else {
        None
    };
    Ok(Message::Checkpoint(Checkpoint {
        tick,
        full,
        value,
        ack,
    }))
}

// ----- Resync `0x18` --------------------------------------------------------

pub(super) fn put_resync(out: &mut Vec<u8>, base: Tick, id: u32, verdict: &Checkpoint) {
    put_varint(out, u64::from(id));
    put_tick_delta(out, base, verdict.tick);
    out.push(u8::from(verdict.full));
    put_value(out, verdict.full, verdict.value);
}

pub(super) fn read_resync<'a>(r: &mut Reader<'a>, base: Tick) -> Result<Message<'a>, WireError> {
    let id = r.varint_u32()?;
    let tick = r.tick_delta(base)?;
    let full = match r.u8()? {
        0 => false,
        1 => true,
        _ => return Err(WireError::Invalid("unknown resync flags")),
    };
    let value = read_value(r, full)?;
    Ok(Message::Resync {
        id,
        verdict: Checkpoint {
            tick,
            full,
            value,
            ack: None,
        },
    })
}

// ----- ChainQuery `0x15`, ChainAnswer `0x16` --------------------------------

pub(super) fn check_chain_query(ticks: &[Tick]) -> Result<(), WireError> {
    within("chain question", ticks.len(), MAX_CHAIN_QUESTIONS)
}

pub(super) fn put_chain_query(out: &mut Vec<u8>, base: Tick, id: u32, ticks: &[Tick]) {
    put_varint(out, u64::from(id));
    put_varint(out, ticks.len() as u64);
    for t in ticks {
        put_tick_delta(out, base, *t);
    }
}

pub(super) fn read_chain_query<'a>(
    r: &mut Reader<'a>,
    base: Tick,
) -> Result<Message<'a>, WireError> {
    let id = r.varint_u32()?;
    let n = r.count("chain question", MAX_CHAIN_QUESTIONS, 1)?;
    let ticks = (0..n)
        .map(|_| r.tick_delta(base))
        .collect::<Result<_, WireError>>()?;
    Ok(Message::ChainQuery { id, ticks })
}

pub(super) fn check_chain_answer(entries: &[(Tick, u64, u64)]) -> Result<(), WireError> {
    within("chain answer", entries.len(), MAX_CHAIN_QUESTIONS)
}

pub(super) fn put_chain_answer(
    out: &mut Vec<u8>,
    base: Tick,
    id: u32,
    entries: &[(Tick, u64, u64)],
) {
    put_varint(out, u64::from(id));
    put_varint(out, entries.len() as u64);
    for (t, chain, hash) in entries {
        put_tick_delta(out, base, *t);
        put_u64_le(out, *chain);
        put_u64_le(out, *hash);
    }
}

pub(super) fn read_chain_answer<'a>(
    r: &mut Reader<'a>,
    base: Tick,
) -> Result<Message<'a>, WireError> {
    let id = r.varint_u32()?;
    let n = r.count("chain answer", MAX_CHAIN_QUESTIONS, 17)?;
    let entries = (0..n)
        .map(|_| Ok((r.tick_delta(base)?, r.u64_le()?, r.u64_le()?)))
        .collect::<Result<_, WireError>>()?;
    Ok(Message::ChainAnswer { id, entries })
}
