//! A negotiator's life: `dtcomm_negotiator_start` runs one over a communicator (every rank
//! starts one), `dtcomm_negotiator_shutdown` stops it on every rank together.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use dtcomm::negotiate::Negotiator;

use super::registry::{NEGOTIATORS, NEXT, dtcomm_negotiator_t, lock, negotiator};
use crate::comm::get;
use crate::status::{guard, invalid};
use crate::types::*;

/// Starts a negotiator over `comm`: a cycle every `cycle_ms` milliseconds (Horovod's
/// `HOROVOD_CYCLE_TIME`, 1 ms by default there), allreduces fused up to `fusion_threshold`
/// bytes (0: none; Horovod's default is 128 MiB). Every rank must start one. Until it is shut
/// down, do not call collectives on `comm` directly.
///
/// # Safety
/// `out` valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dtcomm_negotiator_start(
    comm: dtcomm_comm_t,
    cycle_ms: f64,
    fusion_threshold: u64,
    out: *mut dtcomm_negotiator_t,
) -> dtcomm_result_t {
    const F: &str = "dtcomm_negotiator_start";
    guard(F, || {
        if out.is_null() {
            return Err(invalid(F, "out is NULL"));
        }
        if !(cycle_ms.is_finite() && cycle_ms > 0.0) {
            return Err(invalid(
                F,
                format!("cycle_ms {cycle_ms} is not a positive number"),
            ));
        }
        let c = get(F, comm)?;
        let n = Negotiator::start(
            c.comm.clone(),
            dtcomm::secs::saturating(cycle_ms / 1e3),
            fusion_threshold,
        );
        let h = NEXT.fetch_add(1, Ordering::Relaxed);
        lock(&NEGOTIATORS)
            .get_or_insert_with(HashMap::new)
            .insert(h, Arc::new(Mutex::new(Some(n))));
        // SAFETY: `out` is non-null (checked at the top) and the contract makes it valid for a
        // write of one `dtcomm_negotiator_t`.
        unsafe { out.write(h) };
        Ok(())
    })
}

/// Shuts the negotiator down: every rank must call it; returns once all have. Operations
/// still pending then fail with `DTCOMM_SHUTDOWN`. The handle is gone afterwards.
#[unsafe(no_mangle)]
pub extern "C" fn dtcomm_negotiator_shutdown(neg: dtcomm_negotiator_t) -> dtcomm_result_t {
    const F: &str = "dtcomm_negotiator_shutdown";
    guard(F, || {
        let n = negotiator(F, neg)?;
        lock(&NEGOTIATORS).as_mut().map(|m| m.remove(&neg));
        let taken = n.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(n) = taken {
            n.shutdown();
        }
        Ok(())
    })
}
