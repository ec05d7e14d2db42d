//! Which host a rank runs on, as the kernel sees it: the boot id plus the network and IPC
//! namespaces. Two ranks with the same identity can share memory; nothing is read from
//! launcher variables or hostnames, which lie for mixed groups and containers.
//!
//! `DTCOMM_HOST_ID` overrides it (documented, for emulating several hosts on one machine and for
//! sites whose containers share a host but must not share memory).

/// A host identity: a digest of where it came from, and a short text for logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostId {
    /// What the ranks compare.
    pub digest: [u8; 16],
    /// Where it came from (`boot 1b2c… netns 4026531840 ipcns 4026531839`, or the override).
    pub describe: String,
}

fn ns_inode(kind: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/self/ns/{kind}"))
        .ok()
        .map(|m| m.ino())
}

fn digest_of(parts: &[&str]) -> [u8; 16] {
    // SHA-256, stable across builds (every front end of one job must agree); 128 bits are
    // plenty to tell the hosts of one job apart. An identity, not a secret.
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for p in parts {
        ctx.update(&(p.len() as u64).to_le_bytes());
        ctx.update(p.as_bytes());
    }
    let mut out = [0u8; 16];
    out.copy_from_slice(&ctx.finish().as_ref()[..16]);
    out
}

impl HostId {
    /// This process's identity; `overridden` is `DTCOMM_HOST_ID` (or its explicit option).
    pub(crate) fn current(overridden: Option<&str>) -> HostId {
        if let Some(o) = overridden {
            return HostId {
                digest: digest_of(&["override", o]),
                describe: format!("host id {o:?} (DTCOMM_HOST_ID)"),
            };
        }
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| format!("no-boot-id-pid-{}", std::process::id()));
        let net = ns_inode("net").map_or_else(|| "?".to_owned(), |i| i.to_string());
        let ipc = ns_inode("ipc").map_or_else(|| "?".to_owned(), |i| i.to_string());
        HostId {
            digest: digest_of(&[&boot, &net, &ipc]),
            describe: format!(
                "boot {} netns {net} ipcns {ipc}",
                boot.get(..8).unwrap_or(&boot)
            ),
        }
    }
}

/// The pid namespace of this process (a peer's pid is only meaningful in the same one).
pub(crate) fn pid_ns() -> u64 {
    ns_inode("pid").unwrap_or(0)
}

/// Bytes of a [`record`].
pub(crate) const RECORD_LEN: usize = 32;

/// What a rank publishes about its host beside its address (in its native `Join`, in its store
/// entry) and what the shared-memory set-up compares: the host digest (16 bytes), its pid (4),
/// whether it wants shared memory (1), padding (3), its pid namespace (8).
pub(crate) fn record(id: &HostId, wants_shm: bool) -> [u8; RECORD_LEN] {
    let mut rec = [0u8; RECORD_LEN];
    rec[..16].copy_from_slice(&id.digest);
    rec[16..20].copy_from_slice(&std::process::id().to_le_bytes());
    rec[20] = u8::from(wants_shm);
    rec[24..32].copy_from_slice(&pid_ns().to_le_bytes());
    rec
}

/// This process's [`record`] under `cfg` (`DTCOMM_HOST_ID`, `DTCOMM_TRANSPORT`).
pub(crate) fn own_record(cfg: &crate::config::Config) -> [u8; RECORD_LEN] {
    record(
        &HostId::current(cfg.host_id.value.as_deref()),
        cfg.transport.value != crate::config::LinkKind::Tcp,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_process_same_identity_and_override_differs() {
        let a = HostId::current(None);
        assert_eq!(a, HostId::current(None));
        assert!(a.describe.starts_with("boot "), "{}", a.describe);
        let b = HostId::current(Some("h1"));
        assert_ne!(a.digest, b.digest);
        assert_ne!(b.digest, HostId::current(Some("h2")).digest);
        assert_eq!(b, HostId::current(Some("h1")));
    }
}
