//! Collectives on CUDA device memory, NCCL-shaped: the same arguments as the host calls, then
//! the CUDA device, the caller's stream (`cudaStream_t`/`CUstream`; NULL is the legacy
//! default stream) and an optional request.
//!
//! The call is ordered after the work already queued on `stream`, and work queued on `stream`
//! afterwards is ordered after the call, whether or not the host waits. With `req` NULL the
//! function returns once the call finished on the device; with a request it returns at once
//! (wait on the request to learn the outcome; the stream is already ordered). The engine runs
//! it on NCCL when every rank can, else by host staging (`DTCOMM_CUDA`, see
//! `docs/device-buffers.md`); errors name NCCL's code and last-error text
//! (`DTCOMM_DEVICE`).

use std::ffi::{c_int, c_void};

use dtcomm::{Call, RawBuf};

use crate::ops;
use crate::status::{Fail, invalid};
use crate::types::*;

/// `call` with every buffer moved to `device`'s memory, ordered on `stream`.
fn on_device(f: &str, call: Call, device: c_int, stream: *mut c_void) -> Result<Call, Fail> {
    if device < 0 {
        return Err(invalid(f, format!("device {device} is negative")));
    }
    let dev = |b: RawBuf| RawBuf::device(b.ptr(), b.count(), b.dtype(), device, stream as u64);
    Ok(Call {
        send: call.send.map(dev),
        recv: call.recv.map(dev),
        ..call
    })
}

fn request(req: *mut dtcomm_request_t) -> Option<*mut dtcomm_request_t> {
    (!req.is_null()).then_some(req)
}

/// [`dtcomm_all_reduce`](crate::ops::dtcomm_all_reduce) on device memory of `device`, ordered
/// on `stream`; `req` NULL blocks until done on the device.
///
/// # Safety
/// Device buffers valid for `count` elements until the call is done on the device; `stream` a
/// stream of `device` or NULL; `req` NULL or valid for a write.
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_cuda_all_reduce(
    comm: dtcomm_comm_t,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: dtcomm_dtype_t,
    op: dtcomm_op_t,
    device: c_int,
    stream: *mut c_void,
    req: *mut dtcomm_request_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_cuda_all_reduce";
    ops::go(F, comm, request(req), |_| {
        on_device(
            F,
            ops::all_reduce(F, send, recv, count, dtype, op)?,
            device,
            stream,
        )
    })
}

/// [`dtcomm_broadcast`](crate::ops::dtcomm_broadcast) on device memory.
///
/// # Safety
/// As for [`dtcomm_cuda_all_reduce`].
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_cuda_broadcast(
    comm: dtcomm_comm_t,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: dtcomm_dtype_t,
    root: c_int,
    device: c_int,
    stream: *mut c_void,
    req: *mut dtcomm_request_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_cuda_broadcast";
    ops::go(F, comm, request(req), |_| {
        on_device(
            F,
            ops::broadcast(F, send, recv, count, dtype, root)?,
            device,
            stream,
        )
    })
}

/// [`dtcomm_reduce`](crate::ops::dtcomm_reduce) on device memory.
///
/// # Safety
/// As for [`dtcomm_cuda_all_reduce`].
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_cuda_reduce(
    comm: dtcomm_comm_t,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: dtcomm_dtype_t,
    op: dtcomm_op_t,
    root: c_int,
    device: c_int,
    stream: *mut c_void,
    req: *mut dtcomm_request_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_cuda_reduce";
    ops::go(F, comm, request(req), |_| {
        on_device(
            F,
            ops::reduce(F, send, recv, count, dtype, op, root)?,
            device,
            stream,
        )
    })
}

/// [`dtcomm_all_gather`](crate::ops::dtcomm_all_gather) on device memory.
///
/// # Safety
/// As for [`dtcomm_cuda_all_reduce`] (`recv` holds `sendcount * size` elements).
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_cuda_all_gather(
    comm: dtcomm_comm_t,
    send: *const c_void,
    recv: *mut c_void,
    sendcount: usize,
    dtype: dtcomm_dtype_t,
    device: c_int,
    stream: *mut c_void,
    req: *mut dtcomm_request_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_cuda_all_gather";
    ops::go(F, comm, request(req), |c| {
        on_device(
            F,
            ops::all_gather(F, c, send, recv, sendcount, dtype)?,
            device,
            stream,
        )
    })
}

/// [`dtcomm_reduce_scatter`](crate::ops::dtcomm_reduce_scatter) on device memory.
///
/// # Safety
/// As for [`dtcomm_cuda_all_reduce`] (`send` holds `recvcount * size` elements).
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_cuda_reduce_scatter(
    comm: dtcomm_comm_t,
    send: *const c_void,
    recv: *mut c_void,
    recvcount: usize,
    dtype: dtcomm_dtype_t,
    op: dtcomm_op_t,
    device: c_int,
    stream: *mut c_void,
    req: *mut dtcomm_request_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_cuda_reduce_scatter";
    ops::go(F, comm, request(req), |c| {
        on_device(
            F,
            ops::reduce_scatter(F, c, send, recv, recvcount, dtype, op)?,
            device,
            stream,
        )
    })
}

/// [`dtcomm_all_to_all`](crate::ops::dtcomm_all_to_all) on device memory (on NCCL, a group of
/// sends and receives).
///
/// # Safety
/// As for [`dtcomm_cuda_all_reduce`] (`count * size` elements each way).
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_cuda_all_to_all(
    comm: dtcomm_comm_t,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: dtcomm_dtype_t,
    device: c_int,
    stream: *mut c_void,
    req: *mut dtcomm_request_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_cuda_all_to_all";
    ops::go(F, comm, request(req), |c| {
        on_device(
            F,
            ops::all_to_all(F, c, send, recv, count, dtype)?,
            device,
            stream,
        )
    })
}

/// [`dtcomm_send`](crate::ops::dtcomm_send) from device memory (host staging).
///
/// # Safety
/// As for [`dtcomm_cuda_all_reduce`].
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_cuda_send(
    comm: dtcomm_comm_t,
    buf: *const c_void,
    count: usize,
    dtype: dtcomm_dtype_t,
    peer: c_int,
    device: c_int,
    stream: *mut c_void,
    req: *mut dtcomm_request_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_cuda_send";
    ops::go(F, comm, request(req), |_| {
        on_device(
            F,
            ops::p2p(F, true, buf, count, dtype, peer)?,
            device,
            stream,
        )
    })
}

/// [`dtcomm_recv`](crate::ops::dtcomm_recv) into device memory (host staging).
///
/// # Safety
/// As for [`dtcomm_cuda_all_reduce`].
#[allow(clippy::too_many_arguments)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_cuda_recv(
    comm: dtcomm_comm_t,
    buf: *mut c_void,
    count: usize,
    dtype: dtcomm_dtype_t,
    peer: c_int,
    device: c_int,
    stream: *mut c_void,
    req: *mut dtcomm_request_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_cuda_recv";
    ops::go(F, comm, request(req), |_| {
        on_device(
            F,
            ops::p2p(F, false, buf, count, dtype, peer)?,
            device,
            stream,
        )
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use dtcomm::device::twin::{self, MemGpu, MemNccl};
    use dtcomm::device::{DeviceApi, StreamHandle};
    use dtcomm::{Communicator, Options};

    use super::*;
    use crate::handles::{self, Comm};

    /// In-memory ranks behind C handles, each with the twins of CUDA and NCCL.
    fn handles(world: usize, gpu: &MemGpu, nccl: Option<&MemNccl>) -> Vec<dtcomm_comm_t> {
        Communicator::in_memory(world, Options::default())
            .unwrap()
            .into_iter()
            .map(|c| {
                assert!(c.set_device_runtime(twin::runtime(gpu, nccl)));
                handles::add_comm(Comm {
                    comm: Arc::new(c),
                    local_rank: 0,
                    _server: None,
                    member: Default::default(),
                })
            })
            .collect()
    }

    #[test]
    fn device_calls_run_on_nccl_and_by_staging_blocking_and_with_a_request() {
        for with_nccl in [true, false] {
            let world = 3;
            let gpu = MemGpu::new(world);
            let nccl = MemNccl::new(&gpu);
            let hs = handles(world, &gpu, with_nccl.then_some(&nccl));
            std::thread::scope(|s| {
                for (rank, h) in hs.iter().copied().enumerate() {
                    let gpu = &gpu;
                    s.spawn(move || {
                        let d = rank as i32;
                        let stream = gpu.new_stream(d).unwrap();
                        let sp = stream.0 as *mut c_void;
                        let p = gpu.upload(d, &[rank as f32 + 1.0; 4]);
                        // SAFETY: `p` is a live allocation of 4 `f32` on device `d` of the
                        // in-memory GPU twin this communicator's device runtime was set to; the
                        // twin resolves device addresses through its own allocation table (checked,
                        // never dereferenced as host memory), and `sp` is a stream of that device.
                        // `req` is NULL, so the call blocks until the result is in `p`.
                        let rc = unsafe {
                            dtcomm_cuda_all_reduce(
                                h,
                                std::ptr::null(),
                                p.0 as *mut c_void,
                                4,
                                DTCOMM_FLOAT32,
                                DTCOMM_SUM,
                                d,
                                sp,
                                std::ptr::null_mut(),
                            )
                        };
                        assert_eq!(rc, DTCOMM_SUCCESS);
                        assert_eq!(gpu.download::<f32>(p, 4), vec![6.0; 4]);
                        let out = gpu.alloc(d, 4 * world);
                        let mut req: dtcomm_request_t = 0;
                        // SAFETY: as above for `p` (1 element read) and `out` (a twin allocation of
                        // `4 * world` bytes, the `world` `f32` the gather writes); `req` is a live
                        // local the call writes the request handle to, and `p` and `out` stay
                        // allocated until the request is waited for below.
                        let rc = unsafe {
                            dtcomm_cuda_all_gather(
                                h,
                                p.0 as *const c_void,
                                out.0 as *mut c_void,
                                1,
                                DTCOMM_FLOAT32,
                                d,
                                sp,
                                &mut req,
                            )
                        };
                        assert_eq!(rc, DTCOMM_SUCCESS);
                        assert_eq!(crate::request::dtcomm_wait(req, 10.0), DTCOMM_SUCCESS);
                        gpu.sync(d, StreamHandle(stream.0)).unwrap();
                        assert_eq!(gpu.download::<f32>(out, world), vec![6.0; world]);
                        crate::request::dtcomm_request_free(req);
                        // SAFETY: the negative device is refused while the arguments are checked,
                        // before any buffer or the stream is touched; the pointers are the same
                        // live twin allocations as above anyway.
                        let rc = unsafe {
                            dtcomm_cuda_broadcast(
                                h,
                                std::ptr::null(),
                                p.0 as *mut c_void,
                                4,
                                DTCOMM_FLOAT32,
                                0,
                                -1,
                                sp,
                                std::ptr::null_mut(),
                            )
                        };
                        assert_eq!(rc, DTCOMM_INVALID_ARGUMENT, "a negative device");
                    });
                }
            });
            assert_eq!(
                gpu.copies() > 0,
                !with_nccl,
                "staging copies only without NCCL"
            );
            for h in hs {
                crate::comm::dtcomm_comm_destroy(h);
            }
        }
    }
}
