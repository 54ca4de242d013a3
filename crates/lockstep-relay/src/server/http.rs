//! The relay's HTTP endpoints, served by hyper: `/metrics` (Prometheus
//! text), `/healthz` (the main loop keeps up) and `/readyz` (healthy, and
//! room for another connection and another room).

use super::millis;
use crate::metrics::Metrics;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::HashMap;
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

/// What the endpoints judge against.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    /// The main loop may be this far behind and still be healthy.
    pub(super) max_lag: Duration,
    /// Connections over every transport at most (ready below it).
    pub(super) max_connections: usize,
    /// Rooms at most (ready below it).
    pub(super) max_rooms: usize,
}

/// HTTP connections served at once, from every address together. A
/// scraper and a probe or two need a handful; the rest are refused (closed
/// at once) so that nobody holds the relay's memory or descriptors.
pub(super) const HTTP_CONNECTIONS: usize = 64;
/// HTTP connections served at once from one IP address.
pub(super) const HTTP_PER_IP: usize = 4;
/// The most of a request head read (hyper's smallest buffer): the
/// endpoints take a request line and a few headers.
const MAX_HEAD: usize = 8 * 1024;

/// Who holds how many of the HTTP connections.
#[derive(Debug, Default)]
struct Held {
    total: usize,
    by_ip: HashMap<IpAddr, usize>,
}

/// One connection's place in [`Held`], given back when it is dropped.
struct Place {
    held: Arc<Mutex<Held>>,
    ip: IpAddr,
}

impl Place {
    /// A place for a connection from `ip`, if the caps leave one.
    fn take(held: &Arc<Mutex<Held>>, ip: IpAddr) -> Option<Self> {
        let mut h = held.lock().ok()?;
        let mine = h.by_ip.get(&ip).copied().unwrap_or(0);
        if h.total >= HTTP_CONNECTIONS || mine >= HTTP_PER_IP {
            return None;
        }
        h.total += 1;
        h.by_ip.insert(ip, mine + 1);
        Some(Self {
            held: held.clone(),
            ip,
        })
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if let Ok(mut h) = self.held.lock() {
            h.total = h.total.saturating_sub(1);
            if let Some(n) = h.by_ip.get_mut(&self.ip) {
                *n -= 1;
                if *n == 0 {
                    h.by_ip.remove(&self.ip);
                }
            }
        }
    }
}

/// Serves `listener` until the task is aborted; each connection has five
/// seconds to send its request's head (of at most 8 KiB) and ten to
/// finish, and at most [`HTTP_CONNECTIONS`] are served at once
/// ([`HTTP_PER_IP`] from one address): one over either cap is closed
/// unread.
pub(super) async fn serve(listener: TcpListener, metrics: Arc<Metrics>, limits: Limits) {
    let started = Instant::now();
    let held = Arc::new(Mutex::new(Held::default()));
    loop {
        let Ok((stream, from)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Some(place) = Place::take(&held, from.ip()) else {
            drop(stream);
            continue;
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let _place = place;
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let response = respond(&req, &metrics, started, limits);
                async move { Ok::<_, Infallible>(response) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(5))
                .max_buf_size(MAX_HEAD)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(Duration::from_secs(10), conn).await;
        });
    }
}

fn respond(
    req: &Request<Incoming>,
    metrics: &Metrics,
    started: Instant,
    limits: Limits,
) -> Response<Full<Bytes>> {
    let (status, kind, body) = match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => (
            StatusCode::OK,
            "text/plain; version=0.0.4",
            metrics.render(),
        ),
        (&Method::GET, "/healthz") => {
            let (status, body) = health(metrics, started, limits.max_lag);
            (status, "text/plain", body)
        }
        (&Method::GET, "/readyz") => {
            let (status, body) = readiness(metrics, started, limits);
            (status, "text/plain", body)
        }
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found\n".to_owned(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(kind) {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, v);
    }
    response
}

/// How far behind the main loop is: since its last pass, or in running
/// its latest due timer, whichever is more.
fn lag(metrics: &Metrics, started: Instant) -> u64 {
    // This task's clock started a moment after the core's: that moment
    // only makes the check stricter.
    let since_pass =
        millis(started.elapsed()).saturating_sub(metrics.loop_at_ms.load(Ordering::Relaxed));
    let timer_lag = metrics.loop_lag_us.load(Ordering::Relaxed) / 1000;
    since_pass.max(timer_lag)
}

/// `/healthz`: healthy while the main loop keeps up with its timers and
/// has passed recently; the body says how late it is either way.
fn health(metrics: &Metrics, started: Instant, max_lag: Duration) -> (StatusCode, String) {
    let lag = lag(metrics, started);
    if lag > millis(max_lag) {
        let body = format!("lagging: the main loop is {lag} ms behind\n");
        (StatusCode::SERVICE_UNAVAILABLE, body)
    } else {
        (StatusCode::OK, format!("ok: {lag} ms behind\n"))
    }
}

/// `/readyz`: ready for another player while healthy and below its
/// connection and room limits (a load balancer or an orchestrator sends
/// new players elsewhere otherwise); the body says why not.
fn readiness(metrics: &Metrics, started: Instant, limits: Limits) -> (StatusCode, String) {
    let (status, body) = health(metrics, started, limits.max_lag);
    if status != StatusCode::OK {
        return (status, body);
    }
    let connections = metrics.connections.load(Ordering::Relaxed);
    let rooms = metrics.rooms.load(Ordering::Relaxed);
    if metrics.draining.load(Ordering::Relaxed) != 0 {
        let body = format!("draining: {rooms} rooms left\n");
        return (StatusCode::SERVICE_UNAVAILABLE, body);
    }
    if connections >= limits.max_connections as u64 {
        let body = format!(
            "full: {connections} connections of {}\n",
            limits.max_connections
        );
        return (StatusCode::SERVICE_UNAVAILABLE, body);
    }
    if rooms >= limits.max_rooms as u64 {
        let body = format!("full: {rooms} rooms of {}\n", limits.max_rooms);
        return (StatusCode::SERVICE_UNAVAILABLE, body);
    }
    (
        StatusCode::OK,
        format!("ready: {connections} connections, {rooms} rooms\n"),
    )
}
