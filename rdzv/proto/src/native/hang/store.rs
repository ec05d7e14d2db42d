//! Jobs that meet through a store (torchrun's static rendezvous, `env://`): each rank
//! publishes its summary under [`key`] (see [`to_record`](crate::native::progress::to_record));
//! read back, they make a [`JobStatus`] that [`diagnose`](super::diagnose) takes as it takes a
//! native job's. A launcher's agents that are a native job's members relay their workers'
//! records ([`ClientMsg::Relay`](crate::native::ClientMsg::Relay)): [`workers_job`] is that
//! job's workers as such a job.

use crate::native::progress::Progress;
use crate::native::{JobSpec, JobStatus, MemberStatus, Role};

/// The store key of `rank`'s summary.
pub fn key(rank: u32) -> String {
    format!("dtcomm/progress/{rank}")
}

/// The store key holding the world size the publishers saw.
pub const WORLD_KEY: &str = "dtcomm/progress/world";

/// A job of `records.len()` ranks from their store records (`None`: that rank published
/// nothing), as of `now_unix_ms`. A record's age stands for the rank's silence: publishers
/// write once a second, so a record older than a few seconds is a rank that stopped.
pub fn store_job(name: &str, records: &[Option<(u64, Progress)>], now_unix_ms: u64) -> JobStatus {
    let members = records
        .iter()
        .enumerate()
        .map(|(rank, r)| {
            let age = r
                .as_ref()
                .map_or(0, |(at, _)| now_unix_ms.saturating_sub(*at));
            MemberStatus {
                member: format!("rank{rank}"),
                node: String::new(),
                state: "active".into(),
                rank: Some(rank as u32),
                role: Role::Worker,
                last_seen_ms: age,
                addrs: Vec::new(),
                observed_ip: String::new(),
                // Summaries of one store job carry the round the publisher was given (0).
                progress: r.as_ref().map(|(_, p)| Progress {
                    round: 0,
                    ..p.clone()
                }),
                progress_age_ms: age,
            }
        })
        .collect::<Vec<_>>();
    JobStatus {
        job: name.into(),
        state: "running".into(),
        round: 0,
        world: members.len() as u32,
        spec: JobSpec::fixed(members.len() as u32),
        members,
        missing: Vec::new(),
        restarts: 0,
        age_ms: 0,
        config_keys: Vec::new(),
        workers: Vec::new(),
        workers_world: 0,
    }
}

/// The workers of `job` as a job of their own, when its members relay their workers'
/// summaries (`dtrun`'s agents): what [`diagnose`](super::diagnose) reads instead of the
/// agents. `None` when nothing is relayed.
pub fn workers_job(job: &JobStatus) -> Option<JobStatus> {
    if job.workers.is_empty() {
        return None;
    }
    let world = job.workers_world.max(
        job.workers
            .iter()
            .filter_map(|w| w.rank)
            .max()
            .map_or(0, |r| r + 1),
    );
    Some(JobStatus {
        job: job.job.clone(),
        state: job.state.clone(),
        round: 0,
        world,
        spec: JobSpec::fixed(world),
        members: job.workers.clone(),
        missing: Vec::new(),
        restarts: job.restarts,
        age_ms: job.age_ms,
        config_keys: Vec::new(),
        workers: Vec::new(),
        workers_world: 0,
    })
}
