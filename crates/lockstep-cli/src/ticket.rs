//! `lockstep ticket`: sign a join ticket, as a matchmaker would.

use clap::Args;
use lockstep_relay::ticket::{self, Claims, Role, TicketKey};
use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

/// Sign a ticket for one player (or spectator) to join one room.
#[derive(Debug, Args)]
pub(crate) struct TicketArgs {
    /// The secret shared with the relay (at least 16 bytes).
    #[arg(long, env = "LOCKSTEP_TICKET_SECRET", hide_env_values = true)]
    secret: String,
    /// The id the relay knows the secret by (0 for `--ticket-secret`).
    #[arg(long, default_value_t = 0)]
    key_id: u8,
    /// The room.
    #[arg(long)]
    room: String,
    /// The player's name, as they will give it.
    #[arg(long)]
    name: String,
    /// A spectator's ticket instead of a player's.
    #[arg(long)]
    spectator: bool,
    /// Seconds the ticket stays valid.
    #[arg(long, default_value_t = 3600)]
    valid_for: u64,
    /// The relay of a fleet (its `--relay-id`) that should serve the room:
    /// another relay of the fleet sends the player there while the room is
    /// new.
    #[arg(long, value_parser = relay_id)]
    relay: Option<String>,
}

/// A relay id the directory takes (a clap value parser).
pub(crate) fn relay_id(s: &str) -> Result<String, String> {
    lockstep_relay::directory::check_relay_id(s)
        .map(|()| s.to_owned())
        .map_err(|e| e.to_string())
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum TicketCliError {
    #[error(transparent)]
    Secret(#[from] ticket::ShortSecret),
    #[error(transparent)]
    Issue(#[from] ticket::IssueError),
}

/// Prints the ticket in hex, for `lockstep play --ticket`.
pub(crate) fn main(a: TicketArgs) -> Result<(), TicketCliError> {
    let key = TicketKey::new(a.key_id, &a.secret)?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let claims = Claims {
        room: &a.room,
        name: &a.name,
        role: if a.spectator {
            Role::Spectator
        } else {
            Role::Player
        },
        expiry: now.saturating_add(a.valid_for),
        relay: a.relay.as_deref(),
    };
    let t = ticket::issue_random(&key, &claims)?;
    println!("{}", to_hex(&t));
    Ok(())
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// A ticket's bytes, given in hex on the command line.
#[derive(Debug, Clone)]
pub(crate) struct TicketBytes(pub(crate) Vec<u8>);

/// Parses a hex string (a clap value parser).
pub(crate) fn hex(s: &str) -> Result<TicketBytes, String> {
    let s = s.trim();
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("a ticket is hex digits, two per byte".into());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()
        .map(TicketBytes)
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_round_trips_and_refuses_junk() {
        let back = super::hex(&super::to_hex(&[0, 1, 0xfe])).map(|t| t.0);
        assert_eq!(back, Ok(vec![0, 1, 0xfe]));
        assert!(super::hex("abc").is_err());
        assert!(super::hex("zz").is_err());
    }
}
