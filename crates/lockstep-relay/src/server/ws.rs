//! WebSocket clients: accepted within limits (optionally over TLS), each
//! a task that passes binary messages to the main loop and back.

use super::*;
use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

static NEXT_WS: AtomicU64 = AtomicU64::new(1);

/// What one WebSocket connection may do before it is closed.
#[derive(Debug, Clone, Copy)]
pub(super) struct WsLimits {
    total: usize,
    per_addr: usize,
    hello_timeout: Duration,
}

impl From<&crate::config::Limits> for WsLimits {
    fn from(l: &crate::config::Limits) -> Self {
        Self {
            total: l.max_ws_connections,
            per_addr: l.max_ws_per_addr,
            hello_timeout: Duration::from_secs(l.ws_hello_timeout_secs.max(1)),
        }
    }
}

/// Control frames (pings, pongs) a WebSocket connection may send in a
/// burst, refilled at one a second.
pub(super) const WS_CONTROL_BURST: u32 = 10;

pub(super) async fn accept_ws(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    core: mpsc::Sender<CoreMsg>,
    limits: WsLimits,
    metrics: Arc<Metrics>,
) {
    let mut conns = JoinSet::new();
    let mut by_addr: HashMap<IpAddr, usize> = HashMap::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, addr)) => {
                    let ip = limit_key(addr.ip());
                    let from_ip = by_addr.get(&ip).copied().unwrap_or(0);
                    if conns.len() >= limits.total || from_ip >= limits.per_addr {
                        // Closed before the WebSocket handshake: it costs us a
                        // TCP accept and nothing more.
                        debug!(%addr, "websocket connection refused: limit");
                        metrics.ws_refused.fetch_add(1, Ordering::Relaxed);
                        drop(stream);
                        continue;
                    }
                    *by_addr.entry(ip).or_default() += 1;
                    metrics.ws_connections.store(conns.len() as u64 + 1, Ordering::Relaxed);
                    let id = NEXT_WS.fetch_add(1, Ordering::Relaxed);
                    debug!(%addr, id, "websocket connection");
                    let (core, metrics) = (core.clone(), metrics.clone());
                    let _ = stream.set_nodelay(true);
                    let tls = tls.clone();
                    conns.spawn(async move {
                        match tls {
                            // The TLS handshake within the WebSocket one's time.
                            Some(acceptor) => match tokio::time::timeout(
                                Duration::from_secs(5),
                                acceptor.accept(stream),
                            )
                            .await
                            {
                                Ok(Ok(s)) => ws_conn(s, id, core, limits, metrics).await,
                                _ => debug!(id, "TLS handshake failed or timed out"),
                            },
                            None => ws_conn(stream, id, core, limits, metrics).await,
                        }
                        ip
                    });
                }
                Err(e) => {
                    warn!("websocket accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(done) = conns.join_next(), if !conns.is_empty() => {
                if let Ok(ip) = done
                    && let Some(n) = by_addr.get_mut(&ip)
                {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        by_addr.remove(&ip);
                    }
                }
                metrics.ws_connections.store(conns.len() as u64, Ordering::Relaxed);
            }
        }
    }
}

async fn ws_conn<S>(
    stream: S,
    id: u64,
    core: mpsc::Sender<CoreMsg>,
    limits: WsLimits,
    metrics: Arc<Metrics>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let config = WebSocketConfig::default()
        .max_message_size(Some(WS_MAX_MESSAGE))
        .max_frame_size(Some(WS_MAX_MESSAGE));
    let ws = match tokio::time::timeout(
        Duration::from_secs(5),
        tokio_tungstenite::accept_async_with_config(stream, Some(config)),
    )
    .await
    {
        Ok(Ok(ws)) => ws,
        Ok(Err(e)) => return debug!(id, "websocket handshake failed: {e}"),
        Err(_) => return debug!(id, "websocket handshake timed out"),
    };
    let (mut sink, mut source) = ws.split();
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(WS_QUEUE);
    if core.send(CoreMsg::WsOpen { id, tx }).await.is_err() {
        return;
    }
    let writer = async {
        while let Some(bytes) = rx.recv().await {
            if sink.send(WsMessage::Binary(bytes.into())).await.is_err() {
                return;
            }
        }
        let _ = sink.close().await;
    };
    let reader = async {
        let started = tokio::time::Instant::now();
        let mut control = TokenBucket::full(WS_CONTROL_BURST, CoreInstant::ZERO);
        let mut said_anything = false;
        loop {
            // The first message must come soon: an idle socket holds a slot.
            let next = if said_anything {
                source.next().await
            } else {
                match tokio::time::timeout_at(started + limits.hello_timeout, source.next()).await {
                    Ok(m) => m,
                    Err(_) => {
                        debug!(id, "websocket sent nothing in time");
                        metrics.ws_refused.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                }
            };
            let Some(Ok(msg)) = next else {
                return;
            };
            let now = CoreInstant::from_duration(started.elapsed());
            match msg {
                WsMessage::Binary(b) => {
                    said_anything = true;
                    let bytes = b.to_vec();
                    if core.send(CoreMsg::Datagram { id, bytes }).await.is_err() {
                        return;
                    }
                }
                WsMessage::Ping(_) | WsMessage::Pong(_) if control.take(1, now) => {}
                WsMessage::Close(_) => return,
                // Text is not our protocol; control frames past their rate
                // are a flood.
                _ => {
                    debug!(id, "websocket closed: text or too many control frames");
                    metrics.ws_refused.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        }
    };
    tokio::select! {
        () = writer => {}
        () = reader => {}
    }
    let _ = core.send(CoreMsg::WsClosed { id }).await;
}

/// Outgoing datagrams queued per WebSocket connection before dropping.
pub(super) const WS_QUEUE: usize = 256;

/// The largest WebSocket message read: generously above any datagram, so
/// an oversized one reaches the room and is refused with a reason.
pub(super) const WS_MAX_MESSAGE: usize = 64 << 10;
