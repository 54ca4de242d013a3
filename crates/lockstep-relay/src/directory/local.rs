//! A `redis-server` of one's own on a loopback port: for tests, and for a
//! fleet on one machine.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` child process on 127.0.0.1, keeping nothing on disk,
/// stopped when dropped.
///
/// ```no_run
/// use lockstep_relay::directory::{LocalRedis, RedisDirectory};
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let redis = LocalRedis::start()?;
/// let directory = RedisDirectory::open(&redis.url(), "lockstep:")?;
/// # Ok::<(), Box<dyn std::error::Error>>(()) });
/// ```
#[derive(Debug)]
pub struct LocalRedis {
    child: Child,
    port: u16,
}

impl LocalRedis {
    /// Starts one on a free port and waits (10 s at most) until it
    /// answers.
    pub fn start() -> std::io::Result<Self> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        Self::start_on(port)
    }

    /// Starts one on `port` and waits (10 s at most) until it answers.
    pub fn start_on(port: u16) -> std::io::Result<Self> {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("redis-server: {e} (scripts/test-deps installs it)"),
                )
            })?;
        let mut redis = Self { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !redis.answers() {
            if let Ok(Some(status)) = redis.child.try_wait() {
                return Err(std::io::Error::other(format!(
                    "redis-server on port {port} exited: {status}"
                )));
            }
            if Instant::now() >= deadline {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "redis-server did not answer within 10 s",
                ));
            }
            std::thread::yield_now();
        }
        Ok(redis)
    }

    /// Whether it answers a PING.
    pub fn answers(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let mut buf = [0u8; 7];
        s.set_read_timeout(Some(Duration::from_secs(1))).is_ok()
            && s.write_all(b"PING\r\n").is_ok()
            && s.read_exact(&mut buf).is_ok()
            && &buf == b"+PONG\r\n"
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its URL, for [`RedisDirectory::open`](super::RedisDirectory::open).
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for LocalRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
