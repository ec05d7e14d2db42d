//! The data frame header. Every frame carries the call it belongs to (op, dtype, reduce op,
//! count, root, sequence number), so a receiver detects mismatched calls on the first frame.
//!
//! Layout (32 bytes, little endian): magic `DTC1` (u32), op (u8), dtype (u8), redop (u8,
//! 0 = none), flags (u8, 0), seq (u64), count (u64), root (u32, `u32::MAX` = none),
//! payload length (u32).

use crate::call::{CallDesc, OpKind};
use crate::dtype::DType;
use crate::op::ReduceOp;

pub(crate) const HEADER_LEN: usize = 32;
const MAGIC: u32 = u32::from_le_bytes(*b"DTC1");
/// Payload bytes per frame: large enough to amortise a header and a syscall, small enough that
/// the reduce staging buffer stays in L2 and sending, receiving and reducing overlap.
pub(crate) const FRAME_BYTES: usize = 256 << 10;

pub(crate) fn encode(call: &CallDesc, payload_len: usize) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    h[4] = call.op as u8;
    h[5] = call.dtype as u8;
    h[6] = call.redop.map_or(0, |r| r as u8);
    h[8..16].copy_from_slice(&call.seq.to_le_bytes());
    h[16..24].copy_from_slice(&call.count.to_le_bytes());
    let root = call.root.map_or(u32::MAX, |r| r as u32);
    h[24..28].copy_from_slice(&root.to_le_bytes());
    h[28..32].copy_from_slice(&(payload_len as u32).to_le_bytes());
    h
}

/// Decodes a header; the error says what is not a valid frame.
pub(crate) fn decode(h: &[u8; HEADER_LEN]) -> Result<(CallDesc, usize), String> {
    let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
    let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().expect("8 bytes"));
    if u32_at(0) != MAGIC {
        return Err(format!("bad frame magic {:02x?}", &h[0..4]));
    }
    let op = OpKind::from_u8(h[4]).ok_or_else(|| format!("unknown op {}", h[4]))?;
    let dtype = DType::from_u8(h[5]).ok_or_else(|| format!("unknown dtype {}", h[5]))?;
    if h[7] != 0 {
        return Err(format!("reserved flags 0x{:02x} set", h[7]));
    }
    let redop = match h[6] {
        0 => None,
        v => Some(ReduceOp::from_u8(v).ok_or_else(|| format!("unknown reduce op {v}"))?),
    };
    let root = match u32_at(24) {
        u32::MAX => None,
        r => Some(r as usize),
    };
    let call = CallDesc {
        op,
        dtype,
        redop,
        count: u64_at(16),
        root,
        seq: u64_at(8),
    };
    Ok((call, u32_at(28) as usize))
}

/// Splits a region of `bytes` bytes into frame payload ranges; always at least one frame (an
/// empty region still sends its header, which keeps the call check and the step structure).
pub(crate) fn split(bytes: usize) -> impl Iterator<Item = (usize, usize)> {
    let n = bytes.div_ceil(FRAME_BYTES).max(1);
    (0..n).map(move |j| (j * FRAME_BYTES, ((j + 1) * FRAME_BYTES).min(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip_and_split() {
        let call = CallDesc {
            op: OpKind::Broadcast,
            dtype: DType::BF16,
            redop: None,
            count: 1 << 40,
            root: Some(3),
            seq: 77,
        };
        let h = encode(&call, 1234);
        assert_eq!(decode(&h).unwrap(), (call, 1234));
        let mut bad = h;
        bad[0] = b'X';
        assert!(decode(&bad).unwrap_err().contains("magic"));
        let mut flagged = h;
        flagged[7] = 1;
        assert!(decode(&flagged).unwrap_err().contains("flags"));
        assert_eq!(split(0).collect::<Vec<_>>(), vec![(0, 0)]);
        assert_eq!(split(FRAME_BYTES + 1).count(), 2);
    }
}
