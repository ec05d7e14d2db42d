//! Where `libnccl.so.2` is looked for, in which order, and how it is opened.
//!
//! 1. `DTCOMM_NCCL_LIBRARY`: a path. When set it is the only place tried, and its failure is
//!    the error.
//! 2. The soname already loaded in this process (torch's NCCL, for one), found with
//!    `dlopen("libnccl.so.2", RTLD_NOLOAD)`, so a process never holds two NCCLs.
//! 3. Each directory of `DTCOMM_NCCL_SEARCH_PATH` (colon-separated): `DIR/libnccl.so.2`, or
//!    `DIR/nvidia/nccl/lib/libnccl.so.2` when `DIR` is a `site-packages`.
//! 4. The active virtual environment's wheel:
//!    `$VIRTUAL_ENV/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2`.
//! 5. The system: `libnccl.so.2` through the dynamic loader (`LD_LIBRARY_PATH`, `ld.so.cache`).
//!
//! Every library is opened `RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE`: NCCL starts threads
//! (`ncclGetUniqueId` starts the bootstrap root's), so it must never be unmapped again.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use libloading::Library;

use crate::error::{Attempt, Failure};

pub use crate::source::{ENV_LIBRARY, ENV_SEARCH_PATH, ENV_VIRTUAL_ENV, SONAME, Source};

/// What the search looks at; [`SearchConfig::from_env`] fills it from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchConfig {
    /// `DTCOMM_NCCL_LIBRARY`: when set, the only library tried.
    pub library: Option<PathBuf>,
    /// `DTCOMM_NCCL_SEARCH_PATH`, split at colons; `None` when unset.
    pub search_path: Option<Vec<PathBuf>>,
    /// `VIRTUAL_ENV`.
    pub virtual_env: Option<PathBuf>,
    /// Whether to take a `libnccl.so.2` already loaded in the process (step 2).
    pub already_loaded: bool,
    /// Whether to ask the dynamic loader last (step 5).
    pub system: bool,
}

impl SearchConfig {
    /// The search the environment asks for, with every step on. Empty variables count as
    /// unset.
    pub fn from_env() -> Self {
        let var = |name| std::env::var_os(name).filter(|value: &OsString| !value.is_empty());
        SearchConfig {
            library: var(ENV_LIBRARY).map(PathBuf::from),
            search_path: var(ENV_SEARCH_PATH).map(|list| {
                std::env::split_paths(&list)
                    .filter(|d| !d.as_os_str().is_empty())
                    .collect()
            }),
            virtual_env: var(ENV_VIRTUAL_ENV).map(PathBuf::from),
            already_loaded: true,
            system: true,
        }
    }
}

/// One step of the search: a library to open, or a place ruled out before opening anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Try to open this path (or soname).
    Open {
        /// The search step.
        source: Source,
        /// What is given to `dlopen`.
        target: PathBuf,
    },
    /// Nothing to open here; recorded in the report.
    Skip(Attempt),
}

/// The search as an ordered list of steps, checking the file system for the directory
/// steps. With `DTCOMM_NCCL_LIBRARY` set, that library is the only step.
pub fn plan(config: &SearchConfig) -> Vec<Step> {
    if let Some(path) = &config.library {
        return vec![Step::Open {
            source: Source::Library,
            target: path.clone(),
        }];
    }
    let mut steps = Vec::new();
    if config.already_loaded {
        steps.push(Step::Open {
            source: Source::AlreadyLoaded,
            target: SONAME.into(),
        });
    }
    match &config.search_path {
        None => steps.push(skip(
            Source::SearchPath,
            ENV_SEARCH_PATH,
            Failure::NotSet(ENV_SEARCH_PATH),
        )),
        Some(dirs) => {
            for dir in dirs {
                steps.push(in_dir(Source::SearchPath, dir));
            }
        }
    }
    match &config.virtual_env {
        None => steps.push(skip(
            Source::VirtualEnv,
            "$VIRTUAL_ENV/lib/python3*/site-packages/nvidia/nccl/lib",
            Failure::NotSet(ENV_VIRTUAL_ENV),
        )),
        Some(venv) => steps.extend(in_venv(venv)),
    }
    if config.system {
        steps.push(Step::Open {
            source: Source::System,
            target: SONAME.into(),
        });
    }
    steps
}

fn skip(source: Source, place: impl Into<PathBuf>, failure: Failure) -> Step {
    Step::Skip(Attempt {
        source,
        place: place.into(),
        failure,
    })
}

/// `DIR/libnccl.so.2`, else `DIR/nvidia/nccl/lib/libnccl.so.2` (DIR is a `site-packages`).
fn in_dir(source: Source, dir: &Path) -> Step {
    let direct = dir.join(SONAME);
    let wheel = dir.join("nvidia/nccl/lib").join(SONAME);
    if direct.exists() {
        Step::Open {
            source,
            target: direct,
        }
    } else if wheel.exists() {
        Step::Open {
            source,
            target: wheel,
        }
    } else {
        skip(source, direct, Failure::Missing)
    }
}

/// `VENV/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2`, each Python in name order.
fn in_venv(venv: &Path) -> Vec<Step> {
    let lib = venv.join("lib");
    let mut pythons: Vec<PathBuf> = std::fs::read_dir(&lib)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("python3"))
        .map(|entry| entry.path())
        .collect();
    pythons.sort();
    let found: Vec<Step> = pythons
        .iter()
        .map(|python| python.join("site-packages/nvidia/nccl/lib").join(SONAME))
        .filter(|path| path.exists())
        .map(|target| Step::Open {
            source: Source::VirtualEnv,
            target,
        })
        .collect();
    if found.is_empty() {
        let pattern = lib
            .join("python3*/site-packages/nvidia/nccl/lib")
            .join(SONAME);
        vec![skip(Source::VirtualEnv, pattern, Failure::Missing)]
    } else {
        found
    }
}

/// Opens one step's library (`RTLD_NOLOAD` for [`Source::AlreadyLoaded`]).
pub(crate) fn open(source: Source, target: &Path) -> Result<Library, Failure> {
    use libloading::os::unix::{Library as UnixLibrary, RTLD_LOCAL, RTLD_NOW};
    let flags = RTLD_NOW | RTLD_LOCAL | libc::RTLD_NODELETE;
    if source == Source::AlreadyLoaded {
        // SAFETY: with `RTLD_NOLOAD`, `dlopen` maps nothing and runs no initialisers: it only hands
        // out another reference to an object already in the process, whose initialisers ran when it
        // was loaded.
        return unsafe { UnixLibrary::open(Some(target), flags | libc::RTLD_NOLOAD) }
            .map(Library::from)
            .map_err(|_| Failure::NotLoaded);
    }
    // SAFETY: opening runs the library's initialisers, arbitrary code, which is what loading NCCL
    // at run time means: the files tried are the ones the user (`DTCOMM_NCCL_LIBRARY`, the search
    // path) or the environment (the venv's NVIDIA wheel, the loader's path) names as NCCL.
    // `RTLD_NODELETE` keeps it mapped for the rest of the process, so no pointer into it can
    // dangle.
    unsafe { UnixLibrary::open(Some(target), flags) }
        .map(Library::from)
        .map_err(|err| Failure::Open(err.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> Self {
            let dir =
                std::env::temp_dir().join(format!("dtcomm-nccl-sys-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
        fn touch(&self, relative: &str) -> PathBuf {
            let path = self.0.join(relative);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, b"not a library").unwrap();
            path
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn opens(steps: &[Step]) -> Vec<(Source, PathBuf)> {
        steps
            .iter()
            .filter_map(|step| match step {
                Step::Open { source, target } => Some((*source, target.clone())),
                Step::Skip(_) => None,
            })
            .collect()
    }

    fn config() -> SearchConfig {
        SearchConfig {
            library: None,
            search_path: None,
            virtual_env: None,
            already_loaded: true,
            system: true,
        }
    }

    #[test]
    fn library_variable_is_the_only_step() {
        let config = SearchConfig {
            library: Some("/opt/nccl/libnccl.so.2".into()),
            search_path: Some(vec!["/somewhere".into()]),
            virtual_env: Some("/venv".into()),
            ..config()
        };
        assert_eq!(
            plan(&config),
            vec![Step::Open {
                source: Source::Library,
                target: "/opt/nccl/libnccl.so.2".into()
            }]
        );
    }

    #[test]
    fn order_is_loaded_search_path_venv_system() {
        let tmp = TempDir::new("order");
        let first = tmp.touch("first/libnccl.so.2");
        let site = tmp.touch("site-packages/nvidia/nccl/lib/libnccl.so.2");
        let venv12 = tmp.touch("venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2");
        let venv11 = tmp.touch("venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2");
        tmp.touch("venv/lib/python2.7/site-packages/nvidia/nccl/lib/libnccl.so.2");
        let empty = tmp.0.join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let config = SearchConfig {
            search_path: Some(vec![
                empty.clone(),
                tmp.0.join("first"),
                tmp.0.join("site-packages"),
            ]),
            virtual_env: Some(tmp.0.join("venv")),
            ..config()
        };
        let steps = plan(&config);
        assert_eq!(
            opens(&steps),
            vec![
                (Source::AlreadyLoaded, PathBuf::from(SONAME)),
                (Source::SearchPath, first),
                (Source::SearchPath, site),
                (Source::VirtualEnv, venv11),
                (Source::VirtualEnv, venv12),
                (Source::System, PathBuf::from(SONAME)),
            ]
        );
        // The empty directory is reported, in its place (after the already-loaded probe).
        assert_eq!(
            steps[1],
            Step::Skip(Attempt {
                source: Source::SearchPath,
                place: empty.join(SONAME),
                failure: Failure::Missing,
            })
        );
    }

    #[test]
    fn unset_and_empty_places_are_reported() {
        let tmp = TempDir::new("unset");
        let steps = plan(&SearchConfig {
            already_loaded: false,
            system: false,
            ..config()
        });
        assert_eq!(steps.len(), 2);
        assert!(
            matches!(&steps[0], Step::Skip(a) if a.failure == Failure::NotSet(ENV_SEARCH_PATH))
        );
        assert!(
            matches!(&steps[1], Step::Skip(a) if a.failure == Failure::NotSet(ENV_VIRTUAL_ENV))
        );

        let steps = plan(&SearchConfig {
            virtual_env: Some(tmp.0.clone()),
            already_loaded: false,
            system: false,
            ..config()
        });
        assert!(matches!(
            &steps[1],
            Step::Skip(Attempt { source: Source::VirtualEnv, failure: Failure::Missing, place })
                if place.starts_with(&tmp.0)
        ));
    }

    #[test]
    fn opening_reports_dlerror_and_noload() {
        let tmp = TempDir::new("open");
        let fake = tmp.touch("libnccl.so.2");
        match open(Source::SearchPath, &fake) {
            Err(Failure::Open(text)) => assert!(text.contains(&*fake.to_string_lossy()), "{text}"),
            other => panic!("{other:?}"),
        }
        let missing = tmp.0.join("nope/libnccl.so.2");
        assert!(matches!(
            open(Source::Library, &missing),
            Err(Failure::Open(_))
        ));
        // Nothing in a unit-test process has loaded this soname.
        let unloaded = Path::new("libdtcomm-no-such-library.so.7");
        assert_eq!(
            open(Source::AlreadyLoaded, unloaded).err(),
            Some(Failure::NotLoaded)
        );
    }
}
