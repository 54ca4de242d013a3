//! Drawing the arena into a terminal buffer (ratatui).

use crate::game::{ARENA_H, ARENA_W, Game};
use lockstep_core::PlayerId;
use ratatui::Frame;
use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

/// What the heads-up display shows around the arena.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hud {
    /// The tick on screen.
    pub tick: u32,
    /// Round-trip time to the relay, once measured.
    pub ping_ms: Option<u32>,
    /// Datagrams lost on the way to the relay and back, in whole percent,
    /// once measured (shown after the ping as `loss 3/0%` unless both are
    /// 0).
    pub loss_pct: Option<(u32, u32)>,
    /// Input delay in ticks.
    pub delay: u32,
    /// Times the picture stopped (no frame for two tick periods), and the
    /// frames run, for the stall rate.
    pub stalls: (u64, u64),
    /// Our seat (none when spectating, or not seated yet).
    pub me: Option<PlayerId>,
    /// We only watch (else a missing seat is one still to come).
    pub spectator: bool,
    /// Who the game is waiting on, while stalled.
    pub waiting_on: Vec<PlayerId>,
    /// One line about the connection ("room lobby on 127.0.0.1:7777").
    pub status: String,
    /// A line of help at the bottom.
    pub help: String,
}

const COLORS: [Color; 8] = [
    Color::LightCyan,
    Color::LightGreen,
    Color::LightYellow,
    Color::LightMagenta,
    Color::LightBlue,
    Color::White,
    Color::Cyan,
    Color::Green,
];

/// The colour of `player`'s ship.
pub fn color(player: PlayerId) -> Color {
    COLORS[usize::from(player.0) % COLORS.len()]
}

/// Draws `game` with `hud` over the whole frame.
pub fn draw(f: &mut Frame<'_>, game: &Game, hud: &Hud) {
    let [top, arena, bottom] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(f.area());
    let mut ping = hud.ping_ms.map_or("-".to_owned(), |p| format!("{p} ms"));
    if let Some((up, down)) = hud.loss_pct.filter(|l| *l != (0, 0)) {
        ping = format!("{ping} loss {up}/{down}%");
    }
    let me = match hud.me.and_then(|p| game.ship(p).map(|s| (p, s))) {
        Some((p, s)) if s.alive() => format!("you: {} ({})  score {}", p.0, ship_char(p), s.score),
        Some((p, s)) => format!("you: {} respawning  score {}", p.0, s.score),
        None if hud.me.is_none() && hud.spectator => "watching".to_owned(),
        None if hud.me.is_none() => "connecting...".to_owned(),
        None => "joining...".to_owned(),
    };
    // Most important first: a narrow terminal cuts the end, so the parts
    // of varying length go last.
    let (stalls, frames) = hud.stalls;
    let line = format!(
        " tick {}  ping {}  delay {}  players {}  creeps {}  {}  stalls {} ({:.1}%)",
        hud.tick,
        ping,
        hud.delay,
        game.ships.len(),
        game.creeps.len(),
        me,
        stalls,
        stalls as f64 * 100.0 / frames.max(1) as f64,
    );
    f.render_widget(
        Paragraph::new(line).style(Style::default().add_modifier(Modifier::BOLD)),
        top,
    );
    let block = Block::default()
        .borders(Borders::ALL)
        .title(format!(" swarm | {} ", hud.status));
    let inner = block.inner(arena);
    f.render_widget(block, arena);
    draw_arena(f, game, inner);
    f.render_widget(
        Paragraph::new(hud.help.clone()).style(Style::default().fg(Color::DarkGray)),
        bottom,
    );
    if !hud.waiting_on.is_empty() {
        let names: Vec<String> = hud
            .waiting_on
            .iter()
            .map(|p| format!("player {}", p.0))
            .collect();
        let text = format!("waiting on {}", names.join(", "));
        let w = (text.len() as u16 + 4).min(inner.width);
        let banner = Rect {
            x: inner.x + inner.width.saturating_sub(w) / 2,
            y: inner.y + inner.height / 2,
            width: w,
            height: 3.min(inner.height),
        };
        f.render_widget(Clear, banner);
        f.render_widget(
            Paragraph::new(Line::from(text))
                .alignment(Alignment::Center)
                .block(Block::default().borders(Borders::ALL))
                .style(
                    Style::default()
                        .fg(Color::Yellow)
                        .add_modifier(Modifier::BOLD),
                ),
            banner,
        );
    }
}

/// The character a ship is drawn with: its seat number.
pub fn ship_char(p: PlayerId) -> char {
    char::from_digit(u32::from(p.0 % 10), 10).unwrap_or('@')
}

/// The cell an arena position falls in.
pub fn cell(area: Rect, x: i32, y: i32) -> Option<(u16, u16)> {
    if area.width == 0 || area.height == 0 {
        return None;
    }
    let cx =
        (i64::from(x.clamp(0, ARENA_W - 1)) * i64::from(area.width) / i64::from(ARENA_W)) as u16;
    let cy =
        (i64::from(y.clamp(0, ARENA_H - 1)) * i64::from(area.height) / i64::from(ARENA_H)) as u16;
    Some((area.x + cx, area.y + cy))
}

fn draw_arena(f: &mut Frame<'_>, game: &Game, area: Rect) {
    let buf = f.buffer_mut();
    for c in &game.creeps {
        if let Some((x, y)) = cell(area, c.pos.x, c.pos.y) {
            let (ch, color) = if c.hp > 1 {
                ("X", Color::Red)
            } else {
                ("x", Color::LightRed)
            };
            buf.set_string(x, y, ch, Style::default().fg(color));
        }
    }
    for s in &game.shots {
        if let Some((x, y)) = cell(area, s.pos.x, s.pos.y) {
            buf.set_string(x, y, "·", Style::default().fg(color(s.owner)));
        }
    }
    for s in game.ships.iter().filter(|s| s.alive()) {
        if let Some((x, y)) = cell(area, s.pos.x, s.pos.y) {
            buf.set_string(
                x,
                y,
                ship_char(s.player).to_string(),
                if s.shield > 0 {
                    Style::default()
                        .fg(color(s.player))
                        .add_modifier(Modifier::BOLD)
                } else {
                    Style::default()
                        .fg(color(s.player))
                        .add_modifier(Modifier::BOLD | Modifier::REVERSED)
                },
            );
        }
    }
}
