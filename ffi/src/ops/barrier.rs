//! `dtcomm_barrier`: no data, returns once every rank has entered it (blocking and
//! non-blocking).

use dtcomm::{Call, Collective};

use super::run::go;
use crate::types::*;

/// Returns once every rank has entered it.
#[unsafe(no_mangle)]
pub extern "C" fn dtcomm_barrier(comm: dtcomm_comm_t) -> dtcomm_result_t {
    go("dtcomm_barrier", comm, None, |_| {
        Ok(Call::new(Collective::Barrier))
    })
}

/// Non-blocking [`dtcomm_barrier`].
///
/// # Safety
/// `req` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_ibarrier(
    comm: dtcomm_comm_t,
    req: *mut dtcomm_request_t,
) -> dtcomm_result_t {
    go("dtcomm_ibarrier", comm, Some(req), |_| {
        Ok(Call::new(Collective::Barrier))
    })
}
