//! `lockstep play` in a real pseudo-terminal against a real relay: it draws
//! the arena and the HUD, joins the room, runs the game, and quits on `q`.
//!
//! The client redraws only the cells that change, so the test feeds its
//! output through a terminal emulator and reads the screen, as a player would.
#![cfg(unix)]

use crate::common;
use common::{RelayProcess, UDP_ONLY};
use expectrl::Session;
use expectrl::process::unix::WaitStatus;
use expectrl::session::OsSession;
use std::io::{ErrorKind, Write};
use std::process::Command;
use std::time::{Duration, Instant};

const ROWS: u16 = 30;
const COLS: u16 = 100;

struct Screen {
    session: OsSession,
    parser: vt100::Parser,
    eof: bool,
}

impl Screen {
    /// Reads whatever the client has written so far into the emulator.
    fn pump(&mut self) {
        let mut buf = [0u8; 8192];
        loop {
            match self.session.try_read(&mut buf) {
                Ok(0) => {
                    self.eof = true;
                    return;
                }
                Ok(n) => self.parser.process(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                // Linux reports a closed pty as EIO.
                Err(_) => {
                    self.eof = true;
                    return;
                }
            }
        }
    }

    /// Polls the screen until `pred` holds or the deadline passes.
    fn wait_for(&mut self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            self.pump();
            let text = self.parser.screen().contents();
            if pred(&text) {
                return text;
            }
            assert!(
                Instant::now() < deadline && !self.eof,
                "waited for {what}; the screen shows:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn tick_on_screen(text: &str) -> Option<u32> {
    let at = text.find("tick ")?;
    let digits: String = text[at + 5..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// `lockstep` with `args` in an 100x30 pseudo-terminal.
fn spawn(args: &[&str]) -> Screen {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockstep"));
    cmd.args(args);
    cmd.env("TERM", "xterm-256color");
    let mut session = Session::spawn(cmd).expect("spawn play in a pty");
    session
        .get_process_mut()
        .set_window_size(COLS, ROWS)
        .expect("window size");
    Screen {
        session,
        parser: vt100::Parser::new(ROWS, COLS, 0),
        eof: false,
    }
}

impl Screen {
    /// Waits for the process to end; returns its status and the screen.
    fn exit(&mut self) -> (WaitStatus, String) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.eof {
            assert!(Instant::now() < deadline, "the client did not exit");
            self.pump();
            std::thread::sleep(Duration::from_millis(10));
        }
        let status = self.session.get_process_mut().wait().expect("wait");
        (status, self.parser.screen().contents())
    }
}

const SECRET: &str = "a ticket secret for the pty test";

#[test]
fn a_refused_client_says_why_and_a_signed_ticket_lets_it_in() {
    let relay = RelayProcess::start(&[&UDP_ONLY[..], &["--ticket-secret", SECRET]].concat());
    let udp = relay.addr("udp").to_string();
    let mut eve = spawn(&["play", "--relay", &udp, "--room", "vip", "--name", "eve"]);
    let (status, text) = eve.exit();
    assert!(
        matches!(status, WaitStatus::Exited(_, code) if code != 0),
        "{status:?}"
    );
    assert!(text.contains("refused: the join ticket"), "{text}");

    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args([
            "ticket", "--secret", SECRET, "--room", "vip", "--name", "ada",
        ])
        .output()
        .expect("lockstep ticket");
    assert!(out.status.success());
    let ticket = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let mut ada = spawn(&[
        "play", "--relay", &udp, "--room", "vip", "--name", "ada", "--ticket", &ticket,
    ]);
    ada.wait_for("a seat with the ticket", |s| s.contains("you: 0"));
    ada.session.write_all(b"q").expect("quit");
    let (status, _) = ada.exit();
    assert!(matches!(status, WaitStatus::Exited(_, 0)), "{status:?}");
    // The same ticket again: spent.
    let mut again = spawn(&[
        "play", "--relay", &udp, "--room", "vip", "--name", "ada", "--ticket", &ticket,
    ]);
    let (status, text) = again.exit();
    assert!(
        matches!(status, WaitStatus::Exited(_, code) if code != 0),
        "{status:?}"
    );
    assert!(text.contains("refused"), "{text}");
}

#[test]
fn the_terminal_client_draws_the_arena_and_quits() {
    let relay = RelayProcess::start(&UDP_ONLY);
    let udp = relay.addr("udp").to_string();
    let file = std::env::temp_dir().join(format!("lockstep-pty-{}.lkrp", std::process::id()));
    let record = file.to_str().expect("a path").to_owned();
    let mut screen = spawn(&[
        "play", "--relay", &udp, "--room", "pty", "--name", "tester", "--record", &record,
    ]);

    let room = format!("room pty on udp://{udp}");
    screen.wait_for("the arena and our room", |s| {
        s.contains("swarm") && s.contains(&room)
    });
    screen.wait_for("our ship in seat 0", |s| {
        s.contains("players 1") && s.contains("you: 0")
    });
    let first = screen.wait_for("the game to run", |s| {
        tick_on_screen(s).is_some_and(|t| t > 0)
    });
    let first = tick_on_screen(&first).unwrap_or(0);

    screen.session.write_all(b"d ").expect("move and fire");
    screen.wait_for("ticks to advance", |s| {
        tick_on_screen(s).is_some_and(|t| t >= first + 60)
    });

    screen.session.write_all(b"q").expect("quit");
    let (status, _) = screen.exit();
    assert!(
        matches!(status, WaitStatus::Exited(_, 0)),
        "the client exits cleanly: {status:?}"
    );
    // What it played is recorded, whole, and swarm runs it again to every
    // recorded state hash.
    let out = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["replay", "verify", &record, "--seed", "1"])
        .output()
        .expect("run lockstep replay");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("state hashes matches"), "{text}");

    // Played back in the terminal: it seeks to the end and back to the
    // start, changes speed, pauses, and quits on `q`.
    let info = Command::new(env!("CARGO_BIN_EXE_lockstep"))
        .args(["replay", "info", &record])
        .output()
        .expect("run lockstep replay info");
    let info = String::from_utf8_lossy(&info.stdout).to_string();
    let last: u32 = info
        .split("ticks ")
        .nth(1)
        .and_then(|s| s.split(" to ").nth(1))
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("the last tick in {info}"));
    let mut screen = spawn(&["replay", "play", &record, "--seed", "1"]);
    screen.wait_for("the replay on screen", |s| {
        s.contains("swarm") && s.contains("1x") && tick_on_screen(s).is_some()
    });
    screen.session.write_all(b" ").expect("pause");
    screen.wait_for("paused", |s| s.contains("paused"));
    screen.session.write_all(b"\x1b[F").expect("End");
    screen.wait_for("the last tick", |s| tick_on_screen(s) == Some(last));
    screen.session.write_all(b"\x1b[H").expect("Home");
    screen.wait_for("the first ticks", |s| {
        tick_on_screen(s).is_some_and(|t| t < 5)
    });
    screen.session.write_all(b"++").expect("faster");
    screen.wait_for("4x", |s| s.contains("4x"));
    screen.session.write_all(b"q").expect("quit");
    let (status, _) = screen.exit();
    assert!(
        matches!(status, WaitStatus::Exited(_, 0)),
        "replay play exits cleanly: {status:?}"
    );
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(format!("{record}.idx"));
}

/// A UDP relay-in-the-middle on loopback: each client address gets its own
/// upstream socket to `upstream`; `cut` kills every path open so far (as a
/// player's network going away), while a client that opens a new socket
/// gets through.
struct Cable {
    addr: std::net::SocketAddr,
    dead: std::sync::Arc<std::sync::Mutex<Vec<std::net::SocketAddr>>>,
    paths: std::sync::Arc<std::sync::Mutex<Vec<std::net::SocketAddr>>>,
}

impl Cable {
    fn new(upstream: std::net::SocketAddr) -> Self {
        use std::net::UdpSocket;
        use std::sync::{Arc, Mutex};
        let front = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let addr = front.local_addr().expect("addr");
        let dead: Arc<Mutex<Vec<std::net::SocketAddr>>> = Arc::default();
        let paths: Arc<Mutex<Vec<std::net::SocketAddr>>> = Arc::default();
        let (d, p) = (dead.clone(), paths.clone());
        std::thread::spawn(move || {
            let mut ups: Vec<(std::net::SocketAddr, UdpSocket)> = Vec::new();
            let mut buf = [0u8; 2048];
            loop {
                let Ok((n, from)) = front.recv_from(&mut buf) else {
                    return;
                };
                if d.lock().expect("lock").contains(&from) {
                    continue;
                }
                if !ups.iter().any(|(a, _)| *a == from) {
                    let up = UdpSocket::bind("127.0.0.1:0").expect("bind");
                    up.connect(upstream).expect("connect");
                    let back = up.try_clone().expect("clone");
                    let (front, d) = (front.try_clone().expect("clone"), d.clone());
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 2048];
                        while let Ok(n) = back.recv(&mut buf) {
                            if !d.lock().expect("lock").contains(&from) {
                                let _ = front.send_to(&buf[..n], from);
                            }
                        }
                    });
                    p.lock().expect("lock").push(from);
                    ups.push((from, up));
                }
                if let Some((_, up)) = ups.iter().find(|(a, _)| *a == from) {
                    let _ = up.send(&buf[..n]);
                }
            }
        });
        Self { addr, dead, paths }
    }

    fn cut(&self) {
        let open = self.paths.lock().expect("lock").clone();
        self.dead.lock().expect("lock").extend(open);
    }
}

/// The player's network goes away mid-game: after 3 s without the relay the
/// client opens a new socket, takes its seat back with its resume token and
/// plays on from where it stopped (the relay's history still holds the
/// frames it missed).
#[test]
fn a_player_whose_network_drops_reconnects_by_itself_and_plays_on() {
    let relay = RelayProcess::start(&UDP_ONLY);
    let cable = Cable::new(relay.addr("udp"));
    let via = cable.addr.to_string();
    let mut screen = spawn(&["play", "--relay", &via, "--room", "cut", "--name", "ada"]);
    screen.wait_for("our ship in seat 0", |s| s.contains("you: 0"));
    let before = screen.wait_for("the game to run", |s| {
        tick_on_screen(s).is_some_and(|t| t > 30)
    });
    let before = tick_on_screen(&before).unwrap_or(0);
    cable.cut();
    let back = screen.wait_for("the client to reconnect", |s| {
        s.contains("(reconnected 1x)")
    });
    let back = tick_on_screen(&back).unwrap_or(0);
    // Nothing ran while the cable was cut (3 s at 60 Hz would be 180 ticks).
    assert!(
        back < before + 120,
        "ticks {before} -> {back} across the cut"
    );
    screen.wait_for("play to go on, seat kept", |s| {
        s.contains("you: 0") && tick_on_screen(s).is_some_and(|t| t >= back + 60)
    });
    screen.session.write_all(b"q").expect("quit");
    let (status, _) = screen.exit();
    assert!(
        matches!(status, WaitStatus::Exited(_, 0)),
        "the client exits cleanly: {status:?}"
    );
}
