//! Building the packet for one peer within the datagram budget.

use super::store::Cell;
use super::{MeshSession, PendingFrame, PendingRun};
use crate::wire::{self, Echo, FrameRef, InputRun, MeshPacket};
use crate::{Input, PlayerId, Tick};

impl<I: Input> MeshSession<I> {
    /// Encodes the packet for peer `i` into `buf`, within the datagram budget.
    pub(super) fn build_packet(&mut self, i: usize, buf: &mut Vec<u8>) {
        let p = &self.peers[i];
        let now = self.now;
        let mut packet = MeshPacket {
            next_tick: self.next_tick,
            stamp: now.as_millis() as u32,
            echo: p.stamp.map(|(stamp, at)| Echo {
                stamp,
                held_ms: u32::try_from((now - at).as_millis()).unwrap_or(u32::MAX),
            }),
            pause: self.pause.frame(),
            lifted: self.pause.lifted(),
            checksum_ack: p.checks.received,
            checksums: self.checks.unacked(&p.checks).collect(),
            ..MeshPacket::default()
        };
        // Seats whose input we may still need forwarded, or forward.
        let targets: Vec<(PlayerId, Option<Tick>)> = self
            .wanted
            .iter()
            .map(|&c| (c, None))
            .chain(
                self.decisions
                    .iter()
                    .filter(|(_, t)| *t >= self.next_tick.min(p.next_tick))
                    .map(|&(c, t)| (c, Some(t))),
            )
            .filter(|(c, _)| Some(*c) != self.local_seat)
            .collect();
        if self.local_seat.is_some() && p.seat.is_some() {
            if let Some(s) = p.seat {
                packet.acks.push((s, self.contiguous(s)));
            }
            for &(c, _) in &targets {
                if Some(c) != p.seat {
                    packet.acks.push((c, self.contiguous(c)));
                }
            }
            packet.wanted = self.wanted.iter().copied().collect();
            packet.decisions = self
                .decisions
                .iter()
                .filter(|(c, t)| *t >= p.next_tick || p.seat == Some(*c))
                .copied()
                .collect();
        }
        if self.local_seat.is_none() {
            // Observers only tell players where they are.
            packet.pause = None;
            packet.lifted = None;
        }

        let mut budget = self.config.max_datagram.saturating_sub(packet.head_len());
        self.scratch.clear();
        let mut runs: Vec<PendingRun> = Vec::new();
        let mut frames: Vec<PendingFrame> = Vec::new();
        let (p_seat, p_next) = (p.seat, p.next_tick);
        let resume_from = |seat: PlayerId| p.acks[seat.index()].unwrap_or(p_next).max(p_next);
        let own_from = self.local_seat.map(resume_from);
        let target_from: Vec<Tick> = targets.iter().map(|&(c, _)| resume_from(c)).collect();
        if let (Some(me), Some(from), Some(_)) = (self.local_seat, own_from, p_seat) {
            self.encode_run(me, from, self.next_commit, &mut budget, &mut runs);
            for (&(c, decided), &from) in targets.iter().zip(&target_from) {
                if Some(c) == p_seat {
                    continue;
                }
                let mut end = self.contiguous(c);
                if let Some(d) = decided {
                    end = end.min(d);
                }
                self.encode_run(c, from, end, &mut budget, &mut runs);
            }
        } else if p_seat.is_none() && self.is_feeder() {
            self.encode_frames(p_next, &mut budget, &mut frames);
        }

        let scratch = &self.scratch;
        packet.inputs = runs
            .iter()
            .map(|(seat, start, ranges)| InputRun {
                seat: *seat,
                start: *start,
                inputs: ranges.iter().map(|r| &scratch[r.clone()]).collect(),
            })
            .collect();
        packet.frames = frames
            .into_iter()
            .map(|(tick, cells, events)| FrameRef {
                tick,
                inputs: cells.into_iter().map(|c| c.map(|r| &scratch[r])).collect(),
                events,
            })
            .collect();
        packet.encode(buf);
        debug_assert!(buf.len() <= self.config.max_datagram, "packet over budget");
    }

    /// Encodes known inputs of `seat` for `from..end` into the scratch
    /// buffer, as many as the budget allows.
    fn encode_run(
        &mut self,
        seat: PlayerId,
        from: Tick,
        end: Tick,
        budget: &mut usize,
        runs: &mut Vec<PendingRun>,
    ) {
        // Primed ticks are known to everyone: never worth sending.
        let from = from
            .max(self.store.base())
            .max(Tick::new(self.config.delay));
        let header = MeshPacket::run_header_cost(seat, from);
        if from >= end || *budget < header {
            return;
        }
        let mut ranges = Vec::new();
        let mut spent = header;
        let mut t = from;
        while t < end && ranges.len() < 1000 {
            let Some(Cell::Known(input)) = self.store.cell(t, seat.index()) else {
                break;
            };
            let at = self.scratch.len();
            input.encode(&mut self.scratch);
            let len = self.scratch.len() - at;
            let cost = MeshPacket::input_cost(len);
            if spent + cost > *budget {
                self.scratch.truncate(at);
                break;
            }
            spent += cost;
            ranges.push(at..at + len);
            let Some(n) = t.next() else { break };
            t = n;
        }
        if !ranges.is_empty() {
            *budget -= spent;
            runs.push((seat, from, ranges));
        }
    }

    /// Encodes confirmed frames from `from` on, as many as fit.
    fn encode_frames(&mut self, from: Tick, budget: &mut usize, frames: &mut Vec<PendingFrame>) {
        let mut t = from.max(self.store.base());
        // Only frames every live player has run: a frame only this peer ran
        // could still be undone by an abandonment (its own input may never
        // have reached anyone).
        let end = self.min_live_next();
        // The frame list header: count and first tick.
        let mut spent = 3 + wire::codec::varint_len(u64::from(t.get()));
        while t < end && frames.len() < 1000 {
            let Some(slot) = self.store.get(t) else { break };
            let mut cost = 1 + wire::codec::varint_len(slot.cells.len() as u64);
            let mut cells = Vec::with_capacity(slot.cells.len());
            let mark = self.scratch.len();
            for c in &slot.cells {
                match c {
                    Cell::Known(input) => {
                        let at = self.scratch.len();
                        input.encode(&mut self.scratch);
                        let len = self.scratch.len() - at;
                        cost += 1 + MeshPacket::input_cost(len);
                        cells.push(Some(at..at + len));
                    }
                    Cell::Empty | Cell::Unknown => {
                        cost += 1;
                        cells.push(None);
                    }
                }
            }
            cost += 1 + slot.events.len() * 4;
            if spent + cost > *budget {
                self.scratch.truncate(mark);
                break;
            }
            spent += cost;
            frames.push((t, cells, slot.events.clone()));
            let Some(n) = t.next() else { break };
            t = n;
        }
        if !frames.is_empty() {
            *budget = budget.saturating_sub(spent);
        }
    }
}
