//! Frames: `b"DTRZ"`, protocol version (u16 LE), flags (u16 LE, zero), payload length
//! (u32 LE), then the rkyv archive of one message. Lengths are checked before the body is
//! awaited, and every archive is validated (bytecheck) before it is read.

use rkyv::rancor;
use rkyv::util::AlignedVec;

use super::messages::{ClientMsg, ServerMsg};

/// First four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"DTRZ";
/// The protocol version this build speaks.
pub const VERSION: u16 = 6;
/// Bytes before the payload.
pub const HEADER_LEN: usize = 12;
/// Default largest payload accepted (a status report of a few thousand members fits).
pub const DEFAULT_MAX_PAYLOAD: u32 = 16 << 20;
/// Largest payload a server accepts from a client: the largest legitimate client message is a
/// `Publish` of a 1 MiB configuration value or a `Lookup` of every rank of a large round,
/// both well under it. (Server-to-client frames keep [`DEFAULT_MAX_PAYLOAD`].)
pub const MAX_CLIENT_PAYLOAD: u32 = 2 << 20;
/// Largest payload a server accepts from a client it has not accepted yet (no good `Join`,
/// status or stop request so far): those requests are a few KiB, so a stranger cannot make
/// the server hold megabytes of a frame.
pub const MAX_UNADMITTED_PAYLOAD: u32 = 64 << 10;

/// Why bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The first bytes are not `DTRZ`: not our protocol.
    #[error("bad magic {0:02x?}: not a dt-rdzv native frame")]
    BadMagic([u8; 4]),
    /// The peer speaks another version.
    #[error("protocol version {got}, this side speaks {ours}")]
    Version {
        /// The peer's.
        got: u16,
        /// Ours.
        ours: u16,
    },
    /// Reserved flags were set.
    #[error("reserved flags 0x{0:04x} set")]
    Flags(u16),
    /// The length prefix is over the limit.
    #[error("frame of {len} bytes is over the {max}-byte limit")]
    TooLong {
        /// Announced length.
        len: u32,
        /// Limit.
        max: u32,
    },
    /// The payload is not a valid archive of the expected message.
    #[error("invalid message: {0}")]
    Invalid(String),
}

/// A frame header, once enough bytes are there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Payload bytes that follow.
    pub len: u32,
}

/// Reads a header from the first [`HEADER_LEN`] bytes of `buf` (`Ok(None)`: not enough bytes
/// yet). Checks magic, version, flags and length.
pub fn decode_header(buf: &[u8], max_payload: u32) -> Result<Option<Header>, CodecError> {
    // Check the magic on a partial header too, so garbage fails at its first bytes.
    let have = buf.len().min(4);
    if buf[..have] != MAGIC[..have] {
        let mut m = [0u8; 4];
        m[..have].copy_from_slice(&buf[..have]);
        return Err(CodecError::BadMagic(m));
    }
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let version = u16::from_le_bytes([buf[4], buf[5]]);
    if version != VERSION {
        return Err(CodecError::Version {
            got: version,
            ours: VERSION,
        });
    }
    let flags = u16::from_le_bytes([buf[6], buf[7]]);
    if flags != 0 {
        return Err(CodecError::Flags(flags));
    }
    let len = u32::from_le_bytes([buf[8], buf[9], buf[10], buf[11]]);
    if len > max_payload {
        return Err(CodecError::TooLong {
            len,
            max: max_payload,
        });
    }
    Ok(Some(Header { len }))
}

/// One complete frame at the start of `buf`: the payload range and the bytes used, or
/// `Ok(None)` if more bytes are needed.
pub fn split_frame(
    buf: &[u8],
    max_payload: u32,
) -> Result<Option<(std::ops::Range<usize>, usize)>, CodecError> {
    let Some(h) = decode_header(buf, max_payload)? else {
        return Ok(None);
    };
    let end = HEADER_LEN + h.len as usize;
    if buf.len() < end {
        return Ok(None);
    }
    Ok(Some((HEADER_LEN..end, end)))
}

fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// A client message as one frame.
pub fn encode_client(msg: &ClientMsg) -> Vec<u8> {
    // Serializing our own in-memory values cannot fail (no shared pointers, no limits).
    let bytes = rkyv::to_bytes::<rancor::Error>(msg).expect("rkyv serialize");
    frame(&bytes)
}

/// A server message as one frame.
pub fn encode_server(msg: &ServerMsg) -> Vec<u8> {
    let bytes = rkyv::to_bytes::<rancor::Error>(msg).expect("rkyv serialize");
    frame(&bytes)
}

fn aligned(payload: &[u8]) -> AlignedVec {
    let mut v = AlignedVec::with_capacity(payload.len());
    v.extend_from_slice(payload);
    v
}

/// Validates and reads a client message payload.
pub fn decode_client(payload: &[u8]) -> Result<ClientMsg, CodecError> {
    let v = aligned(payload);
    rkyv::from_bytes::<ClientMsg, rancor::Error>(&v).map_err(|e| CodecError::Invalid(e.to_string()))
}

/// Validates and reads a server message payload.
pub fn decode_server(payload: &[u8]) -> Result<ServerMsg, CodecError> {
    let v = aligned(payload);
    rkyv::from_bytes::<ServerMsg, rancor::Error>(&v).map_err(|e| CodecError::Invalid(e.to_string()))
}

/// An incremental reader of frames from a byte stream.
#[derive(Debug)]
pub struct FrameReader {
    buf: Vec<u8>,
    max_payload: u32,
}

impl FrameReader {
    /// A reader that refuses payloads over `max_payload` bytes.
    pub fn new(max_payload: u32) -> Self {
        Self {
            buf: Vec::new(),
            max_payload,
        }
    }

    /// Changes the largest payload accepted from the next frame on.
    pub fn set_max_payload(&mut self, max_payload: u32) {
        self.max_payload = max_payload;
    }

    /// Appends received bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes buffered but not yet a whole frame.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next complete payload, if any. After an error the stream is unusable.
    pub fn next_payload(&mut self) -> Result<Option<Vec<u8>>, CodecError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        match split_frame(&self.buf, self.max_payload)? {
            None => Ok(None),
            Some((range, used)) => {
                let payload = self.buf[range].to_vec();
                self.buf.drain(..used);
                Ok(Some(payload))
            }
        }
    }
}

#[cfg(test)]
mod tests;
