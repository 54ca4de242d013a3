//! In-process endpoints.

use crate::{Transport, TransportError};
use lockstep_core::PeerId;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

/// Most datagrams waiting for one endpoint; beyond it new ones are dropped.
const QUEUE_CAP: usize = 4096;

type Queues = HashMap<PeerId, VecDeque<(PeerId, Vec<u8>)>>;

/// A set of in-process endpoints that deliver to each other at once, in
/// order, without loss (wrap them in a [`FaultyTransport`](crate::FaultyTransport)
/// for worse). Usable across threads.
///
/// ```
/// use lockstep_core::PeerId;
/// use lockstep_net::{MemoryNetwork, Transport};
/// let net = MemoryNetwork::new();
/// let (mut a, mut b) = (net.endpoint(PeerId(1)), net.endpoint(PeerId(2)));
/// a.send(PeerId(2), b"hi")?;
/// let mut buf = [0; 16];
/// assert_eq!(b.recv(&mut buf)?, Some((PeerId(1), 2)));
/// assert_eq!(b.recv(&mut buf)?, None);
/// # Ok::<(), lockstep_net::TransportError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryNetwork {
    queues: Arc<Mutex<Queues>>,
}

impl MemoryNetwork {
    /// An empty network.
    pub fn new() -> Self {
        Self::default()
    }

    /// The endpoint named `id`.
    pub fn endpoint(&self, id: PeerId) -> MemoryTransport {
        self.queues
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(id)
            .or_default();
        MemoryTransport {
            id,
            queues: self.queues.clone(),
        }
    }
}

/// One endpoint of a [`MemoryNetwork`].
#[derive(Debug, Clone)]
pub struct MemoryTransport {
    id: PeerId,
    queues: Arc<Mutex<Queues>>,
}

impl MemoryTransport {
    /// This endpoint's id.
    pub fn id(&self) -> PeerId {
        self.id
    }
}

impl Transport for MemoryTransport {
    fn send(&mut self, to: PeerId, datagram: &[u8]) -> Result<(), TransportError> {
        let mut q = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        let queue = q.get_mut(&to).ok_or(TransportError::UnknownPeer(to))?;
        if queue.len() < QUEUE_CAP {
            queue.push_back((self.id, datagram.to_vec()));
        }
        Ok(())
    }

    fn recv(&mut self, buf: &mut [u8]) -> Result<Option<(PeerId, usize)>, TransportError> {
        let mut q = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        let Some((from, bytes)) = q.get_mut(&self.id).and_then(VecDeque::pop_front) else {
            return Ok(None);
        };
        let len = bytes.len().min(buf.len());
        buf[..len].copy_from_slice(&bytes[..len]);
        Ok(Some((from, len)))
    }
}
