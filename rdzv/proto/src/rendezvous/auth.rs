//! Who may do what. The server token opens every job and the operator's requests (every
//! job's status, `/v1/jobs`). A job token opens one job: joining it, reading its status,
//! stopping it. Job tokens are derived, not stored:
//! `dtj1_` + hex(HMAC-SHA256(server token, "dt-rdzv job token v1\0" + job)). An operator, or a
//! launcher that holds the server token, hands each job its own secret (`dt-rdzv token --job
//! JOB`, `dtcomm.job_token`), and the members of one job can neither join nor read another.

use ring::hmac;

/// What job tokens start with (and the version of their derivation).
pub const JOB_TOKEN_PREFIX: &str = "dtj1_";

const CONTEXT: &[u8] = b"dt-rdzv job token v1\0";

/// What a request needs access to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    /// Everything on the server: only the server token opens it.
    Server,
    /// One job: its token or the server token.
    Job(&'a str),
}

/// The token of `job` on a server whose token is `server_token`.
pub fn job_token(server_token: &str, job: &str) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, server_token.as_bytes());
    let mut ctx = hmac::Context::with_key(&key);
    ctx.update(CONTEXT);
    ctx.update(job.as_bytes());
    let tag = ctx.sign();
    // Every join checks a job token: one allocation, not one per byte.
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(JOB_TOKEN_PREFIX.len() + 2 * tag.as_ref().len());
    out.push_str(JOB_TOKEN_PREFIX);
    for b in tag.as_ref() {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 15)]));
    }
    out
}

/// Whether `given` opens `scope` on a server whose token is `server_token` (`None`: no
/// authentication, everything is open).
pub fn authorized(server_token: Option<&str>, scope: Scope<'_>, given: &str) -> bool {
    let Some(server) = server_token else {
        return true;
    };
    if equal(server.as_bytes(), given.as_bytes()) {
        return true;
    }
    match scope {
        Scope::Server => false,
        Scope::Job(job) => {
            given.starts_with(JOB_TOKEN_PREFIX)
                && equal(job_token(server, job).as_bytes(), given.as_bytes())
        }
    }
}

/// Constant time in the content (lengths are no secret worth hiding).
fn equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_token_opens_its_job_only() {
        let t = job_token("server-secret", "train-a");
        assert!(t.starts_with(JOB_TOKEN_PREFIX) && t.len() == JOB_TOKEN_PREFIX.len() + 64);
        assert_eq!(t, job_token("server-secret", "train-a"), "deterministic");
        assert!(authorized(Some("server-secret"), Scope::Job("train-a"), &t));
        assert!(!authorized(
            Some("server-secret"),
            Scope::Job("train-b"),
            &t
        ));
        assert!(!authorized(Some("server-secret"), Scope::Server, &t));
        assert!(!authorized(Some("other-secret"), Scope::Job("train-a"), &t));
        // The server token opens everything; nothing else does.
        for scope in [Scope::Server, Scope::Job("train-a")] {
            assert!(authorized(Some("server-secret"), scope, "server-secret"));
            assert!(!authorized(Some("server-secret"), scope, "server-secre"));
            assert!(!authorized(Some("server-secret"), scope, ""));
            assert!(authorized(None, scope, ""));
        }
        // Names that share a prefix, or differ by a separator, get unrelated tokens.
        assert_ne!(job_token("s", "ab"), job_token("s", "a"));
        assert_ne!(job_token("s", "a\0b"), job_token("s", "a"));
    }
}
