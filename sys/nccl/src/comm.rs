//! Thin `unsafe` wrappers for the calls that need a GPU: communicators, collectives,
//! point-to-point and groups. Each maps its return code with [`Nccl::check`], so
//! `ncclInProgress` (non-blocking communicators) is [`Status::InProgress`], not an error.
//!
//! # Safety (all of them)
//! These are NCCL's C calls with NCCL's contracts: a CUDA device current on the calling
//! thread where NCCL needs one, `comm` a live communicator from this library, buffers device
//! (or registered) memory of at least the counts given, `stream` a CUDA stream of the
//! communicator's device (or null for the legacy default stream), and the collective called
//! in the same order on every rank.
//!
//! The function pointers called here come from [`Nccl::symbols`]: each resolved with the C
//! signature of its NCCL function, only from a library whose version has it, and from a
//! library that is never unloaded (`RTLD_NODELETE`), so calling one is calling that NCCL
//! function; what remains for each call's soundness is its arguments.

use std::ffi::{c_int, c_void};

use crate::bindings::{
    cudaStream_t, ncclComm_t, ncclConfig_t, ncclDataType_t, ncclRedOp_t, ncclResult_t, ncclUniqueId,
};
use crate::config::is_initialized;
use crate::nccl::Nccl;
use crate::result::{NcclError, NcclResult, Status};

impl Nccl {
    /// `ncclCommInitRank`: joins rank `rank` of `nranks` to the communicator of `id`,
    /// writing the handle to `comm`.
    ///
    /// # Safety
    /// See the module docs; `id` must come from `ncclGetUniqueId` and be the same on all ranks.
    pub unsafe fn comm_init_rank(
        &self,
        comm: &mut ncclComm_t,
        nranks: c_int,
        id: ncclUniqueId,
        rank: c_int,
    ) -> NcclResult<Status> {
        // SAFETY: `comm_init_rank` is `ncclCommInitRank` (module docs). `comm` is a `&mut`, so a
        // valid, exclusive place for the handle NCCL writes; `id` is passed by value; a current
        // device and the same `id` on every rank are this function's contract.
        let rc = unsafe { (self.symbols().comm_init_rank)(comm, nranks, id, rank) };
        self.check("ncclCommInitRank", rc)
    }

    /// `ncclCommInitRankConfig`: as [`Nccl::comm_init_rank`], with a configuration from
    /// [`crate::config_initializer`] (checked: a config without this header's size and
    /// magic is refused with `ncclInvalidArgument` before NCCL sees it).
    ///
    /// # Safety
    /// As [`Nccl::comm_init_rank`]; string attributes of `config` must be NUL-terminated
    /// and outlive the call.
    pub unsafe fn comm_init_rank_config(
        &self,
        comm: &mut ncclComm_t,
        nranks: c_int,
        id: ncclUniqueId,
        rank: c_int,
        config: &mut ncclConfig_t,
    ) -> NcclResult<Status> {
        const NAME: &str = "ncclCommInitRankConfig";
        let init = self.optional(NAME, self.symbols().comm_init_rank_config)?;
        if !is_initialized(config) {
            return Err(NcclError::Failed {
                function: NAME,
                code: ncclResult_t::ncclInvalidArgument,
                message: "ncclConfig_t not set up by config_initializer() (size, magic or \
                          version changed)"
                    .into(),
                last_error: String::new(),
            });
        }
        // SAFETY: `init` is `ncclCommInitRankConfig`, present in this library (`optional` checked).
        // `comm` and `config` are `&mut`s, valid and exclusive for the call; `config` carries this
        // header's size, magic and version (`is_initialized` checked just above), so NCCL reads a
        // struct of the layout it expects, and its string attributes outliving the call is this
        // function's contract.
        let rc = unsafe { init(comm, nranks, id, rank, config) };
        self.check(NAME, rc)
    }

    /// `ncclCommInitRankScalable` (NCCL 2.23): as [`Nccl::comm_init_rank_config`] with several
    /// unique ids (one per bootstrap root, e.g. one per 128 ranks), the same ids in the same
    /// order on every rank, so that no single root bootstraps every rank.
    ///
    /// # Safety
    /// As [`Nccl::comm_init_rank_config`].
    pub unsafe fn comm_init_rank_scalable(
        &self,
        comm: &mut ncclComm_t,
        nranks: c_int,
        rank: c_int,
        ids: &mut [ncclUniqueId],
        config: &mut ncclConfig_t,
    ) -> NcclResult<Status> {
        const NAME: &str = "ncclCommInitRankScalable";
        let init = self.optional(NAME, self.symbols().comm_init_rank_scalable)?;
        let bad = |message: String| NcclError::Failed {
            function: NAME,
            code: ncclResult_t::ncclInvalidArgument,
            message,
            last_error: String::new(),
        };
        if !is_initialized(config) {
            return Err(bad(
                "ncclConfig_t not set up by config_initializer() (size, magic or \
                            version changed)"
                    .into(),
            ));
        }
        let n = c_int::try_from(ids.len())
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| bad(format!("{} unique ids", ids.len())))?;
        // SAFETY: `init` is `ncclCommInitRankScalable`, present in this library (`optional`
        // checked). `comm` and `config` are `&mut`s, valid and exclusive for the call; `ids`
        // points to `n` ids that live across it (NCCL copies them before it returns: its
        // non-blocking set-up goes on after); `config`
        // carries this header's size, magic and version (checked above); the same ids on every
        // rank is this function's contract.
        let rc = unsafe { init(comm, nranks, rank, n, ids.as_mut_ptr(), config) };
        self.check(NAME, rc)
    }

    /// `ncclCommSplit`: a new communicator of the ranks passing the same `color`, ordered by
    /// `key` (`NCCL_SPLIT_NOCOLOR` to stay out). `config: None` inherits the parent's.
    ///
    /// # Safety
    /// See the module docs; every rank of `comm` must call it.
    pub unsafe fn comm_split(
        &self,
        comm: ncclComm_t,
        color: c_int,
        key: c_int,
        newcomm: &mut ncclComm_t,
        config: Option<&mut ncclConfig_t>,
    ) -> NcclResult<Status> {
        let split = self.optional("ncclCommSplit", self.symbols().comm_split)?;
        let config = config.map_or(std::ptr::null_mut(), |c| c as *mut ncclConfig_t);
        // SAFETY: `split` is `ncclCommSplit`, present in this library (`optional` checked).
        // `newcomm` is a `&mut`, a valid out pointer; `config` is null (inherit the parent's) or
        // from a `&mut` that lives across the call; `comm` being live and every rank of it calling
        // is this function's contract.
        let rc = unsafe { split(comm, color, key, newcomm, config) };
        self.check("ncclCommSplit", rc)
    }

    /// `ncclCommFinalize`: flushes the communicator's work (in progress until quiescent).
    ///
    /// # Safety
    /// See the module docs.
    pub unsafe fn comm_finalize(&self, comm: ncclComm_t) -> NcclResult<Status> {
        let finalize = self.optional("ncclCommFinalize", self.symbols().comm_finalize)?;
        // SAFETY: `finalize` is `ncclCommFinalize`, present in this library (`optional` checked);
        // it takes only `comm`, live by this function's contract.
        self.check("ncclCommFinalize", unsafe { finalize(comm) })
    }

    /// `ncclCommDestroy`: frees the communicator; `comm` is dangling afterwards.
    ///
    /// # Safety
    /// See the module docs; no call may use `comm` afterwards.
    pub unsafe fn comm_destroy(&self, comm: ncclComm_t) -> NcclResult<Status> {
        // SAFETY: `comm_destroy` is `ncclCommDestroy` (module docs); it takes only `comm`, live by
        // this function's contract, which also forbids any use of it afterwards.
        self.check("ncclCommDestroy", unsafe {
            (self.symbols().comm_destroy)(comm)
        })
    }

    /// `ncclCommAbort`: stops the communicator's work and frees it; `comm` is dangling
    /// afterwards.
    ///
    /// # Safety
    /// See the module docs; no call may use `comm` afterwards.
    pub unsafe fn comm_abort(&self, comm: ncclComm_t) -> NcclResult<Status> {
        // SAFETY: `comm_abort` is `ncclCommAbort` (module docs); it takes only `comm`, live by this
        // function's contract, which also forbids any use of it afterwards.
        self.check("ncclCommAbort", unsafe {
            (self.symbols().comm_abort)(comm)
        })
    }

    /// `ncclCommGetAsyncError`: the communicator's state as a raw code (success, in
    /// progress, or the asynchronous error); `Err` only if the query itself failed.
    ///
    /// # Safety
    /// See the module docs.
    pub unsafe fn comm_get_async_error(&self, comm: ncclComm_t) -> NcclResult<ncclResult_t> {
        let mut state = ncclResult_t::ncclSuccess;
        // SAFETY: `comm_get_async_error` is `ncclCommGetAsyncError` (module docs); `state` is a
        // local `ncclResult_t` it writes once, and `comm` is live by this function's contract.
        let rc = unsafe { (self.symbols().comm_get_async_error)(comm, &mut state) };
        self.check("ncclCommGetAsyncError", rc)?;
        Ok(state)
    }

    /// `ncclAllReduce` of `count` elements.
    ///
    /// # Safety
    /// See the module docs.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn all_reduce(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
        op: ncclRedOp_t,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> NcclResult<Status> {
        // SAFETY: `all_reduce` is `ncclAllReduce` (module docs). `send` and `recv` holding
        // `count` elements of device memory, `comm` live, `stream` its device's and the same
        // call on every rank are this function's contract; the plain values go through as they
        // are.
        let rc =
            unsafe { (self.symbols().all_reduce)(send, recv, count, datatype, op, comm, stream) };
        self.check("ncclAllReduce", rc)
    }

    /// `ncclReduceScatter`: `recv_count` elements per rank.
    ///
    /// # Safety
    /// See the module docs.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn reduce_scatter(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        recv_count: usize,
        datatype: ncclDataType_t,
        op: ncclRedOp_t,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> NcclResult<Status> {
        let reduce_scatter = self.optional("ncclReduceScatter", self.symbols().reduce_scatter)?;
        // SAFETY: `reduce_scatter` is `ncclReduceScatter`, present in this library (`optional`
        // checked); `send` (`recv_count` times the rank count) and `recv` (`recv_count`) device
        // buffers, `comm`, `stream` and the matching calls on every rank are this function's
        // contract.
        let rc = unsafe { reduce_scatter(send, recv, recv_count, datatype, op, comm, stream) };
        self.check("ncclReduceScatter", rc)
    }

    /// `ncclReduce` of `count` elements to rank `root` (only the root's `recv` is written).
    ///
    /// # Safety
    /// See the module docs.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn reduce(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
        op: ncclRedOp_t,
        root: c_int,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> NcclResult<Status> {
        let reduce = self.optional("ncclReduce", self.symbols().reduce)?;
        // SAFETY: `reduce` is `ncclReduce`, present in this library (`optional` checked); `send`
        // (and on `root`, `recv`) holding `count` elements of device memory, `comm`, `stream` and
        // the matching calls on every rank are this function's contract.
        let rc = unsafe { reduce(send, recv, count, datatype, op, root, comm, stream) };
        self.check("ncclReduce", rc)
    }

    /// `ncclBroadcast` of `count` elements from rank `root`.
    ///
    /// # Safety
    /// See the module docs.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn broadcast(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
        root: c_int,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> NcclResult<Status> {
        // SAFETY: `broadcast` is `ncclBroadcast` (module docs); `send` (read on `root`) and
        // `recv` holding `count` elements of device memory, `comm`, `stream` and the matching
        // calls on every rank are this function's contract.
        let rc =
            unsafe { (self.symbols().broadcast)(send, recv, count, datatype, root, comm, stream) };
        self.check("ncclBroadcast", rc)
    }

    /// `ncclAllGather`: `send_count` elements from each rank.
    ///
    /// # Safety
    /// See the module docs.
    pub unsafe fn all_gather(
        &self,
        send: *const c_void,
        recv: *mut c_void,
        send_count: usize,
        datatype: ncclDataType_t,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> NcclResult<Status> {
        // SAFETY: `all_gather` is `ncclAllGather` (module docs); `send` (`send_count` elements)
        // and `recv` (`send_count` times the rank count) device buffers, `comm`, `stream` and
        // the matching calls on every rank are this function's contract.
        let rc =
            unsafe { (self.symbols().all_gather)(send, recv, send_count, datatype, comm, stream) };
        self.check("ncclAllGather", rc)
    }

    /// `ncclSend` of `count` elements to rank `peer`.
    ///
    /// # Safety
    /// See the module docs; `peer` must post the matching receive.
    pub unsafe fn send(
        &self,
        send: *const c_void,
        count: usize,
        datatype: ncclDataType_t,
        peer: c_int,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> NcclResult<Status> {
        let send_fn = self.optional("ncclSend", self.symbols().send)?;
        // SAFETY: `send_fn` is `ncclSend`, present in this library (`optional` checked); `send`
        // holding `count` elements of device memory, `comm`, `stream` and `peer` posting the
        // matching receive are this function's contract.
        self.check("ncclSend", unsafe {
            send_fn(send, count, datatype, peer, comm, stream)
        })
    }

    /// `ncclRecv` of `count` elements from rank `peer`.
    ///
    /// # Safety
    /// See the module docs; `peer` must post the matching send.
    pub unsafe fn recv(
        &self,
        recv: *mut c_void,
        count: usize,
        datatype: ncclDataType_t,
        peer: c_int,
        comm: ncclComm_t,
        stream: cudaStream_t,
    ) -> NcclResult<Status> {
        let recv_fn = self.optional("ncclRecv", self.symbols().recv)?;
        // SAFETY: `recv_fn` is `ncclRecv`, present in this library (`optional` checked); `recv`
        // holding room for `count` elements of device memory, `comm`, `stream` and `peer` posting
        // the matching send are this function's contract.
        self.check("ncclRecv", unsafe {
            recv_fn(recv, count, datatype, peer, comm, stream)
        })
    }

    /// `ncclGroupStart`: calls up to [`Nccl::group_end`] are fused.
    ///
    /// # Safety
    /// Must be paired with [`Nccl::group_end`] on this thread.
    pub unsafe fn group_start(&self) -> NcclResult<Status> {
        let start = self.optional("ncclGroupStart", self.symbols().group_start)?;
        // SAFETY: `start` is `ncclGroupStart`, present in this library (`optional` checked); it
        // takes no arguments, and pairing it with `ncclGroupEnd` on this thread is this function's
        // contract.
        self.check("ncclGroupStart", unsafe { start() })
    }

    /// `ncclGroupEnd`: launches the calls since [`Nccl::group_start`].
    ///
    /// # Safety
    /// See the module docs; the grouped calls' buffers must still be valid.
    pub unsafe fn group_end(&self) -> NcclResult<Status> {
        let end = self.optional("ncclGroupEnd", self.symbols().group_end)?;
        // SAFETY: `end` is `ncclGroupEnd`, present in this library (`optional` checked); it takes
        // no arguments, and the grouped calls' buffers, communicators and streams still being valid
        // is this function's contract.
        self.check("ncclGroupEnd", unsafe { end() })
    }

    /// `ncclMemAlloc`: `size` bytes of device memory suited to NCCL's zero-copy paths.
    ///
    /// # Safety
    /// A CUDA device must be current; free the result with [`Nccl::mem_free`].
    pub unsafe fn mem_alloc(&self, size: usize) -> NcclResult<*mut c_void> {
        let alloc = self.optional("ncclMemAlloc", self.symbols().mem_alloc)?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: `alloc` is `ncclMemAlloc`, present in this library (`optional` checked); `ptr` is
        // a local it writes the allocation to, and a current CUDA device is this function's
        // contract.
        self.check("ncclMemAlloc", unsafe { alloc(&mut ptr, size) })?;
        Ok(ptr)
    }

    /// `ncclMemFree` of memory from [`Nccl::mem_alloc`].
    ///
    /// # Safety
    /// `ptr` must come from [`Nccl::mem_alloc`] and not be used afterwards.
    pub unsafe fn mem_free(&self, ptr: *mut c_void) -> NcclResult<Status> {
        let free = self.optional("ncclMemFree", self.symbols().mem_free)?;
        // SAFETY: `free` is `ncclMemFree`, present in this library (`optional` checked); `ptr`
        // coming from `ncclMemAlloc` and never being used again is this function's contract.
        self.check("ncclMemFree", unsafe { free(ptr) })
    }
}
