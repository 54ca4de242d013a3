//! Attacks on the plugin: snapshots crafted or made up by a donor that
//! lies (while honest apps play), and simulation ids a game or a snapshot
//! could make collide. Each must end in a typed error or a healed state:
//! no panic, no abort, no memory far beyond the bytes, no silent
//! divergence.

mod common;

use bevy::ecs::entity::{EntityMapper, MapEntities};
use bevy::prelude::*;
use lockstep_bevy::prelude::*;
use lockstep_bevy::{restore_state, state_bytes, state_hash};
use lockstep_core::runner::{Played, Runner, RunnerConfig, Status};
use lockstep_core::sim::LinkConditions;
use lockstep_core::{Frame, Game, Instant, PeerId, Tick};
use serde::{Deserialize, Serialize};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, RefCell};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

// ---------------------------------------------------------------------
// Allocation accounting, per thread (tests run in parallel threads).

struct Counting;

thread_local! {
    static CUR: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn note(delta: isize) {
    let _ = CUR.try_with(|c| {
        let v = c.get() + delta;
        c.set(v);
        let _ = PEAK.try_with(|p| {
            if v > p.get() {
                p.set(v);
            }
        });
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            note(l.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        note(-(l.size() as isize));
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            note(l.size() as isize);
        }
        p
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            note(new as isize - l.size() as isize);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// The most this thread held at once (over what it held before) while `f` ran.
fn peak_of<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let base = CUR.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let r = f();
    let peak = PEAK.with(Cell::get);
    (r, (peak - base).max(0) as usize)
}

// ---------------------------------------------------------------------
// The LKBV layout, to craft snapshots byte by byte.

struct Lkbv {
    next_at: usize,
    count_at: usize,
    /// Each entity record: its id, where it starts and ends.
    records: Vec<(u32, usize, usize)>,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn lkbv(b: &[u8], resources: usize, components: usize) -> Lkbv {
    fn skip(b: &[u8], at: &mut usize) {
        let present = b[*at];
        *at += 1;
        if present == 1 {
            let len = u32_at(b, *at) as usize;
            *at += 4 + len;
        }
    }
    let next_at = 13;
    let mut at = 17;
    for _ in 0..resources {
        skip(b, &mut at);
    }
    let count_at = at;
    let count = u32_at(b, at);
    at += 4;
    let mut records = Vec::new();
    for _ in 0..count {
        let start = at;
        let id = u32_at(b, at);
        at += 4;
        for _ in 0..components {
            skip(b, &mut at);
        }
        records.push((id, start, at));
    }
    assert_eq!(at, b.len());
    Lkbv {
        next_at,
        count_at,
        records,
    }
}

/// `common::app`'s registry: Score, SimRng, SimTime; Ship.
const COMMON_RES: usize = 3;
const COMMON_COMPS: usize = 1;

fn ready(mut app: App) -> App {
    app.finish();
    app.cleanup();
    app.update();
    app
}

fn panic_text(e: &Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

// ---------------------------------------------------------------------
// A snapshot that leaves out a parent (its despawn takes the child).

/// The joiner's world holds a simulated parent (id 1) with a simulated
/// child (id 2), as a game's startup or simulation makes them
/// (`children![]`, `ChildOf`). The donor's snapshot holds id 2 and not
/// id 1: the restore despawns 1, which despawns 2 with it, then writes
/// to 2.
#[test]
fn a_snapshot_without_the_parent_restores() {
    // Any snapshot of the same game holding id 2 and not id 1.
    let mut donor = ready(common::app(1));
    let w = donor.world_mut();
    let gone = w.spawn(Simulated::default()).id();
    w.spawn(Simulated::default());
    w.despawn(gone);
    let bytes = state_bytes(w).expect("saves");

    let mut joiner = ready(common::app(2));
    let w = joiner.world_mut();
    let parent = w.spawn(Simulated::default()).id();
    w.spawn((Simulated::default(), ChildOf(parent)));
    let before = state_bytes(w).expect("saves");

    let result = catch_unwind(AssertUnwindSafe(|| restore_state(w, &bytes)));
    match result {
        Ok(r) => {
            // The state restored (or refused, nothing changed).
            if r.is_ok() {
                assert_eq!(state_bytes(w).expect("saves"), bytes);
            } else {
                assert_eq!(state_bytes(w).expect("saves"), before);
            }
        }
        Err(e) => panic!("restore_state panicked: {}", panic_text(&e)),
    }
}

// ---------------------------------------------------------------------
// A deeply nested value (postcard recurses once per level).

/// A component whose type nests (an expression, a behaviour tree).
#[derive(Component, Debug, Clone, Default, Serialize, Deserialize)]
#[require(Simulated)]
struct Script(Expr);

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
enum Expr {
    #[default]
    Nil,
    Not(Box<Self>),
}

fn script_app() -> App {
    let mut app = common::bare();
    app.lockstep_component::<Script>();
    app
}

/// Run in a child process by the test below (a stack overflow aborts
/// the whole process).
#[test]
#[ignore = "run by deep_nesting_in_a_snapshot_is_refused"]
fn deep_nesting_child() {
    if std::env::var_os("ATTACK_DEEP").is_none() {
        return;
    }
    let mut a = ready(script_app());
    a.world_mut().spawn(Script(Expr::Nil));
    let honest = state_bytes(a.world()).expect("saves");
    // Script's value is one byte (Nil = 0); make it 1 MB of `Not`s.
    let depth = 1_000_000;
    let mut value = vec![1u8; depth];
    value.push(0);
    assert_eq!(&honest[honest.len() - 6..], &[1, 1, 0, 0, 0, 0]);
    let mut bad = honest[..honest.len() - 6].to_vec();
    bad.push(1);
    bad.extend_from_slice(&(value.len() as u32).to_le_bytes());
    bad.extend_from_slice(&value);
    let mut b = ready(script_app());
    let r = restore_state(b.world_mut(), &bad);
    assert!(
        matches!(&r, Err(lockstep_bevy::SnapshotError::Value { name, .. }) if name.contains("Script")),
        "{r:?}"
    );
}

#[test]
fn deep_nesting_in_a_snapshot_is_refused() {
    let out = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args(["--ignored", "--exact", "deep_nesting_child", "--nocapture"])
        .env("ATTACK_DEEP", "1")
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "a 1 MB snapshot value killed the process: {:?}\n{}\n{}",
        out.status,
        err.lines().rev().take(3).collect::<Vec<_>>().join("\n"),
        so.lines().rev().take(3).collect::<Vec<_>>().join("\n"),
    );
}

// ---------------------------------------------------------------------
// Entity records: memory against their bytes.

#[test]
fn entity_records_cost_little_memory_until_restored() {
    let mut a = ready(common::app(1));
    a.world_mut().spawn(Simulated::default());
    let honest = state_bytes(a.world()).expect("saves");
    let l = lkbv(&honest, COMMON_RES, COMMON_COMPS);
    // 3,000,000 entities with no component: 5 bytes each, 15 MB (under
    // the 16 MiB a transfer may carry).
    let n: u32 = 3_000_000;
    let mut bad = honest[..l.count_at].to_vec();
    bad[l.next_at..l.next_at + 4].copy_from_slice(&n.to_le_bytes());
    bad.extend_from_slice(&n.to_le_bytes());
    for id in 1..=n {
        bad.extend_from_slice(&id.to_le_bytes());
        bad.push(0);
    }
    // Refused at its last byte: what parsing alone costs.
    let mut refused = bad.clone();
    *refused.last_mut().expect("bytes") = 7;
    let mut b = ready(common::app(2));
    let (r, parse_peak) = peak_of(|| restore_state(b.world_mut(), &refused));
    assert!(r.is_err());
    let (r, load_peak) = peak_of(|| restore_state(b.world_mut(), &bad));
    r.expect("a well-formed state");
    let (_, save_peak) = peak_of(|| state_bytes(b.world()).expect("saves"));
    println!(
        "input {} B; refused at the end: peak {} B ({:.1}x); restored: peak {} B ({:.1}x); \
         each save (every tick, for the hash) after: peak {} B ({:.1}x)",
        bad.len(),
        parse_peak,
        parse_peak as f64 / bad.len() as f64,
        load_peak,
        load_peak as f64 / bad.len() as f64,
        save_peak,
        save_peak as f64 / bad.len() as f64,
    );
    assert!(
        parse_peak <= 4 * bad.len(),
        "a refused snapshot cost {parse_peak} B for {} B",
        bad.len()
    );
}

// ---------------------------------------------------------------------
// Ids.

/// A snapshot may not say the next id is past the last the simulation
/// gives (it could spawn no more, or the next spawn would share an id):
/// refused by name, nothing changed.
#[test]
fn a_snapshot_whose_id_counter_is_spent_is_refused() {
    let mut a = ready(common::app(1));
    a.world_mut().spawn(common::Ship::default());
    let honest = state_bytes(a.world()).expect("saves");
    let l = lkbv(&honest, COMMON_RES, COMMON_COMPS);
    let mut bad = honest.clone();
    bad[l.next_at..l.next_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let (_, start, _) = l.records[0];
    bad[start..start + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut b = ready(common::app(2));
    let w = b.world_mut();
    let before = state_bytes(w).expect("saves");
    let r = restore_state(w, &bad);
    assert!(
        matches!(&r, Err(lockstep_bevy::SnapshotError::Malformed(m)) if m.contains("next id")),
        "{r:?}"
    );
    assert_eq!(state_bytes(w).expect("saves"), before);
}

/// A simulation that has given out its last id (2^31 of them) spawns an
/// entity with none: saving says so, rather than two entities sharing one.
#[test]
fn a_simulation_out_of_ids_says_so() {
    let mut a = ready(common::app(1));
    a.world_mut().spawn(common::Ship::default());
    let honest = state_bytes(a.world()).expect("saves");
    let l = lkbv(&honest, COMMON_RES, COMMON_COMPS);
    let mut last = honest.clone();
    last[l.next_at..l.next_at + 4].copy_from_slice(&(1u32 << 31).to_le_bytes());
    let mut b = ready(common::app(2));
    let w = b.world_mut();
    restore_state(w, &last).expect("the last id is allowed");
    let e = w.spawn(common::Ship::default()).id();
    assert_eq!(w.get::<Simulated>(e).map(Simulated::id), Some(0));
    let r = state_bytes(w);
    assert!(
        matches!(&r, Err(lockstep_bevy::SnapshotError::Unsavable(m)) if m.contains("no simulation id")),
        "{r:?}"
    );
}

/// Inserting `Simulated::default()` on an entity that already has one
/// (a respawn bundle) gives it a new id, never 0: a joiner loads the
/// state.
#[test]
fn a_reinserted_simulated_gets_a_new_id() {
    let mut a = ready(common::app(1));
    let w = a.world_mut();
    let e = w.spawn(common::Ship::default()).id();
    w.entity_mut(e)
        .insert((common::Ship::default(), Simulated::default()));
    let id = w.get::<Simulated>(e).map(Simulated::id);
    let bytes = state_bytes(w).expect("the plugin saves and hashes it");
    let mut joiner = ready(common::app(2));
    let r = restore_state(joiner.world_mut(), &bytes);
    assert!(
        r.is_ok(),
        "the id became {id:?}; the state saved, but a joiner refuses it: {r:?}"
    );
}

/// Cloning a simulated entity (a prefab, `clone_and_spawn`) gives the
/// clone an id of its own: the state saves.
#[test]
fn a_cloned_simulated_entity_gets_its_own_id() {
    let mut a = ready(common::app(1));
    let w = a.world_mut();
    let e = w.spawn(common::Ship::default()).id();
    w.commands().entity(e).clone_and_spawn();
    w.flush();
    let ids: Vec<u32> = w.query::<&Simulated>().iter(w).map(Simulated::id).collect();
    let saved = state_bytes(w);
    assert!(saved.is_ok(), "ids {ids:?}: {saved:?}");
}

// ---------------------------------------------------------------------
// Refused correctly: mutations of a valid snapshot of a richer game.

#[derive(Component, Debug, Clone, Serialize, Deserialize)]
#[require(Simulated)]
struct Follows(Entity);

impl MapEntities for Follows {
    fn map_entities<E: EntityMapper>(&mut self, m: &mut E) {
        self.0 = m.get_mapped(self.0);
    }
}

#[derive(Component, Debug, Default, Reflect)]
#[require(Simulated)]
struct Glider {
    x: i64,
    trail: Vec<u16>,
    name: String,
}

#[derive(Resource, Debug, Default, Reflect)]
struct Wind(Vec<i64>);

fn rich_app() -> App {
    let mut app = common::app(7);
    app.lockstep_mapped_component::<Follows>()
        .lockstep_component_reflect::<Glider>()
        .init_resource::<Wind>()
        .lockstep_resource_reflect::<Wind>();
    app
}

fn rich_state(w: &mut World) {
    w.resource_mut::<common::Score>().0 = vec![3, 1, 4];
    w.resource_mut::<Wind>().0 = vec![-1, 2];
    let a = w
        .spawn((
            common::Ship {
                seat: 1,
                x: 5,
                ..Default::default()
            },
            Glider {
                x: 9,
                trail: vec![1, 2, 3],
                name: "g".into(),
            },
        ))
        .id();
    let b = w.spawn(Follows(a)).id();
    w.spawn((Follows(b), common::Ship::default()));
    let gone = w.spawn(Simulated::default()).id();
    w.despawn(gone);
    w.spawn(Glider::default());
}

#[test]
fn mutated_snapshots_are_refused_or_restore_cleanly() {
    let mut src = ready(rich_app());
    rich_state(src.world_mut());
    let orig = state_bytes(src.world()).expect("saves");
    let mut target = ready(rich_app());
    rich_state(target.world_mut());
    // Its own state differs from the source's a little.
    target.world_mut().resource_mut::<common::Score>().0.push(9);
    let base = state_bytes(target.world()).expect("saves");

    let mut rng = lockstep_core::sim::SimRng::new(7);
    let (mut refused, mut accepted, mut panics) = (0u32, 0u32, Vec::new());
    let extremes = [0u32, 1, 2, 5, 0x7fff_ffff, u32::MAX, u32::MAX - 1];
    for i in 0..40_000u32 {
        let mut bad = orig.clone();
        match i % 5 {
            0 => {
                let at = rng.below(bad.len() as u64) as usize;
                bad[at] = rng.next_u64() as u8;
            }
            1 => bad.truncate(rng.below(bad.len() as u64) as usize),
            2 => {
                let at = rng.below(bad.len() as u64 - 3) as usize;
                let v = extremes[rng.below(extremes.len() as u64) as usize];
                bad[at..at + 4].copy_from_slice(&v.to_le_bytes());
            }
            3 => {
                let at = rng.below(bad.len() as u64) as usize;
                let n = 1 + rng.below(8) as usize;
                for _ in 0..n {
                    bad.insert(at, rng.next_u64() as u8);
                }
            }
            _ => {
                for _ in 0..3 {
                    let at = rng.below(bad.len() as u64) as usize;
                    bad[at] ^= 1 << rng.below(8);
                }
            }
        }
        let w = target.world_mut();
        let r = catch_unwind(AssertUnwindSafe(|| {
            let (r, peak) = peak_of(|| restore_state(w, &bad));
            (r, peak)
        }));
        match r {
            Err(e) => {
                panics.push(panic_text(&e));
                target = ready(rich_app());
                rich_state(target.world_mut());
                target.world_mut().resource_mut::<common::Score>().0.push(9);
            }
            Ok((Err(e), peak)) => {
                refused += 1;
                assert!(peak < 2 << 20, "a refused snapshot cost {peak} B");
                assert!(
                    state_bytes(w).expect("saves") == base,
                    "changed on an error: {e}"
                );
            }
            Ok((Ok(()), _)) => {
                accepted += 1;
                let saved = state_bytes(w).expect("an accepted state saves");
                let mut fresh = ready(rich_app());
                restore_state(fresh.world_mut(), &saved).expect("and its save loads");
                restore_state(w, &base).expect("back");
            }
        }
    }
    println!(
        "refused {refused}, accepted {accepted}, panics {}",
        panics.len()
    );
    assert!(panics.is_empty(), "{:?}", &panics[..panics.len().min(5)]);
}

/// The obvious ones, one at a time: each refused with a typed error and
/// nothing changed.
#[test]
fn crafted_snapshots_are_refused() {
    let mut src = ready(rich_app());
    rich_state(src.world_mut());
    let orig = state_bytes(src.world()).expect("saves");
    let mut target = ready(rich_app());
    let base = state_bytes(target.world()).expect("saves");
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    cases.push(("empty", Vec::new()));
    let mut v = orig.clone();
    v[4] = 2;
    cases.push(("version", v));
    let mut v = orig.clone();
    v[5] ^= 1;
    cases.push(("fingerprint", v));
    let mut other = ready(common::app(1));
    other.world_mut().spawn(common::Ship::default());
    cases.push(("other registry", state_bytes(other.world()).expect("saves")));
    let mut v = orig.clone();
    v.push(0);
    cases.push(("trailing", v));
    // Count u32::MAX.
    let mut x = ready(common::app(1));
    let h = state_bytes(x.world_mut()).expect("saves");
    let l = lkbv(&h, COMMON_RES, COMMON_COMPS);
    let mut v = h.clone();
    v[l.count_at..l.count_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut common_cases: Vec<(&str, Vec<u8>)> = vec![("count u32::MAX", v)];
    let mut v = h.clone();
    v[l.count_at..l.count_at + 4].copy_from_slice(&(1u32 << 22).to_le_bytes());
    common_cases.push(("count 2^22, no records", v));
    let mut x2 = ready(common::app(1));
    x2.world_mut().spawn(common::Ship::default());
    let h2 = state_bytes(x2.world()).expect("saves");
    let l2 = lkbv(&h2, COMMON_RES, COMMON_COMPS);
    let mut v = h2.clone();
    v[l2.next_at..l2.next_at + 4].copy_from_slice(&0u32.to_le_bytes());
    common_cases.push(("id above next", v));
    let mut v = h2.clone();
    let (_, start, _) = l2.records[0];
    v[start..start + 4].copy_from_slice(&0u32.to_le_bytes());
    common_cases.push(("id 0", v));
    let mut v = h2.clone();
    v[start + 4] = 2;
    common_cases.push(("presence byte 2", v));
    let mut v = h2.clone();
    v[start + 5..start + 9].copy_from_slice(&u32::MAX.to_le_bytes());
    common_cases.push(("value length u32::MAX", v));
    for (name, bytes) in &cases {
        let r = restore_state(target.world_mut(), bytes);
        println!("{name}: {r:?}");
        assert!(r.is_err(), "{name}");
        assert_eq!(state_bytes(target.world()).expect("saves"), base, "{name}");
    }
    let mut ct = ready(common::app(3));
    ct.world_mut().spawn(common::Ship {
        x: 3,
        ..Default::default()
    });
    let cbase = state_bytes(ct.world()).expect("saves");
    for (name, bytes) in &common_cases {
        let (r, peak) = peak_of(|| restore_state(ct.world_mut(), bytes));
        println!("{name}: {r:?}, peak {peak} B");
        assert!(r.is_err(), "{name}");
        assert!(peak < 1 << 16, "{name}: {peak}");
        assert_eq!(state_bytes(ct.world()).expect("saves"), cbase, "{name}");
    }
    // Junk after a serde value (inside its length) is taken: the state
    // restored saves to other bytes than those it came from (a nit).
    let mut v = h2[..start + 5].to_vec();
    let len = u32_at(&h2, start + 5) as usize;
    v.extend_from_slice(&(len as u32 + 3).to_le_bytes());
    v.extend_from_slice(&h2[start + 9..start + 9 + len]);
    v.extend_from_slice(&[9, 9, 9]);
    v.extend_from_slice(&h2[start + 9 + len..]);
    let r = restore_state(ct.world_mut(), &v);
    println!(
        "junk inside a serde value: {r:?}; re-saved equal to the input: {}",
        state_bytes(ct.world()).expect("saves") == v
    );
    // A Vec whose length says 2^32 - 1 (Score): serde caps what it reserves.
    let mut y = ready(common::app(1));
    y.world_mut().resource_mut::<common::Score>().0 = vec![0];
    let h = state_bytes(y.world()).expect("saves");
    // Score is the first resource: presence, len 2 (len 1, value 0).
    assert_eq!(&h[17..24], &[1, 2, 0, 0, 0, 1, 0]);
    let mut v = h[..18].to_vec();
    v.extend_from_slice(&6u32.to_le_bytes());
    v.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0]);
    v.extend_from_slice(&h[24..]);
    let mut z = ready(common::app(2));
    let (r, peak) = peak_of(|| restore_state(z.world_mut(), &v));
    println!("Score len 2^32-1: {r:?}, peak {peak} B");
    assert!(r.is_err());
}

// ---------------------------------------------------------------------
// A donor that lies, over the network, while honest apps play.

/// How the lying donor lies in the snapshots it hands out.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Lie {
    /// Its own seat's score raised by 1000.
    Score,
    /// The next id u32::MAX, and its last entity's id too.
    Ids,
    /// Entity 1 left out (the parent of entity 2 in every world).
    NoParent,
}

/// A player whose game is the test game in a Bevy world, played
/// honestly, reporting honest hashes, handing out made-up states.
struct Liar {
    world: RefCell<World>,
    lie: Lie,
    comps: usize,
    armed: bool,
    lied: Cell<u32>,
}

impl Game for Liar {
    type Input = u8;
    fn step(&mut self, frame: &Frame<u8>) {
        let w = self.world.get_mut();
        w.insert_resource(FrameInputs {
            tick: frame.tick,
            inputs: frame.inputs.clone(),
            events: frame.events.clone(),
        });
        if let Some(mut t) = w.get_resource_mut::<SimTime>() {
            t.tick = frame.tick.get();
            t.ticks = t.ticks.saturating_add(1);
        }
        w.run_schedule(LockstepSchedule);
    }
    fn hash(&self) -> u64 {
        state_hash(&self.world.borrow()).unwrap_or(0)
    }
    fn save(&self) -> Vec<u8> {
        let honest = state_bytes(&self.world.borrow()).expect("saves");
        if !self.armed {
            return honest;
        }
        self.lied.set(self.lied.get() + 1);
        match self.lie {
            Lie::Score => {
                let mut w = self.world.borrow_mut();
                let old = w.resource::<common::Score>().clone();
                {
                    let mut s = w.resource_mut::<common::Score>();
                    if s.0.is_empty() {
                        s.0.push(0);
                    }
                    s.0[0] += 1000;
                }
                let b = state_bytes(&w).expect("saves");
                *w.resource_mut::<common::Score>() = old;
                b
            }
            Lie::Ids => {
                let l = lkbv(&honest, COMMON_RES, self.comps);
                let mut b = honest.clone();
                b[l.next_at..l.next_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
                let (_, start, _) = *l.records.last().expect("an entity");
                b[start..start + 4].copy_from_slice(&u32::MAX.to_le_bytes());
                b
            }
            Lie::NoParent => {
                let l = lkbv(&honest, COMMON_RES, self.comps);
                let (id, start, end) = l.records[0];
                assert_eq!(id, 1);
                let mut b = honest[..start].to_vec();
                b.extend_from_slice(&honest[end..]);
                let count = l.records.len() as u32 - 1;
                b[l.count_at..l.count_at + 4].copy_from_slice(&count.to_le_bytes());
                b
            }
        }
    }
    fn restore(_: &[u8]) -> Result<Self, String> {
        Err("in place".into())
    }
    fn replace(&mut self, bytes: &[u8]) -> Result<Self, String> {
        restore_state(self.world.get_mut(), bytes).map_err(|e| e.to_string())?;
        Ok(Self {
            world: RefCell::new(World::new()),
            lie: self.lie,
            comps: self.comps,
            armed: false,
            lied: Cell::new(0),
        })
    }
}

/// A game whose startup spawns a simulated parent with a simulated child
/// (ids 1 and 2 on every machine).
fn family_app(seed: u64) -> App {
    let mut app = common::app(seed);
    app.add_systems(Startup, |world: &mut World| {
        let parent = world.spawn(Simulated::default()).id();
        world.spawn((Simulated::default(), ChildOf(parent)));
    });
    app
}

/// A spark each tick, gone five ticks later (shots, particles of the
/// simulation).
#[derive(Component, Debug, Clone, Serialize, Deserialize)]
#[require(Simulated)]
struct Spark(u32);

fn spark_app(seed: u64) -> App {
    let mut app = common::app(seed);
    app.lockstep_component::<Spark>().add_systems(
        LockstepSchedule,
        (|mut commands: Commands, frame: Res<FrameInputs<u8>>, q: Query<(Entity, &Spark)>| {
            let now = frame.tick.get();
            for (e, s) in &q {
                if s.0 + 5 <= now {
                    commands.entity(e).despawn();
                }
            }
            commands.spawn(Spark(now));
        })
        .after(common::simulate),
    );
    app
}

struct Outcome {
    lied: u32,
    joiner_status: LockstepStatus,
    joiner_failure: Option<String>,
    joiner_panic: Option<String>,
    hashes: Vec<Option<u64>>,
    resynced: bool,
}

fn lying_donor(seed: u64, lie: Lie) -> Outcome {
    let make = |s: u64| match lie {
        Lie::NoParent => family_app(s),
        Lie::Ids => spark_app(s),
        Lie::Score => common::app(s),
    };
    let link = LinkConditions {
        latency: Duration::from_millis(40),
        ..LinkConditions::default()
    };
    let net = common::Net::new(seed, link);
    let liar_peer = PeerId(5);
    net.set_link_both(
        liar_peer,
        common::SERVER,
        LinkConditions {
            latency: Duration::from_millis(2),
            ..LinkConditions::default()
        },
    );
    let room = lockstep_core::sequenced::SequencerConfig {
        policy: lockstep_core::sequenced::Policy::WaitForAll {
            abandon_after: Duration::from_secs(10),
        },
        snapshot_join: true,
        snapshot_join_after: 0,
        ..lockstep_core::sequenced::SequencerConfig::default()
    };
    let mut server = common::Server::new(&net, room);
    let last = Tick::new(500);
    let mut apps: Vec<App> = (1..=2u32)
        .map(|p| {
            let mut a = make(seed * 10 + u64::from(p));
            let mut s = common::client_session(&net, PeerId(p), false);
            s.set_last_tick(Some(last));
            a.insert_resource(s);
            a
        })
        .collect();
    // The liar: the same game's world, driven by a runner of its own.
    let mut liar_app = ready(make(seed * 10 + 5));
    let liar_world = core::mem::take(liar_app.world_mut());
    let session = lockstep_core::sequenced::ClientSession::new(
        ClientConfig::default(),
        common::SERVER,
        Instant::ZERO,
    )
    .expect("a session");
    let mut liar = Runner::new(
        session,
        Liar {
            world: RefCell::new(liar_world),
            lie,
            comps: if lie == Lie::Ids { 2 } else { COMMON_COMPS },
            armed: false,
            lied: Cell::new(0),
        },
        RunnerConfig::default(),
    )
    .expect("a runner");
    liar.set_last_tick(Some(last));
    let mut liar_t = net.transport(liar_peer);
    let mut bufs = lockstep_net::Buffers::default();

    let mut clock = Instant::ZERO;
    let mut joiner_panic = None;
    let mut liar_log: Vec<String> = Vec::new();
    for frame in 0..3_000u32 {
        if frame == 230 {
            // The others are in and playing: lie from now on, to joiners.
            liar.game_mut().armed = true;
        }
        if frame == 240 {
            let mut j = make(seed * 10 + 3);
            let mut s = common::client_session(&net, PeerId(3), false);
            s.set_last_tick(Some(last));
            j.insert_resource(s);
            apps.push(j);
        }
        clock += common::FRAME;
        net.advance_to(clock);
        server.pump(clock);
        for (i, a) in apps.iter_mut().enumerate() {
            if i == 2 && joiner_panic.is_some() {
                continue;
            }
            if let Err(e) = catch_unwind(AssertUnwindSafe(|| a.update())) {
                joiner_panic = Some(panic_text(&e));
            }
        }
        let _ = lockstep_net::drive(&mut liar, &mut liar_t, clock, &mut bufs);
        if let Some(rate) = liar.session().tick_rate() {
            liar.game_mut()
                .world
                .get_mut()
                .resource_mut::<SimTime>()
                .rate = rate;
        }
        if let Err(e) = liar.update(clock, |_| 3) {
            liar_log.push(format!("frame {frame}: update: {e}"));
        }
        while let Some(ev) = liar.poll_event() {
            if !matches!(
                ev,
                lockstep_core::Event::Interrupted { .. } | lockstep_core::Event::Recovered { .. }
            ) {
                liar_log.push(format!("frame {frame}: {ev:?}"));
            }
        }
        let _ = lockstep_net::drive(&mut liar, &mut liar_t, clock, &mut bufs);
        let done = apps.len() == 3
            && liar.finished()
            && apps.iter().all(|a| {
                matches!(
                    *a.world().resource::<LockstepStatus>(),
                    LockstepStatus::Session(Status::Finished) | LockstepStatus::Failed
                )
            });
        if done || joiner_panic.is_some() && frame > 600 {
            break;
        }
    }
    println!("liar: {liar_log:#?}");
    let mut hashes: Vec<Option<u64>> = apps
        .iter()
        .enumerate()
        .map(|(i, a)| {
            if i == 2 && joiner_panic.is_some() {
                None
            } else {
                state_hash(a.world())
            }
        })
        .collect();
    hashes.push(state_hash(&liar.game().world.borrow()));
    let j = &mut apps[2];
    let joiner_status = j
        .world()
        .get_resource::<LockstepStatus>()
        .copied()
        .unwrap_or(LockstepStatus::Failed);
    let resynced = j.world().get_resource::<common::Seen>().is_some_and(|s| {
        s.0.iter()
            .any(|e| matches!(e, lockstep_core::Event::Resyncing))
    });
    let joiner_failure = j
        .world_mut()
        .get_resource_mut::<LockstepSession<u8>>()
        .and_then(|mut s| s.failure().map(str::to_owned));
    Outcome {
        lied: liar.game().lied.get(),
        joiner_status,
        joiner_failure,
        joiner_panic,
        hashes,
        resynced,
    }
}

/// A wrong but well-formed state (a score made up): the joiner diverges,
/// is told, and is healed from an honest donor.
#[test]
fn a_lying_donors_made_up_score_is_found_and_healed() {
    for seed in 1..=2u64 {
        let o = lying_donor(seed, Lie::Score);
        println!(
            "seed {seed}: lied {} times, joiner {:?} {:?}, resynced {}, hashes {:x?}",
            o.lied, o.joiner_status, o.joiner_failure, o.resynced, o.hashes
        );
        assert!(o.lied > 0, "seed {seed}: the liar was never asked");
        assert_eq!(
            o.joiner_status,
            LockstepStatus::Session(Status::Finished),
            "seed {seed}: {:?}",
            o.joiner_failure
        );
        assert!(o.resynced, "seed {seed}");
        assert!(
            o.hashes.windows(2).all(|w| w[0] == w[1]),
            "seed {seed}: {:x?}",
            o.hashes
        );
    }
}

/// A state whose id counter is spent, from a donor: the joiner refuses it
/// by name (a snapshot that does not restore stops the joiner; it is not
/// asked of another donor), the others play on and end equal.
#[test]
fn a_lying_donors_spent_id_counter_is_refused_by_name() {
    let o = lying_donor(1, Lie::Ids);
    println!(
        "lied {} times, joiner {:?} {:?}, resynced {}, hashes {:x?}",
        o.lied, o.joiner_status, o.joiner_failure, o.resynced, o.hashes
    );
    assert!(o.lied > 0, "the liar was never asked");
    assert!(o.joiner_panic.is_none(), "{:?}", o.joiner_panic);
    assert_eq!(o.joiner_status, LockstepStatus::Failed);
    assert!(
        o.joiner_failure
            .as_deref()
            .is_some_and(|f| f.contains("next id")),
        "{:?}",
        o.joiner_failure
    );
    let honest = [o.hashes[0], o.hashes[1], o.hashes[3]];
    assert!(
        honest.windows(2).all(|w| w[0] == w[1]) && honest[0].is_some(),
        "{:x?}",
        o.hashes
    );
}

/// A donor leaves entity 1 (a parent) out: restoring it despawns the
/// joiner's entity 1 and its child 2 with it, and spawns 2 again; nothing
/// panics.
#[test]
fn a_lying_donor_leaving_out_a_parent_crashes_nothing() {
    let o = lying_donor(1, Lie::NoParent);
    println!(
        "lied {} times, joiner {:?} {:?}, panic {:?}",
        o.lied, o.joiner_status, o.joiner_failure, o.joiner_panic
    );
    assert!(o.lied > 0, "the liar was never asked");
    assert!(
        o.joiner_panic.is_none(),
        "the joiner's app panicked: {:?}",
        o.joiner_panic
    );
}

// ---------------------------------------------------------------------
// The game's hooks and observers run inside the restore.

/// What is left of a ship: simulation state too.
#[derive(Component, Debug, Clone, Default, Serialize, Deserialize)]
#[require(Simulated)]
struct Debris;

fn debris_app(seed: u64) -> App {
    let mut app = common::app(seed);
    app.lockstep_component::<Debris>().add_observer(
        |_: On<Remove, common::Ship>, mut commands: Commands| {
            commands.spawn(Debris);
        },
    );
    app
}

/// A ship leaves debris when it goes (an observer, as Bevy games do). A
/// restore that despawns a ship the snapshot does not hold runs the
/// observer: the restored world holds debris no snapshot has. The restore
/// says so, naming it, instead of leaving a state other than the one sent
/// (a resync would never heal); an observer that skips its work while
/// `Restoring` is present restores cleanly.
#[test]
fn an_observer_run_by_the_restore_is_named() {
    let mut donor = ready(debris_app(1));
    donor.world_mut().spawn(Simulated::default());
    let bytes = state_bytes(donor.world()).expect("saves");

    let mut diverged = ready(debris_app(2));
    diverged.world_mut().spawn(common::Ship::default());
    let r = restore_state(diverged.world_mut(), &bytes);
    assert!(
        matches!(&r, Err(lockstep_bevy::SnapshotError::Altered(m)) if m.contains("Debris")),
        "{r:?}"
    );

    let mut careful = ready(common::app(2));
    careful.lockstep_component::<Debris>().add_observer(
        |_: On<Remove, common::Ship>,
         restoring: Option<Res<lockstep_bevy::Restoring>>,
         mut commands: Commands| {
            if restoring.is_none() {
                commands.spawn(Debris);
            }
        },
    );
    let mut donor = ready(common::app(1));
    donor.lockstep_component::<Debris>();
    donor.world_mut().spawn(Simulated::default());
    let bytes = state_bytes(donor.world()).expect("saves");
    careful.world_mut().spawn(common::Ship::default());
    restore_state(careful.world_mut(), &bytes).expect("restores");
    assert_eq!(state_bytes(careful.world()).expect("saves"), bytes);
}
