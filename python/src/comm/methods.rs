//! What Python sees of `Communicator`: its constructors (`connect`, `from_store`,
//! `from_welcome`), its properties and queries, `shutdown()`, and every collective, each
//! taking its buffers in place and returning `None` or, with `async_op=True` or a callback, a
//! `Work`. PyO3 takes a class's methods in one `#[pymethods]` block, so they are all here; the
//! work is in the neighbouring files.

use dtcomm::{Call, Collective, DType};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::args::redop;
use super::communicator::PyCommunicator;
use super::setup;
use crate::buffer::Access;
use crate::errors::to_py;
use crate::native::{NativeClient, PyDataListener};
use crate::options::options;
use crate::work::Work;

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
        setup::connect(py, endpoint, rank, world, prefix, opts)
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
        setup::from_store(py, store, rank, world, opts)
    }

    /// Builds rank `rank` of round `round` of native job `job` over `listener` (the
    /// `DataListener` bound before joining; it serves every round): `addrs[p]` is where rank `p` listens (from the
    /// round's `Welcome`; every lower rank is needed, others may be None), and every link
    /// proves the round's secret, derived from `token` (the server's or the job's). No store.
    /// With `client` (the member's `NativeClient`), the server's word ends the round here too:
    /// when it declares a member lost (or one leaves, or the job stops, or this member is
    /// removed), the call in flight and every later one raise `RoundEndedError` at once; and a
    /// peer this rank's links lose is reported to the server. `hosts[p]`: the host record rank
    /// `p` advertised (the Welcome's `Peer.host`); with every rank's, the shared-memory set-up
    /// needs no exchange of its own.
    #[staticmethod]
    #[pyo3(signature = (listener, job, round, rank, world, addrs, token, client=None, hosts=None))]
    #[allow(clippy::too_many_arguments)]
    fn from_welcome(
        py: Python<'_>,
        listener: &Bound<'_, PyDataListener>,
        job: String,
        round: u64,
        rank: usize,
        world: usize,
        addrs: Vec<Option<String>>,
        token: &str,
        client: Option<&Bound<'_, NativeClient>>,
        hosts: Option<Vec<Vec<u8>>>,
    ) -> PyResult<Self> {
        setup::from_welcome(
            py, listener, job, round, rank, world, addrs, token, client, hosts,
        )
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

    /// Ranks of this communicator on this rank's host, itself included.
    #[getter]
    fn host_ranks(&self) -> PyResult<usize> {
        Ok(self.comm("host_ranks")?.host_ranks())
    }

    /// The engine's resolved configuration, each value with its source.
    fn config(&self) -> PyResult<String> {
        Ok(self.comm("config")?.config().to_string())
    }

    /// The transport, e.g. `tcp 127.0.0.1:4711 on lo (1 data socket(s)/peer)`.
    fn transport(&self) -> PyResult<String> {
        Ok(self.comm("transport")?.transport_description().to_owned())
    }

    /// Tells the flight recorder which group this communicator is: `group` (not 0, the same
    /// on every member) and each rank's global rank. Only before the first call; returns
    /// whether it was taken.
    fn set_flight_group(&self, group: u64, global_ranks: Vec<u32>) -> PyResult<bool> {
        Ok(self
            .comm("set_flight_group")?
            .set_flight_group(group, global_ranks))
    }

    /// The flight recorder's group of this communicator (0: a world communicator).
    #[getter]
    fn flight_group(&self) -> PyResult<u64> {
        Ok(self.comm("flight_group")?.flight_group())
    }

    /// The allreduce algorithm for `count` elements of `dtype` (`ring`, `doubling`, `tree`,
    /// `direct`).
    fn all_reduce_algo(&self, count: usize, dtype: &str) -> PyResult<String> {
        let d = DType::parse(dtype)
            .ok_or_else(|| PyValueError::new_err(format!("unknown dtype {dtype:?}")))?;
        Ok(self
            .comm("all_reduce_algo")?
            .all_reduce_algo(count, d)
            .to_string())
    }

    /// The error that failed this communicator, or None.
    fn failure(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        Ok(self
            .comm("failure")?
            .failure()
            .map(|e| to_py(e).into_value(py).into_any()))
    }

    /// Whether `shutdown()` was called.
    #[getter]
    fn is_shutdown(&self) -> bool {
        self.comm.is_none()
    }

    /// Makes a later `abort()` reach a call already waiting: parked calls look at the
    /// communicator's round fence every 20 ms from now on (a relaxed load and a wake-up).
    fn arm_abort(&self) -> PyResult<()> {
        self.comm("arm_abort")?.fence().arm();
        Ok(())
    }

    /// Ends this communicator's round: the call in flight fails within 20 ms (once
    /// `arm_abort()` was called; else at its next look) with `RoundEndedError` carrying
    /// `why` (and `lost`, the rank that caused it, when known), and so does every later call.
    /// Does not wait for anything; `shutdown()` afterwards closes the links.
    #[pyo3(signature = (why, lost=None))]
    fn abort(&self, why: String, lost: Option<u32>) -> PyResult<()> {
        let fence = self.comm("abort")?.fence();
        fence.arm();
        fence.end(dtcomm::fence::RoundEnd {
            round: 0,
            lost,
            why,
            removed: false,
        });
        Ok(())
    }

    /// Finishes queued calls, says goodbye to the peers and closes the connections.
    fn shutdown(&mut self, py: Python<'_>) {
        if let Some(comm) = self.comm.take() {
            // Queued calls' callbacks take the GIL on the progress thread: release it.
            py.detach(move || {
                comm.shutdown();
                drop(comm);
            });
        }
    }

    /// In place: every rank's `buf` becomes the reduction (op: 1 sum, 2 prod, 3 min, 4 max,
    /// 5 avg).
    #[pyo3(signature = (buf, op=1, *, async_op=false, callback=None))]
    fn all_reduce(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        op: i64,
        async_op: bool,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Option<Work>> {
        let op = redop(self.rank, "all_reduce", op)?;
        let b = self.buf(buf, "all_reduce", "buffer", Access::Write)?;
        let call = Call::new(Collective::AllReduce { op }).recv(b.raw());
        self.go(py, call, vec![b], async_op, callback)
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
        let call = Call::new(Collective::Broadcast { root }).recv(b.raw());
        self.go(py, call, vec![b], async_op, callback)
    }

    /// In place on `root`: its `buf` becomes the reduction; other ranks' are unchanged.
    #[pyo3(signature = (buf, op=1, root=0, *, async_op=false, callback=None))]
    fn reduce(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        op: i64,
        root: usize,
        async_op: bool,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Option<Work>> {
        let op = redop(self.rank, "reduce", op)?;
        let b = self.buf(buf, "reduce", "buffer", Access::Write)?;
        let call = Call::new(Collective::Reduce { op, root }).recv(b.raw());
        self.go(py, call, vec![b], async_op, callback)
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
        let call = Call::new(Collective::AllGather { counts })
            .send(s.raw())
            .recv(r.raw());
        self.go(py, call, vec![s, r], async_op, callback)
    }

    /// Reduces every rank's `send` (`world` blocks of `recv`'s length) and leaves this rank's
    /// block in `recv`.
    #[pyo3(signature = (send, recv, op=1, *, async_op=false, callback=None))]
    fn reduce_scatter(
        &self,
        py: Python<'_>,
        send: &Bound<'_, PyAny>,
        recv: &Bound<'_, PyAny>,
        op: i64,
        async_op: bool,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Option<Work>> {
        let op = redop(self.rank, "reduce_scatter", op)?;
        let s = self.buf(send, "reduce_scatter", "input", Access::Read)?;
        let r = self.buf(recv, "reduce_scatter", "output", Access::Write)?;
        self.same_dtype("reduce_scatter", &s, &r)?;
        let call = Call::new(Collective::ReduceScatter { op })
            .send(s.raw())
            .recv(r.raw());
        self.go(py, call, vec![s, r], async_op, callback)
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
        let mut call = Call::new(Collective::Gather { root }).send(s.raw());
        if let Some(r) = &r {
            self.same_dtype("gather", &s, r)?;
            call = call.recv(r.raw());
        }
        let mut bufs = vec![s];
        bufs.extend(r);
        self.go(py, call, bufs, async_op, callback)
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
        let mut call = Call::new(Collective::Scatter { root }).recv(r.raw());
        if let Some(s) = &s {
            self.same_dtype("scatter", s, &r)?;
            call = call.send(s.raw());
        }
        let mut bufs = vec![r];
        bufs.extend(s);
        self.go(py, call, bufs, async_op, callback)
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
        let call = Call::new(Collective::AllToAll {
            send_counts,
            recv_counts,
        })
        .send(s.raw())
        .recv(r.raw());
        self.go(py, call, vec![s, r], async_op, callback)
    }

    /// Returns once every rank has called it.
    #[pyo3(signature = (*, async_op=false, callback=None))]
    fn barrier(
        &self,
        py: Python<'_>,
        async_op: bool,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Option<Work>> {
        self.go(
            py,
            Call::new(Collective::Barrier),
            vec![],
            async_op,
            callback,
        )
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
        let call = Call::new(Collective::Send { peer }).send(b.raw());
        self.go(py, call, vec![b], async_op, callback)
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
        let call = Call::new(Collective::Recv { peer }).recv(b.raw());
        self.go(py, call, vec![b], async_op, callback)
    }

    /// Receives into `buf` the next `send` to this rank from any peer (the first to arrive);
    /// returns the sender's rank, or (with `async_op`/`callback`) a `Work` whose `source` is
    /// the sender once it completed.
    #[pyo3(signature = (buf, *, async_op=false, callback=None))]
    fn recv_any(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        async_op: bool,
        callback: Option<Py<PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let b = self.buf(buf, "recv", "buffer", Access::Write)?;
        let source = dtcomm::Source::new();
        let call = Call::new(Collective::RecvAny {
            source: source.clone(),
        })
        .recv(b.raw());
        Ok(match self.go(py, call, vec![b], async_op, callback)? {
            Some(w) => Py::new(py, w.with_source(source))?.into_any(),
            None => source
                .get()
                .expect("a completed receive knows its source")
                .into_pyobject(py)?
                .into_any()
                .unbind(),
        })
    }

    fn __repr__(&self) -> String {
        match &self.comm {
            Some(c) => format!(
                "<dtcomm Communicator rank {} of {} over {}>",
                self.rank,
                self.world,
                c.transport_description()
            ),
            None => format!(
                "<dtcomm Communicator rank {} of {} (shut down)>",
                self.rank, self.world
            ),
        }
    }
}
