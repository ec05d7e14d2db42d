//! Name-based negotiation and fusion ([`dtcomm::negotiate`], the Horovod model) from C: a
//! negotiator runs cycles over a communicator; ranks submit *named* operations in any order,
//! each completes once every rank has submitted its name, small allreduces are fused. A name
//! whose ranks disagree (dtype, shape, root, op, scale factors) fails on every rank with
//! `DTCOMM_MISMATCH`, and later names still work.
//!
//! Submitting copies the caller's buffer (the operation owns its data); the result is copied
//! out with `dtcomm_named_result` once `dtcomm_named_wait` succeeded. While a negotiator runs
//! it is its communicator's only caller.

use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use dtcomm::negotiate::{
    Handle, InPlace, Kind, NegotiateError, Negotiator, Output, Payload, Request,
};
use dtcomm::{DType, ReduceOp};

use crate::comm::get;
use crate::ops::{dtype, redop};
use crate::status::{Fail, guard, invalid};
use crate::types::*;

/// A negotiator handle (0 is never valid).
pub type dtcomm_negotiator_t = u64;
/// A named operation's handle (0 is never valid).
pub type dtcomm_named_t = u64;

struct Named {
    handle: Handle,
    /// Its outcome, once waited for.
    done: OnceLock<Result<Output, NegotiateError>>,
}

/// A live negotiator (taken out when it shuts down).
type Live = Arc<Mutex<Option<Negotiator>>>;

static NEXT: AtomicU64 = AtomicU64::new(1);
static NEGOTIATORS: Mutex<Option<HashMap<u64, Live>>> = Mutex::new(None);
static NAMED: Mutex<Option<HashMap<u64, Arc<Named>>>> = Mutex::new(None);

fn lock<T>(m: &'static Mutex<T>) -> MutexGuard<'static, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn negotiator(func: &str, h: dtcomm_negotiator_t) -> Result<Live, Fail> {
    lock(&NEGOTIATORS)
        .as_ref()
        .and_then(|m| m.get(&h).cloned())
        .ok_or_else(|| {
            invalid(
                func,
                format!("negotiator {h} is not live (shut down, or never started)"),
            )
        })
}

fn named(func: &str, h: dtcomm_named_t) -> Result<Arc<Named>, Fail> {
    lock(&NAMED)
        .as_ref()
        .and_then(|m| m.get(&h).cloned())
        .ok_or_else(|| {
            invalid(
                func,
                format!("named operation {h} is not live (freed, or never submitted)"),
            )
        })
}

fn fail(e: &NegotiateError) -> Fail {
    let code = match e {
        NegotiateError::Mismatch(_) => DTCOMM_MISMATCH,
        NegotiateError::Comm(_) => DTCOMM_FAILED,
        NegotiateError::Shutdown(..) => DTCOMM_SHUTDOWN,
        NegotiateError::BadBuffer(_) | NegotiateError::Duplicate(_) => DTCOMM_INVALID_ARGUMENT,
    };
    Fail {
        code,
        msg: e.to_string(),
    }
}

/// Starts a negotiator over `comm`: a cycle every `cycle_ms` milliseconds (Horovod's
/// `HOROVOD_CYCLE_TIME`, 1 ms by default there), allreduces fused up to `fusion_threshold`
/// bytes (0: none; Horovod's default is 128 MiB). Every rank must start one. Until it is shut
/// down, do not call collectives on `comm` directly.
///
/// # Safety
/// `out` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_negotiator_start(
    comm: dtcomm_comm_t,
    cycle_ms: f64,
    fusion_threshold: u64,
    out: *mut dtcomm_negotiator_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_negotiator_start";
    guard(F, || {
        if out.is_null() {
            return Err(invalid(F, "out is NULL"));
        }
        if !(cycle_ms.is_finite() && cycle_ms > 0.0) {
            return Err(invalid(
                F,
                format!("cycle_ms {cycle_ms} is not a positive number"),
            ));
        }
        let c = get(F, comm)?;
        let n = Negotiator::start(
            c.comm.clone(),
            Duration::from_secs_f64(cycle_ms / 1e3),
            fusion_threshold,
        );
        let h = NEXT.fetch_add(1, Ordering::Relaxed);
        lock(&NEGOTIATORS)
            .get_or_insert_with(HashMap::new)
            .insert(h, Arc::new(Mutex::new(Some(n))));
        // SAFETY: checked non-null; the caller's contract.
        unsafe { out.write(h) };
        Ok(())
    })
}

/// Shuts the negotiator down: every rank must call it; returns once all have. Operations
/// still pending then fail with `DTCOMM_SHUTDOWN`. The handle is gone afterwards.
#[unsafe(no_mangle)]
pub extern "C" fn dtcomm_negotiator_shutdown(neg: dtcomm_negotiator_t) -> dtcomm_result_t {
    const F: &str = "dtcomm_negotiator_shutdown";
    guard(F, || {
        let n = negotiator(F, neg)?;
        lock(&NEGOTIATORS).as_mut().map(|m| m.remove(&neg));
        let taken = n.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(n) = taken {
            n.shutdown();
        }
        Ok(())
    })
}

/// What a submission describes besides its kind.
struct Spec {
    dtype: dtcomm_dtype_t,
    shape: *const u64,
    ndim: usize,
    data: *const c_void,
    root: Option<c_int>,
    op: Option<dtcomm_op_t>,
    scale: (f64, f64),
    splits: (*const u64, usize),
    /// `data` is lent (the result lands there) instead of copied.
    in_place: bool,
}

impl Spec {
    fn plain(dtype: dtcomm_dtype_t, shape: *const u64, ndim: usize, data: *const c_void) -> Self {
        Self {
            dtype,
            shape,
            ndim,
            data,
            root: None,
            op: None,
            scale: (1.0, 1.0),
            splits: (std::ptr::null(), 0),
            in_place: false,
        }
    }
}

fn slice<'a>(func: &str, what: &str, p: *const u64, n: usize) -> Result<&'a [u64], Fail> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(invalid(func, format!("{what} is NULL with {n} entries")));
    }
    // SAFETY: the caller passes `n` readable entries (documented).
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// Builds the request and submits it with a copy of the caller's data.
///
/// # Safety
/// The pointers in `spec` as the public functions document; `name` NUL-terminated.
unsafe fn submit(
    func: &str,
    neg: dtcomm_negotiator_t,
    name: *const c_char,
    kind: Kind,
    spec: Spec,
    out: *mut dtcomm_named_t,
) -> dtcomm_result_t {
    guard(func, || {
        if out.is_null() {
            return Err(invalid(func, "out is NULL"));
        }
        if name.is_null() {
            return Err(invalid(func, "name is NULL"));
        }
        // SAFETY: NUL-terminated (the caller's contract).
        let name = unsafe { CStr::from_ptr(name) }
            .to_str()
            .map_err(|_| invalid(func, "name is not UTF-8"))?;
        let dt: DType = dtype(func, spec.dtype)?;
        let shape = slice(func, "shape", spec.shape, spec.ndim)?.to_vec();
        let op: Option<ReduceOp> = spec.op.map(|o| redop(func, o)).transpose()?;
        let root = spec
            .root
            .map(|r| u32::try_from(r).map_err(|_| invalid(func, format!("root {r} is negative"))))
            .transpose()?;
        let splits = slice(func, "splits", spec.splits.0, spec.splits.1)?.to_vec();
        let request = Request {
            name: if kind == Kind::Join {
                "join".into()
            } else {
                format!("{}.{name}", kind.name())
            },
            kind,
            dtype: dt,
            shape,
            root,
            op,
            prescale: spec.scale.0,
            postscale: spec.scale.1,
            device: -1,
            splits,
        };
        let bytes = if matches!(kind, Kind::Barrier | Kind::Join) {
            0
        } else {
            request
                .shape
                .iter()
                .try_fold(dt.size() as u64, |a, &d| a.checked_mul(d))
                .and_then(|b| usize::try_from(b).ok())
                .ok_or_else(|| invalid(func, format!("shape {:?} overflows", request.shape)))?
        };
        if bytes > 0 && spec.data.is_null() {
            return Err(invalid(func, format!("data is NULL for {bytes} bytes")));
        }
        let data = if spec.in_place {
            // SAFETY: the caller lends `bytes` writable bytes at `data` until the operation
            // is waited for (or freed), touching them meanwhile not at all (documented).
            Payload::InPlace(unsafe { InPlace::new(spec.data.cast_mut().cast(), bytes) })
        } else if bytes == 0 {
            Payload::from(Vec::new())
        } else {
            // SAFETY: the caller passes a buffer of the shape's bytes (documented).
            Payload::from(
                unsafe { std::slice::from_raw_parts(spec.data.cast::<u8>(), bytes) }.to_vec(),
            )
        };
        let n = negotiator(func, neg)?;
        let g = n.lock().unwrap_or_else(|p| p.into_inner());
        let n = g
            .as_ref()
            .ok_or_else(|| invalid(func, format!("negotiator {neg} was shut down")))?;
        let handle = n.submit(request, data).map_err(|e| fail(&e))?;
        let h = NEXT.fetch_add(1, Ordering::Relaxed);
        lock(&NAMED).get_or_insert_with(HashMap::new).insert(
            h,
            Arc::new(Named {
                handle,
                done: OnceLock::new(),
            }),
        );
        // SAFETY: checked non-null.
        unsafe { out.write(h) };
        Ok(())
    })
}

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
    // SAFETY: the caller's contract, passed on.
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
    // SAFETY: the caller's contract, passed on.
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
    // SAFETY: the caller's contract, passed on.
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
    // SAFETY: the caller's contract, passed on.
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
    // SAFETY: the caller's contract, passed on.
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
    // SAFETY: the caller's contract, passed on.
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
    // SAFETY: the caller's contract, passed on.
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
    // SAFETY: the caller's contract, passed on.
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
    // SAFETY: the caller's contract, passed on.
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

/// Writes 1 to `done` if the operation finished (successfully or not), else 0. Never blocks.
///
/// # Safety
/// `done` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_named_test(
    op: dtcomm_named_t,
    done: *mut c_int,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_named_test";
    guard(F, || {
        if done.is_null() {
            return Err(invalid(F, "done is NULL"));
        }
        let n = named(F, op)?;
        let d = n.done.get().is_some() || n.handle.poll();
        // SAFETY: checked non-null.
        unsafe { done.write(c_int::from(d)) };
        Ok(())
    })
}

/// Waits for the operation; its result: `DTCOMM_SUCCESS`, `DTCOMM_MISMATCH` (the ranks
/// disagreed about it, or some did not submit it before the communicator's deadline; the
/// message names them), `DTCOMM_FAILED` (the communicator failed), `DTCOMM_SHUTDOWN`. The
/// same result on every later wait.
#[unsafe(no_mangle)]
pub extern "C" fn dtcomm_named_wait(op: dtcomm_named_t) -> dtcomm_result_t {
    const F: &str = "dtcomm_named_wait";
    guard(F, || {
        let n = named(F, op)?;
        match n.done.get_or_init(|| n.handle.clone().take()) {
            Ok(_) => Ok(()),
            Err(e) => Err(fail(e)),
        }
    })
}

/// Copies a finished operation's result (the reduced, gathered, broadcast, exchanged or
/// scattered tensor) to `out` and writes its size in bytes to `size`. With `capacity` smaller
/// than the result (or `out` NULL) nothing is copied and `DTCOMM_INVALID_ARGUMENT` is returned,
/// `size` still written: call with NULL and 0 to learn it.
///
/// # Safety
/// `out` valid for `capacity` bytes of writes (or NULL); `size` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_named_result(
    op: dtcomm_named_t,
    out: *mut c_void,
    capacity: usize,
    size: *mut usize,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_named_result";
    guard(F, || {
        if size.is_null() {
            return Err(invalid(F, "size is NULL"));
        }
        let n = named(F, op)?;
        let o = finished(F, &n)?;
        // SAFETY: checked non-null.
        unsafe { size.write(o.data.len()) };
        if out.is_null() || capacity < o.data.len() {
            return Err(invalid(
                F,
                format!(
                    "the result holds {} bytes; capacity is {capacity}",
                    o.data.len()
                ),
            ));
        }
        // SAFETY: `out` holds `capacity` >= len writable bytes (the caller's contract).
        unsafe { std::ptr::copy_nonoverlapping(o.data.as_ptr(), out.cast(), o.data.len()) };
        Ok(())
    })
}

/// Per-rank element counts of a finished allgather (from each rank) or alltoall (received
/// from each rank); none for the other kinds. Writes how many there are to `n` and copies up to
/// `capacity` of them to `counts` (NULL to only learn `n`).
///
/// # Safety
/// `counts` valid for `capacity` writes (or NULL); `n` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_named_counts(
    op: dtcomm_named_t,
    counts: *mut u64,
    capacity: usize,
    n: *mut usize,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_named_counts";
    guard(F, || {
        if n.is_null() {
            return Err(invalid(F, "n is NULL"));
        }
        let named = named(F, op)?;
        let o = finished(F, &named)?;
        // SAFETY: checked non-null.
        unsafe { n.write(o.counts.len()) };
        if !counts.is_null() {
            let k = capacity.min(o.counts.len());
            // SAFETY: `counts` holds `capacity` >= k writable entries.
            unsafe { std::ptr::copy_nonoverlapping(o.counts.as_ptr(), counts, k) };
        }
        Ok(())
    })
}

fn finished<'a>(func: &str, n: &'a Named) -> Result<&'a Output, Fail> {
    match n.done.get() {
        Some(Ok(o)) => Ok(o),
        Some(Err(e)) => Err(fail(e)),
        None => Err(invalid(
            func,
            "the operation was not waited for (dtcomm_named_wait)",
        )),
    }
}

/// Frees the operation's handle and its result. A pending operation still completes (every
/// rank's submission is needed for it); only the handle goes.
#[unsafe(no_mangle)]
pub extern "C" fn dtcomm_named_free(op: dtcomm_named_t) -> dtcomm_result_t {
    const F: &str = "dtcomm_named_free";
    guard(F, || {
        lock(&NAMED)
            .as_mut()
            .and_then(|m| m.remove(&op))
            .map(drop)
            .ok_or_else(|| {
                invalid(
                    F,
                    format!("named operation {op} is not live (freed, or never submitted)"),
                )
            })
    })
}
