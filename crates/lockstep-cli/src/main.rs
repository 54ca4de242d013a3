//! `lockstep`: the relay server and tools, as thin shells over the libraries.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

mod bench;
mod demo;

mod desync;
mod fleet;
mod netsim;
mod play;
mod relay;
mod replay;
mod replay_play;
mod ticket;

/// Deterministic lockstep networking: run a relay, and more.
#[derive(Debug, Parser)]
#[command(name = "lockstep", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Play swarm between bots through a relay on this machine, and check
    /// every client ended on the same state.
    Demo(demo::DemoArgs),
    /// Play swarm in this terminal against a relay (or watch with --watch).
    ///
    /// Keys: WASD move, arrows (or IJKL) aim, space fires, F toggles
    /// auto-fire, B boosts, Q quits. Ships are digits (yours is the seat in
    /// `you: N` in the top bar), creeps `x` (`X` the tough ones). Needs a
    /// real terminal of 80x24 or more (not a pipe). A lost connection is
    /// taken back by itself (the title then says `(reconnected Nx)`) while
    /// the relay holds the seat: 30 s from the last packet, but under the
    /// default `wait-for-all` policy a player silent for 10 s is dropped
    /// from the game first, so come back within 10 s to keep playing.
    Play(play::PlayArgs),
    /// Run a relay server: rooms of UDP and WebSocket clients.
    Relay(Box<relay::RelayArgs>),
    /// Measure: `lockstep bench relay` finds this machine's relay capacity.
    Bench(bench::BenchArgs),
    /// Sign a join ticket for a relay that requires them.
    Ticket(ticket::TicketArgs),
    /// Read and check replay files: `lockstep replay info FILE`,
    /// `lockstep replay verify FILE --seed N`.
    Replay(replay::ReplayArgs),
    /// Read desync reports: `lockstep desync show FILE`.
    Desync(desync::DesyncArgs),
    /// A fleet of relays: `lockstep fleet status --directory URL` lists its
    /// relays and rooms from its room directory.
    Fleet(fleet::FleetArgs),
    /// A UDP link conditioner: sits between clients and a server (a relay,
    /// a host) and adds loss, latency, jitter, duplication, reordering and
    /// a bandwidth limit, each way, optionally changing over time.
    Netsim(netsim::NetsimArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(args) => demo::main(args).map_err(|e| e.to_string()),
        Command::Play(args) => play::main(args).map_err(|e| e.to_string()),
        Command::Relay(args) => relay::main(*args).map_err(|e| e.to_string()),
        Command::Replay(args) => replay::main(args),
        Command::Bench(args) => bench::main(args).map_err(|e| e.to_string()),
        Command::Ticket(args) => ticket::main(args).map_err(|e| e.to_string()),
        Command::Desync(args) => desync::main(args).map_err(|e| e.to_string()),
        Command::Netsim(args) => netsim::main(args).map_err(|e| e.to_string()),
        Command::Fleet(args) => fleet::main(args).map_err(|e| e.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lockstep: {e}");
            ExitCode::FAILURE
        }
    }
}
