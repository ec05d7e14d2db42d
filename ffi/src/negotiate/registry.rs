//! The handles of the negotiation API: the C handle types, and the process-wide tables that
//! map a live handle to its negotiator or named operation (a freed or shut-down handle is
//! simply absent, so using it again is `DTCOMM_INVALID_ARGUMENT`, never a crash).

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use dtcomm::negotiate::{Handle, NegotiateError, Negotiator, Output};

use crate::status::{Fail, invalid};

/// A negotiator handle (0 is never valid).
pub type dtcomm_negotiator_t = u64;
/// A named operation's handle (0 is never valid).
pub type dtcomm_named_t = u64;

/// A submitted named operation: the negotiator's handle and, once waited for, its outcome.
pub(super) struct Named {
    pub(super) handle: Handle,
    /// Its outcome, once waited for.
    pub(super) done: OnceLock<Result<Output, NegotiateError>>,
}

/// A live negotiator (taken out when it shuts down).
pub(super) type Live = Arc<Mutex<Option<Negotiator>>>;

pub(super) static NEXT: AtomicU64 = AtomicU64::new(1);
pub(super) static NEGOTIATORS: Mutex<Option<HashMap<u64, Live>>> = Mutex::new(None);
pub(super) static NAMED: Mutex<Option<HashMap<u64, Arc<Named>>>> = Mutex::new(None);

pub(super) fn lock<T>(m: &'static Mutex<T>) -> MutexGuard<'static, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(super) fn negotiator(func: &str, h: dtcomm_negotiator_t) -> Result<Live, Fail> {
    lock(&NEGOTIATORS)
        .as_ref()
        .and_then(|m| m.get(&h).cloned())
        .ok_or_else(|| {
            invalid(
                func,
                format!("negotiator {h} is not live (shut down, or never started)"),
            )
        })
}

pub(super) fn named(func: &str, h: dtcomm_named_t) -> Result<Arc<Named>, Fail> {
    lock(&NAMED)
        .as_ref()
        .and_then(|m| m.get(&h).cloned())
        .ok_or_else(|| {
            invalid(
                func,
                format!("named operation {h} is not live (freed, or never submitted)"),
            )
        })
}
