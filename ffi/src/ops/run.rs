//! Running a built [`Call`]: at once on the calling thread (the blocking `dtcomm_*` calls),
//! or submitted to the engine's executor with a request handle written for the caller (the
//! non-blocking `dtcomm_i*` calls, and the CUDA calls of `cuda_ops.rs`).

use dtcomm::Call;

use crate::comm::get;
use crate::handles::{self, Comm};
use crate::status::{Fail, guard, invalid};
use crate::types::*;

/// Runs `call` now (`req` NULL) or submits it and writes its request handle.
pub(crate) fn go(
    func: &str,
    comm: dtcomm_comm_t,
    req: Option<*mut dtcomm_request_t>,
    build: impl FnOnce(&Comm) -> Result<Call, Fail>,
) -> dtcomm_result_t {
    guard(func, || {
        if req.is_some_and(|r| r.is_null()) {
            return Err(invalid(func, "request is NULL"));
        }
        let c = get(func, comm)?;
        let call = build(&c)?;
        match req {
            None => {
                // SAFETY: `go` runs only inside the `dtcomm_*` entry points (and the CUDA ones of
                // `cuda_ops.rs`), and `build` made `call` from their buffer arguments alone. A
                // blocking entry point's contract keeps those buffers valid for their counts and
                // dtype (for the CUDA calls: device memory of `device`, until the call is done on
                // the device, which a blocking call waits for), and untouched by the caller, until
                // it returns, which is after `run` has returned: what `Communicator::run` requires.
                unsafe { c.comm.run(&call) }?;
            }
            Some(r) => {
                // SAFETY: as for `run`, but this is a non-blocking entry point: its contract keeps
                // the buffers valid and untouched until the request completes (`dtcomm_test`
                // reports done or `dtcomm_wait` returns), which is the `Work`'s completion that
                // `Communicator::submit` requires; freeing the request early does not end that duty
                // (the header says so).
                let work = unsafe { c.comm.submit(call) };
                // SAFETY: `r` is the entry point's `req`, non-null (checked at the top), and its
                // contract makes it valid for a write of one `dtcomm_request_t`.
                unsafe { r.write(handles::add_request(work)) };
            }
        }
        Ok(())
    })
}
