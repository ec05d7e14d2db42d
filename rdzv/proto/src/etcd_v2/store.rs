//! [`V2Store`]: etcd's v2 key tree with its global index, TTLs, event history and watches,
//! behaving as etcd 3.4's `v2store` does for every request the v2 keys API maps onto it.
//! No clocks: every call takes the time (Unix milliseconds).

use std::collections::{BTreeMap, BTreeSet};

use super::error::{ErrorCode, V2Error};
use super::event::{Action, Event};
use super::node::{Kind, Node, NodeView, join};
use super::request::{DeleteOpts, PutOpts};
use super::watch::{Delivery, WatchId, Watches};

/// Bounds on what clients can make the store hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest key, bytes.
    pub max_key_bytes: usize,
    /// Most path components in a key: views and their JSON nest once per level, on a
    /// worker's stack (torch's deepest layout has 7).
    pub max_key_depth: usize,
    /// Largest value, bytes (etcd's request limit is 1.5 MiB).
    pub max_value_bytes: usize,
    /// Keys and values the whole store may hold, bytes (0: no limit).
    pub max_bytes: u64,
    /// Watches pending at once.
    pub max_watches: usize,
    /// Most bytes of keys and values one recursive read may answer with: the answer is built
    /// (and copied into JSON) while the store waits, so a read of a 450 MB tree would cost
    /// several times that and stall every other client. A larger read is refused, naming its
    /// size; torch's layouts read single keys or small directories.
    pub max_answer_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_key_bytes: 8 << 10,
            max_key_depth: 128,
            max_value_bytes: 3 << 19,
            max_bytes: 1 << 30,
            max_watches: 65536,
            max_answer_bytes: 64 << 20,
        }
    }
}

/// What a watch request gets: an event already in the history, or a pending watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchStart {
    /// The event to answer with now.
    Ready(Box<Event>),
    /// Wait for [`V2Store::take_deliveries`] to name this watch.
    Pending(WatchId),
}

/// The v2 key tree.
#[derive(Debug)]
pub struct V2Store {
    root: Node,
    index: u64,
    watches: Watches,
    /// (expiry in Unix ms, key) of every node with a TTL.
    expiry: BTreeSet<(u64, String)>,
    bytes: u64,
    limits: Limits,
}

/// Go's `path.Clean("/" + key)`: one leading slash, no empty, `.` or `..` components.
pub fn clean_key(key: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in key.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

fn components(key: &str) -> Vec<&str> {
    key.split('/').filter(|c| !c.is_empty()).collect()
}

/// The longest TTL kept, seconds (100 years): a longer one is clamped to it, so that every
/// expiry is a date etcd's RFC 3339 `expiration` can show.
pub const MAX_TTL_SECS: u64 = 100 * 365 * 24 * 3600;

fn expires_at(ttl: Option<u64>, now: u64) -> Option<u64> {
    ttl.map(|t| now.saturating_add(t.min(MAX_TTL_SECS) * 1000))
}

impl V2Store {
    /// An empty store at index 0.
    pub fn new(limits: Limits) -> Self {
        Self {
            root: Node::dir(0, None),
            index: 0,
            watches: Watches::default(),
            expiry: BTreeSet::new(),
            bytes: 0,
            limits,
        }
    }

    /// The current index (`X-Etcd-Index`).
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Bytes of keys and values held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Bytes the event history holds (bounded by [`super::watch::HISTORY_BYTES`]).
    pub fn history_bytes(&self) -> u64 {
        self.watches.history_bytes()
    }

    /// Watches waiting.
    pub fn pending_watches(&self) -> usize {
        self.watches.pending()
    }

    /// The earliest TTL deadline (Unix ms), for the driver's timer.
    pub fn next_expiry(&self) -> Option<u64> {
        self.expiry.first().map(|(at, _)| *at)
    }

    /// Events for pending watches produced since the last call.
    pub fn take_deliveries(&mut self) -> Vec<Delivery> {
        self.watches.take()
    }

    /// Forgets a pending watch (its client went away).
    pub fn cancel(&mut self, id: WatchId) -> bool {
        self.watches.cancel(id)
    }

    fn lookup(&self, key: &str) -> Result<Option<&Node>, V2Error> {
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

    fn lookup_mut(&mut self, key: &str) -> Option<&mut Node> {
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
    fn parent_mut(
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

    fn err(&self, code: ErrorCode, cause: impl Into<String>) -> V2Error {
        V2Error::new(code, cause, self.index)
    }

    fn check_sizes(&self, key: &str, value: Option<&str>) -> Result<(), V2Error> {
        let depth = components(key).len();
        if depth > self.limits.max_key_depth {
            return Err(V2Error::request(
                ErrorCode::InvalidField,
                format!(
                    "key has {depth} levels; the limit is {}",
                    self.limits.max_key_depth
                ),
            ));
        }
        if key.len() > self.limits.max_key_bytes {
            return Err(V2Error::request(
                ErrorCode::InvalidField,
                format!(
                    "key is {} bytes; the limit is {}",
                    key.len(),
                    self.limits.max_key_bytes
                ),
            ));
        }
        if let Some(v) = value.filter(|v| v.len() > self.limits.max_value_bytes) {
            return Err(V2Error::request(
                ErrorCode::InvalidField,
                format!(
                    "value is {} bytes; the limit is {}",
                    v.len(),
                    self.limits.max_value_bytes
                ),
            ));
        }
        Ok(())
    }

    fn check_quota(&self, adding: u64) -> Result<(), V2Error> {
        if self.limits.max_bytes > 0 && self.bytes + adding > self.limits.max_bytes {
            return Err(self.err(
                ErrorCode::RaftInternal,
                format!(
                    "the store holds {} bytes; its limit is {} (delete keys, or raise --max-namespace-bytes)",
                    self.bytes, self.limits.max_bytes
                ),
            ));
        }
        Ok(())
    }

    fn unexpire_subtree(&mut self, key: &str, node: &Node) {
        if let Some(at) = node.expires {
            self.expiry.remove(&(at, key.to_owned()));
        }
        if let Kind::Dir(children) = &node.kind {
            for (name, child) in children {
                self.unexpire_subtree(&join(key, name), child);
            }
        }
    }

    /// Reads a key (`recursive`: the whole subtree; otherwise one level of a directory).
    pub fn get(&mut self, key: &str, recursive: bool, now: u64) -> Result<Event, V2Error> {
        self.expire(now);
        let key = clean_key(key);
        let depth = if recursive { usize::MAX } else { 1 };
        let node = self
            .lookup(&key)?
            .ok_or_else(|| self.err(ErrorCode::KeyNotFound, key.clone()))?;
        {
            let size = node.view_bytes(&key, depth);
            if size > self.limits.max_answer_bytes {
                return Err(V2Error::request(
                    ErrorCode::InvalidField,
                    format!(
                        "a read of {key} would answer with {size} bytes; the limit is {} (read \
                         its children one by one, or a smaller subtree)",
                        self.limits.max_answer_bytes
                    ),
                ));
            }
        }
        let mut view = node.view(&key, depth, Some(now));
        if key == "/" {
            view = NodeView {
                key: None,
                modified: None,
                created: None,
                expiration_ms: None,
                ttl: None,
                ..view
            };
        }
        Ok(Event {
            action: Action::Get,
            node: view,
            prev: None,
            index: self.index,
        })
    }

    /// Starts a watch: the first kept event at or after `wait_index` that it sees, or a
    /// pending watch for the next one (after the current index without `wait_index`).
    pub fn watch(
        &mut self,
        key: &str,
        recursive: bool,
        wait_index: Option<u64>,
        now: u64,
    ) -> Result<WatchStart, V2Error> {
        self.expire(now);
        let key = clean_key(key);
        let since = match wait_index {
            Some(i) if i > 0 => {
                if let Some(e) = self.watches.scan(&key, recursive, i, self.index)? {
                    return Ok(WatchStart::Ready(Box::new(Event {
                        index: self.index,
                        ..e
                    })));
                }
                i
            }
            _ => self.index + 1,
        };
        if self.watches.pending() >= self.limits.max_watches {
            return Err(self.err(
                ErrorCode::RaftInternal,
                format!(
                    "{} watches are pending; the limit is {}",
                    self.watches.pending(),
                    self.limits.max_watches
                ),
            ));
        }
        Ok(WatchStart::Pending(self.watches.add(key, recursive, since)))
    }

    /// A PUT, as etcd's v2 API maps its conditions: `prevExist=false` creates,
    /// `prevExist=true` updates, `prevValue`/`prevIndex` compare and swap, nothing sets.
    pub fn put(&mut self, key: &str, opts: &PutOpts, now: u64) -> Result<Event, V2Error> {
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
    pub fn post(&mut self, dir_key: &str, opts: &PutOpts, now: u64) -> Result<Event, V2Error> {
        self.expire(now);
        let dir_key = clean_key(dir_key);
        let key = join(&dir_key, &format!("{:020}", self.index + 1));
        self.check_sizes(&key, opts.value.as_deref())?;
        self.create(&key, opts, now)
    }

    fn new_node(&self, opts: &PutOpts, index: u64, now: u64) -> Node {
        let expires = expires_at(opts.ttl, now);
        if opts.dir {
            Node::dir(index, expires)
        } else {
            Node::file(opts.value.clone().unwrap_or_default(), index, expires)
        }
    }

    fn insert(
        &mut self,
        key: &str,
        node: Node,
        now: u64,
        action: Action,
        prev: Option<NodeView>,
    ) -> Result<Event, V2Error> {
        let name = components(key)
            .last()
            .map(|c| (*c).to_owned())
            .unwrap_or_default();
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

    fn set(&mut self, key: &str, opts: &PutOpts, now: u64) -> Result<Event, V2Error> {
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

    fn create(&mut self, key: &str, opts: &PutOpts, now: u64) -> Result<Event, V2Error> {
        if self.lookup(key)?.is_some() {
            return Err(self.err(ErrorCode::NodeExist, key));
        }
        let node = self.new_node(opts, self.index + 1, now);
        self.insert(key, node, now, Action::Create, None)
    }

    /// Update (`compare: None`) or compare-and-swap: new value (kept on refresh) and TTL,
    /// same `createdIndex`.
    fn update(
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

    fn compare(
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
    pub fn delete(&mut self, key: &str, opts: &DeleteOpts, now: u64) -> Result<Event, V2Error> {
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

    /// Removes `key` (present) at a new index and records the event. `now: None` leaves the
    /// TTL out of the previous node (an expiry).
    fn remove(&mut self, key: &str, action: Action, now: Option<u64>) -> Event {
        let comps = components(key);
        let name = comps.last().map(|c| (*c).to_owned()).unwrap_or_default();
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

    /// Removes every node whose TTL ran out by `now` (an `expire` event each).
    pub fn expire(&mut self, now: u64) {
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
    pub fn purge(&mut self, key: &str) -> usize {
        let key = clean_key(key);
        if key == "/" || !matches!(self.lookup(&key), Ok(Some(_))) {
            return 0;
        }
        let name = components(&key)
            .last()
            .map(|c| (*c).to_owned())
            .unwrap_or_default();
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

    /// The names directly under directory `key` (empty if it is missing or a file).
    pub fn children(&self, key: &str) -> Vec<String> {
        match self.lookup(&clean_key(key)) {
            Ok(Some(Node {
                kind: Kind::Dir(c), ..
            })) => c.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// Whether `key` exists.
    pub fn exists(&self, key: &str) -> bool {
        matches!(self.lookup(&clean_key(key)), Ok(Some(_)))
    }
}
