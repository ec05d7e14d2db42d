//! A member whose call timed out asks the others of its round to dump their flight recorders
//! ([`ClientMsg::Dump`]): torch's watchdog tells every rank through its store, so that a rank
//! in no call (stuck in its own code, the usual culprit) leaves its trace too. The server passes
//! the ask on once per round, to every other member of the round, whoever asks first.
//!
//! [`ClientMsg::Dump`]: crate::native::ClientMsg::Dump

use super::super::ConnId;
use super::super::error::Refusal;
use super::super::job;
use super::super::probes;
use super::RendezvousMachine;
use crate::native::{MAX_DUMP_REASON_BYTES, ServerMsg};

impl RendezvousMachine {
    /// Member `by` of `job` asks the members of `round` to dump (see the module docs).
    pub(super) fn dump(&mut self, conn: ConnId, job: &str, by: &str, round: u64, why: String) {
        let why = probes::truncate(why, MAX_DUMP_REASON_BYTES);
        let Some(j) = self.jobs.get_mut(job) else {
            return;
        };
        // An ask about a round already over (or already passed on) is late news.
        if !matches!(j.phase, job::Phase::Running { .. }) || round != j.round {
            return;
        }
        let Some(rank) = j
            .members
            .get(by)
            .and_then(|m| m.rank.filter(|_| m.place == job::Place::Active))
        else {
            let r = Refusal::BadRequest {
                job: job.into(),
                member: by.into(),
                why: format!("asks round {round} to dump but is not in that round"),
            };
            self.refuse(conn, r);
            return;
        };
        if j.dumped == Some(round) {
            return;
        }
        j.dumped = Some(round);
        let msg = ServerMsg::Dump {
            job: job.into(),
            round,
            rank,
            why,
        };
        let mut to: Vec<(u64, ConnId)> = j
            .members
            .values()
            .filter(|m| m.place == job::Place::Active && m.rank.is_some() && m.conn != conn)
            .map(|m| (m.arrival, m.conn))
            .collect();
        to.sort_unstable();
        for (_, c) in to {
            self.fx.send(c, msg.clone());
        }
    }
}
