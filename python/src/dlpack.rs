//! The DLPack side door for torch tensors: `tensor.__dlpack__()` hands over a capsule named
//! `dltensor` holding a `DLManagedTensor` (the legacy, unversioned ABI every torch speaks);
//! we rename it `used_dltensor` (we own it now) and call its deleter when done.

use std::ffi::{CStr, c_void};
use std::os::raw::c_int;

use dtcomm::DType;
use pyo3::ffi;
use pyo3::prelude::*;

use crate::errors::Ctx;

/// `kDLCPU`.
pub(crate) const DEVICE_CPU: i32 = 1;
/// `kDLCUDA`.
pub(crate) const DEVICE_CUDA: i32 = 2;

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: c_int,
    device_id: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: c_int,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

const NAME: &CStr = c"dltensor";
const USED: &CStr = c"used_dltensor";

/// A consumed `DLManagedTensor`; dropping it calls the producer's deleter.
pub(crate) struct Managed(*mut DLManagedTensor);

// SAFETY: a `Managed` is the sole owner of its `DLManagedTensor` (the capsule was renamed
// `used_dltensor`, so the capsule's destructor leaves the tensor alone): moving it to another
// thread moves that ownership, and nothing else refers to the struct. The memory it describes
// is used under the engine's contract, not through `Managed`, and the producer's deleter runs
// once, in `drop`, which happens with the GIL held (`Buf`'s `Drop` under `Python::try_attach`,
// or an error path that holds a `Bound`), whatever the thread.
unsafe impl Send for Managed {}

/// What the collectives need to know of a DLPack tensor.
pub(crate) struct Info {
    pub data: *mut u8,
    pub device_type: i32,
    pub device_id: i32,
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
    pub shape: Vec<i64>,
    pub strides: Option<Vec<i64>>,
    pub contiguous: bool,
}

impl Managed {
    /// Calls `obj.__dlpack__()` (with `stream`, DLPack's number for the stream the consumer
    /// will use, for device tensors) and takes ownership of the tensor in the capsule.
    pub(crate) fn from_object(
        obj: &Bound<'_, PyAny>,
        ctx: &Ctx<'_>,
        stream: Option<u64>,
    ) -> PyResult<Managed> {
        // A capsule already (`torch.utils.dlpack.to_dlpack(t)`: a tenth of the cost of
        // `t.__dlpack__()`, for callers on a hot path), or an object that exports one.
        let capsule = if is_capsule(obj) {
            obj.clone()
        } else {
            let py = obj.py();
            match stream {
                None => obj.call_method0(pyo3::intern!(py, "__dlpack__")),
                Some(s) => {
                    let kw = pyo3::types::PyDict::new(py);
                    kw.set_item("stream", s)?;
                    obj.call_method(pyo3::intern!(py, "__dlpack__"), (), Some(&kw))
                }
            }
            .map_err(|e| ctx.value_err(format!("cannot be exported through DLPack: {e}")))?
        };
        let cap = capsule.as_ptr();
        // SAFETY: `cap` is the capsule object, alive for this block (`capsule` holds a strong
        // reference), and the GIL is held (`obj` is a `Bound`). `PyCapsule_IsValid` checks that it
        // is a capsule named `dltensor` with a non-null pointer before `PyCapsule_GetPointer` reads
        // that pointer, which the DLPack protocol makes the producer's `DLManagedTensor`. Renaming
        // the capsule `used_dltensor` takes ownership: its destructor then leaves the tensor alone,
        // so the `Managed` returned is the only owner (if the rename fails we return without it,
        // and the capsule still owns the tensor).
        unsafe {
            if ffi::PyCapsule_IsValid(cap, NAME.as_ptr()) == 0 {
                return Err(ctx.type_err("gave a DLPack capsule that is not a 'dltensor'"));
            }
            let p = ffi::PyCapsule_GetPointer(cap, NAME.as_ptr()).cast::<DLManagedTensor>();
            if p.is_null() {
                return Err(PyErr::fetch(obj.py()));
            }
            // Renaming marks the capsule consumed: its destructor no longer frees the tensor.
            if ffi::PyCapsule_SetName(cap, USED.as_ptr()) != 0 {
                return Err(PyErr::fetch(obj.py()));
            }
            Ok(Managed(p))
        }
    }

    /// The tensor's layout.
    pub(crate) fn tensor(&self) -> Info {
        // SAFETY: `self.0` is the non-null `DLManagedTensor` `from_object` took ownership of; it
        // lives until `Managed::drop` calls its deleter, which `&self` rules out while `t` is in
        // use, and the producer does not change the struct after exporting it.
        let t = unsafe { &(*self.0).dl_tensor };
        let nd = t.ndim.max(0) as usize;
        let shape = if nd == 0 || t.shape.is_null() {
            Vec::new()
        } else {
            // SAFETY: `t.shape` is non-null (checked) and, per DLPack, holds `ndim` (`nd > 0`)
            // `int64` entries owned by the tensor's manager, alive while we own the tensor; they
            // are copied into a `Vec` at once.
            unsafe { std::slice::from_raw_parts(t.shape, nd) }.to_vec()
        };
        let strides = (!t.strides.is_null() && nd > 0)
            // SAFETY: as for `shape`: a non-null `strides` (checked) holds `ndim` entries alive
            // while we own the tensor, copied at once.
            .then(|| unsafe { std::slice::from_raw_parts(t.strides, nd) }.to_vec());
        let contiguous = match &strides {
            None => true,
            Some(st) => {
                let mut expect = 1i64;
                let mut ok = true;
                for (d, s) in shape.iter().zip(st).rev() {
                    if *d != 1 && *s != expect {
                        ok = false;
                        break;
                    }
                    expect *= d;
                }
                ok
            }
        };
        Info {
            // The address only (never dereferenced here; for a CUDA tensor it is a device
            // address, not host memory), so no `unsafe` in-bounds offset is needed.
            data: t.data.cast::<u8>().wrapping_add(t.byte_offset as usize),
            device_type: t.device.device_type,
            device_id: t.device.device_id,
            code: t.dtype.code,
            bits: t.dtype.bits,
            lanes: t.dtype.lanes,
            shape,
            strides,
            contiguous,
        }
    }
}

impl Drop for Managed {
    fn drop(&mut self) {
        // SAFETY: `self.0` is the `DLManagedTensor` `from_object` made us the sole owner of (the
        // capsule was renamed, so its destructor leaves it alone). `drop` runs once, so the
        // producer's deleter, which frees the tensor and the struct `self.0` points at, runs
        // exactly once, and nothing uses the pointer afterwards. It runs with the GIL held (see the
        // `Send` impl), for producers whose deleter needs it.
        unsafe {
            if let Some(d) = (*self.0).deleter {
                d(self.0);
            }
        }
    }
}

/// Whether `obj` is a capsule (a DLPack export passed as is).
pub(crate) fn is_capsule(obj: &Bound<'_, PyAny>) -> bool {
    // SAFETY: `obj` is a live object (the `Bound` holds a strong reference) and the GIL is held;
    // `PyCapsule_CheckExact` only compares its type pointer.
    unsafe { ffi::PyCapsule_CheckExact(obj.as_ptr()) != 0 }
}

/// The dtcomm dtype of a DLPack dtype (kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4,
/// kDLComplex 5 with the bits of the whole number, kDLBool 6).
pub(crate) fn dtype(code: u8, bits: u8, lanes: u16) -> Option<DType> {
    if lanes != 1 {
        return None;
    }
    Some(match (code, bits) {
        (0, 8) => DType::I8,
        (0, 32) => DType::I32,
        (0, 64) => DType::I64,
        (0, 16) => DType::I16,
        (1, 8) => DType::U8,
        (2, 16) => DType::F16,
        (2, 32) => DType::F32,
        (2, 64) => DType::F64,
        (4, 16) => DType::BF16,
        (5, 64) => DType::C64,
        (5, 128) => DType::C128,
        (6, 8) => DType::Bool,
        _ => return None,
    })
}
