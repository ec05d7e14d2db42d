//! One recorded call: the slot the ring keeps ([`Slot`], plain data, no allocation) and the
//! snapshot callers get ([`Entry`], wall-clock times and the waited-for ranks as a list).

use dt_rdzv_proto::native::CallState;
use dt_rdzv_proto::native::progress::MAX_WAITING_FOR;

use crate::dtype::DType;

/// What a call is, known when it is queued or started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallInfo {
    /// The communicator's group: 0 for a world communicator, else the subgroup's id (the
    /// same on every member).
    pub group: u64,
    /// The group's size.
    pub group_size: u32,
    /// This rank's global rank.
    pub rank: u32,
    /// This rank's rank in the group.
    pub group_rank: u32,
    /// The operation (`all_reduce`, `send`, `recv`, `barrier`, ...).
    pub op: &'static str,
    /// For point to point, the peer's global rank (`None` for a receive from any source).
    pub peer: Option<u32>,
    /// For point to point, the peer's rank in the group.
    pub group_peer: Option<u32>,
    /// Whether it is point to point.
    pub p2p: bool,
    /// Element type.
    pub dtype: DType,
    /// Elements of the input buffer (0: none).
    pub in_count: u64,
    /// Elements of the output buffer (0: none).
    pub out_count: u64,
    /// The call's deadline in milliseconds.
    pub timeout_ms: u64,
}

/// A ring slot: one call, its times in nanoseconds on the recorder's monotonic clock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot {
    pub id: u64,
    pub info: CallInfo,
    pub seq: u64,
    pub state: CallState,
    pub queued: u64,
    pub started: Option<u64>,
    pub ended: Option<u64>,
    pub waiting: [u32; MAX_WAITING_FOR],
    pub waiting_len: u8,
    /// How many ranks it waits for in all (more than [`MAX_WAITING_FOR`] are not named).
    pub waiting_total: u32,
}

impl Slot {
    pub(crate) fn new(id: u64, info: CallInfo, seq: u64, state: CallState, now: u64) -> Slot {
        Slot {
            id,
            info,
            seq,
            state,
            queued: now,
            started: (state != CallState::Queued).then_some(now),
            ended: None,
            waiting: [0; MAX_WAITING_FOR],
            waiting_len: 0,
            waiting_total: 0,
        }
    }

    pub(crate) fn waiting_for(&self) -> &[u32] {
        &self.waiting[..self.waiting_len as usize]
    }
}

/// A recorded call, as [`entries`](super::entries) returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its record id: counts every call this process recorded, from 0.
    pub record_id: u64,
    /// What the call is.
    pub info: CallInfo,
    /// Its sequence number, from 1: collectives per group, point to point per pair and
    /// direction (0 while it is queued behind other calls).
    pub seq: u64,
    /// Queued, started, completed or failed.
    pub state: CallState,
    /// When it was submitted (ns since the Unix epoch).
    pub time_queued_ns: u64,
    /// When it started.
    pub time_started_ns: Option<u64>,
    /// When it completed or failed.
    pub time_ended_ns: Option<u64>,
    /// Nanoseconds since it was submitted (to its end if it ended, else to now).
    pub duration_ns: u64,
    /// The global ranks it had not heard from when it last stopped to wait (at most
    /// [`MAX_WAITING_FOR`]); empty when it never had to.
    pub waiting_for: Vec<u32>,
    /// How many ranks it waited for in all.
    pub waiting_total: u32,
}
