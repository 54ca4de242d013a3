//! Counters and gauges, served as Prometheus text on `/metrics`.
//!
//! Plain atomics rendered by hand: a handful of series does not need a
//! metrics framework, and a process-global recorder would mix the figures of
//! several relays run side by side in one test process.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds (microseconds) of the seal-to-send histogram buckets.
pub const LATENCY_BUCKETS_US: [u64; 12] = [
    50, 100, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 5000, 10_000,
];

/// Everything a relay counts. Shared with the HTTP task.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Rooms open.
    pub rooms: AtomicU64,
    /// Seated players connected.
    pub players: AtomicU64,
    /// Spectators connected.
    pub spectators: AtomicU64,
    /// Ticks sealed, over all rooms.
    pub ticks: AtomicU64,
    /// Bytes received.
    pub bytes_in: AtomicU64,
    /// Bytes sent.
    pub bytes_out: AtomicU64,
    /// Datagrams received.
    pub datagrams_in: AtomicU64,
    /// Datagrams sent.
    pub datagrams_out: AtomicU64,
    /// Datagrams dropped because a socket or channel was full.
    pub dropped_out: AtomicU64,
    /// Times a room waited on a player.
    pub stalls: AtomicU64,
    /// Connections refused.
    pub rejects: AtomicU64,
    /// Clients sent to the relay of the fleet that serves their room.
    pub redirects: AtomicU64,
    /// Connections dropped for breaking a rule.
    pub violations: AtomicU64,
    /// Checksum mismatches reported by clients.
    pub desyncs: AtomicU64,
    /// Challenges sent to addresses not validated yet.
    pub challenges: AtomicU64,
    /// Sealed handshakes computed (an X25519 each), challenges included.
    pub handshakes: AtomicU64,
    /// Datagrams from strangers left unanswered (an answer-class message,
    /// not ours, too small for the answer, or over the reply rate).
    pub strangers_ignored: AtomicU64,
    /// Tickets refused.
    pub bad_tickets: AtomicU64,
    /// The main loop's latest pass, in milliseconds since the relay
    /// started (for `/healthz`).
    pub loop_at_ms: AtomicU64,
    /// How late the main loop ran its most recent due timer, microseconds.
    pub loop_lag_us: AtomicU64,
    /// WebSocket connections open.
    pub ws_connections: AtomicU64,
    /// Connections open, over every transport (refreshed every second).
    pub connections: AtomicU64,
    /// 1 while the relay drains for a shutdown (no new rooms), else 0.
    pub draining: AtomicU64,
    /// 1 while the relay is at its `max_rooms` or `max_connections`.
    pub full: AtomicU64,
    /// WebSocket connections refused by a limit or closed for breaking one.
    pub ws_refused: AtomicU64,
    /// Sealed datagrams that did not open (forged, replayed, unknown
    /// connection) and were dropped.
    pub unauthenticated: AtomicU64,
    /// Times a room's input delay changed (adaptive rooms).
    pub delay_changes: AtomicU64,
    /// The largest input delay of any room with players, in ticks.
    pub delay_max: AtomicU64,
    /// Datagrams from clients lost on the way, as clients' pongs report.
    pub lost_in: AtomicU64,
    /// Datagrams to clients lost on the way, likewise.
    pub lost_out: AtomicU64,
    /// Matches whose recording was finished.
    pub recordings: AtomicU64,
    /// Recordings stopped by a failing or slow disk.
    pub recording_failures: AtomicU64,
    /// Seal-to-last-send latency histogram: counts per bucket, then +Inf.
    latency: [AtomicU64; LATENCY_BUCKETS_US.len() + 1],
    latency_sum_us: AtomicU64,
}

impl Metrics {
    /// Records how long sending a sealed tick to a whole room took.
    pub fn observe_latency(&self, micros: u64) {
        let i = LATENCY_BUCKETS_US
            .iter()
            .position(|b| micros <= *b)
            .unwrap_or(LATENCY_BUCKETS_US.len());
        self.latency[i].fetch_add(1, Ordering::Relaxed);
        self.latency_sum_us.fetch_add(micros, Ordering::Relaxed);
    }

    /// The latency histogram's bucket counts so far (the last is +Inf); the
    /// difference of two snapshots is the histogram of the time between.
    pub fn latency_snapshot(&self) -> Vec<u64> {
        self.latency
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }

    /// The upper bound (microseconds) of the bucket holding quantile `q` of
    /// a histogram given as bucket counts; `None` if empty or past the last
    /// bucket.
    pub fn quantile_of(counts: &[u64], q: f64) -> Option<u64> {
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let want = (q * total as f64).ceil() as u64;
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return LATENCY_BUCKETS_US.get(i).copied();
            }
        }
        None
    }

    /// Latency observations so far.
    pub fn latency_count(&self) -> u64 {
        self.latency.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// The upper bound of the bucket holding quantile `q` of latencies
    /// (microseconds), or `None` with no observation or past the last bucket.
    pub fn latency_quantile(&self, q: f64) -> Option<u64> {
        Self::quantile_of(&self.latency_snapshot(), q)
    }

    /// Every plain series: its name (after `lockstep_`), kind, help and
    /// value, in the order they are rendered.
    fn series(&self) -> [(&'static str, &'static str, &'static str, &AtomicU64); 31] {
        [
            ("rooms", "gauge", "Rooms open.", &self.rooms),
            (
                "recordings_total",
                "counter",
                "Matches whose recording was finished.",
                &self.recordings,
            ),
            (
                "recording_failures_total",
                "counter",
                "Recordings stopped by a failing or slow disk.",
                &self.recording_failures,
            ),
            (
                "players",
                "gauge",
                "Seated players connected.",
                &self.players,
            ),
            (
                "spectators",
                "gauge",
                "Spectators connected.",
                &self.spectators,
            ),
            (
                "ticks_total",
                "counter",
                "Ticks sealed over all rooms.",
                &self.ticks,
            ),
            (
                "bytes_in_total",
                "counter",
                "Bytes received.",
                &self.bytes_in,
            ),
            ("bytes_out_total", "counter", "Bytes sent.", &self.bytes_out),
            (
                "datagrams_in_total",
                "counter",
                "Datagrams received.",
                &self.datagrams_in,
            ),
            (
                "datagrams_out_total",
                "counter",
                "Datagrams sent.",
                &self.datagrams_out,
            ),
            (
                "dropped_out_total",
                "counter",
                "Datagrams dropped by a full socket or channel.",
                &self.dropped_out,
            ),
            (
                "stalls_total",
                "counter",
                "Times a room waited on a player.",
                &self.stalls,
            ),
            (
                "rejects_total",
                "counter",
                "Connections refused.",
                &self.rejects,
            ),
            (
                "redirects_total",
                "counter",
                "Clients sent to the relay of the fleet that serves their room.",
                &self.redirects,
            ),
            (
                "violations_total",
                "counter",
                "Connections dropped for breaking a rule.",
                &self.violations,
            ),
            (
                "desync_reports_total",
                "counter",
                "Checksum mismatches reported.",
                &self.desyncs,
            ),
            (
                "challenges_total",
                "counter",
                "Address-validation challenges sent.",
                &self.challenges,
            ),
            (
                "handshakes_total",
                "counter",
                "Sealed handshakes computed.",
                &self.handshakes,
            ),
            (
                "strangers_ignored_total",
                "counter",
                "Datagrams from unvalidated addresses left unanswered.",
                &self.strangers_ignored,
            ),
            (
                "loop_lag_microseconds",
                "gauge",
                "How late the main loop ran its latest due timer.",
                &self.loop_lag_us,
            ),
            (
                "ws_connections",
                "gauge",
                "WebSocket connections open.",
                &self.ws_connections,
            ),
            (
                "ws_refused_total",
                "counter",
                "WebSocket connections refused or closed by a limit.",
                &self.ws_refused,
            ),
            (
                "delay_changes_total",
                "counter",
                "Times a room's input delay changed.",
                &self.delay_changes,
            ),
            (
                "input_delay_max_ticks",
                "gauge",
                "The largest input delay of any room with players.",
                &self.delay_max,
            ),
            (
                "datagrams_lost_in_total",
                "counter",
                "Datagrams from clients lost on the way (from clients' counts).",
                &self.lost_in,
            ),
            (
                "datagrams_lost_out_total",
                "counter",
                "Datagrams to clients lost on the way (from clients' counts).",
                &self.lost_out,
            ),
            (
                "unauthenticated_total",
                "counter",
                "Sealed datagrams dropped unopened.",
                &self.unauthenticated,
            ),
            (
                "bad_tickets_total",
                "counter",
                "Join tickets refused.",
                &self.bad_tickets,
            ),
            (
                "connections",
                "gauge",
                "Connections open, over every transport.",
                &self.connections,
            ),
            (
                "draining",
                "gauge",
                "1 while the relay drains for a shutdown (no new rooms).",
                &self.draining,
            ),
            (
                "full",
                "gauge",
                "1 while the relay is at its max_rooms or max_connections.",
                &self.full,
            ),
        ]
    }

    /// The Prometheus text exposition of every series.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (name, kind, help, v) in self.series() {
            let _ = writeln!(
                out,
                "# HELP lockstep_{name} {help}\n# TYPE lockstep_{name} {kind}"
            );
            let _ = writeln!(out, "lockstep_{name} {}", v.load(Ordering::Relaxed));
        }
        let _ = writeln!(
            out,
            "# HELP lockstep_seal_to_send_seconds Time from sealing a tick to its last send.\n\
             # TYPE lockstep_seal_to_send_seconds histogram"
        );
        let mut cumulative = 0;
        for (i, b) in LATENCY_BUCKETS_US.iter().enumerate() {
            cumulative += self.latency[i].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "lockstep_seal_to_send_seconds_bucket{{le=\"{}\"}} {cumulative}",
                *b as f64 / 1e6
            );
        }
        cumulative += self.latency[LATENCY_BUCKETS_US.len()].load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "lockstep_seal_to_send_seconds_bucket{{le=\"+Inf\"}} {cumulative}"
        );
        let _ = writeln!(
            out,
            "lockstep_seal_to_send_seconds_sum {}",
            self.latency_sum_us.load(Ordering::Relaxed) as f64 / 1e6
        );
        let _ = writeln!(out, "lockstep_seal_to_send_seconds_count {cumulative}");
        out
    }
}
