//! Property-test strategies the topologies share.

use lockstep_core::sim::LinkConditions;
use proptest::prelude::*;
use std::time::Duration;

/// `default` cases, or `PROPTEST_CASES` from the environment; failures are
/// reported with their seed rather than written to disk.
pub fn cases(default: u32) -> ProptestConfig {
    let n = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases: n,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

prop_compose! {
    /// Any link short of a partition: loss below 50%, latency and jitter
    /// below the given milliseconds, duplication and reordering.
    pub fn link(max_latency_ms: u64, max_jitter_ms: u64)(
        latency in 0..max_latency_ms,
        jitter in 0..max_jitter_ms,
        loss in 0.0f64..0.49,
        duplicate in 0.0f64..0.2,
        reorder in 0.0f64..0.3,
    ) -> LinkConditions {
        LinkConditions {
            latency: Duration::from_millis(latency),
            jitter: Duration::from_millis(jitter),
            loss,
            duplicate,
            reorder,
            max_datagram: Some(1200),
            bandwidth: None,
        }
    }
}
