//! [`Nccl`]: a loaded, checked NCCL and the calls that need no GPU.

use std::ffi::{CStr, OsStr, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use libloading::Library;

use crate::bindings::{ncclResult_t, ncclUniqueId};
use crate::error::{Attempt, Failure, LoadError};
use crate::load::{self, SearchConfig, Source, Step};
use crate::result::{NcclError, NcclResult, Status, classify};
use crate::symbols::{self, Probe, Symbols};
use crate::version::Version;

/// A loaded NCCL (at least [`Version::MINIMUM`]) and its function table.
///
/// Load it once per process and share it: it is `Send + Sync`, and the library stays mapped
/// for the rest of the process even after this is dropped (`RTLD_NODELETE`).
#[derive(Debug)]
pub struct Nccl {
    symbols: Symbols,
    version: Version,
    source: Source,
    path: PathBuf,
    skipped: Vec<Attempt>,
    _library: Library,
}

impl Nccl {
    /// Finds and loads NCCL as the environment says (see [`crate::load`] for the order).
    pub fn load() -> Result<Self, LoadError> {
        Self::load_with(&SearchConfig::from_env())
    }

    /// Finds and loads NCCL with an explicit search.
    ///
    /// A library that opens but is not a usable NCCL (a missing required symbol, too old)
    /// is recorded and the search goes on, except for `DTCOMM_NCCL_LIBRARY`, whose failure
    /// is the error, and an unusable `libnccl.so.2` already in the process, which ends the
    /// search ([`LoadError::AlreadyLoaded`]).
    pub fn load_with(config: &SearchConfig) -> Result<Self, LoadError> {
        let mut attempts = Vec::new();
        for step in load::plan(config) {
            match step {
                Step::Skip(attempt) => attempts.push(attempt),
                Step::Open { source, target } => match Self::open(source, &target) {
                    Ok(mut nccl) => {
                        nccl.skipped = attempts;
                        return Ok(nccl);
                    }
                    Err(failure) if source == Source::Library => {
                        return Err(LoadError::Library {
                            path: target,
                            failure,
                        });
                    }
                    Err(failure)
                        if source == Source::AlreadyLoaded && failure != Failure::NotLoaded =>
                    {
                        return Err(LoadError::AlreadyLoaded { failure });
                    }
                    Err(failure) => attempts.push(Attempt {
                        source,
                        place: target,
                        failure,
                    }),
                },
            }
        }
        Err(LoadError::NotFound { attempts })
    }

    /// Opens one candidate and checks it: `ncclGetVersion`, the minimum version, the
    /// required symbols, then the version-gated optional ones.
    fn open(source: Source, target: &Path) -> Result<Self, Failure> {
        let library = load::open(source, target)?;
        // SAFETY: `get_version` needs a `ncclGetVersion` with NCCL's signature. `library` is the
        // file the search found as NCCL (a `libnccl.so.2` on the search path, or the one the user
        // named): an object exporting that name is taken to be NCCL, the premise of this crate (a
        // wrong library named by the user is the one thing this cannot check).
        let get_version = unsafe { symbols::get_version(&library) }?;
        let mut code = 0;
        // SAFETY: `get_version` is `ncclGetVersion` (just resolved from `library`, which is alive
        // here), and `code` is a local `c_int` it writes once.
        let rc = unsafe { get_version(&mut code) };
        if rc != ncclResult_t::ncclSuccess {
            return Err(Failure::VersionCall(rc.0));
        }
        let version = Version::from_code(code).ok_or(Failure::BadVersion(code))?;
        if version < Version::MINIMUM {
            return Err(Failure::TooOld {
                found: version,
                minimum: Version::MINIMUM,
            });
        }
        // SAFETY: as for `get_version`: `library` is NCCL, and its own `ncclGetVersion` said
        // `version`, so each symbol resolved for that version has the signature the table gives it.
        // The table's pointers stay valid because `library` is kept in the returned `Nccl` and is
        // never unloaded anyway (`RTLD_NODELETE`).
        let symbols = unsafe { Symbols::resolve(&library, version) }?;
        let path = loaded_path(symbols.get_version as *const c_void)
            .unwrap_or_else(|| target.to_path_buf());
        Ok(Nccl {
            symbols,
            version,
            source,
            path,
            skipped: Vec::new(),
            _library: library,
        })
    }

    /// The library's version (`ncclGetVersion`, read at load).
    pub fn version(&self) -> Version {
        self.version
    }

    /// The step of the search that found the library.
    pub fn source(&self) -> Source {
        self.source
    }

    /// The file the library was mapped from (as the dynamic loader reports it).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The places the search tried, and why, before the one that worked.
    pub fn skipped(&self) -> &[Attempt] {
        &self.skipped
    }

    /// The resolved function table, for calls this crate does not wrap.
    pub fn symbols(&self) -> &Symbols {
        &self.symbols
    }

    /// Every optional function and whether this library has it.
    pub fn features(&self) -> Vec<Probe> {
        self.symbols.probes()
    }

    /// Whether the optional function `symbol` (e.g. `"ncclCommSplit"`) was resolved; `true`
    /// for the required ones.
    pub fn has(&self, symbol: &str) -> bool {
        Symbols::REQUIRED.contains(&symbol)
            || self
                .features()
                .iter()
                .any(|probe| probe.symbol == symbol && probe.available)
    }

    /// `ncclGetErrorString(code)`: NCCL's text for any code, known to it or not.
    pub fn error_string(&self, code: ncclResult_t) -> String {
        // SAFETY: `get_error_string` is `ncclGetErrorString` of the loaded library (never
        // unloaded); it takes any code by value (it has a default case) and returns a static string
        // or NULL.
        let text = unsafe { (self.symbols.get_error_string)(code) };
        if text.is_null() {
            return format!("unknown NCCL result code {}", code.0);
        }
        // SAFETY: `text` is non-NULL (checked) and points at one of NCCL's static NUL-terminated
        // strings, which live as long as the library (never unloaded); it is copied into a `String`
        // at once.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }

    /// `ncclGetLastError(NULL)`: the text of NCCL's last error, or `None` when there is
    /// none (or the library lacks the call).
    pub fn last_error(&self) -> Option<String> {
        let get_last_error = self.symbols.get_last_error?;
        // SAFETY: `get_last_error` is `ncclGetLastError`, present in this library (checked by `?`
        // above); a NULL communicator asks for the process-wide last error and is allowed. It
        // returns NULL or a NUL-terminated buffer owned by NCCL.
        let text = unsafe { get_last_error(std::ptr::null_mut()) };
        if text.is_null() {
            return None;
        }
        // SAFETY: `text` is non-NULL (checked) and NUL-terminated, owned by NCCL until its next
        // error on this thread; it is copied into a `String` before anything else calls NCCL.
        let text = unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned();
        (!text.is_empty()).then_some(text)
    }

    /// `ncclGetUniqueId`: a fresh 128-byte id for rank 0 to hand to every rank. Works
    /// without a GPU (it starts NCCL's bootstrap listener on this host).
    pub fn unique_id(&self) -> NcclResult<ncclUniqueId> {
        let mut id = ncclUniqueId { internal: [0; 128] };
        // SAFETY: `get_unique_id` is `ncclGetUniqueId` of the loaded library; `id` is a local
        // `ncclUniqueId` (the struct of the header) it writes once, and it needs no GPU.
        let rc = unsafe { (self.symbols.get_unique_id)(&mut id) };
        self.check("ncclGetUniqueId", rc)?;
        Ok(id)
    }

    /// Turns `function`'s return code into a [`Status`] or an [`NcclError`] carrying the
    /// code, `ncclGetErrorString` and `ncclGetLastError`.
    pub fn check(&self, function: &'static str, code: ncclResult_t) -> NcclResult<Status> {
        classify(code).map_err(|code| NcclError::Failed {
            function,
            code,
            message: self.error_string(code),
            last_error: self.last_error().unwrap_or_default(),
        })
    }

    /// An optional function, or [`NcclError::Unavailable`] naming it.
    pub(crate) fn optional<T>(&self, function: &'static str, symbol: Option<T>) -> NcclResult<T> {
        symbol.ok_or(NcclError::Unavailable {
            function,
            version: self.version,
        })
    }
}

/// The file that holds `address`, per `dladdr`.
fn loaded_path(address: *const c_void) -> Option<PathBuf> {
    // SAFETY: `Dl_info` is a C struct of pointers (null when zeroed) and no references or niches,
    // so all zeroes is a valid value; `dladdr` fills it before any field is read.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `dladdr` only looks `address` up in the loader's tables (it never dereferences it)
    // and writes `info`, a local it may fill.
    if unsafe { libc::dladdr(address, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: `dladdr` succeeded and `dli_fname` is non-NULL (both checked): a NUL-terminated path
    // owned by the loader for as long as the object is mapped, which the file holding `address`
    // (our library, never unloaded, or libc in the test) is; it is copied into a `PathBuf` at once.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    Some(PathBuf::from(OsStr::from_bytes(name.to_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Nccl>();
    }

    #[test]
    fn dladdr_names_the_file_of_a_symbol() {
        let path = loaded_path(libc::strlen as *const c_void).expect("libc is mapped");
        assert!(
            path.to_string_lossy().contains("libc"),
            "{}",
            path.display()
        );
    }
}
