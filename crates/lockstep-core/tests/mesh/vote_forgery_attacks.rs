//! Votes to abandon forged in other players' names (a mesh datagram is not
//! sealed, so its source address is all that says who sent it), against
//! the rule that another player's vote counts towards freezing a seat only
//! once every datagram from that player has carried it for `vote_hold`.
//! Each attack runs beside honest players on a perfect network; the target
//! is an honest player that keeps playing.

use crate::common;
use common::hand::{Net, datagram};
use lockstep_core::wire::{Abandon, Endorsement, Message};
use lockstep_core::{MeshConfig, PeerId, PlayerId};
use std::time::Duration;

/// The honest target.
const C: usize = 2;
/// The attacker's seat, where it has one.
const A: usize = 3;

fn config(vote_hold: Duration) -> MeshConfig {
    MeshConfig {
        abandon_after: None,
        vote_hold,
        ..MeshConfig::default()
    }
}

/// Hands `to` a datagram "from" `claimed` whose only message is a vote
/// against `C`.
fn forge(net: &mut Net, claimed: usize, to: usize) {
    let vote = [Message::Abandon(Abandon {
        votes: vec![PlayerId(C as u16)],
        frozen: vec![],
        endorsements: vec![],
    })];
    let d = datagram(net.s[to].frame(), &vote);
    let now = net.now;
    net.s[to]
        .handle_datagram(PeerId(claimed as u32), &d, now)
        .expect("taken");
}

fn warmed_up(vote_hold: Duration) -> Net {
    let mut net = Net::new(4, &config(vote_hold));
    for _ in 0..60 {
        net.tick(&mut |f, t, b, _| vec![(f, t, b)]);
    }
    net
}

/// Which peers gave the target's seat up.
fn abandoned_target(net: &Net) -> Vec<usize> {
    (0..4)
        .filter(|&i| net.s[i].abandoned().iter().any(|(p, _)| p.index() == C))
        .collect()
}

/// The attacker votes against C for real and forges, once, a vote to each
/// peer in another honest peer's name; or (`every_tick`) again before
/// every tick. Returns which peers gave C up, and C's frames over 300 ticks.
fn seated_forger(vote_hold: Duration, every_tick: bool) -> (Vec<usize>, usize) {
    let mut net = warmed_up(vote_hold);
    net.s[A].abandon(PlayerId(C as u16)).expect("a vote");
    net.tick(&mut |f, t, b, _| vec![(f, t, b)]);
    let start = net.frames[0].len();
    for k in 0..300 {
        if k == 0 || every_tick {
            forge(&mut net, 1, 0);
            forge(&mut net, 0, 1);
            forge(&mut net, 0, A);
        }
        net.tick(&mut |f, t, b, _| vec![(f, t, b)]);
    }
    (abandoned_target(&net), net.frames[0].len() - start)
}

/// One forged datagram per honest peer, with the attacker's own vote:
/// taken at once and then held, it froze C everywhere for long enough to
/// decide it, and an honest, connected player was voted out (found in
/// review). The next honest datagram of the peer named takes the forged
/// vote back before it has stood for `vote_hold`.
#[test]
fn one_forged_vote_per_peer_does_not_vote_an_honest_player_out() {
    let (out, frames) = seated_forger(Duration::ZERO, false);
    assert_eq!(
        out,
        Vec::<usize>::new(),
        "no hold either way: nobody decides"
    );
    let (out, played) = seated_forger(MeshConfig::default().vote_hold, false);
    assert_eq!(out, Vec::<usize>::new(), "C abandoned by {out:?}");
    assert!(played + 5 >= frames, "the match plays on: {played} frames");
}

/// The same forgeries before every tick: the forged votes are never the
/// latest word for `vote_hold`, so nothing freezes; with every datagram
/// taken at once the same flood stalls the honest peers.
#[test]
fn forged_votes_before_every_tick_freeze_nothing() {
    let (out, played) = seated_forger(MeshConfig::default().vote_hold, true);
    assert_eq!(out, Vec::<usize>::new(), "C abandoned by {out:?}");
    assert!(played >= 290, "peer 0 ran {played} frames of 300");
}

/// Someone without a seat, who knows the peers' addresses, forges once to
/// each of peers 0, 1 and 3 a vote from each of the other two (six
/// datagrams).
#[test]
fn six_forged_datagrams_from_no_seat_vote_nobody_out() {
    let mut net = warmed_up(MeshConfig::default().vote_hold);
    for to in [0, 1, A] {
        for claimed in [0, 1, A] {
            if claimed != to {
                forge(&mut net, claimed, to);
            }
        }
    }
    for _ in 0..300 {
        net.tick(&mut |f, t, b, _| vec![(f, t, b)]);
    }
    assert_eq!(abandoned_target(&net), Vec::<usize>::new());
    for i in 0..4 {
        assert!(
            net.frames[i].len() >= 350,
            "{i} ran {}",
            net.frames[i].len()
        );
    }
}

/// The attacker votes for real and, once a second, forges one vote to
/// peer 1 in peer 0's name. Taken at once and held, each forgery froze C at
/// peer 1 for a second and stalled the whole mesh (82 frames in 600 ticks
/// at peer 1, found in review); now peer 1 never freezes C.
#[test]
fn one_forged_vote_a_second_stalls_nobody() {
    let mut net = warmed_up(MeshConfig::default().vote_hold);
    net.s[A].abandon(PlayerId(C as u16)).expect("a vote");
    let start: Vec<usize> = (0..4).map(|i| net.frames[i].len()).collect();
    for k in 0..600 {
        if k % 30 == 0 {
            forge(&mut net, 0, 1);
        }
        net.tick(&mut |f, t, b, _| vec![(f, t, b)]);
    }
    assert_eq!(abandoned_target(&net), Vec::<usize>::new());
    for (i, start) in start.into_iter().enumerate() {
        let ran = net.frames[i].len() - start;
        assert!(ran >= 590, "{i} ran {ran} frames of 600");
    }
}

/// `players` honest players (and, with `seated`, peer `A` voting against
/// C for real): after every datagram from a voter to a peer, a vote
/// against C follows in the voter's name. Returns which peers gave C up,
/// and what each ran in the 600 ticks of the attack.
fn chase(players: usize, seated: bool) -> (Vec<usize>, Vec<usize>) {
    let mut net = Net::new(players, &config(MeshConfig::default().vote_hold));
    for _ in 0..60 {
        net.tick(&mut |f, t, b, _| vec![(f, t, b)]);
    }
    if seated {
        net.s[A].abandon(PlayerId(C as u16)).expect("a vote");
    }
    let vote = [Message::Abandon(Abandon {
        votes: vec![PlayerId(C as u16)],
        frozen: vec![],
        endorsements: vec![],
    })];
    let start: Vec<usize> = net.frames.iter().map(Vec::len).collect();
    for _ in 0..600 {
        net.tick(&mut |f, t, b, n: &Net| {
            let mut out = vec![(f, t, b)];
            if f != C && t != C && !(seated && f == A) {
                out.push((f, t, datagram(n.s[t].frame(), &vote)));
            }
            out
        });
    }
    let out = (0..players)
        .filter(|&i| net.s[i].abandoned().iter().any(|(p, _)| p.index() == C))
        .collect();
    let ran = net
        .frames
        .iter()
        .zip(start)
        .map(|(f, s)| f.len() - s)
        .collect();
    (out, ran)
}

/// Six players and someone with no seat forging a vote after every
/// datagram of every voter. With the hold on the count of votes, the other
/// voters' forged votes were each peer's latest word whenever one voter's
/// honest datagram came, so the majority never lapsed, the hold ran out,
/// and all six gave C up (found in the second review). Counted per voter,
/// a vote stands only once all of that voter's datagrams carried it.
#[test]
fn forged_votes_after_every_voters_every_datagram_vote_nobody_out() {
    let (out, ran) = chase(6, false);
    assert_eq!(out, Vec::<usize>::new(), "C abandoned; ran {ran:?}");
    assert!(ran.iter().all(|&r| r >= 590), "{ran:?}");
}

/// The same chase in a four-player mesh, beside the attacker's real vote.
#[test]
fn a_seated_voter_chasing_every_datagram_freezes_nothing() {
    let (out, ran) = chase(4, true);
    assert_eq!(out, Vec::<usize>::new(), "C abandoned; ran {ran:?}");
    assert!(ran.iter().all(|&r| r >= 590), "{ran:?}");
}

/// Three players; someone with no seat hands player 0 one datagram in each
/// other player's name, both endorsing the abandonment of player 0's own
/// seat. Taken at once, player 0 emptied its own seat (its runner ended)
/// while the others, who never decided anything, waited on it until they
/// voted it out (found in the second review). Now another player's word
/// on our own seat counts once its datagrams have carried it for
/// `vote_hold`, and the next honest ones do not.
#[test]
fn forged_endorsements_of_a_players_own_seat_do_not_evict_it() {
    let mut net = Net::new(3, &config(MeshConfig::default().vote_hold));
    for _ in 0..60 {
        net.tick(&mut |f, t, b, _| vec![(f, t, b)]);
    }
    let from = net.s[0].frame().saturating_add(3);
    for claimed in [1, 2] {
        let endorse = [Message::Abandon(Abandon {
            votes: vec![],
            frozen: vec![],
            endorsements: vec![Endorsement {
                seat: PlayerId(0),
                from,
                digest: 0xdead_beef,
                left: false,
            }],
        })];
        let d = datagram(net.s[0].frame(), &endorse);
        let now = net.now;
        net.s[0]
            .handle_datagram(PeerId(claimed), &d, now)
            .expect("taken");
    }
    let start: Vec<usize> = net.frames.iter().map(Vec::len).collect();
    for _ in 0..300 {
        net.tick(&mut |f, t, b, _| vec![(f, t, b)]);
    }
    for (i, s) in net.s.iter().enumerate() {
        assert!(s.abandoned().is_empty(), "{i}: {:?}", s.abandoned());
        let ran = net.frames[i].len() - start[i];
        assert!(ran >= 290, "{i} ran {ran} frames of 300");
    }
}
