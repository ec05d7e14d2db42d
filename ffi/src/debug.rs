//! `dtcomm_debug_dump`: the flight recorder's trace in torch's Flight Recorder format.

use std::ffi::{CStr, c_char};

use crate::status::{guard, invalid};
use crate::types::*;

/// Writes the calls this process recorded (its flight recorder: the last
/// `DTCOMM_FR_BUFFER_SIZE` calls, default 2000) to the file `path`, in torch's Flight Recorder
/// trace format (a pickle that `torchfrtrace` reads; name the files of a job `PREFIX<rank>`
/// in one directory). See docs/flight-recorder.md. `DTCOMM_INVALID_ARGUMENT` when `path` is
/// NULL, not UTF-8, or cannot be written (the last error says why).
///
/// # Safety
/// `path` must be NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_debug_dump(path: *const c_char) -> dtcomm_result_t {
    guard("dtcomm_debug_dump", || {
        if path.is_null() {
            return Err(invalid("dtcomm_debug_dump", "path is NULL"));
        }
        // SAFETY: non-null (checked above) and NUL-terminated by the contract.
        let p = unsafe { CStr::from_ptr(path) };
        let p = p
            .to_str()
            .map_err(|_| invalid("dtcomm_debug_dump", "path is not UTF-8"))?;
        dtcomm::flight::dump(std::path::Path::new(p), None)
            .map(|_| ())
            .map_err(|e| invalid("dtcomm_debug_dump", format!("cannot write {p}: {e}")))
    })
}
