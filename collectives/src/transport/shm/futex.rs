//! Sleeping on a word of shared memory until another process changes it (Linux futex, shared
//! between processes: no `FUTEX_PRIVATE_FLAG`).

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `*word == expected`, at most `timeout` (spurious and early returns are fine:
/// callers re-check).
pub(crate) fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `word` is a live, aligned u32 in memory mapped by this process; the kernel reads
    // it and `ts` only for the duration of the call.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes every process sleeping on `word`.
pub(crate) fn wake_all(word: &AtomicU32) {
    // SAFETY: as for `wait`; FUTEX_WAKE reads nothing but the address.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::time::Instant;

    #[test]
    fn wait_times_out_and_wakes() {
        let w = AtomicU32::new(0);
        let t = Instant::now();
        wait(&w, 0, Duration::from_millis(20));
        assert!(t.elapsed() >= Duration::from_millis(15));
        wait(&w, 1, Duration::from_secs(5)); // not equal: returns at once
        let w = std::sync::Arc::new(w);
        let w2 = w.clone();
        let h = std::thread::spawn(move || {
            let t = Instant::now();
            while w2.load(Ordering::SeqCst) == 0 {
                wait(&w2, 0, Duration::from_secs(5));
            }
            t.elapsed()
        });
        std::thread::sleep(Duration::from_millis(20));
        w.store(1, Ordering::SeqCst);
        wake_all(&w);
        assert!(h.join().unwrap() < Duration::from_secs(4));
    }
}
