//! A decoded TCPStore request, and its encoding (what a client sends).

use super::opcode::QueryType;

/// One request, as the client sent it. Keys are raw wire keys (torch's client puts `/` in
/// front of user keys).
#[allow(missing_docs)] // the fields are named after the protocol note's columns
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Validate {
        magic: u32,
    },
    Set {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    CompareSet {
        key: Vec<u8>,
        expected: Vec<u8>,
        desired: Vec<u8>,
    },
    Get {
        key: Vec<u8>,
    },
    Add {
        key: Vec<u8>,
        delta: i64,
    },
    Check {
        keys: Vec<Vec<u8>>,
    },
    Wait {
        keys: Vec<Vec<u8>>,
    },
    GetNumKeys,
    DeleteKey {
        key: Vec<u8>,
    },
    Append {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    MultiGet {
        keys: Vec<Vec<u8>>,
    },
    MultiSet {
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
    },
    CancelWait,
    Ping {
        nonce: u32,
    },
    QueuePush {
        key: Vec<u8>,
        value: Vec<u8>,
    },
    QueuePop {
        key: Vec<u8>,
    },
    QueueLen {
        key: Vec<u8>,
    },
    ListKeys,
    Barrier {
        key: Vec<u8>,
        world_size: i64,
    },
}

impl Request {
    /// The opcode of this request.
    pub fn query_type(&self) -> QueryType {
        match self {
            Self::Validate { .. } => QueryType::Validate,
            Self::Set { .. } => QueryType::Set,
            Self::CompareSet { .. } => QueryType::CompareSet,
            Self::Get { .. } => QueryType::Get,
            Self::Add { .. } => QueryType::Add,
            Self::Check { .. } => QueryType::Check,
            Self::Wait { .. } => QueryType::Wait,
            Self::GetNumKeys => QueryType::GetNumKeys,
            Self::DeleteKey { .. } => QueryType::DeleteKey,
            Self::Append { .. } => QueryType::Append,
            Self::MultiGet { .. } => QueryType::MultiGet,
            Self::MultiSet { .. } => QueryType::MultiSet,
            Self::CancelWait => QueryType::CancelWait,
            Self::Ping { .. } => QueryType::Ping,
            Self::QueuePush { .. } => QueryType::QueuePush,
            Self::QueuePop { .. } => QueryType::QueuePop,
            Self::QueueLen { .. } => QueryType::QueueLen,
            Self::ListKeys => QueryType::ListKeys,
            Self::Barrier { .. } => QueryType::Barrier,
        }
    }

    /// Appends the wire form of this request to `out`, exactly as torch's client writes it.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.push(self.query_type() as u8);
        match self {
            Self::Validate { magic } => out.extend_from_slice(&magic.to_le_bytes()),
            Self::Ping { nonce } => out.extend_from_slice(&nonce.to_le_bytes()),
            Self::Set { key, value }
            | Self::Append { key, value }
            | Self::QueuePush { key, value } => {
                put_bytes(out, key);
                put_bytes(out, value);
            }
            Self::CompareSet {
                key,
                expected,
                desired,
            } => {
                put_bytes(out, key);
                put_bytes(out, expected);
                put_bytes(out, desired);
            }
            Self::Get { key }
            | Self::DeleteKey { key }
            | Self::QueuePop { key }
            | Self::QueueLen { key } => put_bytes(out, key),
            Self::Add { key, delta } => {
                put_bytes(out, key);
                out.extend_from_slice(&delta.to_le_bytes());
            }
            Self::Barrier { key, world_size } => {
                put_bytes(out, key);
                out.extend_from_slice(&world_size.to_le_bytes());
            }
            Self::Check { keys } | Self::Wait { keys } | Self::MultiGet { keys } => {
                out.extend_from_slice(&(keys.len() as u64).to_le_bytes());
                keys.iter().for_each(|k| put_bytes(out, k));
            }
            Self::MultiSet { pairs } => {
                out.extend_from_slice(&(pairs.len() as i64).to_le_bytes());
                for (k, v) in pairs {
                    put_bytes(out, k);
                    put_bytes(out, v);
                }
            }
            Self::GetNumKeys | Self::CancelWait | Self::ListKeys => {}
        }
    }

    /// The wire form of this request.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }
}

/// u64 little-endian length, then the bytes.
pub(crate) fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}
