//! Drawing a known state into ratatui's test backend and reading the screen.

use lockstep_core::{Frame, PlayerId, PlayerInputs, SystemEvent, Tick};
use lockstep_demo::render::{Hud, cell, draw};
use lockstep_demo::{Creep, Game, Vec2};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::layout::Rect;

fn screen(t: &Terminal<TestBackend>) -> Vec<String> {
    let buf = t.backend().buffer();
    (0..buf.area.height)
        .map(|y| {
            (0..buf.area.width)
                .map(|x| buf[(x, y)].symbol().to_owned())
                .collect()
        })
        .collect()
}

fn known_game() -> Game {
    let mut g = Game::new(1);
    g.step(&Frame {
        tick: Tick::ZERO,
        inputs: vec![Some(PlayerInputs::default()); 2],
        events: vec![
            SystemEvent::Joined {
                player: PlayerId(0),
            },
            SystemEvent::Joined {
                player: PlayerId(1),
            },
        ],
    });
    g.creeps.clear();
    g.creeps.push(Creep {
        id: 1,
        pos: Vec2::new(100, 100),
        hp: 1,
        speed: 0,
    });
    g.creeps.push(Creep {
        id: 2,
        pos: Vec2::new(16_000, 8_000),
        hp: 2,
        speed: 0,
    });
    g
}

#[test]
fn ships_creeps_and_the_hud_are_on_screen() {
    let game = known_game();
    let mut t = Terminal::new(TestBackend::new(82, 26)).expect("terminal");
    let hud = Hud {
        tick: 1234,
        ping_ms: Some(42),
        delay: 3,
        me: Some(PlayerId(1)),
        spectator: false,
        status: "room test".into(),
        help: "WASD move".into(),
        ..Hud::default()
    };
    t.draw(|f| draw(f, &game, &hud)).expect("draw");
    let rows = screen(&t);
    let text = rows.join("\n");
    assert!(
        rows[0].contains("tick 1234") && rows[0].contains("ping 42 ms"),
        "{}",
        rows[0]
    );
    assert!(!rows[0].contains("loss"), "no loss, no figure: {}", rows[0]);
    let lossy = Hud {
        loss_pct: Some((3, 0)),
        ..hud.clone()
    };
    t.draw(|f| draw(f, &game, &lossy)).expect("draw");
    let top = screen(&t)[0].clone();
    assert!(top.contains("ping 42 ms loss 3/0%"), "{top}");
    assert!(
        rows[0].contains("players 2") && rows[0].contains("you: 1"),
        "{}",
        rows[0]
    );
    assert!(text.contains("swarm | room test"));
    assert!(rows[25].contains("WASD move"));
    // The arena is the frame minus the HUD lines and the border.
    let inner = Rect {
        x: 1,
        y: 2,
        width: 80,
        height: 22,
    };
    for ship in &game.ships {
        let (x, y) = cell(inner, ship.pos.x, ship.pos.y).expect("cell");
        let expected = char::from_digit(u32::from(ship.player.0), 10)
            .expect("digit")
            .to_string();
        assert_eq!(
            t.backend().buffer()[(x, y)].symbol(),
            expected,
            "ship {} at {x},{y}",
            ship.player.0
        );
    }
    let (x, y) = cell(inner, 100, 100).expect("cell");
    assert_eq!(t.backend().buffer()[(x, y)].symbol(), "x");
    let (x, y) = cell(inner, 16_000, 8_000).expect("cell");
    assert_eq!(
        t.backend().buffer()[(x, y)].symbol(),
        "X",
        "a tougher creep"
    );
    assert!(!text.contains("waiting on"));
}

#[test]
fn the_hud_shows_the_delay_and_the_stall_rate() {
    let game = known_game();
    let mut t = Terminal::new(TestBackend::new(140, 12)).expect("terminal");
    let hud = Hud {
        delay: 5,
        stalls: (3, 200),
        me: Some(PlayerId(1)),
        ..Hud::default()
    };
    t.draw(|f| draw(f, &game, &hud)).expect("draw");
    let top = &screen(&t)[0];
    assert!(
        top.contains("delay 5") && top.contains("stalls 3 (1.5%)"),
        "{top}"
    );
}

#[test]
fn a_stall_shows_who_the_game_waits_on() {
    let game = known_game();
    let mut t = Terminal::new(TestBackend::new(60, 20)).expect("terminal");
    let hud = Hud {
        waiting_on: vec![PlayerId(1), PlayerId(3)],
        ..Hud::default()
    };
    t.draw(|f| draw(f, &game, &hud)).expect("draw");
    let text = screen(&t).join("\n");
    assert!(text.contains("waiting on player 1, player 3"), "{text}");
}

#[test]
fn a_spectator_is_told_so() {
    let game = known_game();
    let mut t = Terminal::new(TestBackend::new(100, 12)).expect("terminal");
    let watcher = Hud {
        spectator: true,
        ..Hud::default()
    };
    t.draw(|f| draw(f, &game, &watcher)).expect("draw");
    assert!(screen(&t)[0].contains("watching"));
    // A player not seated yet is connecting, not watching.
    t.draw(|f| draw(f, &game, &Hud::default())).expect("draw");
    assert!(screen(&t)[0].contains("connecting..."));
}
