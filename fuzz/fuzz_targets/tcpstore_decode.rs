//! Feeds arbitrary bytes, cut into arbitrary segments, through the TCPStore decoder and into
//! the store engine, as the server would. Run: `cargo +nightly fuzz run tcpstore_decode`.
#![no_main]

use std::time::Instant;

use dt_rdzv_proto::tcpstore::{Decoded, Engine, EngineConfig, Limits, Request, VALIDATE_MAGIC, decode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits { max_frame_bytes: 1 << 16, ..Limits::default() };
    let mut engine = Engine::new(EngineConfig::default());
    let now = Instant::now();
    engine.connect(1);
    engine.handle(1, Request::Validate { magic: VALIDATE_MAGIC }, now);
    // the first byte picks the segment size, the rest is the stream
    let Some((&seg, stream)) = data.split_first() else { return };
    let seg = usize::from(seg).max(1);
    let mut buf = Vec::new();
    for chunk in stream.chunks(seg) {
        buf.extend_from_slice(chunk);
        loop {
            match decode(&buf, &limits) {
                Ok(Decoded::Complete(req, used)) => {
                    assert!(used <= buf.len());
                    buf.drain(..used);
                    engine.handle(1, req, now);
                }
                Ok(Decoded::Incomplete { need }) => {
                    assert!(need > buf.len());
                    break;
                }
                Err(_) => return,
            }
        }
        while engine.poll_action().is_some() {}
    }
});
