//! Each job's ranks and their latest call summaries, borrowed from the machine, for samplers
//! that run every second over every job (the status page's timeline): no member's name,
//! addresses or summary is copied, where [`RendezvousMachine::status`] copies them all.
//!
//! [`RendezvousMachine::status`]: super::RendezvousMachine::status

use crate::native::progress::Progress;

/// One job as a sampler sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobProgress<'a> {
    /// The job.
    pub job: &'a str,
    /// Its current (or last) round, 0 before the first.
    pub round: u64,
    /// Members in the current round (0 while forming).
    pub world: u32,
    /// Each active member's rank and its latest summary (of whatever round it reported for),
    /// in no particular order.
    pub ranks: Vec<(u32, Option<&'a Progress>)>,
}
