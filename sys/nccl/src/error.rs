//! Why loading NCCL failed: every place the search tried, and what went wrong at each.

use std::fmt;
use std::path::PathBuf;

use crate::source::Source;
use crate::version::Version;

/// What went wrong at one place the search tried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// The variable that names this place is unset or empty.
    #[error("{0} is not set")]
    NotSet(&'static str),
    /// No `libnccl.so.2` at this place.
    #[error("no libnccl.so.2 there")]
    Missing,
    /// `libnccl.so.2` is not loaded in this process yet (the `RTLD_NOLOAD` probe).
    #[error("not loaded in this process")]
    NotLoaded,
    /// `dlopen` failed; the text is `dlerror()`'s.
    #[error("dlopen failed: {0}")]
    Open(String),
    /// The library lacks a symbol every supported NCCL has: it is not NCCL.
    #[error("not NCCL: required symbol {0} is missing")]
    MissingSymbol(&'static str),
    /// `ncclGetVersion` itself failed.
    #[error("ncclGetVersion failed with code {0}")]
    VersionCall(u32),
    /// `ncclGetVersion` returned something that is no version code.
    #[error("ncclGetVersion returned {0}, which is no NCCL version code")]
    BadVersion(i32),
    /// The library is older than [`Version::MINIMUM`].
    #[error("NCCL {found} is older than the minimum supported {minimum}")]
    TooOld {
        /// The library's version.
        found: Version,
        /// [`Version::MINIMUM`].
        minimum: Version,
    },
}

/// One place the search tried (or skipped, with the reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// Which step of the search this was.
    pub source: Source,
    /// The path or soname tried, or the pattern that matched nothing.
    pub place: PathBuf,
    /// Why it did not give a usable NCCL.
    pub failure: Failure,
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}",
            self.source,
            self.place.display(),
            self.failure
        )
    }
}

/// NCCL could not be loaded. Never a panic: every failure of the search ends here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// `DTCOMM_NCCL_LIBRARY` names a library, which is then the only place tried, and it is
    /// not a usable NCCL.
    #[error("DTCOMM_NCCL_LIBRARY={}: {failure}", path.display())]
    Library {
        /// The path from `DTCOMM_NCCL_LIBRARY`.
        path: PathBuf,
        /// What went wrong with it.
        failure: Failure,
    },
    /// A `libnccl.so.2` is already mapped in this process (torch's, say) but is not usable.
    /// The search stops there: a second NCCL next to it would have its calls bound to the
    /// first one's symbols.
    #[error("the libnccl.so.2 already loaded in this process is not usable: {failure}")]
    AlreadyLoaded {
        /// What is wrong with it.
        failure: Failure,
    },
    /// No place of the search gave a usable NCCL.
    #[error(
        "NCCL (libnccl.so.2) not found; tried, in order:{}",
        AttemptList(attempts)
    )]
    NotFound {
        /// Every place, in search order.
        attempts: Vec<Attempt>,
    },
}

impl LoadError {
    /// Every place tried, in order (the one for [`LoadError::Library`] and
    /// [`LoadError::AlreadyLoaded`]).
    pub fn attempts(&self) -> Vec<Attempt> {
        match self {
            LoadError::Library { path, failure } => vec![Attempt {
                source: Source::Library,
                place: path.clone(),
                failure: failure.clone(),
            }],
            LoadError::AlreadyLoaded { failure } => vec![Attempt {
                source: Source::AlreadyLoaded,
                place: crate::source::SONAME.into(),
                failure: failure.clone(),
            }],
            LoadError::NotFound { attempts } => attempts.clone(),
        }
    }
}

struct AttemptList<'a>(&'a [Attempt]);

impl fmt::Display for AttemptList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for attempt in self.0 {
            write!(f, "\n  - {attempt}")?;
        }
        Ok(())
    }
}
