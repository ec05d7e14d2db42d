//! The collectives whose output may serve as their input (a NULL `send` means in place):
//! `dtcomm_all_reduce`, `dtcomm_broadcast`, `dtcomm_reduce`, each blocking and non-blocking.
//! Every rank passes the same `count`.

use std::ffi::{c_int, c_void};

use dtcomm::{Call, Collective};

use super::args::{buf, dtype, index, redop, req_buf};
use super::run::go;
use crate::status::Fail;
use crate::types::*;

pub(crate) fn all_reduce(
    f: &str,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: dtcomm_dtype_t,
    op: dtcomm_op_t,
) -> Result<Call, Fail> {
    let (dt, op) = (dtype(f, dt)?, redop(f, op)?);
    let mut call = Call::new(Collective::AllReduce { op }).recv(req_buf(recv, count, dt));
    call.send = buf(send, count, dt);
    Ok(call)
}

/// Reduces `count` elements of every rank's `send` (NULL: `recv` in place) into every rank's
/// `recv`.
///
/// # Safety
/// Buffers valid for `count` elements of `dtype` until the call returns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_all_reduce(
    comm: dtcomm_comm_t,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: dtcomm_dtype_t,
    op: dtcomm_op_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_all_reduce";
    go(F, comm, None, |_| {
        all_reduce(F, send, recv, count, dtype, op)
    })
}

/// Non-blocking [`dtcomm_all_reduce`].
///
/// # Safety
/// Buffers valid until the request completes; `req` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_iall_reduce(
    comm: dtcomm_comm_t,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: dtcomm_dtype_t,
    op: dtcomm_op_t,
    req: *mut dtcomm_request_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_iall_reduce";
    go(F, comm, Some(req), |_| {
        all_reduce(F, send, recv, count, dtype, op)
    })
}

pub(crate) fn broadcast(
    f: &str,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: dtcomm_dtype_t,
    root: c_int,
) -> Result<Call, Fail> {
    let dt = dtype(f, dt)?;
    let root = index(f, "root", root)?;
    let mut call = Call::new(Collective::Broadcast { root }).recv(req_buf(recv, count, dt));
    call.send = buf(send, count, dt);
    Ok(call)
}

/// Copies `root`'s `send` (NULL: its `recv`) into every rank's `recv` (`count` elements).
///
/// # Safety
/// Buffers valid for `count` elements of `dtype` until the call returns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_broadcast(
    comm: dtcomm_comm_t,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: dtcomm_dtype_t,
    root: c_int,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_broadcast";
    go(F, comm, None, |_| {
        broadcast(F, send, recv, count, dtype, root)
    })
}

/// Non-blocking [`dtcomm_broadcast`].
///
/// # Safety
/// Buffers valid until the request completes; `req` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_ibroadcast(
    comm: dtcomm_comm_t,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: dtcomm_dtype_t,
    root: c_int,
    req: *mut dtcomm_request_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_ibroadcast";
    go(F, comm, Some(req), |_| {
        broadcast(F, send, recv, count, dtype, root)
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce(
    f: &str,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: dtcomm_dtype_t,
    op: dtcomm_op_t,
    root: c_int,
) -> Result<Call, Fail> {
    let (dt, op) = (dtype(f, dt)?, redop(f, op)?);
    let root = index(f, "root", root)?;
    let mut call = Call::new(Collective::Reduce { op, root });
    call.send = buf(send, count, dt);
    call.recv = if send.is_null() {
        Some(req_buf(recv, count, dt))
    } else {
        buf(recv, count, dt)
    };
    Ok(call)
}

/// Reduces every rank's `send` (NULL: its `recv`, in place) into `root`'s `recv`; other ranks'
/// buffers are left as they were (`recv` may be NULL there when `send` is given).
///
/// # Safety
/// Buffers valid for `count` elements of `dtype` until the call returns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_reduce(
    comm: dtcomm_comm_t,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: dtcomm_dtype_t,
    op: dtcomm_op_t,
    root: c_int,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_reduce";
    go(F, comm, None, |_| {
        reduce(F, send, recv, count, dtype, op, root)
    })
}

/// Non-blocking [`dtcomm_reduce`].
///
/// # Safety
/// Buffers valid until the request completes; `req` valid for a write.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn dtcomm_ireduce(
    comm: dtcomm_comm_t,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: dtcomm_dtype_t,
    op: dtcomm_op_t,
    root: c_int,
    req: *mut dtcomm_request_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_ireduce";
    go(F, comm, Some(req), |_| {
        reduce(F, send, recv, count, dtype, op, root)
    })
}
