//! Fuzzes the native codec and the rendezvous machine behind it. The first byte picks a split
//! point, the rest is what one client sends. Checked besides "no panic":
//!
//! * the stream read as frames in two pieces (cut at the split point) gives the same payloads
//!   and the same error as the stream read whole, and a reader waiting for more holds less
//!   than one largest frame;
//! * every payload that validates as a `ClientMsg` or a `ServerMsg` re-encodes to a frame
//!   that decodes to the same message, and so does every message the machine sends;
//! * the rendezvous machine, fed the client messages on one connection, then its next few
//!   deadlines, the connection's end and an hour of deadlines, does not panic.
//!
//! Run: `scripts/fuzz.sh`, or `RUSTC_BOOTSTRAP=1 cargo fuzz run native_decode`.
#![no_main]

use std::time::{Duration, Instant};

use dt_rdzv_proto::native::codec::HEADER_LEN;
use dt_rdzv_proto::native::{
    ClientMsg, CodecError, FrameReader, ServerMsg, decode_client, decode_server, encode_client,
    encode_server,
};
use dt_rdzv_proto::rendezvous::{Action, Input, MachineConfig, RendezvousMachine};
use libfuzzer_sys::fuzz_target;

const MAX_PAYLOAD: u32 = 1 << 16;

/// Reads `chunks` as frames as they arrive: the payloads, then the error that ended the stream.
fn frames(chunks: &[&[u8]]) -> (Vec<Vec<u8>>, Option<CodecError>) {
    let mut reader = FrameReader::new(MAX_PAYLOAD);
    let mut payloads = Vec::new();
    for chunk in chunks {
        reader.push(chunk);
        loop {
            match reader.next_payload() {
                Ok(Some(p)) => payloads.push(p),
                Ok(None) => {
                    assert!(reader.buffered() < HEADER_LEN + MAX_PAYLOAD as usize);
                    break;
                }
                Err(e) => return (payloads, Some(e)),
            }
        }
    }
    (payloads, None)
}

/// The one payload of a frame the codec wrote.
fn only_payload(frame: &[u8]) -> Vec<u8> {
    let mut reader = FrameReader::new(u32::MAX);
    reader.push(frame);
    let payload = reader
        .next_payload()
        .expect("our frame")
        .expect("a whole frame");
    assert_eq!(reader.buffered(), 0, "one frame, nothing after it");
    payload
}

fn client_round_trip(msg: &ClientMsg) {
    let again = decode_client(&only_payload(&encode_client(msg))).expect("re-decodes");
    assert_eq!(&again, msg);
}

fn server_round_trip(msg: &ServerMsg) {
    let again = decode_server(&only_payload(&encode_server(msg))).expect("re-decodes");
    assert_eq!(&again, msg);
}

fn drain(machine: &mut RendezvousMachine) {
    while let Some(action) = machine.poll_action() {
        if let Action::Send { msg, .. } = action {
            server_round_trip(&msg);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, stream)) = data.split_first() else {
        return;
    };
    let split = usize::from(split).min(stream.len());
    let (payloads, error) = frames(&[stream]);
    let (payloads2, error2) = frames(&[&stream[..split], &stream[split..]]);
    assert_eq!(payloads, payloads2, "split at {split}");
    match (&error, &error2) {
        // A partial header is checked against the magic as far as it goes; the error names
        // the bytes seen so far.
        (Some(CodecError::BadMagic(_)), Some(CodecError::BadMagic(_))) => {}
        _ => assert_eq!(error, error2, "split at {split}"),
    }

    let mut machine = RendezvousMachine::new(MachineConfig {
        token: Some("t".into()),
        ..MachineConfig::default()
    });
    let t0 = Instant::now();
    machine.handle(
        t0,
        Input::Connected {
            conn: 1,
            observed_ip: "127.0.0.1".into(),
        },
    );
    let mut open = true;
    for p in &payloads {
        if let Ok(msg) = decode_server(p) {
            server_round_trip(&msg);
        }
        match decode_client(p) {
            Ok(msg) => {
                client_round_trip(&msg);
                machine.handle(t0, Input::Message { conn: 1, msg });
            }
            Err(error) => {
                machine.handle(t0, Input::Malformed { conn: 1, error });
                open = false;
            }
        }
        drain(&mut machine);
        if !open {
            break;
        }
    }
    let horizon = t0 + Duration::from_secs(3600);
    let mut now = deadlines(&mut machine, t0, horizon);
    if open {
        match error {
            Some(error) => machine.handle(now, Input::Malformed { conn: 1, error }),
            None => machine.handle(
                now,
                Input::Closed {
                    conn: 1,
                    why: "eof".into(),
                },
            ),
        }
        drain(&mut machine);
    }
    now = deadlines(&mut machine, now, horizon);
    machine.handle_timeout(now.max(horizon));
    drain(&mut machine);
});

/// Runs the machine's next few deadlines that fall before `horizon`, as a driver's timer
/// would; returns the time reached.
fn deadlines(machine: &mut RendezvousMachine, mut now: Instant, horizon: Instant) -> Instant {
    for _ in 0..8 {
        let Some(t) = machine.poll_timeout() else {
            break;
        };
        if t > horizon {
            break;
        }
        now = now.max(t);
        machine.handle_timeout(now);
        drain(machine);
    }
    now
}
