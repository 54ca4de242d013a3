//! Sessions over each transport, on loopback, polling with deadlines.

use lockstep_core::sequenced::{ClientConfig, ClientSession, Sequencer, SequencerConfig};
use lockstep_core::{MeshConfig, MeshSession, PeerId, PlayerId, Roster, StreamHash};
use lockstep_net::{Clock, Faults, FaultyTransport, MemoryNetwork, Transport, UdpTransport, drive};
use std::time::{Duration, Instant};

#[test]
fn a_mesh_runs_over_loopback_udp() -> Result<(), Box<dyn std::error::Error>> {
    let mut sockets: Vec<UdpTransport> = (0..3)
        .map(|_| UdpTransport::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()?;
    let addrs: Vec<_> = sockets
        .iter()
        .map(UdpTransport::local_addr)
        .collect::<Result<_, _>>()?;
    // Every socket names every peer by the same id: its index.
    for s in &mut sockets {
        for a in &addrs {
            s.add_peer(*a);
        }
    }
    let roster = (0..3).fold(Roster::new(), |r, i| {
        r.player(PeerId(i), PlayerId(i as u16))
    });
    let clock = Clock::new();
    let mut sessions: Vec<MeshSession<u32>> = (0..3)
        .map(|i| {
            MeshSession::new(
                MeshConfig::default(),
                roster.clone(),
                PeerId(i),
                clock.now(),
            )
        })
        .collect::<Result<_, _>>()?;
    let mut hashes = vec![StreamHash::new(); 3];
    let mut scratch = lockstep_net::Buffers::default();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut tick = 0u32;
    while hashes.iter().any(|h| h.frames() < 200) {
        assert!(
            Instant::now() < deadline,
            "stuck at {:?}",
            hashes.iter().map(StreamHash::frames).collect::<Vec<_>>()
        );
        for i in 0..3 {
            drive(&mut sessions[i], &mut sockets[i], clock.now(), &mut scratch)?;
            let _ = sessions[i].commit_local(tick.wrapping_mul(31) ^ i as u32);
            while let Some(f) = sessions[i].advance() {
                if hashes[i].frames() < 200 {
                    hashes[i].push(&f);
                }
            }
        }
        tick += 1;
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(hashes.iter().all(|h| h.value() == hashes[0].value()));
    Ok(())
}

#[test]
fn a_star_runs_over_an_impaired_memory_network() -> Result<(), Box<dyn std::error::Error>> {
    let net = MemoryNetwork::new();
    let server_id = PeerId(0);
    let clock = Clock::new();
    let mut server_t = net.endpoint(server_id);
    let mut server = Sequencer::<u16>::new(SequencerConfig::default(), clock.now())?;
    let faults = Faults {
        loss: 0.1,
        latency: Duration::from_millis(5),
        jitter: Duration::from_millis(3),
        duplicate: 0.05,
        reorder: 0.1,
        ..Faults::default()
    };
    let mut clients: Vec<(FaultyTransport<_>, ClientSession<u16>, StreamHash)> = (1..=3)
        .map(|i| {
            let t = FaultyTransport::new(net.endpoint(PeerId(i)), faults.clone(), u64::from(i));
            let c = ClientSession::new(ClientConfig::default(), server_id, clock.now())?;
            Ok((t, c, StreamHash::new()))
        })
        .collect::<Result<_, lockstep_core::ConfigError>>()?;
    let mut scratch = lockstep_net::Buffers::default();
    let deadline = Instant::now() + Duration::from_secs(30);
    while clients.iter().any(|(_, _, h)| h.frames() < 150) {
        assert!(Instant::now() < deadline, "stuck");
        drive(&mut server, &mut server_t, clock.now(), &mut scratch)?;
        for (k, (t, c, h)) in clients.iter_mut().enumerate() {
            drive(c, t, clock.now(), &mut scratch)?;
            let _ = c.commit_local(k as u16);
            while let Some(f) = c.advance() {
                if h.frames() < 150 {
                    h.push(&f);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let first = clients[0].2.value();
    assert!(clients.iter().all(|(_, _, h)| h.value() == first));
    Ok(())
}

#[test]
fn faults_lose_delay_and_duplicate_about_as_asked() -> Result<(), Box<dyn std::error::Error>> {
    let net = MemoryNetwork::new();
    let mut rx = net.endpoint(PeerId(2));
    let faults = Faults {
        loss: 0.2,
        latency: Duration::from_millis(20),
        duplicate: 0.1,
        ..Faults::default()
    };
    let mut tx = FaultyTransport::new(net.endpoint(PeerId(1)), faults, 7);
    let sent_at = Instant::now();
    for i in 0..1000u32 {
        tx.send(PeerId(2), &i.to_le_bytes())?;
    }
    let mut buf = [0u8; 64];
    assert_eq!(rx.recv(&mut buf)?, None, "nothing before the latency");
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && sent_at.elapsed() < Duration::from_millis(200) {
        tx.recv(&mut buf)?; // moves held datagrams on
        while rx.recv(&mut buf)?.is_some() {
            got += 1;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(sent_at.elapsed() >= Duration::from_millis(20));
    // 80% survive, 10% of those twice: about 880.
    assert!((800..960).contains(&got), "{got} datagrams arrived");
    Ok(())
}
