//! What a member says of its collective calls on its heartbeats: the compact summary the server
//! keeps per member and reads when asked why a job is stuck (`dt-rdzv status --hang`).
//!
//! A summary is a few dozen bytes: the calls pending (at most [`MAX_PENDING`], one per group,
//! the oldest first), the last completed sequence number per group (at most [`MAX_GROUPS`]),
//! and how long the member has been in no call. Ages are relative to the moment the member
//! sent the summary, so the server needs no clock of the member's: it adds the time since it
//! received it. Ranks are the member's ranks in the round (global ranks), never a subgroup's.

use rkyv::{Archive, Deserialize, Serialize};

/// Most pending calls a summary carries (the oldest ones).
pub const MAX_PENDING: usize = 8;
/// Most groups whose last completed call a summary carries.
pub const MAX_GROUPS: usize = 64;
/// Most ranks a pending call names as those it waits for.
pub const MAX_WAITING_FOR: usize = 16;

/// The group every member of a round is in (the world communicator).
pub const WORLD_GROUP: u64 = 0;

/// The state of one recorded call, as torch's Flight Recorder names them.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallState {
    /// Submitted, waiting for calls before it on the same communicator.
    Queued,
    /// Running: exchanging data with its peers.
    Started,
    /// Finished.
    Completed,
    /// Finished with an error.
    Failed,
}

impl CallState {
    /// Flight Recorder's spelling (`scheduled`, `started`, `completed`), and `failed`.
    pub const fn name(self) -> &'static str {
        match self {
            CallState::Queued => "scheduled",
            CallState::Started => "started",
            CallState::Completed => "completed",
            CallState::Failed => "failed",
        }
    }
}

/// One call that has not finished.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct PendingCall {
    /// The communicator it runs on: [`WORLD_GROUP`], or a subgroup's id (the same on every
    /// member of the subgroup).
    pub group: u64,
    /// The group's size.
    pub group_size: u32,
    /// The call's sequence number in its group (collectives), or per peer pair (point to
    /// point).
    pub seq: u64,
    /// The operation's name (`all_reduce`, `send`, `recv`, `barrier`, ...; at most 32 bytes).
    pub op: String,
    /// Queued or started.
    pub state: CallState,
    /// Milliseconds since it was submitted, as of sending.
    pub age_ms: u64,
    /// For point to point, the peer (global rank).
    pub peer: Option<u32>,
    /// Ranks (global) it has not heard from yet, at most [`MAX_WAITING_FOR`]; empty when not
    /// known.
    pub waiting_for: Vec<u32>,
}

/// The last call a member completed in one group.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct GroupProgress {
    /// The group ([`WORLD_GROUP`] or a subgroup's id).
    pub group: u64,
    /// The group's size.
    pub group_size: u32,
    /// Its last completed collective's sequence number (0: none yet).
    pub completed_seq: u64,
    /// That call's operation name.
    pub completed_op: String,
    /// Milliseconds since it completed, as of sending.
    pub completed_age_ms: u64,
}

/// A member's summary of its calls.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct Progress {
    /// The member's rank in the round it reports for.
    pub rank: u32,
    /// That round.
    pub round: u64,
    /// The calls not yet finished, oldest first.
    pub pending: Vec<PendingCall>,
    /// The last completed call per group.
    pub groups: Vec<GroupProgress>,
    /// Milliseconds since the member was last in any call (`None`: it is in one now, or it has
    /// made none).
    pub idle_ms: Option<u64>,
    /// Calls recorded since the process started.
    pub calls: u64,
}

/// Why a summary was not kept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgressError {
    /// More pending calls than [`MAX_PENDING`].
    #[error("{0} pending calls (at most {MAX_PENDING})")]
    TooManyPending(usize),
    /// More groups than [`MAX_GROUPS`].
    #[error("{0} groups (at most {MAX_GROUPS})")]
    TooManyGroups(usize),
    /// A pending call names more ranks than [`MAX_WAITING_FOR`].
    #[error("a pending call waits for {0} ranks (at most {MAX_WAITING_FOR} are named)")]
    TooManyWaitingFor(usize),
    /// An operation name longer than 32 bytes.
    #[error("an operation name of {0} bytes (at most 32)")]
    LongOpName(usize),
    /// A store record that does not decode.
    #[error("a progress record that does not decode: {0}")]
    Record(String),
}

/// Largest store record [`from_record`] reads.
pub const MAX_RECORD_BYTES: usize = 64 << 10;

/// A summary as a store value (the store path: `dtcomm/progress/<rank>`): the sender's Unix
/// time in milliseconds (8 bytes, little-endian), then the summary's rkyv archive.
pub fn to_record(unix_ms: u64, p: &Progress) -> Vec<u8> {
    let archive = rkyv::to_bytes::<rkyv::rancor::Error>(p).expect("rkyv serialize");
    let mut out = Vec::with_capacity(8 + archive.len());
    out.extend_from_slice(&unix_ms.to_le_bytes());
    out.extend_from_slice(&archive);
    out
}

/// A store record read back: the sender's Unix time in milliseconds and the summary, checked
/// against the bounds.
pub fn from_record(b: &[u8]) -> Result<(u64, Progress), ProgressError> {
    if b.len() < 8 || b.len() > MAX_RECORD_BYTES {
        return Err(ProgressError::Record(format!(
            "{} bytes (8 to {MAX_RECORD_BYTES})",
            b.len()
        )));
    }
    let unix_ms = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
    let mut v = rkyv::util::AlignedVec::<16>::new();
    v.extend_from_slice(&b[8..]);
    let p = rkyv::from_bytes::<Progress, rkyv::rancor::Error>(&v)
        .map_err(|e| ProgressError::Record(e.to_string()))?;
    p.check()?;
    Ok((unix_ms, p))
}

impl Progress {
    /// Checks the bounds a server holds members to (what a member sends is cut to them by
    /// [`Progress::bounded`]).
    pub fn check(&self) -> Result<(), ProgressError> {
        if self.pending.len() > MAX_PENDING {
            return Err(ProgressError::TooManyPending(self.pending.len()));
        }
        if self.groups.len() > MAX_GROUPS {
            return Err(ProgressError::TooManyGroups(self.groups.len()));
        }
        for p in &self.pending {
            if p.waiting_for.len() > MAX_WAITING_FOR {
                return Err(ProgressError::TooManyWaitingFor(p.waiting_for.len()));
            }
            if p.op.len() > 32 {
                return Err(ProgressError::LongOpName(p.op.len()));
            }
        }
        match self.groups.iter().find(|g| g.completed_op.len() > 32) {
            Some(g) => Err(ProgressError::LongOpName(g.completed_op.len())),
            None => Ok(()),
        }
    }

    /// The summary cut to the bounds: the oldest pending calls, the most recently active
    /// groups (the world group always kept), the first waited-for ranks, op names cut.
    pub fn bounded(mut self) -> Progress {
        self.pending.sort_by_key(|p| std::cmp::Reverse(p.age_ms));
        self.pending.truncate(MAX_PENDING);
        for p in &mut self.pending {
            p.waiting_for.truncate(MAX_WAITING_FOR);
            cut(&mut p.op);
        }
        self.groups
            .sort_by_key(|g| (g.group != WORLD_GROUP, g.completed_age_ms));
        self.groups.truncate(MAX_GROUPS);
        for g in &mut self.groups {
            cut(&mut g.completed_op);
        }
        self
    }
}

fn cut(s: &mut String) {
    if s.len() > 32 {
        let mut end = 32;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(age_ms: u64, waiting: usize) -> PendingCall {
        PendingCall {
            group: WORLD_GROUP,
            group_size: 4,
            seq: 3,
            op: "all_reduce".into(),
            state: CallState::Started,
            age_ms,
            peer: None,
            waiting_for: (0..waiting as u32).collect(),
        }
    }

    #[test]
    fn bounded_keeps_the_oldest_calls_and_the_world_group() {
        let p = Progress {
            pending: (0..20).map(|i| pending(i, 40)).collect(),
            groups: (0..100)
                .map(|i| GroupProgress {
                    group: 99 - i,
                    group_size: 2,
                    completed_seq: 1,
                    completed_op: "é".repeat(40),
                    completed_age_ms: i,
                })
                .collect(),
            ..Progress::default()
        };
        assert!(p.check().is_err());
        let b = p.bounded();
        b.check().unwrap();
        assert_eq!(b.pending[0].age_ms, 19);
        assert_eq!(b.groups[0].group, WORLD_GROUP);
        assert_eq!(b.groups[0].completed_op.len(), 32);
    }

    #[test]
    fn records_round_trip_and_garbage_is_refused() {
        let p = Progress {
            rank: 3,
            round: 1,
            pending: vec![pending(5, 2)],
            ..Progress::default()
        };
        let r = to_record(1_700_000_000_000, &p);
        assert_eq!(from_record(&r), Ok((1_700_000_000_000, p)));
        assert!(matches!(
            from_record(b"short"),
            Err(ProgressError::Record(_))
        ));
        assert!(matches!(
            from_record(&[7u8; 100]),
            Err(ProgressError::Record(_))
        ));
        assert!(matches!(
            from_record(&vec![0u8; 1 << 20]),
            Err(ProgressError::Record(_))
        ));
    }

    #[test]
    fn check_names_what_is_too_big() {
        let p = Progress {
            pending: vec![pending(1, 17)],
            ..Progress::default()
        };
        assert_eq!(p.check(), Err(ProgressError::TooManyWaitingFor(17)));
    }
}
