//! Feeds arbitrary bytes through the data plane's decoders (`dtcomm::fuzzing`): a data frame
//! header (whatever decodes re-encodes to the same 32 bytes) and a control stream read whole
//! and in arbitrary segments (the same messages, error or leftover bytes; each message
//! re-encodes to its bytes). The first byte picks the target, the rest is its input.
//!
//! Run: `scripts/fuzz.sh`, or `RUSTC_BOOTSTRAP=1 cargo fuzz run data_plane_decode`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        Some((k, rest)) if k % 2 == 0 => dtcomm::fuzzing::frame_header(rest),
        Some((_, rest)) => dtcomm::fuzzing::control_stream(rest),
        None => {}
    }
});
