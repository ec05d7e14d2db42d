//! The rooted block collectives: `dtcomm_gather` (every rank's block into the root's buffer)
//! and `dtcomm_scatter` (the root's blocks out to every rank). The root's side holds `size`
//! blocks and may be NULL on the other ranks.

use std::ffi::{c_int, c_void};

use dtcomm::{Call, Collective};

use super::args::{buf, dtype, index, mul, req_buf};
use super::run::go;
use crate::handles::Comm;
use crate::status::Fail;
use crate::types::*;

#[allow(clippy::too_many_arguments)]
fn rooted(
    f: &str,
    c: &Comm,
    gather: bool,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dt: dtcomm_dtype_t,
    root: c_int,
) -> Result<Call, Fail> {
    let dt = dtype(f, dt)?;
    let root = index(f, "root", root)?;
    let total = mul(f, count, c.comm.world())?;
    let on_root = c.comm.rank() == root;
    let rooted = |p: *const c_void| {
        if on_root {
            Some(req_buf(p, total, dt))
        } else {
            buf(p, total, dt)
        }
    };
    Ok(if gather {
        let mut call = Call::new(Collective::Gather { root }).send(req_buf(send, count, dt));
        call.recv = rooted(recv.cast_const());
        call
    } else {
        let mut call = Call::new(Collective::Scatter { root }).recv(req_buf(recv, count, dt));
        call.send = rooted(send);
        call
    })
}

/// Every rank's `send` (`sendcount` elements) lands in `root`'s `recv` (`sendcount * size`
/// elements; NULL on other ranks), in rank order.
///
/// # Safety
/// Buffers valid until the call returns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_gather(
    comm: dtcomm_comm_t,
    send: *const c_void,
    recv: *mut c_void,
    sendcount: usize,
    dtype: dtcomm_dtype_t,
    root: c_int,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_gather";
    go(F, comm, None, |c| {
        rooted(F, c, true, send, recv, sendcount, dtype, root)
    })
}

/// Non-blocking [`dtcomm_gather`].
///
/// # Safety
/// Buffers valid until the request completes; `req` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_igather(
    comm: dtcomm_comm_t,
    send: *const c_void,
    recv: *mut c_void,
    sendcount: usize,
    dtype: dtcomm_dtype_t,
    root: c_int,
    req: *mut dtcomm_request_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_igather";
    go(F, comm, Some(req), |c| {
        rooted(F, c, true, send, recv, sendcount, dtype, root)
    })
}

/// Block p of `root`'s `send` (`recvcount * size` elements; NULL on other ranks) lands in rank
/// p's `recv` (`recvcount` elements).
///
/// # Safety
/// Buffers valid until the call returns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_scatter(
    comm: dtcomm_comm_t,
    send: *const c_void,
    recv: *mut c_void,
    recvcount: usize,
    dtype: dtcomm_dtype_t,
    root: c_int,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_scatter";
    go(F, comm, None, |c| {
        rooted(F, c, false, send, recv, recvcount, dtype, root)
    })
}

/// Non-blocking [`dtcomm_scatter`].
///
/// # Safety
/// Buffers valid until the request completes; `req` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_iscatter(
    comm: dtcomm_comm_t,
    send: *const c_void,
    recv: *mut c_void,
    recvcount: usize,
    dtype: dtcomm_dtype_t,
    root: c_int,
    req: *mut dtcomm_request_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_iscatter";
    go(F, comm, Some(req), |c| {
        rooted(F, c, false, send, recv, recvcount, dtype, root)
    })
}
