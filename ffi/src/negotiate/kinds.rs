//! One entry point per kind of named operation: allreduce (copied or in place), allgather,
//! broadcast (copied or in place), alltoall, reduce-scatter, barrier and join. Each fills in a
//! [`Spec`] and hands it to [`submit`].

use std::ffi::{c_char, c_int, c_void};

use dtcomm::negotiate::Kind;

use super::registry::{dtcomm_named_t, dtcomm_negotiator_t};
use super::submit::{Spec, submit};
use crate::types::*;

/// Submits an allreduce named `name` (its full name is `allreduce.<name>`) of the `ndim`-
/// dimensional tensor `shape` of `dtype` at `data` (copied), reduced by `op`, multiplied by
/// `prescale` before and `postscale` after (Horovod's arithmetic).
///
/// # Safety
/// `name` NUL-terminated; `shape` holds `ndim` entries; `data` the tensor's bytes; `out` valid
/// for a write.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dtcomm_named_allreduce(
    neg: dtcomm_negotiator_t,
    name: *const c_char,
    dtype: dtcomm_dtype_t,
    shape: *const u64,
    ndim: usize,
    data: *const c_void,
    op: dtcomm_op_t,
    prescale: f64,
    postscale: f64,
    out: *mut dtcomm_named_t,
) -> dtcomm_result_t {
    let spec = Spec {
        op: Some(op),
        scale: (prescale, postscale),
        ..Spec::plain(dtype, shape, ndim, data)
    };
    // SAFETY: this function's contract is `submit`'s for a copied tensor: `name` NUL-terminated,
    // `shape` readable for `ndim` entries and `data` for the tensor's bytes while the call runs
    // (both copied before it returns), `out` valid for a write. The pointers go into `spec`
    // unchanged; `splits` stays NULL with 0 entries, which `submit` never reads.
    unsafe {
        submit(
            "dtcomm_named_allreduce",
            neg,
            name,
            Kind::Allreduce,
            spec,
            out,
        )
    }
}

/// [`dtcomm_named_allreduce`] in place: `data` is lent, not copied, and holds the result once
/// the operation completed (`dtcomm_named_result` then reports 0 bytes). Horovod's
/// `allreduce_async_`.
///
/// # Safety
/// As for [`dtcomm_named_allreduce`], and `data` stays valid for writes and untouched by the
/// caller until `dtcomm_named_wait` or `dtcomm_named_test` reported the operation complete.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dtcomm_named_allreduce_inplace(
    neg: dtcomm_negotiator_t,
    name: *const c_char,
    dtype: dtcomm_dtype_t,
    shape: *const u64,
    ndim: usize,
    data: *mut c_void,
    op: dtcomm_op_t,
    prescale: f64,
    postscale: f64,
    out: *mut dtcomm_named_t,
) -> dtcomm_result_t {
    let spec = Spec {
        op: Some(op),
        scale: (prescale, postscale),
        in_place: true,
        ..Spec::plain(dtype, shape, ndim, data)
    };
    // SAFETY: as for `dtcomm_named_allreduce`, and `spec.in_place` is set because this function's
    // contract also lends `data` for reads and writes, untouched by the caller until the operation
    // is reported complete: what `submit` needs for an in-place payload.
    unsafe {
        submit(
            "dtcomm_named_allreduce_inplace",
            neg,
            name,
            Kind::Allreduce,
            spec,
            out,
        )
    }
}

/// Submits an allgather named `name` (`allgather.<name>`): every rank's tensor concatenated
/// along the first dimension, which may differ per rank (the other dimensions may not).
///
/// # Safety
/// As for [`dtcomm_named_allreduce`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_named_allgather(
    neg: dtcomm_negotiator_t,
    name: *const c_char,
    dtype: dtcomm_dtype_t,
    shape: *const u64,
    ndim: usize,
    data: *const c_void,
    out: *mut dtcomm_named_t,
) -> dtcomm_result_t {
    let spec = Spec::plain(dtype, shape, ndim, data);
    // SAFETY: as for `dtcomm_named_allreduce`: `name`, `shape` (`ndim` entries), `data` (the
    // tensor's bytes, copied) and `out` are this function's arguments, passed on unchanged under
    // the same contract.
    unsafe {
        submit(
            "dtcomm_named_allgather",
            neg,
            name,
            Kind::Allgather,
            spec,
            out,
        )
    }
}

/// Submits a broadcast named `name` (`broadcast.<name>`) from `root`; every rank's result is
/// the root's tensor.
///
/// # Safety
/// As for [`dtcomm_named_allreduce`].
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dtcomm_named_broadcast(
    neg: dtcomm_negotiator_t,
    name: *const c_char,
    dtype: dtcomm_dtype_t,
    shape: *const u64,
    ndim: usize,
    data: *const c_void,
    root: c_int,
    out: *mut dtcomm_named_t,
) -> dtcomm_result_t {
    let spec = Spec {
        root: Some(root),
        ..Spec::plain(dtype, shape, ndim, data)
    };
    // SAFETY: as for `dtcomm_named_allreduce` (`root` is a plain integer, checked by `submit`): the
    // pointers are this function's, passed on unchanged under the same contract; `data` is copied.
    unsafe {
        submit(
            "dtcomm_named_broadcast",
            neg,
            name,
            Kind::Broadcast,
            spec,
            out,
        )
    }
}

/// [`dtcomm_named_broadcast`] in place: `data` is lent, not copied, and holds the root's tensor
/// once the operation completed (`dtcomm_named_result` then reports 0 bytes).
///
/// # Safety
/// As for [`dtcomm_named_allreduce_inplace`].
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dtcomm_named_broadcast_inplace(
    neg: dtcomm_negotiator_t,
    name: *const c_char,
    dtype: dtcomm_dtype_t,
    shape: *const u64,
    ndim: usize,
    data: *mut c_void,
    root: c_int,
    out: *mut dtcomm_named_t,
) -> dtcomm_result_t {
    let spec = Spec {
        root: Some(root),
        in_place: true,
        ..Spec::plain(dtype, shape, ndim, data)
    };
    // SAFETY: as for `dtcomm_named_allreduce_inplace`: `data` is lent for reads and writes until
    // the operation is reported complete, which is what `spec.in_place` tells `submit`; the other
    // pointers are passed on unchanged.
    unsafe {
        submit(
            "dtcomm_named_broadcast_inplace",
            neg,
            name,
            Kind::Broadcast,
            spec,
            out,
        )
    }
}

/// Submits an alltoall named `name` (`alltoall.<name>`): rows of the first dimension go to
/// each rank as `splits` says (`nsplits` = world size; 0 splits: an equal split).
///
/// # Safety
/// As for [`dtcomm_named_allreduce`]; `splits` holds `nsplits` entries.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dtcomm_named_alltoall(
    neg: dtcomm_negotiator_t,
    name: *const c_char,
    dtype: dtcomm_dtype_t,
    shape: *const u64,
    ndim: usize,
    data: *const c_void,
    splits: *const u64,
    nsplits: usize,
    out: *mut dtcomm_named_t,
) -> dtcomm_result_t {
    let spec = Spec {
        splits: (splits, nsplits),
        ..Spec::plain(dtype, shape, ndim, data)
    };
    // SAFETY: as for `dtcomm_named_allreduce`, and the contract also makes `splits` readable for
    // `nsplits` entries while the call runs, which is what `submit` reads through `spec.splits`
    // (copying them; a NULL with entries is refused before any read).
    unsafe {
        submit(
            "dtcomm_named_alltoall",
            neg,
            name,
            Kind::Alltoall,
            spec,
            out,
        )
    }
}

/// Submits a reduce-scatter named `name` (`reducescatter.<name>`): the tensor reduced by `op`
/// (with Horovod's scaling), each rank keeping its rows of the first dimension (the remainder
/// rows go to the lowest ranks).
///
/// # Safety
/// As for [`dtcomm_named_allreduce`].
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dtcomm_named_reducescatter(
    neg: dtcomm_negotiator_t,
    name: *const c_char,
    dtype: dtcomm_dtype_t,
    shape: *const u64,
    ndim: usize,
    data: *const c_void,
    op: dtcomm_op_t,
    prescale: f64,
    postscale: f64,
    out: *mut dtcomm_named_t,
) -> dtcomm_result_t {
    let spec = Spec {
        op: Some(op),
        scale: (prescale, postscale),
        ..Spec::plain(dtype, shape, ndim, data)
    };
    // SAFETY: as for `dtcomm_named_allreduce`: the same arguments under the same contract, passed
    // on unchanged; `data` is copied.
    unsafe {
        submit(
            "dtcomm_named_reducescatter",
            neg,
            name,
            Kind::Reducescatter,
            spec,
            out,
        )
    }
}

/// Submits a barrier named `name` (`barrier.<name>`): completes once every rank submitted it,
/// whatever else is pending.
///
/// # Safety
/// `name` NUL-terminated; `out` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_named_barrier(
    neg: dtcomm_negotiator_t,
    name: *const c_char,
    out: *mut dtcomm_named_t,
) -> dtcomm_result_t {
    let spec = Spec::plain(DTCOMM_UINT8, std::ptr::null(), 0, std::ptr::null());
    // SAFETY: `name` (NUL-terminated) and `out` (valid for a write) are this function's, under its
    // contract; `shape` and `data` are NULL with 0 entries and a barrier's 0 bytes, which `submit`
    // accepts without reading them.
    unsafe { submit("dtcomm_named_barrier", neg, name, Kind::Barrier, spec, out) }
}

/// Submits a join: this rank has no more data. Until every rank has joined it contributes
/// zeros to the others' allreduces and takes part in their barriers; the join completes on
/// every rank once all have joined, its one count (`dtcomm_named_counts`) the rank that joined
/// last.
///
/// # Safety
/// `out` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_named_join(
    neg: dtcomm_negotiator_t,
    out: *mut dtcomm_named_t,
) -> dtcomm_result_t {
    let spec = Spec::plain(DTCOMM_UINT8, std::ptr::null(), 0, std::ptr::null());
    // SAFETY: `name` is a `'static` C string literal; `shape` and `data` are NULL with 0 entries
    // and a join's 0 bytes, which `submit` accepts without reading them; `out` is this function's,
    // valid for a write by its contract.
    unsafe {
        submit(
            "dtcomm_named_join",
            neg,
            c"join".as_ptr(),
            Kind::Join,
            spec,
            out,
        )
    }
}
