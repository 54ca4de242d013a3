//! The simulation's state as bytes: which components and resources are
//! in it, the entities that opted in ([`Simulated`]), sorted by the id the
//! simulation gave them, one canonical encoding for snapshots and hashes.

use bevy::ecs::entity::{EntityMapper, MapEntities};
use bevy::ecs::reflect::AppTypeRegistry;
use bevy::prelude::*;
use lockstep_core::desync::Fields;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::sync::Arc;

/// What a snapshot starts with, and its version.
const MAGIC: &[u8; 4] = b"LKBV";
const VERSION: u8 = 1;
/// The most entities a snapshot may claim (bytes come from the network).
const MAX_ENTITIES: u32 = 1 << 22;
/// Ids the simulation gives out, at most: a snapshot whose counter is
/// past it is refused (it could not spawn again), and a simulation that
/// gets there cannot be saved.
pub(crate) const MAX_ID: u32 = 1 << 31;

/// Marks an entity whose state is the simulation's: its registered
/// components are saved, restored and hashed. Each gets an id from the
/// simulation ([`SimIds`]) when it is inserted, the same on every machine
/// when it is spawned by the same system at the same tick; snapshots order
/// entities by it (never by `Entity`, which differs between machines). A
/// clone of a simulated entity, or `Simulated::default()` inserted again,
/// gets a new id.
///
/// ```
/// use bevy::prelude::*;
/// use lockstep_bevy::Simulated;
/// #[derive(Component)]
/// #[require(Simulated)]
/// struct Ship;
/// ```
#[derive(Component, Debug, Default, Clone, Copy, PartialEq, Eq)]
#[component(on_insert = assign_id, clone_behavior = Custom(fresh_clone))]
pub struct Simulated {
    id: u32,
}

impl Simulated {
    /// The entity's id in the simulation (0 until it is inserted, or once
    /// the simulation has given out every id it has).
    pub fn id(&self) -> u32 {
        self.id
    }
}

/// The next id [`Simulated`] hands out: part of every snapshot.
#[derive(Resource, Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SimIds {
    next: u32,
}

fn assign_id(
    mut world: bevy::ecs::world::DeferredWorld<'_>,
    ctx: bevy::ecs::lifecycle::HookContext,
) {
    let taken = world
        .get::<Simulated>(ctx.entity)
        .is_some_and(|s| s.id != 0);
    if taken {
        return;
    }
    let Some(mut ids) = world.get_resource_mut::<SimIds>() else {
        return;
    };
    if ids.next >= MAX_ID {
        // None left: the id stays 0, and saving says so.
        return;
    }
    ids.next += 1;
    let id = ids.next;
    if let Some(mut s) = world.get_mut::<Simulated>(ctx.entity) {
        s.id = id;
    }
}

/// A clone of a simulated entity is a new entity of the simulation: it
/// gets an id of its own when inserted.
fn fresh_clone(
    _: &bevy::ecs::entity::SourceComponent,
    ctx: &mut bevy::ecs::entity::ComponentCloneCtx,
) {
    ctx.write_target_component(Simulated::default());
}

/// Why a snapshot was refused: it comes from another machine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Not a snapshot of this plugin, or of another version of it.
    #[error("not a snapshot of this game's state (bad magic or version)")]
    NotOurs,
    /// Made by a game that registers other state (another build).
    #[error("made by a game that registers other state: {0:016x} here, {1:016x} there")]
    OtherRegistry(u64, u64),
    /// The bytes end early or are malformed.
    #[error("malformed snapshot: {0}")]
    Malformed(String),
    /// The state cannot be saved: registered state on an entity that is
    /// not `Simulated`, a reference to an entity outside the simulation,
    /// two entities with one id.
    #[error("the simulation's state cannot be saved: {0}")]
    Unsavable(String),
    /// The snapshot was restored, but the world then saved otherwise: the
    /// game's observers or hooks changed simulation state while it was
    /// being restored (they run then; see
    /// [`Restoring`](crate::Restoring)), or a value was not in its
    /// canonical form. The world holds the restored state with those
    /// changes.
    #[error("the state restored is not the snapshot's: {0}")]
    Altered(String),
    /// A value does not decode as its type.
    #[error("{name} does not decode: {reason}")]
    Value {
        /// The component's or resource's type.
        name: &'static str,
        /// Why.
        reason: String,
    },
}

/// Saves a registered value onto the end of the buffer: `None` (and
/// nothing written) if it is not there.
type SaveFn = Arc<
    dyn Fn(&World, Option<Entity>, &Ids, &mut Vec<u8>) -> Option<Result<(), String>> + Send + Sync,
>;
/// Loads a registered value onto the entity (or into the world).
type LoadFn =
    Arc<dyn Fn(&mut World, Option<Entity>, &[u8], &Ids) -> Result<(), String> + Send + Sync>;
/// Checks a value's bytes decode.
type CheckFn = Arc<dyn Fn(&[u8]) -> Result<(), String> + Send + Sync>;
/// Reads a value against the snapshot's entity ids, keeping nothing.
type VerifyFn = Arc<dyn Fn(&[u8], &Ids) -> Result<(), String> + Send + Sync>;
/// Takes a value off its entity (or out of the world).
type RemoveFn = Arc<dyn Fn(&mut World, Option<Entity>) + Send + Sync>;
/// Lists a value's fields.
type FieldsFn = Arc<dyn Fn(&[u8], &str, &mut Fields) + Send + Sync>;
/// Whether an entity has the component.
type HasFn = Arc<dyn Fn(&EntityRef<'_>) -> bool + Send + Sync>;

/// One registered type: how to save, load and list it.
#[derive(Clone)]
struct Entry {
    name: &'static str,
    /// Whether its values point at entities (saving needs the ids).
    maps: bool,
    /// The value on the entity (components) or in the world (resources).
    save: SaveFn,
    /// Checks the bytes decode (while the snapshot is read).
    check: CheckFn,
    /// Checks the bytes decode with the snapshot's entity ids (before
    /// anything is changed): every reference is to an entity in it.
    verify: VerifyFn,
    /// Puts the value on the entity (or in the world).
    load: LoadFn,
    /// Takes the value off the entity (or out of the world).
    remove: RemoveFn,
    /// Lists the value's fields.
    fields: FieldsFn,
    /// Whether the entity has the component (resources: never).
    has: HasFn,
}

impl core::fmt::Debug for Entry {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name)
    }
}

/// Every type in the simulation's state, sorted by type name (the same
/// order on every machine of a build).
#[derive(Resource, Debug, Clone, Default)]
pub(crate) struct Registry {
    components: Vec<Entry>,
    resources: Vec<Entry>,
}

/// Where an entity's id maps to, both ways, while saving or loading
/// (sorted by key; a map holds either or both).
#[derive(Debug, Default)]
pub(crate) struct Ids {
    to_id: Vec<(Entity, u32)>,
    to_entity: Vec<(u32, Entity)>,
}

impl Ids {
    fn id(&self, e: Entity) -> Option<u32> {
        let at = self.to_id.binary_search_by_key(&e, |(e, _)| *e).ok()?;
        Some(self.to_id[at].1)
    }
    fn entity(&self, id: u32) -> Option<Entity> {
        let at = self.to_entity.binary_search_by_key(&id, |(i, _)| *i).ok()?;
        Some(self.to_entity[at].1)
    }
}

/// Maps entity references to ids (saving) or back (loading); a reference
/// outside the simulation is noted.
struct Mapper<'a> {
    ids: &'a Ids,
    /// Saving: the world the references are in (a reference to an entity
    /// gone from it is saved as none, `Entity::PLACEHOLDER`).
    saving: Option<&'a World>,
    stray: Option<Entity>,
}

impl EntityMapper for Mapper<'_> {
    fn get_mapped(&mut self, source: Entity) -> Entity {
        if let Some(world) = self.saving {
            match self.ids.id(source).and_then(Entity::from_raw_u32) {
                Some(e) => e,
                // Gone (despawned, a reference not yet cleared): the same
                // on every machine, saved as none.
                None if world.get_entity(source).is_err() => Entity::PLACEHOLDER,
                None => {
                    self.stray = Some(source);
                    Entity::PLACEHOLDER
                }
            }
        } else if source == Entity::PLACEHOLDER {
            source
        } else {
            // Saved as the entity of index `id` and generation 0, exactly.
            let id = source.index().index();
            match self.ids.entity(id) {
                Some(e) if Entity::from_raw_u32(id) == Some(source) => e,
                _ => {
                    self.stray = Some(source);
                    Entity::PLACEHOLDER
                }
            }
        }
    }
    fn set_mapped(&mut self, _: Entity, _: Entity) {}
}

/// A buffer postcard writes onto the end of.
struct Onto<'a>(&'a mut Vec<u8>);

impl Extend<u8> for Onto<'_> {
    fn extend<I: IntoIterator<Item = u8>>(&mut self, bytes: I) {
        self.0.extend(bytes);
    }
}

fn encode<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> Result<(), String> {
    postcard::to_extend(value, Onto(out))
        .map(drop)
        .map_err(|e| e.to_string())
}

/// A value from exactly its bytes (nothing may follow it: a snapshot
/// restored must save as the same bytes).
fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let mut de = postcard::Deserializer::from_bytes(bytes);
    let value = T::deserialize(crate::depth::Depth::new(&mut de)).map_err(|e| e.to_string())?;
    if !de.finalize().map_err(|e| e.to_string())?.is_empty() {
        return Err("bytes after the value".into());
    }
    Ok(value)
}

/// Checks `bytes` are a value in its one encoding: it decodes, and encodes
/// back to the same bytes (so a state restored saves, and hashes, as the
/// bytes it came from).
fn canonical<T: Serialize + DeserializeOwned>(bytes: &[u8]) -> Result<(), String> {
    let v = decode::<T>(bytes)?;
    let mut again = Vec::with_capacity(bytes.len());
    encode(&v, &mut again)?;
    same(bytes, &again)
}

fn same(bytes: &[u8], again: &[u8]) -> Result<(), String> {
    if bytes == again {
        Ok(())
    } else {
        Err("not in its canonical encoding".into())
    }
}

/// Lists a value's fields as the JSON of its serde form names them.
fn list_fields<T: DeserializeOwned + Serialize>(bytes: &[u8], prefix: &str, out: &mut Fields) {
    match decode::<T>(bytes).and_then(|v| serde_json::to_value(&v).map_err(|e| e.to_string())) {
        Ok(v) => flatten(prefix, &v, out),
        Err(e) => out.push(prefix.to_owned(), format!("<{e}>")),
    }
}

fn flatten(path: &str, v: &serde_json::Value, out: &mut Fields) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                flatten(&format!("{path}.{k}"), v, out);
            }
        }
        serde_json::Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                flatten(&format!("{path}[{i}]"), v, out);
            }
        }
        v => out.push(path.to_owned(), v),
    }
}

/// Saves a component value.
type EncodeFn<T> = Arc<dyn Fn(&T, &World, &Ids, &mut Vec<u8>) -> Result<(), String> + Send + Sync>;
/// Reads a component value (entity references mapped).
type DecodeFn<T> = Arc<dyn Fn(&[u8], &Ids) -> Result<T, String> + Send + Sync>;

/// The entry of component `T` saved by `enc`, read by `dec` (its bytes
/// checked by `check`, before entity ids are known), listed by `fields`.
fn component_entry<T>(
    maps: bool,
    enc: EncodeFn<T>,
    dec: DecodeFn<T>,
    check: CheckFn,
    fields: FieldsFn,
) -> Entry
where
    T: Component<Mutability = bevy::ecs::component::Mutable>,
{
    let probe = dec.clone();
    Entry {
        name: core::any::type_name::<T>(),
        maps,
        save: Arc::new(
            move |w: &World, e: Option<Entity>, ids: &Ids, out: &mut Vec<u8>| {
                Some(enc(w.get::<T>(e?)?, w, ids, out))
            },
        ),
        check,
        verify: Arc::new(move |b: &[u8], ids: &Ids| probe(b, ids).map(drop)),
        load: Arc::new(
            move |w: &mut World, e: Option<Entity>, b: &[u8], ids: &Ids| {
                let v = dec(b, ids)?;
                if let Some(e) = e {
                    w.get_entity_mut(e)
                        .map_err(|_| format!("entity {e} is gone"))?
                        .insert(v);
                }
                Ok(())
            },
        ),
        remove: Arc::new(|w: &mut World, e: Option<Entity>| {
            if let Some(mut e) = e.and_then(|e| w.get_entity_mut(e).ok()) {
                e.remove::<T>();
            }
        }),
        fields,
        has: Arc::new(|e: &EntityRef<'_>| e.contains::<T>()),
    }
}

/// A reflected value's bytes: postcard through its type's reflection.
fn reflect_encode<T: Reflect>(
    value: &T,
    types: &AppTypeRegistry,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let types = types.read();
    let ser = bevy::reflect::serde::TypedReflectSerializer::new(value.as_partial_reflect(), &types);
    encode(&ser, out)
}

/// A reflected value from its bytes.
fn reflect_decode<T: Reflect + FromReflect + TypePath>(
    bytes: &[u8],
    types: &AppTypeRegistry,
) -> Result<T, String> {
    use serde::de::DeserializeSeed;
    let types = types.read();
    let registration = types
        .get(core::any::TypeId::of::<T>())
        .ok_or_else(|| format!("{} is not in the type registry", T::type_path()))?;
    let seed = bevy::reflect::serde::TypedReflectDeserializer::new(registration, &types);
    let mut de = postcard::Deserializer::from_bytes(bytes);
    let value = seed
        .deserialize(crate::depth::Depth::new(&mut de))
        .map_err(|e| e.to_string())?;
    if !de.finalize().map_err(|e| e.to_string())?.is_empty() {
        return Err("bytes after the value".into());
    }
    T::from_reflect(value.as_partial_reflect())
        .ok_or_else(|| format!("{} does not build from its reflection", T::type_path()))
}

/// [`canonical`] for a reflected value.
fn reflect_canonical<T: Reflect + FromReflect + TypePath>(
    bytes: &[u8],
    types: &AppTypeRegistry,
) -> Result<(), String> {
    let v = reflect_decode::<T>(bytes, types)?;
    let mut again = Vec::with_capacity(bytes.len());
    reflect_encode(&v, types, &mut again)?;
    same(bytes, &again)
}

/// A reflected value's fields, as the JSON of its reflection names them.
fn reflect_fields<T: Reflect + FromReflect + TypePath>(
    bytes: &[u8],
    prefix: &str,
    out: &mut Fields,
    types: &AppTypeRegistry,
) {
    let json = reflect_decode::<T>(bytes, types).and_then(|v| {
        let types = types.read();
        let ser = bevy::reflect::serde::TypedReflectSerializer::new(v.as_partial_reflect(), &types);
        serde_json::to_value(&ser).map_err(|e| e.to_string())
    });
    match json {
        Ok(v) => flatten(prefix, &v, out),
        Err(e) => out.push(prefix.to_owned(), format!("<{e}>")),
    }
}

impl Registry {
    /// Registers component `T`, saved with serde.
    pub(crate) fn component<T>(&mut self)
    where
        T: Component<Mutability = bevy::ecs::component::Mutable> + Serialize + DeserializeOwned,
    {
        self.add_component(component_entry::<T>(
            false,
            Arc::new(|v: &T, _: &World, _: &Ids, out: &mut Vec<u8>| encode(v, out)),
            Arc::new(|b: &[u8], _: &Ids| decode::<T>(b)),
            Arc::new(canonical::<T>),
            Arc::new(list_fields::<T>),
        ));
    }

    /// Registers component `T`, which points at entities, saved with serde
    /// and its references written as the entities' simulation ids.
    pub(crate) fn mapped_component<T>(&mut self)
    where
        T: Component<Mutability = bevy::ecs::component::Mutable>
            + Serialize
            + DeserializeOwned
            + MapEntities
            + Clone,
    {
        self.add_component(component_entry::<T>(
            true,
            Arc::new(|v: &T, world: &World, ids: &Ids, out: &mut Vec<u8>| {
                let mut v = v.clone();
                let mut m = Mapper {
                    ids,
                    saving: Some(world),
                    stray: None,
                };
                v.map_entities(&mut m);
                if let Some(stray) = m.stray {
                    return Err(format!(
                        "points at entity {stray}, which is not Simulated (and not gone)"
                    ));
                }
                encode(&v, out)
            }),
            Arc::new(|b: &[u8], ids: &Ids| {
                let mut v = decode::<T>(b)?;
                let mut m = Mapper {
                    ids,
                    saving: None,
                    stray: None,
                };
                v.map_entities(&mut m);
                match m.stray {
                    Some(stray) => Err(format!(
                        "points at id {}, in no entity",
                        stray.index().index()
                    )),
                    None => Ok(v),
                }
            }),
            // Entity references are checked when loaded, once ids are known.
            Arc::new(canonical::<T>),
            Arc::new(list_fields::<T>),
        ));
    }

    /// Registers component `T`, saved through its reflection (`types`,
    /// the app's type registry, which knows `T`).
    pub(crate) fn reflect_component<T>(&mut self, types: AppTypeRegistry)
    where
        T: Component<Mutability = bevy::ecs::component::Mutable> + Reflect + FromReflect + TypePath,
    {
        let (a, b, c, d) = (types.clone(), types.clone(), types.clone(), types);
        self.add_component(component_entry::<T>(
            false,
            Arc::new(move |v: &T, _: &World, _: &Ids, out: &mut Vec<u8>| {
                reflect_encode(v, &a, out)
            }),
            Arc::new(move |bytes: &[u8], _: &Ids| reflect_decode::<T>(bytes, &b)),
            Arc::new(move |bytes: &[u8]| reflect_canonical::<T>(bytes, &d)),
            Arc::new(move |bytes: &[u8], prefix: &str, out: &mut Fields| {
                reflect_fields::<T>(bytes, prefix, out, &c);
            }),
        ));
    }

    /// Registers resource `T`, saved through its reflection.
    pub(crate) fn reflect_resource<T>(&mut self, types: AppTypeRegistry)
    where
        T: Resource + Reflect + FromReflect + TypePath,
    {
        let (a, b, c, d) = (types.clone(), types.clone(), types.clone(), types);
        self.add_resource(Entry {
            name: core::any::type_name::<T>(),
            maps: false,
            save: Arc::new(move |w: &World, _, _, out: &mut Vec<u8>| {
                Some(reflect_encode(w.get_resource::<T>()?, &a, out))
            }),
            check: Arc::new(move |bytes: &[u8]| reflect_canonical::<T>(bytes, &b)),
            verify: Arc::new(|_: &[u8], _: &Ids| Ok(())),
            load: Arc::new(move |w: &mut World, _, bytes: &[u8], _| {
                w.insert_resource(reflect_decode::<T>(bytes, &c)?);
                Ok(())
            }),
            remove: Arc::new(|w: &mut World, _| {
                w.remove_resource::<T>();
            }),
            fields: Arc::new(move |bytes: &[u8], prefix: &str, out: &mut Fields| {
                reflect_fields::<T>(bytes, prefix, out, &d);
            }),
            has: Arc::new(|_: &EntityRef<'_>| false),
        });
    }

    /// Registers resource `T`, saved with serde.
    pub(crate) fn resource<T>(&mut self)
    where
        T: Resource + Serialize + DeserializeOwned,
    {
        self.add_resource(Entry {
            name: core::any::type_name::<T>(),
            maps: false,
            save: Arc::new(|w: &World, _, _, out: &mut Vec<u8>| {
                Some(encode(w.get_resource::<T>()?, out))
            }),
            check: Arc::new(canonical::<T>),
            verify: Arc::new(|_: &[u8], _: &Ids| Ok(())),
            load: Arc::new(|w: &mut World, _, b: &[u8], _| {
                w.insert_resource(decode::<T>(b)?);
                Ok(())
            }),
            remove: Arc::new(|w: &mut World, _| {
                w.remove_resource::<T>();
            }),
            fields: Arc::new(list_fields::<T>),
            has: Arc::new(|_: &EntityRef<'_>| false),
        });
    }

    fn add_resource(&mut self, entry: Entry) {
        if !self.resources.iter().any(|e| e.name == entry.name) {
            self.resources.push(entry);
            self.resources.sort_by_key(|e| e.name);
        }
    }

    fn add_component(&mut self, entry: Entry) {
        if !self.components.iter().any(|e| e.name == entry.name) {
            self.components.push(entry);
            self.components.sort_by_key(|e| e.name);
        }
    }

    /// A type registered here and not in `earlier` (one registered after
    /// a session took `earlier`), if any.
    pub(crate) fn added_since(&self, earlier: &Self) -> Option<&'static str> {
        if self.resources.len() == earlier.resources.len()
            && self.components.len() == earlier.components.len()
        {
            return None;
        }
        let known = |e: &Entry| {
            earlier
                .resources
                .iter()
                .chain(&earlier.components)
                .any(|k| k.name == e.name)
        };
        self.resources
            .iter()
            .chain(&self.components)
            .find(|e| !known(e))
            .map(|e| e.name)
    }

    /// A fingerprint of what is registered: two builds that save other
    /// state refuse each other's snapshots by it.
    pub(crate) fn fingerprint(&self) -> u64 {
        let mut names = Vec::new();
        for e in self.resources.iter().chain(&self.components) {
            names.extend_from_slice(e.name.as_bytes());
            names.push(0);
        }
        xxhash_rust::xxh3::xxh3_64(&names)
    }

    /// The state, canonically encoded: header, the id counter, every
    /// registered resource there is, then every simulated entity by id
    /// with its registered components. A value that cannot be encoded (a
    /// component pointing outside the simulation) is an error naming it.
    pub(crate) fn save(&self, world: &World) -> Result<Vec<u8>, String> {
        let mut out = Vec::with_capacity(256);
        self.save_into(world, &mut out)?;
        Ok(out)
    }

    /// [`save`](Self::save) into `out` (cleared first), whose room is
    /// used again.
    pub(crate) fn save_into(&self, world: &World, out: &mut Vec<u8>) -> Result<(), String> {
        out.clear();
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&self.fingerprint().to_le_bytes());
        let next = world.get_resource::<SimIds>().map_or(0, |i| i.next);
        out.extend_from_slice(&next.to_le_bytes());
        let mut entities: Vec<(u32, Entity)> = Vec::new();
        for e in world.iter_entities() {
            if let Some(s) = e.get::<Simulated>() {
                entities.push((s.id, e.id()));
            } else if let Some(c) = self.components.iter().find(|c| (c.has)(&e)) {
                // Its state would be left out of every snapshot and hash,
                // and a joiner would never see it.
                return Err(format!(
                    "entity {} has {}, which is simulation state, but is not Simulated",
                    e.id(),
                    c.name
                ));
            }
        }
        entities.sort_unstable();
        if let Some((0, e)) = entities.first() {
            return Err(format!(
                "entity {e} has no simulation id: the simulation has given out all {MAX_ID} ids"
            ));
        }
        for w in entities.windows(2) {
            if w[0].0 == w[1].0 {
                return Err(format!(
                    "two entities share the simulation id {} ({} and {}): an id was copied",
                    w[0].0, w[0].1, w[1].1
                ));
            }
        }
        // Entity to id, for values that point at entities (only those).
        let ids = Ids {
            to_id: if self.components.iter().any(|c| c.maps) {
                let mut to_id: Vec<(Entity, u32)> =
                    entities.iter().map(|(id, e)| (*e, *id)).collect();
                to_id.sort_unstable();
                to_id
            } else {
                Vec::new()
            },
            to_entity: Vec::new(),
        };
        // Resources: a presence bit each, then its bytes.
        for r in &self.resources {
            put_value(out, |out| (r.save)(world, None, &ids, out))
                .map_err(|e| format!("{}: {e}", r.name))?;
        }
        out.extend_from_slice(&(entities.len() as u32).to_le_bytes());
        for (id, e) in &entities {
            out.extend_from_slice(&id.to_le_bytes());
            for c in &self.components {
                put_value(out, |out| (c.save)(world, Some(*e), &ids, out))
                    .map_err(|err| format!("{} of entity {id}: {err}", c.name))?;
            }
        }
        Ok(())
    }

    /// Reads a snapshot without changing anything: every value decodes.
    pub(crate) fn parse<'b>(&self, bytes: &'b [u8]) -> Result<Parsed<'b>, SnapshotError> {
        let mut r = Reader { bytes, at: 0 };
        if r.take(4)? != MAGIC || r.take(1)? != [VERSION] {
            return Err(SnapshotError::NotOurs);
        }
        let theirs = r.u64()?;
        if theirs != self.fingerprint() {
            return Err(SnapshotError::OtherRegistry(self.fingerprint(), theirs));
        }
        let next = r.u32()?;
        if next > MAX_ID {
            return Err(SnapshotError::Malformed(format!(
                "the next id is {next}, past the last the simulation gives ({MAX_ID})"
            )));
        }
        let mut resources = Vec::with_capacity(self.resources.len());
        for e in &self.resources {
            resources.push(r.value(e)?);
        }
        let count = r.u32()?;
        if count > MAX_ENTITIES {
            return Err(SnapshotError::Malformed(format!("{count} entities")));
        }
        let entities_at = r.at;
        // Ids only: an entity's values are read again where they lie
        // (memory stays a fraction of the bytes, whatever they claim).
        let mut ids: Vec<u32> = Vec::new();
        for _ in 0..count {
            let id = r.u32()?;
            if ids.last().is_some_and(|last| *last >= id) || id == 0 || id > next {
                return Err(SnapshotError::Malformed(format!(
                    "entity id {id} out of order"
                )));
            }
            for c in &self.components {
                r.value(c)?;
            }
            ids.push(id);
        }
        if r.at != bytes.len() {
            return Err(SnapshotError::Malformed("bytes after the end".into()));
        }
        Ok(Parsed {
            next,
            resources,
            ids,
            bytes,
            entities_at,
        })
    }

    /// Each entity's id and values, in the snapshot's order (of a snapshot
    /// `parse` accepted).
    fn records<'b>(
        &'b self,
        parsed: &'b Parsed<'_>,
    ) -> impl Iterator<Item = (u32, Vec<Option<&'b [u8]>>)> + 'b {
        let mut r = Reader {
            bytes: parsed.bytes,
            at: parsed.entities_at,
        };
        parsed.ids.iter().map_while(move |id| {
            r.u32().ok()?;
            let values: Option<Vec<_>> = self.components.iter().map(|_| r.raw_value()).collect();
            Some((*id, values?))
        })
    }

    /// Puts the state `bytes` hold into `world`: simulated entities not in
    /// it are despawned, those in it updated (or spawned), their registered
    /// components set or removed, the resources set or removed. Nothing
    /// changes when the bytes are refused (every value is read, and every
    /// entity reference checked, first). The world is then saved again and
    /// must give the same bytes ([`SnapshotError::Altered`] if not).
    pub(crate) fn load(&self, world: &mut World, bytes: &[u8]) -> Result<(), SnapshotError> {
        let parsed = self.parse(bytes)?;
        if self.components.iter().any(|c| c.maps) {
            // Every reference to an entity in the snapshot, before
            // anything changes (each id stands for itself here).
            let probe = Ids {
                to_id: Vec::new(),
                to_entity: parsed
                    .ids
                    .iter()
                    .filter_map(|id| Some((*id, Entity::from_raw_u32(*id)?)))
                    .collect(),
            };
            for (id, values) in self.records(&parsed) {
                for (c, v) in self.components.iter().zip(values) {
                    if let Some(b) = v {
                        (c.verify)(b, &probe).map_err(|reason| SnapshotError::Value {
                            name: c.name,
                            reason: format!("entity {id}: {reason}"),
                        })?;
                    }
                }
            }
        }
        world.insert_resource(crate::Restoring);
        let loaded = self.apply(world, &parsed);
        world.remove_resource::<crate::Restoring>();
        loaded?;
        // What the world now saves must be what was sent.
        let saved = self.save(world).map_err(SnapshotError::Unsavable)?;
        if saved != bytes {
            let (mut here, mut sent) = (Fields::new(), Fields::new());
            self.fields(&saved, &mut here);
            self.fields(bytes, &mut sent);
            let diffs = sent.diff(&here);
            let mut said: Vec<String> = diffs
                .iter()
                .take(4)
                .map(|d| {
                    format!(
                        "{} is {} where the snapshot has {}",
                        d.path,
                        d.found.as_deref().unwrap_or("missing"),
                        d.expected.as_deref().unwrap_or("none")
                    )
                })
                .collect();
            if diffs.len() > 4 {
                said.push(format!("{} more", diffs.len() - 4));
            }
            if said.is_empty() {
                said.push("a value not in its canonical form".to_owned());
            }
            let first = said.join("; ");
            return Err(SnapshotError::Altered(first));
        }
        Ok(())
    }

    /// The changes of [`load`](Self::load), on a snapshot checked whole.
    fn apply(&self, world: &mut World, parsed: &Parsed<'_>) -> Result<(), SnapshotError> {
        let mut present: Vec<(u32, Entity)> = world
            .iter_entities()
            .filter_map(|e| e.get::<Simulated>().map(|s| (s.id, e.id())))
            .collect();
        present.sort_unstable();
        for (id, e) in &present {
            if parsed.ids.binary_search(id).is_err() {
                // Its children go with it (a linked despawn), whatever
                // their ids: the snapshot's are spawned again below.
                world.despawn(*e);
            }
        }
        let mut ids = Ids::default();
        ids.to_entity.reserve_exact(parsed.ids.len());
        for id in &parsed.ids {
            let kept = present
                .binary_search_by_key(id, |(i, _)| *i)
                .ok()
                .map(|at| present[at].1)
                .filter(|e| world.get_entity(*e).is_ok());
            let e = match kept {
                Some(e) => e,
                None => world.spawn(Simulated { id: *id }).id(),
            };
            ids.to_entity.push((*id, e));
        }
        drop(present);
        world.insert_resource(SimIds { next: parsed.next });
        let fail = |name: &'static str, reason: String| SnapshotError::Value { name, reason };
        for (e, v) in self.resources.iter().zip(&parsed.resources) {
            match v {
                Some(b) => (e.load)(world, None, b, &ids).map_err(|r| fail(e.name, r))?,
                None => (e.remove)(world, None),
            }
        }
        for ((id, values), (_, entity)) in self.records(parsed).zip(&ids.to_entity) {
            for (c, v) in self.components.iter().zip(values) {
                match v {
                    Some(b) => (c.load)(world, Some(*entity), b, &ids)
                        .map_err(|r| fail(c.name, format!("entity {id}: {r}")))?,
                    None => (c.remove)(world, Some(*entity)),
                }
            }
        }
        Ok(())
    }

    /// Every field of the state `bytes` hold, named by entity id, type and
    /// field (`entity[3].game::Velocity.x`).
    pub(crate) fn fields(&self, bytes: &[u8], out: &mut Fields) {
        let parsed = match self.parse(bytes) {
            Ok(p) => p,
            Err(e) => {
                out.push("snapshot", format!("<{e}>"));
                return;
            }
        };
        out.push("next_id", parsed.next);
        for (e, v) in self.resources.iter().zip(&parsed.resources) {
            if let Some(b) = v {
                (e.fields)(b, e.name, out);
            }
        }
        for (id, values) in self.records(&parsed) {
            for (c, v) in self.components.iter().zip(values) {
                if let Some(b) = v {
                    (c.fields)(b, &format!("entity[{id}].{}", c.name), out);
                }
            }
        }
    }
}

/// A snapshot read: the resources' bytes and the entities' ids, every
/// value checked to decode.
pub(crate) struct Parsed<'b> {
    next: u32,
    resources: Vec<Option<&'b [u8]>>,
    ids: Vec<u32>,
    bytes: &'b [u8],
    /// Where the entity records start.
    entities_at: usize,
}

/// A value as a snapshot holds it: 1, its length (u32) and its bytes, or
/// 0 when `save` finds none.
fn put_value(
    out: &mut Vec<u8>,
    save: impl FnOnce(&mut Vec<u8>) -> Option<Result<(), String>>,
) -> Result<(), String> {
    let at = out.len();
    out.push(1);
    out.extend_from_slice(&[0; 4]);
    match save(out) {
        Some(Ok(())) => {
            let len = u32::try_from(out.len() - at - 5).map_err(|_| "a value over 4 GiB")?;
            out[at + 1..at + 5].copy_from_slice(&len.to_le_bytes());
            Ok(())
        }
        None => {
            out.truncate(at);
            out.push(0);
            Ok(())
        }
        Some(Err(e)) => {
            out.truncate(at);
            Err(e)
        }
    }
}

struct Reader<'b> {
    bytes: &'b [u8],
    at: usize,
}

impl<'b> Reader<'b> {
    fn take(&mut self, n: usize) -> Result<&'b [u8], SnapshotError> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.bytes.len());
        let end = end.ok_or_else(|| SnapshotError::Malformed("ends early".into()))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32, SnapshotError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, SnapshotError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    /// A value's bytes, already checked.
    fn raw_value(&mut self) -> Option<Option<&'b [u8]>> {
        match self.take(1).ok()? {
            [1] => {
                let len = self.u32().ok()? as usize;
                Some(Some(self.take(len).ok()?))
            }
            _ => Some(None),
        }
    }
    fn value(&mut self, e: &Entry) -> Result<Option<&'b [u8]>, SnapshotError> {
        match self.take(1)? {
            [0] => Ok(None),
            [1] => {
                let len = self.u32()? as usize;
                let b = self.take(len)?;
                (e.check)(b).map_err(|reason| SnapshotError::Value {
                    name: e.name,
                    reason,
                })?;
                Ok(Some(b))
            }
            _ => Err(SnapshotError::Malformed(format!(
                "{}: bad presence byte",
                e.name
            ))),
        }
    }
}

/// The registry shared with the simulation's game.
pub(crate) type Shared = Arc<Registry>;
