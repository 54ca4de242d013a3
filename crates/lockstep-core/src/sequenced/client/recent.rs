//! The frames run last, kept so the sequencer may code the frames it sends
//! against one of them (a `Frames` message's reference).

use crate::{Frame, Tick};
use std::collections::VecDeque;

/// Frames kept after they ran, at most: a reference is the frame before
/// the first one we lack as the sequencer last heard it, so a few round
/// trips' worth is plenty, and a reference older than this only costs the
/// message (the sequencer's later ones name a newer one).
pub(super) const KEPT: usize = 256;

/// The cells of the frames run last, consecutive.
#[derive(Debug, Clone)]
pub(super) struct Recent<I> {
    first: Tick,
    cells: VecDeque<Vec<Option<I>>>,
}

impl<I: Clone> Default for Recent<I> {
    fn default() -> Self {
        Self {
            first: Tick::ZERO,
            cells: VecDeque::new(),
        }
    }
}

impl<I: Clone> Recent<I> {
    /// `frame` ran: it is kept. A frame before the last one kept (a rewind)
    /// drops those from it on; one after a gap (a snapshot restored) starts
    /// over.
    pub(super) fn ran(&mut self, frame: &Frame<I>) {
        let end = self.first.saturating_add(self.cells.len() as u32);
        if frame.tick < self.first || frame.tick > end {
            self.cells.clear();
            self.first = frame.tick;
        } else {
            self.cells.truncate(frame.tick.since(self.first) as usize);
        }
        self.cells.push_back(frame.inputs.clone());
        if self.cells.len() > KEPT {
            self.cells.pop_front();
            self.first = self.first.saturating_add(1);
        }
    }

    /// The cells of the frame at `tick`, if kept.
    pub(super) fn get(&self, tick: Tick) -> Option<&[Option<I>]> {
        if tick < self.first {
            return None;
        }
        self.cells
            .get(tick.since(self.first) as usize)
            .map(Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(t: u32) -> Frame<u16> {
        Frame {
            tick: Tick::new(t),
            inputs: vec![Some(t as u16)],
            events: vec![],
        }
    }

    #[test]
    fn keeps_the_last_frames_through_rewinds_and_jumps() {
        let mut r = Recent::default();
        for t in 10..20 {
            r.ran(&frame(t));
        }
        assert_eq!(r.get(Tick::new(15)), Some(&[Some(15u16)][..]));
        assert_eq!(r.get(Tick::new(9)), None);
        assert_eq!(r.get(Tick::new(20)), None);
        // A rewind to 14 keeps what came before it.
        r.ran(&frame(14));
        assert_eq!(r.get(Tick::new(13)), Some(&[Some(13u16)][..]));
        assert_eq!(r.get(Tick::new(15)), None);
        // A snapshot restored at 100: only what runs from there.
        r.ran(&frame(101));
        assert_eq!(r.get(Tick::new(13)), None);
        assert_eq!(r.get(Tick::new(101)), Some(&[Some(101u16)][..]));
        for t in 102..102 + KEPT as u32 {
            r.ran(&frame(t));
        }
        assert_eq!(r.get(Tick::new(101)), None, "bounded");
        assert!(r.get(Tick::new(102)).is_some());
    }
}
