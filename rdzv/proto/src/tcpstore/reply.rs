//! Replies, for clients: what shape each request's answer has, and an incremental decoder.
//!
//! The protocol's replies carry no tag; a client knows what to read from the request it sent.

use super::request::Request;

/// What a request's reply looks like on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyShape {
    /// No reply (SET, APPEND, MULTI_SET, QUEUE_PUSH, VALIDATE).
    Nothing,
    /// u64 length + bytes (GET, COMPARE_SET).
    Bytes,
    /// i64 (ADD, GETNUMKEYS, DELETE_KEY, QUEUE_LEN).
    I64,
    /// one byte (CHECK, WAIT, CANCEL_WAIT, BARRIER).
    Byte,
    /// u32 (PING).
    U32,
    /// n × (u64 length + bytes) (MULTI_GET).
    ManyBytes(usize),
    /// i64 length before the pop, then bytes if it was > 0 (QUEUE_POP).
    QueuePop,
    /// i64 n, then n × (u64 length + bytes) (LIST_KEYS).
    KeyList,
}

/// A decoded reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// For [`ReplyShape::Nothing`].
    Nothing,
    /// A value.
    Bytes(Vec<u8>),
    /// An integer.
    I64(i64),
    /// A status byte.
    Byte(u8),
    /// A PING nonce.
    U32(u32),
    /// MULTI_GET's values, in request order.
    ManyBytes(Vec<Vec<u8>>),
    /// QUEUE_POP: `None` when the queue was empty.
    QueuePop(Option<Vec<u8>>),
    /// LIST_KEYS' raw keys.
    KeyList(Vec<Vec<u8>>),
}

/// A reply that cannot be right.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// A length or count beyond what a client accepts.
    #[error("reply announces {0} bytes or items, more than a client accepts")]
    TooLarge(u64),
}

/// The most bytes or items a client accepts in one reply field (guards allocations).
const MAX_REPLY_FIELD: u64 = 1 << 30;

impl Request {
    /// The shape of the reply to this request.
    pub fn reply_shape(&self) -> ReplyShape {
        match self {
            Request::Validate { .. }
            | Request::Set { .. }
            | Request::Append { .. }
            | Request::MultiSet { .. }
            | Request::QueuePush { .. } => ReplyShape::Nothing,
            Request::Get { .. } | Request::CompareSet { .. } => ReplyShape::Bytes,
            Request::Add { .. }
            | Request::GetNumKeys
            | Request::DeleteKey { .. }
            | Request::QueueLen { .. } => ReplyShape::I64,
            Request::Check { .. }
            | Request::Wait { .. }
            | Request::CancelWait
            | Request::Barrier { .. } => ReplyShape::Byte,
            Request::Ping { .. } => ReplyShape::U32,
            Request::MultiGet { keys } => ReplyShape::ManyBytes(keys.len()),
            Request::QueuePop { .. } => ReplyShape::QueuePop,
            Request::ListKeys => ReplyShape::KeyList,
        }
    }
}

struct R<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl R<'_> {
    fn take(&mut self, n: u64) -> Result<Option<&[u8]>, ReplyError> {
        if n > MAX_REPLY_FIELD {
            return Err(ReplyError::TooLarge(n));
        }
        let end = self.pos + n as usize;
        if end > self.buf.len() {
            return Ok(None);
        }
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(Some(s))
    }
    fn u64(&mut self) -> Result<Option<u64>, ReplyError> {
        Ok(self
            .take(8)?
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))))
    }
    fn bytes(&mut self) -> Result<Option<Vec<u8>>, ReplyError> {
        let Some(n) = self.u64()? else {
            return Ok(None);
        };
        Ok(self.take(n)?.map(<[u8]>::to_vec))
    }
}

macro_rules! ready {
    ($e:expr) => {
        match $e? {
            Some(v) => v,
            None => return Ok(None),
        }
    };
}

/// Decodes one reply of `shape` from the front of `buf`: `Ok(None)` if more bytes are needed,
/// else the reply and the number of bytes it took.
pub fn decode_reply(shape: ReplyShape, buf: &[u8]) -> Result<Option<(Reply, usize)>, ReplyError> {
    let mut r = R { buf, pos: 0 };
    let reply = match shape {
        ReplyShape::Nothing => Reply::Nothing,
        ReplyShape::Bytes => Reply::Bytes(ready!(r.bytes())),
        ReplyShape::I64 => Reply::I64(ready!(r.u64()) as i64),
        ReplyShape::Byte => Reply::Byte(ready!(r.take(1))[0]),
        ReplyShape::U32 => Reply::U32(u32::from_le_bytes(
            ready!(r.take(4)).try_into().expect("4 bytes"),
        )),
        ReplyShape::ManyBytes(n) => {
            let mut v = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                v.push(ready!(r.bytes()));
            }
            Reply::ManyBytes(v)
        }
        ReplyShape::QueuePop => {
            let len = ready!(r.u64()) as i64;
            if len > 0 {
                Reply::QueuePop(Some(ready!(r.bytes())))
            } else {
                Reply::QueuePop(None)
            }
        }
        ReplyShape::KeyList => {
            let n = ready!(r.u64());
            if n > MAX_REPLY_FIELD {
                return Err(ReplyError::TooLarge(n));
            }
            let mut v = Vec::with_capacity((n as usize).min(1024));
            for _ in 0..n {
                v.push(ready!(r.bytes()));
            }
            Reply::KeyList(v)
        }
    };
    Ok(Some((reply, r.pos)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_each_shape_and_waits_for_bytes() {
        let mut b = 5u64.to_le_bytes().to_vec();
        b.extend_from_slice(b"newer");
        assert_eq!(decode_reply(ReplyShape::Bytes, &b[..7]), Ok(None));
        assert_eq!(
            decode_reply(ReplyShape::Bytes, &b),
            Ok(Some((Reply::Bytes(b"newer".to_vec()), 13)))
        );
        assert_eq!(
            decode_reply(ReplyShape::QueuePop, &0u64.to_le_bytes()),
            Ok(Some((Reply::QueuePop(None), 8)))
        );
        assert_eq!(
            decode_reply(ReplyShape::Nothing, &[]),
            Ok(Some((Reply::Nothing, 0)))
        );
        assert!(decode_reply(ReplyShape::Bytes, &u64::MAX.to_le_bytes()).is_err());
    }
}
