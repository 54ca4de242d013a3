//! How a host-mode player plays, hosts and takes over ([`HostedConfig`]),
//! and why it did not act on a takeover message ([`Ignored`]).

use super::*;

/// Why a [`HostedSession`] did not act on a takeover message (or acted
/// against its sender): for the application's log. A stream of these from
/// one peer is a sign of a broken or hostile player.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Ignored {
    /// A report whose token does not prove its seat (as the roster, or the
    /// new host's own seats, have it).
    #[error("a takeover report whose token does not prove seat {0}")]
    Unproven(PlayerId),
    /// A report for the seat of the host being replaced.
    #[error("a takeover report for the departing host's own seat {0}")]
    HostSeat(PlayerId),
    /// A report while we still hear our host: answered that it lives.
    #[error("a takeover report while the host is heard (answered that it lives)")]
    HostHeard,
    /// A report for a seat from somewhere else than the roster's contact
    /// for it (or before that contact was resolved).
    #[error("a takeover report for seat {0} from elsewhere than its roster address")]
    Elsewhere(PlayerId),
    /// A seat proven from two peers: held for nobody.
    #[error("seat {0} proven from two peers: held for nobody")]
    Contested(PlayerId),
    /// A claim to hold frames that brought none: cut to what we hold.
    #[error("seat {0} claimed frames it never sent: not believed")]
    ClaimNotBelieved(PlayerId),
    /// An answer from a player we are not reporting to.
    #[error("a takeover answer from a player we did not report to")]
    NotOurCandidate,
    /// Frames from a player not asked for them, or past a gap.
    #[error("frames from a player not asked for them, or past a gap")]
    FramesRefused,
    /// A datagram from the host we left for a new one: told it was
    /// replaced, and nothing taken.
    #[error("a datagram from the host we left (told it was replaced)")]
    OldHost,
    /// Hosting: a report for a seat we do not hold (answered `late`).
    #[error("a takeover report for a seat this host does not hold (answered late)")]
    Late,
    /// Collecting: a seat's own word that it hosts (`ready`), or that the
    /// match went on without us (`late`), no other player having said it
    /// follows that seat. Not believed (any seat could say it); a real
    /// host is named by the players that follow it, and reached that way.
    #[error("seat {0} says it hosts, on its own word only: not believed")]
    HostClaimNotBelieved(PlayerId),
    /// A refusal or goodbye from a host we moved to that never welcomed
    /// us, and that no other player said it follows: it counts as silent,
    /// and is taken over.
    #[error("a refusal or goodbye from a host that never welcomed us")]
    Unwelcomed,
    /// A report while we move to a new host that has not welcomed us yet:
    /// not answered (we cannot say that host lives).
    #[error("a takeover report while moving to a host that has not welcomed us")]
    Moving,
    /// Collecting: the report of a candidate earlier in the order that
    /// collects too. Not counted (both would go on); we yield to it.
    #[error("the report of seat {0}, an earlier candidate collecting too: not counted")]
    EarlierCandidate(PlayerId),
}

/// How a [`HostedSession`] plays, hosts, and takes over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostedConfig {
    /// The room, when hosting (its roster is always shared).
    pub sequencer: SequencerConfig,
    /// This player's client (it keeps at least the sequencer's history of
    /// frames, to serve those behind it if it takes over).
    pub client: ClientConfig,
    /// Silence from the host after which the others take over.
    pub host_timeout: Duration,
    /// How long a candidate waits for every survivor before going on with
    /// more than half of them.
    pub takeover_wait: Duration,
    /// How long a candidate waits before going on with whoever reported
    /// (a lone survivor plays on; two halves of a split network both go on).
    pub takeover_alone: Duration,
}

impl Default for HostedConfig {
    fn default() -> Self {
        Self {
            sequencer: SequencerConfig::default(),
            client: ClientConfig {
                keep_frames: 512,
                ..ClientConfig::default()
            },
            host_timeout: Duration::from_millis(500),
            takeover_wait: Duration::from_millis(300),
            takeover_alone: Duration::from_secs(10),
        }
    }
}
