//! A submission from C: the arguments every `dtcomm_named_*` call shares ([`Spec`]), checked
//! and turned into the engine's [`Request`] with its payload (a copy of the caller's tensor,
//! or the caller's memory lent in place), submitted, and registered under a new handle.

use std::collections::HashMap;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use dtcomm::negotiate::{InPlace, Kind, Payload, Request};
use dtcomm::{DType, ReduceOp};

use super::outcome::fail;
use super::registry::{NAMED, NEXT, Named, dtcomm_named_t, dtcomm_negotiator_t, lock, negotiator};
use crate::ops::{dtype, redop};
use crate::status::{Fail, guard, invalid};
use crate::types::*;

/// What a submission describes besides its kind.
pub(super) struct Spec {
    pub(super) dtype: dtcomm_dtype_t,
    pub(super) shape: *const u64,
    pub(super) ndim: usize,
    pub(super) data: *const c_void,
    pub(super) root: Option<c_int>,
    pub(super) op: Option<dtcomm_op_t>,
    pub(super) scale: (f64, f64),
    pub(super) splits: (*const u64, usize),
    /// `data` is lent (the result lands there) instead of copied.
    pub(super) in_place: bool,
}

impl Spec {
    pub(super) fn plain(
        dtype: dtcomm_dtype_t,
        shape: *const u64,
        ndim: usize,
        data: *const c_void,
    ) -> Self {
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
    // SAFETY: `p` is non-null (checked above) and `n > 0`. `slice` is called only by `submit` for
    // `spec.shape`/`spec.ndim` and `spec.splits`, which `submit`'s contract makes readable for `n`
    // entries of `u64` while it runs; both callers copy the slice (`to_vec`) at once, so the
    // unbounded lifetime `'a` never outlives that.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// Builds the request and submits it with a copy of the caller's data.
///
/// # Safety
/// As the public functions document: `name` NUL-terminated; `spec.shape` readable for
/// `spec.ndim` entries and `spec.splits.0` for `spec.splits.1`, while this call runs;
/// `spec.data` readable for the tensor's bytes while this call runs or, with `spec.in_place`,
/// readable and writable, and untouched by the caller, until the operation completes; `out`
/// valid for a write.
pub(super) unsafe fn submit(
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
        // SAFETY: `name` is non-null (checked just above) and, by `submit`'s contract, a
        // NUL-terminated string readable while this call runs; the borrowed `&str` is only
        // formatted into the request's own `String` below.
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
            // SAFETY: `in_place` is set only by the `_inplace` entry points, whose contract (passed
            // on through `submit`'s) lends `data`, non-null when `bytes > 0` (checked above), for
            // reads and writes of the tensor's `bytes` bytes, untouched by the caller until the
            // operation is reported complete: what `InPlace::new` requires.
            Payload::InPlace(unsafe { InPlace::new(spec.data.cast_mut().cast(), bytes) })
        } else if bytes == 0 {
            Payload::from(Vec::new())
        } else {
            // SAFETY: `bytes > 0` here, so `spec.data` is non-null (checked above); `submit`'s
            // contract makes it readable for the tensor's bytes (the dtype's size times the shape's
            // product, `bytes`) while this call runs, and the slice is copied into the payload's
            // own `Vec` at once.
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
        // SAFETY: `out` is non-null (checked at the top) and `submit`'s contract makes it valid for
        // a write of one `dtcomm_named_t`.
        unsafe { out.write(h) };
        Ok(())
    })
}
