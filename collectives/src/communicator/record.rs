//! The communicator's calls in the flight recorder (`crate::flight`): what a call is to it,
//! its sequence number, and the group this communicator is (world, a subset, or what a front
//! end says with [`Communicator::set_flight_group`]), and its [`flight::Live`] part, made at
//! its first call.

use std::sync::atomic::Ordering;

use super::{Communicator, Inner, State};
use crate::call::{Call, Collective};
use crate::error::CommError;
use crate::flight::{self, CallInfo, Group, Record};

impl Communicator {
    /// Tells the flight recorder which group this communicator is: `id` (the same on every
    /// member, not 0, which is the world's) and each rank's global rank (`global_ranks[r]`
    /// for rank `r`), e.g. for a torch `new_group` built through a store. Only before the
    /// first call and only once; returns whether it was taken.
    pub fn set_flight_group(&self, id: u64, global_ranks: Vec<u32>) -> bool {
        if id == flight::WORLD_GROUP
            || global_ranks.len() != self.inner.world
            || self.inner.flight_live.get().is_some()
        {
            return false;
        }
        self.inner
            .flight
            .set(Group::named(id, global_ranks))
            .is_ok()
    }

    /// The flight recorder's group id of this communicator (0: a world communicator).
    pub fn flight_group(&self) -> u64 {
        self.inner.flight_group().id
    }

    /// The global rank of this communicator's rank `rank`, as the flight recorder names it.
    pub fn global_rank(&self, rank: usize) -> u32 {
        self.inner.flight_group().global(rank)
    }

    /// The recorder's group of the subset of `ranks` made next from this communicator (every
    /// rank of it calls this in the same order).
    pub(super) fn next_subgroup(&self, ranks: &[usize]) -> Group {
        let count = self.inner.subsets.fetch_add(1, Ordering::Relaxed) + 1;
        self.inner.flight_group().subgroup(count, ranks)
    }
}

impl Inner {
    pub(super) fn flight_group(&self) -> &Group {
        self.flight.get().unwrap_or(Group::world())
    }

    /// This communicator in the recorder (`None`: it is off), made at the first call.
    fn flight_live(&self) -> Option<&flight::Live> {
        self.flight_live
            .get_or_init(|| flight::register(self.flight_group(), self.rank, self.world))
            .as_deref()
    }

    /// What `call` is to the recorder.
    fn flight_info(&self, live: &flight::Live, call: &Call) -> CallInfo {
        let input = call.send.or(call.recv);
        let group_peer = match call.collective {
            Collective::Send { peer } | Collective::Recv { peer } => Some(peer),
            _ => None,
        };
        CallInfo {
            group: live.group,
            group_size: live.group_size,
            rank: live.rank,
            group_rank: self.rank as u32,
            op: call.collective.name(),
            peer: group_peer.map(|p| live.global(p)),
            group_peer: group_peer.map(|p| p as u32),
            p2p: matches!(
                call.collective,
                Collective::Send { .. } | Collective::Recv { .. } | Collective::RecvAny { .. }
            ),
            dtype: input.map_or(crate::dtype::DType::U8, |b| b.dtype()),
            in_count: input.map_or(0, |b| b.count() as u64),
            out_count: call.recv.map_or(0, |b| b.count() as u64),
            timeout_ms: call
                .deadline
                .unwrap_or(self.config.timeout.value)
                .as_millis() as u64,
        }
    }

    /// Records `call` as submitted behind others.
    pub(super) fn flight_queued(&self, call: &Call) -> Option<Record> {
        let live = self.flight_live()?;
        flight::queued(live, &self.flight_info(live, call))
    }

    /// Records `call` (queued as `queued`, or new) as starting now, under the state lock: its
    /// sequence number, from 1, is the one it is about to take. A `watched` call (on a device)
    /// may end after later calls start.
    pub(super) fn flight_start(
        &self,
        st: &State,
        call: &Call,
        queued: Option<Record>,
        watched: bool,
    ) -> Option<Record> {
        let live = self.flight_live()?;
        let next = |v: &[u64], p: usize| v.get(p).map_or(0, |s| s + 1);
        let seq = match call.collective {
            Collective::Send { peer } => next(&st.send_seq, peer),
            Collective::Recv { peer } => next(&st.recv_seq, peer),
            Collective::RecvAny { .. } => 0,
            _ => st.seq + 1,
        };
        flight::started(live, queued, || self.flight_info(live, call), seq, watched)
    }

    /// Records the end of a call (one that was not `watched` ends under the state lock); a
    /// timeout dumps the trace when the environment asks.
    pub(super) fn flight_end(&self, rec: Option<Record>, r: &Result<(), CommError>) {
        let (Some(rec), Some(live)) = (rec, self.flight_live.get().and_then(|l| l.as_deref()))
        else {
            return;
        };
        flight::ended(live, rec, r.is_ok());
        if let Err(e) = r
            && is_timeout(e)
            && flight::on_timeout(live.rank)
        {
            // The others dump too, those in no call included (torch's watchdog tells every
            // rank through its store; here the rendezvous server does in a native round, and
            // the front end's publisher through the store otherwise).
            let why = e.to_string();
            self.fence.ask_dump(&why);
            flight::post_dump_ask(live.rank, &why);
        }
    }
}

/// A call that timed out, or that failed because a peer's timed out (torch dumps on every
/// rank when one times out; a peer's abort is how this rank hears of it). Not a failed
/// communicator's later calls.
fn is_timeout(e: &CommError) -> bool {
    match e {
        CommError::Timeout { .. } | CommError::WaitTimeout { .. } => true,
        CommError::Aborted { reason, .. } => reason.contains("timed out"),
        _ => false,
    }
}
