//! Lockstep for Bevy: one plugin runs a deterministic match in the app's
//! world, with players joining mid-match, reconnecting and healing a
//! divergence handled for the game.
//!
//! - The game's systems that read the local player's controls run in
//!   [`LockstepInput`] and set [`LocalInput`]; it runs when an input is
//!   due.
//! - The simulation's systems run in [`LockstepSchedule`], once per
//!   confirmed frame, single-threaded (ambiguous orderings are an error),
//!   with the frame's inputs and membership events in [`FrameInputs`], the
//!   tick in [`SimTime`] and a seeded [`SimRng`].
//! - The state is what the game registers ([`LockstepAppExt`]): components
//!   of entities marked [`Simulated`], and resources. The plugin saves it
//!   for a joiner, restores what it is sent (then runs
//!   [`LockstepRestored`] to rebuild what is not state: meshes, UI) and
//!   hashes the same bytes for the checksums, so that a field the
//!   snapshot forgets also shows as a divergence.
//! - Insert a [`LockstepSession`] to play; [`LockstepStatus`],
//!   [`LockstepStats`], [`LockstepEvent`] and [`StatusChanged`] say how it
//!   goes.
//!
//! ```
//! use bevy::prelude::*;
//! use lockstep_bevy::prelude::*;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Component, Serialize, Deserialize, Default)]
//! #[require(Simulated)]
//! struct Position(i64);
//!
//! fn read_controls(mut input: ResMut<LocalInput<u8>>) {
//!     input.0 = 1; // from the keyboard, say
//! }
//!
//! fn movement(frame: Res<FrameInputs<u8>>, mut q: Query<&mut Position>) {
//!     let total: i64 = frame.inputs.iter().flatten().map(|i| i64::from(*i)).sum();
//!     for mut p in &mut q {
//!         p.0 += total;
//!     }
//! }
//!
//! let mut app = App::new();
//! app.add_plugins((MinimalPlugins, LockstepPlugin::<u8>::default()))
//!     .lockstep_component::<Position>()
//!     .add_systems(LockstepInput, read_controls)
//!     .add_systems(LockstepSchedule, movement);
//! app.world_mut().spawn(Position(0));
//! app.update();
//! ```
#![forbid(unsafe_code)]

mod check;
mod depth;
mod session;
mod sim;
mod snapshot;

pub use check::SelfCheck;
pub use session::{
    LockstepEvent, LockstepSession, LockstepStats, LockstepStatus, Reopened, StatusChanged,
};
pub use snapshot::{SimIds, Simulated, SnapshotError};

use bevy::ecs::entity::MapEntities;
use bevy::ecs::reflect::AppTypeRegistry;
use bevy::ecs::schedule::{LogLevel, ScheduleBuildSettings, ScheduleLabel, SingleThreadedExecutor};
use bevy::prelude::*;
use lockstep_core::{Input, PlayerId, SystemEvent, Tick};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::marker::PhantomData;

/// What a game most often needs: `use lockstep_bevy::prelude::*`.
pub mod prelude {
    pub use crate::{
        FrameInputs, LocalInput, LockstepAppExt, LockstepEvent, LockstepInput, LockstepPlugin,
        LockstepRestored, LockstepSchedule, LockstepSession, LockstepStats, LockstepStatus,
        LockstepSystems, SimRng, SimTime, Simulated, StatusChanged,
    };
    pub use lockstep_core::runner::Status;
    pub use lockstep_core::sequenced::ClientConfig;
}

/// Where the game's systems write the local input for the tick due (see
/// [`LocalInput`]). Runs only when an input is due, before the frames of
/// the update run.
#[derive(ScheduleLabel, Debug, Clone, PartialEq, Eq, Hash)]
pub struct LockstepInput;

/// The simulation: runs once per confirmed frame, on every machine the
/// same, single-threaded, with ambiguous system orderings refused.
#[derive(ScheduleLabel, Debug, Clone, PartialEq, Eq, Hash)]
pub struct LockstepSchedule;

/// Runs after the simulation's state was replaced (a joiner's snapshot, a
/// resync): rebuild what is not simulation state (meshes, UI) from it.
#[derive(ScheduleLabel, Debug, Clone, PartialEq, Eq, Hash)]
pub struct LockstepRestored;

/// The plugin's systems, in `PreUpdate`: datagrams in, the runner's turn,
/// datagrams out.
#[derive(SystemSet, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockstepSystems {
    /// Datagrams in.
    Receive,
    /// The runner's turn: inputs sampled, frames run.
    Advance,
    /// Datagrams out.
    Send,
}

/// The local player's input for the tick due: set it in [`LockstepInput`].
/// It is sent as it stands when an input is due (held, not reset).
#[derive(Resource, Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalInput<I>(pub I);

/// The frame being run: every seat's input (`None` for an empty seat) and
/// the membership events at this tick, the same on every machine. Read it
/// in [`LockstepSchedule`]; seats join and leave only through `events`.
#[derive(Resource, Debug, Clone, PartialEq, Eq)]
pub struct FrameInputs<I> {
    /// The tick.
    pub tick: Tick,
    /// Each seat's input, by seat.
    pub inputs: Vec<Option<I>>,
    /// Joins, leaves and drops at this tick.
    pub events: Vec<SystemEvent>,
}

impl<I> FrameInputs<I> {
    /// Seat `player`'s input, if the seat is taken.
    pub fn input(&self, player: PlayerId) -> Option<&I> {
        self.inputs.get(player.index()).and_then(Option::as_ref)
    }
}

/// The simulation's fixed-step clock: the tick being run and the match's
/// tick rate. Part of the state. Use it, never `Time`, in
/// [`LockstepSchedule`]: the app's clock differs between machines.
#[derive(Resource, Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimTime {
    /// The tick being run (the last run, outside the schedule).
    pub tick: u32,
    /// Frames run since the match began (as this state counts them).
    pub ticks: u64,
    /// Ticks a second (0 until the session knows it).
    pub rate: u32,
}

impl SimTime {
    /// One tick's length (zero until the rate is known).
    pub fn delta(&self) -> core::time::Duration {
        if self.rate == 0 {
            return core::time::Duration::ZERO;
        }
        core::time::Duration::from_secs(1) / self.rate
    }

    /// The match's time at the end of this tick.
    pub fn elapsed(&self) -> core::time::Duration {
        self.delta() * (self.tick.saturating_add(1))
    }
}

/// A seeded random number generator for the simulation, part of the state
/// (the engine's [`SimRng`](lockstep_core::sim::SimRng), SplitMix64: every
/// machine draws the same numbers in the same order; `below`, `unit` and
/// `chance` through `Deref`). Insert one with the match's seed before the
/// session starts.
///
/// ```
/// let mut rng = lockstep_bevy::SimRng::seeded(7);
/// let roll = rng.below(6) + 1;
/// assert!((1..=6).contains(&roll));
/// ```
#[derive(Resource, Debug, Clone, Serialize, Deserialize)]
#[serde(from = "u64", into = "u64")]
pub struct SimRng(lockstep_core::sim::SimRng);

impl SimRng {
    /// A generator from `seed`.
    pub fn seeded(seed: u64) -> Self {
        Self(lockstep_core::sim::SimRng::new(seed))
    }
}

impl Default for SimRng {
    fn default() -> Self {
        Self::seeded(0)
    }
}

impl PartialEq for SimRng {
    fn eq(&self, other: &Self) -> bool {
        self.0.state() == other.0.state()
    }
}

impl Eq for SimRng {}

impl From<u64> for SimRng {
    fn from(state: u64) -> Self {
        Self::seeded(state)
    }
}

impl From<SimRng> for u64 {
    fn from(rng: SimRng) -> Self {
        rng.0.state()
    }
}

impl core::ops::Deref for SimRng {
    type Target = lockstep_core::sim::SimRng;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl core::ops::DerefMut for SimRng {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// Present while a snapshot is being restored into the world (a joiner's
/// state, a resync, [`restore_state`]): the game's observers and hooks run
/// as entities are despawned, spawned and changed, and one that changes
/// simulation state then must skip its work (`Option<Res<Restoring>>`),
/// or the restore fails with [`SnapshotError::Altered`].
///
/// ```
/// use bevy::prelude::*;
/// use lockstep_bevy::Restoring;
/// #[derive(Component)]
/// struct Ship;
/// fn wreck(_: On<Remove, Ship>, restoring: Option<Res<Restoring>>, mut commands: Commands) {
///     if restoring.is_none() {
///         commands.spawn(Name::new("debris"));
///     }
/// }
/// ```
#[derive(Resource, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restoring;

/// Runs a lockstep match in the app (see the [crate] docs) for
/// input type `I`.
pub struct LockstepPlugin<I> {
    _input: PhantomData<fn() -> I>,
}

impl<I> Default for LockstepPlugin<I> {
    fn default() -> Self {
        Self {
            _input: PhantomData,
        }
    }
}

impl<I> core::fmt::Debug for LockstepPlugin<I> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("LockstepPlugin")
    }
}

impl<I: Input + Send + Sync> Plugin for LockstepPlugin<I> {
    fn build(&self, app: &mut App) {
        let mut sim = Schedule::new(LockstepSchedule);
        sim.set_executor(SingleThreadedExecutor::new());
        sim.set_build_settings(ScheduleBuildSettings {
            ambiguity_detection: LogLevel::Error,
            ..ScheduleBuildSettings::default()
        });
        app.add_schedule(sim)
            .init_schedule(LockstepInput)
            .init_schedule(LockstepRestored)
            .init_resource::<LocalInput<I>>()
            .init_resource::<SimIds>()
            .init_resource::<SimTime>()
            .init_resource::<SimRng>()
            .init_resource::<LockstepStatus>()
            .init_resource::<LockstepStats>()
            .add_message::<LockstepEvent>()
            .add_message::<StatusChanged>()
            .lockstep_resource::<SimTime>()
            .lockstep_resource::<SimRng>()
            .configure_sets(
                PreUpdate,
                (
                    LockstepSystems::Receive,
                    LockstepSystems::Advance,
                    LockstepSystems::Send,
                )
                    .chain(),
            )
            .add_systems(
                PreUpdate,
                (
                    session::receive::<I>.in_set(LockstepSystems::Receive),
                    session::advance::<I>.in_set(LockstepSystems::Advance),
                    session::send::<I>.in_set(LockstepSystems::Send),
                ),
            );
    }
}

/// The hash of the simulation's state in `world`, as the checksums
/// compare it (`None` if it cannot be saved: see [`state_bytes`]).
pub fn state_hash(world: &World) -> Option<u64> {
    state_bytes(world)
        .ok()
        .map(|b| xxhash_rust::xxh3::xxh3_64(&b))
}

/// The simulation's state in `world` as a snapshot holds it, or why it
/// cannot be saved (a component pointing at an entity not simulated, two
/// entities with one id).
pub fn state_bytes(world: &World) -> Result<Vec<u8>, SnapshotError> {
    let saved = match world.get_resource::<snapshot::Registry>() {
        Some(registry) => registry.save(world),
        None => snapshot::Registry::default().save(world),
    };
    saved.map_err(SnapshotError::Unsavable)
}

/// Puts the simulation's state `bytes` hold (from [`state_bytes`], a
/// save game, a replay's keyframe) into `world`: simulated entities not
/// in it are despawned, the others updated or spawned, registered
/// resources set or removed. Bytes from elsewhere are checked first: on an
/// error nothing changes.
pub fn restore_state(world: &mut World, bytes: &[u8]) -> Result<(), SnapshotError> {
    let registry = world
        .get_resource::<snapshot::Registry>()
        .cloned()
        .unwrap_or_default();
    registry.load(world, bytes)
}

/// Registers what the simulation's state is made of.
pub trait LockstepAppExt {
    /// Component `T` of [`Simulated`] entities is state (saved with serde).
    fn lockstep_component<T>(&mut self) -> &mut Self
    where
        T: Component<Mutability = bevy::ecs::component::Mutable> + Serialize + DeserializeOwned;

    /// Component `T`, which points at other [`Simulated`] entities, is
    /// state: its references are saved as the entities' simulation ids
    /// and mapped back when restored. One that points at a live entity not
    /// simulated cannot be saved; one that points at a despawned entity is
    /// saved as none (`Entity::PLACEHOLDER`).
    fn lockstep_mapped_component<T>(&mut self) -> &mut Self
    where
        T: Component<Mutability = bevy::ecs::component::Mutable>
            + Serialize
            + DeserializeOwned
            + MapEntities
            + Clone;

    /// Resource `T` is state (saved with serde).
    fn lockstep_resource<T>(&mut self) -> &mut Self
    where
        T: Resource + Serialize + DeserializeOwned;

    /// Component `T` of [`Simulated`] entities is state, saved through its
    /// reflection (`#[derive(Reflect)]`; registered in the app's type
    /// registry here). Entity references are not mapped: use
    /// [`lockstep_mapped_component`](Self::lockstep_mapped_component) for
    /// a component that points at entities.
    fn lockstep_component_reflect<T>(&mut self) -> &mut Self
    where
        T: Component<Mutability = bevy::ecs::component::Mutable>
            + Reflect
            + FromReflect
            + TypePath
            + bevy::reflect::GetTypeRegistration;

    /// Resource `T` is state, saved through its reflection.
    fn lockstep_resource_reflect<T>(&mut self) -> &mut Self
    where
        T: Resource + Reflect + FromReflect + TypePath + bevy::reflect::GetTypeRegistration;
}

/// What the app registered as state so far.
fn registry(app: &mut App) -> Mut<'_, snapshot::Registry> {
    app.world_mut().get_resource_or_init::<snapshot::Registry>()
}

/// Registers `T` in the app's type registry, and returns the registry.
fn reflected<T: bevy::reflect::GetTypeRegistration>(app: &mut App) -> AppTypeRegistry {
    app.register_type::<T>();
    app.world_mut()
        .get_resource_or_init::<AppTypeRegistry>()
        .clone()
}

impl LockstepAppExt for App {
    fn lockstep_component<T>(&mut self) -> &mut Self
    where
        T: Component<Mutability = bevy::ecs::component::Mutable> + Serialize + DeserializeOwned,
    {
        registry(self).component::<T>();
        self
    }

    fn lockstep_mapped_component<T>(&mut self) -> &mut Self
    where
        T: Component<Mutability = bevy::ecs::component::Mutable>
            + Serialize
            + DeserializeOwned
            + MapEntities
            + Clone,
    {
        registry(self).mapped_component::<T>();
        self
    }

    fn lockstep_resource<T>(&mut self) -> &mut Self
    where
        T: Resource + Serialize + DeserializeOwned,
    {
        registry(self).resource::<T>();
        self
    }

    fn lockstep_component_reflect<T>(&mut self) -> &mut Self
    where
        T: Component<Mutability = bevy::ecs::component::Mutable>
            + Reflect
            + FromReflect
            + TypePath
            + bevy::reflect::GetTypeRegistration,
    {
        let types = reflected::<T>(self);
        registry(self).reflect_component::<T>(types);
        self
    }

    fn lockstep_resource_reflect<T>(&mut self) -> &mut Self
    where
        T: Resource + Reflect + FromReflect + TypePath + bevy::reflect::GetTypeRegistration,
    {
        let types = reflected::<T>(self);
        registry(self).reflect_resource::<T>(types);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::SimRng;

    /// The generator saves as its bare state (as it did before it wrapped
    /// the engine's), and draws the engine's numbers.
    #[test]
    fn sim_rng_saves_as_its_state() {
        let mut rng = SimRng::seeded(99);
        let mut engine = lockstep_core::sim::SimRng::new(99);
        assert_eq!(rng.next_u64(), engine.next_u64());
        let bytes = postcard::to_allocvec(&rng).expect("encodes");
        assert_eq!(
            bytes,
            postcard::to_allocvec(&engine.state()).expect("encodes")
        );
        let back: SimRng = postcard::from_bytes(&bytes).expect("decodes");
        assert_eq!(back, rng);
    }
}
