//! The Python arguments of a collective as the engine's: reduce-op codes, and numpy arrays or
//! torch tensors as exported buffers ([`Buf`]), checked for the access the call needs, for
//! presence on the root alone, and for matching dtypes; every error names the rank, the call
//! and the argument.

use std::sync::Arc;

use dtcomm::ReduceOp;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use super::communicator::PyCommunicator;
use crate::buffer::{Access, Buf};
use crate::errors::Ctx;

/// The reduce op numbered `v` (any Python int: one outside a byte is as unknown as 9).
pub(super) fn redop(rank: usize, op: &str, v: i64) -> PyResult<ReduceOp> {
    u8::try_from(v)
        .ok()
        .and_then(ReduceOp::from_u8)
        .ok_or_else(|| {
            let known: Vec<String> = ReduceOp::ALL
                .iter()
                .map(|o| format!("{o}={}", *o as u8))
                .collect();
            PyValueError::new_err(format!(
                "rank {rank}: {op}: unknown reduce op {v} ({})",
                known.join(", ")
            ))
        })
}

impl PyCommunicator {
    pub(super) fn buf(
        &self,
        obj: &Bound<'_, PyAny>,
        op: &str,
        arg: &str,
        access: Access,
    ) -> PyResult<Arc<Buf>> {
        let ctx = Ctx {
            rank: self.rank,
            op,
            arg,
        };
        Buf::extract(obj, access, &ctx).map(Arc::new)
    }

    /// The buffer only `root` must pass (gather's output, scatter's input): `None` elsewhere.
    pub(super) fn root_buf(
        &self,
        obj: Option<&Bound<'_, PyAny>>,
        root: usize,
        op: &str,
        arg: &str,
        access: Access,
    ) -> PyResult<Option<Arc<Buf>>> {
        match obj {
            Some(o) => Ok(Some(self.buf(o, op, arg, access)?)),
            None if self.rank == root => Err(PyValueError::new_err(format!(
                "rank {}: {op}: the root needs an {arg} buffer",
                self.rank
            ))),
            None => Ok(None),
        }
    }

    pub(super) fn same_dtype(&self, op: &str, a: &Buf, b: &Buf) -> PyResult<()> {
        if a.dtype != b.dtype {
            return Err(PyTypeError::new_err(format!(
                "rank {}: {op}: input is {} but output is {}",
                self.rank, a.dtype, b.dtype
            )));
        }
        Ok(())
    }
}
