//! What every shared-memory collective gets: the host group, the transport (for the control
//! plane and the cross-host step), the call and its deadline. Its own file so the engine, which
//! builds it, does not import the collectives that take it.

use super::group::ShmGroup;
use crate::call::CallDesc;
use crate::engine::error::EngineError;
use crate::transport::Transport;
use crate::watchdog::Deadline;

/// What every shared-memory collective gets.
pub(crate) struct Ctx<'a> {
    pub g: &'a mut ShmGroup,
    pub t: &'a mut dyn Transport,
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
