//! Feeds arbitrary bytes, cut into arbitrary segments, through the TCPStore decoder and into
//! the store engine, as the server would. The first byte picks the segment size, the rest is
//! the stream. Checked besides "no panic":
//!
//! * the segmented stream decodes to exactly what the whole stream decodes to (same requests,
//!   same error, same bytes left over): the decoder keeps no state between calls;
//! * every decoded request re-encodes to exactly the bytes it was decoded from;
//! * `Incomplete { need }` asks for more than is buffered, and never more than one frame.
//!
//! Run: `scripts/fuzz.sh`, or `RUSTC_BOOTSTRAP=1 cargo fuzz run tcpstore_decode`.
#![no_main]

use std::time::Instant;

use dt_rdzv_proto::tcpstore::{
    DecodeError, Decoded, Engine, EngineConfig, Input, Limits, Request, VALIDATE_MAGIC, decode,
};
use libfuzzer_sys::fuzz_target;

/// What a stream decodes to: the requests, then either an error or the bytes left waiting.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    requests: Vec<Request>,
    end: Result<Vec<u8>, DecodeError>,
}

/// Decodes `chunks` as they arrive, as a driver with one buffer per connection does.
fn decode_stream<'a>(chunks: impl IntoIterator<Item = &'a [u8]>, limits: &Limits) -> Outcome {
    let mut requests = Vec::new();
    let mut buf = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        loop {
            match decode(&buf, limits) {
                Ok(Decoded::Complete(req, used)) => {
                    assert!(
                        0 < used && used <= buf.len(),
                        "used {used} of {}",
                        buf.len()
                    );
                    assert_eq!(req.encode(), buf[..used], "re-encoding {req:?}");
                    buf.drain(..used);
                    requests.push(req);
                }
                Ok(Decoded::Incomplete { need }) => {
                    assert!(need > buf.len(), "need {need} with {} buffered", buf.len());
                    assert!(
                        need as u64 <= limits.max_frame_bytes,
                        "need {need} over the frame limit"
                    );
                    break;
                }
                Err(e) => {
                    return Outcome {
                        requests,
                        end: Err(e),
                    };
                }
            }
        }
    }
    Outcome {
        requests,
        end: Ok(buf),
    }
}

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_frame_bytes: 1 << 16,
        ..Limits::default()
    };
    let Some((&seg, stream)) = data.split_first() else {
        return;
    };
    let seg = usize::from(seg).max(1);
    let whole = decode_stream([stream], &limits);
    let segmented = decode_stream(stream.chunks(seg), &limits);
    assert_eq!(whole, segmented, "segments of {seg} bytes");

    let mut engine = Engine::new(EngineConfig::default());
    let now = Instant::now();
    engine.handle(now, Input::Connected { conn: 1 });
    let validate = Request::Validate {
        magic: VALIDATE_MAGIC,
    };
    engine.handle(
        now,
        Input::Request {
            conn: 1,
            request: validate,
        },
    );
    for request in segmented.requests {
        engine.handle(now, Input::Request { conn: 1, request });
        while engine.poll_action().is_some() {}
    }
    engine.handle(now, Input::Closed { conn: 1 });
    engine.handle_timeout(now + std::time::Duration::from_secs(3600));
    while engine.poll_action().is_some() {}
});
