//! The relay loop's timer, finer than the runtime's.
//!
//! Tokio's timer wakes at whole milliseconds, rounded up, and the poll it
//! rides on adds its own rounding: a `Deadline` tick woke the loop up to
//! two milliseconds after it was due, and reached every player that much
//! later (`lockstep bench relay`, 64 players: a p50 of 594 us and a p99 of
//! 1295 us end to end, against 73 and 511 us on this timer). A thread of
//! the timer's own sleeps to the deadline
//! with the operating system's timer (tens of microseconds late) and
//! wakes the loop.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Instant;
use tokio::sync::Notify;

#[derive(Debug, Default)]
struct Shared {
    /// When to wake the loop next, if ever.
    deadline: Mutex<Option<Instant>>,
    fired: Notify,
    stop: AtomicBool,
    /// Times the thread was woken for a new deadline.
    unparked: AtomicU64,
}

/// A deadline the loop sets each pass and awaits with everything else.
#[derive(Debug)]
pub(super) struct Timer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Timer {
    /// A timer and its thread; `None` if the thread could not start (the
    /// loop then falls back on the runtime's timer).
    pub(super) fn start() -> Option<Self> {
        let shared = Arc::new(Shared::default());
        let theirs = shared.clone();
        let thread = std::thread::Builder::new()
            .name("lockstep-relay-timer".into())
            .spawn(move || run(&theirs))
            .ok()?;
        Some(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Wakes the loop at `at` (replacing the deadline set before). The
    /// thread is woken only for an earlier deadline: a later one it finds
    /// when its sleep ends (an idle loop sets a new one at every pass).
    pub(super) fn set(&self, at: Instant) {
        let mut d = self
            .shared
            .deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let earlier = d.is_none_or(|was| at < was);
        *d = Some(at);
        drop(d);
        if earlier && let Some(t) = &self.thread {
            self.shared.unparked.fetch_add(1, Ordering::Relaxed);
            t.thread().unpark();
        }
    }

    /// Resolves once the deadline has passed (or at once, if it passed
    /// since the last wait).
    pub(super) async fn wait(&self) {
        self.shared.fired.notified().await;
    }
}

fn run(shared: &Shared) {
    while !shared.stop.load(Ordering::Relaxed) {
        let deadline = *shared
            .deadline
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match deadline {
            None => std::thread::park(),
            Some(at) => {
                let now = Instant::now();
                if now < at {
                    std::thread::park_timeout(at - now);
                    continue;
                }
                let mut d = shared
                    .deadline
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if *d == Some(at) {
                    *d = None;
                }
                drop(d);
                shared.fired.notify_one();
            }
        }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The loop is woken once its deadline has passed, never before, and
    /// an earlier deadline replaces a later one.
    #[test]
    fn wakes_the_loop_at_its_deadline() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let timer = Timer::start().expect("a thread");
        rt.block_on(async {
            for k in 0..20u64 {
                let at = Instant::now() + Duration::from_micros(300 + k * 37);
                timer.set(at);
                timer.wait().await;
                assert!(Instant::now() >= at, "never early");
            }
            // A later deadline replaced by an earlier one: the earlier wakes.
            let far = Instant::now() + Duration::from_secs(60);
            timer.set(far);
            let near = Instant::now() + Duration::from_millis(1);
            timer.set(near);
            let limit = tokio::time::timeout(Duration::from_secs(5), timer.wait()).await;
            assert!(limit.is_ok(), "the earlier deadline woke the loop");
        });
    }

    /// An idle loop sets a later deadline at every pass (a stranger's
    /// datagram, say): the thread is not woken for those.
    #[test]
    fn a_later_deadline_wakes_nothing() {
        let timer = Timer::start().expect("a thread");
        let now = Instant::now();
        timer.set(now + Duration::from_secs(60));
        let before = timer.shared.unparked.load(Ordering::Relaxed);
        for k in 1..=1000u64 {
            timer.set(now + Duration::from_secs(60) + Duration::from_micros(k));
        }
        assert_eq!(timer.shared.unparked.load(Ordering::Relaxed), before);
        timer.set(now + Duration::from_secs(1));
        assert_eq!(timer.shared.unparked.load(Ordering::Relaxed), before + 1);
    }
}
