//! A GPU, its streams and events: thin wrappers over cudarc's driver API.
//!
//! **Untested**: the test suite runs without a GPU, so nothing here has run. The only part
//! exercised is the refusal: [`Gpu::open`] asks the driver probe of
//! [`cuda_status`](super::cuda_status) first and returns [`GpuError::Unavailable`] instead of
//! letting cudarc panic on a missing `libcuda.so.1`.

use std::sync::Arc;

pub use cudarc::driver::{CudaContext, CudaEvent, CudaStream, DriverError};

/// Why a GPU call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuError {
    /// No usable driver or no such device; the text is the probe's reason.
    #[error("no GPU: {0}")]
    Unavailable(String),
    /// A driver call failed.
    #[error("{call} failed: {error:?}")]
    Driver {
        /// What was being done (`"cuStreamCreate"`, ...).
        call: &'static str,
        /// The driver's code.
        error: DriverError,
    },
    /// A copy between buffers of different lengths.
    #[error("copy of {src} elements into a buffer of {dst}")]
    Length {
        /// Elements in the source.
        src: usize,
        /// Elements in the destination.
        dst: usize,
    },
}

/// A driver error of `call`.
pub(crate) fn driver(call: &'static str) -> impl FnOnce(DriverError) -> GpuError {
    move |error| GpuError::Driver { call, error }
}

/// One device's primary context.
#[derive(Debug, Clone)]
pub struct Gpu {
    context: Arc<CudaContext>,
}

impl Gpu {
    /// Opens device `ordinal`, after checking that the driver loads and has that device.
    pub fn open(ordinal: usize) -> Result<Gpu, GpuError> {
        let (probe, count) = super::driver::probe();
        if let Some(error) = probe.error {
            return Err(GpuError::Unavailable(error));
        }
        let count = count.unwrap_or(0) as usize;
        if ordinal >= count {
            return Err(GpuError::Unavailable(format!(
                "device {ordinal} asked for, the driver sees {count}"
            )));
        }
        let context = CudaContext::new(ordinal).map_err(driver("cuDevicePrimaryCtxRetain"))?;
        Ok(Gpu { context })
    }

    /// cudarc's context, for what these wrappers do not cover.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.context
    }

    /// The context's default stream.
    pub fn default_stream(&self) -> Arc<CudaStream> {
        self.context.default_stream()
    }

    /// A new stream (`cuStreamCreate`, non-blocking).
    pub fn new_stream(&self) -> Result<Arc<CudaStream>, GpuError> {
        self.context.new_stream().map_err(driver("cuStreamCreate"))
    }
}

/// Records the work queued so far on `stream` in a new event (timing disabled).
pub fn record(stream: &CudaStream) -> Result<CudaEvent, GpuError> {
    stream.record_event(None).map_err(driver("cuEventRecord"))
}

/// Makes `stream` wait for `event` without blocking the host.
pub fn wait(stream: &CudaStream, event: &CudaEvent) -> Result<(), GpuError> {
    stream.wait(event).map_err(driver("cuStreamWaitEvent"))
}

/// Blocks the host until everything queued on `stream` is done.
pub fn synchronize(stream: &CudaStream) -> Result<(), GpuError> {
    stream.synchronize().map_err(driver("cuStreamSynchronize"))
}
