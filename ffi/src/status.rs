//! The thread-local last error, and [`guard`]: every entry point runs its body inside it, so
//! that an error becomes a code plus a message and a panic becomes `DTCOMM_INTERNAL`.

use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

use dtcomm::CommError;

use crate::types::*;

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// A failed call: its code and message.
pub(crate) struct Fail {
    pub code: dtcomm_result_t,
    pub msg: String,
}

impl From<CommError> for Fail {
    fn from(e: CommError) -> Fail {
        Fail {
            code: e.code() as i32,
            msg: e.to_string(),
        }
    }
}

/// An invalid-argument failure naming the function.
pub(crate) fn invalid(func: &str, msg: impl std::fmt::Display) -> Fail {
    Fail {
        code: DTCOMM_INVALID_ARGUMENT,
        msg: format!("{func}: {msg}"),
    }
}

fn set_last(msg: &str) {
    let c = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
}

/// Runs `body`, turning its error or panic into a result code (and the last error).
pub(crate) fn guard(func: &str, body: impl FnOnce() -> Result<(), Fail>) -> dtcomm_result_t {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => DTCOMM_SUCCESS,
        Ok(Err(f)) => {
            set_last(&f.msg);
            f.code
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last(&format!("{func}: internal error (please report): {what}"));
            DTCOMM_INTERNAL
        }
    }
}

/// The message of the last failed call on this thread ("" if none). Valid until the next
/// failing call on this thread.
#[unsafe(no_mangle)]
pub extern "C" fn dtcomm_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

/// The name of a result code (`"timeout"`, `"mismatch"`, ...; `"unknown"` for others). A static
/// string.
#[unsafe(no_mangle)]
pub extern "C" fn dtcomm_result_name(code: dtcomm_result_t) -> *const c_char {
    let name: &'static [u8] = match code {
        DTCOMM_SUCCESS => b"ok\0",
        DTCOMM_INVALID_ARGUMENT => b"invalid_argument\0",
        DTCOMM_TIMEOUT => b"timeout\0",
        DTCOMM_PEER_LOST => b"peer_lost\0",
        DTCOMM_ABORTED => b"aborted\0",
        DTCOMM_MISMATCH => b"mismatch\0",
        DTCOMM_PROTOCOL => b"protocol\0",
        DTCOMM_SETUP => b"setup\0",
        DTCOMM_FAILED => b"failed\0",
        DTCOMM_SHUTDOWN => b"shutdown\0",
        DTCOMM_INTERNAL => b"internal\0",
        DTCOMM_IN_PROGRESS => b"in_progress\0",
        DTCOMM_ROUND_ENDED => b"round_ended\0",
        DTCOMM_DEVICE => b"device\0",
        DTCOMM_INTERRUPTED => b"interrupted\0",
        _ => b"unknown\0",
    };
    name.as_ptr().cast()
}
