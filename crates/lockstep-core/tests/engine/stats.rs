//! The network figures every session reports: loss each way, bytes per
//! second each way, the tick rate achieved and the input slack, checked
//! against what the simulated network was told to do.

use crate::common;
use common::star::{SERVER, StarScenario};
use common::{Scenario, secs};
use lockstep_core::sim::{LinkConditions, Outcome};
use lockstep_core::{PeerId, Traffic};
use std::time::Duration;

fn near(what: &str, got: Option<f64>, want: f64, within: f64) {
    let got = got.unwrap_or_else(|| panic!("{what}: not measured"));
    assert!(
        (got - want).abs() <= within,
        "{what}: {got:.3}, expected {want} ± {within}"
    );
}

fn lossy(loss: f64) -> LinkConditions {
    LinkConditions {
        latency: Duration::from_millis(20),
        loss,
        ..LinkConditions::default()
    }
}

/// A mesh link losing 20% one way and nothing the other: each end reports
/// the loss on the right side, and both run close to the tick rate.
#[test]
fn a_mesh_peer_sees_the_loss_each_way() {
    let mut sc = Scenario::new(2, 3);
    sc.config.tick_rate = 30;
    sc.period = Duration::from_micros(33_333);
    let mut h = sc.build();
    h.sim.net.set_link(PeerId(0), PeerId(1), lossy(0.2));
    h.sim.net.set_link(PeerId(1), PeerId(0), lossy(0.0));
    let o = h.run(secs(90), |_, _, _, _| {}, |_| false);
    assert_eq!(o, Outcome::TimedOut);
    let a = h.session(PeerId(0)).stats();
    let b = h.session(PeerId(1)).stats();
    let (ta, tb): (Traffic, Traffic) = (a.peers[0].traffic, b.peers[0].traffic);
    near("0 -> 1 as 0 sees it", ta.loss_up, 0.2, 0.08);
    near("1 -> 0 as 0 sees it", ta.loss_down, 0.0, 0.02);
    near("1 -> 0 as 1 sees it", tb.loss_up, 0.0, 0.02);
    near("0 -> 1 as 1 sees it", tb.loss_down, 0.2, 0.08);
    for (who, st) in [("0", &a), ("1", &b)] {
        // The tick rate is the last full second's: one that ends in the
        // catch-up after a stall (a fifth of 0's datagrams are lost) runs
        // a few frames over. Over the whole run, the rate is exact.
        near(&format!("{who}'s tick rate"), st.tick_rate, 30.0, 5.0);
        let mean = st.frames as f64 / 90.0;
        near(&format!("{who}'s frames a second"), Some(mean), 30.0, 0.5);
        assert!(st.input_slack.is_some(), "{who}: no slack measured");
        let t = &st.peers[0].traffic;
        // Every datagram is counted in the byte rates: they add up.
        let (up, down) = (t.up_per_sec.unwrap_or(0.0), t.down_per_sec.unwrap_or(0.0));
        assert!(
            up > 100.0 && down > 100.0,
            "{who}: {up:.0} B/s up, {down:.0} down"
        );
    }
    assert!(
        b.peers[0].traffic.down_per_sec < a.peers[0].traffic.up_per_sec,
        "a fifth of what 0 sends never reaches 1"
    );
}

/// A client whose datagrams to the sequencer lose 10%: the client, the
/// sequencer and the sequencer's totals all see it on the way in, and
/// nothing on the way out.
#[test]
fn a_client_and_its_sequencer_see_the_loss_each_way() {
    let sc = StarScenario::new(2, 9);
    let mut h = sc.build();
    let client = sc.client_ids()[0];
    h.sim.net.set_link(client, SERVER, lossy(0.1));
    h.sim.net.set_link(SERVER, client, lossy(0.0));
    let o = h.run(secs(120), |_, _, _| {}, |_| false);
    assert_eq!(o, Outcome::TimedOut);
    let c = h.client(client).stats();
    near("client up", c.traffic.loss_up, 0.1, 0.05);
    near("client down", c.traffic.loss_down, 0.0, 0.02);
    let rate = f64::from(sc.server.tick_rate);
    near("client tick rate", c.tick_rate, rate, rate * 0.1);
    let s = h.server().traffic(client).expect("connected");
    near("to the client", s.loss_up, 0.0, 0.02);
    near("from the client", s.loss_down, 0.1, 0.05);
    let st = h.server().stats();
    assert!(
        st.datagrams_lost_in > 0 && st.datagrams_lost_out == 0,
        "{st:?}"
    );
    near("sealed per second", st.tick_rate, rate, rate * 0.1);
}

/// A client lying in its pongs (claiming it sent 16 million datagrams more
/// at each) skews its own loss figure, not the sequencer's totals beyond a
/// few times what really came.
#[test]
fn a_client_lying_in_its_pongs_cannot_inflate_the_lost_datagram_count() {
    use lockstep_core::sequenced::{ClientConfig, ClientSession, Sequencer, SequencerConfig};
    use lockstep_core::wire::{Datagram, DatagramWriter, Message};
    use lockstep_core::{Instant, Tick};
    let server_id = PeerId(0);
    let me = PeerId(1);
    let mut server =
        Sequencer::<u16>::new(SequencerConfig::default(), Instant::ZERO).expect("a room");
    let mut client = ClientSession::<u16>::new(ClientConfig::default(), server_id, Instant::ZERO)
        .expect("a client");
    let mut now = Instant::ZERO;
    let mut buf = Vec::new();
    let mut claimed: u32 = 0;
    let mut sent_for_real = 0u64;
    for _ in 0..300 {
        now += Duration::from_millis(33);
        if client.input_due() {
            let _ = client.commit_local(1);
        }
        while client.advance().is_some() {}
        client.handle_timeout(now);
        while let Some(t) = client.poll_transmit(&mut buf) {
            sent_for_real += 1;
            let mut bytes = buf[..t.len].to_vec();
            if let Ok(d) = Datagram::decode(&bytes, Tick::ZERO) {
                let mut out = Vec::new();
                let mut w = DatagramWriter::new(&mut out, d.base, 1200);
                for m in &d.messages {
                    match m {
                        Message::Pong {
                            stamp,
                            held_ms,
                            received,
                            ..
                        } => {
                            claimed = claimed.wrapping_add((1 << 24) - 1);
                            w.push(&Message::Pong {
                                stamp: *stamp,
                                held_ms: *held_ms,
                                received: *received,
                                sent: claimed,
                            })
                            .expect("room");
                        }
                        other => w.push(other).expect("room"),
                    }
                }
                w.finish();
                bytes = out;
            }
            let _ = server.handle_datagram(me, &bytes, now);
        }
        server.handle_timeout(now);
        while let Some(t) = server.poll_transmit(&mut buf) {
            let _ = client.handle_datagram(server_id, &buf[..t.len], now);
        }
    }
    let st = server.stats();
    assert!(st.datagrams_received > 100, "the client played: {st:?}");
    assert!(
        st.datagrams_lost_in <= 4 * sent_for_real,
        "{} datagrams counted lost on the way in, of {sent_for_real} sent",
        st.datagrams_lost_in
    );
}
