//! Fuzzes the native codec: frames split at arbitrary points, validated rkyv archives, and
//! the rendezvous machine fed whatever decodes (no panics, no unbounded buffering).
#![no_main]

use std::time::{Duration, Instant};

use dt_rdzv_proto::native::{FrameReader, decode_client, decode_server};
use dt_rdzv_proto::rendezvous::{Input, MachineConfig, RendezvousMachine};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = decode_server(data);
    let mut machine = RendezvousMachine::new(MachineConfig {
        token: Some("t".into()),
        ..MachineConfig::default()
    });
    let t0 = Instant::now();
    machine.handle(t0, Input::Connected { conn: 1, observed_ip: "127.0.0.1".into() });
    let mut reader = FrameReader::new(1 << 16);
    // The first byte picks a split point, to exercise partial frames.
    let split = data.first().map_or(0, |b| *b as usize).min(data.len());
    for chunk in [&data[..split], &data[split..]] {
        reader.push(chunk);
        loop {
            match reader.next_payload() {
                Ok(Some(p)) => match decode_client(&p) {
                    Ok(msg) => machine.handle(t0, Input::Message { conn: 1, msg }),
                    Err(error) => {
                        machine.handle(t0, Input::Malformed { conn: 1, error });
                        return;
                    }
                },
                Ok(None) => break,
                Err(error) => {
                    machine.handle(t0, Input::Malformed { conn: 1, error });
                    return;
                }
            }
        }
    }
    machine.handle_timeout(t0 + Duration::from_secs(3600));
    while machine.poll_action().is_some() {}
});
