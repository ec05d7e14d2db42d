//! [`Payload`]: the buffer a submitted operation reads: bytes the negotiator owns, or the
//! caller's memory, reduced or broadcast in place (Horovod's `allreduce_async_`), with no copy
//! on the way in or out.

use std::ptr::NonNull;

/// The caller's memory, lent to the negotiator until the operation completes.
#[derive(Debug)]
pub struct InPlace {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: `InPlace::new`'s contract gives the negotiator's thread exclusive use of the memory
// until the operation completes; nothing else touches it meanwhile.
unsafe impl Send for InPlace {}

impl InPlace {
    /// Lends `len` bytes at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` must be valid for reads and writes of `len` bytes, and nothing else may read or
    /// write those bytes (nor free them) from this call until the operation's
    /// [`super::Handle`] reports it complete (or the [`super::Negotiator`] was dropped).
    pub unsafe fn new(ptr: *mut u8, len: usize) -> Self {
        Self {
            ptr: NonNull::new(ptr).unwrap_or(NonNull::dangling()),
            len: if ptr.is_null() { 0 } else { len },
        }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `new`'s contract: `len` readable bytes at `ptr` for as long as `self` lives
        // (a dangling pointer only with `len == 0`).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and writable and unaliased by `new`'s contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

/// What an operation reads: its own bytes, or the caller's memory in place. An allreduce or a
/// broadcast leaves its result in an in-place buffer (its [`super::Output::data`] is then
/// empty); the other kinds only read it.
#[derive(Debug)]
pub enum Payload {
    /// Bytes the negotiator owns; the result comes back in [`super::Output::data`].
    Owned(Vec<u8>),
    /// The caller's memory.
    InPlace(InPlace),
}

impl Payload {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.bytes().len()
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the result is written into the caller's memory.
    pub fn is_in_place(&self) -> bool {
        matches!(self, Payload::InPlace(_))
    }

    /// Its bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Payload::Owned(v) => v,
            Payload::InPlace(p) => p.bytes(),
        }
    }

    /// Its bytes, to write the result into.
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Payload::Owned(v) => v,
            Payload::InPlace(p) => p.bytes_mut(),
        }
    }

    /// A buffer of its own to work in (a copy of an in-place one, whose memory the operation
    /// must not change).
    pub(crate) fn into_owned(self) -> Vec<u8> {
        match self {
            Payload::Owned(v) => v,
            Payload::InPlace(p) => p.bytes().to_vec(),
        }
    }

    /// What the waiter gets back once the result is in: an owned buffer, or nothing for an
    /// in-place one (the result is already in the caller's memory).
    pub(crate) fn into_result(self) -> Vec<u8> {
        match self {
            Payload::Owned(v) => v,
            Payload::InPlace(_) => Vec::new(),
        }
    }
}

impl From<Vec<u8>> for Payload {
    fn from(v: Vec<u8>) -> Self {
        Payload::Owned(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_in_place_payload_writes_the_callers_memory_and_returns_nothing() {
        let mut mine = vec![1u8, 2, 3];
        // SAFETY: `mine` outlives the payload and is not touched while it lives.
        let mut p = Payload::InPlace(unsafe { InPlace::new(mine.as_mut_ptr(), mine.len()) });
        assert!(p.is_in_place());
        p.bytes_mut()[1] = 9;
        assert_eq!(p.bytes(), &[1, 9, 3]);
        assert!(p.into_result().is_empty());
        assert_eq!(mine, [1, 9, 3]);

        let p = Payload::from(vec![4u8, 5]);
        assert_eq!(p.len(), 2);
        assert_eq!(p.into_result(), vec![4, 5]);
        // SAFETY: null with any length is read as empty.
        let p = Payload::InPlace(unsafe { InPlace::new(std::ptr::null_mut(), 7) });
        assert!(p.is_empty());
    }
}
