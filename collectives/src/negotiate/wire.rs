//! What each rank contributes to a cycle: whether it is shutting down, whether it waited the
//! whole cycle time, and the requests it submitted since the last cycle, as bytes for one
//! all-gather.

use super::request::{Kind, Request};
use crate::{DType, ReduceOp};

const KINDS: [Kind; 7] = [
    Kind::Allreduce,
    Kind::Allgather,
    Kind::Broadcast,
    Kind::Alltoall,
    Kind::Reducescatter,
    Kind::Barrier,
    Kind::Join,
];

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A rank's state at a cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Flags {
    /// It is shutting down.
    pub stopping: bool,
    /// Whole cycle times it has not charged yet (`stall_clock.rs`): what the cycle counts
    /// toward the stall deadline, the largest of every rank's.
    pub charge: u32,
}

/// Encodes one rank's contribution.
pub(crate) fn encode(flags: Flags, requests: &[Request]) -> Vec<u8> {
    let mut out = vec![u8::from(flags.stopping)];
    out.extend_from_slice(&flags.charge.to_le_bytes());
    out.extend_from_slice(&(requests.len() as u32).to_le_bytes());
    for r in requests {
        put_str(&mut out, &r.name);
        out.push(KINDS.iter().position(|k| *k == r.kind).expect("known kind") as u8);
        put_str(&mut out, r.dtype.name());
        out.extend_from_slice(&(r.shape.len() as u32).to_le_bytes());
        for d in &r.shape {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&r.root.unwrap_or(u32::MAX).to_le_bytes());
        put_str(&mut out, r.op.map_or("", |o| o.name()));
        out.extend_from_slice(&r.prescale.to_bits().to_le_bytes());
        out.extend_from_slice(&r.postscale.to_bits().to_le_bytes());
        out.extend_from_slice(&r.device.to_le_bytes());
        out.extend_from_slice(&(r.splits.len() as u32).to_le_bytes());
        for v in &r.splits {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    out
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.0.len() < n {
            return Err("truncated negotiation message".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn str(&mut self) -> Result<String, String> {
        let n = self.u32()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| "a name is not UTF-8".into())
    }
}

/// Decodes one rank's contribution.
pub(crate) fn decode(bytes: &[u8]) -> Result<(Flags, Vec<Request>), String> {
    let mut r = Reader(bytes);
    let bits = r.take(1)?[0];
    if bits > 1 {
        return Err(format!("unknown cycle flags {bits:#x}"));
    }
    let flags = Flags {
        stopping: bits & 1 != 0,
        charge: r.u32()?,
    };
    let n = r.u32()?;
    let mut out = Vec::new();
    for _ in 0..n {
        let name = r.str()?;
        let kind = *KINDS
            .get(r.take(1)?[0] as usize)
            .ok_or("unknown operation kind")?;
        let dt = r.str()?;
        let dtype = DType::parse(&dt).ok_or_else(|| format!("unknown dtype {dt}"))?;
        let dims = r.u32()?;
        let shape = (0..dims).map(|_| r.u64()).collect::<Result<Vec<_>, _>>()?;
        let root = Some(r.u32()?).filter(|v| *v != u32::MAX);
        let op_name = r.str()?;
        let op = if op_name.is_empty() {
            None
        } else {
            Some(ReduceOp::parse(&op_name).ok_or_else(|| format!("unknown op {op_name}"))?)
        };
        let prescale = f64::from_bits(r.u64()?);
        let postscale = f64::from_bits(r.u64()?);
        let device = r.u32()? as i32;
        let nsplits = r.u32()?;
        let splits = (0..nsplits)
            .map(|_| r.u64())
            .collect::<Result<Vec<_>, _>>()?;
        out.push(Request {
            name,
            kind,
            dtype,
            shape,
            root,
            op,
            prescale,
            postscale,
            device,
            splits,
        });
    }
    Ok((flags, out))
}
