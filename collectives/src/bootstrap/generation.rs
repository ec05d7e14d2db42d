//! The generation of a store set-up: the k-th communicator a rank builds on a store and
//! prefix uses generation k (`<prefix>/generation/<rank>` counts them, the addresses live
//! under `<prefix>/<k>/addr/<rank>`), so that several communicators created in the same order
//! on every rank never read each other's addresses.
//!
//! Counters can fall out of step when a set-up ends part-way, and a rerun with the same run
//! id on the same store would then wait out its deadline for addresses published under other
//! generations. Two rules keep them in step:
//!
//! * a set-up that fails (Ctrl-C, a timeout, a mismatch) takes its count back and removes the
//!   address it published ([`Generations`] rolls back when dropped uncommitted), except on a
//!   world-size mismatch, which the peers must read in that address to fail at once too (a
//!   rerun that reads such a stale address before its rank publishes again fails on the
//!   mismatch: the one case these rules leave);
//! * a rank that cannot roll back (killed) leaves a counter ahead and no address: a rank that
//!   waits for an address finds the missing rank's counter past its own and moves up to it,
//!   so the ranks of a rerun meet at the highest generation.

use std::time::Duration;

use dt_rdzv::store::{Store, StoreError};

use crate::error::CommError;
use crate::transport::tcp::setup::Setup;

/// How long one store wait of the set-up lasts before the interrupt check is asked again.
const SLICE: Duration = Duration::from_millis(100);

/// The rank of an address key (`<prefix>/<generation>/addr/<rank>`).
pub(super) fn rank_of_key(k: &str) -> String {
    k.rsplit('/').next().unwrap_or(k).to_owned()
}

/// Most missing ranks whose counters one slice looks at.
const LOOK_AT: usize = 16;

/// This rank's generation on a store and prefix: the k-th communicator a rank builds there
/// uses generation k (`<prefix>/generation/<rank>` counts them).
pub(super) struct Generations<'a> {
    store: &'a dyn Store,
    prefix: &'a str,
    rank: usize,
    /// The generation this rank is at.
    pub(super) current: i64,
    /// Its counter before this set-up counted.
    start: i64,
    committed: bool,
    /// Leave the address in place when rolling back (the peers must read it to fail too).
    keep_address: bool,
}

impl<'a> Generations<'a> {
    /// Counts this set-up on the store: the next generation of this rank.
    pub(super) fn new(
        store: &'a dyn Store,
        prefix: &'a str,
        rank: usize,
        su: &Setup,
    ) -> Result<Self, CommError> {
        let current = store
            .add(&format!("{prefix}/generation/{rank}"), 1)
            .map_err(|e| su.err(format!("store: {e}")))?;
        Ok(Self {
            store,
            prefix,
            rank,
            current,
            start: current - 1,
            committed: false,
            keep_address: false,
        })
    }

    /// The set-up fails on something the peers must see in this rank's address (a world
    /// size that differs): the rollback leaves the address in place.
    pub(super) fn keep_address(&mut self) {
        self.keep_address = true;
    }

    /// The set-up succeeded: the generation stays counted.
    pub(super) fn commit(&mut self) {
        self.committed = true;
    }

    /// Whether a rank whose address under this generation is missing has counted past it
    /// (it skipped this generation: this rank was interrupted during an earlier set-up, or it
    /// was); if so, this rank's counter moves up to the highest one seen and `true`.
    fn catch_up(&mut self, missing: &[String], su: &Setup) -> Result<bool, CommError> {
        let mut highest = self.current;
        for k in missing.iter().take(LOOK_AT) {
            let Ok(r) = rank_of_key(k).parse::<usize>() else {
                continue;
            };
            let theirs = self
                .store
                .add(&format!("{}/generation/{r}", self.prefix), 0)
                .map_err(|e| su.err(format!("store: {e}")))?;
            // Counter first, then the key: a rank publishes under a generation before it
            // counts past it, so an address still missing now was skipped, not late.
            if theirs > highest
                && !self
                    .store
                    .check(&[k.as_str()])
                    .map_err(|e| su.err(format!("store: {e}")))?
            {
                highest = theirs;
            }
        }
        if highest <= self.current {
            return Ok(false);
        }
        tracing::warn!(
            rank = self.rank,
            from = self.current,
            to = highest,
            "dtcomm: another rank counted past this generation on {} (a set-up interrupted \
             earlier on this store): moving up to it",
            self.prefix
        );
        self.current = self
            .store
            .add(
                &format!("{}/generation/{}", self.prefix, self.rank),
                highest - self.current,
            )
            .map_err(|e| su.err(format!("store: {e}")))?;
        Ok(true)
    }
}

impl Drop for Generations<'_> {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        // Best effort: a store that is gone has nothing to keep in step.
        if !self.keep_address {
            let key = format!("{}/{}/addr/{}", self.prefix, self.current, self.rank);
            let _ = self.store.delete_key(&key);
        }
        let _ = self.store.add(
            &format!("{}/generation/{}", self.prefix, self.rank),
            self.start - self.current,
        );
        tracing::debug!(
            rank = self.rank,
            generation = self.current,
            "dtcomm: set-up failed: its generation taken back"
        );
    }
}

/// How a wait that may catch up ended.
pub(super) enum Waited {
    /// The keys are there, or the store's own error, or the deadline.
    Done(Result<(), StoreError>),
    /// This rank moved to a higher generation: publish again and wait anew.
    Moved,
}

/// `store.wait(keys, limit)` in slices of [`SLICE`], asking this thread's interrupt check
/// between them (`Err` when interrupted) and looking whether a missing rank counted past this
/// generation.
pub(super) fn wait_catching_up(
    su: &Setup,
    store: &dyn Store,
    keys: &[&str],
    limit: Duration,
    gens: &mut Generations<'_>,
) -> Result<Waited, CommError> {
    let start = std::time::Instant::now();
    loop {
        let left = limit.saturating_sub(start.elapsed());
        if left <= SLICE {
            return Ok(Waited::Done(
                store.wait(keys, left.max(Duration::from_millis(1))),
            ));
        }
        match store.wait(keys, SLICE) {
            Err(StoreError::Timeout { missing, .. }) => {
                su.interrupted()?;
                if gens.catch_up(&missing, su)? {
                    return Ok(Waited::Moved);
                }
            }
            r => return Ok(Waited::Done(r)),
        }
    }
}
