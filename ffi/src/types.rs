//! The ABI's types and constants. Values never change meaning; new ones are appended. The
//! codes, dtypes and ops are the engine's own tags (checked by the tests below).

/// The result of every call: `DTCOMM_SUCCESS` or an error code.
pub type dtcomm_result_t = i32;
/// A communicator handle (0 is never valid).
pub type dtcomm_comm_t = u64;
/// A non-blocking call's handle (0 is never valid).
pub type dtcomm_request_t = u64;
/// An element type: `DTCOMM_FLOAT32`, ...
pub type dtcomm_dtype_t = i32;
/// A reduction: `DTCOMM_SUM`, ...
pub type dtcomm_op_t = i32;

/// The version of this ABI: bumped when a function's meaning or signature changes.
pub const DTCOMM_ABI_VERSION: i32 = 1;

/// Success.
pub const DTCOMM_SUCCESS: dtcomm_result_t = 0;
/// Bad arguments (null pointer, unknown dtype or op, a count that overflows, a buffer too small
/// for its counts, an unknown or freed handle, a request waited after it was freed). Nothing was
/// sent; the communicator stays usable.
pub const DTCOMM_INVALID_ARGUMENT: dtcomm_result_t = 1;
/// A deadline passed (the call's, or the timeout given to `dtcomm_wait`).
pub const DTCOMM_TIMEOUT: dtcomm_result_t = 2;
/// A peer vanished during the call.
pub const DTCOMM_PEER_LOST: dtcomm_result_t = 3;
/// Another rank failed and said so.
pub const DTCOMM_ABORTED: dtcomm_result_t = 4;
/// Ranks called different collectives, or the same one with different dtype, count or root.
pub const DTCOMM_MISMATCH: dtcomm_result_t = 5;
/// A peer sent bytes that are not a valid frame.
pub const DTCOMM_PROTOCOL: dtcomm_result_t = 6;
/// Building the communicator failed (environment, rendezvous, connect).
pub const DTCOMM_SETUP: dtcomm_result_t = 7;
/// An earlier call failed this communicator; destroy it.
pub const DTCOMM_FAILED: dtcomm_result_t = 8;
/// The communicator was shut down, or is used from a forked child.
pub const DTCOMM_SHUTDOWN: dtcomm_result_t = 9;
/// A bug in dtcomm (a panic caught at the boundary).
pub const DTCOMM_INTERNAL: dtcomm_result_t = 10;
/// A non-blocking call has not finished yet (`dtcomm_wait` with a timeout).
pub const DTCOMM_IN_PROGRESS: dtcomm_result_t = 11;
/// The membership service ended the communicator's round (a member was lost or left, the job
/// was stopped); build the next round's communicator.
pub const DTCOMM_ROUND_ENDED: dtcomm_result_t = 12;
/// A call on device buffers failed in CUDA or NCCL (the error text carries NCCL's code and
/// last-error text), or the ranks found no path for device buffers.
pub const DTCOMM_DEVICE: dtcomm_result_t = 13;
/// The call was interrupted on this rank (a signal handler of the embedding runtime asked to
/// stop while it waited); the communicator is failed and the peers were told.
pub const DTCOMM_INTERRUPTED: dtcomm_result_t = 14;

/// 32-bit IEEE float.
pub const DTCOMM_FLOAT32: dtcomm_dtype_t = 1;
/// 64-bit IEEE float.
pub const DTCOMM_FLOAT64: dtcomm_dtype_t = 2;
/// 16-bit IEEE float.
pub const DTCOMM_FLOAT16: dtcomm_dtype_t = 3;
/// bfloat16.
pub const DTCOMM_BFLOAT16: dtcomm_dtype_t = 4;
/// Signed 8-bit integer.
pub const DTCOMM_INT8: dtcomm_dtype_t = 5;
/// Unsigned 8-bit integer.
pub const DTCOMM_UINT8: dtcomm_dtype_t = 6;
/// Signed 32-bit integer.
pub const DTCOMM_INT32: dtcomm_dtype_t = 7;
/// Signed 64-bit integer.
pub const DTCOMM_INT64: dtcomm_dtype_t = 8;
/// Signed 16-bit integer.
pub const DTCOMM_INT16: dtcomm_dtype_t = 9;
/// Complex number of two 32-bit floats, real part first (C's `float _Complex`). No min/max.
pub const DTCOMM_COMPLEX64: dtcomm_dtype_t = 10;
/// Complex number of two 64-bit floats, real part first (C's `double _Complex`). No min/max.
pub const DTCOMM_COMPLEX128: dtcomm_dtype_t = 11;
/// Boolean, one byte holding 0 or 1: sum and max are a logical or, prod and min a logical and;
/// no mean.
pub const DTCOMM_BOOL: dtcomm_dtype_t = 12;

/// Sum (integers wrap).
pub const DTCOMM_SUM: dtcomm_op_t = 1;
/// Product (integers wrap).
pub const DTCOMM_PROD: dtcomm_op_t = 2;
/// Minimum.
pub const DTCOMM_MIN: dtcomm_op_t = 3;
/// Maximum.
pub const DTCOMM_MAX: dtcomm_op_t = 4;
/// Mean over ranks (integer division for integers).
pub const DTCOMM_AVG: dtcomm_op_t = 5;
/// Bitwise and (integer and bool types only).
pub const DTCOMM_BAND: dtcomm_op_t = 6;
/// Bitwise or (integer and bool types only).
pub const DTCOMM_BOR: dtcomm_op_t = 7;
/// Bitwise exclusive or (integer and bool types only).
pub const DTCOMM_BXOR: dtcomm_op_t = 8;

#[cfg(test)]
mod tests {
    use super::*;
    use dtcomm::{DType, ErrorCode, ReduceOp};

    #[test]
    fn constants_are_the_engines_tags() {
        let codes = [
            (DTCOMM_SUCCESS, ErrorCode::Ok),
            (DTCOMM_INVALID_ARGUMENT, ErrorCode::InvalidArgument),
            (DTCOMM_TIMEOUT, ErrorCode::Timeout),
            (DTCOMM_PEER_LOST, ErrorCode::PeerLost),
            (DTCOMM_ABORTED, ErrorCode::Aborted),
            (DTCOMM_MISMATCH, ErrorCode::Mismatch),
            (DTCOMM_PROTOCOL, ErrorCode::Protocol),
            (DTCOMM_SETUP, ErrorCode::Setup),
            (DTCOMM_FAILED, ErrorCode::Failed),
            (DTCOMM_SHUTDOWN, ErrorCode::Shutdown),
            (DTCOMM_INTERNAL, ErrorCode::Internal),
            (DTCOMM_ROUND_ENDED, ErrorCode::RoundEnded),
            (DTCOMM_DEVICE, ErrorCode::Device),
            (DTCOMM_INTERRUPTED, ErrorCode::Interrupted),
        ];
        for (c, e) in codes {
            assert_eq!(c, e as i32, "{e:?}");
        }
        let dtypes = [
            DTCOMM_FLOAT32,
            DTCOMM_FLOAT64,
            DTCOMM_FLOAT16,
            DTCOMM_BFLOAT16,
            DTCOMM_INT8,
            DTCOMM_UINT8,
            DTCOMM_INT32,
            DTCOMM_INT64,
            DTCOMM_INT16,
            DTCOMM_COMPLEX64,
            DTCOMM_COMPLEX128,
            DTCOMM_BOOL,
        ];
        assert_eq!(dtypes.len(), DType::ALL.len());
        for (c, d) in dtypes.iter().zip(DType::ALL) {
            assert_eq!(*c, d as i32, "{d:?}");
        }
        let ops = [
            DTCOMM_SUM,
            DTCOMM_PROD,
            DTCOMM_MIN,
            DTCOMM_MAX,
            DTCOMM_AVG,
            DTCOMM_BAND,
            DTCOMM_BOR,
            DTCOMM_BXOR,
        ];
        assert_eq!(ops.len(), ReduceOp::ALL.len());
        for (c, o) in ops.iter().zip(ReduceOp::ALL) {
            assert_eq!(*c, o as i32, "{o:?}");
        }
    }
}
