//! The open-file limit: raised from soft to hard when `dt-rdzv serve` starts (not by an
//! embedded server, which leaves its host process alone), and the TCPStore connection cap
//! derived from it.

/// File descriptors kept free for the HTTP port, the QUIC socket, logs and files: at least
/// this many, or a tenth of the limit if more.
const MIN_HEADROOM: u64 = 128;

/// Raises this process's `RLIMIT_NOFILE` soft limit to its hard limit and logs both; returns
/// the soft limit in force afterwards (`None` where it cannot be read).
pub fn raise_nofile_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and reads nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "cannot read the open-file limit");
        return None;
    }
    let (soft, hard) = (lim.rlim_cur, lim.rlim_max);
    if soft < hard {
        let raised = libc::rlimit {
            rlim_cur: hard,
            rlim_max: hard,
        };
        // SAFETY: setrlimit reads the struct we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            tracing::info!(soft, hard, "raised the open-file limit from soft to hard");
            return Some(as_u64(hard));
        }
        tracing::warn!(soft, hard, error = %std::io::Error::last_os_error(),
            "cannot raise the open-file limit; keeping the soft limit");
        return Some(as_u64(soft));
    }
    tracing::info!(soft, hard, "open-file limit");
    Some(as_u64(soft))
}

/// This process's `RLIMIT_NOFILE` soft limit (`None` where it cannot be read).
pub(crate) fn current_nofile() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and reads nothing else.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0).then(|| as_u64(lim.rlim_cur))
}

#[allow(clippy::useless_conversion)] // rlim_t is u64 on Linux, not everywhere
fn as_u64(v: libc::rlim_t) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// The default TCPStore connection cap under an open-file limit of `nofile`.
pub(crate) fn default_cap(nofile: Option<u64>) -> usize {
    let Some(n) = nofile else {
        return 65536;
    };
    let headroom = MIN_HEADROOM.max(n / 10);
    usize::try_from(n.saturating_sub(headroom).max(1)).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_leaves_headroom() {
        assert_eq!(default_cap(Some(1024)), 1024 - 128);
        assert_eq!(default_cap(Some(1 << 20)), (1 << 20) - (1 << 20) / 10);
        assert_eq!(default_cap(Some(50)), 1);
        assert_eq!(default_cap(None), 65536);
    }
}
