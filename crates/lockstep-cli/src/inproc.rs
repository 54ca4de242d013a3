//! A relay running inside this process, on loopback ports it picks.

use lockstep_relay::{Listeners, Metrics, RelayConfig, RelayReport};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// A relay on its own runtime thread; stops when dropped or [`stop`]ped.
///
/// [`stop`]: InProcessRelay::stop
pub(crate) struct InProcessRelay {
    pub(crate) udp: Option<SocketAddr>,
    pub(crate) ws: Option<SocketAddr>,
    pub(crate) metrics: Arc<Metrics>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<RelayReport, String>>>,
}

impl InProcessRelay {
    /// Starts a relay with `config` on 127.0.0.1, with a UDP and/or a
    /// WebSocket listener on ports the OS picks.
    pub(crate) fn start(config: RelayConfig, udp: bool, ws: bool) -> Result<Self, String> {
        let metrics = Arc::new(Metrics::default());
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let m = metrics.clone();
        let thread = std::thread::spawn(move || -> Result<RelayReport, String> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(async move {
                let loopback: SocketAddr = ([127, 0, 0, 1], 0).into();
                let mut listeners = Listeners::default();
                if udp {
                    listeners.udp = Some(
                        lockstep_relay::bind_udp(loopback, lockstep_relay::SOCKET_BUFFER)
                            .map_err(|e| e.to_string())?,
                    );
                }
                if ws {
                    listeners.ws = Some(
                        tokio::net::TcpListener::bind(loopback)
                            .await
                            .map_err(|e| e.to_string())?,
                    );
                }
                let addrs = (
                    listeners.udp.as_ref().and_then(|s| s.local_addr().ok()),
                    listeners.ws.as_ref().and_then(|s| s.local_addr().ok()),
                );
                let _ = addr_tx.send(addrs);
                lockstep_relay::run_with_metrics(config, listeners, m, async {
                    let _ = stop_rx.await;
                })
                .await
                .map_err(|e| e.to_string())
            })
        });
        let (udp, ws) = addr_rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| "the relay did not start".to_owned())?;
        Ok(Self {
            udp,
            ws,
            metrics,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// Shuts the relay down and returns its report.
    pub(crate) fn stop(mut self) -> Result<RelayReport, String> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| "the relay thread panicked".to_owned())?,
            None => Err("the relay was already stopped".to_owned()),
        }
    }
}

impl Drop for InProcessRelay {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}
