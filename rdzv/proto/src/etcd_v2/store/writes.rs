//! Writes, as etcd's v2 API maps a request's conditions onto them: set, create, update,
//! refresh, compare-and-swap, in-order keys (POST), delete and compare-and-delete. Each
//! successful write takes the next index and records its event, finishing the watches it
//! matches (a refresh excepted).

use super::super::error::{ErrorCode, V2Error};
use super::super::event::{Action, Event};
use super::super::key::{clean_key, last_name};
use super::super::node::{Kind, Node, NodeView, join};
use super::super::request::{DeleteOpts, PutOpts};
use super::V2Store;
use super::expiry::expires_at;

impl V2Store {
    /// A PUT, as etcd's v2 API maps its conditions: `prevExist=false` creates,
    /// `prevExist=true` updates, `prevValue`/`prevIndex` compare and swap, nothing sets.
    pub(super) fn put(&mut self, key: &str, opts: &PutOpts, now: u64) -> Result<Event, V2Error> {
        self.expire(now);
        let key = clean_key(key);
        self.check_sizes(&key, opts.value.as_deref())?;
        if key == "/" {
            return Err(self.err(ErrorCode::RootReadOnly, "/"));
        }
        let cas = opts.prev_value.is_some() || opts.prev_index.is_some_and(|i| i > 0);
        match opts.prev_exist {
            Some(false) => self.create(&key, opts, now),
            Some(true) if !cas => self.update(&key, opts, now, None),
            _ if cas => self.update(&key, opts, now, Some((&opts.prev_value, opts.prev_index))),
            _ => self.set(&key, opts, now),
        }
    }

    /// A POST: a new key named by the next index under `dir_key` (in-order keys).
    pub(super) fn post(
        &mut self,
        dir_key: &str,
        opts: &PutOpts,
        now: u64,
    ) -> Result<Event, V2Error> {
        self.expire(now);
        let dir_key = clean_key(dir_key);
        let key = join(&dir_key, &format!("{:020}", self.index + 1));
        self.check_sizes(&key, opts.value.as_deref())?;
        self.create(&key, opts, now)
    }

    pub(super) fn new_node(&self, opts: &PutOpts, index: u64, now: u64) -> Node {
        let expires = expires_at(opts.ttl, now);
        if opts.dir {
            Node::dir(index, expires)
        } else {
            Node::file(opts.value.clone().unwrap_or_default(), index, expires)
        }
    }

    pub(super) fn insert(
        &mut self,
        key: &str,
        node: Node,
        now: u64,
        action: Action,
        prev: Option<NodeView>,
    ) -> Result<Event, V2Error> {
        let name = last_name(key);
        self.check_quota(node.bytes(&name))?;
        let index = node.modified;
        let (parent, created) = self.parent_mut(key, index)?;
        let old = parent.insert(name.clone(), node);
        self.bytes += created;
        if let Some(old) = &old {
            self.unexpire_subtree(key, old);
            self.bytes -= old.bytes(&name).min(self.bytes);
        }
        let node = self.lookup(key).ok().flatten().expect("just inserted");
        let view = node.view(key, 0, Some(now));
        let added = node.bytes(&name);
        if let Some(at) = node.expires {
            self.expiry.insert((at, key.to_owned()));
        }
        self.bytes += added;
        self.index = index;
        let event = Event {
            action,
            node: view,
            prev,
            index,
        };
        self.watches.record(event.clone());
        Ok(event)
    }

    pub(super) fn set(&mut self, key: &str, opts: &PutOpts, now: u64) -> Result<Event, V2Error> {
        let prev = match self.lookup(key)? {
            Some(n) if n.is_dir() => return Err(self.err(ErrorCode::NotFile, key)),
            Some(n) => Some(n.view(key, 0, Some(now))),
            None => None,
        };
        if opts.refresh {
            if prev.is_none() {
                return Err(self.err(ErrorCode::KeyNotFound, key));
            }
            return self.update(key, opts, now, None);
        }
        let node = self.new_node(opts, self.index + 1, now);
        self.insert(key, node, now, Action::Set, prev)
    }

    pub(super) fn create(&mut self, key: &str, opts: &PutOpts, now: u64) -> Result<Event, V2Error> {
        if self.lookup(key)?.is_some() {
            return Err(self.err(ErrorCode::NodeExist, key));
        }
        let node = self.new_node(opts, self.index + 1, now);
        self.insert(key, node, now, Action::Create, None)
    }

    /// Update (`compare: None`) or compare-and-swap: new value (kept on refresh) and TTL,
    /// same `createdIndex`.
    pub(super) fn update(
        &mut self,
        key: &str,
        opts: &PutOpts,
        now: u64,
        compare: Option<(&Option<String>, Option<u64>)>,
    ) -> Result<Event, V2Error> {
        let node = self
            .lookup(key)?
            .ok_or_else(|| self.err(ErrorCode::KeyNotFound, key))?;
        if node.is_dir()
            && (compare.is_some() || opts.value.as_deref().is_some_and(|v| !v.is_empty()))
        {
            return Err(self.err(ErrorCode::NotFile, key));
        }
        if let Some((prev_value, prev_index)) = compare {
            self.compare(node, prev_value.as_deref(), prev_index)?;
        }
        let prev = node.view(key, 0, Some(now));
        let old_bytes = node.value().map_or(0, str::len) as u64;
        let new_value = match (&node.kind, opts.refresh) {
            (Kind::File(v), true) => Some(v.clone()),
            (Kind::File(_), false) => Some(opts.value.clone().unwrap_or_default()),
            (Kind::Dir(_), _) => None,
        };
        let new_bytes = new_value.as_deref().map_or(0, str::len) as u64;
        self.check_quota(new_bytes.saturating_sub(old_bytes))?;
        let index = self.index + 1;
        let expires = expires_at(opts.ttl, now);
        let old_expires = node.expires;
        let node = self.lookup_mut(key).expect("looked up");
        node.expires = expires;
        // etcd writes a file's value and index; a directory keeps its modifiedIndex (its
        // write fails silently there), though the answer shows the new one.
        if let (Kind::File(v), Some(nv)) = (&mut node.kind, new_value) {
            *v = nv;
            node.modified = index;
        }
        let mut view = node.view(key, 0, Some(now));
        view.modified = Some(index);
        if let Some(at) = old_expires {
            self.expiry.remove(&(at, key.to_owned()));
        }
        if let Some(at) = expires {
            self.expiry.insert((at, key.to_owned()));
        }
        self.bytes = self.bytes + new_bytes - old_bytes.min(self.bytes + new_bytes);
        self.index = index;
        let event = Event {
            action: if compare.is_some() {
                Action::CompareAndSwap
            } else {
                Action::Update
            },
            node: view,
            prev: Some(prev),
            index,
        };
        // A refresh changes the TTL without telling watchers (etcd 2.3's `refresh`).
        if !opts.refresh {
            self.watches.record(event.clone());
        }
        Ok(event)
    }

    pub(super) fn compare(
        &self,
        node: &Node,
        prev_value: Option<&str>,
        prev_index: Option<u64>,
    ) -> Result<(), V2Error> {
        let mut causes = Vec::new();
        if let Some(pv) = prev_value
            && node.value() != Some(pv)
        {
            causes.push(format!("[{pv} != {}]", node.value().unwrap_or("")));
        }
        if let Some(pi) = prev_index.filter(|i| *i > 0)
            && node.modified != pi
        {
            causes.push(format!("[{pi} != {}]", node.modified));
        }
        if causes.is_empty() {
            Ok(())
        } else {
            Err(self.err(ErrorCode::TestFailed, causes.join(" ")))
        }
    }

    /// A DELETE: with `prevValue`/`prevIndex` compare-and-delete (files only), otherwise a
    /// delete (a directory needs `dir=true`, and `recursive=true` when it has children).
    pub(super) fn delete(
        &mut self,
        key: &str,
        opts: &DeleteOpts,
        now: u64,
    ) -> Result<Event, V2Error> {
        self.expire(now);
        let key = clean_key(key);
        if key == "/" {
            return Err(self.err(ErrorCode::RootReadOnly, "/"));
        }
        let node = self
            .lookup(&key)?
            .ok_or_else(|| self.err(ErrorCode::KeyNotFound, key.clone()))?;
        let cas = opts.prev_value.is_some() || opts.prev_index.is_some_and(|i| i > 0);
        if cas {
            if node.is_dir() {
                return Err(self.err(ErrorCode::NotFile, key));
            }
            self.compare(node, opts.prev_value.as_deref(), opts.prev_index)?;
        } else if let Kind::Dir(children) = &node.kind {
            if !opts.dir && !opts.recursive {
                return Err(self.err(ErrorCode::NotFile, key));
            }
            if !children.is_empty() && !opts.recursive {
                return Err(self.err(ErrorCode::DirNotEmpty, key));
            }
        }
        let action = if cas {
            Action::CompareAndDelete
        } else {
            Action::Delete
        };
        Ok(self.remove(&key, action, Some(now)))
    }
}
