//! Zero-copy views of caller memory: numpy arrays (and any object with the buffer protocol)
//! and torch tensors (DLPack). A [`Buf`] holds the exporter's export (so the memory stays
//! alive and, for numpy, unresizable) and releases it under the GIL when dropped.

use std::os::raw::c_int;

use dtcomm::{DType, Memory, RawBuf};

use pyo3::ffi;
use pyo3::prelude::*;

use crate::dlpack;
use crate::errors::Ctx;

/// Whether a call writes into the buffer.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
}

enum Owner {
    Buffer(Box<ffi::Py_buffer>),
    DlPack(dlpack::Managed),
}

/// A contiguous, typed view of caller memory.
pub(crate) struct Buf {
    ptr: *mut u8,
    /// Number of elements.
    pub count: usize,
    /// Element type.
    pub dtype: DType,
    /// Host memory, or a CUDA device's with the stream the call is ordered on.
    pub memory: Memory,
    owner: Option<Owner>,
}

// SAFETY: a `Buf` is an address into memory the exporter owns plus the export that keeps it
// alive; neither is tied to the thread that made it. The memory is used from one thread at a
// time (the caller's, or the engine's worker running the call it belongs to, ordered by the
// engine). The export is given back only in `Drop`, under the GIL (`Python::try_attach`, or
// leaked when the interpreter is finalising), whichever thread drops the last reference; the
// DLPack owner calls its producer's deleter once, from any thread (`dlpack::Managed` is
// `Send`).
unsafe impl Send for Buf {}
// SAFETY: `&Buf` offers reads only: its plain fields, `raw()` (a copy of the address, which
// the engine uses under `Communicator::run`/`submit`'s contract), and `as_bytes()` (reads of
// host memory). Nothing reachable through `&Buf` writes the memory or touches the owner, so
// shared references on several threads cannot race; the engine's worker holds `Arc<Buf>`s
// only to keep the exports alive until their call finished.
unsafe impl Sync for Buf {}

/// The dtype of a buffer-protocol format string (`struct` syntax, native byte order).
fn format_dtype(fmt: &str, itemsize: usize) -> Option<DType> {
    let code = fmt.trim_start_matches(['@', '=', '<']);
    if fmt.starts_with(['>', '!']) && cfg!(target_endian = "little") {
        return None;
    }
    Some(match (code, itemsize) {
        ("f", 4) => DType::F32,
        ("d", 8) => DType::F64,
        ("e", 2) => DType::F16,
        ("b", 1) => DType::I8,
        ("B", 1) => DType::U8,
        ("i" | "l" | "q", 4) => DType::I32,
        ("i" | "l" | "q", 8) => DType::I64,
        ("h", 2) => DType::I16,
        ("Zf", 8) => DType::C64,
        ("Zd", 16) => DType::C128,
        ("?", 1) => DType::Bool,
        _ => return None,
    })
}

impl Buf {
    /// Views `obj`: a torch tensor through DLPack (or a DLPack capsule, consumed), anything
    /// else through the buffer protocol.
    pub(crate) fn extract(obj: &Bound<'_, PyAny>, access: Access, ctx: &Ctx<'_>) -> PyResult<Buf> {
        // SAFETY: `obj` is a live object (the `Bound` holds a strong reference) and the GIL is held
        // (a `Bound` proves it); `PyObject_CheckBuffer` only reads its type's buffer slot.
        if unsafe { ffi::PyObject_CheckBuffer(obj.as_ptr()) } != 0 {
            return Self::from_buffer(obj, access, ctx);
        }
        if dlpack::is_capsule(obj) || obj.hasattr(pyo3::intern!(obj.py(), "__dlpack__"))? {
            return Self::from_dlpack(obj, access, ctx);
        }
        Err(ctx.type_err(format!(
            "of type {} is neither a torch tensor nor a numpy array (no buffer protocol, no __dlpack__)",
            obj.get_type().name()?
        )))
    }

    fn from_buffer(obj: &Bound<'_, PyAny>, access: Access, ctx: &Ctx<'_>) -> PyResult<Buf> {
        let mut view: Box<ffi::Py_buffer> = Box::new(ffi::Py_buffer::new());
        let mut flags = ffi::PyBUF_RECORDS_RO;
        if access == Access::Write {
            flags |= ffi::PyBUF_WRITABLE;
        }
        // SAFETY: `obj` is live and the GIL held (a `Bound`); `view` is a zero-initialised
        // `Py_buffer` we own alone, boxed so its address stays put while the export lives. On
        // success the export must be released exactly once, which `Owner::Buffer` does in `Buf`'s
        // `Drop`; on failure CPython leaves nothing to release and the box is simply freed.
        let rc = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, flags as c_int) };
        if rc != 0 {
            let cause = PyErr::fetch(obj.py());
            let ty = obj.get_type().name()?;
            return Err(if access == Access::Write && is_readonly(obj) {
                ctx.value_err(format!(
                    "is read-only; an in-place collective needs a writable array ({cause})"
                ))
            } else {
                ctx.type_err(format!(
                    "of type {ty} is neither a torch tensor nor a buffer (numpy array): {cause}"
                ))
            });
        }
        let buf_owner = Owner::Buffer(view);
        let Owner::Buffer(v) = &buf_owner else {
            unreachable!()
        };
        let itemsize = v.itemsize as usize;
        let fmt = if v.format.is_null() {
            "B".to_owned()
        } else {
            // SAFETY: `v` is a successful export requested with `PyBUF_FORMAT` (part of
            // `PyBUF_RECORDS_RO`), so a non-null `format` (checked) is a NUL-terminated string the
            // exporter keeps until the export is released; `buf_owner` holds the export past this
            // statement, and the string is copied into a `String` at once.
            unsafe { std::ffi::CStr::from_ptr(v.format) }
                .to_string_lossy()
                .into_owned()
        };
        // SAFETY: `v` is a successful export, alive in `buf_owner`, and the GIL is held (`obj` is a
        // `Bound`); `PyBuffer_IsContiguous` only reads its shape, strides and item size.
        let contiguous = unsafe { ffi::PyBuffer_IsContiguous(&**v, b'C' as _) } != 0;
        let ptr = v.buf.cast::<u8>();
        let bytes = v.len as usize;
        let shape = dims(v);
        let mut b = Buf {
            ptr,
            count: 0,
            dtype: DType::U8,
            memory: Memory::Host,
            owner: Some(buf_owner),
        };
        let Some(dtype) = format_dtype(&fmt, itemsize) else {
            return Err(ctx.type_err(format!(
                "has an unsupported element type (format {fmt:?}, {itemsize} bytes); dtcomm takes \
                 float32, float64, float16, bfloat16 (torch), int8, uint8, int16, int32, int64, \
                 complex64, complex128, bool"
            )));
        };
        if !contiguous {
            return Err(ctx.value_err(format!(
                "is not contiguous (shape {shape:?}); pass numpy.ascontiguousarray(x)"
            )));
        }
        b.dtype = dtype;
        b.count = bytes / itemsize;
        b.check_aligned(ctx)?;
        Ok(b)
    }

    fn from_dlpack(obj: &Bound<'_, PyAny>, access: Access, ctx: &Ctx<'_>) -> PyResult<Buf> {
        let _ = access; // DLPack has no read-only flag in its legacy form; torch tensors are writable.
        // A CUDA tensor is used on torch's current stream of its device: `__dlpack__` is told
        // so (DLPack numbers the legacy default stream 1), and the call is ordered on it.
        let stream = cuda_stream(obj)?;
        let m = dlpack::Managed::from_object(obj, ctx, stream.map(|s| if s == 0 { 1 } else { s }))
            .map_err(|e| {
                let dev = device_name(obj);
                if dev != "cpu" && dev != "?" && !dev.starts_with("cuda") {
                    ctx.value_err(format!(
                        "is on device {dev}; dtcomm takes CPU and CUDA tensors"
                    ))
                } else {
                    e
                }
            })?;
        let t = m.tensor();
        let memory = match t.device_type {
            dlpack::DEVICE_CPU => Memory::Host,
            dlpack::DEVICE_CUDA => Memory::Device {
                device: t.device_id,
                stream: match stream {
                    Some(s) => s,
                    // A capsule exported already: the current stream of its device.
                    None => current_stream(obj.py(), t.device_id)?,
                },
            },
            other => {
                return Err(ctx.value_err(format!(
                    "is on device {} (DLPack device type {other}); dtcomm takes CPU and CUDA \
                     tensors",
                    device_name(obj),
                )));
            }
        };
        let Some(dtype) = dlpack::dtype(t.code, t.bits, t.lanes) else {
            return Err(ctx.type_err(format!(
                "has an unsupported dtype {}; dtcomm takes float32, float64, float16, bfloat16, \
                 int8, uint8, int16, int32, int64, complex64, complex128, bool",
                dtype_name(obj)
            )));
        };
        if !t.contiguous {
            return Err(ctx.value_err(format!(
                "is not contiguous (shape {:?}, strides {:?}); pass x.contiguous()",
                t.shape,
                t.strides.unwrap_or_default()
            )));
        }
        let b = Buf {
            ptr: t.data,
            count: t.shape.iter().product::<i64>() as usize,
            dtype,
            memory,
            owner: Some(Owner::DlPack(m)),
        };
        b.check_aligned(ctx)?;
        Ok(b)
    }

    fn check_aligned(&self, ctx: &Ctx<'_>) -> PyResult<()> {
        if self.count > 0 && !(self.ptr as usize).is_multiple_of(self.dtype.align()) {
            return Err(ctx.value_err(format!(
                "is not aligned to {} bytes for its {} elements (address {:p}); copy it first",
                self.dtype.align(),
                self.dtype,
                self.ptr
            )));
        }
        Ok(())
    }

    /// Refuses device memory, for the calls that read the bytes on the host.
    pub(crate) fn host_only(self, ctx: &Ctx<'_>) -> PyResult<Buf> {
        match self.memory {
            Memory::Host => Ok(self),
            _ => Err(ctx.value_err(
                "is a CUDA tensor; this call takes CPU tensors (copy it with .cpu() first)",
            )),
        }
    }

    /// The bytes of the view (valid while this `Buf`, the export, lives). Host memory only
    /// (see [`host_only`](Self::host_only)).
    pub(crate) fn as_bytes(&self) -> &[u8] {
        assert!(
            self.memory == Memory::Host,
            "as_bytes on device memory (a caller skipped host_only)"
        );
        let n = self.count * self.dtype.size();
        if n == 0 {
            return &[];
        }
        // SAFETY: the memory is host memory (asserted above) and `n > 0`, so `self.ptr` is the
        // export's non-null start, aligned for its elements (`check_aligned`) and contiguous
        // (checked at extraction). The export in `self.owner` keeps those `count` elements of
        // `dtype`, `n` bytes, alive and readable for as long as `self` lives, which bounds the
        // returned slice; nothing writes through `&self`.
        unsafe { std::slice::from_raw_parts(self.ptr, n) }
    }

    /// The byte-level view the engine takes ([`dtcomm::Communicator::run`]): valid while this
    /// `Buf` (the export) lives.
    pub(crate) fn raw(&self) -> RawBuf {
        match self.memory {
            Memory::Device { device, stream } => {
                RawBuf::device(self.ptr, self.count, self.dtype, device, stream)
            }
            _ => RawBuf::host(self.ptr, self.count, self.dtype),
        }
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        if let Some(owner) = self.owner.take() {
            // `try_attach`, not `attach`: the last reference may go on the engine's thread
            // while the interpreter finalises (an async call's buffers, dropped when the
            // communicator shuts down at exit); attaching then would park that thread for
            // ever and hang the exit joining it. The process is ending: leave the export.
            let mut owner = Some(owner);
            let released = Python::try_attach(|_py| match owner.take().expect("once") {
                Owner::Buffer(mut v) => {
                    // SAFETY: only `from_buffer` builds an `Owner::Buffer`, after
                    // `PyObject_GetBuffer` succeeded, so `v` is a live export; `owner.take()` hands
                    // it to this closure once, so it is released exactly once, and the closure runs
                    // with the GIL held (`try_attach`).
                    unsafe { ffi::PyBuffer_Release(&mut *v) }
                }
                Owner::DlPack(m) => drop(m),
            });
            if released.is_none() {
                std::mem::forget(owner);
            }
        }
    }
}

fn dims(v: &ffi::Py_buffer) -> Vec<isize> {
    if v.shape.is_null() {
        return vec![v.len / v.itemsize.max(1)];
    }
    // SAFETY: `v` is a successful export the caller still holds (in `buf_owner`); a non-null
    // `shape` (checked) holds `ndim` entries owned by the exporter until the export is released,
    // and they are copied into a `Vec` at once.
    unsafe { std::slice::from_raw_parts(v.shape, v.ndim as usize) }.to_vec()
}

fn is_readonly(obj: &Bound<'_, PyAny>) -> bool {
    obj.getattr("flags")
        .and_then(|f| f.getattr("writeable"))
        .and_then(|w| w.extract::<bool>())
        .map(|w| !w)
        .unwrap_or(false)
}

/// For an object whose `__dlpack_device__` says CUDA: torch's current stream of that device
/// (`None` for anything else; torch is only asked about CUDA tensors, so a CPU-only process
/// never touches `torch.cuda`).
fn cuda_stream(obj: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
    let py = obj.py();
    if dlpack::is_capsule(obj) || !obj.hasattr(pyo3::intern!(py, "__dlpack_device__"))? {
        return Ok(None);
    }
    // A device DLPack cannot describe (torch's meta) raises here: `__dlpack__` then fails
    // too, and that error names the device.
    let Ok((kind, id)) = obj
        .call_method0(pyo3::intern!(py, "__dlpack_device__"))
        .and_then(|d| d.extract::<(i32, i32)>())
    else {
        return Ok(None);
    };
    if kind != dlpack::DEVICE_CUDA {
        return Ok(None);
    }
    current_stream(py, id).map(Some)
}

/// `torch.cuda.current_stream(device).cuda_stream`, or 0 (the legacy default stream) when
/// torch is not there.
fn current_stream(py: Python<'_>, device: i32) -> PyResult<u64> {
    let Ok(torch) = py.import("torch") else {
        return Ok(0);
    };
    torch
        .getattr("cuda")?
        .call_method1("current_stream", (device,))?
        .getattr("cuda_stream")?
        .extract()
}

fn device_name(obj: &Bound<'_, PyAny>) -> String {
    obj.getattr("device")
        .map(|d| d.to_string())
        .unwrap_or_else(|_| "?".into())
}

fn dtype_name(obj: &Bound<'_, PyAny>) -> String {
    obj.getattr("dtype")
        .map(|d| d.to_string())
        .unwrap_or_else(|_| "?".into())
}
