//! The bounds every session's configuration keeps: one check per rule,
//! called by the mesh, the sequencer, the client and the pacer alike, so
//! that no topology takes a value another refuses.

use crate::AdaptiveDelay;
use crate::error::ConfigError;
use crate::wire;
use core::time::Duration;

/// The longest lead past the delay any session allows, in ticks.
pub(crate) const MAX_LEAD: u32 = 4096;
/// The fastest tick rate, in ticks per second.
pub(crate) const MAX_TICK_RATE: u32 = 1000;

/// `Err(Invalid(why))` when `broken` holds: one line per rule.
pub(crate) fn unless(broken: bool, why: &'static str) -> Result<(), ConfigError> {
    ConfigError::unless(broken, why)
}

/// How far past the delay a session may commit (`max_lead`).
pub(crate) fn lead(max_lead: u32) -> Result<(), ConfigError> {
    unless(
        max_lead == 0 || max_lead > MAX_LEAD,
        "max_lead must be 1 to 4096 ticks",
    )
}

/// The largest encoded input taken (`max_input_len`).
pub(crate) fn input_len(max_input_len: usize) -> Result<(), ConfigError> {
    unless(
        max_input_len == 0 || max_input_len > wire::MAX_INPUT_LEN,
        "max_input_len must be 1 to 1024 bytes",
    )
}

/// An input delay (`delay`), within the adaptive bounds when it adapts.
pub(crate) fn delay(delay: u32, adaptive: Option<&AdaptiveDelay>) -> Result<(), ConfigError> {
    unless(delay > wire::MAX_DELAY, "delay over 1024 ticks")?;
    adaptive.map_or(Ok(()), |a| a.validate_from(delay))
}

/// A tick rate (`tick_rate`).
pub(crate) fn tick_rate(tick_rate: u32) -> Result<(), ConfigError> {
    unless(
        tick_rate == 0 || tick_rate > MAX_TICK_RATE,
        "tick_rate must be 1 to 1000",
    )
}

/// The rules every session's link shares: the datagram size, the resend,
/// keepalive and ping timers, and the checksum window.
pub(crate) fn link(
    max_datagram: usize,
    [resend, keepalive, ping]: [Duration; 3],
    checksum_window: usize,
) -> Result<(), ConfigError> {
    unless(
        !(256..=wire::MAX_DATAGRAM_LEN).contains(&max_datagram),
        "max_datagram must be 256 to 65507 bytes",
    )?;
    unless(resend.is_zero(), "resend_interval must be positive")?;
    unless(keepalive.is_zero(), "keepalive_interval must be positive")?;
    unless(ping.is_zero(), "ping_interval must be positive")?;
    unless(checksum_window == 0, "checksum_window must be positive")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bound_refuses_just_past_its_edge() {
        assert!(lead(1).is_ok() && lead(MAX_LEAD).is_ok());
        assert!(lead(0).is_err() && lead(MAX_LEAD + 1).is_err());
        assert!(input_len(1).is_ok() && input_len(wire::MAX_INPUT_LEN).is_ok());
        assert!(input_len(0).is_err() && input_len(wire::MAX_INPUT_LEN + 1).is_err());
        assert!(delay(0, None).is_ok() && delay(wire::MAX_DELAY, None).is_ok());
        assert!(delay(wire::MAX_DELAY + 1, None).is_err());
        let a = AdaptiveDelay {
            min: 2,
            max: 8,
            ..AdaptiveDelay::default()
        };
        assert!(delay(2, Some(&a)).is_ok() && delay(8, Some(&a)).is_ok());
        assert!(delay(1, Some(&a)).is_err() && delay(9, Some(&a)).is_err());
        assert!(tick_rate(1).is_ok() && tick_rate(MAX_TICK_RATE).is_ok());
        assert!(tick_rate(0).is_err() && tick_rate(MAX_TICK_RATE + 1).is_err());
        let t = Duration::from_millis(40);
        assert!(link(1200, [t; 3], 1).is_ok());
        assert!(link(255, [t; 3], 1).is_err());
        assert!(link(1200, [t, Duration::ZERO, t], 1).is_err());
        assert!(link(1200, [t; 3], 0).is_err());
    }

    /// The client once took a `max_input_len` over 1,024 and a `max_lead`
    /// over 4,096 that the mesh and the sequencer refuse: every topology
    /// now refuses the same values, with the same words.
    #[test]
    fn every_topology_refuses_the_same_bounds() {
        use crate::sequenced::{ClientConfig, ClientSession, Sequencer, SequencerConfig};
        use crate::{Instant, MeshConfig, MeshSession, PeerId, PlayerId, Roster};
        let now = Instant::ZERO;
        let roster = Roster::new().player(PeerId(0), PlayerId(0));
        let mesh = |c: MeshConfig| MeshSession::<u8>::new(c, roster.clone(), PeerId(0), now).err();
        let room = |c: SequencerConfig| Sequencer::<u8>::new(c, now).err();
        let client = |c: ClientConfig| ClientSession::<u8>::new(c, PeerId(0), now).err();
        let too_long = Some(ConfigError::Invalid(
            "max_input_len must be 1 to 1024 bytes",
        ));
        let too_far = Some(ConfigError::Invalid("max_lead must be 1 to 4096 ticks"));
        let mesh_len = MeshConfig {
            max_input_len: 1025,
            max_datagram: wire::MAX_DATAGRAM_LEN,
            ..MeshConfig::default()
        };
        assert_eq!(mesh(mesh_len), too_long);
        let room_len = SequencerConfig {
            max_input_len: 1025,
            ..SequencerConfig::default()
        };
        assert_eq!(room(room_len), too_long);
        let client_len = ClientConfig {
            max_input_len: 1025,
            max_datagram: wire::MAX_DATAGRAM_LEN,
            ..ClientConfig::default()
        };
        assert_eq!(client(client_len), too_long);
        let lead = MAX_LEAD + 1;
        assert_eq!(
            mesh(MeshConfig {
                max_lead: lead,
                ..MeshConfig::default()
            }),
            too_far
        );
        assert_eq!(
            room(SequencerConfig {
                max_lead: lead,
                ..SequencerConfig::default()
            }),
            too_far
        );
        assert_eq!(
            client(ClientConfig {
                max_lead: lead,
                ..ClientConfig::default()
            }),
            too_far
        );
    }
}
