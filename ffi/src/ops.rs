//! Every collective, blocking (`dtcomm_all_reduce`) and non-blocking (`dtcomm_iall_reduce`,
//! returning a request). Each builds one byte-level [`Call`] and hands it to the engine; the
//! engine checks buffers, counts and roots (a refused call sends nothing and leaves the
//! communicator usable).
//!
//! Counts are in elements. For calls with an input and an output, a NULL input where the
//! output may serve as input means in place (`all_reduce`, `broadcast`, `reduce`); the
//! rooted side of `gather`/`scatter`/`reduce` may be NULL on the other ranks.

use std::ffi::{c_int, c_void};

use dtcomm::{Call, Collective, DType, RawBuf, ReduceOp};

use crate::comm::get;
use crate::handles::{self, Comm};
use crate::status::{Fail, guard, invalid};
use crate::types::*;

pub(crate) fn dtype(func: &str, d: dtcomm_dtype_t) -> Result<DType, Fail> {
    DType::ALL
        .iter()
        .copied()
        .find(|t| *t as i32 == d)
        .ok_or_else(|| {
            invalid(
                func,
                format!("unknown dtype {d} (DTCOMM_FLOAT32=1 .. DTCOMM_INT16=9)"),
            )
        })
}

pub(crate) fn redop(func: &str, o: dtcomm_op_t) -> Result<ReduceOp, Fail> {
    ReduceOp::ALL
        .iter()
        .copied()
        .find(|r| *r as i32 == o)
        .ok_or_else(|| {
            invalid(
                func,
                format!("unknown reduction {o} (DTCOMM_SUM=1 .. DTCOMM_AVG=5)"),
            )
        })
}

fn index(func: &str, what: &str, v: c_int) -> Result<usize, Fail> {
    usize::try_from(v).map_err(|_| invalid(func, format!("{what} {v} is negative")))
}

fn mul(func: &str, count: usize, world: usize) -> Result<usize, Fail> {
    count
        .checked_mul(world)
        .ok_or_else(|| invalid(func, format!("count {count} x world {world} overflows")))
}

/// A buffer argument; NULL is `None` (absent).
fn buf(p: *const c_void, count: usize, dt: DType) -> Option<RawBuf> {
    (!p.is_null()).then(|| RawBuf::host(p.cast_mut().cast(), count, dt))
}

/// A required buffer argument: NULL with elements is refused by the engine as a null pointer.
fn req_buf(p: *const c_void, count: usize, dt: DType) -> RawBuf {
    RawBuf::host(p.cast_mut().cast(), count, dt)
}

fn counts(func: &str, what: &str, p: *const usize, world: usize) -> Result<Vec<usize>, Fail> {
    if p.is_null() {
        return Err(invalid(func, format!("{what} is NULL")));
    }
    // SAFETY: the caller passes `world` counts (documented).
    Ok(unsafe { std::slice::from_raw_parts(p, world) }.to_vec())
}

/// Runs `call` now (`req` NULL) or submits it and writes its request handle.
pub(crate) fn go(
    func: &str,
    comm: dtcomm_comm_t,
    req: Option<*mut dtcomm_request_t>,
    build: impl FnOnce(&Comm) -> Result<Call, Fail>,
) -> dtcomm_result_t {
    guard(func, || {
        if req.is_some_and(|r| r.is_null()) {
            return Err(invalid(func, "request is NULL"));
        }
        let c = get(func, comm)?;
        let call = build(&c)?;
        match req {
            None => {
                // SAFETY: the C caller's contract: buffers valid until the call returns.
                unsafe { c.comm.run(&call) }?;
            }
            Some(r) => {
                // SAFETY: the C caller's contract: buffers valid until the request completes.
                let work = unsafe { c.comm.submit(call) };
                // SAFETY: checked non-null above.
                unsafe { r.write(handles::add_request(work)) };
            }
        }
        Ok(())
    })
}

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

/// Returns once every rank has entered it.
#[unsafe(no_mangle)]
pub extern "C" fn dtcomm_barrier(comm: dtcomm_comm_t) -> dtcomm_result_t {
    go("dtcomm_barrier", comm, None, |_| {
        Ok(Call::new(Collective::Barrier))
    })
}

/// Non-blocking [`dtcomm_barrier`].
///
/// # Safety
/// `req` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_ibarrier(
    comm: dtcomm_comm_t,
    req: *mut dtcomm_request_t,
) -> dtcomm_result_t {
    go("dtcomm_ibarrier", comm, Some(req), |_| {
        Ok(Call::new(Collective::Barrier))
    })
}

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
