//! The registry of live communicators and requests behind the ABI's integer handles. Handles
//! are never reused, so a destroyed communicator or a freed request is an unknown handle (an
//! error), never another object or freed memory.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use dt_rdzv::server::BackgroundServer;
use dtcomm::{Communicator, Work};

/// A live communicator and what it owns.
pub(crate) struct Comm {
    pub comm: Arc<Communicator>,
    pub local_rank: usize,
    /// The store this rank hosts (rank 0 of env://), kept until destroy.
    pub _server: Option<BackgroundServer>,
    /// The native rendezvous member whose round this communicator is (it leaves on destroy).
    pub member: Mutex<Option<dtcomm_launch::native::Member>>,
}

static NEXT: AtomicU64 = AtomicU64::new(1);

fn next() -> u64 {
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn lock<T>(m: &'static Mutex<T>) -> MutexGuard<'static, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

static COMMS: Mutex<Option<HashMap<u64, Arc<Comm>>>> = Mutex::new(None);
static REQUESTS: Mutex<Option<HashMap<u64, Arc<Work>>>> = Mutex::new(None);

/// Registers a communicator; returns its handle.
pub(crate) fn add_comm(c: Comm) -> u64 {
    let h = next();
    lock(&COMMS)
        .get_or_insert_with(HashMap::new)
        .insert(h, Arc::new(c));
    h
}

/// The communicator behind `h`.
pub(crate) fn comm(h: u64) -> Option<Arc<Comm>> {
    lock(&COMMS).as_ref()?.get(&h).cloned()
}

/// The native member of `c`, taken out (once) to leave its job.
pub(crate) fn take_member(c: &Comm) -> Option<dtcomm_launch::native::Member> {
    c.member.lock().unwrap_or_else(|p| p.into_inner()).take()
}

/// Removes the communicator behind `h` (the caller shuts it down).
pub(crate) fn remove_comm(h: u64) -> Option<Arc<Comm>> {
    lock(&COMMS).as_mut()?.remove(&h)
}

/// Registers a request; returns its handle.
pub(crate) fn add_request(w: Work) -> u64 {
    let h = next();
    lock(&REQUESTS)
        .get_or_insert_with(HashMap::new)
        .insert(h, Arc::new(w));
    h
}

/// The request behind `h`.
pub(crate) fn request(h: u64) -> Option<Arc<Work>> {
    lock(&REQUESTS).as_ref()?.get(&h).cloned()
}

/// Removes the request behind `h`.
pub(crate) fn remove_request(h: u64) -> Option<Arc<Work>> {
    lock(&REQUESTS).as_mut()?.remove(&h)
}
