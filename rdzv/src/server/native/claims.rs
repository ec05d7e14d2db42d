//! Who owns a job, asked before a join is let in. A server that shares its jobs with others
//! through a storage answers it (`ha/owner.rs`); a lone server asks nobody and owns every job.
//! The native door sees only this trait, so it knows nothing of how ownership is kept.

use std::future::Future;
use std::pin::Pin;

/// Who owns a job (or one of the doors a group of servers shares).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// This server owns it.
    Mine,
    /// Another server does: its native endpoint, its TCPStore and torchft endpoints and its
    /// id.
    Elsewhere {
        endpoint: String,
        store: String,
        torchft: String,
        server: String,
    },
    /// The storage did not answer: nobody can say.
    Unknown(String),
}

/// Asked once per join: who owns `job`, claiming it for this server when nobody does.
pub(crate) trait Claims: Send + Sync {
    /// See the trait docs.
    fn claim_job<'a>(&'a self, job: &'a str) -> Pin<Box<dyn Future<Output = Verdict> + Send + 'a>>;
}
