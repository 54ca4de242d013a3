//! Checking a Bevy game's simulation before it plays: run twice on the
//! same frames, one copy moved into a fresh app through its snapshot now
//! and then, as a joiner's would be.

use crate::sim::BevySim;
use crate::snapshot::{Registry, Shared};
use bevy::prelude::*;
use lockstep_core::desync::{Cause, Divergence, Fields, Passed};
use lockstep_core::{Frame, Game, Input, PlayerId, SystemEvent, Tick};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

/// Makes the game's app (plugin, registrations, systems, start state).
type MakeApp = Arc<dyn Fn() -> App>;

/// Checks a Bevy game's simulation the way a match depends on it, with no
/// network: two copies of the app run the same frames and must stay
/// equal; every `round_trip_every` ticks the second copy's state is saved
/// and loaded into a fresh app (as a joiner's would be), which must go on
/// exactly as the first. A step that is not deterministic, a field the
/// snapshot leaves out, a component the simulation reads but nobody
/// registered: each fails with the tick and the fields that part
/// (`entity[id].Type.field`).
///
/// One line in a test:
///
/// ```
/// use bevy::prelude::*;
/// use lockstep_bevy::prelude::*;
/// use lockstep_bevy::SelfCheck;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Component, Serialize, Deserialize, Default)]
/// #[require(Simulated)]
/// struct Counter(u32);
///
/// fn count(frame: Res<FrameInputs<u8>>, mut q: Query<&mut Counter>) {
///     for mut c in &mut q {
///         c.0 += frame.inputs.iter().flatten().map(|i| u32::from(*i)).sum::<u32>();
///     }
/// }
///
/// fn my_app() -> App {
///     let mut app = App::new();
///     app.add_plugins((MinimalPlugins, LockstepPlugin::<u8>::default()))
///         .lockstep_component::<Counter>()
///         .add_systems(LockstepSchedule, count)
///         .add_systems(Startup, |mut commands: Commands| {
///             commands.spawn(Counter(0));
///         });
///     app
/// }
///
/// SelfCheck::<u8>::new(my_app).inputs(|tick, _| tick.get() as u8).run()?;
/// # Ok::<(), lockstep_core::desync::Divergence>(())
/// ```
pub struct SelfCheck<I> {
    make: MakeApp,
    players: u16,
    ticks: u32,
    every: u32,
    input: Box<dyn FnMut(Tick, PlayerId) -> I>,
}

impl<I> core::fmt::Debug for SelfCheck<I> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SelfCheck")
            .field("players", &self.players)
            .field("ticks", &self.ticks)
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

impl<I: Input + Send + Sync> SelfCheck<I> {
    /// A check of the app `make` builds (its `Startup` systems make the
    /// match's start): 2 players, 300 ticks, a round trip every 30, every
    /// input neutral until [`inputs`](Self::inputs) says otherwise.
    pub fn new(make: impl Fn() -> App + 'static) -> Self {
        Self {
            make: Arc::new(make),
            players: 2,
            ticks: 300,
            every: 30,
            input: Box::new(|_, _| I::default()),
        }
    }

    /// Seats taken (each joins at tick 0).
    #[must_use]
    pub fn players(mut self, players: u16) -> Self {
        self.players = players;
        self
    }

    /// Ticks run.
    #[must_use]
    pub fn ticks(mut self, ticks: u32) -> Self {
        self.ticks = ticks;
        self
    }

    /// A round trip through a fresh app every this many ticks.
    #[must_use]
    pub fn round_trip_every(mut self, every: u32) -> Self {
        self.every = every.max(1);
        self
    }

    /// Each seat's input at each tick.
    #[must_use]
    pub fn inputs(mut self, input: impl FnMut(Tick, PlayerId) -> I + 'static) -> Self {
        self.input = Box::new(input);
        self
    }

    /// Runs the check: what it went through, or where the copies parted.
    pub fn run(mut self) -> Result<Passed, Divergence> {
        let make = self.make.clone();
        let check = lockstep_core::desync::SelfCheck::every(self.every);
        let unsavable: Rc<RefCell<Option<String>>> = Rc::default();
        let copies = Cell::new(0u32);
        let new_copy = || {
            copies.set(copies.get() + 1);
            CheckedApp::<I>::new(make.clone(), copies.get(), unsavable.clone())
        };
        // State that cannot be saved is named as such, not as the empty
        // snapshot it leaves.
        let named = |d: Divergence| match unsavable.borrow_mut().take() {
            Some(why) => Divergence {
                cause: Cause::Unsavable(why),
                ..d
            },
            None => d,
        };
        let mut run = check.start(new_copy).map_err(named)?;
        for t in 0..self.ticks {
            let tick = Tick::new(t);
            let inputs = (0..self.players)
                .map(|p| Some((self.input)(tick, PlayerId(p))))
                .collect();
            let events = if t == 0 {
                (0..self.players)
                    .map(|p| SystemEvent::Joined {
                        player: PlayerId(p),
                    })
                    .collect()
            } else {
                Vec::new()
            };
            run.step(&Frame {
                tick,
                inputs,
                events,
            })
            .map_err(named)?;
        }
        Ok(run.passed())
    }
}

/// The world of a fresh app of the game, after its start.
fn fresh_world(make: &MakeApp) -> World {
    let mut app = make();
    app.finish();
    app.cleanup();
    app.update();
    core::mem::take(app.world_mut())
}

/// One copy of the game for the check: its app's world, which a state
/// loads into a fresh app's.
struct CheckedApp<I> {
    sim: BevySim<I>,
    make: MakeApp,
    /// Which copy: each advances Bevy's clock by its own step, so a
    /// simulation that reads `Time` parts them.
    copy: u32,
    /// Why the state could not be saved, for the report.
    unsavable: Rc<RefCell<Option<String>>>,
}

impl<I> core::fmt::Debug for CheckedApp<I> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.sim.fmt(f)
    }
}

impl<I: Input + Send + Sync> CheckedApp<I> {
    fn new(make: MakeApp, copy: u32, unsavable: Rc<RefCell<Option<String>>>) -> Self {
        let world = fresh_world(&make);
        let registry: Shared = Arc::new(
            world
                .get_resource::<Registry>()
                .cloned()
                .unwrap_or_default(),
        );
        let mut sim = BevySim::new(registry);
        *sim.world.get_mut() = world;
        Self {
            sim,
            make,
            copy,
            unsavable,
        }
    }

    /// Notes why the state could not be saved, if it could not.
    fn note(&self) {
        if let Some(why) = self.sim.unsavable.take() {
            self.unsavable.borrow_mut().get_or_insert(why);
        }
    }
}

impl<I: Input + Send + Sync> Game for CheckedApp<I> {
    type Input = I;

    fn step(&mut self, frame: &Frame<I>) {
        // Bevy's clock, as each copy's own machine would have it.
        let step = core::time::Duration::from_millis(16 * u64::from(self.copy.max(1)));
        let world = self.sim.world.get_mut();
        if let Some(mut time) = world.get_resource_mut::<Time>() {
            time.advance_by(step);
        }
        if let Some(mut time) = world.get_resource_mut::<Time<Virtual>>() {
            time.advance_by(step);
        }
        self.sim.step(frame);
    }

    fn hash(&self) -> u64 {
        let hash = self.sim.hash();
        self.note();
        hash
    }

    fn save(&self) -> Vec<u8> {
        let saved = self.sim.save();
        self.note();
        saved
    }

    fn restore(_: &[u8]) -> Result<Self, String> {
        Err("a Bevy world is restored in place (Game::replace)".into())
    }

    /// Loads the state into a fresh app's world, as a joiner's.
    fn replace(&mut self, bytes: &[u8]) -> Result<Self, String> {
        let mut world = fresh_world(&self.make);
        let registry = world
            .get_resource::<Registry>()
            .cloned()
            .unwrap_or_default();
        registry
            .load(&mut world, bytes)
            .map_err(|e| e.to_string())?;
        let old = self.sim.save();
        *self.sim.world.get_mut() = world;
        Ok(Self {
            sim: BevySim::detached(Arc::new(registry), old),
            make: self.make.clone(),
            copy: self.copy,
            unsavable: self.unsavable.clone(),
        })
    }

    fn fields(&self, out: &mut Fields) {
        self.sim.fields(out);
    }
}
