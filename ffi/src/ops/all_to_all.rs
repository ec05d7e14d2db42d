//! The personalised exchange: `dtcomm_all_to_all` (equal blocks per peer) and
//! `dtcomm_all_to_all_v` (per-peer counts), blocking and non-blocking.

use std::ffi::c_void;

use dtcomm::{Call, Collective};

use super::args::{counts, dtype, mul, req_buf};
use super::run::go;
use crate::handles::Comm;
use crate::status::{Fail, invalid};
use crate::types::*;

pub(crate) fn all_to_all(
    f: &str,
    c: &Comm,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: dtcomm_dtype_t,
) -> Result<Call, Fail> {
    let dt = dtype(f, dt)?;
    let total = mul(f, count, c.comm.world())?;
    Ok(Call::new(Collective::AllToAll {
        send_counts: None,
        recv_counts: None,
    })
    .send(req_buf(send, total, dt))
    .recv(req_buf(recv, total, dt)))
}

/// Block p of `send` (`count` elements per peer) goes to rank p; block p of `recv` comes from
/// rank p.
///
/// # Safety
/// Buffers valid for `count * size` elements until the call returns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_all_to_all(
    comm: dtcomm_comm_t,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: dtcomm_dtype_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_all_to_all";
    go(F, comm, None, |c| {
        all_to_all(F, c, send, recv, count, dtype)
    })
}

/// Non-blocking [`dtcomm_all_to_all`].
///
/// # Safety
/// Buffers valid until the request completes; `req` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_iall_to_all(
    comm: dtcomm_comm_t,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: dtcomm_dtype_t,
    req: *mut dtcomm_request_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_iall_to_all";
    go(F, comm, Some(req), |c| {
        all_to_all(F, c, send, recv, count, dtype)
    })
}

fn all_to_all_v(
    f: &str,
    c: &Comm,
    send: *const c_void,
    sendcounts: *const usize,
    recv: *mut c_void,
    recvcounts: *const usize,
    dt: dtcomm_dtype_t,
) -> Result<Call, Fail> {
    let dt = dtype(f, dt)?;
    let w = c.comm.world();
    let (sc, rc) = (
        counts(f, "sendcounts", sendcounts, w)?,
        counts(f, "recvcounts", recvcounts, w)?,
    );
    let sum = |v: &[usize], what: &str| {
        v.iter()
            .try_fold(0usize, |a, n| a.checked_add(*n))
            .ok_or_else(|| invalid(f, format!("{what} {v:?} overflow")))
    };
    let (ns, nr) = (sum(&sc, "sendcounts")?, sum(&rc, "recvcounts")?);
    Ok(Call::new(Collective::AllToAll {
        send_counts: Some(sc),
        recv_counts: Some(rc),
    })
    .send(req_buf(send, ns, dt))
    .recv(req_buf(recv, nr, dt)))
}

/// All-to-all with per-peer counts: `sendcounts[p]` elements of `send` go to rank p,
/// `recvcounts[p]` elements of `recv` come from it (blocks in rank order).
///
/// # Safety
/// Buffers valid until the call returns; both count arrays hold `size` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_all_to_all_v(
    comm: dtcomm_comm_t,
    send: *const c_void,
    sendcounts: *const usize,
    recv: *mut c_void,
    recvcounts: *const usize,
    dtype: dtcomm_dtype_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_all_to_all_v";
    go(F, comm, None, |c| {
        all_to_all_v(F, c, send, sendcounts, recv, recvcounts, dtype)
    })
}

/// Non-blocking [`dtcomm_all_to_all_v`] (the counts are copied before it returns).
///
/// # Safety
/// Buffers valid until the request completes; `req` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_iall_to_all_v(
    comm: dtcomm_comm_t,
    send: *const c_void,
    sendcounts: *const usize,
    recv: *mut c_void,
    recvcounts: *const usize,
    dtype: dtcomm_dtype_t,
    req: *mut dtcomm_request_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_iall_to_all_v";
    go(F, comm, Some(req), |c| {
        all_to_all_v(F, c, send, sendcounts, recv, recvcounts, dtype)
    })
}
