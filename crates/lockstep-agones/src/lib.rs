//! A lockstep relay as an [Agones](https://agones.dev) game server.
//!
//! Agones runs game servers on Kubernetes, one process per `GameServer`,
//! and talks to each through a local SDK server (a sidecar). A relay under
//! Agones tells it:
//!
//! - **Ready** once it is listening, so Agones may allocate it;
//! - **Health** while its loop runs (a ping every `health_every`, and none
//!   once the loop has not passed for that long: a hung relay is restarted
//!   by Agones);
//! - its **rooms** and **players** as the `GameServer`'s Counters (declare
//!   counters named `rooms` and `players` in its spec; without them the
//!   relay logs it once and goes on);
//! - a **label** `lockstep-draining: "true"` once it drains for a restart,
//!   so an allocation's selector can leave it out;
//! - **Shutdown** once the relay has stopped (after its drain), so Agones
//!   removes the `GameServer` rather than restart the process.
//!
//! ```no_run
//! # async fn example(listeners: lockstep_relay::Listeners) -> Result<(), Box<dyn std::error::Error>> {
//! use lockstep_agones::{AgonesConfig, GameServer};
//! use std::sync::Arc;
//!
//! let metrics = Arc::new(lockstep_relay::Metrics::default());
//! // After binding the relay's sockets: listening, so Ready.
//! let server = GameServer::connect(AgonesConfig::default()).await?;
//! let relay = lockstep_relay::run_with_metrics(
//!     lockstep_relay::RelayConfig::default(),
//!     listeners,
//!     metrics.clone(),
//!     async { let _ = tokio::signal::ctrl_c().await; },
//! );
//! let report = server.serve(metrics, relay).await??;
//! # let _ = report; Ok(()) }
//! ```

#![forbid(unsafe_code)]

use lockstep_relay::Metrics;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tracing::{info, warn};

/// How a relay reaches its SDK server and how often it reports.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AgonesConfig {
    /// The SDK server's gRPC port on localhost; `None`: the
    /// `AGONES_SDK_GRPC_PORT` Agones sets, else 9357.
    pub port: Option<u16>,
    /// How often health is reported and the counters refreshed; the loop
    /// must have passed within it for a health ping to go. Keep it under
    /// the `GameServer`'s `health.periodSeconds` (5 s by default).
    pub health_every: Duration,
}

impl Default for AgonesConfig {
    fn default() -> Self {
        Self {
            port: None,
            health_every: Duration::from_secs(2),
        }
    }
}

/// Why the relay could not be an Agones game server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgonesError {
    /// No SDK server answered (Agones sets one up beside every game server;
    /// outside a cluster, run Agones' local SDK server, `sdk-server --local`).
    #[error("no Agones SDK server: {0}")]
    Connect(String),
    /// The SDK server refused a call the relay cannot do without.
    #[error("the Agones SDK refused {call}: {why}")]
    Call {
        /// Which call.
        call: &'static str,
        /// What it said.
        why: String,
    },
}

/// A relay's link to its Agones SDK server.
#[derive(Clone)]
pub struct GameServer {
    sdk: agones::Sdk,
    config: AgonesConfig,
}

impl std::fmt::Debug for GameServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GameServer")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The label a draining relay sets on its `GameServer`.
pub const DRAINING_LABEL: &str = "lockstep-draining";
/// The Counters a relay keeps.
pub const ROOMS_COUNTER: &str = "rooms";
/// See [`ROOMS_COUNTER`].
pub const PLAYERS_COUNTER: &str = "players";

impl GameServer {
    /// Connects to the SDK server (waiting up to 30 s for it, as the SDK
    /// does: a sidecar may start after the game server).
    pub async fn connect(config: AgonesConfig) -> Result<Self, AgonesError> {
        let sdk = agones::Sdk::new(config.port, None).await.map_err(|e| {
            // Where the SDK looked, as it decides.
            let port = config
                .port
                .or_else(|| std::env::var("AGONES_SDK_GRPC_PORT").ok()?.parse().ok())
                .unwrap_or(9357);
            AgonesError::Connect(format!(
                "none answered on localhost:{port} within 30 s ({e})"
            ))
        })?;
        Ok(Self { sdk, config })
    }

    /// Marks the game server Ready (call it once the relay listens), then
    /// runs `relay` (the relay's own future: [`lockstep_relay::run`] or
    /// [`lockstep_relay::run_in_fleet`] counting into `metrics`), reporting
    /// health, counters and draining meanwhile, and tells Agones to shut
    /// the game server down once `relay` has finished. Returns what `relay`
    /// did; an error only if Ready or Shutdown was refused (the relay would
    /// never be allocated, or would be restarted when it meant to go).
    pub async fn serve<R>(
        mut self,
        metrics: Arc<Metrics>,
        relay: impl Future<Output = R>,
    ) -> Result<R, AgonesError> {
        self.sdk.ready().await.map_err(|e| AgonesError::Call {
            call: "Ready",
            why: e.to_string(),
        })?;
        info!("Agones: ready");
        let health = self.sdk.health_check();
        let mut report = Reporter::default();
        let mut every = tokio::time::interval(self.config.health_every);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(relay);
        let out = loop {
            tokio::select! {
                out = &mut relay => break out,
                _ = every.tick() => {
                    let alive = report.loop_passed(&metrics);
                    if alive {
                        // A full channel is the SDK's task behind: skip a beat.
                        let _ = health.try_send(());
                    } else {
                        warn!("Agones: the relay's loop has not passed: no health ping");
                    }
                    report.counters(&mut self.sdk, &metrics).await;
                    report.draining(&mut self.sdk, &metrics).await;
                }
            }
        };
        drop(health);
        self.sdk.shutdown().await.map_err(|e| AgonesError::Call {
            call: "Shutdown",
            why: e.to_string(),
        })?;
        info!("Agones: shutdown");
        Ok(out)
    }
}

/// What was last told to Agones.
#[derive(Debug, Default)]
struct Reporter {
    /// The loop's latest pass seen.
    loop_at: Option<u64>,
    rooms: Option<i64>,
    players: Option<i64>,
    /// Counters refused (not declared in the spec): not tried again.
    no_counters: bool,
    draining: bool,
}

impl Reporter {
    /// Whether the relay's loop passed since the last look.
    fn loop_passed(&mut self, metrics: &Metrics) -> bool {
        let at = metrics.loop_at_ms.load(Ordering::Relaxed);
        let passed = self.loop_at != Some(at);
        self.loop_at = Some(at);
        passed
    }

    async fn counters(&mut self, sdk: &mut agones::Sdk, metrics: &Metrics) {
        if self.no_counters {
            return;
        }
        let count = |v: &std::sync::atomic::AtomicU64| {
            i64::try_from(v.load(Ordering::Relaxed)).unwrap_or(i64::MAX)
        };
        for (name, now, told) in [
            (ROOMS_COUNTER, count(&metrics.rooms), &mut self.rooms),
            (PLAYERS_COUNTER, count(&metrics.players), &mut self.players),
        ] {
            if *told == Some(now) {
                continue;
            }
            match sdk.beta().clone().set_counter_count(name, now).await {
                Ok(()) => *told = Some(now),
                Err(e) => {
                    warn!(
                        "Agones: counter {name:?} refused ({e}): declare counters {ROOMS_COUNTER:?} \
                         and {PLAYERS_COUNTER:?} in the GameServer spec; not reporting them"
                    );
                    self.no_counters = true;
                    return;
                }
            }
        }
    }

    async fn draining(&mut self, sdk: &mut agones::Sdk, metrics: &Metrics) {
        if self.draining || metrics.draining.load(Ordering::Relaxed) == 0 {
            return;
        }
        match sdk.set_label(DRAINING_LABEL, "true").await {
            Ok(()) => {
                info!("Agones: labelled {DRAINING_LABEL}");
                self.draining = true;
            }
            Err(e) => warn!("Agones: could not label the game server draining: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Health follows the loop: a loop that has not passed since the last
    /// look (hung) sends no ping.
    #[test]
    fn health_needs_the_loop_to_have_passed() {
        let metrics = Metrics::default();
        let mut r = Reporter::default();
        assert!(r.loop_passed(&metrics), "the first look");
        assert!(!r.loop_passed(&metrics), "hung");
        metrics.loop_at_ms.store(250, Ordering::Relaxed);
        assert!(r.loop_passed(&metrics), "passed again");
    }
}
