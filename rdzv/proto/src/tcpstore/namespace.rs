//! Namespaces: which job a key belongs to, so a long-lived server can forget finished jobs.
//!
//! A torch-hosted store dies with its job; `dt-rdzv serve` outlives jobs, so it must not let a
//! finished or dead run poison the next one. Every key belongs to a namespace:
//!
//! * torchelastic's state key `/torch.rendezvous.<id>` and its per-round keys
//!   `/torch.rendezvous.<id>.<round>/...` belong to `torch.rendezvous.<id>`;
//! * any other key belongs to its first path segment: `/default_pg/0//cpu//0/1` to
//!   `default_pg`, `/job/attempt_0/x` to `job`, `init/` to `init`, `/k` to `k`.
//!
//! The engine tracks which open connections have touched each namespace (see
//! [`super::Engine`] for the rules that purge one).

/// Prefix of torchelastic's c10d rendezvous keys on the wire.
pub(crate) const TORCHELASTIC_PREFIX: &[u8] = b"/torch.rendezvous.";

/// The namespace a raw wire key belongs to.
pub fn namespace_of(key: &[u8]) -> &[u8] {
    let body = key.strip_prefix(b"/").unwrap_or(key);
    let first = match body.iter().position(|&b| b == b'/') {
        Some(i) => &body[..i],
        None => return body,
    };
    if key.starts_with(TORCHELASTIC_PREFIX) {
        strip_round(first)
    } else {
        first
    }
}

/// Whether `key` is a torchelastic rendezvous state key (`/torch.rendezvous.<id>`).
pub(crate) fn is_torchelastic_state_key(key: &[u8]) -> bool {
    key.len() > TORCHELASTIC_PREFIX.len()
        && key.starts_with(TORCHELASTIC_PREFIX)
        && !key[1..].contains(&b'/')
}

/// `torch.rendezvous.<id>.<round>` -> `torch.rendezvous.<id>`.
fn strip_round(segment: &[u8]) -> &[u8] {
    match segment.iter().rposition(|&b| b == b'.') {
        Some(dot)
            if dot + 1 < segment.len()
                && dot + 1 > TORCHELASTIC_PREFIX.len() - 1
                && segment[dot + 1..].iter().all(u8::is_ascii_digit) =>
        {
            &segment[..dot]
        }
        _ => segment,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces() {
        let ns = |k: &str| String::from_utf8(namespace_of(k.as_bytes()).to_vec()).unwrap();
        assert_eq!(ns("/torch.rendezvous.x"), "torch.rendezvous.x");
        assert_eq!(
            ns("/torch.rendezvous.x.0/MASTER_ADDR"),
            "torch.rendezvous.x"
        );
        assert_eq!(
            ns("/torch.rendezvous.x.12/torchelastic/role_info/0"),
            "torch.rendezvous.x"
        );
        assert_eq!(ns("/torch.rendezvous.job.1"), "torch.rendezvous.job.1");
        assert_eq!(ns("/torch.rendezvous.job.1.3/k"), "torch.rendezvous.job.1");
        assert_eq!(ns("/default_pg/0//cpu//0/1"), "default_pg");
        assert_eq!(ns("init/"), "init");
        assert_eq!(ns("/k"), "k");
        assert_eq!(ns(""), "");
        assert!(is_torchelastic_state_key(b"/torch.rendezvous.x"));
        assert!(!is_torchelastic_state_key(
            b"/torch.rendezvous.x.0/MASTER_ADDR"
        ));
        assert!(!is_torchelastic_state_key(b"/torch.rendezvous."));
    }
}
