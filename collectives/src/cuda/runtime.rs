//! The real device runtime: [`DeviceApi`] over the CUDA driver (through cudarc's raw driver
//! calls, so the caller's own streams are used as they are) and [`NcclApi`] over
//! `dtcomm-nccl-sys`.
//!
//! **Not run by the test suite** (no GPU there): the engine's device path is tested with the
//! in-memory twins, and this file is what a GPU machine runs (`scripts/test_gpu.sh`). It is
//! loaded only after the driver probe of [`cuda_status`](super::cuda_status) found
//! `libcuda.so.1` (cudarc panics without it).

use std::any::Any;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use cudarc::driver::{DriverError, result, sys};
use dtcomm_nccl_sys::bindings::{ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t};
use dtcomm_nccl_sys::{Nccl, Status};

use crate::device::api::{
    DevPtr, DeviceApi, DeviceError, DeviceEvent, DeviceRuntime, HostMemory, InitState, NcclApi,
    NcclComm, NcclError, NcclOp, StreamHandle, UniqueId,
};
use crate::dtype::DType;
use crate::op::ReduceOp;

/// CUDA and NCCL of this process, or why there are none.
pub(crate) fn load() -> Result<DeviceRuntime, String> {
    let (probe, count) = super::driver::probe();
    if let Some(e) = probe.error {
        return Err(e);
    }
    let api = CudaApi {
        devices: count.unwrap_or(0) as usize,
        contexts: Mutex::new(HashMap::new()),
    };
    let nccl = Nccl::load()
        .map(|n| Arc::new(NcclLib(Arc::new(n))) as Arc<dyn NcclApi>)
        .map_err(|e| e.to_string());
    Ok(DeviceRuntime {
        api: Arc::new(api),
        nccl,
    })
}

fn driver(call: &'static str) -> impl Fn(DriverError) -> DeviceError {
    move |e| DeviceError {
        call,
        detail: format!("{e:?}"),
    }
}

fn stream_of(s: StreamHandle) -> sys::CUstream {
    s.0 as usize as sys::CUstream
}

/// The CUDA driver, with each device's primary context made current before a call.
struct CudaApi {
    devices: usize,
    contexts: Mutex<HashMap<i32, usize>>,
}

impl CudaApi {
    /// Makes `device`'s primary context current on this thread (retaining it once).
    fn bind(&self, device: i32) -> Result<(), DeviceError> {
        let mut ctxs = self.contexts.lock().unwrap_or_else(|p| p.into_inner());
        let ctx = match ctxs.get(&device) {
            Some(c) => *c as sys::CUcontext,
            None => {
                let dev = result::device::get(device).map_err(driver("cuDeviceGet"))?;
                // SAFETY: `dev` came from cuDeviceGet.
                let ctx = unsafe { result::primary_ctx::retain(dev) }
                    .map_err(driver("cuDevicePrimaryCtxRetain"))?;
                ctxs.insert(device, ctx as usize);
                ctx
            }
        };
        // SAFETY: a retained primary context.
        unsafe { result::ctx::set_current(ctx) }.map_err(driver("cuCtxSetCurrent"))
    }
}

struct Event(sys::CUevent);

// SAFETY: CUDA events may be used from any thread of the process.
unsafe impl Send for Event {}
// SAFETY: as above; queries do not mutate.
unsafe impl Sync for Event {}

impl DeviceEvent for Event {
    fn done(&self) -> Result<bool, DeviceError> {
        // SAFETY: a live event of this process.
        match unsafe { result::event::query(self.0) } {
            Ok(()) => Ok(true),
            Err(DriverError(sys::CUresult::CUDA_ERROR_NOT_READY)) => Ok(false),
            Err(e) => Err(driver("cuEventQuery")(e)),
        }
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: destroyed once; CUDA defers the release until the event completed.
        let _ = unsafe { result::event::destroy(self.0) };
    }
}

/// Page-locked host memory (`cuMemHostAlloc`), so staging copies run at full speed.
struct Pinned {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: plain host memory owned by this value.
unsafe impl Send for Pinned {}

impl HostMemory for Pinned {
    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: `len` bytes allocated by cuMemHostAlloc, owned here.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc and freed once.
        let _ = unsafe { result::free_host(self.ptr.cast()) };
    }
}

/// Device memory from `cuMemAlloc`, freed with its context current.
struct DeviceAlloc {
    ptr: sys::CUdeviceptr,
    len: usize,
    ctx: usize,
}

// SAFETY: a device address; freed once, from whichever thread drops it.
unsafe impl Send for DeviceAlloc {}

impl crate::device::DeviceMemory for DeviceAlloc {
    fn ptr(&self) -> DevPtr {
        DevPtr(self.ptr)
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        // SAFETY: the retained primary context it was allocated in; freed once.
        unsafe {
            let _ = result::ctx::set_current(self.ctx as sys::CUcontext);
            let _ = result::free_sync(self.ptr);
        }
    }
}

impl DeviceApi for CudaApi {
    fn device_memory(
        &self,
        device: i32,
        bytes: usize,
    ) -> Result<Box<dyn crate::device::DeviceMemory>, DeviceError> {
        self.bind(device)?;
        let ctx = *self
            .contexts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&device)
            .expect("bound above");
        // SAFETY: a plain allocation with the device's context current (at least one byte).
        let ptr = unsafe { result::malloc_sync(bytes.max(1)) }.map_err(driver("cuMemAlloc"))?;
        Ok(Box::new(DeviceAlloc {
            ptr,
            len: bytes,
            ctx,
        }))
    }

    fn describe(&self) -> String {
        format!("CUDA driver, {} devices", self.devices)
    }

    fn device_count(&self) -> Result<usize, DeviceError> {
        Ok(self.devices)
    }

    fn new_stream(&self, device: i32) -> Result<StreamHandle, DeviceError> {
        self.bind(device)?;
        let s = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(driver("cuStreamCreate"))?;
        Ok(StreamHandle(s as usize as u64))
    }

    fn record(
        &self,
        device: i32,
        stream: StreamHandle,
    ) -> Result<Box<dyn DeviceEvent>, DeviceError> {
        self.bind(device)?;
        let ev = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .map_err(driver("cuEventCreate"))?;
        let ev = Event(ev);
        // SAFETY: a live event and the caller's stream of this device.
        unsafe { result::event::record(ev.0, stream_of(stream)) }
            .map_err(driver("cuEventRecord"))?;
        Ok(Box::new(ev))
    }

    fn wait(
        &self,
        device: i32,
        stream: StreamHandle,
        event: &dyn DeviceEvent,
    ) -> Result<(), DeviceError> {
        let ev = event
            .as_any()
            .downcast_ref::<Event>()
            .ok_or_else(|| DeviceError {
                call: "cuStreamWaitEvent",
                detail: "not a CUDA event of this runtime".into(),
            })?;
        self.bind(device)?;
        // SAFETY: a live event and stream.
        unsafe {
            result::stream::wait_event(
                stream_of(stream),
                ev.0,
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        }
        .map_err(driver("cuStreamWaitEvent"))
    }

    unsafe fn to_host(
        &self,
        device: i32,
        stream: StreamHandle,
        src: DevPtr,
        dst: *mut u8,
        len: usize,
    ) -> Result<(), DeviceError> {
        self.bind(device)?;
        // SAFETY: the caller's contract on `dst`; `src` is device memory of the call.
        unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast::<c_void>(), src.0, len, stream_of(stream)) }
            .result()
            .map_err(driver("cuMemcpyDtoHAsync"))
    }

    unsafe fn to_device(
        &self,
        device: i32,
        stream: StreamHandle,
        src: *const u8,
        dst: DevPtr,
        len: usize,
    ) -> Result<(), DeviceError> {
        self.bind(device)?;
        // SAFETY: the caller's contract on `src`; `dst` is device memory of the call.
        unsafe { sys::cuMemcpyHtoDAsync_v2(dst.0, src.cast::<c_void>(), len, stream_of(stream)) }
            .result()
            .map_err(driver("cuMemcpyHtoDAsync"))
    }

    fn host_memory(&self, bytes: usize) -> Result<Box<dyn HostMemory>, DeviceError> {
        if bytes == 0 {
            return Ok(Box::new(Vec::<u64>::new()));
        }
        self.bind(0)?;
        // SAFETY: a plain allocation with a context current. PORTABLE (1): usable from every context, whichever device the call is on.
        let ptr = unsafe { result::malloc_host(bytes, 1) }.map_err(driver("cuMemHostAlloc"))?;
        Ok(Box::new(Pinned {
            ptr: ptr.cast(),
            len: bytes,
        }))
    }
}

/// NCCL as loaded by `dtcomm-nccl-sys`.
struct NcclLib(Arc<Nccl>);

fn nccl_error(e: dtcomm_nccl_sys::NcclError) -> NcclError {
    match e {
        dtcomm_nccl_sys::NcclError::Failed {
            function,
            code,
            message,
            last_error,
        } => NcclError {
            call: function,
            code: code.0,
            name: dtcomm_nccl_sys::result::code_name(code),
            text: message,
            last: (!last_error.is_empty()).then_some(last_error),
        },
        other => NcclError {
            call: "nccl",
            code: ncclResult_t::ncclInvalidUsage.0,
            name: "ncclInvalidUsage",
            text: other.to_string(),
            last: None,
        },
    }
}

/// NCCL's type for `d` and how many of it make one element. NCCL has no 16-bit integer,
/// complex or bool type: int16 moves as byte pairs, a complex number as two floats of its
/// component type, a bool as a byte. Which reductions survive that is [`nccl_op`]'s answer.
fn nccl_dtype(d: DType) -> (ncclDataType_t, usize) {
    let t = match d {
        DType::F32 => ncclDataType_t::ncclFloat32,
        DType::F64 => ncclDataType_t::ncclFloat64,
        DType::F16 => ncclDataType_t::ncclFloat16,
        DType::BF16 => ncclDataType_t::ncclBfloat16,
        DType::I8 => ncclDataType_t::ncclInt8,
        DType::U8 | DType::Bool => ncclDataType_t::ncclUint8,
        DType::I32 => ncclDataType_t::ncclInt32,
        DType::I64 => ncclDataType_t::ncclInt64,
        DType::I16 => return (ncclDataType_t::ncclUint8, 2),
        DType::C64 => return (ncclDataType_t::ncclFloat32, 2),
        DType::C128 => return (ncclDataType_t::ncclFloat64, 2),
    };
    (t, 1)
}

/// NCCL's operator for reducing `dtype` by `op` on [`nccl_dtype`]'s type, or `None` where NCCL
/// cannot compute it: a complex sum (and mean) is the sum of its float components but its
/// product is not; bools are 0/1 bytes, whose or (`Sum`, `Max`) is a byte maximum and whose and
/// (`Prod`, `Min`) a byte minimum; int16 has no NCCL type; NCCL has no bitwise operators.
fn nccl_op(op: ReduceOp, dtype: DType) -> Option<ncclRedOp_t> {
    type R = ncclRedOp_t;
    match (dtype, op) {
        (_, ReduceOp::Band | ReduceOp::Bor | ReduceOp::Bxor) | (DType::I16, _) => None,
        (DType::C64 | DType::C128, ReduceOp::Sum) => Some(R::ncclSum),
        (DType::C64 | DType::C128, ReduceOp::Avg) => Some(R::ncclAvg),
        (DType::C64 | DType::C128, _) => None,
        (DType::Bool, ReduceOp::Sum | ReduceOp::Max) => Some(R::ncclMax),
        (DType::Bool, ReduceOp::Prod | ReduceOp::Min) => Some(R::ncclMin),
        (DType::Bool, ReduceOp::Avg) => None,
        (_, ReduceOp::Sum) => Some(R::ncclSum),
        (_, ReduceOp::Prod) => Some(R::ncclProd),
        (_, ReduceOp::Min) => Some(R::ncclMin),
        (_, ReduceOp::Max) => Some(R::ncclMax),
        (_, ReduceOp::Avg) => Some(R::ncclAvg),
    }
}

impl NcclApi for NcclLib {
    fn describe(&self) -> String {
        format!("NCCL {} from {}", self.0.version(), self.0.path().display())
    }

    fn has_p2p(&self) -> bool {
        ["ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd"]
            .iter()
            .all(|f| self.0.has(f))
    }

    fn unique_id(&self) -> Result<UniqueId, NcclError> {
        let id = self.0.unique_id().map_err(nccl_error)?;
        Ok(UniqueId(dtcomm_nccl_sys::unique_id_to_bytes(&id)))
    }

    fn has_scalable_init(&self) -> bool {
        self.0.has("ncclCommInitRankScalable")
    }

    fn init(
        &self,
        ids: &[UniqueId],
        world: usize,
        rank: usize,
        device: i32,
    ) -> Result<Box<dyn NcclComm>, NcclError> {
        let dev = result::device::get(device).map_err(|e| NcclError {
            call: "cuDeviceGet",
            code: ncclResult_t::ncclUnhandledCudaError.0,
            name: "ncclUnhandledCudaError",
            text: format!("{e:?}"),
            last: None,
        })?;
        // NCCL uses the runtime's current device: make the device's primary context current.
        // SAFETY: `dev` came from cuDeviceGet.
        let bound = unsafe { result::primary_ctx::retain(dev) }
            .and_then(|ctx| unsafe { result::ctx::set_current(ctx) });
        if let Err(e) = bound {
            return Err(NcclError {
                call: "cuCtxSetCurrent",
                code: ncclResult_t::ncclUnhandledCudaError.0,
                name: "ncclUnhandledCudaError",
                text: format!("{e:?}"),
                last: None,
            });
        }
        let mut config = dtcomm_nccl_sys::config_initializer();
        config.blocking = 0;
        let mut comm: ncclComm_t = std::ptr::null_mut();
        let mut raw: Vec<_> = ids
            .iter()
            .map(|id| dtcomm_nccl_sys::unique_id_from_bytes(&id.0))
            .collect();
        // SAFETY: the ids are the same, in the same order, on every rank (carried by dtcomm);
        // config initialised.
        unsafe {
            match raw.as_mut_slice() {
                [one] => self.0.comm_init_rank_config(
                    &mut comm,
                    world as i32,
                    *one,
                    rank as i32,
                    &mut config,
                ),
                many => self.0.comm_init_rank_scalable(
                    &mut comm,
                    world as i32,
                    rank as i32,
                    many,
                    &mut config,
                ),
            }
        }
        .map_err(nccl_error)?;
        Ok(Box::new(RealComm {
            nccl: self.0.clone(),
            comm,
            aborted: false,
        }))
    }
}

struct RealComm {
    nccl: Arc<Nccl>,
    comm: ncclComm_t,
    aborted: bool,
}

// SAFETY: an NCCL communicator may be used from any one thread at a time; the engine holds it
// under its state lock.
unsafe impl Send for RealComm {}

impl NcclComm for RealComm {
    fn state(&mut self) -> Result<InitState, NcclError> {
        // SAFETY: a live communicator.
        let code = unsafe { self.nccl.comm_get_async_error(self.comm) }.map_err(nccl_error)?;
        match dtcomm_nccl_sys::result::classify(code) {
            Ok(Status::Success) => Ok(InitState::Ready),
            Ok(Status::InProgress) => Ok(InitState::InProgress),
            Err(code) => Err(nccl_error(dtcomm_nccl_sys::NcclError::Failed {
                function: "ncclCommGetAsyncError",
                code,
                message: self.nccl.error_string(code),
                last_error: self.nccl.last_error().unwrap_or_default(),
            })),
        }
    }

    fn enqueue(
        &mut self,
        op: &NcclOp,
        dtype: DType,
        stream: StreamHandle,
    ) -> Result<(), NcclError> {
        let ((t, k), s) = (nccl_dtype(dtype), stream_of(stream).cast());
        let reduction = match *op {
            NcclOp::AllReduce { op, .. } => Some(("ncclAllReduce", op)),
            NcclOp::Reduce { op, .. } => Some(("ncclReduce", op)),
            NcclOp::ReduceScatter { op, .. } => Some(("ncclReduceScatter", op)),
            _ => None,
        };
        let mut red = ncclRedOp_t::ncclSum;
        if let Some((call, rop)) = reduction {
            red = nccl_op(rop, dtype).ok_or_else(|| NcclError {
                call,
                code: 4,
                name: "ncclInvalidArgument",
                text: format!(
                    "NCCL cannot reduce {dtype} device tensors by {rop} (it has no {dtype} type \
                     or operator for it)"
                ),
                last: None,
            })?;
        }
        let n = &self.nccl;
        let p = |d: DevPtr| d.0 as usize as *mut c_void;
        // SAFETY: device buffers checked by the engine for their counts; the stream is this
        // communicator's device's; every rank enqueues the same call (agreed order).
        let r = unsafe {
            match *op {
                NcclOp::AllReduce {
                    send, recv, count, ..
                } => n.all_reduce(p(send), p(recv), count * k, t, red, self.comm, s),
                NcclOp::Broadcast {
                    send,
                    recv,
                    count,
                    root,
                } => n.broadcast(p(send), p(recv), count * k, t, root as i32, self.comm, s),
                NcclOp::Reduce {
                    send,
                    recv,
                    count,
                    root,
                    ..
                } => n.reduce(
                    p(send),
                    p(recv),
                    count * k,
                    t,
                    red,
                    root as i32,
                    self.comm,
                    s,
                ),
                NcclOp::AllGather { send, recv, count } => {
                    n.all_gather(p(send), p(recv), count * k, t, self.comm, s)
                }
                NcclOp::Exchange {
                    ref sends,
                    ref recvs,
                } => n.group_start().and_then(|_| {
                    let sent = sends.iter().try_for_each(|b| {
                        n.send(p(b.ptr), b.count * k, t, b.peer as i32, self.comm, s)
                            .map(|_| ())
                    });
                    let each = sent.and_then(|()| {
                        recvs.iter().try_for_each(|b| {
                            n.recv(p(b.ptr), b.count * k, t, b.peer as i32, self.comm, s)
                                .map(|_| ())
                        })
                    });
                    // The group is closed whatever happened inside it.
                    let end = n.group_end();
                    each.and(end)
                }),
                NcclOp::ReduceScatter {
                    send, recv, count, ..
                } => n.reduce_scatter(p(send), p(recv), count * k, t, red, self.comm, s),
            }
        };
        r.map(|_| ()).map_err(nccl_error)
    }

    fn abort(&mut self) {
        if !self.aborted {
            self.aborted = true;
            // SAFETY: a live communicator, aborted once.
            let _ = unsafe { self.nccl.comm_abort(self.comm) };
        }
    }
}

impl Drop for RealComm {
    fn drop(&mut self) {
        if !self.aborted {
            // SAFETY: a live communicator, released once; every queued call has finished (the
            // engine waits for each), so destroy does not block on peers.
            let _ = unsafe { self.nccl.comm_destroy(self.comm) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complex_and_bool_map_to_what_nccl_can_compute() {
        type R = ncclRedOp_t;
        assert_eq!(nccl_dtype(DType::C64), (ncclDataType_t::ncclFloat32, 2));
        assert_eq!(nccl_dtype(DType::C128), (ncclDataType_t::ncclFloat64, 2));
        assert_eq!(nccl_dtype(DType::Bool), (ncclDataType_t::ncclUint8, 1));
        assert_eq!(nccl_op(ReduceOp::Sum, DType::C64), Some(R::ncclSum));
        assert_eq!(nccl_op(ReduceOp::Avg, DType::C128), Some(R::ncclAvg));
        assert_eq!(
            nccl_op(ReduceOp::Prod, DType::C64),
            None,
            "not componentwise"
        );
        assert_eq!(
            nccl_op(ReduceOp::Sum, DType::Bool),
            Some(R::ncclMax),
            "or of 0/1"
        );
        assert_eq!(
            nccl_op(ReduceOp::Prod, DType::Bool),
            Some(R::ncclMin),
            "and of 0/1"
        );
        assert_eq!(nccl_op(ReduceOp::Avg, DType::Bool), None);
        assert_eq!(
            nccl_op(ReduceOp::Band, DType::I32),
            None,
            "NCCL has no bitwise ops"
        );
        assert_eq!(nccl_op(ReduceOp::Sum, DType::I16), None);
        assert_eq!(nccl_op(ReduceOp::Max, DType::F32), Some(R::ncclMax));
    }
}
