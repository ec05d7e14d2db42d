//! Device-path tests' helpers: every rank of an in-memory group on its own thread with its own
//! device runtime (the CUDA and NCCL twins), and device buffers as calls take them.

use dtcomm::device::{DevPtr, DeviceRuntime, StreamHandle};
use dtcomm::{Communicator, DType, Options, RawBuf};

/// Options for device tests: a 20 s deadline, so that a hang fails the test instead of CI.
pub fn quick() -> Options {
    Options {
        timeout: Some(std::time::Duration::from_secs(20)),
        ..Options::default()
    }
}

/// Fails unless `started` was under 10 s ago: a failure that must come fast, not at a
/// deadline.
pub fn assert_fast(started: std::time::Instant, what: &str) {
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "{what} took {:?}: not fast",
        started.elapsed()
    );
}

/// Runs `body` on every rank of an in-memory group of `world` whose ranks use `rt(rank)`.
pub fn group<R: Send>(
    world: usize,
    opts: Options,
    rt: impl Fn(usize) -> DeviceRuntime,
    body: impl Fn(usize, &Communicator) -> R + Sync,
) -> Vec<R> {
    let comms = Communicator::in_memory(world, opts).unwrap();
    for (r, c) in comms.iter().enumerate() {
        assert!(c.set_device_runtime(rt(r)));
    }
    std::thread::scope(|s| {
        let hs: Vec<_> = comms
            .iter()
            .enumerate()
            .map(|(r, c)| {
                let body = &body;
                s.spawn(move || body(r, c))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Device memory at `p` on `device` (`n` elements of `dtype`), ordered on `stream`.
pub fn dev(p: DevPtr, n: usize, dtype: DType, device: i32, stream: StreamHandle) -> RawBuf {
    RawBuf::device(p.0 as *mut u8, n, dtype, device, stream.0)
}
