//! `dtcomm._dtcomm.Communicator`: the engine's [`dtcomm::Communicator`] for Python. Every
//! collective takes numpy arrays (buffer protocol) or CPU torch tensors (DLPack) in place,
//! releases the GIL while it runs, and with `async_op=True` returns a [`Work`] instead.

use std::sync::Arc;
use std::time::Duration;

use dt_rdzv::client::TcpStoreClient;
use dt_rdzv::store::{PrefixStore, Store};
use dtcomm::{Algo, CommError, Communicator, DType, Options, ReduceOp};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::buffer::{Access, Buf, Ctx};
use crate::errors::{SetupError, ShutdownError, to_py};
use crate::exec::{Exec, Work};
use crate::pystore::PyStore;

/// Runs `$body` with `$T` bound to the Rust element type of `$dtype`.
macro_rules! typed {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            DType::F32 => {
                type $T = f32;
                $body
            }
            DType::F64 => {
                type $T = f64;
                $body
            }
            DType::F16 => {
                type $T = half::f16;
                $body
            }
            DType::BF16 => {
                type $T = half::bf16;
                $body
            }
            DType::I8 => {
                type $T = i8;
                $body
            }
            DType::U8 => {
                type $T = u8;
                $body
            }
            DType::I32 => {
                type $T = i32;
                $body
            }
            DType::I64 => {
                type $T = i64;
                $body
            }
        }
    };
}

fn redop(rank: usize, op: &str, v: u8) -> PyResult<ReduceOp> {
    ReduceOp::ALL
        .iter()
        .copied()
        .find(|o| *o as u8 == v)
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "rank {rank}: {op}: unknown reduce op {v} (sum=1, prod=2, min=3, max=4, avg=5)"
            ))
        })
}

fn options(
    timeout: Option<f64>,
    algo: Option<&str>,
    socket_ifname: Option<String>,
    nsocks_perpeer: Option<usize>,
    store_prefix: Option<String>,
) -> PyResult<Options> {
    let timeout = match timeout {
        None => None,
        Some(t) if t.is_finite() && t > 0.0 => Some(Duration::from_secs_f64(t)),
        Some(t) => {
            return Err(PyValueError::new_err(format!(
                "timeout must be a positive number of seconds, got {t}"
            )));
        }
    };
    let algo = algo
        .map(|a| a.parse::<Algo>().map_err(PyValueError::new_err))
        .transpose()?;
    Ok(Options {
        timeout,
        algo,
        socket_ifname,
        nsocks_perpeer,
        store_prefix,
        ..Options::default()
    })
}

/// A group of ranks running collectives together (one per process and group).
#[pyclass(module = "dtcomm._dtcomm", name = "Communicator")]
pub struct PyCommunicator {
    exec: Option<Arc<Exec>>,
    rank: usize,
    world: usize,
}

type Job = Box<dyn FnOnce(&Communicator) -> Result<(), CommError> + Send>;

impl PyCommunicator {
    fn build(
        py: Python<'_>,
        store: Arc<dyn Store>,
        rank: usize,
        world: usize,
        opts: Options,
    ) -> PyResult<Self> {
        if world == 0 || rank >= world {
            return Err(PyValueError::new_err(format!(
                "rank {rank} is not in a world of {world}"
            )));
        }
        let comm = py
            .detach(move || Communicator::new(store, rank, world, opts))
            .map_err(to_py)?;
        Ok(PyCommunicator {
            exec: Some(Arc::new(Exec::new(comm))),
            rank,
            world,
        })
    }

    fn exec(&self, op: &str) -> PyResult<&Arc<Exec>> {
        self.exec.as_ref().ok_or_else(|| {
            ShutdownError::new_err(format!(
                "rank {}: {op} after shutdown(); call dtcomm.init() again",
                self.rank
            ))
        })
    }

    fn buf(
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
    fn root_buf(
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

    fn same_dtype(&self, op: &str, a: &Buf, b: &Buf) -> PyResult<()> {
        if a.dtype != b.dtype {
            return Err(PyTypeError::new_err(format!(
                "rank {}: {op}: input is {} but output is {}",
                self.rank, a.dtype, b.dtype
            )));
        }
        Ok(())
    }

    /// Runs `job` now, or queues it when `async_op`.
    fn go(
        &self,
        py: Python<'_>,
        op: &'static str,
        bufs: Vec<Arc<Buf>>,
        async_op: bool,
        callback: Option<Py<PyAny>>,
        job: Job,
    ) -> PyResult<Option<Work>> {
        let exec = self.exec(op)?;
        if async_op || callback.is_some() {
            return exec.submit(op, bufs, callback, job).map(Some);
        }
        exec.run(py, job)?;
        drop(bufs);
        Ok(None)
    }
}

/// `send`'s elements as an input slice: the buffer itself, or a copy when it shares memory
/// with `recv` (the engine reads one while it writes the other).
///
/// # Safety
/// `T` is the element type of `send`; nothing else uses `send` meanwhile.
unsafe fn input<'a, T: Copy>(send: &'a Buf, recv: &Buf, tmp: &'a mut Vec<T>) -> &'a [T] {
    // SAFETY: per the contract; the mutable view ends before `recv`'s view is made.
    let s: &'a [T] = unsafe { send.slice_mut::<T>() };
    if send.overlaps(recv) {
        *tmp = s.to_vec();
        tmp
    } else {
        s
    }
}

#[pymethods]
impl PyCommunicator {
    /// Connects rank `rank` of `world` through the rendezvous store at `endpoint`
    /// (`host:port` of a `dt-rdzv serve` or a torch TCPStore), under key prefix `prefix`.
    /// Options left as None resolve from their `DTCOMM_*` twins.
    #[staticmethod]
    #[pyo3(signature = (endpoint, rank, world, *, prefix="", timeout=None, algo=None,
                        socket_ifname=None, nsocks_perpeer=None, store_prefix=None))]
    #[allow(clippy::too_many_arguments)]
    fn connect(
        py: Python<'_>,
        endpoint: &str,
        rank: usize,
        world: usize,
        prefix: &str,
        timeout: Option<f64>,
        algo: Option<&str>,
        socket_ifname: Option<String>,
        nsocks_perpeer: Option<usize>,
        store_prefix: Option<String>,
    ) -> PyResult<Self> {
        let opts = options(timeout, algo, socket_ifname, nsocks_perpeer, store_prefix)?;
        let wait = opts.timeout.unwrap_or(Duration::from_secs(300));
        let ep = endpoint.to_owned();
        let client = py
            .detach(move || TcpStoreClient::connect(&ep, wait))
            .map_err(|e| {
                SetupError::new_err(format!(
                    "rank {rank}: cannot reach the rendezvous store at {endpoint}: {e}"
                ))
            })?;
        let store: Arc<dyn Store> = if prefix.is_empty() {
            Arc::new(client)
        } else {
            Arc::new(PrefixStore::new(prefix, client))
        };
        Self::build(py, store, rank, world, opts)
    }

    /// Connects through a Python store object with torch's `c10d.Store` methods (what
    /// `torch.distributed` hands a backend).
    #[staticmethod]
    #[pyo3(signature = (store, rank, world, *, timeout=None, algo=None, socket_ifname=None,
                        nsocks_perpeer=None, store_prefix=None))]
    #[allow(clippy::too_many_arguments)]
    fn from_store(
        py: Python<'_>,
        store: Py<PyAny>,
        rank: usize,
        world: usize,
        timeout: Option<f64>,
        algo: Option<&str>,
        socket_ifname: Option<String>,
        nsocks_perpeer: Option<usize>,
        store_prefix: Option<String>,
    ) -> PyResult<Self> {
        let opts = options(timeout, algo, socket_ifname, nsocks_perpeer, store_prefix)?;
        Self::build(py, Arc::new(PyStore::new(store)), rank, world, opts)
    }

    /// This rank.
    #[getter]
    fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks.
    #[getter]
    fn world(&self) -> usize {
        self.world
    }

    /// The engine's resolved configuration, each value with its source.
    fn config(&self) -> PyResult<String> {
        Ok(self.exec("config")?.comm.config().to_string())
    }

    /// The transport, e.g. `tcp 127.0.0.1:4711 on lo (1 data socket(s)/peer)`.
    fn transport(&self) -> PyResult<String> {
        Ok(self
            .exec("transport")?
            .comm
            .transport_description()
            .to_owned())
    }

    /// The allreduce algorithm for `count` elements of `dtype` (`ring` or `tree`).
    fn all_reduce_algo(&self, count: usize, dtype: &str) -> PyResult<String> {
        let d = DType::parse(dtype)
            .ok_or_else(|| PyValueError::new_err(format!("unknown dtype {dtype:?}")))?;
        Ok(self
            .exec("all_reduce_algo")?
            .comm
            .all_reduce_algo(count, d)
            .to_string())
    }

    /// The error that failed this communicator, or None.
    fn failure(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        Ok(self
            .exec("failure")?
            .comm
            .failure()
            .map(|e| to_py(e).into_value(py).into_any()))
    }

    /// Whether `shutdown()` was called.
    #[getter]
    fn is_shutdown(&self) -> bool {
        self.exec.is_none()
    }

    /// Finishes queued calls, says goodbye to the peers and closes the connections.
    fn shutdown(&mut self, py: Python<'_>) {
        if let Some(exec) = self.exec.take() {
            exec.stop(py);
            // The engine's drop joins its threads and closes sockets: no GIL needed.
            py.detach(move || drop(exec));
        }
    }

    /// In place: every rank's `buf` becomes the reduction (op: 1 sum, 2 prod, 3 min, 4 max,
    /// 5 avg).
    #[pyo3(signature = (buf, op=1, *, async_op=false, callback=None))]
    fn all_reduce(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        op: u8,
        async_op: bool,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Option<Work>> {
        let op = redop(self.rank, "all_reduce", op)?;
        let b = self.buf(buf, "all_reduce", "buffer", Access::Write)?;
        let bb = b.clone();
        let job: Job = Box::new(
            move |c| typed!(bb.dtype, T => c.all_reduce::<T>(unsafe { bb.slice_mut() }, op)),
        );
        self.go(py, "all_reduce", vec![b], async_op, callback, job)
    }

    /// In place: `root`'s `buf` is copied into every rank's `buf`.
    #[pyo3(signature = (buf, root=0, *, async_op=false, callback=None))]
    fn broadcast(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        root: usize,
        async_op: bool,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Option<Work>> {
        let b = self.buf(buf, "broadcast", "buffer", Access::Write)?;
        let bb = b.clone();
        let job: Job = Box::new(
            move |c| typed!(bb.dtype, T => c.broadcast::<T>(unsafe { bb.slice_mut() }, root)),
        );
        self.go(py, "broadcast", vec![b], async_op, callback, job)
    }

    /// In place on `root`: its `buf` becomes the reduction; other ranks' are unchanged.
    #[pyo3(signature = (buf, op=1, root=0, *, async_op=false, callback=None))]
    fn reduce(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        op: u8,
        root: usize,
        async_op: bool,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Option<Work>> {
        let op = redop(self.rank, "reduce", op)?;
        let b = self.buf(buf, "reduce", "buffer", Access::Write)?;
        let bb = b.clone();
        let job: Job = Box::new(
            move |c| typed!(bb.dtype, T => c.reduce::<T>(unsafe { bb.slice_mut() }, op, root)),
        );
        self.go(py, "reduce", vec![b], async_op, callback, job)
    }

    /// Every rank's `send` lands in `recv` (`counts[p]` elements from rank p, default equal
    /// lengths), in rank order.
    #[pyo3(signature = (send, recv, counts=None, *, async_op=false, callback=None))]
    fn all_gather(
        &self,
        py: Python<'_>,
        send: &Bound<'_, PyAny>,
        recv: &Bound<'_, PyAny>,
        counts: Option<Vec<usize>>,
        async_op: bool,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Option<Work>> {
        let s = self.buf(send, "all_gather", "input", Access::Read)?;
        let r = self.buf(recv, "all_gather", "output", Access::Write)?;
        self.same_dtype("all_gather", &s, &r)?;
        let counts = counts.unwrap_or_else(|| vec![s.count; self.world]);
        let (ss, rr) = (s.clone(), r.clone());
        let job: Job = Box::new(move |c| {
            typed!(ss.dtype, T => {
                let mut tmp = Vec::new();
                let input = unsafe { input::<T>(&ss, &rr, &mut tmp) };
                c.all_gather_v::<T>(input, unsafe { rr.slice_mut() }, &counts)
            })
        });
        self.go(py, "all_gather", vec![s, r], async_op, callback, job)
    }

    /// Reduces every rank's `send` (`world` blocks of `recv`'s length) and leaves this rank's
    /// block in `recv`.
    #[pyo3(signature = (send, recv, op=1, *, async_op=false, callback=None))]
    fn reduce_scatter(
        &self,
        py: Python<'_>,
        send: &Bound<'_, PyAny>,
        recv: &Bound<'_, PyAny>,
        op: u8,
        async_op: bool,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Option<Work>> {
        let op = redop(self.rank, "reduce_scatter", op)?;
        let s = self.buf(send, "reduce_scatter", "input", Access::Read)?;
        let r = self.buf(recv, "reduce_scatter", "output", Access::Write)?;
        self.same_dtype("reduce_scatter", &s, &r)?;
        let (ss, rr) = (s.clone(), r.clone());
        let job: Job = Box::new(move |c| {
            typed!(ss.dtype, T => {
                let mut tmp = Vec::new();
                let input = unsafe { input::<T>(&ss, &rr, &mut tmp) };
                c.reduce_scatter::<T>(input, unsafe { rr.slice_mut() }, op)
            })
        });
        self.go(py, "reduce_scatter", vec![s, r], async_op, callback, job)
    }

    /// Every rank's `send` lands in `root`'s `recv` (None on other ranks), in rank order.
    #[pyo3(signature = (send, recv=None, root=0, *, async_op=false, callback=None))]
    fn gather(
        &self,
        py: Python<'_>,
        send: &Bound<'_, PyAny>,
        recv: Option<&Bound<'_, PyAny>>,
        root: usize,
        async_op: bool,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Option<Work>> {
        let s = self.buf(send, "gather", "input", Access::Read)?;
        let r = self.root_buf(recv, root, "gather", "output", Access::Write)?;
        if let Some(r) = &r {
            self.same_dtype("gather", &s, r)?;
        }
        let (ss, rr) = (s.clone(), r.clone());
        let job: Job = Box::new(move |c| {
            typed!(ss.dtype, T => {
                let mut tmp = Vec::new();
                match &rr {
                    Some(rr) => {
                        let input = unsafe { input::<T>(&ss, rr, &mut tmp) };
                        c.gather::<T>(input, unsafe { rr.slice_mut() }, root)
                    }
                    None => c.gather::<T>(unsafe { ss.slice_mut() }, &mut [], root),
                }
            })
        });
        let mut bufs = vec![s];
        bufs.extend(r);
        self.go(py, "gather", bufs, async_op, callback, job)
    }

    /// Block p of `root`'s `send` (None on other ranks) lands in rank p's `recv`.
    #[pyo3(signature = (send, recv, root=0, *, async_op=false, callback=None))]
    fn scatter(
        &self,
        py: Python<'_>,
        send: Option<&Bound<'_, PyAny>>,
        recv: &Bound<'_, PyAny>,
        root: usize,
        async_op: bool,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Option<Work>> {
        let r = self.buf(recv, "scatter", "output", Access::Write)?;
        let s = self.root_buf(send, root, "scatter", "input", Access::Read)?;
        if let Some(s) = &s {
            self.same_dtype("scatter", s, &r)?;
        }
        let (ss, rr) = (s.clone(), r.clone());
        let job: Job = Box::new(move |c| {
            typed!(rr.dtype, T => {
                let mut tmp = Vec::new();
                match &ss {
                    Some(ss) => {
                        let input = unsafe { input::<T>(ss, &rr, &mut tmp) };
                        c.scatter::<T>(input, unsafe { rr.slice_mut() }, root)
                    }
                    None => c.scatter::<T>(&[], unsafe { rr.slice_mut() }, root),
                }
            })
        });
        let mut bufs = vec![r];
        bufs.extend(s);
        self.go(py, "scatter", bufs, async_op, callback, job)
    }

    /// Block p of `send` goes to rank p; block p of `recv` comes from rank p. Equal blocks
    /// unless `send_counts` / `recv_counts` (elements per peer) are given.
    #[pyo3(signature = (send, recv, send_counts=None, recv_counts=None, *, async_op=false,
                        callback=None))]
    #[allow(clippy::too_many_arguments)]
    fn all_to_all(
        &self,
        py: Python<'_>,
        send: &Bound<'_, PyAny>,
        recv: &Bound<'_, PyAny>,
        send_counts: Option<Vec<usize>>,
        recv_counts: Option<Vec<usize>>,
        async_op: bool,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Option<Work>> {
        let s = self.buf(send, "all_to_all", "input", Access::Read)?;
        let r = self.buf(recv, "all_to_all", "output", Access::Write)?;
        self.same_dtype("all_to_all", &s, &r)?;
        let (ss, rr) = (s.clone(), r.clone());
        let job: Job = Box::new(move |c| {
            typed!(ss.dtype, T => {
                let mut tmp = Vec::new();
                let input = unsafe { input::<T>(&ss, &rr, &mut tmp) };
                let out = unsafe { rr.slice_mut::<T>() };
                match (send_counts, recv_counts) {
                    (None, None) => c.all_to_all::<T>(input, out),
                    (sc, rc) => {
                        let w = c.world();
                        let sc = sc.unwrap_or_else(|| vec![input.len() / w.max(1); w]);
                        let rc = rc.unwrap_or_else(|| vec![out.len() / w.max(1); w]);
                        c.all_to_all_v::<T>(input, &sc, out, &rc)
                    }
                }
            })
        });
        self.go(py, "all_to_all", vec![s, r], async_op, callback, job)
    }

    /// Returns once every rank has called it.
    #[pyo3(signature = (*, async_op=false, callback=None))]
    fn barrier(
        &self,
        py: Python<'_>,
        async_op: bool,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Option<Work>> {
        let job: Job = Box::new(|c| c.barrier());
        self.go(py, "barrier", vec![], async_op, callback, job)
    }

    /// Sends `buf` to `peer` (matched in order with its `recv`).
    #[pyo3(signature = (buf, peer, *, async_op=false, callback=None))]
    fn send(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        peer: usize,
        async_op: bool,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Option<Work>> {
        let b = self.buf(buf, "send", "buffer", Access::Read)?;
        let bb = b.clone();
        let job: Job =
            Box::new(move |c| typed!(bb.dtype, T => c.send::<T>(unsafe { bb.slice_mut() }, peer)));
        self.go(py, "send", vec![b], async_op, callback, job)
    }

    /// Receives `peer`'s matching `send` into `buf`.
    #[pyo3(signature = (buf, peer, *, async_op=false, callback=None))]
    fn recv(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        peer: usize,
        async_op: bool,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Option<Work>> {
        let b = self.buf(buf, "recv", "buffer", Access::Write)?;
        let bb = b.clone();
        let job: Job =
            Box::new(move |c| typed!(bb.dtype, T => c.recv::<T>(unsafe { bb.slice_mut() }, peer)));
        self.go(py, "recv", vec![b], async_op, callback, job)
    }

    fn __repr__(&self) -> String {
        match &self.exec {
            Some(e) => format!(
                "<dtcomm Communicator rank {} of {} over {}>",
                self.rank,
                self.world,
                e.comm.transport_description()
            ),
            None => format!(
                "<dtcomm Communicator rank {} of {} (shut down)>",
                self.rank, self.world
            ),
        }
    }
}

impl Drop for PyCommunicator {
    fn drop(&mut self) {
        if let Some(exec) = self.exec.take() {
            Python::attach(|py| {
                exec.stop(py);
                py.detach(move || drop(exec));
            });
        }
    }
}
