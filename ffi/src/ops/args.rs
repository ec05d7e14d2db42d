//! The C arguments of the collectives as the engine's types: dtype and reduction codes,
//! non-negative indices (roots, peers), element totals that must not overflow, buffer
//! pointers as [`RawBuf`]s, and the per-rank count arrays of the `_v` calls.

use std::ffi::{c_int, c_void};

use dtcomm::{DType, RawBuf, ReduceOp};

use crate::status::{Fail, invalid};
use crate::types::*;

pub(crate) fn dtype(func: &str, d: dtcomm_dtype_t) -> Result<DType, Fail> {
    u8::try_from(d)
        .ok()
        .and_then(DType::from_u8)
        .ok_or_else(|| {
            invalid(
                func,
                format!("unknown dtype {d} (DTCOMM_FLOAT32={DTCOMM_FLOAT32} .. DTCOMM_BOOL={DTCOMM_BOOL})"),
            )
        })
}

pub(crate) fn redop(func: &str, o: dtcomm_op_t) -> Result<ReduceOp, Fail> {
    u8::try_from(o)
        .ok()
        .and_then(ReduceOp::from_u8)
        .ok_or_else(|| {
            invalid(
                func,
                format!(
                    "unknown reduction {o} (DTCOMM_SUM={DTCOMM_SUM} .. DTCOMM_BXOR={DTCOMM_BXOR})"
                ),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_the_engines_wire_numbers() {
        for d in DType::ALL {
            assert_eq!(dtype("f", d as i32).ok(), Some(d));
        }
        for o in ReduceOp::ALL {
            assert_eq!(redop("f", o as i32).ok(), Some(o));
        }
        // A code past a byte is refused, not truncated to a dtype's or operator's number.
        for bad in [0, 13, -1, 256 + 1, i32::MIN, i32::MAX] {
            let e = dtype("f", bad).unwrap_err();
            assert_eq!(e.code, DTCOMM_INVALID_ARGUMENT);
            assert_eq!(
                e.msg,
                format!("f: unknown dtype {bad} (DTCOMM_FLOAT32=1 .. DTCOMM_BOOL=12)")
            );
        }
        for bad in [0, 9, -1, 256 + 1] {
            let e = redop("f", bad).unwrap_err();
            assert_eq!(
                e.msg,
                format!("f: unknown reduction {bad} (DTCOMM_SUM=1 .. DTCOMM_BXOR=8)")
            );
        }
    }
}
