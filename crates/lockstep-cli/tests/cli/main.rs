//! The `lockstep` binary as a user runs it: each subcommand in a child
//! process, its output and exit status.

#[path = "../common/mod.rs"]
mod common;

mod bad_input;
mod bevy_apps;
mod demo;
mod desync;
mod fleet;
mod netsim;
mod play_pty;
mod relay;
mod replay;
