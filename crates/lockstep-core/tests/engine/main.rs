//! What every topology shares: the trace guard, the network figures in
//! every session's stats, desync detection and healing, and the game's
//! own determinism check.

#[path = "../common/mod.rs"]
mod common;

mod bandwidth;
mod desync;
mod desync_attacks;
mod self_check;
mod stats;
mod trace;
