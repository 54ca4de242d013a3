//! A relay on a thread of its own, for programs that are not async.

use crate::{Listeners, Metrics, RelayConfig, RelayError, RelayReport, SOCKET_BUFFER, bind_udp};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Where a [`BackgroundRelay`] listens: each `Some` is bound (port 0 picks
/// one), each `None` is off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bind {
    /// UDP clients.
    pub udp: Option<SocketAddr>,
    /// WebSocket clients.
    pub ws: Option<SocketAddr>,
    /// Metrics and health over HTTP.
    pub http: Option<SocketAddr>,
}

impl Bind {
    /// Every listener on 127.0.0.1, on ports the OS picks.
    pub fn loopback() -> Self {
        let any: SocketAddr = ([127, 0, 0, 1], 0).into();
        Self {
            udp: Some(any),
            ws: Some(any),
            http: Some(any),
        }
    }
}

/// A relay running on its own thread with its own Tokio runtime: a game's
/// listen server, a local match, a test. It stops when [`stop`]ped or
/// dropped, telling every client goodbye.
///
/// ```no_run
/// use lockstep_relay::{BackgroundRelay, Bind, RelayConfig};
/// let relay = BackgroundRelay::start(RelayConfig::default(), Bind::loopback())?;
/// println!("clients connect to udp://{:?}", relay.udp);
/// let report = relay.stop()?;
/// println!("{} ticks", report.ticks);
/// # Ok::<(), lockstep_relay::RelayError>(())
/// ```
///
/// [`stop`]: BackgroundRelay::stop
#[derive(Debug)]
pub struct BackgroundRelay {
    /// The UDP address bound, if any.
    pub udp: Option<SocketAddr>,
    /// The WebSocket address bound, if any.
    pub ws: Option<SocketAddr>,
    /// The HTTP address bound, if any.
    pub http: Option<SocketAddr>,
    metrics: Arc<Metrics>,
    /// Says whether to tell every client goodbye.
    stop: Option<tokio::sync::oneshot::Sender<bool>>,
    thread: Option<std::thread::JoinHandle<Result<RelayReport, RelayError>>>,
}

type Bound = (Option<SocketAddr>, Option<SocketAddr>, Option<SocketAddr>);

/// Makes the fleet task once the listeners' addresses are known.
type FleetMaker =
    Box<dyn FnOnce(Option<SocketAddr>, Option<SocketAddr>) -> crate::fleet::FleetTask + Send>;

impl BackgroundRelay {
    /// Binds the listeners in `bind` and starts serving; returns once they
    /// are bound, with their addresses.
    pub fn start(config: RelayConfig, bind: Bind) -> Result<Self, RelayError> {
        Self::start_with(config, bind, None)
    }

    /// [`start`](Self::start) for a relay in a fleet (see
    /// [`Fleet`](crate::fleet::Fleet)); a `fleet` address left `None` is
    /// the one bound.
    pub fn start_in_fleet<D: crate::directory::Directory>(
        config: RelayConfig,
        bind: Bind,
        fleet: crate::fleet::Fleet<D>,
    ) -> Result<Self, RelayError> {
        fleet.check()?;
        let mut fleet = fleet;
        // Refused now, by the addresses asked for (their ports are known
        // once bound).
        fleet.check_reachable(bind.udp, bind.ws)?;
        Self::start_with(
            config,
            bind,
            Some(Box::new(move |udp, ws| {
                fleet.udp = fleet.udp.or(udp);
                fleet.ws = fleet.ws.or(ws);
                fleet.task()
            })),
        )
    }

    fn start_with(
        config: RelayConfig,
        bind: Bind,
        fleet: Option<FleetMaker>,
    ) -> Result<Self, RelayError> {
        config.validate()?;
        if let Some(files) = &config.tls {
            crate::tls::acceptor(files)?;
        }
        let metrics = Arc::new(Metrics::default());
        let (addr_tx, addr_rx) = std::sync::mpsc::channel::<Result<Bound, RelayError>>();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<bool>();
        let m = metrics.clone();
        let thread = std::thread::spawn(move || -> Result<RelayReport, RelayError> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let listeners = match listen(bind).await {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = addr_tx.send(Err(e));
                        return Err(RelayError::Thread("could not bind".into()));
                    }
                };
                let udp = listeners.udp.as_ref().and_then(|s| s.local_addr().ok());
                let ws = listeners.ws.as_ref().and_then(|s| s.local_addr().ok());
                let http = listeners.http.as_ref().and_then(|s| s.local_addr().ok());
                let _ = addr_tx.send(Ok((udp, ws, http)));
                let fleet = fleet.map(|make| make(udp, ws));
                crate::server::serve(config, listeners, m, fleet, async {
                    stop_rx.await.unwrap_or(true)
                })
                .await
            })
        });
        let (udp, ws, http) = addr_rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| RelayError::Thread("the relay did not start".into()))??;
        Ok(Self {
            udp,
            ws,
            http,
            metrics,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The relay's counters, live.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Tells every client goodbye, stops, and returns what the relay did.
    /// With [`drain_secs`](RelayConfig::drain_secs) and rooms open, the
    /// relay drains first, and this call blocks until it stops: call it
    /// from a thread of its own while the players' loops run on, or their
    /// matches cannot end and the drain runs to its deadline.
    pub fn stop(self) -> Result<RelayReport, RelayError> {
        self.end(true)
    }

    /// Stops dead, telling nobody: what clients see of a relay that
    /// crashed or lost its network (a failover room's players carry the
    /// match on after `host_timeout` of silence).
    pub fn kill(self) -> Result<RelayReport, RelayError> {
        self.end(false)
    }

    fn end(mut self, goodbye: bool) -> Result<RelayReport, RelayError> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(goodbye);
        }
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| RelayError::Thread("the relay thread panicked".into()))?,
            None => Err(RelayError::Thread("already stopped".into())),
        }
    }
}

impl Drop for BackgroundRelay {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(true);
        }
    }
}

async fn listen(bind: Bind) -> Result<Listeners, RelayError> {
    let mut l = Listeners::default();
    if let Some(a) = bind.udp {
        l.udp = Some(bind_udp(a, SOCKET_BUFFER)?);
    }
    if let Some(a) = bind.ws {
        l.ws = Some(tokio::net::TcpListener::bind(a).await?);
    }
    if let Some(a) = bind.http {
        l.http = Some(tokio::net::TcpListener::bind(a).await?);
    }
    Ok(l)
}
