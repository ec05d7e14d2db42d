//! A shared-memory segment: created by one rank of a host (an anonymous `memfd`, or a file in
//! `DTCOMM_SHM_DIR` such as `/dev/shm`), opened by its peers through a path, mapped by all.
//!
//! A memfd has no name: a peer opens it as `/proc/<pid>/fd/<fd>` while the creator keeps the
//! descriptor open, and nothing is ever left behind, whoever dies when. A named file is
//! unlinked by the creator as soon as every peer has attached (and on any failure before).
//! Space is reserved with `fallocate` when the segment is made, so a full tmpfs is an error
//! at start-up, never a `SIGBUS` in the middle of a collective.

use std::ffi::CString;
use std::io;

/// A mapping of a segment into this process; unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory; every access goes through atomics or through
// regions the shared-memory protocol hands to one writer at a time.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// The first byte (page aligned).
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    /// Bytes mapped.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned; nothing uses them after this.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

fn map(fd: libc::c_int, len: usize) -> io::Result<Mapping> {
    // SAFETY: a fresh shared mapping of `len` bytes of an open descriptor; checked below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(Mapping { ptr: p.cast(), len })
}

fn cvt(r: libc::c_int, what: &str) -> io::Result<libc::c_int> {
    if r < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(r)
}

/// A segment this rank created: the path peers open, and what to clean up.
pub(crate) struct Created {
    /// What peers open.
    pub path: String,
    fd: libc::c_int,
    /// A named file to unlink (none for a memfd).
    named: Option<CString>,
}

impl Created {
    /// Makes a segment of `len` bytes: a memfd, or a new file in `dir` named `name` (which
    /// must not exist: a file left by a dead job is an error naming it, never reused).
    pub(crate) fn new(len: usize, dir: Option<&str>, name: &str) -> io::Result<(Created, Mapping)> {
        let (fd, path, named) = match dir {
            None => {
                let cname = CString::new(name).map_err(io::Error::other)?;
                // SAFETY: a valid C string; flags are constants.
                let fd = cvt(
                    unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) },
                    "memfd_create",
                )?;
                (fd, format!("/proc/{}/fd/{fd}", std::process::id()), None)
            }
            Some(d) => {
                sweep(d);
                let path = format!("{}/{name}", d.trim_end_matches('/'));
                let c = CString::new(path.clone()).map_err(io::Error::other)?;
                // SAFETY: a valid C string; O_EXCL refuses a leftover of the same name.
                let fd = unsafe {
                    libc::open(
                        c.as_ptr(),
                        libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                        0o600,
                    )
                };
                let fd = cvt(fd, &format!("creating {path}"))?;
                (fd, path, Some(c))
            }
        };
        let made = Created { path, fd, named };
        // SAFETY: `fd` is ours; a failure leaves it to Drop (close + unlink).
        let r = unsafe { libc::posix_fallocate(fd, 0, len as libc::off_t) };
        if r != 0 {
            let e = io::Error::from_raw_os_error(r);
            return Err(io::Error::new(
                e.kind(),
                format!("reserving {len} bytes for {}: {e}", made.path),
            ));
        }
        let m = map(fd, len)?;
        Ok((made, m))
    }

    /// Once every peer attached: removes the name (if any) and closes the descriptor. The
    /// memory lives until the last mapping goes.
    pub(crate) fn seal(&mut self) {
        if let Some(n) = self.named.take() {
            // SAFETY: a valid C string naming the file this rank created.
            unsafe { libc::unlink(n.as_ptr()) };
        }
        if self.fd >= 0 {
            // SAFETY: our descriptor, closed once.
            unsafe { libc::close(self.fd) };
            self.fd = -1;
        }
    }
}

impl Drop for Created {
    fn drop(&mut self) {
        self.seal();
    }
}

/// Removes segments of dead makers from `dir`: files named `dtcomm-<pid>-…` whose process is
/// gone (a maker SIGKILLed in the moment between making its segment and its peers attaching).
fn sweep(dir: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("dtcomm-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        // SAFETY: signal 0 only checks whether the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            tracing::info!("dtcomm: removing {name} in {dir}, left by dead process {pid}");
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Opens and maps a peer's segment by its path; `len` is what the peer said it made.
pub(crate) fn attach(path: &str, len: usize) -> io::Result<Mapping> {
    let c = CString::new(path).map_err(io::Error::other)?;
    // SAFETY: a valid C string.
    let fd = cvt(
        unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) },
        &format!("opening {path}"),
    )?;
    // SAFETY: `stat` is plain data for which all zeroes is a valid value; `fstat` fills it below.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open; `st` is a valid out-parameter.
    let r = unsafe { libc::fstat(fd, &mut st) };
    let result = if r != 0 {
        Err(io::Error::last_os_error())
    } else if (st.st_size as u64) < len as u64 {
        Err(io::Error::other(format!(
            "{path} holds {} bytes, expected {len}",
            st.st_size
        )))
    } else {
        map(fd, len)
    };
    // SAFETY: our descriptor; the mapping (if any) outlives it.
    unsafe { libc::close(fd) };
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memfd_is_shared_and_named_files_are_exclusive_and_unlinked() {
        let (mut a, am) = Created::new(1 << 16, None, "dtcomm-test").unwrap();
        let b = attach(&a.path, 1 << 16).unwrap();
        // SAFETY: both map the same 64 KiB; this test is their only user.
        unsafe {
            *am.ptr().add(100) = 42;
            assert_eq!(*b.ptr().add(100), 42);
        }
        a.seal();
        assert!(attach(&a.path, 1 << 16).is_err(), "closed memfd is gone");

        let dir = std::env::temp_dir();
        let d = dir.to_str().unwrap();
        let name = format!("dtcomm-seg-test-{}", std::process::id());
        let (mut n, _nm) = Created::new(4096, Some(d), &name).unwrap();
        let e = Created::new(4096, Some(d), &name).err().unwrap();
        assert!(e.to_string().contains(&name), "{e}");
        let m = attach(&n.path, 4096).unwrap();
        assert!(
            attach(&n.path, 8192)
                .unwrap_err()
                .to_string()
                .contains("expected 8192")
        );
        n.seal();
        assert!(!std::path::Path::new(&n.path).exists());
        drop(m);

        // A leftover of a dead maker is swept when the next segment is made there.
        let leftover = dir.join("dtcomm-2147483646-0-0");
        std::fs::write(&leftover, b"x").unwrap();
        let (_s, _m) = Created::new(4096, Some(d), &format!("{name}-2")).unwrap();
        assert!(!leftover.exists());
    }
}
