//! Watches: the event history `waitIndex` reads from, and the watchers waiting for the next
//! matching event (one event each, as etcd's v2 `wait=true` answers).

use std::collections::{BTreeMap, VecDeque};

use super::error::{ErrorCode, V2Error};
use super::event::Event;

/// Events kept for `waitIndex` (etcd keeps 1000).
pub const HISTORY: usize = 1000;
/// Bytes of keys and values the kept events may hold together: each event keeps its value and
/// the previous one, so 1000 writes of 1.5 MiB would otherwise hold 3 GB beside a store of
/// 1.5 MiB. Older events go first (a `waitIndex` before them gets etcd's
/// `EventIndexCleared`, as after 1000 events).
pub const HISTORY_BYTES: u64 = 64 << 20;

fn event_bytes(e: &Event) -> u64 {
    let view = |n: &super::NodeView| {
        (n.key.as_ref().map_or(0, String::len) + n.value.as_ref().map_or(0, String::len)) as u64
    };
    view(&e.node) + e.prev.as_ref().map_or(0, view)
}

/// A pending watch, named in [`Answer::Pending`](super::Answer::Pending), in
/// [`Input::Cancel`](super::Input::Cancel) and in [`Delivery`].
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
    /// Bytes the kept events hold ([`event_bytes`]).
    history_bytes: u64,
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
        self.history_bytes += event_bytes(&event);
        self.history.push_back(event);
        while self.history.len() > HISTORY
            || (self.history_bytes > HISTORY_BYTES && self.history.len() > 1)
        {
            let old = self.history.pop_front().expect("not empty");
            self.history_bytes -= event_bytes(&old);
            self.start = self.history.front().map_or(index, Event::modified);
        }
    }

    /// Bytes the kept events hold.
    pub(crate) fn history_bytes(&self) -> u64 {
        self.history_bytes
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
