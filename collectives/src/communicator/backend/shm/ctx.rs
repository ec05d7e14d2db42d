//! What every shared-memory collective gets: the host group, the links (for the control plane
//! and the cross-host step), the call and its deadline; and how one runs, failing as a schedule
//! does.

use std::time::Duration;

use super::group::ShmGroup;
use crate::call::CallDesc;
use crate::engine::Engine;
use crate::engine::error::EngineError;
use crate::error::CommError;
use crate::transport::links::Links;
use crate::watchdog::Deadline;

/// Runs a shared-memory collective `f` for `call` within `timeout`, failing like a schedule
/// does: the abort goes out on the control plane and sleeping host peers are woken.
pub(in crate::communicator) fn run_local(
    e: &mut Engine,
    g: &mut ShmGroup,
    call: &CallDesc,
    timeout: Duration,
    f: impl FnOnce(&mut Ctx<'_>) -> Result<(), EngineError>,
) -> Result<(), CommError> {
    let mut deadline = Deadline::new(e.rank, timeout, &e.cancel);
    let r = f(&mut Ctx {
        g: &mut *g,
        t: &mut e.links,
        call,
        deadline: &mut deadline,
    });
    r.map_err(|err| {
        let err = e.fail(err, call, &deadline);
        g.wake_everyone();
        err
    })
}

/// Runs `f` over the engine and the host group apart (a collective that uses both shared
/// memory and the links), failing like [`run_local`].
pub(in crate::communicator) fn run_split(
    e: &mut Engine,
    g: &mut ShmGroup,
    call: &CallDesc,
    timeout: Duration,
    f: impl FnOnce(&mut Engine, &mut ShmGroup, &mut Deadline) -> Result<(), EngineError>,
) -> Result<(), CommError> {
    let mut deadline = Deadline::new(e.rank, timeout, &e.cancel);
    let r = f(e, g, &mut deadline);
    r.map_err(|err| {
        let err = e.fail(err, call, &deadline);
        g.wake_everyone();
        err
    })
}

/// What every shared-memory collective gets.
pub(crate) struct Ctx<'a> {
    pub g: &'a mut ShmGroup,
    pub t: &'a mut Links,
    pub call: &'a CallDesc,
    pub deadline: &'a mut Deadline,
}

impl Ctx<'_> {
    pub(super) fn sync(&mut self, first: bool) -> Result<(), EngineError> {
        self.g.post();
        self.g.wait_all(self.t, self.call, self.deadline, first)
    }
    pub(super) fn peer(&self, i: usize, off: usize, len: usize) -> &[u8] {
        // SAFETY: `off + len` is within one buffer (callers chunk by `chunk()`); the peer
        // wrote these bytes before a post this rank has waited for, and writes them again only
        // after this rank's next post.
        unsafe { std::slice::from_raw_parts(self.g.buf(i).add(off), len) }
    }
    pub(super) fn mine(&mut self, off: usize, len: usize) -> &mut [u8] {
        let me = self.g.me;
        // SAFETY: our own buffer; peers read it only between our post and our next one.
        unsafe { std::slice::from_raw_parts_mut(self.g.buf(me).add(off), len) }
    }
}
