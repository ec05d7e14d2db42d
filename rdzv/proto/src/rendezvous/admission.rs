//! Size bounds on what a member asks the server to hold and repeat to its peers: its
//! addresses (count and bytes each) and the lengths of its member id and node. Every welcome
//! carries up to `full_peer_table_max` peers' worth of these, so an unbounded join would
//! be copied into every member's welcome.

use crate::native::Join;

use super::config::MachineConfig;
use super::error::Refusal;

/// Longest member id or node name, in bytes (as for job names).
pub const MAX_NAME_BYTES: usize = 256;

/// Refuses a join whose addresses or names are over the bounds of `config`.
pub(crate) fn check(join: &Join, config: &MachineConfig) -> Result<(), Refusal> {
    let bad = |why: String| {
        Err(Refusal::BadRequest {
            job: clip(&join.job),
            member: clip(&join.member),
            why,
        })
    };
    if join.member.len() > MAX_NAME_BYTES {
        return bad(format!(
            "member id of {} bytes (limit {MAX_NAME_BYTES})",
            join.member.len()
        ));
    }
    if join.node.len() > MAX_NAME_BYTES {
        return bad(format!(
            "node name of {} bytes (limit {MAX_NAME_BYTES})",
            join.node.len()
        ));
    }
    if join.host.len() > crate::native::MAX_HOST_BYTES {
        return bad(format!(
            "host identity of {} bytes (limit {})",
            join.host.len(),
            crate::native::MAX_HOST_BYTES
        ));
    }
    if join.addrs.len() > config.max_addrs {
        return bad(format!(
            "{} addresses (limit {})",
            join.addrs.len(),
            config.max_addrs
        ));
    }
    if let Some((i, a)) = join
        .addrs
        .iter()
        .enumerate()
        .find(|(_, a)| a.len() > config.max_addr_bytes)
    {
        return bad(format!(
            "address {i} of {} bytes (limit {} per address)",
            a.len(),
            config.max_addr_bytes
        ));
    }
    Ok(())
}

/// A name for a message: at most [`MAX_NAME_BYTES`] of it (an oversized id is refused, and
/// must not make the refusal itself large).
pub(crate) fn clip(s: &str) -> String {
    if s.len() <= MAX_NAME_BYTES {
        return s.to_string();
    }
    let mut end = MAX_NAME_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::{JobSpec, Role};

    fn join(addrs: Vec<String>) -> Join {
        Join {
            job: "j".into(),
            token: String::new(),
            member: "m".into(),
            node: "n".into(),
            addrs,
            host: Vec::new(),
            role: Role::Worker,
            spec: JobSpec::fixed(1),
            resume: None,
        }
    }

    #[test]
    fn addresses_and_names_are_bounded() {
        let c = MachineConfig::default();
        let ok = vec!["a".repeat(c.max_addr_bytes); c.max_addrs];
        assert!(check(&join(ok), &c).is_ok());
        let many = vec!["10.0.0.1:1".to_string(); c.max_addrs + 1];
        let e = check(&join(many), &c).unwrap_err().to_string();
        assert!(e.contains("17 addresses (limit 16)"), "{e}");
        let long = vec!["a".repeat(c.max_addr_bytes + 1)];
        let e = check(&join(long), &c).unwrap_err().to_string();
        assert!(e.contains("address 0 of 257 bytes"), "{e}");
        let mut j = join(vec![]);
        j.member = "é".repeat(1000);
        let e = check(&j, &c).unwrap_err().to_string();
        assert!(
            e.contains("member id of 2000 bytes") && e.len() < 600,
            "{e}"
        );
        let mut j = join(vec![]);
        j.host = vec![0; crate::native::MAX_HOST_BYTES];
        assert!(check(&j, &c).is_ok());
        j.host.push(0);
        let e = check(&j, &c).unwrap_err().to_string();
        assert!(e.contains("host identity of 65 bytes (limit 64)"), "{e}");
    }
}
