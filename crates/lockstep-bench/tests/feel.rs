//! How the adaptive delay behaves at the start of a lossy match, on the
//! seeded simulated network (virtual time: no test here depends on the
//! machine's speed).

use lockstep_bench::feel::{self, Delay, Network, Setup};
use std::time::Duration;

/// A frame that loses every copy before the link's loss is measured waits
/// for a resend timer that assumes a long round trip; the first frames are
/// the ones the adaptive delay sets itself from, and it comes down slowly
/// (a tick at a time, each after a window of frames with time to spare).
/// At 10% loss each way, 120 ms away (a round trip and a loss or two call
/// for 7 to 10 ticks), the start of a match takes the delay past 12 ticks
/// in at most 4 seeds of 64 (in seed 30, looked at, a player whose
/// handshake was lost joined half a second late and the room waited for
/// its first input). With two copies of a frame until the loss was
/// measured, 12 of 64 went there, 6 to the ceiling of 16.
#[test]
fn a_lossy_start_does_not_send_the_delay_up() {
    let network = Network {
        rtt: Duration::from_millis(120),
        jitter: Duration::from_millis(10),
        loss: 0.1,
    };
    let mut high = Vec::new();
    for seed in 1..=64u64 {
        let f = feel::run(&Setup {
            players: 4,
            tick_rate: 30,
            network,
            script: Vec::new(),
            delay: Delay::Adaptive(3),
            seconds: 5,
            warmup: 5,
            seed,
            runner: false,
        });
        assert!(f.streams_equal, "seed {seed}: streams differ");
        let highest = f.changes.iter().map(|(_, d)| *d).max().unwrap_or(3);
        if highest > 12 {
            high.push((seed, highest));
        }
    }
    assert!(high.len() <= 4, "(seed, delay) past 12 ticks: {high:?}");
}
