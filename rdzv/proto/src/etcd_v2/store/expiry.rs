//! TTLs: when a node expires, nodes removed as their TTL runs out (an `expire` event each),
//! and purges (a dead run's keys, removed without an event).

use super::super::config::MAX_TTL_SECS;
use super::super::event::Action;
use super::super::key::{clean_key, last_name};
use super::super::node::{Kind, Node};
use super::V2Store;

/// When a node written at `now` (Unix ms) with `ttl` seconds expires, clamped to
/// [`MAX_TTL_SECS`].
pub(super) fn expires_at(ttl: Option<u64>, now: u64) -> Option<u64> {
    ttl.map(|t| now.saturating_add(t.min(MAX_TTL_SECS) * 1000))
}

impl V2Store {
    /// Removes every node whose TTL ran out by `now` (an `expire` event each).
    pub(super) fn expire(&mut self, now: u64) {
        while let Some((at, key)) = self.expiry.first().cloned() {
            if at > now {
                break;
            }
            self.expiry.remove(&(at, key.clone()));
            if self
                .lookup(&key)
                .ok()
                .flatten()
                .is_some_and(|n| n.expires == Some(at))
            {
                self.remove(&key, Action::Expire, None);
            }
        }
    }

    /// Removes `key` and its subtree without an event (a dead run's namespace); returns how
    /// many files went.
    pub(super) fn purge(&mut self, key: &str) -> usize {
        let key = clean_key(key);
        if key == "/" || !matches!(self.lookup(&key), Ok(Some(_))) {
            return 0;
        }
        let name = last_name(&key);
        let (parent, _) = self.parent_mut(&key, self.index).expect("present");
        let old = parent.remove(&name).expect("present");
        self.unexpire_subtree(&key, &old);
        self.bytes -= old.bytes(&name).min(self.bytes);
        fn files(n: &Node) -> usize {
            match &n.kind {
                Kind::File(_) => 1,
                Kind::Dir(c) => c.values().map(files).sum(),
            }
        }
        files(&old)
    }
}
