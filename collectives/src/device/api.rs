//! The two narrow interfaces the device path is written against: [`DeviceApi`] (the handful of
//! CUDA calls it needs: streams, events, copies between host and device) and [`NcclApi`] /
//! [`NcclComm`] (unique ids, non-blocking communicator set-up, the collectives, the async error
//! and abort). The real ones (`cuda/` with the feature `cuda`) sit over cudarc and
//! `dtcomm-nccl-sys`; the in-memory twins (`device/twin/`) let the engine's device path run
//! in tests with no GPU.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::dtype::DType;
use crate::op::ReduceOp;

/// A device address (`CUdeviceptr`); never dereferenced on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DevPtr(pub u64);

/// A stream handle as the caller's framework holds it (`CUstream` / `cudaStream_t`, as torch's
/// `Stream.cuda_stream` gives it); `0` is the device's legacy default stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamHandle(pub u64);

/// A failed CUDA call: which call and the driver's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call}: {detail}")]
pub struct DeviceError {
    /// The call (`cuMemcpyDtoHAsync`, ...).
    pub call: &'static str,
    /// The driver's code name and text.
    pub detail: String,
}

/// A recorded event: done once the work queued before it on its stream is done.
pub trait DeviceEvent: Send + Sync {
    /// Whether the work before the event is done (`cuEventQuery`).
    fn done(&self) -> Result<bool, DeviceError>;
    /// The implementation's own type, for [`DeviceApi::wait`].
    fn as_any(&self) -> &dyn Any;
}

/// Host memory the device copies to and from (pinned where the implementation can).
pub trait HostMemory: Send {
    /// The bytes.
    fn bytes(&mut self) -> &mut [u8];
}

impl HostMemory for Vec<u64> {
    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: u64 has no padding; the byte view covers the same memory.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.as_mut_ptr().cast::<u8>(),
                std::mem::size_of_val(&self[..]),
            )
        }
    }
}

/// Device memory owned by the holder, freed when dropped. The engine never allocates device
/// memory (the caller's framework does); benchmarks and tests do ([`DeviceApi::device_memory`]).
pub trait DeviceMemory: Send {
    /// Where it is.
    fn ptr(&self) -> DevPtr;
    /// Its size in bytes.
    fn len(&self) -> usize;
    /// Whether it is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The CUDA calls the device path makes. Copies and waits are queued on a stream and return at
/// once; [`DeviceEvent::done`] observes completion (polled against the call's deadline: there is
/// no blocking wait here, since a blocked wait would have none).
pub trait DeviceApi: Send + Sync {
    /// A short description for logs (`cuda 13.0, 8 devices`).
    fn describe(&self) -> String;
    /// Number of devices.
    fn device_count(&self) -> Result<usize, DeviceError>;
    /// A new stream on `device` that does not synchronise with the legacy default stream.
    fn new_stream(&self, device: i32) -> Result<StreamHandle, DeviceError>;
    /// Records the work queued so far on `stream`.
    fn record(
        &self,
        device: i32,
        stream: StreamHandle,
    ) -> Result<Box<dyn DeviceEvent>, DeviceError>;
    /// Makes `stream` wait for `event` without blocking the host.
    fn wait(
        &self,
        device: i32,
        stream: StreamHandle,
        event: &dyn DeviceEvent,
    ) -> Result<(), DeviceError>;
    /// Queues a copy of `len` bytes from device `src` into host `dst`.
    ///
    /// # Safety
    /// `dst` stays valid for `len` bytes, unread by anyone else, until the copy is done.
    unsafe fn to_host(
        &self,
        device: i32,
        stream: StreamHandle,
        src: DevPtr,
        dst: *mut u8,
        len: usize,
    ) -> Result<(), DeviceError>;
    /// Queues a copy of `len` bytes from host `src` to device `dst`.
    ///
    /// # Safety
    /// `src` stays valid and unchanged for `len` bytes until the copy is done.
    unsafe fn to_device(
        &self,
        device: i32,
        stream: StreamHandle,
        src: *const u8,
        dst: DevPtr,
        len: usize,
    ) -> Result<(), DeviceError>;
    /// Host memory of at least `bytes` for staging copies (pinned when possible).
    fn host_memory(&self, bytes: usize) -> Result<Box<dyn HostMemory>, DeviceError> {
        Ok(Box::new(vec![0u64; bytes.div_ceil(8)]))
    }
    /// `bytes` of device memory on `device` (`cuMemAlloc`), for benchmarks and tests.
    fn device_memory(
        &self,
        device: i32,
        bytes: usize,
    ) -> Result<Box<dyn DeviceMemory>, DeviceError>;
}

/// NCCL's unique id (`ncclUniqueId`): made by one rank, carried to the others by dtcomm.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueId(pub [u8; 128]);

impl fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UniqueId({:02x?}..)", &self.0[..8])
    }
}

/// A failed NCCL call: NCCL's result code, its name, and its texts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{call} returned {name} ({code}): {text}{}", last.as_ref().map(|l| format!("; NCCL's last error: {l}")).unwrap_or_default())]
pub struct NcclError {
    /// The call (`ncclCommInitRankConfig`, `ncclAllReduce`, `ncclCommGetAsyncError`, ...).
    pub call: &'static str,
    /// `ncclResult_t`.
    pub code: u32,
    /// The code's name (`ncclUnhandledCudaError`, ...).
    pub name: &'static str,
    /// `ncclGetErrorString`.
    pub text: String,
    /// `ncclGetLastError`, when NCCL had one.
    pub last: Option<String>,
}

/// One NCCL collective with its device buffers, as the device path enqueues it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NcclOp {
    /// `ncclAllReduce` (`count` elements; `send == recv` in place).
    AllReduce {
        /// Input.
        send: DevPtr,
        /// Output.
        recv: DevPtr,
        /// Elements.
        count: usize,
        /// Reduction.
        op: ReduceOp,
    },
    /// `ncclBroadcast` from `root`.
    Broadcast {
        /// Input (read on the root).
        send: DevPtr,
        /// Output.
        recv: DevPtr,
        /// Elements.
        count: usize,
        /// Root rank.
        root: usize,
    },
    /// `ncclReduce` to `root`.
    Reduce {
        /// Input.
        send: DevPtr,
        /// Output (written on the root).
        recv: DevPtr,
        /// Elements.
        count: usize,
        /// Reduction.
        op: ReduceOp,
        /// Root rank.
        root: usize,
    },
    /// `ncclAllGather`: `count` elements from every rank.
    AllGather {
        /// Input.
        send: DevPtr,
        /// Output (`world * count`).
        recv: DevPtr,
        /// Elements per rank.
        count: usize,
    },
    /// A point-to-point exchange: one group of `ncclSend`/`ncclRecv` (`ncclGroupStart` ..
    /// `ncclGroupEnd`), as torch's NCCL backend runs all-to-all(v), all-gather with per-rank
    /// counts, gather and scatter. Every block is posted (none has count 0); a block to or from
    /// this rank itself is a send and a receive to itself, which NCCL pairs within the group.
    /// The blocks to and from one peer pair in order with the peer's.
    Exchange {
        /// What this rank sends, to whom.
        sends: Vec<Block>,
        /// What this rank receives, from whom.
        recvs: Vec<Block>,
    },
    /// `ncclReduceScatter`: `count` elements of the result land on each rank.
    ReduceScatter {
        /// Input (`world * count`).
        send: DevPtr,
        /// Output.
        recv: DevPtr,
        /// Elements per rank.
        count: usize,
        /// Reduction.
        op: ReduceOp,
    },
}

impl NcclOp {
    /// The NCCL call(s) that run it (`ncclAllReduce`, ..., `ncclSend/ncclRecv`), for logs and
    /// the twin's counters.
    pub fn name(&self) -> &'static str {
        match self {
            NcclOp::AllReduce { .. } => "ncclAllReduce",
            NcclOp::Broadcast { .. } => "ncclBroadcast",
            NcclOp::Reduce { .. } => "ncclReduce",
            NcclOp::AllGather { .. } => "ncclAllGather",
            NcclOp::Exchange { .. } => "ncclSend/ncclRecv",
            NcclOp::ReduceScatter { .. } => "ncclReduceScatter",
        }
    }

    /// Whether it needs `ncclSend`/`ncclRecv` ([`NcclApi::has_p2p`]).
    pub fn needs_p2p(&self) -> bool {
        matches!(self, NcclOp::Exchange { .. })
    }
}

/// One block of an [`NcclOp::Exchange`]: `count` elements at `ptr`, sent to or received from
/// rank `peer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// The rank at the other end (this rank itself for its own block).
    pub peer: usize,
    /// Where the elements are (sends) or go (receives).
    pub ptr: DevPtr,
    /// Elements (never 0: empty blocks are not posted).
    pub count: usize,
}

/// Where a non-blocking communicator set-up stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitState {
    /// Still connecting (`ncclInProgress`).
    InProgress,
    /// Ready for collectives.
    Ready,
}

/// NCCL itself: what a process needs before it has a communicator.
pub trait NcclApi: Send + Sync {
    /// Library, path and version, for logs (`NCCL 2.30.3 from .../libnccl.so.2`).
    fn describe(&self) -> String;
    /// A new unique id (`ncclGetUniqueId`).
    fn unique_id(&self) -> Result<UniqueId, NcclError>;
    /// Starts a non-blocking communicator set-up of `world` ranks on `device`
    /// (`ncclCommInitRankConfig` with `blocking = 0` for one id; `ncclCommInitRankScalable`
    /// for several, one per bootstrap root, the same ids in the same order on every rank);
    /// poll [`NcclComm::state`] until ready.
    fn init(
        &self,
        ids: &[UniqueId],
        world: usize,
        rank: usize,
        device: i32,
    ) -> Result<Box<dyn NcclComm>, NcclError>;
    /// Whether this library can bootstrap from several roots (`ncclCommInitRankScalable`,
    /// NCCL 2.23 and later).
    fn has_scalable_init(&self) -> bool;
    /// Whether this library has point-to-point calls (`ncclSend`, `ncclRecv`, the group calls;
    /// NCCL 2.7 and later), which [`NcclOp::Exchange`] needs. Every rank reports it in the
    /// path agreement; where any rank lacks them, the calls that would be exchanges are staged
    /// on every rank.
    fn has_p2p(&self) -> bool;
}

/// One rank's NCCL communicator.
pub trait NcclComm: Send {
    /// The set-up's progress, or the error it (or a collective since) ran into
    /// (`ncclCommGetAsyncError`).
    fn state(&mut self) -> Result<InitState, NcclError>;
    /// Queues `op` of `dtype` on `stream`.
    fn enqueue(&mut self, op: &NcclOp, dtype: DType, stream: StreamHandle)
    -> Result<(), NcclError>;
    /// Aborts the communicator (`ncclCommAbort`): queued and running collectives end, and it is
    /// unusable after.
    fn abort(&mut self);
}

/// What a communicator uses for device buffers: the CUDA calls, and NCCL or why there is none.
#[derive(Clone)]
pub struct DeviceRuntime {
    /// The CUDA calls.
    pub api: Arc<dyn DeviceApi>,
    /// NCCL, or why it cannot be used in this process.
    pub nccl: Result<Arc<dyn NcclApi>, String>,
}

impl fmt::Debug for DeviceRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceRuntime")
            .field("api", &self.api.describe())
            .field(
                "nccl",
                &self
                    .nccl
                    .as_ref()
                    .map(|n| n.describe())
                    .map_err(|e| e.as_str()),
            )
            .finish()
    }
}
