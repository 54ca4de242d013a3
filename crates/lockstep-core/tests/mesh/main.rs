//! The mesh (peer-to-peer) topology: each module one concern, its rules
//! driven by hand, its promises over many seeds, and the attacks on it.

#[path = "../common/mod.rs"]
mod common;

mod abandon_attacks;
mod adaptive_delay;
mod datagram_attacks;
mod delay_attacks;
mod forgery_attacks;
mod observer_attacks;
mod observers;
mod properties;
mod resync;
mod resync_attacks;
mod rules;
mod runner;
mod vote_forgery_attacks;
