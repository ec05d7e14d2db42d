//! Point-to-point: `dtcomm_send` and `dtcomm_recv` between a pair of ranks (matched in
//! order), blocking and non-blocking.

use std::ffi::{c_int, c_void};

use dtcomm::{Call, Collective};

use super::args::{dtype, index, req_buf};
use super::run::go;
use crate::status::Fail;
use crate::types::*;

pub(crate) fn p2p(
    f: &str,
    send: bool,
    p: *const c_void,
    count: usize,
    dt: dtcomm_dtype_t,
    peer: c_int,
) -> Result<Call, Fail> {
    let dt = dtype(f, dt)?;
    let peer = index(f, "peer", peer)?;
    let b = req_buf(p, count, dt);
    Ok(if send {
        Call::new(Collective::Send { peer }).send(b)
    } else {
        Call::new(Collective::Recv { peer }).recv(b)
    })
}

/// Sends `count` elements to `peer`, whose matching [`dtcomm_recv`] takes them (calls between
/// a pair match in order).
///
/// # Safety
/// `buf` valid until the call returns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_send(
    comm: dtcomm_comm_t,
    buf: *const c_void,
    count: usize,
    dtype: dtcomm_dtype_t,
    peer: c_int,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_send";
    go(F, comm, None, |_| p2p(F, true, buf, count, dtype, peer))
}

/// Non-blocking [`dtcomm_send`].
///
/// # Safety
/// `buf` valid until the request completes; `req` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_isend(
    comm: dtcomm_comm_t,
    buf: *const c_void,
    count: usize,
    dtype: dtcomm_dtype_t,
    peer: c_int,
    req: *mut dtcomm_request_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_isend";
    go(F, comm, Some(req), |_| {
        p2p(F, true, buf, count, dtype, peer)
    })
}

/// Receives `peer`'s matching [`dtcomm_send`] (`count` elements) into `buf`.
///
/// # Safety
/// `buf` valid until the call returns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_recv(
    comm: dtcomm_comm_t,
    buf: *mut c_void,
    count: usize,
    dtype: dtcomm_dtype_t,
    peer: c_int,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_recv";
    go(F, comm, None, |_| p2p(F, false, buf, count, dtype, peer))
}

/// Non-blocking [`dtcomm_recv`].
///
/// # Safety
/// `buf` valid until the request completes; `req` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_irecv(
    comm: dtcomm_comm_t,
    buf: *mut c_void,
    count: usize,
    dtype: dtcomm_dtype_t,
    peer: c_int,
    req: *mut dtcomm_request_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_irecv";
    go(F, comm, Some(req), |_| {
        p2p(F, false, buf, count, dtype, peer)
    })
}
