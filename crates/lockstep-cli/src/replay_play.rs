//! `lockstep replay play`: a replay of swarm in the terminal, with pause,
//! speed, step and seek.

use crate::play::Screen;
use crate::replay::{GameArgs, index_path, read};
use crossterm::event::{self, Event as TermEvent, KeyCode, KeyEventKind};
use lockstep_core::Tick;
use lockstep_core::replay::{Index, Playback};
use lockstep_demo::Game;
use lockstep_demo::render::{self, Hud};
use std::path::Path;
use std::time::{Duration, Instant};

/// Playback speeds, slowest first.
const SPEEDS: [f64; 9] = [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0];
/// Ticks between keyframes when `play` indexes a replay itself.
const EVERY: u32 = 300;
const HELP: &str =
    " space pause · +/- speed · . step · ←/→ 5 s · ↓/↑ 30 s · Home/End · 0-9 jump · q quit";

/// What a key asks.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Action {
    Quit,
    Pause,
    Faster,
    Slower,
    Step,
    /// Seek by this many seconds.
    By(i64),
    /// Seek to this fraction of the way.
    To(f64),
    Nothing,
}

fn action(key: KeyCode) -> Action {
    match key {
        KeyCode::Char('q') | KeyCode::Esc => Action::Quit,
        KeyCode::Char(' ') | KeyCode::Char('p') => Action::Pause,
        KeyCode::Char('+') | KeyCode::Char('=') => Action::Faster,
        KeyCode::Char('-') | KeyCode::Char('_') => Action::Slower,
        KeyCode::Char('.') => Action::Step,
        KeyCode::Left => Action::By(-5),
        KeyCode::Right => Action::By(5),
        KeyCode::Down => Action::By(-30),
        KeyCode::Up => Action::By(30),
        KeyCode::Home => Action::To(0.0),
        KeyCode::End => Action::To(1.0),
        KeyCode::Char(c @ '0'..='9') => Action::To(f64::from(c as u8 - b'0') / 10.0),
        _ => Action::Nothing,
    }
}

/// The player's controls: how fast, paused or not, and the part of a tick
/// owed by the clock.
#[derive(Debug, Clone)]
struct Controls {
    speed: usize,
    paused: bool,
    owed: f64,
}

impl Controls {
    fn new() -> Self {
        Self {
            speed: 2,
            paused: false,
            owed: 0.0,
        }
    }

    fn speed(&self) -> f64 {
        SPEEDS[self.speed]
    }

    /// Ticks due after `elapsed` at `tick_rate`.
    fn due(&mut self, elapsed: Duration, tick_rate: u32) -> u32 {
        if self.paused {
            self.owed = 0.0;
            return 0;
        }
        self.owed += elapsed.as_secs_f64() * f64::from(tick_rate) * self.speed();
        let whole = self.owed.floor();
        self.owed -= whole;
        whole as u32
    }

    /// Applies a key's action: the tick to seek to, if it asks one
    /// (`now` the tick shown, `first..=last` the replay's).
    fn apply(&mut self, a: Action, now: u32, first: u32, last: u32, rate: u32) -> Option<u32> {
        match a {
            Action::Pause => self.paused = !self.paused,
            Action::Faster => self.speed = (self.speed + 1).min(SPEEDS.len() - 1),
            Action::Slower => self.speed = self.speed.saturating_sub(1),
            Action::Step => {
                self.paused = true;
                return Some(now.saturating_add(1).min(last));
            }
            Action::By(s) => {
                let to = i64::from(now) + s * i64::from(rate);
                return Some(to.clamp(i64::from(first), i64::from(last)) as u32);
            }
            Action::To(f) => {
                let span = f64::from(last - first);
                return Some(first + (span * f).round() as u32);
            }
            Action::Quit | Action::Nothing => {}
        }
        None
    }
}

/// The progress bar and what the controls say.
fn status(now: u32, first: u32, last: u32, rate: u32, c: &Controls, note: &str) -> String {
    const WIDTH: usize = 30;
    let span = f64::from((last - first).max(1));
    let done = (f64::from(now.saturating_sub(first)) / span * WIDTH as f64).round() as usize;
    let bar: String = (0..WIDTH)
        .map(|i| if i < done { '#' } else { '-' })
        .collect();
    let secs = |t: u32| f64::from(t.saturating_sub(first)) / f64::from(rate.max(1));
    format!(
        "[{bar}] {:.1}/{:.1} s  {}x{}{note}",
        secs(now),
        secs(last),
        c.speed(),
        if c.paused { "  paused" } else { "" }
    )
}

pub(crate) fn main(file: &Path, args: &GameArgs) -> Result<(), String> {
    let (_, r) = read(file)?;
    let game = args.game(&r)?;
    let (Some(first), Some(last)) = (
        r.tick_of(0),
        r.frame_count().checked_sub(1).and_then(|k| r.tick_of(k)),
    ) else {
        return Err(format!("{}: no frames to play", file.display()));
    };
    let (first, last) = (first.get(), last.get());
    let rate = r.header.as_ref().map_or(30, |h| h.tick_rate.max(1));
    let mut p = Playback::new(&r, game).map_err(|e| e.to_string())?;
    let indexed = std::fs::read(index_path(file))
        .ok()
        .and_then(|b| Index::read(&b, &r).ok())
        .is_some_and(|i| p.add_keyframes(i.keyframes()).is_ok());
    if !indexed {
        eprintln!("indexing {} frames...", r.frame_count());
        p.index(EVERY).map_err(|e| e.to_string())?;
    }
    let mut screen = Screen::open().map_err(|e| e.to_string())?;
    let mut c = Controls::new();
    let mut note = String::new();
    let (mut last_turn, mut last_draw) = (Instant::now(), Instant::now() - Duration::from_secs(1));
    loop {
        let now = Instant::now();
        let shown = p.tick().map_or(first, Tick::get);
        if event::poll(Duration::from_millis(5)).map_err(|e| e.to_string())? {
            if let TermEvent::Key(k) = event::read().map_err(|e| e.to_string())?
                && k.kind != KeyEventKind::Release
            {
                let a = action(k.code);
                if a == Action::Quit {
                    break;
                }
                if let Some(to) = c.apply(a, shown, first, last, rate) {
                    let started = Instant::now();
                    let ran = p.seek(Tick::new(to)).map_err(|e| e.to_string())?;
                    note = format!(
                        "  seek: {ran} ticks run in {} ms",
                        started.elapsed().as_millis()
                    );
                }
            }
            continue;
        }
        // At most a render frame's worth of ticks (64x of 30 Hz is 64 a
        // frame): the screen keeps drawing.
        let due = c.due(now - last_turn, rate).min(256);
        last_turn = now;
        for _ in 0..due {
            if p.step().map_err(|e| e.to_string())?.is_none() {
                c.paused = true;
                break;
            }
        }
        if p.at_end() {
            c.paused = true;
        }
        if now - last_draw >= Duration::from_millis(33) {
            last_draw = now;
            let shown = p.tick().map_or(first, Tick::get);
            draw(
                &mut screen,
                p.game(),
                shown,
                status(shown, first, last, rate, &c, &note),
            )?;
        }
    }
    Ok(())
}

fn draw(screen: &mut Screen, game: &Game, tick: u32, status: String) -> Result<(), String> {
    let hud = Hud {
        tick,
        ping_ms: None,
        loss_pct: None,
        delay: 0,
        stalls: (0, 1),
        me: None,
        spectator: true,
        waiting_on: Vec::new(),
        status,
        help: HELP.to_owned(),
    };
    screen
        .terminal
        .draw(|f| render::draw(f, game, &hud))
        .map(drop)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Speed runs from 0.25x to 64x and stops there; paused owes nothing;
    /// the clock's ticks come whole, the rest carried.
    #[test]
    fn controls_pace_and_seek_within_the_replay() {
        let mut c = Controls::new();
        assert_eq!(c.due(Duration::from_millis(100), 30), 3);
        for _ in 0..20 {
            c.apply(Action::Faster, 0, 0, 100, 30);
        }
        assert_eq!(c.speed(), 64.0);
        assert_eq!(c.due(Duration::from_millis(500), 30), 960);
        for _ in 0..20 {
            c.apply(Action::Slower, 0, 0, 100, 30);
        }
        assert_eq!(c.speed(), 0.25);
        let ticks: u32 = (0..40).map(|_| c.due(Duration::from_millis(100), 30)).sum();
        assert_eq!(ticks, 30, "a quarter of 4 s at 30 Hz");
        c.apply(Action::Pause, 0, 0, 100, 30);
        assert_eq!(c.due(Duration::from_secs(5), 30), 0);
        // Seeks stay within the replay's ticks.
        assert_eq!(c.apply(Action::By(-5), 100, 20, 9_000, 30), Some(20));
        assert_eq!(c.apply(Action::By(30), 8_500, 20, 9_000, 30), Some(9_000));
        assert_eq!(c.apply(Action::To(0.5), 0, 1_000, 3_000, 30), Some(2_000));
        assert_eq!(c.apply(Action::Step, 2_999, 0, 3_000, 30), Some(3_000));
        assert_eq!(c.apply(Action::Step, 3_000, 0, 3_000, 30), Some(3_000));
        assert!(c.paused);
        assert_eq!(action(KeyCode::Char('7')), Action::To(0.7));
        assert!(
            status(50, 0, 100, 30, &c, "")
                .starts_with("[###############---------------] 1.7/3.3 s")
        );
    }
}
