//! The opcodes of torch 2.15's `QueryType` enum.

/// The VALIDATE magic, sent little-endian (`ce f7 85 3c`).
pub const VALIDATE_MAGIC: u32 = 0x3C85_F7CE;

crate::wire_enum! {
    /// One byte at the start of every request.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum QueryType: u8 {
        /// Handshake: u32 magic, no reply.
        Validate = 0 => "VALIDATE",
        /// key, value; no reply.
        Set = 1 => "SET",
        /// key, expected, desired; replies bytes.
        CompareSet = 2 => "COMPARE_SET",
        /// key; replies bytes (empty if missing).
        Get = 3 => "GET",
        /// key, i64 delta; replies the new i64.
        Add = 4 => "ADD",
        /// n keys; replies READY / NOT_READY.
        Check = 5 => "CHECK",
        /// n keys; replies STOP_WAITING once every key exists.
        Wait = 6 => "WAIT",
        /// Replies the i64 number of KV keys.
        GetNumKeys = 7 => "GETNUMKEYS",
        /// key; replies i64 0 or 1.
        DeleteKey = 8 => "DELETE_KEY",
        /// key, value; no reply.
        Append = 9 => "APPEND",
        /// n keys; replies n values.
        MultiGet = 10 => "MULTI_GET",
        /// n (key, value) pairs; no reply.
        MultiSet = 11 => "MULTI_SET",
        /// Replies WAIT_CANCELED after dropping this connection's waits.
        CancelWait = 12 => "CANCEL_WAIT",
        /// u32 nonce; replies the nonce.
        Ping = 13 => "PING",
        /// key, value; no reply.
        QueuePush = 14 => "QUEUE_PUSH",
        /// key; replies i64 length before the pop, then the value if it was > 0.
        QueuePop = 15 => "QUEUE_POP",
        /// key; replies the i64 length.
        QueueLen = 16 => "QUEUE_LEN",
        /// Replies i64 n and n keys.
        ListKeys = 17 => "LIST_KEYS",
        /// key, i64 world size; replies STOP_WAITING when the count reaches it.
        Barrier = 18 => "BARRIER",
    }
    /// Every opcode, in wire order.
    pub const ALL;
    /// Upper-case name as torch's enum spells it, for logs and metrics.
    pub const fn name;
    /// The opcode for a wire byte, if it is one.
    pub const fn from_byte(code);
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

    #[test]
    fn table_round_trips() {
        let mut codes = std::collections::HashSet::new();
        assert_eq!(QueryType::SPELLINGS.len(), QueryType::ALL.len());
        for (&(q, spellings), all) in QueryType::SPELLINGS.iter().zip(QueryType::ALL) {
            assert_eq!(q, all);
            assert!(codes.insert(q as u8), "{q:?}: code {} twice", q as u8);
            assert_eq!(QueryType::from_byte(q as u8), Some(q));
            assert_eq!(spellings, [q.name()]);
            assert_eq!(q.to_string(), q.name());
        }
        assert_eq!(
            (QueryType::Validate.name(), QueryType::GetNumKeys.name()),
            ("VALIDATE", "GETNUMKEYS")
        );
    }
}
