//! Watching a peer process on this host through a pidfd: a SIGKILLed rank sends no TCP reset
//! when no socket joins it, so shared-memory waits ask the kernel whether it still runs.

/// A peer's process, watched through a pidfd (none when the kernel or namespace refuses one).
pub(crate) struct Watch {
    pub pid: u32,
    pidfd: Option<std::os::fd::OwnedFd>,
}

impl Watch {
    pub(crate) fn new(pid: u32) -> Watch {
        use std::os::fd::FromRawFd;
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        Watch {
            pid,
            // SAFETY: a fresh descriptor we now own.
            pidfd: (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) }),
        }
    }
    /// True once the process has exited (a zombie counts: it will never post again).
    pub(crate) fn exited(&self) -> bool {
        use std::os::fd::AsRawFd;
        let Some(fd) = &self.pidfd else { return false };
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no timeout.
        unsafe { libc::poll(&mut p, 1, 0) > 0 && p.revents & libc::POLLIN != 0 }
    }
}
