//! Watches: the event history `waitIndex` reads from, and the watchers waiting for the next
//! matching event (one event each, as etcd's v2 `wait=true` answers).

use std::collections::{BTreeMap, VecDeque};

use super::error::{ErrorCode, V2Error};
use super::event::Event;

/// Events kept for `waitIndex` (etcd keeps 1000).
pub const HISTORY: usize = 1000;

/// A pending watch, named for [`super::V2Store::cancel`] and in [`Delivery`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WatchId(pub u64);

/// A pending watch's event, for the driver to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The watch it answers (now finished).
    pub watch: WatchId,
    /// The event.
    pub event: Event,
}

#[derive(Debug, Clone)]
struct Watcher {
    key: String,
    recursive: bool,
    since: u64,
}

/// Whether a watch on `key` (recursive or not) sees an event on `event_key`.
pub(crate) fn matches(key: &str, recursive: bool, event: &Event) -> bool {
    let ek = event.key();
    if ek == key {
        return true;
    }
    // A recursive watch sees its subtree, hidden (`_`) names below it excepted.
    if recursive && let Some(rest) = below(key, ek) {
        return !rest.split('/').any(|c| c.starts_with('_'));
    }
    // Removing a directory is an event for every watch inside it.
    event.action.removes() && event.node.dir && below(ek, key).is_some()
}

/// The part of `key` below directory `dir`, if it is below it.
fn below<'a>(dir: &str, key: &'a str) -> Option<&'a str> {
    if dir == "/" {
        return key.strip_prefix('/').filter(|r| !r.is_empty());
    }
    key.strip_prefix(dir)?.strip_prefix('/')
}

/// The event history and the pending watchers.
#[derive(Debug, Default)]
pub(crate) struct Watches {
    history: VecDeque<Event>,
    /// Index of the oldest event still kept once some were dropped (0: none dropped).
    start: u64,
    pending: BTreeMap<WatchId, Watcher>,
    next: u64,
    outbox: Vec<Delivery>,
}

impl Watches {
    /// Records a change and finishes the watches it matches.
    pub(crate) fn record(&mut self, event: Event) {
        let index = event.modified();
        let done: Vec<WatchId> = self
            .pending
            .iter()
            .filter(|(_, w)| index >= w.since && matches(&w.key, w.recursive, &event))
            .map(|(id, _)| *id)
            .collect();
        for id in done {
            self.pending.remove(&id);
            self.outbox.push(Delivery {
                watch: id,
                event: event.clone(),
            });
        }
        if self.history.len() == HISTORY {
            self.history.pop_front();
            self.start = self.history.front().map_or(index, Event::modified);
        }
        self.history.push_back(event);
    }

    /// The first kept event at or after `since` that a watch on `key` sees, or an error if
    /// `since` is older than the history.
    pub(crate) fn scan(
        &self,
        key: &str,
        recursive: bool,
        since: u64,
        current: u64,
    ) -> Result<Option<Event>, V2Error> {
        if self.start > 0 && since < self.start {
            return Err(V2Error::new(
                ErrorCode::EventIndexCleared,
                format!(
                    "the requested history has been cleared [{}/{since}]",
                    self.start
                ),
                current,
            ));
        }
        Ok(self
            .history
            .iter()
            .find(|e| e.modified() >= since && matches(key, recursive, e))
            .cloned())
    }

    /// Registers a watch for the next matching event at or after `since`.
    pub(crate) fn add(&mut self, key: String, recursive: bool, since: u64) -> WatchId {
        self.next += 1;
        let id = WatchId(self.next);
        self.pending.insert(
            id,
            Watcher {
                key,
                recursive,
                since,
            },
        );
        id
    }

    pub(crate) fn cancel(&mut self, id: WatchId) -> bool {
        self.pending.remove(&id).is_some()
    }

    pub(crate) fn pending(&self) -> usize {
        self.pending.len()
    }

    pub(crate) fn take(&mut self) -> Vec<Delivery> {
        std::mem::take(&mut self.outbox)
    }
}
