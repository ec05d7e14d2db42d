//! `dtcomm_cuda_status`: whether CUDA and NCCL are usable here, as JSON.

use std::ffi::c_char;

use dtcomm::cuda::cuda_status;

use crate::status::{guard, invalid};
use crate::types::*;

/// Writes whether this process can use a GPU, as a NUL-terminated JSON object, into `buf`.
///
/// The object is `dtcomm::cuda::CudaStatus::to_json`'s: `usable` (bool), `reason` (string
/// or null), `device_count` (number or null), `built_with_cuda` (bool), `cuda_api`, and
/// `driver` and `nccl`, each with `found`, `path`, `version`, `source`, `error`, `features`
/// and `tried` (see docs/cuda.md). A library built without the cargo feature `cuda` answers
/// that it was, in `reason`. Never fails for what it finds: problems are in the JSON.
///
/// `*needed` (when `needed` is not NULL) is set to the size the answer needs, NUL included.
/// If `len` is smaller, nothing but an empty string is written (when `len > 0`) and the
/// result is `DTCOMM_INVALID_ARGUMENT`; `buf` may be NULL when `len` is 0, to ask the size.
/// Each call probes again, so the size can change between two calls: retry on
/// `DTCOMM_INVALID_ARGUMENT` with the new `*needed`, or pass a generous buffer (4096).
///
/// # Safety
/// `buf` must be valid for `len` bytes of writes (or `len` 0); `needed` NULL or valid for a
/// write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_cuda_status(
    buf: *mut c_char,
    len: usize,
    needed: *mut usize,
) -> dtcomm_result_t {
    guard("dtcomm_cuda_status", || {
        if buf.is_null() && len > 0 {
            return Err(invalid(
                "dtcomm_cuda_status",
                "buf is NULL but len is not 0",
            ));
        }
        let json = cuda_status().to_json();
        let size = json.len() + 1;
        if !needed.is_null() {
            // SAFETY: `needed` is non-null (checked just above), and the contract makes a non-null
            // `needed` valid for a write of one `usize`.
            unsafe { needed.write(size) };
        }
        if len < size {
            if len > 0 {
                // SAFETY: `len > 0` here and a NULL `buf` with `len > 0` was refused at the top, so
                // `buf` is the caller's buffer, valid for `len` >= 1 bytes of writes by the
                // contract.
                unsafe { buf.write(0) };
            }
            return Err(invalid(
                "dtcomm_cuda_status",
                format!("buffer of {len} bytes is too small: the status needs {size}"),
            ));
        }
        // SAFETY: `buf` is non-null (`len >= size >= 1`, and NULL with `len > 0` was refused) and
        // valid for `len >= size = json.len() + 1` bytes of writes by the contract: the copy fills
        // the first `json.len()` and the terminator the last. `json` is our own `String`, so the
        // regions cannot overlap, and it has no NUL inside (control characters are escaped), so the
        // C string ends at the terminator.
        unsafe {
            std::ptr::copy_nonoverlapping(json.as_ptr(), buf.cast::<u8>(), json.len());
            buf.add(json.len()).write(0);
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use std::ffi::CStr;

    use super::*;

    #[test]
    fn sizes_and_writes_the_json() {
        let mut needed = 0usize;
        // SAFETY: a NULL `buf` with `len` 0 only asks the size (nothing is written to it), and
        // `needed` points at a live local `usize`.
        let rc = unsafe { dtcomm_cuda_status(std::ptr::null_mut(), 0, &mut needed) };
        assert_eq!(rc, DTCOMM_INVALID_ARGUMENT);
        assert!(needed > 2);
        let mut small = [1 as c_char; 8];
        // SAFETY: `small` is a live local array of exactly the 8 bytes passed as `len`; `needed`
        // points at a live local `usize`.
        let rc = unsafe { dtcomm_cuda_status(small.as_mut_ptr(), 8, &mut needed) };
        assert_eq!(rc, DTCOMM_INVALID_ARGUMENT);
        assert_eq!(small[0], 0);
        let mut buf = vec![1 as c_char; needed + 4096];
        // SAFETY: `buf` is a live `Vec` of `buf.len()` bytes, the length passed, and not otherwise
        // borrowed during the call; a NULL `needed` is allowed.
        let rc = unsafe { dtcomm_cuda_status(buf.as_mut_ptr(), buf.len(), std::ptr::null_mut()) };
        assert_eq!(rc, DTCOMM_SUCCESS);
        // SAFETY: the call succeeded, so it wrote a NUL-terminated string into `buf`, which stays
        // alive and unmodified while `json` borrows it.
        let json = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap();
        assert!(json.starts_with("{\"usable\":"), "{json}");
        assert!(json.contains(",\"nccl\":{\"found\":"), "{json}");
        // SAFETY: deliberately outside the contract (NULL `buf` with `len` 5) to check the refusal:
        // the function returns `DTCOMM_INVALID_ARGUMENT` before it touches either pointer.
        let rc = unsafe { dtcomm_cuda_status(std::ptr::null_mut(), 5, std::ptr::null_mut()) };
        assert_eq!(rc, DTCOMM_INVALID_ARGUMENT);
    }
}
