//! Raw bytes into the datagram decoder, from any reference tick; whatever
//! decodes must re-encode to a datagram that decodes the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use lockstep_core::Tick;
use lockstep_core::wire::{Datagram, DatagramWriter, Message};

fuzz_target!(|data: &[u8]| {
    let (reference, bytes) = match data {
        [a, b, c, d, rest @ ..] => (u32::from_le_bytes([*a, *b, *c, *d]), rest),
        _ => return,
    };
    let Ok(d) = Datagram::decode(bytes, Tick::new(reference)) else {
        return;
    };
    let mut out = Vec::new();
    let mut w = DatagramWriter::new(&mut out, d.base, usize::MAX);
    for m in &d.messages {
        w.push(m).expect("a decoded message re-encodes");
    }
    w.finish();
    let again = Datagram::decode(&out, d.base).expect("re-encoded datagram decodes");
    assert_eq!(again.messages, d.messages);
    // Typed payloads decode or fail cleanly.
    for m in &d.messages {
        match m {
            Message::Inputs(i) => {
                for r in &i.runs {
                    let _ = r.decode::<u16>(None);
                    let _ = r.decode::<u16>(Some(&7));
                    let _ = r.decode::<lockstep_core::PlayerInputs>(None);
                    let _ = r.decode::<lockstep_core::PlayerInputs>(Some(
                        &lockstep_core::PlayerInputs::default().with_button(1, true),
                    ));
                }
            }
            Message::Frames(f) => {
                let _ = f.decode::<Vec<u8>>(None);
                let _ = f.decode::<Vec<u8>>(Some(&[Some(vec![1]), None]));
            }
            _ => {}
        }
    }
});
