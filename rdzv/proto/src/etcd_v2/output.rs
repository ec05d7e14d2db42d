//! What the store tells its driver: the [`Answer`] to each request, the events of pending
//! watches, and the runs it purged, as [`Output`]s in order.

use super::error::V2Error;
use super::event::Event;
use super::input::ConnId;
use super::namespace::RunNamespace;
use super::watch::{Delivery, WatchId};

/// What the driver must do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Answer a request of `conn` (the one it just fed).
    Answer {
        /// The connection.
        conn: ConnId,
        /// What to answer: etcd's JSON, or its error.
        answer: Result<Answer, V2Error>,
    },
    /// A pending watch saw its event: send it and finish that response.
    Watched(Delivery),
    /// A run's keys were removed (for the log).
    Purged {
        /// The run.
        run: RunNamespace,
        /// Files removed (never 0: a run that held nothing is purged without a word).
        files: usize,
        /// Why.
        reason: PurgeReason,
    },
}

/// A request's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A read's or a write's event (`201 Created` for a new key, see
    /// [`Event::created_key`]).
    Now(Event),
    /// A watch answered from the history (always `200 OK`).
    Watched(Event),
    /// A watch waiting for its event, which comes as [`Output::Watched`].
    Pending {
        /// The watch ([`Input::Cancel`](super::Input::Cancel) forgets it).
        watch: WatchId,
        /// The index it started at (`X-Etcd-Index`, sent at once).
        index: u64,
    },
}

/// Why a run's keys were purged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PurgeReason {
    /// A new run started where no client of the earlier one is left.
    Rerun,
    /// No open connection touched it for the idle TTL.
    Idle,
    /// Asked for ([`V2Store::purge_run`](super::V2Store::purge_run)).
    Explicit,
}
