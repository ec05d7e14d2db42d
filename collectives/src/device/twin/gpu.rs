//! [`MemGpu`]: an in-memory twin of the CUDA calls the device path makes. "Device memory" is
//! host memory behind addresses no host code can dereference (any direct use by the engine
//! would crash the test), streams are worker threads running their queue in order, events are
//! flags set by the stream that recorded them. Copies are checked against the allocations the
//! way a real device faults: out of bounds or on the wrong device is an error.

use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::device::api::{DevPtr, DeviceApi, DeviceError, DeviceEvent, StreamHandle};
use crate::dtype::Element;

/// Device addresses start here: far from anything the host maps.
const BASE: u64 = 0x7f00_0000_0000_0000;

type Task = Box<dyn FnOnce() + Send>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

struct Alloc {
    device: i32,
    bytes: Vec<u8>,
}

/// The state the twin's streams and its handle share.
pub(crate) struct GpuShared {
    devices: usize,
    mem: Mutex<BTreeMap<u64, Alloc>>,
    next: AtomicU64,
    streams: Mutex<HashMap<(i32, u64), Sender<Task>>>,
    next_stream: AtomicU64,
    copies: AtomicUsize,
    host_allocs: AtomicUsize,
    /// Address ranges of host memory the twin lent and that was freed since (a real device
    /// that copies into one corrupts whatever lives there now).
    freed_host: Mutex<Vec<(usize, usize)>>,
    /// Copies the streams ran into freed host memory (skipped; counted for the tests).
    freed_writes: AtomicUsize,
}

/// Host memory the twin lends: a plain buffer that, when freed, tells the twin, so that a copy
/// still queued on a stream into it is caught instead of corrupting the heap.
struct TwinHost {
    buf: Vec<u64>,
    shared: Arc<GpuShared>,
}

impl crate::device::HostMemory for TwinHost {
    fn bytes(&mut self) -> &mut [u8] {
        self.buf.bytes()
    }
}

impl Drop for TwinHost {
    fn drop(&mut self) {
        let start = self.buf.as_ptr() as usize;
        let len = std::mem::size_of_val(&self.buf[..]);
        lock(&self.shared.freed_host).push((start, start + len));
    }
}

/// An event of the twin: set once its stream reached it.
#[derive(Default)]
pub(crate) struct MemEvent {
    done: Mutex<bool>,
    cv: Condvar,
}

impl MemEvent {
    fn set(&self) {
        *lock(&self.done) = true;
        self.cv.notify_all();
    }

    pub(crate) fn wait(&self) {
        let mut d = lock(&self.done);
        while !*d {
            d = self.cv.wait(d).unwrap_or_else(|p| p.into_inner());
        }
    }
}

struct EventRef(Arc<MemEvent>);

impl DeviceEvent for EventRef {
    fn done(&self) -> Result<bool, DeviceError> {
        Ok(*lock(&self.0.done))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The in-memory twin of a host's GPUs. Clones share the devices.
#[derive(Clone)]
pub struct MemGpu {
    pub(crate) shared: Arc<GpuShared>,
}

impl std::fmt::Debug for MemGpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemGpu({} devices)", self.shared.devices)
    }
}

impl MemGpu {
    /// A host with `devices` GPUs.
    pub fn new(devices: usize) -> MemGpu {
        MemGpu {
            shared: Arc::new(GpuShared {
                devices,
                mem: Mutex::new(BTreeMap::new()),
                next: AtomicU64::new(BASE),
                streams: Mutex::new(HashMap::new()),
                next_stream: AtomicU64::new(1),
                copies: AtomicUsize::new(0),
                host_allocs: AtomicUsize::new(0),
                freed_host: Mutex::new(Vec::new()),
                freed_writes: AtomicUsize::new(0),
            }),
        }
    }

    /// `bytes` of zeroed memory on `device`.
    pub fn alloc(&self, device: i32, bytes: usize) -> DevPtr {
        let at = self.shared.next.fetch_add(
            (bytes as u64).next_multiple_of(256) + 256,
            Ordering::Relaxed,
        );
        lock(&self.shared.mem).insert(
            at,
            Alloc {
                device,
                bytes: vec![0; bytes],
            },
        );
        DevPtr(at)
    }

    /// New device memory on `device` holding `v` (written at once, like `cudaMemcpy`).
    pub fn upload<T: Element>(&self, device: i32, v: &[T]) -> DevPtr {
        let p = self.alloc(device, std::mem::size_of_val(v));
        self.write(p, crate::dtype::as_bytes(v))
            .expect("fresh allocation");
        p
    }

    /// `n` elements at `p` (read at once: synchronise the streams that write it first).
    pub fn download<T: Element + Default>(&self, p: DevPtr, n: usize) -> Vec<T> {
        let bytes = self
            .read(p, n * std::mem::size_of::<T>(), None)
            .expect("valid allocation");
        let mut out = vec![T::default(); n];
        crate::dtype::as_bytes_mut(&mut out).copy_from_slice(&bytes);
        out
    }

    /// Queues `d` of busy work on `(device, stream)`, like a long kernel: work queued after it
    /// on that stream waits.
    pub fn busy(&self, device: i32, stream: StreamHandle, d: Duration) {
        self.queue(device, stream, Box::new(move || std::thread::sleep(d)))
            .expect("a valid device");
    }

    /// Queues a write of `v` at `p` on `(device, stream)` (an asynchronous host-to-device copy
    /// of data the twin keeps).
    pub fn write_async<T: Element>(&self, device: i32, stream: StreamHandle, p: DevPtr, v: &[T]) {
        let (me, data) = (self.clone(), crate::dtype::as_bytes(v).to_vec());
        self.queue(
            device,
            stream,
            Box::new(move || me.write(p, &data).expect("a valid allocation")),
        )
        .expect("a valid device");
    }

    /// Blocks until the work queued so far on `(device, stream)` is done, as
    /// `cuStreamSynchronize` (for tests; the engine polls events against its deadlines).
    /// Gives up after a minute: a stream stuck that long is a stuck test.
    pub fn sync(&self, device: i32, stream: StreamHandle) -> Result<(), DeviceError> {
        let ev = Arc::new(MemEvent::default());
        let e = ev.clone();
        self.queue(device, stream, Box::new(move || e.set()))?;
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut d = lock(&ev.done);
        while !*d {
            if std::time::Instant::now() >= deadline {
                return Err(DeviceError {
                    call: "sync",
                    detail: format!(
                        "stream {:#x} of device {device} still busy after 60 s",
                        stream.0
                    ),
                });
            }
            d = ev
                .cv
                .wait_timeout(d, Duration::from_millis(100))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        Ok(())
    }

    /// Host-device copies queued so far (staging shows up here, NCCL's path does not).
    pub fn copies(&self) -> usize {
        self.shared.copies.load(Ordering::Relaxed)
    }

    /// Copies a stream ran into host memory that had been freed (the twin skips them; a real
    /// device would have corrupted whatever lives there now).
    pub fn freed_host_writes(&self) -> usize {
        self.shared.freed_writes.load(Ordering::Relaxed)
    }

    /// Staging host memory handed out so far ([`DeviceApi::host_memory`]).
    pub fn host_allocs(&self) -> usize {
        self.shared.host_allocs.load(Ordering::Relaxed)
    }

    fn find<R>(
        &self,
        p: DevPtr,
        len: usize,
        device: Option<i32>,
        call: &'static str,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, DeviceError> {
        let mut mem = lock(&self.shared.mem);
        let fault = |detail: String| DeviceError { call, detail };
        let Some((&base, a)) = mem.range_mut(..=p.0).next_back() else {
            return Err(fault(format!(
                "CUDA_ERROR_ILLEGAL_ADDRESS: {:#x} is not device memory",
                p.0
            )));
        };
        let off = (p.0 - base) as usize;
        if off + len > a.bytes.len() {
            return Err(fault(format!(
                "CUDA_ERROR_ILLEGAL_ADDRESS: {len} bytes at {:#x} run past an allocation of {}",
                p.0,
                a.bytes.len()
            )));
        }
        if let Some(d) = device
            && d != a.device
        {
            return Err(fault(format!(
                "CUDA_ERROR_INVALID_VALUE: {:#x} is on device {}, not {d}",
                p.0, a.device
            )));
        }
        Ok(f(&mut a.bytes[off..off + len]))
    }

    pub(crate) fn read(
        &self,
        p: DevPtr,
        len: usize,
        device: Option<i32>,
    ) -> Result<Vec<u8>, DeviceError> {
        self.find(p, len, device, "read", |b| b.to_vec())
    }

    pub(crate) fn write(&self, p: DevPtr, data: &[u8]) -> Result<(), DeviceError> {
        self.find(p, data.len(), None, "write", |b| b.copy_from_slice(data))
    }

    /// Queues `task` on `(device, stream)`, starting the stream's thread on first use.
    pub(crate) fn queue(
        &self,
        device: i32,
        stream: StreamHandle,
        task: Task,
    ) -> Result<(), DeviceError> {
        if device < 0 || device as usize >= self.shared.devices {
            return Err(DeviceError {
                call: "stream",
                detail: format!(
                    "CUDA_ERROR_INVALID_DEVICE: device {device} of {}",
                    self.shared.devices
                ),
            });
        }
        let mut streams = lock(&self.shared.streams);
        let tx = streams.entry((device, stream.0)).or_insert_with(|| {
            let (tx, rx) = channel::<Task>();
            std::thread::Builder::new()
                .name(format!("memgpu{device}:{}", stream.0))
                .spawn(move || {
                    while let Ok(t) = rx.recv() {
                        t();
                    }
                })
                .expect("spawn a stream thread");
            tx
        });
        tx.send(task).map_err(|_| DeviceError {
            call: "stream",
            detail: "the stream's thread is gone".into(),
        })
    }
}

/// Twin device memory from [`DeviceApi::device_memory`]: freed (forgotten) when dropped.
struct TwinAlloc {
    gpu: MemGpu,
    ptr: DevPtr,
    len: usize,
}

impl crate::device::DeviceMemory for TwinAlloc {
    fn ptr(&self) -> DevPtr {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for TwinAlloc {
    fn drop(&mut self) {
        lock(&self.gpu.shared.mem).remove(&self.ptr.0);
    }
}

impl DeviceApi for MemGpu {
    fn describe(&self) -> String {
        format!("in-memory GPU twin, {} devices", self.shared.devices)
    }

    fn device_memory(
        &self,
        device: i32,
        bytes: usize,
    ) -> Result<Box<dyn crate::device::DeviceMemory>, DeviceError> {
        if device < 0 || device as usize >= self.shared.devices {
            return Err(DeviceError {
                call: "cuMemAlloc",
                detail: format!(
                    "CUDA_ERROR_INVALID_DEVICE: device {device} of {}",
                    self.shared.devices
                ),
            });
        }
        Ok(Box::new(TwinAlloc {
            gpu: self.clone(),
            ptr: self.alloc(device, bytes),
            len: bytes,
        }))
    }

    fn host_memory(&self, bytes: usize) -> Result<Box<dyn crate::device::HostMemory>, DeviceError> {
        self.shared.host_allocs.fetch_add(1, Ordering::Relaxed);
        let buf = vec![0u64; bytes.div_ceil(8)];
        // Its addresses are live again (the allocator may reuse a freed buffer's).
        let (start, end) = (buf.as_ptr() as usize, buf.as_ptr() as usize + buf.len() * 8);
        lock(&self.shared.freed_host).retain(|&(s, e)| e <= start || s >= end);
        Ok(Box::new(TwinHost {
            buf,
            shared: self.shared.clone(),
        }))
    }

    fn device_count(&self) -> Result<usize, DeviceError> {
        Ok(self.shared.devices)
    }

    fn new_stream(&self, _device: i32) -> Result<StreamHandle, DeviceError> {
        Ok(StreamHandle(
            self.shared.next_stream.fetch_add(1, Ordering::Relaxed) << 8,
        ))
    }

    fn record(
        &self,
        device: i32,
        stream: StreamHandle,
    ) -> Result<Box<dyn DeviceEvent>, DeviceError> {
        let ev = Arc::new(MemEvent::default());
        let e = ev.clone();
        self.queue(device, stream, Box::new(move || e.set()))?;
        Ok(Box::new(EventRef(ev)))
    }

    fn wait(
        &self,
        device: i32,
        stream: StreamHandle,
        event: &dyn DeviceEvent,
    ) -> Result<(), DeviceError> {
        let ev = event
            .as_any()
            .downcast_ref::<EventRef>()
            .ok_or_else(|| DeviceError {
                call: "cuStreamWaitEvent",
                detail: "not an event of this twin".into(),
            })?
            .0
            .clone();
        self.queue(device, stream, Box::new(move || ev.wait()))
    }

    unsafe fn to_host(
        &self,
        device: i32,
        stream: StreamHandle,
        src: DevPtr,
        dst: *mut u8,
        len: usize,
    ) -> Result<(), DeviceError> {
        // Fault at once on a bad address (a real device would fault when the copy runs).
        self.find(src, len, Some(device), "cuMemcpyDtoHAsync", |_| ())?;
        self.shared.copies.fetch_add(1, Ordering::Relaxed);
        let (me, dst) = (self.clone(), dst as usize);
        self.queue(
            device,
            stream,
            Box::new(move || {
                let bytes = me.read(src, len, None).expect("checked when queued");
                let freed = lock(&me.shared.freed_host)
                    .iter()
                    .any(|&(s, e)| dst < e && dst + len > s);
                if freed {
                    me.shared.freed_writes.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                // SAFETY: the caller keeps `dst` valid for `len` bytes until the copy is done.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst as *mut u8, len) };
            }),
        )
    }

    unsafe fn to_device(
        &self,
        device: i32,
        stream: StreamHandle,
        src: *const u8,
        dst: DevPtr,
        len: usize,
    ) -> Result<(), DeviceError> {
        self.find(dst, len, Some(device), "cuMemcpyHtoDAsync", |_| ())?;
        self.shared.copies.fetch_add(1, Ordering::Relaxed);
        let (me, src) = (self.clone(), src as usize);
        self.queue(
            device,
            stream,
            Box::new(move || {
                // SAFETY: the caller keeps `src` valid for `len` bytes until the copy is done.
                let data = unsafe { std::slice::from_raw_parts(src as *const u8, len) };
                me.write(dst, data).expect("checked when queued");
            }),
        )
    }
}
