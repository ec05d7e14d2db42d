//! `--device cuda|twin`: the same measurement on device buffers, through the engine's device
//! path (NCCL when every rank can use it, else host staging; `DTCOMM_CUDA` picks as for any
//! caller). The buffers are filled and checked through host copies, outside the timed loop;
//! each timed call returns when its result is on the device (the engine waits for it), so the
//! time is the caller's.
//!
//! * `cuda`: the real CUDA driver and NCCL (dt-bench built with `--features cuda`); rank r uses
//!   device `r % devices`. NCCL refuses two ranks on one device, so one GPU runs NCCL at world
//!   1 and staging (`DTCOMM_CUDA=stage`) above it.
//! * `twin`: dtcomm's in-memory CUDA twin (`dtcomm::device::twin`), so the path runs with no
//!   GPU (in CI). NCCL's twin needs its ranks in one process: at world 1 the call runs on it;
//!   across processes there is none and the calls are staged.

use std::time::{Duration, Instant};

use dtcomm::call::{Call, Collective as Coll, RawBuf};
use dtcomm::device::settle::settle;
use dtcomm::device::twin::{MemGpu, MemNccl};
use dtcomm::device::{DevPtr, DeviceMemory, DeviceRuntime, StreamHandle};
use dtcomm::{Communicator, DType, ReduceOp};

use super::Collective;
use super::run::{BenchElem, Case, Measured, Spec, count_wrong, fill, timed};

/// Where the benchmark's buffers are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Host memory (the default).
    Host,
    /// A GPU, through CUDA and NCCL.
    Cuda,
    /// dtcomm's in-memory GPU twin.
    Twin,
}

impl Place {
    /// From `--device`.
    pub fn parse(s: &str) -> Result<Place, String> {
        match s {
            "host" | "cpu" => Ok(Place::Host),
            "cuda" | "gpu" => Ok(Place::Cuda),
            "twin" => Ok(Place::Twin),
            _ => Err(format!("--device {s:?}: host, cuda or twin")),
        }
    }
}

/// One rank's device: the runtime the communicator uses too, its device and a stream.
pub struct Gpu {
    rt: DeviceRuntime,
    device: i32,
    stream: StreamHandle,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

impl Gpu {
    /// Opens rank `rank`'s device and hands its runtime to `comm`.
    pub fn open(place: Place, comm: &Communicator) -> Result<Gpu, String> {
        let rt = match place {
            Place::Host => return Err("host buffers need no device".into()),
            Place::Cuda => dtcomm::cuda::default_runtime().map_err(|why| {
                format!("--device cuda: no CUDA here: {why} (dtcomm.cuda_status() says more)")
            })?,
            Place::Twin => {
                let gpu = MemGpu::new(1);
                let nccl = if comm.world() == 1 {
                    Ok(std::sync::Arc::new(MemNccl::new(&gpu)) as _)
                } else {
                    Err("the NCCL twin needs its ranks in one process".to_owned())
                };
                DeviceRuntime {
                    api: std::sync::Arc::new(gpu),
                    nccl,
                }
            }
        };
        let count = rt.api.device_count().map_err(err)?;
        if count == 0 {
            return Err("--device: no devices".into());
        }
        let device = (comm.rank() % count) as i32;
        let stream = rt.api.new_stream(device).map_err(err)?;
        comm.set_device_runtime(rt.clone());
        Ok(Gpu { rt, device, stream })
    }

    /// What runs the calls, for the preamble.
    pub fn describe(&self) -> String {
        let nccl = match &self.rt.nccl {
            Ok(n) => n.describe(),
            Err(why) => format!("no NCCL ({why})"),
        };
        format!(
            "{}, device {}, {nccl}; DTCOMM_CUDA={}",
            self.rt.api.describe(),
            self.device,
            std::env::var("DTCOMM_CUDA").unwrap_or_else(|_| "auto".into())
        )
    }

    fn alloc(&self, bytes: usize) -> Result<Box<dyn DeviceMemory>, String> {
        self.rt.api.device_memory(self.device, bytes).map_err(err)
    }

    /// Waits for the stream, for up to a minute.
    fn sync(&self) -> Result<(), String> {
        let limit = Duration::from_secs(60);
        let deadline = Instant::now() + limit;
        settle(&*self.rt.api, self.device, self.stream, deadline, limit).map_err(err)
    }

    fn upload<T: BenchElem>(&self, v: &[T], to: DevPtr) -> Result<(), String> {
        let bytes = dtcomm::dtype::as_bytes(v);
        if !bytes.is_empty() {
            // SAFETY: `to_device` needs `bytes.len()` bytes at `bytes.as_ptr()` to stay valid and
            // unchanged until the copy is done: `bytes` views `v`, borrowed (shared) until this
            // function returns, which is after `self.sync()` waited for the stream. If that wait
            // times out (a minute) the copy may still be pending when `v` is released: a hung
            // device, where the run is abandoned anyway. `to` is a device allocation the caller
            // sized for `v`.
            unsafe {
                self.rt
                    .api
                    .to_device(self.device, self.stream, bytes.as_ptr(), to, bytes.len())
            }
            .map_err(err)?;
        }
        self.sync()
    }

    fn download<T: BenchElem>(&self, from: DevPtr, v: &mut [T]) -> Result<(), String> {
        let bytes = dtcomm::dtype::as_bytes_mut(v);
        if !bytes.is_empty() {
            // SAFETY: `to_host` needs `bytes.len()` writable bytes at `bytes.as_mut_ptr()`, read by
            // no one else until the copy is done: `bytes` views `v`, borrowed exclusively until
            // this function returns, which is after `self.sync()` waited for the stream (with the
            // same caveat as `upload` for a wait that times out). `from` is a device allocation the
            // caller sized for `v`.
            unsafe {
                self.rt.api.to_host(
                    self.device,
                    self.stream,
                    from,
                    bytes.as_mut_ptr(),
                    bytes.len(),
                )
            }
            .map_err(err)?;
        }
        self.sync()
    }
}

/// The device buffers of one case.
struct Bufs {
    send: Box<dyn DeviceMemory>,
    recv: Box<dyn DeviceMemory>,
    ns: usize,
    nr: usize,
}

fn call(
    gpu: &Gpu,
    coll: Collective,
    b: &Bufs,
    dtype: DType,
    op: ReduceOp,
    root: usize,
    in_place: bool,
) -> Result<Call, String> {
    let buf = |m: &dyn DeviceMemory, n: usize| {
        RawBuf::device(
            m.ptr().0 as usize as *mut u8,
            n,
            dtype,
            gpu.device,
            gpu.stream.0,
        )
    };
    let (s, r) = (buf(&*b.send, b.ns), buf(&*b.recv, b.nr));
    let c = match coll {
        Collective::AllReduce => Call::new(Coll::AllReduce { op }),
        Collective::Broadcast => Call::new(Coll::Broadcast { root }),
        Collective::Reduce => Call::new(Coll::Reduce { op, root }),
        Collective::AllGather => Call::new(Coll::AllGather { counts: None }),
        Collective::ReduceScatter => Call::new(Coll::ReduceScatter { op }),
        Collective::AllToAll => Call::new(Coll::AllToAll {
            send_counts: None,
            recv_counts: None,
        }),
        Collective::SendRecv => {
            return Err("sendrecv_perf has no --device form (point to point is staged)".into());
        }
    };
    let in_place = in_place
        && matches!(
            coll,
            Collective::AllReduce | Collective::Broadcast | Collective::Reduce
        );
    Ok(if in_place {
        c.recv(r)
    } else {
        c.send(s).recv(r)
    })
}

/// The host benchmark's `measure` (`perf/run.rs`) on device buffers.
pub fn measure<T: BenchElem>(c: &Communicator, gpu: &Gpu, spec: &Spec) -> Result<Measured, String> {
    let (coll, op, root) = (spec.coll, spec.op, spec.root);
    let mut k: Case<T> = fill(c, coll, spec.count, op);
    let es = std::mem::size_of::<T>();
    let b = Bufs {
        send: gpu.alloc(k.send.len() * es)?,
        recv: gpu.alloc(k.recv.len() * es)?,
        ns: k.send.len(),
        nr: k.recv.len(),
    };
    gpu.upload(&k.send, b.send.ptr())?;
    gpu.upload(&k.recv, b.recv.ptr())?;
    let the_call = call(gpu, coll, &b, T::DTYPE, op, root, spec.in_place)?;
    // SAFETY: `the_call`'s buffers are the device allocations in `b`, sized for the call's counts
    // by `fill` and `call`, which live until `measure` returns, after every run; `run` on device
    // buffers returns once the result is on the device, and nothing else touches them meanwhile
    // (this thread alone uses `b`, and `download` runs between calls, not during one).
    let run = || unsafe { c.run(&the_call) };
    let mut wrong = 0;
    if spec.check {
        run().map_err(err)?;
        gpu.download(b.recv.ptr(), &mut k.recv)?;
        wrong = count_wrong(c, coll, &k, op, root);
    }
    timed(c, spec, wrong, run).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places() {
        assert_eq!(Place::parse("cuda"), Ok(Place::Cuda));
        assert_eq!(Place::parse("twin"), Ok(Place::Twin));
        assert_eq!(Place::parse("host"), Ok(Place::Host));
        assert!(Place::parse("tpu").is_err());
    }
}
