//! NCCL's functions: their C signatures (written from `nccl.h`) and the table resolved from
//! a loaded library.
//!
//! Required functions are in every NCCL this crate supports; a library without one is not
//! NCCL. Optional ones are resolved only when the library's version is at least the release
//! that introduced them *and* the symbol is there, so a feature probe never calls a
//! same-named symbol of a release that did not document it.

use std::ffi::{c_char, c_int, c_void};

use libloading::Library;

use crate::bindings::{
    cudaStream_t, ncclComm_t, ncclConfig_t, ncclDataType_t, ncclRedOp_t, ncclResult_t,
    ncclScalarResidence_t, ncclUniqueId,
};
use crate::error::Failure;
use crate::version::Version;

/// `ncclGetVersion(int* version)`.
pub type GetVersionFn = unsafe extern "C" fn(*mut c_int) -> ncclResult_t;
/// `ncclGetErrorString(ncclResult_t)`.
pub type GetErrorStringFn = unsafe extern "C" fn(ncclResult_t) -> *const c_char;
/// `ncclGetLastError(ncclComm_t)`.
pub type GetLastErrorFn = unsafe extern "C" fn(ncclComm_t) -> *const c_char;
/// `ncclGetUniqueId(ncclUniqueId*)`.
pub type GetUniqueIdFn = unsafe extern "C" fn(*mut ncclUniqueId) -> ncclResult_t;
/// `ncclCommInitRank(comm*, nranks, id, rank)`.
pub type CommInitRankFn =
    unsafe extern "C" fn(*mut ncclComm_t, c_int, ncclUniqueId, c_int) -> ncclResult_t;
/// `ncclCommInitRankConfig(comm*, nranks, id, rank, config*)`.
pub type CommInitRankConfigFn = unsafe extern "C" fn(
    *mut ncclComm_t,
    c_int,
    ncclUniqueId,
    c_int,
    *mut ncclConfig_t,
) -> ncclResult_t;
/// `ncclCommInitRankScalable(comm*, nranks, rank, nId, ids*, config*)`.
pub type CommInitRankScalableFn = unsafe extern "C" fn(
    *mut ncclComm_t,
    c_int,
    c_int,
    c_int,
    *mut ncclUniqueId,
    *mut ncclConfig_t,
) -> ncclResult_t;
/// `ncclCommFinalize`, `ncclCommDestroy`, `ncclCommAbort`: `(ncclComm_t)`.
pub type CommFn = unsafe extern "C" fn(ncclComm_t) -> ncclResult_t;
/// `ncclCommGetAsyncError(comm, ncclResult_t* asyncError)`.
pub type CommGetAsyncErrorFn = unsafe extern "C" fn(ncclComm_t, *mut ncclResult_t) -> ncclResult_t;
/// `ncclCommSplit(comm, color, key, newcomm*, config*)`.
pub type CommSplitFn = unsafe extern "C" fn(
    ncclComm_t,
    c_int,
    c_int,
    *mut ncclComm_t,
    *mut ncclConfig_t,
) -> ncclResult_t;
/// `ncclCommShrink(comm, excludeRanks*, excludeCount, newcomm*, config*, flags)`.
pub type CommShrinkFn = unsafe extern "C" fn(
    ncclComm_t,
    *mut c_int,
    c_int,
    *mut ncclComm_t,
    *mut ncclConfig_t,
    c_int,
) -> ncclResult_t;
/// `ncclAllReduce` and `ncclReduceScatter`:
/// `(sendbuff, recvbuff, count, datatype, op, comm, stream)`.
pub type ReduceFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    ncclDataType_t,
    ncclRedOp_t,
    ncclComm_t,
    cudaStream_t,
) -> ncclResult_t;
/// `ncclReduce(sendbuff, recvbuff, count, datatype, op, root, comm, stream)`.
pub type ReduceRootFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    ncclDataType_t,
    ncclRedOp_t,
    c_int,
    ncclComm_t,
    cudaStream_t,
) -> ncclResult_t;
/// `ncclBroadcast(sendbuff, recvbuff, count, datatype, root, comm, stream)`.
pub type BroadcastFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    ncclDataType_t,
    c_int,
    ncclComm_t,
    cudaStream_t,
) -> ncclResult_t;
/// `ncclAllGather(sendbuff, recvbuff, sendcount, datatype, comm, stream)`.
pub type AllGatherFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    ncclDataType_t,
    ncclComm_t,
    cudaStream_t,
) -> ncclResult_t;
/// `ncclSend(sendbuff, count, datatype, peer, comm, stream)`.
pub type SendFn = unsafe extern "C" fn(
    *const c_void,
    usize,
    ncclDataType_t,
    c_int,
    ncclComm_t,
    cudaStream_t,
) -> ncclResult_t;
/// `ncclRecv(recvbuff, count, datatype, peer, comm, stream)`.
pub type RecvFn = unsafe extern "C" fn(
    *mut c_void,
    usize,
    ncclDataType_t,
    c_int,
    ncclComm_t,
    cudaStream_t,
) -> ncclResult_t;
/// `ncclGroupStart()` and `ncclGroupEnd()`.
pub type GroupFn = unsafe extern "C" fn() -> ncclResult_t;
/// `ncclRedOpCreatePreMulSum(op*, scalar*, datatype, residence, comm)`.
pub type RedOpCreatePreMulSumFn = unsafe extern "C" fn(
    *mut ncclRedOp_t,
    *mut c_void,
    ncclDataType_t,
    ncclScalarResidence_t,
    ncclComm_t,
) -> ncclResult_t;
/// `ncclRedOpDestroy(op, comm)`.
pub type RedOpDestroyFn = unsafe extern "C" fn(ncclRedOp_t, ncclComm_t) -> ncclResult_t;
/// `ncclMemAlloc(void** ptr, size)`.
pub type MemAllocFn = unsafe extern "C" fn(*mut *mut c_void, usize) -> ncclResult_t;
/// `ncclMemFree(void* ptr)`.
pub type MemFreeFn = unsafe extern "C" fn(*mut c_void) -> ncclResult_t;
/// `ncclCommRegister(comm, buff, size, void** handle)`.
pub type CommRegisterFn =
    unsafe extern "C" fn(ncclComm_t, *mut c_void, usize, *mut *mut c_void) -> ncclResult_t;
/// `ncclCommDeregister(comm, handle)`.
pub type CommDeregisterFn = unsafe extern "C" fn(ncclComm_t, *mut c_void) -> ncclResult_t;

/// One optional function and whether the loaded library gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// The C symbol, e.g. `ncclCommSplit`.
    pub symbol: &'static str,
    /// The release that introduced it.
    pub since: Version,
    /// Resolved: the library is at least `since` and exports the symbol.
    pub available: bool,
}

macro_rules! symbol_table {
    (
        required { $($req:ident: $req_ty:ty = $req_name:literal,)* }
        optional { $($opt:ident: $opt_ty:ty = $opt_name:literal since ($maj:literal, $min:literal),)* }
    ) => {
        /// The resolved function pointers. They stay valid while the [`Library`] they came
        /// from is loaded; [`crate::Nccl`] owns both (and libraries are never unloaded).
        #[derive(Debug, Clone, Copy)]
        pub struct Symbols {
            $(#[doc = concat!("`", $req_name, "` (required).")] pub $req: $req_ty,)*
            $(#[doc = concat!("`", $opt_name, "`, NCCL ", $maj, ".", $min, " and later.")]
            pub $opt: Option<$opt_ty>,)*
        }

        impl Symbols {
            /// The functions every supported NCCL exports.
            pub const REQUIRED: &[&str] = &[$($req_name),*];
            /// The optional functions and the release that introduced each.
            pub const OPTIONAL: &[(&str, Version)] =
                &[$(($opt_name, Version::new($maj, $min, 0))),*];

            /// Resolves the table from `library`, whose version is `version`.
            ///
            /// # Safety
            /// `library` must be NCCL (or have these symbols with these C signatures).
            pub(crate) unsafe fn resolve(library: &Library, version: Version) -> Result<Self, Failure> {
                Ok(Symbols {
                    // SAFETY: `resolve`'s contract: `library` is NCCL, so each required symbol
                    // has the C signature its table entry's type spells (from the committed
                    // bindings), as `required` needs.
                    $($req: unsafe { required::<$req_ty>(library, $req_name) }?,)*
                    $($opt: if version >= Version::new($maj, $min, 0) {
                        // SAFETY: as for the required ones; and an optional symbol is looked up
                        // only in a release that has it (`version` >= its `since`), so its
                        // signature is the one its entry's type spells.
                        unsafe { optional::<$opt_ty>(library, $opt_name) }
                    } else {
                        None
                    },)*
                })
            }

            /// Every optional function, with whether it was resolved.
            pub fn probes(&self) -> Vec<Probe> {
                vec![$(Probe {
                    symbol: $opt_name,
                    since: Version::new($maj, $min, 0),
                    available: self.$opt.is_some(),
                }),*]
            }
        }
    };
}

symbol_table! {
    required {
        get_version: GetVersionFn = "ncclGetVersion",
        get_error_string: GetErrorStringFn = "ncclGetErrorString",
        get_unique_id: GetUniqueIdFn = "ncclGetUniqueId",
        comm_init_rank: CommInitRankFn = "ncclCommInitRank",
        all_reduce: ReduceFn = "ncclAllReduce",
        broadcast: BroadcastFn = "ncclBroadcast",
        all_gather: AllGatherFn = "ncclAllGather",
        comm_destroy: CommFn = "ncclCommDestroy",
        comm_abort: CommFn = "ncclCommAbort",
        comm_get_async_error: CommGetAsyncErrorFn = "ncclCommGetAsyncError",
    }
    optional {
        reduce_scatter: ReduceFn = "ncclReduceScatter" since (2, 0),
        reduce: ReduceRootFn = "ncclReduce" since (2, 0),
        group_start: GroupFn = "ncclGroupStart" since (2, 0),
        group_end: GroupFn = "ncclGroupEnd" since (2, 0),
        send: SendFn = "ncclSend" since (2, 7),
        recv: RecvFn = "ncclRecv" since (2, 7),
        red_op_create_pre_mul_sum: RedOpCreatePreMulSumFn = "ncclRedOpCreatePreMulSum" since (2, 11),
        red_op_destroy: RedOpDestroyFn = "ncclRedOpDestroy" since (2, 11),
        get_last_error: GetLastErrorFn = "ncclGetLastError" since (2, 13),
        comm_init_rank_config: CommInitRankConfigFn = "ncclCommInitRankConfig" since (2, 14),
        comm_finalize: CommFn = "ncclCommFinalize" since (2, 14),
        comm_init_rank_scalable: CommInitRankScalableFn = "ncclCommInitRankScalable" since (2, 23),
        comm_split: CommSplitFn = "ncclCommSplit" since (2, 18),
        mem_alloc: MemAllocFn = "ncclMemAlloc" since (2, 19),
        mem_free: MemFreeFn = "ncclMemFree" since (2, 19),
        comm_register: CommRegisterFn = "ncclCommRegister" since (2, 19),
        comm_deregister: CommDeregisterFn = "ncclCommDeregister" since (2, 19),
        comm_shrink: CommShrinkFn = "ncclCommShrink" since (2, 27),
    }
}

/// Only `ncclGetVersion`, which is needed before the version-gated table can be resolved.
///
/// # Safety
/// A symbol of that name in `library` must have NCCL's signature.
pub(crate) unsafe fn get_version(library: &Library) -> Result<GetVersionFn, Failure> {
    // SAFETY: `get_version`'s contract: a `ncclGetVersion` in `library` has NCCL's signature,
    // `int ncclGetVersion(int *)`, which `GetVersionFn` spells.
    unsafe { required::<GetVersionFn>(library, "ncclGetVersion") }
}

/// # Safety
/// `T` must be the symbol's type (a function pointer with its C signature).
unsafe fn required<T: Copy>(library: &Library, name: &'static str) -> Result<T, Failure> {
    // SAFETY: `required`'s contract is `optional`'s: `T` is the symbol's function pointer type.
    unsafe { optional(library, name) }.ok_or(Failure::MissingSymbol(name))
}

/// # Safety
/// `T` must be the symbol's type (a function pointer with its C signature).
unsafe fn optional<T: Copy>(library: &Library, name: &str) -> Option<T> {
    // SAFETY: `Library::get` needs `T` to be the symbol's type, which is `optional`'s
    // contract (a function pointer with the symbol's C signature). The pointer is copied out
    // of the borrowed `Symbol` and stays valid after `library` is dropped: every library is
    // opened with `RTLD_NODELETE` (`load::open`), so it is never unmapped.
    unsafe { library.get::<T>(name.as_bytes()) }
        .ok()
        .map(|symbol| *symbol)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_list_what_docs_promise() {
        assert_eq!(Symbols::REQUIRED.len(), 10);
        assert!(Symbols::REQUIRED.contains(&"ncclCommGetAsyncError"));
        assert!(Symbols::OPTIONAL.contains(&("ncclCommSplit", Version::new(2, 18, 0))));
        assert!(Symbols::OPTIONAL.contains(&("ncclMemAlloc", Version::new(2, 19, 0))));
        for (name, _) in Symbols::OPTIONAL {
            assert!(!Symbols::REQUIRED.contains(name), "{name} is both");
        }
    }
}
