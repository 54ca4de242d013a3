//! Swarm: a small, real game on lockstep.
//!
//! A top-down arena: every player flies a ship with a movement stick and an
//! aim stick, fires and boosts; waves of creeps, hundreds at a time, spawn at
//! the edges from a seeded generator and chase the nearest ship. Destroy
//! creeps for score; touch one and your ship respawns.
//!
//! The simulation ([`Game`]) is deterministic by construction: integers
//! only, every collection iterated in a defined order, randomness from a
//! generator whose state is part of the game. It runs one confirmed
//! [`Frame`](lockstep_core::Frame) at a time, takes membership from the
//! frame stream (a `Joined` seat spawns a ship, `Left`/`Abandoned` removes
//! it), hashes canonically, and snapshots and restores.
//!
//! [`Bot`] plays plausibly from its own seed; [`render::draw`] draws a game
//! into a ratatui terminal buffer.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(
    not(test),
    warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod bot;
mod check;
mod game;
pub mod render;
mod rng;

pub use bot::Bot;
pub use game::{
    ARENA_H, ARENA_W, BOOST, CREEP_RADIUS, Creep, FIRE, Game, GameConfig, SHIP_RADIUS, Ship, Shot,
    SnapshotError, Vec2,
};
pub use rng::Pcg32;
