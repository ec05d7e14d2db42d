//! Refusals, and how job ends and round causes read in logs and errors.

use std::fmt;

use crate::native::{CodecError, JobEnd, RefusalCode, RoundCause};

/// Why the machine refused a request. Each names the job and member it is about; the client
/// receives [`Refusal::code`] and the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Wrong or missing token.
    #[error(
        "wrong or missing token for {}: it takes the server's token{}",
        if job.is_empty() { "the list of jobs".to_string() } else { format!("job {job:?}") },
        if job.is_empty() { "" } else { " or this job's (dt-rdzv token --job JOB)" }
    )]
    BadToken {
        /// The job asked for (empty for a listing).
        job: String,
    },
    /// Undecodable bytes, or another protocol version.
    #[error("bad frame: {0}")]
    Codec(CodecError),
    /// A second join on one connection.
    #[error("this connection already joined job {job:?} as member {member:?}")]
    AlreadyJoined {
        /// The job it joined.
        job: String,
        /// As whom.
        member: String,
    },
    /// The member id is in use by a live connection.
    #[error(
        "member {member:?} of job {job:?} is held by another live connection (last message {last_seen_ms} ms ago); use a unique member id, or retry once the old one is declared lost"
    )]
    MemberTaken {
        /// The job.
        job: String,
        /// The id.
        member: String,
        /// Since the holder's last message.
        last_seen_ms: u64,
    },
    /// A second main member.
    #[error("job {job:?} already has main member {main:?}; {member:?} cannot be main too")]
    MainTaken {
        /// The job.
        job: String,
        /// The present main.
        main: String,
        /// The refused one.
        member: String,
    },
    /// The join's spec differs from the job's.
    #[error("member {member:?} sent a spec for job {job:?} that differs from the job's: {diff}")]
    SpecMismatch {
        /// The job.
        job: String,
        /// The member.
        member: String,
        /// Which fields differ (job's vs sent).
        diff: String,
    },
    /// The spec cannot work.
    #[error("invalid spec for job {job:?}: {why}")]
    InvalidSpec {
        /// The job.
        job: String,
        /// Why.
        why: String,
    },
    /// No room, not even as a spare.
    #[error(
        "job {job:?} is full: {members} members (max {max}) and {spares} spares (max {max_spares}); member {member:?} refused"
    )]
    JobFull {
        /// The job.
        job: String,
        /// The refused member.
        member: String,
        /// Members in or waiting for the round.
        members: u32,
        /// Its max.
        max: u32,
        /// Spares waiting.
        spares: u32,
        /// Its max.
        max_spares: u32,
    },
    /// The job ended.
    #[error(
        "job {job:?} has ended ({end}); start a new run id, or wait until the server forgets it"
    )]
    JobEnded {
        /// The job.
        job: String,
        /// How it ended.
        end: String,
    },
    /// The server is at its job limit.
    #[error("the server holds {max} jobs, its limit; job {job:?} not created")]
    TooManyJobs {
        /// The job.
        job: String,
        /// The limit.
        max: usize,
    },
    /// A member request before joining.
    #[error("{what} on a connection that has not joined a job")]
    NotJoined {
        /// The request.
        what: &'static str,
    },
    /// Publishing without the right.
    #[error(
        "member {member:?} of job {job:?} may not publish (round {round}): only the main member, or rank 0 when there is none"
    )]
    NotMain {
        /// The job.
        job: String,
        /// The member.
        member: String,
        /// The round.
        round: u64,
    },
    /// No such job.
    #[error("no job {job:?} on this server")]
    UnknownJob {
        /// The job.
        job: String,
    },
    /// Anything else.
    #[error("job {job:?}, member {member:?}: {why}")]
    BadRequest {
        /// The job.
        job: String,
        /// The member.
        member: String,
        /// Why.
        why: String,
    },
}

impl Refusal {
    /// The code sent to the client.
    pub fn code(&self) -> RefusalCode {
        match self {
            Refusal::BadToken { .. } => RefusalCode::BadToken,
            Refusal::Codec(CodecError::Version { .. }) => RefusalCode::VersionMismatch,
            Refusal::Codec(_) => RefusalCode::Malformed,
            Refusal::AlreadyJoined { .. } => RefusalCode::AlreadyJoined,
            Refusal::MemberTaken { .. } => RefusalCode::MemberTaken,
            Refusal::MainTaken { .. } => RefusalCode::MainTaken,
            Refusal::SpecMismatch { .. } => RefusalCode::SpecMismatch,
            Refusal::InvalidSpec { .. } => RefusalCode::InvalidSpec,
            Refusal::JobFull { .. } => RefusalCode::JobFull,
            Refusal::JobEnded { .. } => RefusalCode::JobEnded,
            Refusal::TooManyJobs { .. } => RefusalCode::TooManyJobs,
            Refusal::NotJoined { .. } => RefusalCode::NotJoined,
            Refusal::NotMain { .. } => RefusalCode::NotMain,
            Refusal::UnknownJob { .. } => RefusalCode::UnknownJob,
            Refusal::BadRequest { .. } => RefusalCode::BadRequest,
        }
    }
}

impl fmt::Display for JobEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobEnd::Finished { by } => write!(f, "finished (by {by:?})"),
            JobEnd::Stopped { reason } => write!(f, "stopped ({reason})"),
            JobEnd::JoinTimeout {
                round,
                have,
                min,
                waited_ms,
                missing,
            } => {
                write!(
                    f,
                    "round {round} did not complete within the join timeout: {have} of at least {min} members after {:.1} s",
                    *waited_ms as f64 / 1000.0
                )?;
                if missing.is_empty() {
                    write!(f, "; {} more never joined", min.saturating_sub(*have))
                } else {
                    write!(f, "; missing {}", missing.join(", "))
                }
            }
            JobEnd::RoundLimit { rounds } => write!(f, "reached its limit of {rounds} rounds"),
            JobEnd::RestartLimit { restarts } => {
                write!(f, "reached its limit of {restarts} restarts")
            }
            JobEnd::Expired { ttl_ms } => {
                write!(f, "expired (TTL {:.0} s)", *ttl_ms as f64 / 1000.0)
            }
        }
    }
}

impl JobEnd {
    /// A short label (`finished`, `stopped`, `join_timeout`, ...), for status and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            JobEnd::Finished { .. } => "finished",
            JobEnd::Stopped { .. } => "stopped",
            JobEnd::JoinTimeout { .. } => "join_timeout",
            JobEnd::RoundLimit { .. } => "round_limit",
            JobEnd::RestartLimit { .. } => "restart_limit",
            JobEnd::Expired { .. } => "expired",
        }
    }
}

impl fmt::Display for RoundCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RoundCause::First => write!(f, "first round"),
            RoundCause::MemberLost { member, rank, why } => {
                write!(f, "member {member:?} (rank {rank}) lost: {why}")
            }
            RoundCause::MemberLeft { member, rank } => {
                write!(f, "member {member:?} (rank {rank}) left")
            }
            RoundCause::NewMembers { count } => write!(f, "{count} new members"),
            RoundCause::Requested { by } => write!(f, "new round requested by {by:?}"),
            RoundCause::Resumed { members } => {
                write!(
                    f,
                    "resumed after a server restart ({members} members came back)"
                )
            }
        }
    }
}
