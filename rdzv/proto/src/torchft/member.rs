//! [`Member`]: one replica group as it asks to join a quorum (torchft's `QuorumMember`), and
//! the checks on it.

use bytes::Bytes;

use super::config::Limits;
use super::error::Refusal;

/// A replica group asking to join (torchft's `QuorumMember`). The fields the rule and the
/// status page read, and the member as the client encoded it: quorums carry `wire` back
/// verbatim, so fields this crate does not name (newer torchft's) reach the other members.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Member {
    /// The replica group's id (torchft: `name:uuid`; the Manager reads ranks from its
    /// trailing digits, so it goes back byte for byte).
    pub replica_id: String,
    /// Its Manager's gRPC address (what `/replica/{id}/kill` calls).
    pub address: String,
    /// Its store's `host:port`.
    pub store_address: String,
    /// Its training step.
    pub step: i64,
    /// Ranks in the replica group.
    pub world_size: u64,
    /// Asks that the next quorum hold only members of the previous one.
    pub shrink_only: bool,
    /// Opaque JSON the client attached.
    pub data: String,
    /// Commits that failed since its last quorum; any > 0 gives the quorum a new id.
    pub commit_failures: i64,
    /// The encoded `QuorumMember` as received.
    pub wire: Bytes,
}

impl Member {
    /// Whether the member is within `limits` (`INVALID_ARGUMENT` if not).
    pub fn check(&self, limits: &Limits) -> Result<(), Refusal> {
        check_replica_id(&self.replica_id, limits)?;
        if self.world_size > limits.max_world_size {
            return Err(Refusal::InvalidArgument(format!(
                "world_size {} is over the limit {}",
                self.world_size, limits.max_world_size
            )));
        }
        if self.wire.len() > limits.max_member_bytes {
            return Err(Refusal::InvalidArgument(format!(
                "the QuorumMember is {} bytes, over the limit {}",
                self.wire.len(),
                limits.max_member_bytes
            )));
        }
        Ok(())
    }
}

/// Whether a replica id is within `limits` (`INVALID_ARGUMENT` if not).
pub fn check_replica_id(replica_id: &str, limits: &Limits) -> Result<(), Refusal> {
    if replica_id.len() > limits.max_replica_id_bytes {
        return Err(Refusal::InvalidArgument(format!(
            "replica_id is {} bytes, over the limit {}",
            replica_id.len(),
            limits.max_replica_id_bytes
        )));
    }
    Ok(())
}

/// Whether a job key is within `limits` (`INVALID_ARGUMENT` if not).
pub fn check_job_key(job: &str, limits: &Limits) -> Result<(), Refusal> {
    if job.len() > limits.max_job_key_bytes {
        return Err(Refusal::InvalidArgument(format!(
            "the job key is {} bytes, over the limit {}",
            job.len(),
            limits.max_job_key_bytes
        )));
    }
    Ok(())
}
