//! Validation of one name's requests across the ranks: what must agree, and an error message
//! that names the ranks that differ.

use super::request::{Kind, Request};

/// Checks the requests every rank submitted for one name (`requests[r]`: rank `r`'s);
/// `Err` holds the message every rank gets.
pub fn check(requests: &[&Request]) -> Result<(), String> {
    let Some(first) = requests.first() else {
        return Ok(());
    };
    let name = &first.name;
    if first.kind == Kind::Alltoall {
        for (rank, r) in requests.iter().enumerate() {
            let rows = r.shape.first().copied().unwrap_or(0);
            let world = requests.len() as u64;
            let bad = if r.splits.is_empty() {
                (world > 0 && rows % world != 0)
                    .then(|| format!("{rows} rows do not split equally over {world} ranks"))
            } else if r.splits.len() as u64 != world {
                Some(format!("{} splits for {world} ranks", r.splits.len()))
            } else if r.splits.iter().sum::<u64>() > rows {
                Some(format!(
                    "splits sum to {} but the tensor has {rows} rows",
                    r.splits.iter().sum::<u64>()
                ))
            } else {
                None
            };
            if let Some(why) = bad {
                return Err(format!("{name}: rank {rank}: {why}"));
            }
        }
    }
    for (rank, r) in requests.iter().enumerate().skip(1) {
        let differ = |what: &str, a: String, b: String| {
            Err(format!(
                "mismatched {what} for {name}: rank 0 submitted {a}, rank {rank} submitted {b}"
            ))
        };
        if r.kind != first.kind {
            return differ("operations", first.kind.name().into(), r.kind.name().into());
        }
        if r.dtype != first.dtype {
            return differ(
                "data types",
                first.dtype.name().into(),
                r.dtype.name().into(),
            );
        }
        if r.device != first.device {
            return differ("devices", first.device.to_string(), r.device.to_string());
        }
        match first.kind {
            Kind::Allreduce | Kind::Reducescatter | Kind::Broadcast => {
                if r.shape != first.shape {
                    return differ(
                        "shapes",
                        format!("{:?}", first.shape),
                        format!("{:?}", r.shape),
                    );
                }
            }
            Kind::Allgather | Kind::Alltoall => {
                if r.shape.len() != first.shape.len() || r.shape.get(1..) != first.shape.get(1..) {
                    return differ(
                        "shapes beyond the first dimension",
                        format!("{:?}", first.shape),
                        format!("{:?}", r.shape),
                    );
                }
            }
            Kind::Barrier | Kind::Join => {}
        }
        if r.root != first.root {
            return differ(
                "root ranks",
                format!("{:?}", first.root),
                format!("{:?}", r.root),
            );
        }
        if r.op != first.op {
            let op = |o: Option<crate::ReduceOp>| o.map_or("none", |o| o.name()).to_owned();
            return differ("reduction ops", op(first.op), op(r.op));
        }
        if r.prescale.to_bits() != first.prescale.to_bits() {
            return differ(
                "prescale factors",
                first.prescale.to_string(),
                r.prescale.to_string(),
            );
        }
        if r.postscale.to_bits() != first.postscale.to_bits() {
            return differ(
                "postscale factors",
                first.postscale.to_string(),
                r.postscale.to_string(),
            );
        }
    }
    if let Some(op) = first.op
        && matches!(first.kind, Kind::Allreduce | Kind::Reducescatter)
    {
        op.supports(first.dtype)
            .map_err(|why| format!("{name}: {why}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, ReduceOp};

    #[test]
    fn an_op_the_dtype_lacks_is_refused_for_every_rank() {
        let max = Request::allreduce("g", DType::C64, &[4], ReduceOp::Max);
        let e = check(&[&max, &max]).unwrap_err();
        assert!(
            e.contains("g:") && e.contains("max") && e.contains("complex64"),
            "{e}"
        );
        let sum = Request::allreduce("g", DType::C128, &[4], ReduceOp::Sum);
        assert_eq!(check(&[&sum, &sum]), Ok(()));
        let avg = Request::allreduce("b", DType::Bool, &[4], ReduceOp::Avg);
        assert!(check(&[&avg]).unwrap_err().contains("bool"));
    }
}
