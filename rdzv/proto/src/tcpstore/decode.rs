//! The incremental request parser.
//!
//! A [`Decoder`] looks at the bytes a connection has buffered (from the start of the request
//! under way) and either returns one complete request and how many bytes it used, says how many
//! bytes must be buffered before it is worth calling again, or rejects the stream. It keeps its
//! place in a partial frame (the fields already read, and where the next one starts), so a
//! request that arrives a byte at a time is read once, not again from its start on every byte.
//! Length prefixes are checked against [`Limits`] as soon as they are readable, before the body
//! arrives, so a peer cannot make the server buffer more than one bounded frame.
//!
//! [`decode`] is the same without the memory: one call on a whole buffer.

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

/// Decodes one request from the front of `buf` (a fresh [`Decoder`]'s first call).
pub fn decode(buf: &[u8], limits: &Limits) -> Result<Decoded, DecodeError> {
    Decoder::default().decode(buf, limits)
}

/// One connection's decoder: where it is in the request under way. See the module docs.
#[derive(Debug, Default)]
pub struct Decoder {
    partial: Option<Partial>,
}

/// A request read part of the way.
#[derive(Debug)]
struct Partial {
    op: QueryType,
    /// Bytes of the frame read into fields so far (the opcode included).
    pos: usize,
    /// Fixed fields read (integers, keys and values), in order.
    fields: Vec<Field>,
    /// A counted list's length, once read.
    count: Option<usize>,
    /// A counted list's items read: keys, or key and value alternately (MULTI_SET).
    items: Vec<Vec<u8>>,
    /// Bytes of keys and values in `fields` and `items`.
    held: usize,
}

#[derive(Debug)]
enum Field {
    Int(u64),
    Bytes(Vec<u8>),
}

/// What comes next in a frame.
#[derive(Debug, Clone, Copy)]
enum Kind {
    U32,
    U64,
    Key,
    Value,
    /// A list length (signed for MULTI_SET).
    Count {
        signed: bool,
    },
}

/// The fixed fields of each opcode, or `None` for a counted list.
fn fixed(op: QueryType) -> Option<&'static [Kind]> {
    use Kind::*;
    use QueryType as Q;
    Some(match op {
        Q::Validate | Q::Ping => &[U32],
        Q::Set | Q::Append | Q::QueuePush => &[Key, Value],
        Q::CompareSet => &[Key, Value, Value],
        Q::Get | Q::DeleteKey | Q::QueuePop | Q::QueueLen => &[Key],
        Q::Add | Q::Barrier => &[Key, U64],
        Q::GetNumKeys | Q::CancelWait | Q::ListKeys => &[],
        Q::Check | Q::Wait | Q::MultiGet | Q::MultiSet => return None,
    })
}

impl Partial {
    /// The next field to read, or `None` when the request is whole.
    fn next(&self) -> Option<Kind> {
        if let Some(kinds) = fixed(self.op) {
            return kinds.get(self.fields.len()).copied();
        }
        let pairs = self.op == QueryType::MultiSet;
        let Some(n) = self.count else {
            return Some(Kind::Count { signed: pairs });
        };
        let want = if pairs { 2 * n } else { n };
        if self.items.len() >= want {
            None
        } else if pairs && self.items.len() % 2 == 1 {
            Some(Kind::Value)
        } else {
            Some(Kind::Key)
        }
    }

    /// The whole request, from the fields read.
    fn finish(self) -> Request {
        use QueryType as Q;
        let mut f = self.fields.into_iter();
        let mut bytes = || match f.next() {
            Some(Field::Bytes(b)) => b,
            _ => unreachable!("the layout of fixed() puts bytes here"),
        };
        match self.op {
            Q::Check => Request::Check { keys: self.items },
            Q::Wait => Request::Wait { keys: self.items },
            Q::MultiGet => Request::MultiGet { keys: self.items },
            Q::MultiSet => {
                let mut it = self.items.into_iter();
                let mut pairs = Vec::with_capacity(it.len() / 2);
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    pairs.push((k, v));
                }
                Request::MultiSet { pairs }
            }
            Q::GetNumKeys => Request::GetNumKeys,
            Q::CancelWait => Request::CancelWait,
            Q::ListKeys => Request::ListKeys,
            Q::Set => Request::Set {
                key: bytes(),
                value: bytes(),
            },
            Q::Append => Request::Append {
                key: bytes(),
                value: bytes(),
            },
            Q::QueuePush => Request::QueuePush {
                key: bytes(),
                value: bytes(),
            },
            Q::CompareSet => Request::CompareSet {
                key: bytes(),
                expected: bytes(),
                desired: bytes(),
            },
            Q::Get => Request::Get { key: bytes() },
            Q::DeleteKey => Request::DeleteKey { key: bytes() },
            Q::QueuePop => Request::QueuePop { key: bytes() },
            Q::QueueLen => Request::QueueLen { key: bytes() },
            Q::Validate | Q::Ping | Q::Add | Q::Barrier => {
                let key = match self.op {
                    Q::Add | Q::Barrier => bytes(),
                    _ => Vec::new(),
                };
                let int = match f.next() {
                    Some(Field::Int(n)) => n,
                    _ => unreachable!("the layout of fixed() puts an integer here"),
                };
                match self.op {
                    Q::Validate => Request::Validate { magic: int as u32 },
                    Q::Ping => Request::Ping { nonce: int as u32 },
                    Q::Add => Request::Add {
                        key,
                        delta: int as i64,
                    },
                    _ => Request::Barrier {
                        key,
                        world_size: int as i64,
                    },
                }
            }
        }
    }
}

/// Why a field could not be read yet.
enum Stop {
    Need(usize),
    Bad(DecodeError),
}

impl Decoder {
    /// Decodes the request under way from `buf`, which holds the bytes from its start (the
    /// same bytes as the last call, and maybe more). After [`Decoded::Complete`] the driver
    /// drops the bytes used, and the next call starts a new request.
    pub fn decode(&mut self, buf: &[u8], limits: &Limits) -> Result<Decoded, DecodeError> {
        let p = match &mut self.partial {
            Some(p) => p,
            None => {
                let Some(&first) = buf.first() else {
                    return Ok(Decoded::Incomplete { need: 1 });
                };
                let op = QueryType::from_byte(first).ok_or(DecodeError::UnknownOpcode(first))?;
                self.partial.insert(Partial {
                    op,
                    pos: 1,
                    fields: Vec::new(),
                    count: None,
                    items: Vec::new(),
                    held: 0,
                })
            }
        };
        while let Some(kind) = p.next() {
            match read_field(p, kind, buf, limits) {
                Ok(()) => {}
                Err(Stop::Need(need)) => return Ok(Decoded::Incomplete { need }),
                Err(Stop::Bad(e)) => {
                    self.partial = None;
                    return Err(e);
                }
            }
        }
        let p = self.partial.take().expect("a request under way");
        let used = p.pos;
        Ok(Decoded::Complete(p.finish(), used))
    }

    /// Bytes of keys and values this decoder holds from the request under way (beside the
    /// driver's buffer).
    pub fn held_bytes(&self) -> usize {
        self.partial.as_ref().map_or(0, |p| p.held)
    }
}

/// Reads one field of `kind` at `p.pos`, or says why not yet.
fn read_field(p: &mut Partial, kind: Kind, buf: &[u8], limits: &Limits) -> Result<(), Stop> {
    let op = p.op.name();
    let span = |n: u64| -> Result<&[u8], Stop> {
        let end = (p.pos as u64).saturating_add(n);
        if end > limits.max_frame_bytes {
            return Err(Stop::Bad(DecodeError::FrameTooLarge {
                op,
                max: limits.max_frame_bytes,
            }));
        }
        if end > buf.len() as u64 {
            return Err(Stop::Need(end as usize));
        }
        Ok(&buf[p.pos..end as usize])
    };
    let int = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    match kind {
        Kind::U32 => {
            let b = span(4)?;
            let n = u32::from_le_bytes(b.try_into().expect("4 bytes"));
            p.fields.push(Field::Int(u64::from(n)));
            p.pos += 4;
        }
        Kind::U64 => {
            let n = int(span(8)?);
            p.fields.push(Field::Int(n));
            p.pos += 8;
        }
        Kind::Count { signed } => {
            let raw = int(span(8)?);
            let as_sent = if signed {
                i128::from(raw as i64)
            } else {
                i128::from(raw)
            };
            if as_sent < 0 || as_sent > i128::from(limits.max_keys_per_request) {
                return Err(Stop::Bad(DecodeError::TooManyKeys {
                    op,
                    count: as_sent,
                    max: limits.max_keys_per_request,
                }));
            }
            p.count = Some(as_sent as usize);
            p.pos += 8;
        }
        Kind::Key | Kind::Value => {
            let len = int(span(8)?);
            let is_key = matches!(kind, Kind::Key);
            let max = if is_key {
                limits.max_key_bytes
            } else {
                limits.max_value_bytes
            };
            if len > max {
                return Err(Stop::Bad(if is_key {
                    DecodeError::KeyTooLong { op, len, max }
                } else {
                    DecodeError::ValueTooLong { op, len, max }
                }));
            }
            let bytes = span(8 + len)?[8..].to_vec();
            p.pos += 8 + len as usize;
            p.held += bytes.len();
            if p.count.is_some() {
                p.items.push(bytes);
            } else {
                p.fields.push(Field::Bytes(bytes));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
