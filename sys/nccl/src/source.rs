//! Where a library came from and the names the search uses: its own file, so the search
//! (`load.rs`) and its errors (`error.rs`) share them without importing each other.

use std::fmt;

/// The soname every NCCL 2 release has.
pub const SONAME: &str = "libnccl.so.2";
/// The variable naming the one library to load.
pub const ENV_LIBRARY: &str = "DTCOMM_NCCL_LIBRARY";
/// The variable listing directories to search (colon-separated).
pub const ENV_SEARCH_PATH: &str = "DTCOMM_NCCL_SEARCH_PATH";
/// The variable an activated Python virtual environment sets.
pub const ENV_VIRTUAL_ENV: &str = "VIRTUAL_ENV";

/// Where a library came from: a step of the search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// `DTCOMM_NCCL_LIBRARY`.
    Library,
    /// Already loaded in this process.
    AlreadyLoaded,
    /// A directory of `DTCOMM_NCCL_SEARCH_PATH`.
    SearchPath,
    /// `$VIRTUAL_ENV`'s `nvidia-nccl` wheel.
    VirtualEnv,
    /// The dynamic loader's own search.
    System,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Library => ENV_LIBRARY,
            Source::AlreadyLoaded => "already loaded",
            Source::SearchPath => ENV_SEARCH_PATH,
            Source::VirtualEnv => ENV_VIRTUAL_ENV,
            Source::System => "system",
        })
    }
}
