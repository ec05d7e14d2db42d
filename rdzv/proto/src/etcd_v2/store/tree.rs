//! Finding nodes in the key tree (creating missing directories on the way down) and removing
//! one (a delete or an expiry), and the limits a write is checked against: key length and
//! depth, value size, the store's byte quota.

use std::collections::BTreeMap;

use super::super::error::{ErrorCode, V2Error};
use super::super::event::{Action, Event};
use super::super::key::{components, last_name};
use super::super::node::{Kind, Node, NodeView, join};
use super::V2Store;

impl V2Store {
    pub(super) fn lookup(&self, key: &str) -> Result<Option<&Node>, V2Error> {
        let mut node = &self.root;
        let mut path = String::new();
        for c in components(key) {
            let Kind::Dir(children) = &node.kind else {
                return Err(self.err(ErrorCode::NotDir, path));
            };
            path = join(if path.is_empty() { "/" } else { &path }, c);
            match children.get(c) {
                Some(n) => node = n,
                None => return Ok(None),
            }
        }
        Ok(Some(node))
    }

    pub(super) fn lookup_mut(&mut self, key: &str) -> Option<&mut Node> {
        let mut node = &mut self.root;
        for c in components(key) {
            let Kind::Dir(children) = &mut node.kind else {
                return None;
            };
            node = children.get_mut(c)?;
        }
        Some(node)
    }

    /// The children map of `key`'s parent, creating missing directories at `index`, and the
    /// bytes those new directories' names add.
    pub(super) fn parent_mut(
        &mut self,
        key: &str,
        index: u64,
    ) -> Result<(&mut BTreeMap<String, Node>, u64), V2Error> {
        let comps = components(key);
        let mut node = &mut self.root;
        let mut path = String::from("/");
        let mut created = 0u64;
        let current = self.index;
        for c in &comps[..comps.len().saturating_sub(1)] {
            let Kind::Dir(children) = &mut node.kind else {
                return Err(V2Error::new(ErrorCode::NotDir, path, current));
            };
            path = join(&path, c);
            node = children.entry((*c).to_owned()).or_insert_with(|| {
                created += c.len() as u64;
                Node::dir(index, None)
            });
        }
        match &mut node.kind {
            Kind::Dir(children) => Ok((children, created)),
            Kind::File(_) => Err(V2Error::new(ErrorCode::NotDir, path, current)),
        }
    }

    pub(super) fn err(&self, code: ErrorCode, cause: impl Into<String>) -> V2Error {
        V2Error::new(code, cause, self.index)
    }

    pub(super) fn check_sizes(&self, key: &str, value: Option<&str>) -> Result<(), V2Error> {
        let depth = components(key).len();
        if depth > self.config.limits.max_key_depth {
            return Err(V2Error::request(
                ErrorCode::InvalidField,
                format!(
                    "key has {depth} levels; the limit is {}",
                    self.config.limits.max_key_depth
                ),
            ));
        }
        if key.len() > self.config.limits.max_key_bytes {
            return Err(V2Error::request(
                ErrorCode::InvalidField,
                format!(
                    "key is {} bytes; the limit is {}",
                    key.len(),
                    self.config.limits.max_key_bytes
                ),
            ));
        }
        if let Some(v) = value.filter(|v| v.len() > self.config.limits.max_value_bytes) {
            return Err(V2Error::request(
                ErrorCode::InvalidField,
                format!(
                    "value is {} bytes; the limit is {}",
                    v.len(),
                    self.config.limits.max_value_bytes
                ),
            ));
        }
        Ok(())
    }

    /// Whether holding `adding` bytes more stays within the byte budget, which counts keys and
    /// values, the run bookkeeping and the answers being sent.
    pub(super) fn check_quota(&self, adding: u64) -> Result<(), V2Error> {
        let held = self.held_bytes();
        if adding > 0
            && self.config.limits.max_bytes > 0
            && held + adding > self.config.limits.max_bytes
        {
            return Err(self.err(
                ErrorCode::RaftInternal,
                format!(
                    "the etcd v2 door holds {held} bytes (keys and values {}, run bookkeeping \
                     {}, answers being sent {}); its memory budget is {} (delete keys, or \
                     raise --max-store-bytes)",
                    self.bytes,
                    self.runs.bytes(),
                    self.answers_in_flight,
                    self.config.limits.max_bytes
                ),
            ));
        }
        if adding > 0
            && let Some((limit, elsewhere)) = self.server
            && held.saturating_add(elsewhere).saturating_add(adding) > limit
        {
            return Err(self.err(
                ErrorCode::RaftInternal,
                format!(
                    "the server's memory budget is spent: the etcd v2 door holds {held} bytes and \
                     the server's other doors {elsewhere}, of the {limit} bytes their data may \
                     hold (three quarters of --max-memory-bytes); this needs {adding} more"
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn unexpire_subtree(&mut self, key: &str, node: &Node) {
        if let Some(at) = node.expires {
            self.expiry.remove(&(at, key.to_owned()));
        }
        if let Kind::Dir(children) = &node.kind {
            for (name, child) in children {
                self.unexpire_subtree(&join(key, name), child);
            }
        }
    }

    /// Removes `key` (present) at a new index and records the event. `now: None` leaves the
    /// TTL out of the previous node (an expiry).
    pub(super) fn remove(&mut self, key: &str, action: Action, now: Option<u64>) -> Event {
        let name = last_name(key);
        let index = self.index + 1;
        let (parent, _) = self.parent_mut(key, index).expect("present");
        let old = parent.remove(&name).expect("present");
        self.unexpire_subtree(key, &old);
        self.bytes -= old.bytes(&name).min(self.bytes);
        self.index = index;
        let event = Event {
            action,
            node: NodeView::bare(key, old.is_dir(), old.created, index),
            prev: Some(old.view(key, 0, now)),
            index,
        };
        self.watches.record(event.clone());
        event
    }
}
