//! The collectives that lay one block per rank side by side in a buffer on every rank:
//! `dtcomm_all_gather` (and its per-rank-count twin `dtcomm_all_gather_v`) gathers them,
//! `dtcomm_reduce_scatter` reduces them and hands each rank its block.

use std::ffi::c_void;

use dtcomm::{Call, Collective};

use super::args::{counts, dtype, mul, redop, req_buf};
use super::run::go;
use crate::handles::Comm;
use crate::status::{Fail, invalid};
use crate::types::*;

pub(crate) fn all_gather(
    f: &str,
    c: &Comm,
    send: *const c_void,
    recv: *mut c_void,
    sendcount: usize,
    dt: dtcomm_dtype_t,
) -> Result<Call, Fail> {
    let dt = dtype(f, dt)?;
    let total = mul(f, sendcount, c.comm.world())?;
    Ok(Call::new(Collective::AllGather { counts: None })
        .send(req_buf(send, sendcount, dt))
        .recv(req_buf(recv, total, dt)))
}

/// Every rank's `send` (`sendcount` elements) lands in every rank's `recv`
/// (`sendcount * size` elements), in rank order.
///
/// # Safety
/// Buffers valid until the call returns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_all_gather(
    comm: dtcomm_comm_t,
    send: *const c_void,
    recv: *mut c_void,
    sendcount: usize,
    dtype: dtcomm_dtype_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_all_gather";
    go(F, comm, None, |c| {
        all_gather(F, c, send, recv, sendcount, dtype)
    })
}

/// Non-blocking [`dtcomm_all_gather`].
///
/// # Safety
/// Buffers valid until the request completes; `req` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_iall_gather(
    comm: dtcomm_comm_t,
    send: *const c_void,
    recv: *mut c_void,
    sendcount: usize,
    dtype: dtcomm_dtype_t,
    req: *mut dtcomm_request_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_iall_gather";
    go(F, comm, Some(req), |c| {
        all_gather(F, c, send, recv, sendcount, dtype)
    })
}

fn all_gather_v(
    f: &str,
    c: &Comm,
    send: *const c_void,
    recv: *mut c_void,
    recvcounts: *const usize,
    dt: dtcomm_dtype_t,
) -> Result<Call, Fail> {
    let dt = dtype(f, dt)?;
    let counts = counts(f, "recvcounts", recvcounts, c.comm.world())?;
    let total = counts
        .iter()
        .try_fold(0usize, |a, n| a.checked_add(*n))
        .ok_or_else(|| invalid(f, format!("recvcounts {counts:?} overflow")))?;
    let mine = counts[c.comm.rank()];
    Ok(Call::new(Collective::AllGather {
        counts: Some(counts),
    })
    .send(req_buf(send, mine, dt))
    .recv(req_buf(recv, total, dt)))
}

/// All-gather with per-rank counts: rank p sends `recvcounts[p]` elements; `recv` holds their
/// sum. Every rank passes the same `size` counts.
///
/// # Safety
/// Buffers valid until the call returns; `recvcounts` holds `size` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_all_gather_v(
    comm: dtcomm_comm_t,
    send: *const c_void,
    recv: *mut c_void,
    recvcounts: *const usize,
    dtype: dtcomm_dtype_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_all_gather_v";
    go(F, comm, None, |c| {
        all_gather_v(F, c, send, recv, recvcounts, dtype)
    })
}

/// Non-blocking [`dtcomm_all_gather_v`] (`recvcounts` is copied before it returns).
///
/// # Safety
/// Buffers valid until the request completes; `req` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_iall_gather_v(
    comm: dtcomm_comm_t,
    send: *const c_void,
    recv: *mut c_void,
    recvcounts: *const usize,
    dtype: dtcomm_dtype_t,
    req: *mut dtcomm_request_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_iall_gather_v";
    go(F, comm, Some(req), |c| {
        all_gather_v(F, c, send, recv, recvcounts, dtype)
    })
}

pub(crate) fn reduce_scatter(
    f: &str,
    c: &Comm,
    send: *const c_void,
    recv: *mut c_void,
    recvcount: usize,
    dt: dtcomm_dtype_t,
    op: dtcomm_op_t,
) -> Result<Call, Fail> {
    let (dt, op) = (dtype(f, dt)?, redop(f, op)?);
    let total = mul(f, recvcount, c.comm.world())?;
    Ok(Call::new(Collective::ReduceScatter { op })
        .send(req_buf(send, total, dt))
        .recv(req_buf(recv, recvcount, dt)))
}

/// Reduces every rank's `send` (`recvcount * size` elements) and leaves block `rank` of the
/// result in `recv`.
///
/// # Safety
/// Buffers valid until the call returns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_reduce_scatter(
    comm: dtcomm_comm_t,
    send: *const c_void,
    recv: *mut c_void,
    recvcount: usize,
    dtype: dtcomm_dtype_t,
    op: dtcomm_op_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_reduce_scatter";
    go(F, comm, None, |c| {
        reduce_scatter(F, c, send, recv, recvcount, dtype, op)
    })
}

/// Non-blocking [`dtcomm_reduce_scatter`].
///
/// # Safety
/// Buffers valid until the request completes; `req` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_ireduce_scatter(
    comm: dtcomm_comm_t,
    send: *const c_void,
    recv: *mut c_void,
    recvcount: usize,
    dtype: dtcomm_dtype_t,
    op: dtcomm_op_t,
    req: *mut dtcomm_request_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_ireduce_scatter";
    go(F, comm, Some(req), |c| {
        reduce_scatter(F, c, send, recv, recvcount, dtype, op)
    })
}
