//! Running ticks on a steady clock, so that jitter in when frames arrive
//! becomes smooth motion instead of stop-and-go.

use crate::Instant;
use crate::error::ConfigError;
use core::time::Duration;

/// How a [`Pacer`] paces.
#[derive(Debug, Clone, PartialEq)]
pub struct PacerConfig {
    /// Frames kept ready ahead of the one shown, to absorb jitter: the
    /// pacer runs slightly faster while more are ready, slightly slower
    /// while fewer are. Each one costs a tick of latency. 1 by default,
    /// which is what the sessions' `ready_to_pace` counts towards in a
    /// match whose players' clocks set the pace together (more would
    /// never be reached, and the pacer would run slow); a `Deadline` room
    /// on a jittery link may want 2.
    pub target: u32,
    /// The most the pace moves from the tick rate either way to keep
    /// `target` frames ready (0.1: 10%).
    pub max_adjust: f64,
    /// Frames ready beyond `target` by this many or more (after a stall,
    /// say): the pacer catches up at `max_per_call` ticks per call instead
    /// of 10% faster.
    pub catch_up_beyond: u32,
    /// The most ticks one call hands out, so that catching up is spread
    /// over render frames (see also [`CatchUp`](crate::CatchUp), which
    /// bounds it by the time ticks take).
    pub max_per_call: u32,
}

impl Default for PacerConfig {
    fn default() -> Self {
        Self {
            target: 1,
            max_adjust: 0.1,
            catch_up_beyond: 8,
            max_per_call: 4,
        }
    }
}

/// Tells a game loop how many ticks to run now: at the tick rate on
/// average, up to `max_adjust` faster or slower to keep a few frames ready
/// (so late frames do not freeze the picture), bounded per call when
/// catching up. The game calls [`ticks_due`](Self::ticks_due) every render
/// frame with the number of frames it could run.
///
/// ```
/// use lockstep_core::{Instant, Pacer, PacerConfig};
/// use std::time::Duration;
///
/// let mut pacer = Pacer::new(30, PacerConfig::default()).unwrap();
/// let mut now = Instant::ZERO;
/// // The first call starts the clock.
/// let mut ran = pacer.ticks_due(now, 1);
/// // Rendering at 60 Hz for a second, a frame always ready.
/// for _ in 0..60 {
///     now += Duration::from_micros(16_667);
///     ran += pacer.ticks_due(now, 1);
/// }
/// assert_eq!(ran, 30);
/// ```
#[derive(Debug, Clone)]
pub struct Pacer {
    period: Duration,
    config: PacerConfig,
    last: Option<Instant>,
    /// Time owed to the game in ticks not yet run (scaled by the pace).
    owed: Duration,
    speed: f64,
}

impl Pacer {
    /// A pacer for `tick_rate` ticks per second.
    pub fn new(tick_rate: u32, config: PacerConfig) -> Result<Self, ConfigError> {
        let bad = ConfigError::unless;
        crate::rules::limits::tick_rate(tick_rate)?;
        bad(
            !(0.0..=0.5).contains(&config.max_adjust),
            "max_adjust must be 0 to 0.5",
        )?;
        bad(config.max_per_call == 0, "max_per_call must be positive")?;
        bad(
            config.catch_up_beyond == 0,
            "catch_up_beyond must be positive",
        )?;
        Ok(Self {
            period: Duration::from_secs(1) / tick_rate,
            config,
            last: None,
            owed: Duration::ZERO,
            speed: 1.0,
        })
    }

    /// How many ticks to run now, `ready` frames being ready to run: never
    /// more than `ready`, nor than `max_per_call`.
    pub fn ticks_due(&mut self, now: Instant, ready: usize) -> u32 {
        let c = &self.config;
        let elapsed = self.last.map_or(Duration::ZERO, |t| now - t);
        self.last = Some(self.last.map_or(now, |t| t.max(now)));
        let ready = u32::try_from(ready).unwrap_or(u32::MAX);
        let target = c.target;
        // Far behind: catch up, spread over calls.
        if ready >= target.saturating_add(c.catch_up_beyond) {
            self.speed = f64::from(c.max_per_call);
            self.owed = Duration::ZERO;
            return c.max_per_call.min(ready);
        }
        // Slightly faster with more ready than the target, slower with
        // fewer; in proportion, up to `max_adjust`.
        let error = (f64::from(ready) - f64::from(target)) / f64::from(target.max(1));
        self.speed = 1.0 + c.max_adjust * error.clamp(-1.0, 1.0);
        self.owed += elapsed.mul_f64(self.speed);
        // A hitch in the render loop does not turn into a burst.
        self.owed = self.owed.min(self.period * c.max_per_call);
        let due =
            u32::try_from(self.owed.as_nanos() / self.period.as_nanos().max(1)).unwrap_or(u32::MAX);
        let n = due.min(ready).min(c.max_per_call);
        self.owed = self.owed.saturating_sub(self.period * n);
        if ready == 0 {
            // Nothing to run: a stall shows as one, and is not made up in a
            // burst afterwards (the frames that pile up meanwhile are).
            self.owed = self.owed.min(self.period);
        }
        n
    }

    /// Gives back `ticks` that the last [`ticks_due`](Self::ticks_due)
    /// handed out and that could not run (their frames had not come): their
    /// time is owed again, up to one tick's worth, so the next frame runs as
    /// soon as it comes and a stall is not made up in a burst. For a loop
    /// that tells the pacer a frame is in hand before it has come (see
    /// `ClientSession::paced_together`).
    ///
    /// ```
    /// use lockstep_core::{Instant, Pacer, PacerConfig};
    /// let mut pacer = Pacer::new(30, PacerConfig::default())?;
    /// pacer.ticks_due(Instant::ZERO, 1);
    /// assert_eq!(pacer.ticks_due(Instant::from_millis(34), 1), 1); // its frame is not here
    /// pacer.give_back(1);
    /// assert_eq!(pacer.ticks_due(Instant::from_millis(40), 1), 1); // it came: it runs now
    /// # Ok::<(), lockstep_core::ConfigError>(())
    /// ```
    pub fn give_back(&mut self, ticks: u32) {
        self.owed = (self.owed + self.period * ticks).min(self.period.max(self.owed));
    }

    /// The pace of the last call, as a multiple of the tick rate (above
    /// `1 + max_adjust`: catching up).
    pub fn speed(&self) -> f64 {
        self.speed
    }

    /// How it paces.
    pub fn config(&self) -> &PacerConfig {
        &self.config
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::SimRng;

    const RENDER: Duration = Duration::from_micros(16_667);

    /// Frames arrive when `arrivals` says (times from 0); the game renders
    /// at 60 Hz for `secs` and runs what the pacer says. Returns the render
    /// times of every tick run.
    fn play(pacer: &mut Pacer, arrivals: &[Duration], secs: u64) -> Vec<Duration> {
        let mut run = Vec::new();
        let mut arrived = 0;
        let mut ran = 0;
        let mut t = Duration::ZERO;
        while t < Duration::from_secs(secs) {
            t += RENDER;
            while arrived < arrivals.len() && arrivals[arrived] <= t {
                arrived += 1;
            }
            let n = pacer.ticks_due(Instant::from_duration(t), arrived - ran);
            assert!(n as usize <= arrived - ran, "ran a frame not there");
            for _ in 0..n {
                run.push(t);
            }
            ran += n as usize;
        }
        run
    }

    /// The longest gap between two ticks run, after the first second.
    fn longest_gap(run: &[Duration]) -> Duration {
        run.windows(2)
            .filter(|w| w[0] > Duration::from_secs(1))
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or_default()
    }

    #[test]
    fn frames_at_the_tick_rate_run_at_the_tick_rate() {
        let period = Duration::from_secs(1) / 30;
        let arrivals: Vec<Duration> = (0..900).map(|k| period * k).collect();
        let run = play(
            &mut Pacer::new(30, PacerConfig::default()).unwrap(),
            &arrivals,
            30,
        );
        assert!((880..=900).contains(&run.len()), "{}", run.len());
        assert!(longest_gap(&run) <= RENDER * 3, "{:?}", longest_gap(&run));
    }

    #[test]
    fn jittery_arrivals_run_smoothly_where_running_on_arrival_stutters() {
        // Frames come 0 to 80 ms late at random (30 Hz: up to 2.4 ticks).
        let period = Duration::from_secs(1) / 30;
        let mut rng = SimRng::new(5);
        let mut arrivals: Vec<Duration> = (0..1800)
            .map(|k| period * k + rng.duration_up_to(Duration::from_millis(80)))
            .collect();
        arrivals.sort();
        let config = PacerConfig {
            target: 3,
            ..PacerConfig::default()
        };
        let paced = play(&mut Pacer::new(30, config).unwrap(), &arrivals, 60);
        // Running every frame as it arrives.
        let mut eager = Vec::new();
        let mut k = 0;
        let mut t = Duration::ZERO;
        while t < Duration::from_secs(60) {
            t += RENDER;
            while k < arrivals.len() && arrivals[k] <= t {
                eager.push(t);
                k += 1;
            }
        }
        let (p, e) = (longest_gap(&paced), longest_gap(&eager));
        assert!(p <= period * 2, "paced: a gap of {p:?}");
        assert!(e > p, "eager {e:?}, paced {p:?}");
    }

    #[test]
    fn a_long_stall_is_caught_up_a_few_ticks_per_call() {
        // Nothing for 2 s, then 60 frames at once, then the tick rate.
        let period = Duration::from_secs(1) / 30;
        let arrivals: Vec<Duration> = (0..600)
            .map(|k| (period * k).max(Duration::from_secs(3)))
            .collect();
        let mut pacer = Pacer::new(30, PacerConfig::default()).unwrap();
        let run = play(&mut pacer, &arrivals, 25);
        let per_call = run.windows(5).filter(|w| w[0] == w[4]).count();
        assert_eq!(per_call, 0, "more than 4 ticks in one call");
        // Caught up within 2 s of the frames arriving: from then on the
        // buffer is near its target.
        let caught_up = run
            .iter()
            .enumerate()
            .find(|(k, t)| {
                **t > Duration::from_secs(3) && arrivals.partition_point(|a| a <= *t) - (k + 1) <= 4
            })
            .map(|(_, t)| *t)
            .unwrap();
        assert!(caught_up <= Duration::from_secs(5), "{caught_up:?}");
    }

    #[test]
    fn the_pace_moves_at_most_max_adjust() {
        // Always far more ready than the target, but never enough to catch
        // up: 10% faster, not more.
        let mut pacer = Pacer::new(30, PacerConfig::default()).unwrap();
        let mut ran = 0;
        let mut t = Instant::ZERO;
        for _ in 0..600 {
            t += RENDER;
            ran += pacer.ticks_due(t, 8);
        }
        // 10 s at 30 Hz is 300 ticks; at most 10% more.
        assert!((325..=331).contains(&ran), "{ran}");
        assert!((pacer.speed() - 1.1).abs() < 1e-9);
    }

    #[test]
    fn bad_settings_are_refused() {
        assert!(Pacer::new(0, PacerConfig::default()).is_err());
        let c = PacerConfig {
            max_adjust: 0.9,
            ..PacerConfig::default()
        };
        assert!(Pacer::new(30, c).is_err());
        let c = PacerConfig {
            max_per_call: 0,
            ..PacerConfig::default()
        };
        assert!(Pacer::new(30, c).is_err());
    }
}
