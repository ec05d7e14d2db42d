//! One recorded call: where it is ([`CallId`]), a ring slot's words of it (written, encoded
//! and decoded here, the same for every ring), a copy of them ([`Slot`]) and the snapshot
//! callers get ([`Entry`], wall-clock times and the waited-for ranks as a list).

use dt_rdzv_proto::native::CallState;
use dt_rdzv_proto::native::progress::MAX_WAITING_FOR;

use super::seqlock::Write;
use crate::dtype::DType;

/// Where a recorded call is: call `n` of the shared ring (calls queued for or watched by a
/// progress thread), or call `index` of the ring of the thread that ran it (key `ring`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallId {
    /// In the shared ring.
    Shared(u64),
    /// In thread ring `ring` (a key from 1, below 2^16).
    Local { ring: u32, index: u64 },
}

/// Bits of a packed [`CallId`] that hold the number in its ring + 1.
const INDEX_BITS: u32 = 48;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;

impl CallId {
    /// As one word, never 0: the number in its ring + 1 in the low 48 bits (2.8e14 calls,
    /// years of a thread calling at full speed), the thread ring's key above (0: shared).
    pub(crate) fn pack(self) -> u64 {
        match self {
            CallId::Shared(n) => (n + 1) & INDEX_MASK,
            CallId::Local { ring, index } => {
                (u64::from(ring) << INDEX_BITS) | ((index + 1) & INDEX_MASK)
            }
        }
    }

    /// A [`pack`](Self::pack)ed word back (`None`: 0).
    pub(crate) fn unpack(w: u64) -> Option<CallId> {
        let n = (w & INDEX_MASK).checked_sub(1)?;
        Some(match (w >> INDEX_BITS) as u32 {
            0 => CallId::Shared(n),
            ring => CallId::Local { ring, index: n },
        })
    }
}

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

/// A copy of a ring slot: one call, its times in the recorder's ticks (`clock.rs`).
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
    pub(crate) fn waiting_for(&self) -> &[u32] {
        &self.waiting[..self.waiting_len as usize]
    }
}

/// Word indexes of a slot (the call's description is words 1..=7).
pub(crate) const W_ID: usize = 0;
pub(crate) const W_SEQ: usize = 8;
/// State (8 bits), waiting_len (8 bits), waiting_total (32 bits, from bit 32).
pub(crate) const W_STATE: usize = 9;
pub(crate) const W_QUEUED: usize = 10;
pub(crate) const W_STARTED: usize = 11;
pub(crate) const W_ENDED: usize = 12;
pub(crate) const W_WAITING: usize = 13;

/// Words of a ring slot: the id, the call's description (7), seq, state and waiting
/// counts, three times, the waited-for ranks two to a word.
pub(crate) const WORDS: usize = 13 + MAX_WAITING_FOR / 2;

/// A ring slot being written.
pub(crate) type SlotWrite<'a> = Write<'a, WORDS>;

/// Fills a slot with call `n` of its ring (queued, or started at once with its sequence
/// number).
#[inline]
pub(crate) fn write_new(
    w: &SlotWrite<'_>,
    n: u64,
    info: &CallInfo,
    seq: u64,
    state: CallState,
    now: u64,
) {
    w.set(W_ID, n + 1);
    for (i, v) in encode_info(info).into_iter().enumerate() {
        w.set(1 + i, v);
    }
    w.set(W_SEQ, seq);
    w.set(W_STATE, state_code(state));
    w.set(W_QUEUED, now);
    w.set(W_STARTED, if state == CallState::Queued { 0 } else { now });
    w.set(W_ENDED, 0);
}

/// A queued call starts, with its sequence number.
pub(crate) fn write_start(w: &SlotWrite<'_>, seq: u64, now: u64) {
    w.set(W_SEQ, seq);
    let st = w.get(W_STATE);
    w.set(W_STATE, (st & !0xff) | state_code(CallState::Started));
    w.set(W_STARTED, now);
}

/// The ranks a call waits for (global; at most [`MAX_WAITING_FOR`] are named, all counted),
/// as the words [`write_waiting`] takes.
pub(crate) fn waiting_words(ranks: impl Iterator<Item = u32>) -> ([u32; MAX_WAITING_FOR], u64) {
    let mut named = [0u32; MAX_WAITING_FOR];
    let mut n = 0u64;
    for r in ranks {
        if let Some(x) = named.get_mut(n as usize) {
            *x = r;
        }
        n += 1;
    }
    (named, n)
}

/// The ranks a started call waits for, as of now ([`waiting_words`]).
pub(crate) fn write_waiting(w: &SlotWrite<'_>, named: &[u32; MAX_WAITING_FOR], total: u64) {
    let len = total.min(MAX_WAITING_FOR as u64);
    for (k, pair) in named.chunks(2).enumerate() {
        w.set(
            W_WAITING + k,
            u64::from(pair[0]) | (u64::from(pair[1]) << 32),
        );
    }
    let st = w.get(W_STATE) & 0xff;
    w.set(
        W_STATE,
        st | (len << 8) | (total.min(u64::from(u32::MAX)) << 32),
    );
}

/// The call ended, successfully or not.
#[inline]
pub(crate) fn write_end(w: &SlotWrite<'_>, ok: bool, now: u64) {
    let st = w.get(W_STATE);
    let state = if ok {
        CallState::Completed
    } else {
        CallState::Failed
    };
    w.set(W_STATE, (st & !0xff) | state_code(state));
    if w.get(W_STARTED) == 0 {
        w.set(W_STARTED, now);
    }
    w.set(W_ENDED, now);
}

/// A state's code in a slot (0: an empty slot).
pub(crate) fn state_code(s: CallState) -> u64 {
    match s {
        CallState::Queued => 1,
        CallState::Started => 2,
        CallState::Completed => 3,
        CallState::Failed => 4,
    }
}

/// The operations' names, by code (`Collective::name`'s).
const OPS: [&str; 12] = [
    "all_reduce",
    "broadcast",
    "reduce",
    "all_gather",
    "reduce_scatter",
    "gather",
    "scatter",
    "all_to_all",
    "barrier",
    "send/recv",
    "send",
    "recv",
];

/// `op`'s code (a `match`, compiled to a switch on the length and one comparison).
#[inline]
pub(crate) fn op_code(op: &str) -> u64 {
    match op {
        "all_reduce" => 0,
        "broadcast" => 1,
        "reduce" => 2,
        "all_gather" => 3,
        "reduce_scatter" => 4,
        "gather" => 5,
        "scatter" => 6,
        "all_to_all" => 7,
        "barrier" => 8,
        "send/recv" => 9,
        "send" => 10,
        "recv" => 11,
        _ => 0xff,
    }
}

/// The name of op code `c`.
pub(crate) fn op_name(c: u64) -> &'static str {
    OPS.get(c as usize).copied().unwrap_or("?")
}

const NONE32: u64 = u32::MAX as u64;

/// `info` as words 1..=7 of a slot.
#[inline]
pub(crate) fn encode_info(i: &CallInfo) -> [u64; 7] {
    [
        i.group,
        u64::from(i.group_size) | (u64::from(i.rank) << 32),
        u64::from(i.group_rank) | (i.peer.map_or(NONE32, u64::from) << 32),
        i.group_peer.map_or(NONE32, u64::from)
            | (u64::from(i.dtype as u8) << 32)
            | (op_code(i.op) << 40)
            | (u64::from(i.p2p) << 48),
        i.in_count,
        i.out_count,
        i.timeout_ms,
    ]
}

fn opt32(v: u64) -> Option<u32> {
    let v = v & NONE32;
    (v != NONE32).then_some(v as u32)
}

fn nonzero(v: u64) -> Option<u64> {
    (v != 0).then_some(v)
}

/// A slot's words as a [`Slot`] (`None`: empty).
pub(crate) fn decode(w: &[u64; WORDS]) -> Option<Slot> {
    let id = w[0].checked_sub(1)?;
    let state = match w[W_STATE] & 0xff {
        1 => CallState::Queued,
        2 => CallState::Started,
        3 => CallState::Completed,
        4 => CallState::Failed,
        _ => return None,
    };
    let info = CallInfo {
        group: w[1],
        group_size: w[2] as u32,
        rank: (w[2] >> 32) as u32,
        group_rank: w[3] as u32,
        peer: opt32(w[3] >> 32),
        group_peer: opt32(w[4]),
        dtype: DType::from_u8((w[4] >> 32) as u8).unwrap_or(DType::U8),
        op: op_name((w[4] >> 40) & 0xff),
        p2p: (w[4] >> 48) & 1 == 1,
        in_count: w[5],
        out_count: w[6],
        timeout_ms: w[7],
    };
    let mut waiting = [0u32; MAX_WAITING_FOR];
    for (k, pair) in waiting.chunks_mut(2).enumerate() {
        pair[0] = w[W_WAITING + k] as u32;
        pair[1] = (w[W_WAITING + k] >> 32) as u32;
    }
    Some(Slot {
        id,
        info,
        seq: w[W_SEQ],
        state,
        queued: w[W_QUEUED],
        started: nonzero(w[W_STARTED]),
        ended: nonzero(w[W_ENDED]),
        waiting,
        waiting_len: ((w[W_STATE] >> 8) & 0xff).min(MAX_WAITING_FOR as u64) as u8,
        waiting_total: (w[W_STATE] >> 32) as u32,
    })
}

/// A recorded call, as [`entries`](super::entries) returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its record id: counts every call this process recorded, from 0, in the order the
    /// calls were made (given when the recorder is read: two calls of different threads made
    /// within a few ns of each other may swap ids between two reads).
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_ids_pack_into_one_word() {
        for id in [
            CallId::Shared(0),
            CallId::Shared(12345),
            CallId::Local { ring: 1, index: 0 },
            CallId::Local {
                ring: 65535,
                index: (1 << 47) + 3,
            },
        ] {
            assert_ne!(id.pack(), 0);
            assert_eq!(CallId::unpack(id.pack()), Some(id));
        }
        assert_eq!(CallId::unpack(0), None);
    }

    #[test]
    fn op_codes_name_every_op() {
        for (i, op) in OPS.iter().enumerate() {
            assert_eq!(op_code(op), i as u64);
        }
        assert_eq!(op_code("nope"), 0xff);
    }
}
