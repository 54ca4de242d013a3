//! The window of ticks a session holds: inputs as they arrive, frames until
//! every peer that may still ask for them has them.

use crate::frame::SystemEvent;
use crate::{Frame, Tick};
use std::collections::VecDeque;

/// One seat's entry for one tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cell<I> {
    /// Not received yet: the tick cannot run.
    Unknown,
    /// The seat's input.
    Known(I),
    /// The seat's input as another peer forwarded it while the seat is being
    /// abandoned: held and passed on, but not run until the peers have
    /// agreed on it (a forwarding peer could lie).
    Forwarded(I),
    /// The seat has no player at this tick.
    Empty,
}

impl<I> Cell<I> {
    pub(crate) fn is_unknown(&self) -> bool {
        matches!(self, Self::Unknown)
    }

    /// Whether a tick may run with this cell: known or empty.
    pub(crate) fn is_settled(&self) -> bool {
        matches!(self, Self::Known(_) | Self::Empty)
    }

    /// The input held, known or forwarded.
    pub(crate) fn input(&self) -> Option<&I> {
        match self {
            Self::Known(i) | Self::Forwarded(i) => Some(i),
            Self::Unknown | Self::Empty => None,
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Slot<I> {
    pub(crate) cells: Vec<Cell<I>>,
    /// Kept sorted, without duplicates, so every machine builds the same list
    /// whatever order the events were learned in.
    pub(crate) events: Vec<SystemEvent>,
}

impl<I: Clone> Slot<I> {
    pub(crate) fn complete(&self) -> bool {
        self.cells.iter().all(Cell::is_settled)
    }

    pub(crate) fn add_event(&mut self, ev: SystemEvent) {
        if let Err(at) = self.events.binary_search(&ev) {
            self.events.insert(at, ev);
        }
    }

    pub(crate) fn to_frame(&self, tick: Tick) -> Frame<I> {
        Frame {
            tick,
            inputs: self
                .cells
                .iter()
                .map(|c| match c {
                    Cell::Known(i) => Some(i.clone()),
                    Cell::Empty | Cell::Unknown | Cell::Forwarded(_) => None,
                })
                .collect(),
            events: self.events.clone(),
        }
    }
}

/// Slots for the ticks `base..base + len`.
#[derive(Debug, Clone)]
pub(crate) struct Store<I> {
    base: Tick,
    slots: VecDeque<Slot<I>>,
}

impl<I: Clone> Store<I> {
    pub(crate) fn starting_at(base: Tick) -> Self {
        Self {
            base,
            slots: VecDeque::new(),
        }
    }

    pub(crate) fn base(&self) -> Tick {
        self.base
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    fn index(&self, tick: Tick) -> Option<usize> {
        if tick < self.base {
            return None;
        }
        Some(tick.since(self.base) as usize)
    }

    pub(crate) fn get(&self, tick: Tick) -> Option<&Slot<I>> {
        self.slots.get(self.index(tick)?)
    }

    pub(crate) fn get_mut(&mut self, tick: Tick) -> Option<&mut Slot<I>> {
        let i = self.index(tick)?;
        self.slots.get_mut(i)
    }

    pub(crate) fn cell(&self, tick: Tick, seat: usize) -> Option<&Cell<I>> {
        self.get(tick)?.cells.get(seat)
    }

    /// The slot for `tick`, creating it and every slot before it with
    /// `init`. The caller bounds `tick` (the horizon), which bounds the store.
    pub(crate) fn ensure(
        &mut self,
        tick: Tick,
        mut init: impl FnMut(Tick) -> Slot<I>,
    ) -> Option<&mut Slot<I>> {
        let i = self.index(tick)?;
        while self.slots.len() <= i {
            let t = self.base.checked_add(self.slots.len() as u32)?;
            self.slots.push_back(init(t));
        }
        self.slots.get_mut(i)
    }

    /// Slots from `from` to the end, with their ticks.
    pub(crate) fn iter_from_mut(
        &mut self,
        from: Tick,
    ) -> impl Iterator<Item = (Tick, &mut Slot<I>)> + '_ {
        let skip = from.since(self.base) as usize;
        let base = self.base;
        self.slots
            .iter_mut()
            .enumerate()
            .skip(skip)
            .map(move |(i, s)| (base.saturating_add(i as u32), s))
    }

    /// Forgets every tick before `tick`.
    pub(crate) fn prune_below(&mut self, tick: Tick) {
        while self.base < tick {
            if self.slots.pop_front().is_none() {
                self.base = tick;
                return;
            }
            self.base = self.base.saturating_add(1);
        }
    }
}
