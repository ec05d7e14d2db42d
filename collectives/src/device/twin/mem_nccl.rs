//! [`MemNccl`]: an in-memory twin of NCCL over [`MemGpu`]. Communicators of one unique id form a
//! group; set-up is ready once every rank joined (a rank that never calls init leaves the others
//! in progress forever, as NCCL does); a collective is a task on the caller's stream that
//! deposits this rank's input and waits, like a kernel, until every rank's is there, then
//! writes its output. Calls whose kinds or sizes differ between ranks never complete, and
//! nothing completes after an abort: both as with the real thing. A point-to-point exchange
//! (grouped `ncclSend`/`ncclRecv`) pairs each rank's sends with its peers' receives in order;
//! where what p sends q differs from what q expects from p (NCCL would hang or truncate), both
//! ranks' communicators report an async error naming both ranks and counts, and nothing is
//! written. Faults can be injected: an init that fails on a rank, an async error after some
//! collectives, two ranks on one GPU ("duplicate GPU"), a library without `ncclSend`/
//! `ncclRecv`. Each kind of call enqueued is counted ([`MemNccl::enqueued`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use super::gpu::MemGpu;
use crate::device::api::{
    Block, DevPtr, InitState, NcclApi, NcclComm, NcclError, NcclOp, StreamHandle, UniqueId,
};
use crate::dtype::DType;
use crate::reduce::{divide_bytes, reduce_bytes};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// NCCL's result codes the twin uses, with their names.
const CODES: [(u32, &str, &str); 7] = [
    (
        1,
        "ncclUnhandledCudaError",
        "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
    ),
    (
        2,
        "ncclSystemError",
        "unhandled system error (run with NCCL_DEBUG=INFO for details)",
    ),
    (
        3,
        "ncclInternalError",
        "internal error - please report this issue to the NCCL developers",
    ),
    (
        4,
        "ncclInvalidArgument",
        "invalid argument (run with NCCL_DEBUG=WARN for details)",
    ),
    (
        5,
        "ncclInvalidUsage",
        "invalid usage (run with NCCL_DEBUG=WARN for details)",
    ),
    (
        6,
        "ncclRemoteError",
        "remote process exited or there was a network error",
    ),
    (7, "ncclInProgress", "NCCL operation in progress"),
];

/// An error as the twin's NCCL reports it.
fn twin_error(call: &'static str, code: u32, last: &str) -> NcclError {
    let (name, text) = CODES
        .iter()
        .find(|c| c.0 == code)
        .map_or(("unknown", "unknown result code"), |c| (c.1, c.2));
    NcclError {
        call,
        code,
        name,
        text: text.into(),
        last: (!last.is_empty()).then(|| last.to_owned()),
    }
}

/// What one rank deposits for a call: a collective's input, or an exchange's blocks.
#[derive(Clone)]
enum Input {
    /// The collective's input bytes.
    Bytes(Vec<u8>),
    /// An exchange: the bytes sent to each peer and the counts expected from each, in order.
    Blocks {
        sends: Vec<(usize, Vec<u8>)>,
        recvs: Vec<(usize, usize)>,
    },
}

/// One collective as deposited: its shape, and each rank's input.
struct Slot {
    shape: (std::mem::Discriminant<NcclOp>, usize, DType),
    inputs: Vec<Option<Input>>,
    mismatched: bool,
    taken: usize,
}

#[derive(Default)]
struct GroupState {
    joined: Vec<Option<i32>>,
    slots: HashMap<u64, Slot>,
}

struct Group {
    world: usize,
    /// The unique ids it was made from (several: a scalable set-up), as the first rank gave them.
    ids: Vec<[u8; 128]>,
    state: Mutex<GroupState>,
    cv: Condvar,
}

#[derive(Default)]
struct Faults {
    fail_init: Vec<usize>,
    async_error_after: HashMap<usize, usize>,
    no_p2p: bool,
    no_scalable: bool,
    /// Each set-up's rank and number of ids, in order.
    inits: Vec<(usize, usize)>,
}

/// The in-memory twin of NCCL for the ranks of one process. Clones share the groups.
#[derive(Clone)]
pub struct MemNccl {
    gpu: MemGpu,
    groups: Arc<Mutex<HashMap<[u8; 128], Arc<Group>>>>,
    faults: Arc<Mutex<Faults>>,
    enqueued: Arc<Mutex<HashMap<&'static str, usize>>>,
}

impl MemNccl {
    /// NCCL over the twin GPUs `gpu`.
    pub fn new(gpu: &MemGpu) -> MemNccl {
        MemNccl {
            gpu: gpu.clone(),
            groups: Arc::default(),
            faults: Arc::default(),
            enqueued: Arc::default(),
        }
    }

    /// The library has no `ncclSend`/`ncclRecv` (an NCCL older than 2.7): [`NcclApi::has_p2p`]
    /// says so, and an exchange enqueued anyway fails as the real calls would.
    pub fn without_p2p(&self) {
        lock(&self.faults).no_p2p = true;
    }

    /// The library has no `ncclCommInitRankScalable` (an NCCL older than 2.23):
    /// [`NcclApi::has_scalable_init`] says so, and a set-up with several ids fails as it would.
    pub fn without_scalable_init(&self) {
        lock(&self.faults).no_scalable = true;
    }

    /// Every set-up so far: the rank and how many unique ids it was given.
    pub fn inits(&self) -> Vec<(usize, usize)> {
        lock(&self.faults).inits.clone()
    }

    /// How many calls of kind `name` ([`NcclOp::name`]: `ncclAllReduce`, ...,
    /// `ncclSend/ncclRecv`) the ranks enqueued so far, all ranks together.
    pub fn enqueued(&self, name: &str) -> usize {
        lock(&self.enqueued).get(name).copied().unwrap_or(0)
    }

    /// Rank `rank`'s communicator set-up will fail (`ncclUnhandledCudaError`, as with no
    /// driver).
    pub fn fail_init(&self, rank: usize) {
        lock(&self.faults).fail_init.push(rank);
    }

    /// Rank `rank`'s first `n` collectives run; the next one never completes and the
    /// communicator reports an async error (`ncclRemoteError`) from then on.
    pub fn async_error_after(&self, rank: usize, n: usize) {
        lock(&self.faults).async_error_after.insert(rank, n);
    }
}

impl NcclApi for MemNccl {
    fn describe(&self) -> String {
        "in-memory NCCL twin".into()
    }

    fn has_p2p(&self) -> bool {
        !lock(&self.faults).no_p2p
    }

    fn unique_id(&self) -> Result<UniqueId, NcclError> {
        let mut id = [0u8; 128];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut id)
            .map_err(|_| twin_error("ncclGetUniqueId", 2, "no randomness"))?;
        Ok(UniqueId(id))
    }

    fn has_scalable_init(&self) -> bool {
        !lock(&self.faults).no_scalable
    }

    fn init(
        &self,
        ids: &[UniqueId],
        world: usize,
        rank: usize,
        device: i32,
    ) -> Result<Box<dyn NcclComm>, NcclError> {
        let call = if ids.len() == 1 {
            "ncclCommInitRankConfig"
        } else {
            "ncclCommInitRankScalable"
        };
        let Some(id) = ids.first() else {
            return Err(twin_error(call, 4, "no unique id"));
        };
        {
            let mut f = lock(&self.faults);
            if ids.len() > 1 && f.no_scalable {
                return Err(twin_error(
                    call,
                    2,
                    "ncclCommInitRankScalable: not in this library (NCCL 2.23 and later)",
                ));
            }
            if ids.len() > world {
                return Err(twin_error(
                    call,
                    4,
                    &format!("{} unique ids for {world} ranks", ids.len()),
                ));
            }
            f.inits.push((rank, ids.len()));
        }
        if lock(&self.faults).fail_init.contains(&rank) {
            return Err(twin_error(
                call,
                1,
                "Cuda failure 'CUDA driver version is insufficient for CUDA runtime version'",
            ));
        }
        if rank >= world {
            return Err(twin_error(call, 4, &format!("rank {rank} of {world}")));
        }
        let group = lock(&self.groups)
            .entry(id.0)
            .or_insert_with(|| {
                Arc::new(Group {
                    world,
                    ids: ids.iter().map(|i| i.0).collect(),
                    state: Mutex::new(GroupState {
                        joined: vec![None; world],
                        slots: HashMap::new(),
                    }),
                    cv: Condvar::new(),
                })
            })
            .clone();
        {
            let mut st = lock(&group.state);
            if group.world != world {
                return Err(twin_error(
                    call,
                    5,
                    &format!("world {world} but the id's group has {}", group.world),
                ));
            }
            if group.ids.len() != ids.len() || group.ids.iter().zip(ids).any(|(a, b)| *a != b.0) {
                // NCCL: "the number of ncclUniqueIds and their order must be the same for
                // every rank".
                return Err(twin_error(
                    call,
                    5,
                    &format!(
                        "rank {rank} gave {} unique ids that are not the group's {}",
                        ids.len(),
                        group.ids.len()
                    ),
                ));
            }
            if let Some(other) = st.joined.iter().position(|d| *d == Some(device)) {
                return Err(twin_error(
                    call,
                    5,
                    &format!(
                        "Duplicate GPU detected : rank {rank} and rank {other} both on CUDA device {device}"
                    ),
                ));
            }
            st.joined[rank] = Some(device);
        }
        group.cv.notify_all();
        let (error_after, p2p) = {
            let f = lock(&self.faults);
            (f.async_error_after.get(&rank).copied(), !f.no_p2p)
        };
        Ok(Box::new(MemComm {
            gpu: self.gpu.clone(),
            group,
            rank,
            device,
            seq: 0,
            aborted: Arc::new(AtomicBool::new(false)),
            error: Arc::default(),
            error_after,
            p2p,
            enqueued: self.enqueued.clone(),
        }))
    }
}

struct MemComm {
    gpu: MemGpu,
    group: Arc<Group>,
    rank: usize,
    device: i32,
    seq: u64,
    aborted: Arc<AtomicBool>,
    /// An error one of its calls ran into (an exchange whose counts do not pair up).
    error: Arc<Mutex<Option<String>>>,
    error_after: Option<usize>,
    p2p: bool,
    enqueued: Arc<Mutex<HashMap<&'static str, usize>>>,
}

fn parts(op: &NcclOp) -> Option<(DevPtr, DevPtr, usize)> {
    match *op {
        NcclOp::AllReduce {
            send, recv, count, ..
        }
        | NcclOp::Broadcast {
            send, recv, count, ..
        }
        | NcclOp::Reduce {
            send, recv, count, ..
        }
        | NcclOp::AllGather { send, recv, count }
        | NcclOp::ReduceScatter {
            send, recv, count, ..
        } => Some((send, recv, count)),
        NcclOp::Exchange { .. } => None,
    }
}

/// Rank `rank`'s output of collective `op` from every rank's input, or `None` when it writes
/// nothing.
fn output(op: &NcclOp, dtype: DType, rank: usize, inputs: &[Vec<u8>]) -> Option<Vec<u8>> {
    let world = inputs.len();
    let reduce = |op: crate::op::ReduceOp| {
        let mut acc = inputs[0].clone();
        for x in &inputs[1..] {
            reduce_bytes(dtype, op.combine(), &mut acc, x);
        }
        if op == crate::op::ReduceOp::Avg {
            divide_bytes(dtype, &mut acc, world);
        }
        acc
    };
    match *op {
        NcclOp::AllReduce { op, .. } => Some(reduce(op)),
        NcclOp::Broadcast { root, .. } => Some(inputs[root].clone()),
        NcclOp::Reduce { op, root, .. } => (rank == root).then(|| reduce(op)),
        NcclOp::AllGather { .. } => Some(inputs.concat()),
        NcclOp::ReduceScatter { op, count, .. } => {
            let b = count * dtype.size();
            Some(reduce(op)[rank * b..(rank + 1) * b].to_vec())
        }
        NcclOp::Exchange { .. } => None,
    }
}

/// What rank `from` sends rank `to` (elements of each block, in order) and what `to` expects
/// from `from`, or the error naming both when they differ.
fn pair(from: usize, to: usize, inputs: &[Input], size: usize) -> Result<(), String> {
    let blocks = |r: usize| match &inputs[r] {
        Input::Blocks { sends, recvs } => Ok((sends, recvs)),
        Input::Bytes(_) => Err(format!("rank {r} made another call")),
    };
    let sent: Vec<usize> = blocks(from)?
        .0
        .iter()
        .filter(|(p, _)| *p == to)
        .map(|(_, b)| b.len() / size)
        .collect();
    let expected: Vec<usize> = blocks(to)?
        .1
        .iter()
        .filter(|(p, _)| *p == from)
        .map(|(_, n)| *n)
        .collect();
    if sent == expected {
        return Ok(());
    }
    let words = |v: &[usize]| match v {
        [] => "0 elements".to_string(),
        [n] => format!("{n} elements"),
        v => format!("blocks of {v:?} elements"),
    };
    Err(format!(
        "rank {from} sends {} to rank {to} but rank {to} expects {} from rank {from} (NCCL \
         would hang or truncate)",
        words(&sent),
        words(&expected)
    ))
}

/// Rank `rank`'s receives of an exchange (`recvs`, in order), each with the bytes its peer sent
/// for it, or the error of the first pair involving `rank` whose counts differ.
fn exchange(
    rank: usize,
    recvs: &[Block],
    inputs: &[Input],
    size: usize,
) -> Result<Vec<(DevPtr, Vec<u8>)>, String> {
    for q in 0..inputs.len() {
        pair(q, rank, inputs, size)?;
        pair(rank, q, inputs, size)?;
    }
    let mut taken = vec![0usize; inputs.len()];
    recvs
        .iter()
        .map(|b| {
            let Input::Blocks { sends, .. } = &inputs[b.peer] else {
                return Err(format!("rank {} made another call", b.peer));
            };
            let k = taken[b.peer];
            taken[b.peer] += 1;
            sends
                .iter()
                .filter(|(p, _)| *p == rank)
                .nth(k)
                .map(|(_, bytes)| (b.ptr, bytes.clone()))
                .ok_or_else(|| format!("rank {} sends rank {rank} fewer blocks", b.peer))
        })
        .collect()
}

impl NcclComm for MemComm {
    fn state(&mut self) -> Result<InitState, NcclError> {
        if let Some(e) = lock(&self.error).as_ref() {
            return Err(twin_error("ncclCommGetAsyncError", 5, e));
        }
        if self.aborted.load(Ordering::Acquire) {
            return Err(twin_error(
                "ncclCommGetAsyncError",
                5,
                "communicator was aborted",
            ));
        }
        if let Some(n) = self.error_after
            && self.seq > n as u64
        {
            return Err(twin_error(
                "ncclCommGetAsyncError",
                6,
                "NET/Socket : peer closed the connection (injected)",
            ));
        }
        let st = lock(&self.group.state);
        Ok(if st.joined.iter().all(Option::is_some) {
            InitState::Ready
        } else {
            InitState::InProgress
        })
    }

    fn enqueue(
        &mut self,
        op: &NcclOp,
        dtype: DType,
        stream: StreamHandle,
    ) -> Result<(), NcclError> {
        let call = "ncclGroupEnd";
        if self.state()? != InitState::Ready {
            return Err(twin_error(call, 5, "communicator is not initialized yet"));
        }
        if op.needs_p2p() && !self.p2p {
            return Err(twin_error(
                "ncclSend",
                5,
                "ncclSend is not in this NCCL (it came in 2.7)",
            ));
        }
        *lock(&self.enqueued).entry(op.name()).or_default() += 1;
        let world = self.group.world;
        let size = dtype.size();
        let seq = self.seq;
        self.seq += 1;
        let stuck = self.error_after.is_some_and(|n| seq >= n as u64);
        let (gpu, group, rank, device, aborted, error) = (
            self.gpu.clone(),
            self.group.clone(),
            self.rank,
            self.device,
            self.aborted.clone(),
            self.error.clone(),
        );
        let op = op.clone();
        let count = parts(&op).map_or(0, |p| p.2);
        let shape = (std::mem::discriminant(&op), count, dtype);
        let task = move || {
            // A kernel that never completes (until the communicator is aborted).
            let hang = || {
                while !aborted.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(5));
                }
            };
            if stuck {
                // The injected error: this rank's kernel never contributes.
                return hang();
            }
            let read = |p: DevPtr, len: usize| match gpu.read(p, len, Some(device)) {
                Ok(b) => b,
                Err(e) => panic!("twin NCCL kernel fault on rank {rank}: {e}"),
            };
            let input = match (&op, parts(&op)) {
                (NcclOp::Exchange { sends, recvs }, _) => Input::Blocks {
                    sends: sends
                        .iter()
                        .map(|b| (b.peer, read(b.ptr, b.count * size)))
                        .collect(),
                    recvs: recvs.iter().map(|b| (b.peer, b.count)).collect(),
                },
                (NcclOp::ReduceScatter { .. }, Some((send, _, count))) => {
                    Input::Bytes(read(send, world * count * size))
                }
                (_, Some((send, _, count))) => Input::Bytes(read(send, count * size)),
                (_, None) => Input::Bytes(Vec::new()),
            };
            let mut st = lock(&group.state);
            let slot = st.slots.entry(seq).or_insert_with(|| Slot {
                shape,
                inputs: vec![None; world],
                mismatched: false,
                taken: 0,
            });
            if slot.shape != shape {
                slot.mismatched = true;
            }
            slot.inputs[rank] = Some(input);
            group.cv.notify_all();
            loop {
                if aborted.load(Ordering::Acquire) {
                    return;
                }
                let slot = st
                    .slots
                    .get(&seq)
                    .expect("held until every rank took its output");
                if !slot.mismatched && slot.inputs.iter().all(Option::is_some) {
                    break;
                }
                st = group
                    .cv
                    .wait_timeout(st, Duration::from_millis(20))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            let slot = st.slots.get_mut(&seq).expect("present");
            let inputs: Vec<Input> = slot
                .inputs
                .iter()
                .map(|i| i.clone().expect("all in"))
                .collect();
            slot.taken += 1;
            if slot.taken == world {
                st.slots.remove(&seq);
            }
            drop(st);
            let writes = match &op {
                NcclOp::Exchange { recvs, .. } => exchange(rank, recvs, &inputs, size),
                _ => {
                    let bytes: Vec<Vec<u8>> = inputs
                        .into_iter()
                        .map(|i| match i {
                            Input::Bytes(b) => b,
                            Input::Blocks { .. } => Vec::new(),
                        })
                        .collect();
                    let recv = parts(&op).map_or(DevPtr(0), |p| p.1);
                    Ok(output(&op, dtype, rank, &bytes)
                        .map(|out| (recv, out))
                        .into_iter()
                        .collect())
                }
            };
            let written = writes.and_then(|w| {
                w.iter().try_for_each(|(p, bytes)| {
                    gpu.write(*p, bytes)
                        .map_err(|e| format!("twin NCCL kernel fault on rank {rank}: {e}"))
                })
            });
            if let Err(e) = written {
                // What NCCL would hang on: this rank's communicator reports it, and the kernel
                // never completes.
                *lock(&error) = Some(e);
                hang();
            }
        };
        self.gpu
            .queue(self.device, stream, Box::new(task))
            .map_err(|e| twin_error(call, 1, &e.to_string()))
    }

    fn abort(&mut self) {
        self.aborted.store(true, Ordering::Release);
        self.group.cv.notify_all();
    }
}
