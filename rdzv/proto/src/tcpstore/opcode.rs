//! The opcodes of torch 2.15's `QueryType` enum.

/// The VALIDATE magic, sent little-endian (`ce f7 85 3c`).
pub const VALIDATE_MAGIC: u32 = 0x3C85_F7CE;

/// One byte at the start of every request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum QueryType {
    /// Handshake: u32 magic, no reply.
    Validate = 0,
    /// key, value; no reply.
    Set = 1,
    /// key, expected, desired; replies bytes.
    CompareSet = 2,
    /// key; replies bytes (empty if missing).
    Get = 3,
    /// key, i64 delta; replies the new i64.
    Add = 4,
    /// n keys; replies READY / NOT_READY.
    Check = 5,
    /// n keys; replies STOP_WAITING once every key exists.
    Wait = 6,
    /// Replies the i64 number of KV keys.
    GetNumKeys = 7,
    /// key; replies i64 0 or 1.
    DeleteKey = 8,
    /// key, value; no reply.
    Append = 9,
    /// n keys; replies n values.
    MultiGet = 10,
    /// n (key, value) pairs; no reply.
    MultiSet = 11,
    /// Replies WAIT_CANCELED after dropping this connection's waits.
    CancelWait = 12,
    /// u32 nonce; replies the nonce.
    Ping = 13,
    /// key, value; no reply.
    QueuePush = 14,
    /// key; replies i64 length before the pop, then the value if it was > 0.
    QueuePop = 15,
    /// key; replies the i64 length.
    QueueLen = 16,
    /// Replies i64 n and n keys.
    ListKeys = 17,
    /// key, i64 world size; replies STOP_WAITING when the count reaches it.
    Barrier = 18,
}

impl QueryType {
    /// Every opcode, in wire order.
    pub const ALL: [QueryType; 19] = [
        Self::Validate,
        Self::Set,
        Self::CompareSet,
        Self::Get,
        Self::Add,
        Self::Check,
        Self::Wait,
        Self::GetNumKeys,
        Self::DeleteKey,
        Self::Append,
        Self::MultiGet,
        Self::MultiSet,
        Self::CancelWait,
        Self::Ping,
        Self::QueuePush,
        Self::QueuePop,
        Self::QueueLen,
        Self::ListKeys,
        Self::Barrier,
    ];

    /// The opcode for a wire byte, if it is one.
    pub fn from_byte(b: u8) -> Option<Self> {
        Self::ALL.get(usize::from(b)).copied()
    }

    /// Upper-case name as torch's enum spells it, for logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Self::Validate => "VALIDATE",
            Self::Set => "SET",
            Self::CompareSet => "COMPARE_SET",
            Self::Get => "GET",
            Self::Add => "ADD",
            Self::Check => "CHECK",
            Self::Wait => "WAIT",
            Self::GetNumKeys => "GETNUMKEYS",
            Self::DeleteKey => "DELETE_KEY",
            Self::Append => "APPEND",
            Self::MultiGet => "MULTI_GET",
            Self::MultiSet => "MULTI_SET",
            Self::CancelWait => "CANCEL_WAIT",
            Self::Ping => "PING",
            Self::QueuePush => "QUEUE_PUSH",
            Self::QueuePop => "QUEUE_POP",
            Self::QueueLen => "QUEUE_LEN",
            Self::ListKeys => "LIST_KEYS",
            Self::Barrier => "BARRIER",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip() {
        for (i, q) in QueryType::ALL.iter().enumerate() {
            assert_eq!(*q as u8 as usize, i);
            assert_eq!(QueryType::from_byte(i as u8), Some(*q));
        }
        assert_eq!(QueryType::from_byte(19), None);
        assert_eq!(QueryType::from_byte(0x63), None);
        assert_eq!(VALIDATE_MAGIC.to_le_bytes(), [0xce, 0xf7, 0x85, 0x3c]);
    }
}
