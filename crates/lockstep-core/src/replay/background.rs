//! Writing a recording on a thread of its own.

use std::io::Write;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex};

/// A writer that hands its bytes to a thread of its own, so that a game
/// loop recording a match never waits on the disk: a [`Recorder`]
/// (or [`Runner::record`](crate::runner::Runner::record)) writes a chunk
/// into it at once, and the thread writes it out. At most `max_queued`
/// bytes wait (or one write larger than that, alone): a disk that falls that far behind, or fails, makes the
/// next write fail (the recording stops, the game plays on), never
/// block. [`flush`](Write::flush) waits for what is queued to be written.
///
/// [`Recorder`]: super::Recorder
///
/// ```
/// use lockstep_core::replay::{Background, Header, Recorder, Topology};
/// use lockstep_core::{Frame, Tick};
/// let file = std::env::temp_dir().join(format!("doc-{}.lkrp", std::process::id()));
/// let out = Background::new(std::fs::File::create(&file)?, 8 << 20)?;
/// let mut rec = Recorder::<u8, _>::new(Header::new(1, "doc", 30, 1, Topology::Other), out)?;
/// rec.record(&Frame { tick: Tick::new(0), inputs: vec![Some(1)], events: vec![] })?;
/// rec.finish()?; // flushed: every byte is in the file
/// assert!(std::fs::metadata(&file)?.len() > 40);
/// # std::fs::remove_file(&file)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Background {
    tx: Option<Sender<Job>>,
    shared: Arc<(Mutex<Queue>, Condvar)>,
    max_queued: usize,
    thread: Option<std::thread::JoinHandle<()>>,
}

enum Job {
    Data(Vec<u8>),
    Flush,
}

#[derive(Default)]
struct Queue {
    /// Bytes handed over and not written yet.
    queued: usize,
    /// Flushes done.
    flushed: u64,
    /// Why writing failed, once it has.
    error: Option<(std::io::ErrorKind, String)>,
}

impl core::fmt::Debug for Background {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Background")
            .field("max_queued", &self.max_queued)
            .finish_non_exhaustive()
    }
}

impl Background {
    /// Writes into `inner` on a new thread, with at most `max_queued`
    /// bytes waiting.
    pub fn new<W: Write + Send + 'static>(inner: W, max_queued: usize) -> std::io::Result<Self> {
        let (tx, rx) = channel();
        let shared = Arc::new((Mutex::new(Queue::default()), Condvar::new()));
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("lockstep-replay".into())
            .spawn(move || drain(inner, &rx, &s))?;
        Ok(Self {
            tx: Some(tx),
            shared,
            max_queued,
            thread: Some(thread),
        })
    }

    fn failed(q: &Queue) -> Option<std::io::Error> {
        q.error
            .as_ref()
            .map(|(kind, text)| std::io::Error::new(*kind, text.clone()))
    }

    fn queue(&self) -> std::io::Result<std::sync::MutexGuard<'_, Queue>> {
        self.shared
            .0
            .lock()
            .map_err(|_| std::io::Error::other("the writing thread panicked"))
    }
}

/// The thread: writes what it is handed, in order, until the writer goes.
fn drain<W: Write>(mut inner: W, rx: &Receiver<Job>, shared: &(Mutex<Queue>, Condvar)) {
    let (lock, done) = shared;
    while let Ok(job) = rx.recv() {
        let (len, result) = match job {
            Job::Data(bytes) => (bytes.len(), inner.write_all(&bytes)),
            Job::Flush => (0, inner.flush()),
        };
        let Ok(mut q) = lock.lock() else {
            return;
        };
        q.queued = q.queued.saturating_sub(len);
        if len == 0 {
            q.flushed += 1;
        }
        if let Err(e) = result {
            q.error.get_or_insert((e.kind(), e.to_string()));
        }
        done.notify_all();
    }
}

impl Write for Background {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        {
            let mut q = self.queue()?;
            if let Some(e) = Self::failed(&q) {
                return Err(e);
            }
            // One write larger than the bound goes when nothing waits.
            if q.queued > 0 && q.queued + buf.len() > self.max_queued {
                return Err(std::io::Error::other(format!(
                    "the disk is not keeping up: {} bytes already wait to be written",
                    q.queued
                )));
            }
            q.queued += buf.len();
        }
        self.tx
            .as_ref()
            .and_then(|tx| tx.send(Job::Data(buf.to_vec())).ok())
            .ok_or_else(|| std::io::Error::other("the writing thread stopped"))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let before = self.queue()?.flushed;
        self.tx
            .as_ref()
            .and_then(|tx| tx.send(Job::Flush).ok())
            .ok_or_else(|| std::io::Error::other("the writing thread stopped"))?;
        let (_, done) = &*self.shared;
        let mut q = self.queue()?;
        while q.flushed == before && q.error.is_none() {
            q = done
                .wait(q)
                .map_err(|_| std::io::Error::other("the writing thread panicked"))?;
        }
        Self::failed(&q).map_or(Ok(()), Err)
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        // The thread writes what is left, then ends.
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A disk that takes `until` bytes, then is full.
    struct Disk {
        bytes: Arc<Mutex<Vec<u8>>>,
        until: usize,
        gate: Arc<Mutex<()>>,
    }

    impl Write for Disk {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let _held = self.gate.lock().expect("not poisoned");
            let mut bytes = self.bytes.lock().expect("not poisoned");
            if bytes.len() + b.len() > self.until {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::StorageFull,
                    "no space left",
                ));
            }
            bytes.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Bytes arrive in order; a stalled disk makes writes past the queue's
    /// bound fail at once instead of blocking; a full disk fails the next
    /// write and the flush, by its kind.
    #[test]
    fn writes_go_in_order_never_block_and_fail_loudly() {
        let bytes = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(Mutex::new(()));
        let disk = Disk {
            bytes: bytes.clone(),
            until: 1_000,
            gate: gate.clone(),
        };
        let mut w = Background::new(disk, 300).expect("a thread");
        w.write_all(&[1; 100]).expect("queued");
        w.flush().expect("written");
        assert_eq!(bytes.lock().expect("not poisoned").len(), 100);
        // The disk stalls: 300 bytes queue, the next write fails at once.
        let stalled = gate.lock().expect("not poisoned");
        w.write_all(&[2; 150]).expect("queued");
        w.write_all(&[3; 150]).expect("queued");
        let e = w.write_all(&[4; 10]).expect_err("the queue is full");
        assert!(e.to_string().contains("not keeping up"), "{e}");
        drop(stalled);
        w.flush().expect("written");
        let written = bytes.lock().expect("not poisoned").clone();
        assert_eq!(written.len(), 400);
        assert!(written[100..250].iter().all(|b| *b == 2));
        // The disk fills.
        w.write_all(&[5; 700]).expect("queued");
        let e = w.flush().expect_err("full");
        assert_eq!(e.kind(), std::io::ErrorKind::StorageFull);
        assert!(w.write_all(&[6]).is_err());
    }
}
