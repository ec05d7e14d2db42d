//! A wake-up a thread can hand to a `poll` loop on another: an `eventfd` that becomes readable
//! when [`wake`](Waker::wake) is called and stays so until [`reset`](Waker::reset).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// An `eventfd` (non-blocking, close-on-exec).
#[derive(Debug)]
pub(crate) struct Waker {
    fd: OwnedFd,
}

impl Waker {
    pub(crate) fn new() -> io::Result<Waker> {
        // SAFETY: eventfd takes no pointers; a non-negative result is a descriptor we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        Ok(Waker {
            // SAFETY: `fd` is a fresh descriptor nobody else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Makes the descriptor readable (idempotent until the next reset).
    pub(crate) fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer; a full counter (EAGAIN) is still readable.
        unsafe { libc::write(self.fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }

    /// Makes it unreadable again.
    pub(crate) fn reset(&self) {
        let mut buf = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live buffer; EAGAIN when already reset.
        unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    }

    /// The descriptor to poll for `POLLIN`.
    pub(crate) fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(w: &Waker) -> bool {
        let mut p = libc::pollfd {
            fd: w.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one initialised pollfd on the stack.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    #[test]
    fn wake_then_reset() {
        let w = Waker::new().unwrap();
        assert!(!readable(&w));
        w.wake();
        w.wake();
        assert!(readable(&w));
        w.reset();
        assert!(!readable(&w));
    }
}
