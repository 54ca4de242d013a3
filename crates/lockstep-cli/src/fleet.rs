//! `lockstep fleet status`: a fleet's relays and rooms, read from its room
//! directory.

use clap::{Args, Subcommand};
use lockstep_relay::directory::{Directory, DirectoryError, RedisDirectory, RelayState};

/// What to do with the fleet.
#[derive(Debug, Args)]
pub(crate) struct FleetArgs {
    #[command(subcommand)]
    command: FleetCommand,
}

#[derive(Debug, Subcommand)]
enum FleetCommand {
    /// The live relays (addresses, clients, rooms, state) and every room
    /// with its relay and claim epoch.
    Status {
        /// The fleet's room directory (redis://host:port/db).
        #[arg(long, env = "LOCKSTEP_DIRECTORY", value_name = "URL")]
        directory: String,
        /// The keys' prefix in the directory.
        #[arg(long, default_value = "lockstep:")]
        directory_prefix: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum FleetError {
    #[error(transparent)]
    Directory(#[from] DirectoryError),
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
}

pub(crate) fn main(args: FleetArgs) -> Result<(), FleetError> {
    let FleetCommand::Status {
        directory,
        directory_prefix,
        json,
    } = args.command;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(FleetError::Runtime)?;
    runtime.block_on(async move {
        let d = RedisDirectory::open(&directory, &directory_prefix)?;
        let relays = d.relays().await?;
        let rooms = d.rooms().await?;
        if json {
            let rooms: Vec<serde_json::Value> = rooms
                .iter()
                .map(|(name, o)| {
                    serde_json::json!({ "room": name, "relay": o.relay, "epoch": o.epoch })
                })
                .collect();
            println!(
                "{}",
                serde_json::json!({ "relays": relays, "rooms": rooms })
            );
            return Ok(());
        }
        println!("{} relays, {} rooms", relays.len(), rooms.len());
        println!(
            "{:<24} {:<22} {:<22} {:>8} {:>6}  state",
            "relay", "udp", "ws", "clients", "rooms"
        );
        let shown = |a: Option<std::net::SocketAddr>| a.map_or("-".to_owned(), |a| a.to_string());
        for r in &relays {
            let state = match r.state {
                RelayState::Ready => "ready",
                RelayState::Draining => "draining",
                RelayState::Full => "full",
                RelayState::Unknown => "unknown",
            };
            println!(
                "{:<24} {:<22} {:<22} {:>8} {:>6}  {state}",
                r.id,
                shown(r.udp),
                shown(r.ws),
                r.clients,
                r.rooms
            );
        }
        if !rooms.is_empty() {
            println!();
            println!("{:<32} {:<24} epoch", "room", "relay");
            for (name, o) in &rooms {
                println!("{name:<32} {:<24} {}", o.relay, o.epoch);
            }
        }
        Ok(())
    })
}
