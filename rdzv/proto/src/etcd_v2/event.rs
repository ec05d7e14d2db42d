//! What a v2 request or a watch answers with: an action, the node, the node it replaced.

use super::node::NodeView;

/// etcd's `action` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// A read.
    Get,
    /// A PUT without conditions.
    Set,
    /// `prevExist=false`, or a POST (in-order key).
    Create,
    /// `prevExist=true` (also a refresh).
    Update,
    /// A PUT with `prevValue` or `prevIndex`.
    CompareAndSwap,
    /// A DELETE without conditions.
    Delete,
    /// A DELETE with `prevValue` or `prevIndex`.
    CompareAndDelete,
    /// A TTL ran out.
    Expire,
}

impl Action {
    /// The name etcd sends.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::Set => "set",
            Self::Create => "create",
            Self::Update => "update",
            Self::CompareAndSwap => "compareAndSwap",
            Self::Delete => "delete",
            Self::CompareAndDelete => "compareAndDelete",
            Self::Expire => "expire",
        }
    }

    /// Whether the event removed its node (and a directory's subtree).
    pub fn removes(self) -> bool {
        matches!(self, Self::Delete | Self::CompareAndDelete | Self::Expire)
    }
}

/// One answer: `{"action", "node", "prevNode"}` and the index for `X-Etcd-Index`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub action: Action,
    /// The node after it (a removed node: its key and indexes only).
    pub node: NodeView,
    /// The node before it, for writes that replaced or removed one.
    pub prev: Option<NodeView>,
    /// The store index the answer was made at (`X-Etcd-Index`).
    pub index: u64,
}

impl Event {
    /// The key the event is about.
    pub fn key(&self) -> &str {
        self.node.key.as_deref().unwrap_or("/")
    }

    /// The index of the change (a write's `modifiedIndex`).
    pub fn modified(&self) -> u64 {
        self.node.modified.unwrap_or(self.index)
    }

    /// A new (201) key: a create, or a set that replaced nothing.
    pub fn created_key(&self) -> bool {
        matches!(self.action, Action::Create) || (self.action == Action::Set && self.prev.is_none())
    }
}
