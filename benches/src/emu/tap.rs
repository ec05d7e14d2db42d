//! TAP devices: Ethernet frames to and from a network interface, through a file descriptor.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TAP: libc::c_short = 0x0002;
const IFF_NO_PI: libc::c_short = 0x1000;

/// Makes TAP interface `name` (no packet-information header) and returns its non-blocking
/// descriptor; the interface lasts as long as the descriptor (it may be moved to another
/// network namespace meanwhile).
pub fn open(name: &str) -> io::Result<File> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {name:?}: 1 to 15 bytes"),
        ));
    }
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/net/tun")
        .map_err(|e| io::Error::new(e.kind(), format!("/dev/net/tun: {e}")))?;
    // struct ifreq: the name, then the flags as the union's first member.
    let mut req = [0u8; 40];
    req[..name.len()].copy_from_slice(name.as_bytes());
    req[16..18].copy_from_slice(&(IFF_TAP | IFF_NO_PI).to_ne_bytes());
    use std::os::fd::AsRawFd;
    // SAFETY: `TUNSETIFF` reads one `struct ifreq` (40 bytes on Linux: a 16-byte name, then the
    // union whose first member is the flags) through the pointer and writes the chosen name back
    // into it; `req` is a live local of exactly that size, laid out above, and the kernel keeps no
    // pointer to it after the call. `f` is an open `/dev/net/tun`.
    let rc = unsafe { libc::ioctl(f.as_raw_fd(), TUNSETIFF as _, req.as_mut_ptr()) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("TUNSETIFF {name}: {e}")));
    }
    Ok(f)
}
