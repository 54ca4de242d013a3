//! The app's world as the runner's game: each frame runs the simulation
//! schedule once, the state is the registered components and resources.

use crate::snapshot::Shared;
use crate::{FrameInputs, LockstepSchedule, SimTime};
use bevy::prelude::*;
use lockstep_core::desync::Fields;
use lockstep_core::{Frame, Game, Input};
use std::marker::PhantomData;

/// The runner's game. While the runner runs (inside the plugin's advance
/// system) `world` is the app's world, moved in; between runs it holds an
/// empty world, and `detached` is set only on a copy of a state replaced.
pub(crate) struct BevySim<I> {
    pub(crate) world: core::cell::RefCell<World>,
    registry: Shared,
    /// A state this game stands for without a world (one a resync
    /// replaced): it saves, hashes and lists its fields, nothing more.
    detached: Option<Vec<u8>>,
    /// A state was restored during this run: the restored schedule runs.
    pub(crate) restored: bool,
    /// Why the state could not be saved, the first time it could not
    /// (the plugin then stops the session, saying so).
    pub(crate) unsavable: core::cell::Cell<Option<String>>,
    /// Room for the state, hashed every tick without allocating.
    scratch: core::cell::RefCell<Vec<u8>>,
    _input: PhantomData<fn() -> I>,
}

impl<I> core::fmt::Debug for BevySim<I> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BevySim")
            .field("detached", &self.detached.as_ref().map(Vec::len))
            .finish_non_exhaustive()
    }
}

impl<I> BevySim<I> {
    pub(crate) fn new(registry: Shared) -> Self {
        Self {
            world: core::cell::RefCell::new(World::new()),
            registry,
            detached: None,
            restored: false,
            unsavable: core::cell::Cell::new(None),
            scratch: core::cell::RefCell::new(Vec::new()),
            _input: PhantomData,
        }
    }

    /// What the state is made of, as it was when the session started.
    pub(crate) fn registry(&self) -> &crate::snapshot::Registry {
        &self.registry
    }

    /// The local input for the tick due: the game's input systems run
    /// ([`LockstepInput`](crate::LockstepInput)), then [`LocalInput`] is
    /// read.
    pub(crate) fn sample_input(&self) -> I
    where
        I: Input + Send + Sync,
    {
        let Ok(mut world) = self.world.try_borrow_mut() else {
            return I::default();
        };
        let _ = world.try_run_schedule(crate::LockstepInput);
        world
            .get_resource::<crate::LocalInput<I>>()
            .map(|l| l.0.clone())
            .unwrap_or_default()
    }

    /// A game standing for `state` until the world is moved in
    /// ([`attach`](Self::attach)): what a runner is made with.
    pub(crate) fn detached(registry: Shared, state: Vec<u8>) -> Self {
        Self {
            detached: Some(state),
            ..Self::new(registry)
        }
    }

    /// From now on the game is its world's state.
    pub(crate) fn attach(&mut self) {
        self.detached = None;
    }

    /// The state, or why it cannot be saved (noted for the plugin).
    fn state(&self) -> Result<Vec<u8>, String> {
        let saved = match &self.detached {
            Some(b) => Ok(b.clone()),
            None => self.registry.save(&self.world.borrow()),
        };
        if let Err(e) = &saved {
            self.note(e);
        }
        saved
    }

    /// Notes the first reason the state could not be saved.
    fn note(&self, why: &str) {
        let first = self.unsavable.take().unwrap_or_else(|| why.to_owned());
        self.unsavable.set(Some(first));
    }
}

impl<I: Input + Send + Sync> Game for BevySim<I> {
    type Input = I;

    fn step(&mut self, frame: &Frame<I>) {
        let world = self.world.get_mut();
        world.insert_resource(FrameInputs {
            tick: frame.tick,
            inputs: frame.inputs.clone(),
            events: frame.events.clone(),
        });
        if let Some(mut t) = world.get_resource_mut::<SimTime>() {
            t.tick = frame.tick.get();
            t.ticks = t.ticks.saturating_add(1);
        }
        world.run_schedule(LockstepSchedule);
    }

    fn hash(&self) -> u64 {
        if let Some(b) = &self.detached {
            return xxhash_rust::xxh3::xxh3_64(b);
        }
        let mut buf = self.scratch.borrow_mut();
        match self.registry.save_into(&self.world.borrow(), &mut buf) {
            Ok(()) => xxhash_rust::xxh3::xxh3_64(&buf),
            Err(e) => {
                self.note(&e);
                0
            }
        }
    }

    fn save(&self) -> Vec<u8> {
        self.state().unwrap_or_default()
    }

    fn restore(_: &[u8]) -> Result<Self, String> {
        Err("a Bevy world is restored in place (Game::replace)".into())
    }

    fn replace(&mut self, bytes: &[u8]) -> Result<Self, String> {
        let old = self.state()?;
        self.registry
            .load(self.world.get_mut(), bytes)
            .map_err(|e| e.to_string())?;
        self.restored = true;
        Ok(Self {
            world: core::cell::RefCell::new(World::new()),
            registry: self.registry.clone(),
            detached: Some(old),
            restored: false,
            unsavable: core::cell::Cell::new(None),
            scratch: core::cell::RefCell::new(Vec::new()),
            _input: PhantomData,
        })
    }

    fn fields(&self, out: &mut Fields) {
        if let Ok(b) = self.state() {
            self.registry.fields(&b, out);
        }
    }
}
