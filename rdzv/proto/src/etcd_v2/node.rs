//! The key tree: files and directories with their indexes and expiry, and the views of them
//! that responses and events carry.

use std::collections::BTreeMap;

/// One node of the tree.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub(crate) created: u64,
    pub(crate) modified: u64,
    /// Unix time in milliseconds at which the node expires; `None`: permanent.
    pub(crate) expires: Option<u64>,
    pub(crate) kind: Kind,
}

/// A file's value or a directory's children (ordered, so listings and purges are
/// deterministic).
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    File(String),
    Dir(BTreeMap<String, Node>),
}

impl Node {
    pub(crate) fn file(value: String, index: u64, expires: Option<u64>) -> Self {
        Self {
            created: index,
            modified: index,
            expires,
            kind: Kind::File(value),
        }
    }

    pub(crate) fn dir(index: u64, expires: Option<u64>) -> Self {
        Self {
            created: index,
            modified: index,
            expires,
            kind: Kind::Dir(BTreeMap::new()),
        }
    }

    pub(crate) fn is_dir(&self) -> bool {
        matches!(self.kind, Kind::Dir(_))
    }

    pub(crate) fn value(&self) -> Option<&str> {
        match &self.kind {
            Kind::File(v) => Some(v),
            Kind::Dir(_) => None,
        }
    }

    /// Bytes this node and its subtree hold (key names and values), for quotas.
    pub(crate) fn bytes(&self, name: &str) -> u64 {
        name.len() as u64
            + match &self.kind {
                Kind::File(v) => v.len() as u64,
                Kind::Dir(c) => c.iter().map(|(n, c)| c.bytes(n)).sum(),
            }
    }

    /// Bytes (key names and values) of this node's view listed to `depth` levels: what an
    /// answer showing it copies.
    pub(crate) fn view_bytes(&self, name: &str, depth: usize) -> u64 {
        name.len() as u64
            + match &self.kind {
                Kind::File(v) => v.len() as u64,
                Kind::Dir(c) if depth > 0 => {
                    c.iter().map(|(n, c)| c.view_bytes(n, depth - 1)).sum()
                }
                Kind::Dir(_) => 0,
            }
    }

    /// The view of this node at `key`: children listed to `depth` levels (0: none), expired
    /// ttl computed at `now_ms` (`None`: leave the ttl out, as etcd does for expired nodes).
    pub(crate) fn view(&self, key: &str, depth: usize, now_ms: Option<u64>) -> NodeView {
        let nodes = match &self.kind {
            Kind::Dir(children) if depth > 0 => {
                let listed: Vec<NodeView> = children
                    .iter()
                    .filter(|(name, _)| !name.starts_with('_'))
                    .map(|(name, child)| child.view(&join(key, name), depth - 1, now_ms))
                    .collect();
                (!listed.is_empty()).then_some(listed)
            }
            _ => None,
        };
        NodeView {
            key: Some(key.to_owned()),
            value: self.value().map(str::to_owned),
            dir: self.is_dir(),
            expiration_ms: self.expires,
            ttl: match (self.expires, now_ms) {
                (Some(at), Some(now)) => Some(at.saturating_sub(now).div_ceil(1000) as i64),
                _ => None,
            },
            modified: Some(self.modified),
            created: Some(self.created),
            nodes,
        }
    }
}

/// `dir/name` for a cleaned directory key (`/` for the root).
pub(crate) fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// A node as a response or an event shows it (etcd's `node` and `prevNode` objects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    /// The key (`None` for the root, which etcd shows without one).
    pub key: Option<String>,
    /// A file's value.
    pub value: Option<String>,
    /// Whether this is a directory.
    pub dir: bool,
    /// When the node expires, Unix milliseconds (`expiration` in RFC 3339).
    pub expiration_ms: Option<u64>,
    /// Seconds left before it expires, rounded up.
    pub ttl: Option<i64>,
    /// `modifiedIndex` (`None` for the root).
    pub modified: Option<u64>,
    /// `createdIndex` (`None` for the root).
    pub created: Option<u64>,
    /// A listed directory's children (`None` when not listed or empty).
    pub nodes: Option<Vec<NodeView>>,
}

impl NodeView {
    /// The node of a delete or expire event: key, indexes, and whether it was a directory.
    pub(crate) fn bare(key: &str, dir: bool, created: u64, modified: u64) -> Self {
        Self {
            key: Some(key.to_owned()),
            value: None,
            dir,
            expiration_ms: None,
            ttl: None,
            modified: Some(modified),
            created: Some(created),
            nodes: None,
        }
    }
}
