//! A PMIx client, loaded at run time: the few calls dtcomm needs from the PMIx server that
//! Open MPI's `mpirun` (and Slurm's `srun --mpi=pmix`, PRRTE) runs beside every rank — put a
//! key, commit it, fence with the other ranks, get a key another rank put.
//!
//! Nothing links against `libpmix`: it is opened with `libloading` on first use, from
//! `DTCOMM_PMIX_LIBRARY`, else the copy already loaded in the process, else `libpmix.so.2` on
//! the library path, else under `OPAL_PREFIX` (Open MPI 5 ships its own). The structures below
//! are PMIx's `pmix_proc_t`, `pmix_value_t` and `pmix_info_t`, whose layout has been stable
//! since PMIx 2 (checked against PMIx 4.2.2's headers: 260, 32 and 552 bytes).
//!
//! Open MPI counts a process that initialised PMIx and exits without finalising it as an
//! abnormal termination (and `mpirun` then fails the job), so the client is finalised at
//! process exit (`atexit`).
//!
//! Every blocking call runs on a helper thread and is waited for until a deadline, besides the
//! `pmix.timeout` PMIx is given: a server that never answers cannot hang the caller.

use std::ffi::{CStr, CString, c_char, c_int};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// `PMIX_MAX_NSLEN + 1`.
const NSLEN: usize = 256;
/// `PMIX_MAX_KEYLEN + 1`.
pub const KEYLEN: usize = 512;
/// `PMIX_GLOBAL`: visible to every rank of the job, on every host.
const SCOPE_GLOBAL: u8 = 3;
/// `PMIX_STRING`.
const TYPE_STRING: u16 = 3;
/// `PMIX_INT`.
const TYPE_INT: u16 = 6;
/// `PMIX_ERR_TIMEOUT`.
const ERR_TIMEOUT: c_int = -24;

/// `pmix_proc_t`: a namespace and a rank in it.
#[repr(C)]
#[derive(Clone, Copy)]
struct Proc {
    nspace: [u8; NSLEN],
    rank: u32,
}

/// `pmix_value_t`: a type tag and a union, of which only a string and an int are used here.
#[repr(C)]
#[derive(Clone, Copy)]
struct Value {
    kind: u16,
    data: [u64; 3],
}

/// `pmix_info_t`: a key, directive flags and a value.
#[repr(C)]
#[derive(Clone, Copy)]
struct Info {
    key: [u8; KEYLEN],
    flags: u32,
    value: Value,
}

const _: () = assert!(std::mem::size_of::<Proc>() == 260);
const _: () = assert!(std::mem::size_of::<Value>() == 32);
const _: () = assert!(std::mem::size_of::<Info>() == 552);
const _: () = assert!(std::mem::offset_of!(Info, value) == 520);

impl Info {
    /// `pmix.timeout` in whole seconds (at least one).
    fn timeout(t: Duration) -> Info {
        let mut key = [0u8; KEYLEN];
        key[..12].copy_from_slice(b"pmix.timeout");
        let secs = t.as_secs_f64().ceil().clamp(1.0, f64::from(i32::MAX)) as i32;
        Info {
            key,
            flags: 0,
            value: Value {
                kind: TYPE_INT,
                data: [secs as u32 as u64, 0, 0],
            },
        }
    }
}

type InitFn = unsafe extern "C" fn(*mut Proc, *mut Info, usize) -> c_int;
type FinalizeFn = unsafe extern "C" fn(*const Info, usize) -> c_int;
type PutFn = unsafe extern "C" fn(u8, *const c_char, *mut Value) -> c_int;
type CommitFn = unsafe extern "C" fn() -> c_int;
type FenceFn = unsafe extern "C" fn(*const Proc, usize, *const Info, usize) -> c_int;
type GetFn =
    unsafe extern "C" fn(*const Proc, *const c_char, *const Info, usize, *mut *mut Value) -> c_int;
type ErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;
type VersionFn = unsafe extern "C" fn() -> *const c_char;

/// The PMIx functions used, resolved once.
struct Fns {
    init: InitFn,
    finalize: FinalizeFn,
    put: PutFn,
    commit: CommitFn,
    fence: FenceFn,
    get: GetFn,
    error_string: ErrorStringFn,
    version: VersionFn,
}

/// A PMIx client: the library, initialised, and this process's identity in its job.
pub struct Pmix {
    fns: Fns,
    path: String,
    me: Proc,
    _lib: libloading::Library,
}

// SAFETY: PMIx's client calls are thread safe (its progress thread serialises them); the
// struct holds only function pointers, the library handle and plain data.
unsafe impl Send for Pmix {}
// SAFETY: as above.
unsafe impl Sync for Pmix {}

/// The process's client, once started.
static CLIENT: OnceLock<Result<Arc<Pmix>, String>> = OnceLock::new();

/// Set when a call was given up on at its deadline: it may still be pending inside PMIx, and
/// `PMIx_Finalize` would wait for it.
static ABANDONED: AtomicBool = AtomicBool::new(false);

/// `PMIx_Finalize` at process exit, once, if the client was started and nothing is pending
/// (after a call given up on, the process exits unfinalised and `mpirun` reports it, which
/// is right: it failed), itself bounded.
extern "C" fn finalize_at_exit() {
    if ABANDONED.load(Ordering::Acquire) {
        return;
    }
    if let Some(Ok(p)) = CLIENT.get() {
        let finalize = p.fns.finalize;
        // SAFETY: an initialised client, finalised once, with no infos.
        let _ = bounded(Duration::from_secs(5), "PMIx_Finalize", move || unsafe {
            finalize(std::ptr::null(), 0)
        });
    }
}

/// Where `libpmix` is looked for, in order (pure: `env` is the lookup).
pub fn candidates(env: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(p) = env("DTCOMM_PMIX_LIBRARY").filter(|p| !p.trim().is_empty()) {
        out.push(p);
        return out;
    }
    out.push("libpmix.so.2".to_owned());
    if let Some(prefix) = env("OPAL_PREFIX").filter(|p| !p.trim().is_empty()) {
        out.push(format!("{prefix}/lib/libpmix.so.2"));
    }
    out.push("/usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so.2".to_owned());
    out
}

fn open(path: &str) -> Result<libloading::Library, String> {
    #[cfg(unix)]
    {
        use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
        // SAFETY: libpmix's initialisers only set up its own state.
        unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) }
            .map(Into::into)
            .map_err(|e| e.to_string())
    }
    #[cfg(not(unix))]
    {
        // SAFETY: as above.
        unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())
    }
}

fn symbol<T: Copy>(lib: &libloading::Library, path: &str, name: &str) -> Result<T, String> {
    // SAFETY: each type above is the C signature of the PMIx function of that name.
    unsafe { lib.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| format!("{path} has no {name}: {e}"))
}

/// What a PMIx call returned, as text.
fn describe(fns: &Fns, code: c_int) -> String {
    // SAFETY: PMIx_Error_string returns a static string for any code.
    let p = unsafe { (fns.error_string)(code) };
    if p.is_null() {
        return format!("PMIx status {code}");
    }
    // SAFETY: a NUL-terminated static string.
    let text = unsafe { CStr::from_ptr(p) }.to_string_lossy();
    format!("{text} (PMIx status {code})")
}

/// Runs `f` on a helper thread and waits for it until `limit`: a blocking library call that
/// never returns cannot hang the caller (the thread is left behind; the call fails).
fn bounded<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("dtcomm-pmix".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| format!("{what}: cannot start a thread: {e}"))?;
    rx.recv_timeout(limit).map_err(|_| {
        ABANDONED.store(true, Ordering::Release);
        format!("{what}: PMIx did not answer within {limit:?}")
    })
}

impl Pmix {
    /// The process's client: loaded and initialised on first use (once per process; PMIx
    /// allows one initialisation, kept until exit), or why it cannot be.
    pub fn get(timeout: Duration) -> Result<Arc<Pmix>, String> {
        CLIENT
            .get_or_init(|| {
                let p = Pmix::start(&|k| std::env::var(k).ok(), timeout)?;
                // SAFETY: registers a plain extern "C" function.
                if unsafe { libc::atexit(finalize_at_exit) } != 0 {
                    tracing::warn!("dtcomm: cannot finalise PMIx at exit (atexit failed)");
                }
                Ok(Arc::new(p))
            })
            .clone()
    }

    fn start(env: &dyn Fn(&str) -> Option<String>, timeout: Duration) -> Result<Pmix, String> {
        let mut tried = Vec::new();
        let (lib, path) = candidates(env)
            .into_iter()
            .find_map(|p| match open(&p) {
                Ok(l) => Some((l, p)),
                Err(e) => {
                    tried.push(e);
                    None
                }
            })
            .ok_or_else(|| {
                format!(
                    "cannot load the PMIx client library ({}); set DTCOMM_PMIX_LIBRARY to \
                     libpmix.so.2, or give every rank a rendezvous endpoint \
                     (mpirun -x DTCOMM_RDZV_ENDPOINT=host:port)",
                    tried.join("; ")
                )
            })?;
        let fns = Fns {
            init: symbol(&lib, &path, "PMIx_Init")?,
            finalize: symbol(&lib, &path, "PMIx_Finalize")?,
            put: symbol(&lib, &path, "PMIx_Put")?,
            commit: symbol(&lib, &path, "PMIx_Commit")?,
            fence: symbol(&lib, &path, "PMIx_Fence")?,
            get: symbol(&lib, &path, "PMIx_Get")?,
            error_string: symbol(&lib, &path, "PMIx_Error_string")?,
            version: symbol(&lib, &path, "PMIx_Get_version")?,
        };
        let init = fns.init;
        let (code, me) = bounded(timeout, "PMIx_Init", move || {
            let mut me = Proc {
                nspace: [0; NSLEN],
                rank: 0,
            };
            // SAFETY: `me` is a pmix_proc_t PMIx fills in; no infos.
            let code = unsafe { init(&mut me, std::ptr::null_mut(), 0) };
            (code, me)
        })?;
        if code != 0 {
            return Err(format!(
                "PMIx_Init ({path}): {}: is this process started by mpirun (or srun \
                 --mpi=pmix)?",
                describe(&fns, code)
            ));
        }
        let p = Pmix {
            fns,
            path,
            me,
            _lib: lib,
        };
        tracing::debug!(
            "dtcomm: PMIx client {} ({}), namespace {:?} rank {}",
            p.version(),
            p.path,
            p.namespace(),
            p.rank()
        );
        Ok(p)
    }

    /// The library's version text.
    pub fn version(&self) -> String {
        // SAFETY: PMIx_Get_version returns a static string.
        let p = unsafe { (self.fns.version)() };
        if p.is_null() {
            return "unknown".into();
        }
        // SAFETY: a NUL-terminated static string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// This process's namespace (its job).
    pub fn namespace(&self) -> String {
        let end = self.me.nspace.iter().position(|&b| b == 0).unwrap_or(NSLEN);
        String::from_utf8_lossy(&self.me.nspace[..end]).into_owned()
    }

    /// This process's rank in its namespace.
    pub fn rank(&self) -> u32 {
        self.me.rank
    }

    fn key(key: &str) -> Result<CString, String> {
        if key.len() >= KEYLEN {
            return Err(format!(
                "PMIx key {key:?} is longer than {} bytes",
                KEYLEN - 1
            ));
        }
        CString::new(key).map_err(|_| format!("PMIx key {key:?} has a NUL byte"))
    }

    /// Puts `value` under `key` for every rank of the job and commits it.
    pub fn publish(&self, key: &str, value: &str) -> Result<(), String> {
        let k = Self::key(key)?;
        let v = CString::new(value).map_err(|_| format!("PMIx value {value:?} has a NUL byte"))?;
        let mut val = Value {
            kind: TYPE_STRING,
            data: [v.as_ptr() as u64, 0, 0],
        };
        // SAFETY: a valid key and a string value PMIx copies before returning.
        let code = unsafe { (self.fns.put)(SCOPE_GLOBAL, k.as_ptr(), &mut val) };
        if code != 0 {
            return Err(format!("PMIx_Put {key:?}: {}", describe(&self.fns, code)));
        }
        // SAFETY: no arguments.
        let code = unsafe { (self.fns.commit)() };
        if code != 0 {
            return Err(format!("PMIx_Commit: {}", describe(&self.fns, code)));
        }
        Ok(())
    }

    /// Waits until every rank of the job has reached a fence (their puts before it are then
    /// visible), until `timeout`.
    pub fn fence(self: &Arc<Self>, timeout: Duration) -> Result<(), String> {
        let me = self.clone();
        let code = bounded(timeout + Duration::from_secs(1), "PMIx_Fence", move || {
            let info = Info::timeout(timeout);
            // SAFETY: NULL procs: every rank of the caller's namespace; one info.
            unsafe { (me.fns.fence)(std::ptr::null(), 0, &info, 1) }
        })
        .map_err(|e| format!("{e}: not every rank reached its init (PMIx does not say which)"))?;
        match code {
            0 => Ok(()),
            ERR_TIMEOUT => Err(format!(
                "PMIx_Fence: not every rank reached its init within {timeout:?}"
            )),
            c => Err(format!("PMIx_Fence: {}", describe(&self.fns, c))),
        }
    }

    /// The string rank `rank` of this job put under `key`, waited for until `timeout`.
    pub fn lookup(
        self: &Arc<Self>,
        rank: u32,
        key: &str,
        timeout: Duration,
    ) -> Result<String, String> {
        let k = Self::key(key)?;
        let me = self.clone();
        let (code, text) = bounded(timeout + Duration::from_secs(1), "PMIx_Get", move || {
            let proc = Proc {
                nspace: me.me.nspace,
                rank,
            };
            let info = Info::timeout(timeout);
            let mut out: *mut Value = std::ptr::null_mut();
            // SAFETY: valid proc, key and info; PMIx allocates `out` with malloc.
            let code = unsafe { (me.fns.get)(&proc, k.as_ptr(), &info, 1, &mut out) };
            if code != 0 || out.is_null() {
                return (code, Err(String::new()));
            }
            // SAFETY: a pmix_value_t PMIx returned; its string and itself are freed below
            // as PMIX_VALUE_RELEASE does.
            let text = unsafe {
                let v = *out;
                let s = v.data[0] as usize as *mut c_char;
                let text = if v.kind == TYPE_STRING && !s.is_null() {
                    let t = CStr::from_ptr(s).to_string_lossy().into_owned();
                    libc::free(s.cast());
                    Ok(t)
                } else {
                    Err(format!("a value of PMIx type {}, not a string", v.kind))
                };
                libc::free(out.cast());
                text
            };
            (code, text)
        })?;
        match (code, text) {
            (0, Ok(t)) => Ok(t),
            (0, Err(e)) => Err(format!("PMIx_Get {key:?} of rank {rank}: {e}")),
            (c, _) => Err(format!(
                "PMIx_Get {key:?} of rank {rank}: {}",
                describe(&self.fns, c)
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_is_looked_for_where_the_variables_say() {
        let none = |_: &str| None;
        assert_eq!(candidates(&none)[0], "libpmix.so.2");
        let forced = |k: &str| (k == "DTCOMM_PMIX_LIBRARY").then(|| "/x/libpmix.so".to_owned());
        assert_eq!(candidates(&forced), ["/x/libpmix.so"]);
        let opal = |k: &str| (k == "OPAL_PREFIX").then(|| "/opt/ompi5".to_owned());
        assert_eq!(candidates(&opal)[1], "/opt/ompi5/lib/libpmix.so.2");
    }

    #[test]
    fn a_missing_library_is_a_clear_error() {
        let env =
            |k: &str| (k == "DTCOMM_PMIX_LIBRARY").then(|| "/nonexistent/libpmix.so.2".into());
        let e = Pmix::start(&env, Duration::from_secs(5))
            .err()
            .expect("no library");
        assert!(e.contains("/nonexistent/libpmix.so.2"), "{e}");
        assert!(e.contains("DTCOMM_RDZV_ENDPOINT"), "{e}");
    }

    #[test]
    fn the_timeout_info_carries_whole_seconds() {
        let i = Info::timeout(Duration::from_millis(1500));
        assert_eq!(&i.key[..13], b"pmix.timeout\0");
        assert_eq!((i.value.kind, i.value.data[0]), (TYPE_INT, 2));
        assert_eq!(Info::timeout(Duration::ZERO).value.data[0], 1);
    }

    #[test]
    fn keys_must_fit_pmix() {
        assert!(Pmix::key("dtcomm.run.1").is_ok());
        assert!(Pmix::key(&"k".repeat(KEYLEN)).is_err());
        assert!(Pmix::key("a\0b").is_err());
    }
}
