//! Byte views of a checked call's buffers, shared by the backends: the buffers passed
//! `Inner::check` and the caller of `run`/`submit` vouches for their memory (see
//! `Communicator::run`'s safety contract).

use crate::call::RawBuf;

/// The bytes of a checked buffer (empty for none).
///
/// # Safety
/// `b` passed [`Inner::check`]; the caller of `run`/`submit` vouches for the memory.
pub(in crate::communicator) unsafe fn bytes_mut<'a>(b: Option<&RawBuf>) -> &'a mut [u8] {
    match b {
        Some(b) if b.count() > 0 => {
            let len = b.count() * b.dtype().size();
            // SAFETY: checked non-null, aligned and not overflowing; valid per the contract.
            unsafe { std::slice::from_raw_parts_mut(b.ptr(), len) }
        }
        _ => &mut [],
    }
}

/// An element-aligned copy of `b`'s bytes (for inputs that overlap the output, and for the
/// scratch copies reduce and reduce_scatter work in).
///
/// # Safety
/// As for [`bytes_mut`].
pub(in crate::communicator) unsafe fn staged(b: Option<&RawBuf>) -> Vec<u64> {
    // SAFETY: per the contract.
    let src = unsafe { bytes_mut(b) };
    let mut v = vec![0u64; src.len().div_ceil(8)];
    as_bytes(&mut v)[..src.len()].copy_from_slice(src);
    v
}

pub(in crate::communicator) fn as_bytes(v: &mut [u64]) -> &mut [u8] {
    // SAFETY: u64 has no padding; the byte view covers the same memory.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// `send`, copied if it overlaps `recv` (the engine reads one while it writes the other).
///
/// # Safety
/// As for [`bytes_mut`].
pub(in crate::communicator) unsafe fn input<'a>(
    send: Option<&RawBuf>,
    recv: Option<&RawBuf>,
    copy: &'a mut Vec<u64>,
) -> &'a [u8] {
    match (send, recv) {
        (Some(s), Some(r)) if s.overlaps(r) => {
            // SAFETY: per the contract.
            *copy = unsafe { staged(Some(s)) };
            let n = s.count() * s.dtype().size();
            &as_bytes(copy)[..n]
        }
        // SAFETY: per the contract.
        (s, _) => unsafe { bytes_mut(s) },
    }
}

/// Copies `from`'s bytes onto `to` (which may overlap) unless they are the same buffer.
///
/// # Safety
/// As for [`bytes_mut`]; both are checked to hold the same number of bytes.
pub(in crate::communicator) unsafe fn copy_over(from: &RawBuf, to: &RawBuf) {
    let n = from.count() * from.dtype().size();
    if n > 0 && from.ptr() != to.ptr() {
        // SAFETY: per the contract; `copy` allows overlap.
        unsafe { std::ptr::copy(from.ptr(), to.ptr(), n) };
    }
}
