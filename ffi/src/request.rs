//! Requests of non-blocking calls: test, wait with a timeout, free. A freed request's handle
//! is unknown afterwards: waiting on it or freeing it again is `DTCOMM_INVALID_ARGUMENT`.

use std::ffi::c_int;

use crate::handles;
use crate::status::{Fail, guard, invalid};
use crate::types::*;

fn unknown(h: dtcomm_request_t) -> String {
    format!("request {h} is not a live request (freed, or never returned by a dtcomm_i* call)")
}

/// Writes 1 to `done` if the call finished (successfully or not), else 0. Never blocks.
///
/// # Safety
/// `done` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_test(req: dtcomm_request_t, done: *mut c_int) -> dtcomm_result_t {
    const F: &str = "dtcomm_test";
    guard(F, || {
        if done.is_null() {
            return Err(invalid(F, "done is NULL"));
        }
        let w = handles::request(req).ok_or_else(|| invalid(F, unknown(req)))?;
        // SAFETY: `done` is non-null (checked at the top) and the contract makes it valid for a
        // write of one `c_int`.
        unsafe { done.write(c_int::from(w.test())) };
        Ok(())
    })
}

/// Waits for the call and returns its result (the same result on every later wait).
/// `timeout_seconds` > 0 bounds the wait: `DTCOMM_IN_PROGRESS` if the call has not finished by
/// then (it goes on); <= 0 waits as long as the deadlines of this call and of those queued
/// before it.
#[unsafe(no_mangle)]
pub extern "C" fn dtcomm_wait(req: dtcomm_request_t, timeout_seconds: f64) -> dtcomm_result_t {
    const F: &str = "dtcomm_wait";
    guard(F, || {
        let w = handles::request(req).ok_or_else(|| invalid(F, unknown(req)))?;
        let r = if timeout_seconds > 0.0 && timeout_seconds.is_finite() {
            let limit = dtcomm::secs::saturating(timeout_seconds);
            match w.wait_timeout(limit) {
                Some(r) => r,
                None => {
                    return Err(Fail {
                        code: DTCOMM_IN_PROGRESS,
                        msg: format!(
                            "{F}: rank {}: {} still running after {limit:?}",
                            w.rank(),
                            w.op()
                        ),
                    });
                }
            }
        } else {
            w.wait()
        };
        r.map_err(Fail::from)
    })
}

/// Frees the request. A request still running keeps running (its buffers must stay valid
/// until it finished); only the handle goes.
#[unsafe(no_mangle)]
pub extern "C" fn dtcomm_request_free(req: dtcomm_request_t) -> dtcomm_result_t {
    const F: &str = "dtcomm_request_free";
    guard(F, || {
        handles::remove_request(req)
            .map(drop)
            .ok_or_else(|| invalid(F, unknown(req)))
    })
}
