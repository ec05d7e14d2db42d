//! Finding the real NCCL of the project's venv, and scratch directories.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use dtcomm_nccl_sys::Version;

/// The `nvidia-nccl` wheel installed in a venv: its library and the version its header
/// declares.
pub struct Wheel {
    /// The venv (what `VIRTUAL_ENV` would be).
    pub venv: PathBuf,
    /// `.../site-packages/nvidia/nccl/lib/libnccl.so.2`.
    pub library: PathBuf,
    /// `NCCL_MAJOR.NCCL_MINOR.NCCL_PATCH` of `.../nvidia/nccl/include/nccl.h`.
    pub header_version: Version,
}

impl Wheel {
    /// The directory holding the library.
    pub fn lib_dir(&self) -> &Path {
        self.library.parent().unwrap()
    }
}

/// The venv's NCCL: `$DTCOMM_VENV`, else the repository's `.venv`, else `$VIRTUAL_ENV`.
/// `Err` says why not, for the test to print as its reason to skip.
pub fn wheel() -> Result<Wheel, String> {
    let root = Path::new(
        &std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../..");
    let venvs: Vec<PathBuf> = [
        std::env::var_os("DTCOMM_VENV").map(PathBuf::from),
        Some(root.join(".venv")),
        std::env::var_os("VIRTUAL_ENV").map(PathBuf::from),
    ]
    .into_iter()
    .flatten()
    .collect();
    for venv in &venvs {
        let Ok(entries) = std::fs::read_dir(venv.join("lib")) else {
            continue;
        };
        for entry in entries.flatten() {
            let nccl = entry.path().join("site-packages/nvidia/nccl");
            let library = nccl.join("lib/libnccl.so.2");
            let header = nccl.join("include/nccl.h");
            if library.exists() && header.exists() {
                let header_version = header_version(&header)?;
                let venv = venv.canonicalize().unwrap();
                let library = library.canonicalize().unwrap();
                return Ok(Wheel {
                    venv,
                    library,
                    header_version,
                });
            }
        }
    }
    Err(format!(
        "no nvidia-nccl wheel (lib/python3*/site-packages/nvidia/nccl) in {venvs:?}; set \
         DTCOMM_VENV to a venv that has torch's NCCL"
    ))
}

fn header_version(header: &Path) -> Result<Version, String> {
    let text = std::fs::read_to_string(header).map_err(|e| format!("{}: {e}", header.display()))?;
    let define = |name: &str| -> Result<u32, String> {
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("#define {name} ")))
            .and_then(|value| value.trim().parse().ok())
            .ok_or_else(|| format!("{}: no #define {name}", header.display()))
    };
    Ok(Version::new(
        define("NCCL_MAJOR")?,
        define("NCCL_MINOR")?,
        define("NCCL_PATCH")?,
    ))
}

/// The venv's NCCL, or `None` after printing why the calling test is skipped.
pub fn wheel_or_skip(test: &str) -> Option<Wheel> {
    match wheel() {
        Ok(wheel) => Some(wheel),
        Err(why) => {
            eprintln!("SKIPPED {test}: {why}");
            None
        }
    }
}

/// A scratch directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A fresh directory named after the test.
    pub fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("dtcomm-nccl-sys-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    /// A subdirectory holding a `libnccl.so.2` that is not a library.
    pub fn bogus_nccl(&self, name: &str) -> PathBuf {
        let dir = self.0.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("libnccl.so.2"), b"not a library").unwrap();
        dir
    }

    /// An empty subdirectory.
    pub fn empty(&self, name: &str) -> PathBuf {
        let dir = self.0.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
