//! Waiting for a stream without blocking in the driver: an event recorded on it, polled with
//! back-off against a deadline (the engine's staging copies, benchmarks' fills and checks).

use std::time::{Duration, Instant};

use crate::device::api::{DeviceApi, DeviceError, StreamHandle};

/// Polling with back-off: spins a little (short waits), then sleeps up to a millisecond.
#[derive(Default)]
pub(crate) struct Backoff(u32);

impl Backoff {
    /// One pause between polls.
    pub(crate) fn pause(&mut self) {
        self.0 += 1;
        if self.0 < 64 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(u64::from(self.0.min(1000))));
        }
    }
}

/// Waits until the work queued so far on `stream` is done, polling an event, until `deadline`
/// (`waited`: the wait's whole length, for the message).
pub fn settle(
    api: &dyn DeviceApi,
    device: i32,
    stream: StreamHandle,
    deadline: Instant,
    waited: Duration,
) -> Result<(), DeviceError> {
    let ev = api.record(device, stream)?;
    let mut backoff = Backoff::default();
    while !ev.done()? {
        if Instant::now() >= deadline {
            return Err(DeviceError {
                call: "cuEventQuery",
                detail: format!(
                    "the work queued on stream {:#x} of device {device} did not finish within \
                     the call's deadline ({waited:?})",
                    stream.0
                ),
            });
        }
        backoff.pause();
    }
    Ok(())
}
