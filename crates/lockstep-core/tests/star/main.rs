//! The sequenced (star) topology, relay rooms and host mode: each module
//! one concern, its rules driven by hand, its promises over many seeds,
//! and the attacks on it.

#[path = "../common/mod.rs"]
mod common;

mod adaptive_delay;
mod host_migration;
mod host_migration_attacks;
mod host_migration_midway;
mod input_reference;
mod join;
mod join_attacks;
mod lobby;
mod lobby_attacks;
mod ping_attacks;
mod properties;
mod recovery;
mod reference_attacks;
mod rejoin;
mod resend_attacks;
mod roster;
mod rules;
mod runner;
mod single_player;
mod spectate;
