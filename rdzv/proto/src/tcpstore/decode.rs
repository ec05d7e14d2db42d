//! The incremental request parser.
//!
//! [`decode`] looks at the bytes a connection has buffered and either returns one complete
//! request and how many bytes it used, says how many bytes must be buffered before it is worth
//! calling again, or rejects the stream. It keeps no state between calls, so a driver keeps one
//! buffer per connection and calls it whenever bytes arrive. Length prefixes are checked against
//! [`Limits`] as soon as they are readable, before the body arrives, so a peer cannot make the
//! server buffer more than one bounded frame.

use super::limits::Limits;
use super::opcode::QueryType;
use super::request::Request;

/// The result of looking at a connection's buffered bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A whole request, and the number of bytes it took.
    Complete(Request, usize),
    /// Not enough bytes yet: call again once at least `need` bytes are buffered in total.
    Incomplete {
        /// Total buffered bytes needed before the next attempt can make progress.
        need: usize,
    },
}

/// Why a stream was rejected. The protocol has no error frames: the server closes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The first byte is not an opcode torch 2.15 knows.
    #[error("unknown opcode 0x{0:02x}")]
    UnknownOpcode(u8),
    /// A key longer than the limit.
    #[error("{op} key of {len} bytes exceeds the {max}-byte limit")]
    KeyTooLong {
        /// The request's opcode name.
        op: &'static str,
        /// The announced length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// A value longer than the limit.
    #[error("{op} value of {len} bytes exceeds the {max}-byte limit")]
    ValueTooLong {
        /// The request's opcode name.
        op: &'static str,
        /// The announced length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// Too many keys in one request (or a negative MULTI_SET count).
    #[error("{op} with {count} keys exceeds the limit of {max}")]
    TooManyKeys {
        /// The request's opcode name.
        op: &'static str,
        /// The announced count, as sent.
        count: i128,
        /// The limit.
        max: u64,
    },
    /// The whole request would be larger than the frame limit.
    #[error("{op} request larger than the {max}-byte frame limit")]
    FrameTooLarge {
        /// The request's opcode name.
        op: &'static str,
        /// The limit.
        max: u64,
    },
}

enum Stop {
    Need(usize),
    Bad(DecodeError),
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    op: QueryType,
    limits: &'a Limits,
}

impl Cursor<'_> {
    fn take(&mut self, n: u64) -> Result<&[u8], Stop> {
        let end = (self.pos as u64).saturating_add(n);
        if end > self.limits.max_frame_bytes {
            return Err(Stop::Bad(DecodeError::FrameTooLarge {
                op: self.op.name(),
                max: self.limits.max_frame_bytes,
            }));
        }
        let end = end as usize;
        if end > self.buf.len() {
            return Err(Stop::Need(end));
        }
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32, Stop> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }

    fn u64(&mut self) -> Result<u64, Stop> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    fn i64(&mut self) -> Result<i64, Stop> {
        Ok(self.u64()? as i64)
    }

    fn key(&mut self) -> Result<Vec<u8>, Stop> {
        let len = self.u64()?;
        if len > self.limits.max_key_bytes {
            return Err(Stop::Bad(DecodeError::KeyTooLong {
                op: self.op.name(),
                len,
                max: self.limits.max_key_bytes,
            }));
        }
        Ok(self.take(len)?.to_vec())
    }

    fn value(&mut self) -> Result<Vec<u8>, Stop> {
        let len = self.u64()?;
        if len > self.limits.max_value_bytes {
            return Err(Stop::Bad(DecodeError::ValueTooLong {
                op: self.op.name(),
                len,
                max: self.limits.max_value_bytes,
            }));
        }
        Ok(self.take(len)?.to_vec())
    }

    fn count(&mut self, signed: bool) -> Result<usize, Stop> {
        let raw = self.u64()?;
        let as_sent = if signed {
            i128::from(raw as i64)
        } else {
            i128::from(raw)
        };
        if as_sent < 0 || as_sent > i128::from(self.limits.max_keys_per_request) {
            return Err(Stop::Bad(DecodeError::TooManyKeys {
                op: self.op.name(),
                count: as_sent,
                max: self.limits.max_keys_per_request,
            }));
        }
        Ok(as_sent as usize)
    }

    fn keys(&mut self) -> Result<Vec<Vec<u8>>, Stop> {
        let n = self.count(false)?;
        // Each key takes at least its 8-byte length, so `n` is bounded by what is buffered
        // before anything is allocated for it.
        let mut keys = Vec::with_capacity(n.min(self.buf.len() / 8 + 1));
        for _ in 0..n {
            keys.push(self.key()?);
        }
        Ok(keys)
    }
}

/// Decodes one request from the front of `buf`.
pub fn decode(buf: &[u8], limits: &Limits) -> Result<Decoded, DecodeError> {
    let Some(&first) = buf.first() else {
        return Ok(Decoded::Incomplete { need: 1 });
    };
    let op = QueryType::from_byte(first).ok_or(DecodeError::UnknownOpcode(first))?;
    let mut c = Cursor {
        buf,
        pos: 1,
        op,
        limits,
    };
    match body(&mut c) {
        Ok(req) => Ok(Decoded::Complete(req, c.pos)),
        Err(Stop::Need(need)) => Ok(Decoded::Incomplete { need }),
        Err(Stop::Bad(e)) => Err(e),
    }
}

fn body(c: &mut Cursor<'_>) -> Result<Request, Stop> {
    use QueryType as Q;
    Ok(match c.op {
        Q::Validate => Request::Validate { magic: c.u32()? },
        Q::Ping => Request::Ping { nonce: c.u32()? },
        Q::Set => Request::Set {
            key: c.key()?,
            value: c.value()?,
        },
        Q::Append => Request::Append {
            key: c.key()?,
            value: c.value()?,
        },
        Q::QueuePush => Request::QueuePush {
            key: c.key()?,
            value: c.value()?,
        },
        Q::CompareSet => Request::CompareSet {
            key: c.key()?,
            expected: c.value()?,
            desired: c.value()?,
        },
        Q::Get => Request::Get { key: c.key()? },
        Q::DeleteKey => Request::DeleteKey { key: c.key()? },
        Q::QueuePop => Request::QueuePop { key: c.key()? },
        Q::QueueLen => Request::QueueLen { key: c.key()? },
        Q::Add => Request::Add {
            key: c.key()?,
            delta: c.i64()?,
        },
        Q::Barrier => Request::Barrier {
            key: c.key()?,
            world_size: c.i64()?,
        },
        Q::Check => Request::Check { keys: c.keys()? },
        Q::Wait => Request::Wait { keys: c.keys()? },
        Q::MultiGet => Request::MultiGet { keys: c.keys()? },
        Q::MultiSet => {
            let n = c.count(true)?;
            let mut pairs = Vec::with_capacity(n.min(c.buf.len() / 16 + 1));
            for _ in 0..n {
                let k = c.key()?;
                let v = c.value()?;
                pairs.push((k, v));
            }
            Request::MultiSet { pairs }
        }
        Q::GetNumKeys => Request::GetNumKeys,
        Q::CancelWait => Request::CancelWait,
        Q::ListKeys => Request::ListKeys,
    })
}

#[cfg(test)]
mod tests;
