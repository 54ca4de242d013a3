//! The simulation's state as bytes: which components and resources are
//! in it, the entities that opted in ([`Simulated`]), sorted by the id the
//! simulation gave them, one canonical encoding for snapshots and hashes.

use bevy::ecs::entity::{EntityMapper, MapEntities};
use bevy::ecs::reflect::AppTypeRegistry;
use bevy::prelude::*;
use lockstep_core::desync::Fields;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What a snapshot starts with, and its version.
const MAGIC: &[u8; 4] = b"LKBV";
const VERSION: u8 = 1;
/// The most entities a snapshot may claim (bytes come from the network).
const MAX_ENTITIES: u32 = 1 << 22;

/// Marks an entity whose state is the simulation's: its registered
/// components are saved, restored and hashed. Each gets an id from the
/// simulation ([`SimIds`]) when it is added, the same on every machine
/// when it is spawned by the same system at the same tick; snapshots order
/// entities by it (never by `Entity`, which differs between machines).
///
/// ```
/// use bevy::prelude::*;
/// use lockstep_bevy::Simulated;
/// #[derive(Component)]
/// #[require(Simulated)]
/// struct Ship;
/// ```
#[derive(Component, Debug, Default, Clone, Copy, PartialEq, Eq)]
#[component(on_add = assign_id)]
pub struct Simulated {
    id: u32,
}

impl Simulated {
    /// The entity's id in the simulation (0 until it is added).
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
    ids.next = ids.next.saturating_add(1);
    let id = ids.next;
    if let Some(mut s) = world.get_mut::<Simulated>(ctx.entity) {
        s.id = id;
    }
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
    /// A value does not decode as its type.
    #[error("{name} does not decode: {reason}")]
    Value {
        /// The component's or resource's type.
        name: &'static str,
        /// Why.
        reason: String,
    },
}

/// Saves a registered value: `None` if it is not there.
type SaveFn =
    Arc<dyn Fn(&World, Option<Entity>, &Ids) -> Option<Result<Vec<u8>, String>> + Send + Sync>;
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

/// Where an entity's id maps to, both ways, while saving or loading.
#[derive(Debug, Default)]
pub(crate) struct Ids {
    to_id: BTreeMap<Entity, u32>,
    to_entity: BTreeMap<u32, Entity>,
}

/// Maps entity references to ids (saving) or back (loading); a reference
/// outside the simulation is noted.
struct Mapper<'a> {
    ids: &'a Ids,
    saving: bool,
    stray: Option<Entity>,
}

impl EntityMapper for Mapper<'_> {
    fn get_mapped(&mut self, source: Entity) -> Entity {
        if self.saving {
            match self
                .ids
                .to_id
                .get(&source)
                .and_then(|id| Entity::from_raw_u32(*id))
            {
                Some(e) => e,
                None => {
                    self.stray = Some(source);
                    Entity::PLACEHOLDER
                }
            }
        } else {
            let id = source.index().index();
            match self.ids.to_entity.get(&id) {
                Some(e) if source != Entity::PLACEHOLDER => *e,
                _ => {
                    self.stray = Some(source);
                    Entity::PLACEHOLDER
                }
            }
        }
    }
    fn set_mapped(&mut self, _: Entity, _: Entity) {}
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, String> {
    postcard::to_allocvec(value).map_err(|e| e.to_string())
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    postcard::from_bytes(bytes).map_err(|e| e.to_string())
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
type EncodeFn<T> = Arc<dyn Fn(&T, &Ids) -> Result<Vec<u8>, String> + Send + Sync>;
/// Reads a component value (entity references mapped).
type DecodeFn<T> = Arc<dyn Fn(&[u8], &Ids) -> Result<T, String> + Send + Sync>;

/// The entry of component `T` saved by `enc`, read by `dec` (its bytes
/// checked by `check`, before entity ids are known), listed by `fields`.
fn component_entry<T>(enc: EncodeFn<T>, dec: DecodeFn<T>, check: CheckFn, fields: FieldsFn) -> Entry
where
    T: Component<Mutability = bevy::ecs::component::Mutable>,
{
    let probe = dec.clone();
    Entry {
        name: core::any::type_name::<T>(),
        save: Arc::new(move |w: &World, e: Option<Entity>, ids: &Ids| {
            Some(enc(w.get::<T>(e?)?, ids))
        }),
        check,
        verify: Arc::new(move |b: &[u8], ids: &Ids| probe(b, ids).map(drop)),
        load: Arc::new(
            move |w: &mut World, e: Option<Entity>, b: &[u8], ids: &Ids| {
                let v = dec(b, ids)?;
                if let Some(e) = e {
                    w.entity_mut(e).insert(v);
                }
                Ok(())
            },
        ),
        remove: Arc::new(|w: &mut World, e: Option<Entity>| {
            if let Some(e) = e {
                w.entity_mut(e).remove::<T>();
            }
        }),
        fields,
        has: Arc::new(|e: &EntityRef<'_>| e.contains::<T>()),
    }
}

/// A reflected value's bytes: postcard through its type's reflection.
fn reflect_encode<T: Reflect>(value: &T, types: &AppTypeRegistry) -> Result<Vec<u8>, String> {
    let types = types.read();
    let ser = bevy::reflect::serde::TypedReflectSerializer::new(value.as_partial_reflect(), &types);
    postcard::to_allocvec(&ser).map_err(|e| e.to_string())
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
    let value = seed.deserialize(&mut de).map_err(|e| e.to_string())?;
    if !de.finalize().map_err(|e| e.to_string())?.is_empty() {
        return Err("bytes after the value".into());
    }
    T::from_reflect(value.as_partial_reflect())
        .ok_or_else(|| format!("{} does not build from its reflection", T::type_path()))
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
            Arc::new(|v: &T, _: &Ids| encode(v)),
            Arc::new(|b: &[u8], _: &Ids| decode::<T>(b)),
            Arc::new(|b: &[u8]| decode::<T>(b).map(drop)),
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
            Arc::new(|v: &T, ids: &Ids| {
                let mut v = v.clone();
                let mut m = Mapper {
                    ids,
                    saving: true,
                    stray: None,
                };
                v.map_entities(&mut m);
                if let Some(stray) = m.stray {
                    return Err(format!("points at {stray}, which is not Simulated"));
                }
                encode(&v)
            }),
            Arc::new(|b: &[u8], ids: &Ids| {
                let mut v = decode::<T>(b)?;
                let mut m = Mapper {
                    ids,
                    saving: false,
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
            Arc::new(|b: &[u8]| decode::<T>(b).map(drop)),
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
            Arc::new(move |v: &T, _: &Ids| reflect_encode(v, &a)),
            Arc::new(move |bytes: &[u8], _: &Ids| reflect_decode::<T>(bytes, &b)),
            Arc::new(move |bytes: &[u8]| reflect_decode::<T>(bytes, &d).map(drop)),
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
            save: Arc::new(move |w: &World, _, _| Some(reflect_encode(w.get_resource::<T>()?, &a))),
            check: Arc::new(move |bytes: &[u8]| reflect_decode::<T>(bytes, &b).map(drop)),
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
            save: Arc::new(|w: &World, _, _| Some(encode(w.get_resource::<T>()?))),
            check: Arc::new(|b: &[u8]| decode::<T>(b).map(drop)),
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
        let ids = Ids {
            to_id: entities.iter().map(|(id, e)| (*e, *id)).collect(),
            to_entity: BTreeMap::new(),
        };
        for w in entities.windows(2) {
            if w[0].0 == w[1].0 {
                return Err(format!(
                    "two entities share the simulation id {} ({} and {}): an id was copied",
                    w[0].0, w[0].1, w[1].1
                ));
            }
        }
        // Resources: a presence bit each, then its bytes.
        for r in &self.resources {
            match (r.save)(world, None, &ids) {
                Some(Ok(b)) => {
                    out.push(1);
                    put_bytes(&mut out, &b);
                }
                Some(Err(e)) => return Err(format!("{}: {e}", r.name)),
                None => out.push(0),
            }
        }
        out.extend_from_slice(&(entities.len() as u32).to_le_bytes());
        for (id, e) in &entities {
            out.extend_from_slice(&id.to_le_bytes());
            for c in &self.components {
                match (c.save)(world, Some(*e), &ids) {
                    Some(Ok(b)) => {
                        out.push(1);
                        put_bytes(&mut out, &b);
                    }
                    Some(Err(err)) => return Err(format!("{} of entity {id}: {err}", c.name)),
                    None => out.push(0),
                }
            }
        }
        Ok(out)
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
        let mut resources = Vec::with_capacity(self.resources.len());
        for e in &self.resources {
            resources.push(r.value(e)?);
        }
        let count = r.u32()?;
        if count > MAX_ENTITIES {
            return Err(SnapshotError::Malformed(format!("{count} entities")));
        }
        let mut entities: Vec<(u32, Vec<Option<&'b [u8]>>)> = Vec::new();
        for _ in 0..count {
            let id = r.u32()?;
            if entities.last().is_some_and(|(last, _)| *last >= id) || id == 0 || id > next {
                return Err(SnapshotError::Malformed(format!(
                    "entity id {id} out of order"
                )));
            }
            let mut values = Vec::with_capacity(self.components.len());
            for c in &self.components {
                values.push(r.value(c)?);
            }
            entities.push((id, values));
        }
        if r.at != bytes.len() {
            return Err(SnapshotError::Malformed("bytes after the end".into()));
        }
        Ok(Parsed {
            next,
            resources,
            entities,
        })
    }

    /// Puts the state `bytes` hold into `world`: simulated entities not in
    /// it are despawned, those in it updated (or spawned), their registered
    /// components set or removed, the resources set or removed. Nothing
    /// changes when the bytes are refused (every value is read, and every
    /// entity reference checked, first).
    pub(crate) fn load(&self, world: &mut World, bytes: &[u8]) -> Result<(), SnapshotError> {
        let parsed = self.parse(bytes)?;
        // Every reference to an entity in the snapshot, before anything
        // changes (each id stands for itself here).
        let mut probe = Ids::default();
        for (id, _) in &parsed.entities {
            if let Some(e) = Entity::from_raw_u32(*id) {
                probe.to_entity.insert(*id, e);
            }
        }
        for (id, values) in &parsed.entities {
            for (c, v) in self.components.iter().zip(values) {
                if let Some(b) = v {
                    (c.verify)(b, &probe).map_err(|reason| SnapshotError::Value {
                        name: c.name,
                        reason: format!("entity {id}: {reason}"),
                    })?;
                }
            }
        }
        let present: BTreeMap<u32, Entity> = world
            .iter_entities()
            .filter_map(|e| e.get::<Simulated>().map(|s| (s.id, e.id())))
            .collect();
        let wanted: std::collections::BTreeSet<u32> =
            parsed.entities.iter().map(|(id, _)| *id).collect();
        for (id, e) in &present {
            if !wanted.contains(id) {
                world.despawn(*e);
            }
        }
        let mut ids = Ids::default();
        for (id, _) in &parsed.entities {
            let e = match present.get(id) {
                Some(e) => *e,
                None => world.spawn(Simulated { id: *id }).id(),
            };
            ids.to_entity.insert(*id, e);
            ids.to_id.insert(e, *id);
        }
        world.insert_resource(SimIds { next: parsed.next });
        let fail = |name: &'static str, reason: String| SnapshotError::Value { name, reason };
        for (e, v) in self.resources.iter().zip(&parsed.resources) {
            match v {
                Some(b) => (e.load)(world, None, b, &ids).map_err(|r| fail(e.name, r))?,
                None => (e.remove)(world, None),
            }
        }
        for (id, values) in &parsed.entities {
            let entity = ids.to_entity.get(id).copied();
            for (c, v) in self.components.iter().zip(values) {
                match v {
                    Some(b) => (c.load)(world, entity, b, &ids).map_err(|r| fail(c.name, r))?,
                    None => (c.remove)(world, entity),
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
        for (id, values) in &parsed.entities {
            for (c, v) in self.components.iter().zip(values) {
                if let Some(b) = v {
                    (c.fields)(b, &format!("entity[{id}].{}", c.name), out);
                }
            }
        }
    }
}

/// A snapshot read: every value's bytes, checked to decode.
pub(crate) struct Parsed<'b> {
    next: u32,
    resources: Vec<Option<&'b [u8]>>,
    entities: Vec<(u32, Vec<Option<&'b [u8]>>)>,
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
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
