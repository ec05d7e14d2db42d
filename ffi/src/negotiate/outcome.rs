//! How a named operation ends, seen from C: `dtcomm_named_test` (done yet?),
//! `dtcomm_named_wait` (its result code), `dtcomm_named_result` and `dtcomm_named_counts`
//! (its output, copied out), `dtcomm_named_free` (the handle gone); and the mapping of the
//! negotiator's errors to result codes.

use std::ffi::{c_int, c_void};

use dtcomm::negotiate::{NegotiateError, Output};

use super::registry::{NAMED, Named, dtcomm_named_t, lock, named};
use crate::status::{Fail, guard, invalid};
use crate::types::*;

pub(super) fn fail(e: &NegotiateError) -> Fail {
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
        // SAFETY: `done` is non-null (checked at the top) and the contract makes it valid for a
        // write of one `c_int`.
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
        // SAFETY: `size` is non-null (checked at the top) and the contract makes it valid for a
        // write of one `usize`.
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
        // SAFETY: `out` is non-null and `capacity >= o.data.len()` (both checked just above), and
        // the contract makes `out` valid for `capacity` bytes of writes. The source is the result
        // buffer the negotiator handed us, owned by `n` (an `Arc` held until we return), so it is
        // alive and cannot overlap the caller's memory.
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
        // SAFETY: `n` is non-null (checked at the top) and the contract makes it valid for a write
        // of one `usize`.
        unsafe { n.write(o.counts.len()) };
        if !counts.is_null() {
            let k = capacity.min(o.counts.len());
            // SAFETY: `counts` is non-null (checked just above) and the contract makes it valid for
            // `capacity` writes of `u64`; `k <= capacity` are written, read from the outcome's own
            // `counts` (owned by `named`, an `Arc` held until we return), which cannot overlap the
            // caller's memory.
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
