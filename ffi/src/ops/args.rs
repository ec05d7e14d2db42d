//! The C arguments of the collectives as the engine's types: dtype and reduction codes,
//! non-negative indices (roots, peers), element totals that must not overflow, buffer
//! pointers as [`RawBuf`]s, and the per-rank count arrays of the `_v` calls.

use std::ffi::{c_int, c_void};

use dtcomm::{DType, RawBuf, ReduceOp};

use crate::status::{Fail, invalid};
use crate::types::*;

pub(crate) fn dtype(func: &str, d: dtcomm_dtype_t) -> Result<DType, Fail> {
    DType::ALL
        .iter()
        .copied()
        .find(|t| *t as i32 == d)
        .ok_or_else(|| {
            invalid(
                func,
                format!("unknown dtype {d} (DTCOMM_FLOAT32=1 .. DTCOMM_BOOL=12)"),
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
                format!("unknown reduction {o} (DTCOMM_SUM=1 .. DTCOMM_BXOR=8)"),
            )
        })
}

pub(super) fn index(func: &str, what: &str, v: c_int) -> Result<usize, Fail> {
    usize::try_from(v).map_err(|_| invalid(func, format!("{what} {v} is negative")))
}

pub(super) fn mul(func: &str, count: usize, world: usize) -> Result<usize, Fail> {
    count
        .checked_mul(world)
        .ok_or_else(|| invalid(func, format!("count {count} x world {world} overflows")))
}

/// A buffer argument; NULL is `None` (absent).
pub(super) fn buf(p: *const c_void, count: usize, dt: DType) -> Option<RawBuf> {
    (!p.is_null()).then(|| RawBuf::host(p.cast_mut().cast(), count, dt))
}

/// A required buffer argument: NULL with elements is refused by the engine as a null pointer.
pub(super) fn req_buf(p: *const c_void, count: usize, dt: DType) -> RawBuf {
    RawBuf::host(p.cast_mut().cast(), count, dt)
}

pub(super) fn counts(
    func: &str,
    what: &str,
    p: *const usize,
    world: usize,
) -> Result<Vec<usize>, Fail> {
    if p.is_null() {
        return Err(invalid(func, format!("{what} is NULL")));
    }
    // SAFETY: `p` is non-null (checked above). `counts` reads the `recvcounts`/`sendcounts`
    // argument of a `_v` entry point, whose contract makes it hold `size` entries (`world`, the
    // communicator's size) readable while the call runs; the slice is copied into a `Vec` at once,
    // so nothing keeps the caller's array.
    Ok(unsafe { std::slice::from_raw_parts(p, world) }.to_vec())
}
