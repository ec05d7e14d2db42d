//! `dtcomm::cuda::cuda_status()` on this machine, and (feature `cuda`) against a stand-in
//! `libcuda.so.1` built here from `tests/fake/fake_cuda.c`.
//!
//! The stand-in is found by the dynamic loader through `LD_LIBRARY_PATH`, which a process
//! reads when it starts: each case re-runs this test binary on one test (`child_reports`)
//! with the variables set, and checks the JSON it prints. NCCL is the venv's (`$DTCOMM_VENV`,
//! the repository's `.venv`, or `$VIRTUAL_ENV`); without one the NCCL checks are skipped with
//! a printed reason.

use std::path::{Path, PathBuf};
#[cfg(feature = "cuda")]
use std::process::Command;

use dtcomm::cuda::{NOT_BUILT, StatusOptions, cuda_status, cuda_status_with};

/// A venv with torch's NCCL wheel, if there is one.
fn venv() -> Option<PathBuf> {
    let root = Path::new(
        &std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("..");
    [
        std::env::var_os("DTCOMM_VENV").map(PathBuf::from),
        Some(root.join(".venv")),
        std::env::var_os("VIRTUAL_ENV").map(PathBuf::from),
    ]
    .into_iter()
    .flatten()
    .filter_map(|venv| venv.canonicalize().ok())
    .find(|venv| {
        std::fs::read_dir(venv.join("lib")).is_ok_and(|entries| {
            entries.flatten().any(|entry| {
                entry
                    .path()
                    .join("site-packages/nvidia/nccl/lib/libnccl.so.2")
                    .exists()
            })
        })
    })
}

fn options() -> StatusOptions {
    StatusOptions {
        python_prefix: venv(),
    }
}

#[test]
fn this_machine_gets_an_answer_never_a_panic() {
    let status = cuda_status();
    println!("{}", status.to_json());
    assert!(status.usable || status.reason.is_some());
    if !cfg!(feature = "cuda") {
        assert!(!status.built_with_cuda && !status.usable);
        assert_eq!(status.reason.as_deref(), Some(NOT_BUILT));
        assert_eq!(status.device_count, None);
        assert_eq!(status.nccl.error.as_deref(), Some(NOT_BUILT));
        return;
    }
    assert!(status.built_with_cuda);
    assert_eq!(status.cuda_api.as_deref(), Some("12.8"));
    if !status.driver.found {
        // No NVIDIA driver here: the reason says so, naming the library.
        let error = status.driver.error.as_deref().unwrap();
        assert!(error.starts_with("libcuda.so.1 "), "{error}");
        assert!(status.reason.as_deref().unwrap().contains(error));
        assert_eq!(status.device_count, None);
        assert!(!status.usable);
    }
}

#[cfg(feature = "cuda")]
#[test]
fn the_venvs_nccl_is_found_with_its_version_and_features() {
    let Some(venv) = venv() else {
        println!("SKIPPED the_venvs_nccl_is_found: no venv with the nvidia-nccl wheel");
        return;
    };
    let status = cuda_status_with(&StatusOptions {
        python_prefix: Some(venv.clone()),
    });
    let nccl = &status.nccl;
    assert!(nccl.found, "{:?}", nccl.error);
    assert_eq!(nccl.error, None);
    let path = nccl.path.as_deref().unwrap();
    assert!(path.ends_with("/nvidia/nccl/lib/libnccl.so.2"), "{path}");
    let version = nccl.version.as_deref().unwrap();
    assert!(version.starts_with("2."), "{version}");
    assert!(nccl.features.iter().any(|f| f == "ncclCommSplit"));
    // Found from the prefix (VIRTUAL_ENV unset), from VIRTUAL_ENV, or already mapped by an
    // earlier test of this process.
    let source = nccl.source.as_deref().unwrap();
    assert!(
        ["python prefix", "VIRTUAL_ENV", "already loaded"].contains(&source),
        "{source}"
    );
}

/// Runs `child_reports` in a fresh process with `env`, returning the JSON it printed.
#[cfg(feature = "cuda")]
fn child(env: &[(&str, &str)]) -> String {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "child_reports",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("DTCOMM_CUDA_STATUS_CHILD", "1")
        .env_remove("DTCOMM_NCCL_LIBRARY");
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "child failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .find_map(|line| line.split_once("STATUS ").map(|(_, json)| json))
        .unwrap_or_else(|| panic!("no STATUS line in {stdout}"))
        .to_string()
}

/// Not a test on its own: prints the status when run by [`child`].
#[test]
fn child_reports() {
    if std::env::var_os("DTCOMM_CUDA_STATUS_CHILD").is_none() {
        return;
    }
    println!("STATUS {}", cuda_status_with(&options()).to_json());
}

/// Builds the stand-in driver as `DIR/libcuda.so.1` (and `DIR/libcuda.so` linking to it), or
/// `None` after saying why not.
#[cfg(feature = "cuda")]
fn fake_driver(name: &str, defines: &[&str]) -> Option<PathBuf> {
    let dir = std::env::temp_dir().join(format!("dtcomm-fake-cuda-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let source = Path::new(
        &std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("tests/fake/fake_cuda.c");
    let built = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o"])
        .arg(dir.join("libcuda.so.1"))
        .args(defines)
        .arg(&source)
        .status();
    match built {
        Ok(status) => {
            // A compiler that runs and fails is a failure (a stale or missing source).
            assert!(status.success(), "cc {} failed: {status}", source.display());
            // cudarc tries `libcuda.so` before `libcuda.so.1`: without this link, a machine
            // with a real driver (first seen on an H100) loads the real one beside the fake.
            let link = dir.join("libcuda.so");
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink("libcuda.so.1", &link).unwrap();
            Some(dir)
        }
        Err(e) => {
            println!("SKIPPED fake driver {name}: no C compiler: {e}");
            None
        }
    }
}

#[cfg(feature = "cuda")]
fn library_path(dir: &Path) -> String {
    dir.display().to_string()
}

#[cfg(feature = "cuda")]
#[test]
fn a_driver_with_two_devices_and_nccl_is_usable() {
    let Some(dir) = fake_driver("two", &[]) else {
        return;
    };
    let json = child(&[
        ("LD_LIBRARY_PATH", &library_path(&dir)),
        ("FAKE_CUDA_DEVICES", "2"),
    ]);
    println!("{json}");
    assert!(json.contains("\"device_count\":2,"), "{json}");
    assert!(json.contains(&format!(
        "\"driver\":{{\"found\":true,\"path\":\"{}/libcuda.so.1\",\"version\":\"12.8\",\
         \"source\":\"system\",\"error\":null,",
        dir.display()
    )));
    if venv().is_some() {
        assert!(
            json.starts_with("{\"usable\":true,\"reason\":null,"),
            "{json}"
        );
    } else {
        println!("SKIPPED the usable half: no venv with the nvidia-nccl wheel");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[cfg(feature = "cuda")]
#[test]
fn a_driver_without_a_device_says_so() {
    let Some(dir) = fake_driver("nodevice", &[]) else {
        return;
    };
    let json = child(&[
        ("LD_LIBRARY_PATH", &library_path(&dir)),
        ("FAKE_CUDA_INIT", "100"),
    ]);
    println!("{json}");
    assert!(
        json.starts_with(
            "{\"usable\":false,\"reason\":\"cuInit failed: CUDA_ERROR_NO_DEVICE (100): no \
             CUDA-capable device is detected"
        ),
        "{json}"
    );
    assert!(json.contains("\"device_count\":0,"), "{json}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[cfg(feature = "cuda")]
#[test]
fn a_driver_missing_a_function_is_named_not_called() {
    let Some(dir) = fake_driver("nocount", &["-DNO_DEVICE_GET_COUNT"]) else {
        return;
    };
    let json = child(&[("LD_LIBRARY_PATH", &library_path(&dir))]);
    println!("{json}");
    assert!(
        json.contains(&format!(
            "\"error\":\"the CUDA driver library {}/libcuda.so.1 lacks cuDeviceGetCount (too \
             old, or not the driver)\"",
            dir.display()
        )),
        "{json}"
    );
    assert!(json.contains("\"device_count\":null,"), "{json}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[cfg(feature = "cuda")]
#[test]
fn a_bad_nccl_library_is_named_in_the_reason() {
    let json = child(&[("DTCOMM_NCCL_LIBRARY", "/nonexistent/libnccl.so.2")]);
    println!("{json}");
    assert!(
        json.contains(
            "\"nccl\":{\"found\":false,\"path\":null,\"version\":null,\"source\":null,\
             \"error\":\"DTCOMM_NCCL_LIBRARY=/nonexistent/libnccl.so.2: dlopen failed:"
        ),
        "{json}"
    );
}
