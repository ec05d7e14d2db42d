//! "Why is my job stuck?": the server's answer from its members' heartbeats and summaries
//! ([`Progress`](crate::native::Progress)), with no help from any rank (rank 0 included).
//!
//! * [`diagnose`]: a job's status in, a [`HangReport`] out (pure);
//! * [`report`]: the report, its findings, and its text form;
//! * [`store`]: the same for jobs that meet through a store (records under `dtcomm/progress/`);
//! * `ranks`: sets of ranks in words ("ranks 0-2 and 4-7").

mod diagnose;
mod ranks;
pub mod report;
pub mod store;
#[cfg(test)]
mod tests;

pub use diagnose::diagnose;
pub use ranks::words as rank_words;
pub use report::{Finding, FindingKind, HangOptions, HangReport, RankView};
