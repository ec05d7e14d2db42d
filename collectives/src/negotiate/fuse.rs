//! Tensor fusion: ready allreduces of the same dtype, op, scale factors and device become one
//! operation over a fusion buffer, up to a threshold of bytes.

use super::request::{Kind, Request, Response};

/// Horovod's default `HOROVOD_FUSION_THRESHOLD`: 128 MiB.
pub const DEFAULT_FUSION_THRESHOLD: u64 = 128 << 20;

fn compatible(a: &Request, b: &Request) -> bool {
    a.kind == Kind::Allreduce
        && b.kind == Kind::Allreduce
        && a.dtype == b.dtype
        && a.op == b.op
        && a.device == b.device
        && a.prescale.to_bits() == b.prescale.to_bits()
        && a.postscale.to_bits() == b.postscale.to_bits()
}

/// Turns ready, checked requests (rank 0's copy of each, in the order they became ready) into
/// responses: each allreduce takes the later compatible ones that still fit under `threshold`
/// bytes (0: no fusion); other kinds run alone. Order is kept otherwise.
pub fn fuse(ready: &[&Request], threshold: u64) -> Vec<Response> {
    let mut taken = vec![false; ready.len()];
    let mut out = Vec::new();
    for i in 0..ready.len() {
        if taken[i] {
            continue;
        }
        taken[i] = true;
        let head = ready[i];
        let mut names = vec![head.name.clone()];
        let mut bytes = head.bytes();
        if head.kind == Kind::Allreduce && threshold > 0 {
            for j in i + 1..ready.len() {
                if !taken[j] && compatible(head, ready[j]) && bytes + ready[j].bytes() <= threshold
                {
                    taken[j] = true;
                    names.push(ready[j].name.clone());
                    bytes += ready[j].bytes();
                }
            }
        }
        out.push(Response::Run {
            kind: head.kind,
            names,
            bytes,
            elements: Vec::new(),
            head: Some(head.clone()),
        });
    }
    out
}
